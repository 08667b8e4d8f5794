//! Statistics over the repetitions of one cell, and the stopping rule of adaptive repetitions.
//!
//! Every metric echolab reports is a quantity that cannot be negative (rates, times, counts,
//! CPU%), so every interval stays inside that domain, by one of three methods ([`Method`]):
//!
//! - **exact**: every repetition gave the same value (system-call counts do): the figure is
//!   that value and its interval has zero width; a ratio of two exact figures is exact.
//! - **log-t** (all values positive): the 95% interval of the geometric mean,
//!   `exp(mean(ln x) ± t(0.975, n−1) · sd(ln x) / √n)`; a ratio of two cells is the ratio of
//!   their geometric means, `exp(d ± t · se)` with `d` the difference of the mean logs, `se`
//!   Welch's standard error and Welch–Satterthwaite degrees of freedom (Welch 1947, rounded
//!   down). Both are positive by construction; a lognormal model is the usual one for
//!   latencies and throughputs, whose spread grows with their size.
//! - **bootstrap** (some values are 0, e.g. a failure count): the percentile bootstrap of the
//!   mean (or of the ratio of means), [`BOOTSTRAP_RESAMPLES`] resamples from a fixed seed so a
//!   report is the same every time it is rendered; a resampled mean lies between the smallest
//!   and the largest value, so the interval does too.
//!
//! An interval is missing only when a side has fewer than 2 repetitions, or (a ratio) when
//! the denominator is 0 in every repetition; [`Summary::no_ci_reason`] and [`Ratio::no_ci`]
//! say which.
//!
//! The seeds run every cell 3 times (seed 000 §5); with so few repetitions the normal quantile
//! 1.96 would understate the interval by a factor of 1.6 (t = 3.182 at df = 2), hence
//! Student's t.

use crate::sequential::Confidence;
use crate::welch::{mean_sd, welch, LogSample};

/// A cell is called noisy when the coefficient of variation of its repetitions is above this
/// (10%).
pub const NOISY_CV: f64 = 0.10;

pub use crate::sequential::t_975;
use crate::sequential::Z_975;

/// An interval `[low, high]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    /// Lower bound.
    pub low: f64,
    /// Upper bound.
    pub high: f64,
}

/// Resamples of the percentile bootstrap.
pub const BOOTSTRAP_RESAMPLES: usize = 4000;

/// How an interval was obtained (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// Every repetition gave the same value; zero-width interval.
    Exact,
    /// Student's t on the logarithms (geometric mean, or ratio of geometric means).
    LogT,
    /// Percentile bootstrap of the mean (or the ratio of means).
    Bootstrap,
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
    /// Arithmetic mean (what the seeds publish).
    pub mean: f64,
    /// Sample standard deviation (divisor `n - 1`); 0 for `n == 1`.
    pub stdev: f64,
    /// The centre the interval is about: the value itself ([`Method::Exact`]), the geometric
    /// mean ([`Method::LogT`]) or the arithmetic mean ([`Method::Bootstrap`]).
    pub centre: f64,
    /// How [`Summary::ci95`] was obtained.
    pub method: Method,
    /// The 95% confidence interval of [`Summary::centre`], inside the quantity's domain;
    /// `None` only for `n < 2` (zero width when exact).
    pub ci95: Option<Interval>,
    /// The values, in the order given.
    pub values: Vec<f64>,
    /// The level [`Summary::ci95`] is built at (a plain 95% interval, or a repeated one in a
    /// sequential design, [`crate::sequential`]).
    pub confidence: Confidence,
}

/// A small deterministic generator (SplitMix64, Steele, Lea & Flood 2014) for the bootstrap:
/// the same data give the same interval on every render; the statistics' simulations in the
/// tests draw from it too.
pub(crate) struct SplitMix(pub(crate) u64);

