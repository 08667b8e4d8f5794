//! The group-sequential design of adaptive repetitions, and the confidence every interval of a
//! run is built at.
//!
//! An experiment with `repetitions: 3` and `max_repetitions: 10` looks at its data while it
//! runs: a cell whose interval is still wide, or whose claim's interval straddles its band's
//! edge, gets more repetitions. Looking again and again at the same test with the same 95%
//! critical value inflates its error rates: with the true ratio on a band's edge and a look
//! after every repetition from 3 to 10, a 95% interval's verdict is wrong about twice as
//! often as it says (the simulation in this module's tests measures it).
//!
//! echolab therefore plans its looks and spends its error over them (Jennison & Turnbull,
//! *Group Sequential Methods with Applications to Clinical Trials*, 2000, ch. 2 and 9):
//!
//! - **Planned looks** ([`Design`]): at the minimum, at the midpoint and at the maximum
//!   (`3, 7, 10` for 3 to 10; two looks when the maximum is the minimum plus one; one, a
//!   fixed n, when they are equal). Between looks a continuing cell runs without being
//!   judged.
//! - **Pocock's boundary** ([`Confidence::pocock`]): the same nominal level at every look,
//!   chosen so that the chance of *any* look's interval missing the truth is 5%: the
//!   two-sided normal critical value `c_P(K)` for `K` looks is 2.178 (K = 2) and 2.289
//!   (K = 3) instead of 1.960 (J&T Table 2.1), a nominal 2.94% or 2.21% per look. With
//!   Student's t at each look's degrees of freedom this is J&T's "significance level
//!   approach" (§3.8) for an unknown variance.
//! - **Repeated confidence intervals** (J&T ch. 9): every interval of a run with more than
//!   one planned look is built at that per-look level. Because they cover the truth at all
//!   looks at once with probability 95%, the interval at whichever look a cell stopped
//!   covers with at least 95% whatever made it stop, and a verdict read from it keeps its
//!   error rate. Reports call them "95% repeated CI".
//!
//! Pocock rather than O'Brien–Fleming: with 3 repetitions (2 degrees of freedom) at the first
//! look, O'Brien–Fleming's first boundary (3.471 on the normal scale) is a t critical value
//! of about 30, so no cell could ever stop early and the design would be a fixed n at the
//! maximum; Pocock's costs the final look a 17% wider interval instead.

use statrs::distribution::{ContinuousCDF, Normal, StudentsT};

/// Pocock's two-sided critical values `c_P(K)` on the normal scale for `K` = 1 to 5 equally
/// spaced looks at an overall error of 5% (Jennison & Turnbull 2000, Table 2.1).
const POCOCK_05: [f64; 5] = [1.960, 2.178, 2.289, 2.361, 2.413];

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
pub(crate) const Z_975: f64 = 1.960;

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

/// The confidence every interval of one run is built at.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Confidence {
    /// The two-sided error of each interval: 0.05 for a fixed n; Pocock's nominal per-look
    /// level for a sequential design.
    pub alpha: f64,
    /// The planned looks the level is spent over; 1 for a fixed n.
    pub looks: usize,
}

impl Confidence {
    /// A fixed number of repetitions: plain 95% intervals.
    pub const FIXED_95: Self = Self {
        alpha: 0.05,
        looks: 1,
    };

    /// Pocock's per-look level for `looks` planned looks (1 to 5; more are taken as 5),
    /// `2 · (1 − Φ(c_P(K)))`.
    pub fn pocock(looks: usize) -> Self {
        let k = looks.clamp(1, POCOCK_05.len());
        if k == 1 {
            return Self::FIXED_95;
        }
        let normal = Normal::standard();
        Self {
            alpha: 2.0 * (1.0 - normal.cdf(POCOCK_05[k - 1])),
            looks: k,
        }
    }

    /// The two-sided critical value of Student's t with `df` degrees of freedom at this level;
    /// `None` for `df == 0`. At the fixed 95% level it is the table of
    /// [`t_975`], so a fixed-n report is unchanged.
    pub fn t(&self, df: u64) -> Option<f64> {
        if self.looks == 1 {
            return t_975(df);
        }
        if df == 0 {
            return None;
        }
        let t = StudentsT::new(0.0, 1.0, df as f64).ok()?;
        Some(t.inverse_cdf(1.0 - self.alpha / 2.0))
    }

    /// The lower and upper percentiles of a bootstrap interval at this level.
    pub fn percentiles(&self) -> (f64, f64) {
        (self.alpha / 2.0, 1.0 - self.alpha / 2.0)
    }

    /// What an interval at this level is called in a report: `"95% CI"`, or
    /// `"95% repeated CI"` for a sequential design.
    pub fn label(&self) -> &'static str {
        if self.looks == 1 {
            "95% CI"
        } else {
            "95% repeated CI"
        }
    }

    /// One sentence on the level, for the report's notes.
    pub fn describe(&self, design: &Design) -> String {
        if self.looks == 1 {
            return format!(
                "a fixed {} repetitions: every interval is a plain 95% interval",
                design.looks[0]
            );
        }
        format!(
            "looks planned after {} repetitions (a group-sequential design, Pocock's boundary): \
             every interval is a 95% repeated confidence interval, built at {:.2}% per look, so \
             that stopping at any look keeps 95% coverage (Jennison & Turnbull 2000, ch. 9)",
            design
                .looks
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            (1.0 - self.alpha) * 100.0
        )
    }
}

/// The planned looks of adaptive repetitions, in repetitions (attempts) of a cell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Design {
    /// Ascending; the first is the minimum, the last the maximum.
    pub looks: Vec<u64>,
}

impl Design {
    /// The looks for `min` to `max` repetitions (see the module doc). `min` of 0 is taken as
    /// 1 and `max` below `min` as `min`.
    pub fn new(min: u64, max: u64) -> Self {
        let min = min.max(1);
        let max = max.max(min);
        let mut looks = vec![min];
        // Three looks at most: each look widens every interval, and a look at the midpoint
        // already lets a cell stop halfway.
        if max > min + 1 {
            looks.push(min + (max - min).div_ceil(2));
        }
        if max > min {
            looks.push(max);
        }
        Self { looks }
    }

    /// The design of `exp`'s repetitions.
    pub fn of(exp: &echolab_core::experiment::Experiment) -> Self {
        Self::new(exp.repetitions, exp.max_repetitions())
    }

    /// The confidence every interval of a run of this design is built at.
    pub fn confidence(&self) -> Confidence {
        Confidence::pocock(self.looks.len())
    }

    /// Whether a cell that has made `attempts` repetitions is at a look: judged now, rather
    /// than run on to the next look.
    pub fn is_look(&self, attempts: u64) -> bool {
        self.looks.contains(&attempts)
    }

    /// The maximum number of repetitions.
    pub fn max(&self) -> u64 {
        *self.looks.last().expect("a design has at least one look")
    }
}

#[cfg(test)]
#[path = "sequential_tests.rs"]
mod tests;
