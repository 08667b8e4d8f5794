//! Statistics over the repetitions of one cell: median, range, mean, sample standard
//! deviation, coefficient of variation, the 95% confidence interval of the mean (Student's t),
//! and the 95% confidence interval of a ratio of two means (Fieller's theorem).
//!
//! The seeds run every cell 3 times (seed 000 §5) and publish means; with so few repetitions
//! the normal quantile 1.96 would understate the interval by a factor of 1.6 (t = 3.182 at
//! df = 2), hence Student's t throughout.

/// A cell is called noisy when the coefficient of variation of its repetitions is above this
/// (10%, issue 6).
pub const NOISY_CV: f64 = 0.10;

/// Two-sided 95% critical values of Student's t, `t(0.975, df)`, for the tabulated degrees of
/// freedom. Source: NIST/SEMATECH e-Handbook of Statistical Methods, §1.3.6.7.2 "Critical
/// Values of the Student's t Distribution" (column 0.975).
const T_975: [(u64, f64); 36] = [
    (1, 12.706),
    (2, 4.303),
    (3, 3.182),
    (4, 2.776),
    (5, 2.571),
    (6, 2.447),
    (7, 2.365),
    (8, 2.306),
    (9, 2.262),
    (10, 2.228),
    (11, 2.201),
    (12, 2.179),
    (13, 2.160),
    (14, 2.145),
    (15, 2.131),
    (16, 2.120),
    (17, 2.110),
    (18, 2.101),
    (19, 2.093),
    (20, 2.086),
    (21, 2.080),
    (22, 2.074),
    (23, 2.069),
    (24, 2.064),
    (25, 2.060),
    (26, 2.056),
    (27, 2.052),
    (28, 2.048),
    (29, 2.045),
    (30, 2.042),
    (40, 2.021),
    (50, 2.009),
    (60, 2.000),
    (80, 1.990),
    (100, 1.984),
    (120, 1.980),
];

/// The normal quantile used beyond the table (df → ∞).
const Z_975: f64 = 1.960;

/// `t(0.975, df)`: the two-sided 95% critical value of Student's t with `df` degrees of
/// freedom. Between tabulated rows the value of the next lower tabulated df is used, which is
/// the larger t, so intervals err on the wide side. `None` for `df == 0`.
pub fn t_975(df: u64) -> Option<f64> {
    if df == 0 {
        return None;
    }
    if df > 120 {
        return Some(Z_975);
    }
    T_975.iter().rev().find(|(d, _)| *d <= df).map(|(_, t)| *t)
}

/// An interval `[low, high]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    /// Lower bound.
    pub low: f64,
    /// Upper bound.
    pub high: f64,
}

impl Interval {
    /// Whether `x` lies in the closed interval.
    pub fn contains(&self, x: f64) -> bool {
        self.low <= x && x <= self.high
    }

    /// Whether the interval lies entirely inside `outer`.
    pub fn within(&self, outer: Interval) -> bool {
        outer.low <= self.low && self.high <= outer.high
    }
}

/// Summary of the values of one metric over the repetitions of one cell.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// Number of values.
    pub n: usize,
    /// Median (the mean of the two middle values for even `n`).
    pub median: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// Arithmetic mean.
    pub mean: f64,
    /// Sample standard deviation (divisor `n - 1`); 0 for `n == 1`.
    pub stdev: f64,
    /// 95% confidence interval of the mean, `mean ± t(0.975, n-1) · stdev / √n`; `None` for
    /// `n < 2`.
    pub ci95: Option<Interval>,
}

impl Summary {
    /// Summarises `values`; `None` when there are none. Non-finite values are the caller's
    /// problem: every metric this crate extracts is finite.
    pub fn of(values: &[f64]) -> Option<Self> {
        if values.is_empty() {
            return None;
        }
        let n = values.len();
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        };
        let mean = values.iter().sum::<f64>() / n as f64;
        let stdev = if n < 2 {
            0.0
        } else {
            (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
        };
        let ci95 = t_975(n as u64 - 1).map(|t| {
            let half = t * stdev / (n as f64).sqrt();
            Interval {
                low: mean - half,
                high: mean + half,
            }
        });
        Some(Self {
            n,
            median,
            min: sorted[0],
            max: sorted[n - 1],
            mean,
            stdev,
            ci95,
        })
    }

    /// Range, `max - min` (the seeds' 极差).
    pub fn range(&self) -> f64 {
        self.max - self.min
    }

    /// Coefficient of variation, `stdev / |mean|`; `None` for a zero mean or `n < 2`.
    pub fn cv(&self) -> Option<f64> {
        (self.n >= 2 && self.mean != 0.0).then(|| self.stdev / self.mean.abs())
    }

    /// Whether the coefficient of variation is above [`NOISY_CV`].
    pub fn is_noisy(&self) -> bool {
        self.cv().is_some_and(|cv| cv > NOISY_CV)
    }

    /// Variance of the mean, `stdev² / n`.
    fn var_of_mean(&self) -> f64 {
        self.stdev.powi(2) / self.n as f64
    }
}

/// The ratio of two means with its 95% confidence interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ratio {
    /// `mean(numerator) / mean(denominator)`.
    pub value: f64,
    /// Fieller's 95% interval; `None` when either side has fewer than 2 values, or when the
    /// denominator's mean is not distinguishable from 0 (the Fieller set is then unbounded).
    pub ci95: Option<Interval>,
}