impl SplitMix {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform draw from [0, 1), 53 bits.
    #[cfg(test)]
    pub(crate) fn uniform(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A standard normal draw (Box–Muller), for the statistics' simulations.
    #[cfg(test)]
    pub(crate) fn next_normal(&mut self) -> f64 {
        let (u, v) = (self.uniform().max(f64::MIN_POSITIVE), self.uniform());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }

    /// `n` log-normal values around `centre` with log-SD `sd`, for the simulations.
    #[cfg(test)]
    pub(crate) fn sample(&mut self, n: usize, centre: f64, sd: f64) -> Vec<f64> {
        (0..n)
            .map(|_| centre * (sd * self.next_normal()).exp())
            .collect()
    }

    /// The mean of `v.len()` values drawn from `v` with replacement.
    fn resampled_mean(&mut self, v: &[f64]) -> f64 {
        let n = v.len();
        (0..n)
            .map(|_| v[(self.next() % n as u64) as usize])
            .sum::<f64>()
            / n as f64
    }
}

/// The percentiles of `stats` (sorted in place) that bound an interval at `confidence` (the
/// 2.5th and 97.5th for a plain 95% interval), nearest rank.
fn percentile_interval(stats: &mut [f64], confidence: Confidence) -> Interval {
    stats.sort_by(f64::total_cmp);
    let at = |q: f64| stats[((q * stats.len() as f64).ceil() as usize).clamp(1, stats.len()) - 1];
    let (low, high) = confidence.percentiles();
    Interval {
        low: at(low),
        high: at(high),
    }
}

const BOOTSTRAP_SEED: u64 = 0x0EC4_01AB;

impl Summary {
    /// Summarises `values` with a plain 95% interval; `None` when there are none. Non-finite
    /// values are the caller's problem: every metric this crate extracts is finite and not
    /// negative.
    pub fn of(values: &[f64]) -> Option<Self> {
        Self::at(values, Confidence::FIXED_95)
    }

    /// Summarises `values` with its interval at `confidence` (see [`Summary::of`]).
    pub fn at(values: &[f64], confidence: Confidence) -> Option<Self> {
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
        let (mean, stdev) = mean_sd(values);
        let (min, max) = (sorted[0], sorted[n - 1]);
        let (method, centre, ci95) = if min == max {
            (
                Method::Exact,
                min,
                (n >= 2).then_some(Interval {
                    low: min,
                    high: max,
                }),
            )
        } else if min > 0.0 {
            let logs: Vec<f64> = values.iter().map(|v| v.ln()).collect();
            let (ml, sl) = mean_sd(&logs);
            let ci = confidence.t(n as u64 - 1).map(|t| {
                let h = t * sl / (n as f64).sqrt();
                Interval {
                    low: (ml - h).exp(),
                    high: (ml + h).exp(),
                }
            });
            (Method::LogT, ml.exp(), ci)
        } else {
            let mut rng = SplitMix(BOOTSTRAP_SEED);
            let mut means: Vec<f64> = (0..BOOTSTRAP_RESAMPLES)
                .map(|_| rng.resampled_mean(values))
                .collect();
            (
                Method::Bootstrap,
                mean,
                Some(percentile_interval(&mut means, confidence)),
            )
        };
        Some(Self {
            n,
            median,
            min,
            max,
            mean,
            stdev,
            centre,
            method,
            ci95,
            values: values.to_vec(),
            confidence,
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

    /// Whether every repetition gave the same value.
    pub fn is_exact(&self) -> bool {
        self.method == Method::Exact
    }

    /// Why there is no interval (`Some` only when [`Summary::ci95`] is `None`).
    pub fn no_ci_reason(&self) -> Option<String> {
        self.ci95
            .is_none()
            .then(|| format!("{} repetition: fewer than 2", self.n))
    }

    /// Relative half-width of the interval, `(high − low) / (2 · centre)`: 0 when exact,
    /// `None` without an interval or with a zero centre.
    pub fn relative_halfwidth(&self) -> Option<f64> {
        let ci = self.ci95?;
        (self.centre > 0.0).then(|| (ci.high - ci.low) / (2.0 * self.centre))
    }
}

/// The ratio of two cells' figures with its 95% confidence interval.
#[derive(Debug, Clone, PartialEq)]
pub struct Ratio {
    /// The point estimate: exact ratio, ratio of geometric means ([`Method::LogT`]) or of
    /// arithmetic means ([`Method::Bootstrap`]).
    pub value: f64,
    /// How the interval was obtained.
    pub method: Method,
    /// The 95% interval, positive; `None` only when a side has fewer than 2 repetitions.
    pub ci95: Option<Interval>,
    /// Why there is no interval, when there is none.
    pub no_ci: Option<String>,
}

/// The ratio `numerator / denominator` of two independent samples, with its 95% interval
/// (methods in the module doc: exact when both sides are exact, log-t when both are
/// positive, bootstrap otherwise).
///
/// # Errors
/// A sentence when no ratio exists: the denominator's mean is 0.
pub fn ratio(numerator: &Summary, denominator: &Summary) -> Result<Ratio, String> {
    if denominator.mean == 0.0 {
        return Err("the denominator is 0 in every repetition".into());
    }
    let (x, y) = (numerator, denominator);
    let few = |s: &Summary, side: &str| {
        (s.n < 2).then(|| format!("the {side} has {} repetition (fewer than 2)", s.n))
    };
    let too_few = few(x, "numerator").or_else(|| few(y, "denominator"));
    if x.is_exact() && y.is_exact() {
        let r = x.centre / y.centre;
        return Ok(Ratio {
            value: r,
            method: Method::Exact,
            ci95: too_few.is_none().then_some(Interval { low: r, high: r }),
            no_ci: too_few,
        });
    }
    let positive = x.min > 0.0 && y.min > 0.0;
    let (method, value) = if positive {
        (Method::LogT, x.centre / y.centre)
    } else {
        (Method::Bootstrap, x.mean / y.mean)
    };
    if too_few.is_some() {
        return Ok(Ratio {
            value,
            method,
            ci95: None,
            no_ci: too_few,
        });
    }
    if positive {
        let (se, df) = welch(&[LogSample::of(&x.values), LogSample::of(&y.values)]);
        let t = x.confidence.t(df).unwrap_or(Z_975);
        let d = value.ln();
        return Ok(Ratio {
            value,
            method,
            ci95: Some(Interval {
                low: (d - t * se).exp(),
                high: (d + t * se).exp(),
            }),
            no_ci: None,
        });
    }
    let mut rng = SplitMix(BOOTSTRAP_SEED);
    let mut ratios = Vec::with_capacity(BOOTSTRAP_RESAMPLES);
    let mut zero = 0usize;
    for _ in 0..BOOTSTRAP_RESAMPLES {
        let (mx, my) = (rng.resampled_mean(&x.values), rng.resampled_mean(&y.values));
        if my > 0.0 {
            ratios.push(mx / my);
        } else {
            zero += 1;
        }
    }
    // A resample whose denominator is 0 has an infinite ratio: it belongs above the top
    // percentile, so more than 2.5% of them leave the interval unbounded above.
    if zero * 40 > BOOTSTRAP_RESAMPLES {
        return Ok(Ratio {
            value,
            method: Method::Bootstrap,
            ci95: None,
            no_ci: Some(format!(
                "the denominator is 0 in {} of {} repetitions, so the interval is unbounded above",
                y.values.iter().filter(|v| **v == 0.0).count(),
                y.n
            )),
        });
    }
    ratios.extend(std::iter::repeat_n(f64::INFINITY, zero));
    Ok(Ratio {
        value,
        method: Method::Bootstrap,
        ci95: Some(percentile_interval(&mut ratios, x.confidence)),
        no_ci: None,
    })
}

/// Where adaptive repetitions of a cell stand (see [`repetition_status`]).
#[derive(Debug, Clone, PartialEq)]
pub enum RepetitionStatus {
    /// Run another repetition.
    Continue,
    /// The relative 95% half-width of the headline metric is within the target: stop.
    Reached {
        /// Relative half-width achieved (a fraction, 0.05 = 5%).
        halfwidth: f64,
    },
    /// `max` repetitions done without reaching the target: stop.
    GaveUp {
        /// Relative half-width achieved, when an interval exists.
        halfwidth: Option<f64>,
        /// Why, in one sentence.
        reason: String,
    },
}

/// The stopping rule of adaptive repetitions (netperf's `-i max,min -I level,width`): after
/// each repetition of a cell, `values` holds its headline metric (see
/// [`crate::metrics::headline_metric`]) from every usable repetition so far.
///
/// - fewer than `min` values: [`RepetitionStatus::Continue`];
/// - the relative half-width of the interval ([`Summary::relative_halfwidth`], the same
///   interval the report prints: a repeated 95% interval of the design `min` to `max`,
///   [`crate::sequential`]) at most `target` (a fraction, 0.05 for 5%):
///   [`RepetitionStatus::Reached`];
/// - otherwise [`RepetitionStatus::Continue`] below `max` values and
///   [`RepetitionStatus::GaveUp`] at `max`.
///
/// `min` and `max` count usable values; the caller also stops when it has made `max`
/// attempts, so that failing runs cannot repeat forever. `min` of 0 is taken as 1, and `max`
/// below `min` as `min`.
pub fn repetition_status(values: &[f64], min: u64, max: u64, target: f64) -> RepetitionStatus {
    let min = min.max(1);
    let max = max.max(min);
    let n = values.len() as u64;
    if n < min {
        return RepetitionStatus::Continue;
    }
    if let Some(bad) = values.iter().find(|v| !v.is_finite() || **v < 0.0) {
        return RepetitionStatus::GaveUp {
            halfwidth: None,
            reason: format!("a value ({bad}) is not a finite, non-negative number"),
        };
    }
    let confidence = crate::sequential::Design::new(min, max).confidence();
    let s = Summary::at(values, confidence).expect("n >= min >= 1");
    let halfwidth = s.relative_halfwidth();
    match halfwidth {
        Some(h) if h <= target => return RepetitionStatus::Reached { halfwidth: h },
        _ if n < max => return RepetitionStatus::Continue,
        _ => {}
    }
    let reason = match halfwidth {
        Some(h) => format!(
            "{max} repetitions (the maximum) left the half-width at {:.1}%, above the {:.1}% target",
            h * 100.0,
            target * 100.0
        ),
        None if s.n < 2 => format!("{max} repetition (the maximum) gives no interval"),
        None => "the mean is 0, so a relative half-width does not exist".into(),
    };
    RepetitionStatus::GaveUp { halfwidth, reason }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn summary_of_three_repetitions_uses_the_geometric_mean_interval() {
        // Seed 000, ET long: 56094, 49337, 55152 (mean 53528 as the seed states).
        let s = Summary::of(&[56094.0, 49337.0, 55152.0]).unwrap();
        assert_eq!(s.median, 55152.0);
        assert_eq!((s.min, s.max, s.range()), (49337.0, 56094.0, 6757.0));
        assert!((s.mean - 53527.667).abs() < 0.01, "{s:?}");
        assert!((s.stdev - 3659.66).abs() < 0.05, "{s:?}");
        // By hand: ln values 10.93479, 10.80642, 10.91785; mean 10.886354, sd 0.069733;
        // half-width 4.303 · 0.069733 / √3 = 0.173239; exp(10.886354) = 53442.
        assert_eq!(s.method, Method::LogT);
        assert!(close(s.centre, 53442.0, 1.0), "{s:?}");
        let ci = s.ci95.unwrap();
        assert!(close(ci.low, 53442.0 * (-0.173239f64).exp(), 3.0), "{ci:?}");
        assert!(close(ci.high, 53442.0 * 0.173239f64.exp(), 3.0), "{ci:?}");
        assert!(!s.is_noisy(), "CV {:?}", s.cv());
    }

    #[test]
    fn intervals_never_leave_the_domain() {
        // Seed 000's ET short QPS, where the t interval of the mean went negative on a noisy
        // first repetition: 14900, 30824, 29020. Mean 24915, sd 8714 → mean ± 4.303·5031
        // = 3265..46565, and with 2 values far worse; the log interval stays positive.
        for v in [
            &[14900.0, 30824.0, 29020.0][..],
            &[1000.0, 90000.0],
            &[1.0, 2.0, 400.0],
        ] {
            let s = Summary::of(v).unwrap();
            let ci = s.ci95.unwrap();
            assert!(
                ci.low > 0.0 && ci.low <= s.centre && s.centre <= ci.high,
                "{s:?}"
            );
        }
        // With zeros: the bootstrap of the mean stays within [min, max].
        let s = Summary::of(&[0.0, 0.0, 3.0]).unwrap();
        assert_eq!(s.method, Method::Bootstrap);
        let ci = s.ci95.unwrap();
        assert!(
            ci.low >= 0.0 && ci.high <= 3.0 && ci.low <= 1.0 && 1.0 <= ci.high,
            "{ci:?}"
        );
    }

    #[test]
    fn exact_counts_are_exact() {
        let s = Summary::of(&[1000.0, 1000.0, 1000.0]).unwrap();
        assert_eq!(s.method, Method::Exact);
        assert_eq!(
            s.ci95,
            Some(Interval {
                low: 1000.0,
                high: 1000.0
            })
        );
        let long = Summary::of(&[100.0, 100.0, 100.0]).unwrap();
        let r = ratio(&long, &s).unwrap();
        assert_eq!((r.value, r.method), (0.1, Method::Exact));
        assert_eq!(
            r.ci95,
            Some(Interval {
                low: 0.1,
                high: 0.1
            })
        );
        // One exact side and one varying side: log-t, whose spread is the varying side's.
        let varying = Summary::of(&[90.0, 100.0, 110.0]).unwrap();
        assert_eq!(ratio(&varying, &s).unwrap().method, Method::LogT);
    }

    #[test]
    fn even_counts_take_the_middle_pair_and_single_values_say_why_there_is_no_interval() {
        let s = Summary::of(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!(s.median, 2.5);
        let one = Summary::of(&[7.0]).unwrap();
        assert_eq!(
            (one.median, one.stdev, one.ci95, one.cv()),
            (7.0, 0.0, None, None)
        );
        assert!(one.no_ci_reason().unwrap().contains("fewer than 2"));
        assert!(Summary::of(&[]).is_none());
        let r = ratio(&one, &Summary::of(&[2.0, 3.0]).unwrap()).unwrap();
        assert!(r.ci95.is_none());
        assert!(r.no_ci.unwrap().contains("numerator has 1 repetition"));
    }

    #[test]
    fn noisy_is_cv_above_ten_percent() {
        assert!(!Summary::of(&[90.0, 100.0, 110.0]).unwrap().is_noisy());
        assert!(Summary::of(&[89.0, 100.0, 111.0]).unwrap().is_noisy());
    }

    #[test]
    fn the_bootstrap_generator_is_splitmix64() {
        // The reference implementation's outputs for state 1234567 (Vigna, splitmix64.c).
        let mut g = SplitMix(1_234_567);
        let got: Vec<u64> = (0..5).map(|_| g.next()).collect();
        assert_eq!(
            got,
            [
                6_457_827_717_110_365_317,
                3_203_168_211_198_807_973,
                9_817_491_932_198_370_423,
                4_593_380_528_125_082_431,
                16_408_922_859_458_223_821
            ]
        );
    }

    #[test]
    fn relative_halfwidth_is_zero_when_exact_and_absent_at_a_zero_centre() {
        let exact = Summary::of(&[4.0, 4.0, 4.0]).unwrap();
        assert_eq!(exact.relative_halfwidth(), Some(0.0));
        // All zeros: an exact interval, but no width relative to nothing.
        let zeros = Summary::of(&[0.0, 0.0, 0.0]).unwrap();
        assert!(zeros.ci95.is_some());
        assert_eq!(zeros.relative_halfwidth(), None);
    }

    #[test]
    fn repetitions_give_up_on_bad_values_and_say_why_without_an_interval() {
        let gave_up = |values: &[f64], max: u64| match repetition_status(values, 2, max, 0.05) {
            RepetitionStatus::GaveUp { reason, .. } => Some(reason),
            _ => None,
        };
        // A negative or non-finite value ends the cell, naming the value.
        assert!(gave_up(&[1.0, -1.0], 10).unwrap().contains("(-1)"));
        assert!(gave_up(&[1.0, f64::NAN], 10).unwrap().contains("(NaN)"));
        assert!(gave_up(&[1.0, f64::INFINITY], 10)
            .unwrap()
            .contains("(inf)"));
        // 0 is a value like any other (a cell with no failures counts 0 failures).
        assert!(matches!(
            repetition_status(&[0.0, 2.0, 2.0], 2, 10, 0.05),
            RepetitionStatus::Continue
        ));
        // At the maximum without an interval: a zero mean, or a single repetition.
        let zero = gave_up(&[0.0, 0.0], 2).unwrap();
        assert!(zero.contains("the mean is 0"), "{zero}");
        let one = match repetition_status(&[3.0], 1, 1, 0.05) {
            RepetitionStatus::GaveUp { reason, .. } => reason,
            other => panic!("{other:?}"),
        };
        assert!(
            one.contains("1 repetition (the maximum) gives no interval"),
            "{one}"
        );
    }

    #[test]
    fn percentile_interval_takes_nearest_ranks() {
        // 200 values 1..=200 in reverse: the 2.5th percentile is rank ceil(5) = 5, the 97.5th
        // rank ceil(195) = 195.
        let mut v: Vec<f64> = (1..=200).rev().map(f64::from).collect();
        let i = percentile_interval(&mut v, Confidence::FIXED_95);
        assert_eq!((i.low, i.high), (5.0, 195.0));
        // One value: both ends are it.
        assert_eq!(
            percentile_interval(&mut [7.0], Confidence::FIXED_95),
            Interval {
                low: 7.0,
                high: 7.0
            }
        );
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
        // The table's last row still counts; only above it does the normal value take over.
        assert_eq!((t_975(120), t_975(121)), (Some(1.980), Some(1.960)));
    }

    #[test]
    fn ratio_of_geometric_means_golden() {
        // Numerator 100, 200 (ln 4.60517, 5.29832: mean 4.951744, s² 0.240227);
        // denominator 50, 50, 50 (exact, no spread). d = ln(141.421/50) = 1.039721;
        // se = √(0.240227/2) = 0.346574; df = 1 (only the numerator's term), t = 12.706;
        // interval exp(1.039721 ± 4.403570) = 0.034602 .. 231.20.
        let r = ratio(
            &Summary::of(&[100.0, 200.0]).unwrap(),
            &Summary::of(&[50.0, 50.0, 50.0]).unwrap(),
        )
        .unwrap();
        assert_eq!(r.method, Method::LogT);
        assert!(close(r.value, 2.828427, 1e-5), "{r:?}");
        let ci = r.ci95.unwrap();
        assert!(
            close(ci.low, 0.034602, 1e-5) && close(ci.high, 231.20, 0.01),
            "{ci:?}"
        );

        // Both sides spread, equal n = 3: numerator ln = {ln 90, ln 100, ln 110}, denominator
        // ln = {ln 45, ln 50, ln 55}: same sd of logs, s = 0.100377 (by hand), so
        // se = √(2 · s²/3) = 0.081958; Welch df = (2a)²/(2a²/2) = 4, t = 2.776;
        // ratio of geometric means exactly 2; interval 2·exp(±0.227515) = 1.5930..2.5110.
        let r = ratio(
            &Summary::of(&[90.0, 100.0, 110.0]).unwrap(),
            &Summary::of(&[45.0, 50.0, 55.0]).unwrap(),
        )
        .unwrap();
        assert!(close(r.value, 2.0, 1e-9), "{r:?}");
        let ci = r.ci95.unwrap();
        assert!(
            close(ci.low, 1.5930, 1e-4) && close(ci.high, 2.5110, 1e-4),
            "{ci:?}"
        );
    }

    #[test]
    fn ratios_with_zeros_use_the_bootstrap_and_say_when_unbounded() {
        let r = ratio(
            &Summary::of(&[0.0, 2.0, 4.0]).unwrap(),
            &Summary::of(&[1.0, 1.0, 2.0]).unwrap(),
        )
        .unwrap();
        assert_eq!(r.method, Method::Bootstrap);
        // No logarithm of 0: the point estimate is mean(0, 2, 4) / mean(1, 1, 2) = 2 / (4/3).
        assert!((r.value - 1.5).abs() < 1e-12, "{r:?}");
        let ci = r.ci95.unwrap();
        // Resampled means of the numerator lie in 0..4 and of the denominator in 1..2.
        assert!(
            ci.low >= 0.0 && ci.high <= 4.0 && ci.low < 1.5 && 1.5 < ci.high,
            "{ci:?}"
        );
        let r = ratio(
            &Summary::of(&[1.0, 2.0, 3.0]).unwrap(),
            &Summary::of(&[0.0, 0.0, 6.0]).unwrap(),
        )
        .unwrap();
        // P(all three draws are 0) = 8/27 ≈ 30% of resamples: unbounded.
        assert!(r.ci95.is_none() && r.no_ci.unwrap().contains("unbounded"));
        assert!(ratio(
            &Summary::of(&[1.0]).unwrap(),
            &Summary::of(&[0.0, 0.0]).unwrap()
        )
        .is_err());
    }

    #[test]
    fn stopping_rule_golden() {
        // Below the minimum: continue, whatever the spread.
        assert_eq!(
            repetition_status(&[100.0, 100.0], 3, 10, 0.05),
            RepetitionStatus::Continue
        );
        // 3 identical values: exact, half-width 0, reached.
        assert_eq!(
            repetition_status(&[100.0, 100.0, 100.0], 3, 10, 0.05),
            RepetitionStatus::Reached { halfwidth: 0.0 }
        );
        // 99, 100, 101 in a design of 3 to 10 (3 looks, Pocock's 2.21% per look): sd of logs
        // 0.0100005; t(1 − 0.01104, 2) = 0.97792·√(2 / (1 − 0.97792²)) = 6.6178 (Student's t
        // with 2 df in closed form); half-width in logs 6.6178·0.0100005/√3 = 0.038210,
        // relative half-width sinh(0.038210) = 3.822% ≤ 5%: reached.
        match repetition_status(&[99.0, 100.0, 101.0], 3, 10, 0.05) {
            RepetitionStatus::Reached { halfwidth } => {
                assert!(close(halfwidth, 0.03822, 5e-5), "{halfwidth}")
            }
            other => panic!("{other:?}"),
        }
        // A fixed 3 (one look) keeps the plain 95% interval: 4.303·0.0100005/√3 = 0.024845,
        // sinh = 2.485%.
        match repetition_status(&[99.0, 100.0, 101.0], 3, 3, 0.05) {
            RepetitionStatus::Reached { halfwidth } => {
                assert!(close(halfwidth, 0.02485, 5e-5), "{halfwidth}")
            }
            other => panic!("{other:?}"),
        }
        // 90, 100, 110: log half-width 4.303·0.100377/√3 = 0.249371 → sinh = 25.20%: go on
        // below the maximum, give up at it.
        assert_eq!(
            repetition_status(&[90.0, 100.0, 110.0], 3, 4, 0.05),
            RepetitionStatus::Continue
        );
        match repetition_status(&[90.0, 100.0, 110.0], 3, 3, 0.05) {
            RepetitionStatus::GaveUp {
                halfwidth: Some(h),
                reason,
            } => {
                assert!(close(h, 0.25196, 1e-4), "{h}");
                assert!(
                    reason.contains("3 repetitions (the maximum)") && reason.contains("25.2%"),
                    "{reason}"
                );
            }
            other => panic!("{other:?}"),
        }
        // One repetition allowed: no interval, gave up with that reason.
        match repetition_status(&[5.0], 1, 1, 0.05) {
            RepetitionStatus::GaveUp {
                halfwidth: None,
                reason,
            } => assert!(reason.contains("no interval")),
            other => panic!("{other:?}"),
        }
    }
}