/// Ratio of the means of two independent samples, with Fieller's 95% confidence interval.
///
/// Method: Fieller, E. C. (1954), "Some problems in interval estimation", J. R. Stat. Soc. B
/// 16(2):175–185. The interval is the set of θ with
/// `(x̄ - θ ȳ)² ≤ t² (v_x + θ² v_y)`, where `v = s² / n` is the variance of each mean; it is
/// bounded exactly when `ȳ² > t² v_y`. The degrees of freedom are `min(n_x, n_y) - 1`, a
/// conservative bound on the Welch–Satterthwaite degrees of freedom (Welch 1947), so the
/// interval errs on the wide side.
///
/// Returns `None` when the denominator's mean is 0.
pub fn ratio_of_means(numerator: &Summary, denominator: &Summary) -> Option<Ratio> {
    if denominator.mean == 0.0 {
        return None;
    }
    let value = numerator.mean / denominator.mean;
    let df = numerator.n.min(denominator.n) as u64;
    let ci95 = t_975(df.saturating_sub(1)).and_then(|t| {
        let (x, y) = (numerator.mean, denominator.mean);
        let (vx, vy) = (numerator.var_of_mean(), denominator.var_of_mean());
        let t2 = t * t;
        // a θ² − 2bθ + c ≤ 0
        let a = y * y - t2 * vy;
        let b = x * y;
        let c = x * x - t2 * vx;
        if a <= 0.0 {
            return None;
        }
        let disc = b * b - a * c;
        // a > 0 implies disc ≥ 0 up to rounding: disc = t²(x² v_y + y² v_x − t² v_x v_y)
        // = t²(x² v_y + v_x a) ≥ 0.
        let root = disc.max(0.0).sqrt();
        Some(Interval {
            low: (b - root) / a,
            high: (b + root) / a,
        })
    });
    Some(Ratio { value, ci95 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_of_three_repetitions() {
        // Seed 000, ET long: 56094, 49337, 55152 (mean 53528 as the seed states).
        let s = Summary::of(&[56094.0, 49337.0, 55152.0]).unwrap();
        assert_eq!(s.median, 55152.0);
        assert_eq!((s.min, s.max, s.range()), (49337.0, 56094.0, 6757.0));
        assert!((s.mean - 53527.667).abs() < 0.01, "{s:?}");
        // stdev by hand: deviations 2566.33, -4190.67, 1624.33 → sqrt(26 786 240.7 / 2)
        assert!((s.stdev - 3659.66).abs() < 0.05, "{s:?}");
        let ci = s.ci95.unwrap();
        let half = 4.303 * s.stdev / 3f64.sqrt();
        assert!(
            (ci.low - (s.mean - half)).abs() < 1e-6 && (ci.high - (s.mean + half)).abs() < 1e-6
        );
        assert!(!s.is_noisy(), "CV {:?}", s.cv());
    }

    #[test]
    fn even_counts_take_the_middle_pair_and_single_values_have_no_interval() {
        let s = Summary::of(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!(s.median, 2.5);
        let one = Summary::of(&[7.0]).unwrap();
        assert_eq!(
            (one.median, one.stdev, one.ci95, one.cv()),
            (7.0, 0.0, None, None)
        );
        assert!(Summary::of(&[]).is_none());
    }

    #[test]
    fn noisy_is_cv_above_ten_percent() {
        // mean 100, stdev 10 → CV exactly 10%: not noisy; a little more spread is.
        assert!(!Summary::of(&[90.0, 100.0, 110.0]).unwrap().is_noisy());
        assert!(Summary::of(&[89.0, 100.0, 111.0]).unwrap().is_noisy());
    }

    #[test]
    fn t_table_lookups() {
        assert_eq!(t_975(0), None);
        assert_eq!(t_975(2), Some(4.303));
        assert_eq!(
            t_975(35),
            Some(2.042),
            "falls back to the next lower tabulated df"
        );
        assert_eq!(t_975(1000), Some(1.960));
    }

    #[test]
    fn fieller_interval_brackets_the_ratio_and_reduces_to_scaling_without_denominator_noise() {
        let num = Summary::of(&[190.0, 200.0, 210.0]).unwrap();
        let den = Summary::of(&[100.0, 100.0, 100.0]).unwrap();
        let r = ratio_of_means(&num, &den).unwrap();
        assert_eq!(r.value, 2.0);
        let ci = r.ci95.unwrap();
        // No variance in the denominator: the interval is the numerator's CI divided by 100.
        let nci = num.ci95.unwrap();
        assert!(
            (ci.low - nci.low / 100.0).abs() < 1e-9 && (ci.high - nci.high / 100.0).abs() < 1e-9,
            "{ci:?}"
        );

        let noisy_den = Summary::of(&[50.0, 100.0, 150.0]).unwrap();
        let r = ratio_of_means(&num, &noisy_den).unwrap();
        assert!(
            r.ci95.is_none(),
            "a denominator indistinguishable from 0 gives no bounded interval"
        );
        assert!(ratio_of_means(&num, &Summary::of(&[0.0]).unwrap()).is_none());
    }
}
