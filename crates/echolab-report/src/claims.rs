//! The seeds' claims checked: our ratio beside the seed's, with a verdict that can go either
//! way.
//!
//! Our ratio is the ratio of the means over repetitions (the seeds' ratios are ratios of
//! means too, e.g. seed 000 §6.1: 53528 / 24915 = 2.15×), with Fieller's 95% interval
//! ([`crate::stats::ratio_of_means`]). The rule, stated in the report's footnote as
//! [`RULE`]:
//!
//! - **not reproduced**: our interval excludes the seed's ratio;
//! - **reproduced**: our interval contains the seed's ratio and resolves what the seed
//!   claims: for an effect (seed ratio outside the no-effect band 1/1.1–1.1) the interval
//!   excludes 1; for no effect (seed ratio inside the band) the interval lies inside the band;
//! - **inconclusive**: our interval contains the seed's ratio but does not resolve the claim
//!   (it overlaps both the seed's ratio and 1, or sticks out of the band), or no interval
//!   exists (fewer than 2 repetitions, or a denominator indistinguishable from 0);
//! - **not checked**: a cell of the claim has no data (missing or failed), or a selector does
//!   not name exactly one cell.

use echolab_core::experiment::{CellSelector, ReferenceClaim};

use crate::dataset::Dataset;
use crate::format;
use crate::metrics;
use crate::stats::{ratio_of_means, Interval, Ratio};

/// Ratios within this band count as "no difference" (±10%, the same tolerance as the
/// noisy-cell and Little's-law flags).
pub const NO_EFFECT_BAND: Interval = Interval {
    low: 1.0 / 1.1,
    high: 1.1,
};

/// The footnote that states the rule.
pub const RULE: &str = "Claims: ours is the ratio of the means over repetitions (as the seeds compute theirs), with \
Fieller's 95% confidence interval (Fieller 1954; df = min(n)−1). **Not reproduced**: our interval excludes the seed's \
ratio. **Reproduced**: our interval contains the seed's ratio and resolves the claim: it excludes 1 when the seed \
claims an effect, or lies within 0.91–1.10 when the seed claims none (seed ratio within 0.91–1.10). \
**Inconclusive**: our interval contains the seed's ratio but also 1 (or leaves the no-effect band), or no interval \
exists (fewer than 2 repetitions, or a denominator indistinguishable from 0). **Not checked**: a cell has no data.";

/// The outcome of checking one claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// See the module doc.
    Reproduced,
    /// See the module doc.
    NotReproduced,
    /// See the module doc.
    Inconclusive,
    /// See the module doc.
    NotChecked,
}

impl Verdict {
    /// The word used in the report.
    pub fn word(self) -> &'static str {
        match self {
            Verdict::Reproduced => "reproduced",
            Verdict::NotReproduced => "not reproduced",
            Verdict::Inconclusive => "inconclusive",
            Verdict::NotChecked => "not checked",
        }
    }
}

/// A claim with our figure and the verdict.
#[derive(Debug, Clone)]
pub struct ClaimCheck {
    /// The claim as the experiment states it.
    pub claim: ReferenceClaim,
    /// Our ratio, when both cells have data.
    pub ours: Option<Ratio>,
    /// The verdict.
    pub verdict: Verdict,
    /// One line: why.
    pub why: String,
}

impl ClaimCheck {
    /// `seed 2.15×, here 2.03× (95% CI 1.80–2.30×): reproduced — <why>`.
    pub fn line(&self) -> String {
        let here = self
            .ours
            .as_ref()
            .map(format::ratio)
            .unwrap_or_else(|| "—".into());
        format!(
            "{}: seed {}, here {here}: **{}**: {}",
            self.claim.name,
            format::times(self.claim.seed_ratio),
            self.verdict.word(),
            self.why
        )
    }
}

/// Applies the rule to a seed ratio and our ratio. Returns the verdict and why.
pub fn judge(seed_ratio: f64, ours: &Ratio) -> (Verdict, String) {
    let Some(ci) = ours.ci95 else {
        return (Verdict::Inconclusive, "no confidence interval (fewer than 2 repetitions, or a denominator indistinguishable from 0)".into());
    };
    let ci_text = format!("{:.2}–{:.2}×", ci.low, ci.high);
    if !ci.contains(seed_ratio) {
        let side = |x: f64| x.partial_cmp(&1.0);
        let direction = if ci.contains(1.0) {
            "our interval includes no difference"
        } else if side(ci.low) == side(seed_ratio) {
            if ci.high < seed_ratio {
                "same direction, smaller"
            } else {
                "same direction, larger"
            }
        } else {
            "opposite direction"
        };
        return (
            Verdict::NotReproduced,
            format!("our 95% CI {ci_text} excludes the seed's ratio ({direction})"),
        );
    }
    if NO_EFFECT_BAND.contains(seed_ratio) {
        if ci.within(NO_EFFECT_BAND) {
            (
                Verdict::Reproduced,
                format!("no difference, as the seed: our 95% CI {ci_text} lies within 0.91–1.10×"),
            )
        } else {
            (Verdict::Inconclusive, format!("our 95% CI {ci_text} contains the seed's ratio but is too wide to show no difference"))
        }
    } else if ci.contains(1.0) {
        (
            Verdict::Inconclusive,
            format!("our 95% CI {ci_text} contains the seed's ratio and also 1 (no difference)"),
        )
    } else {
        (
            Verdict::Reproduced,
            format!("our 95% CI {ci_text} contains the seed's ratio and excludes 1"),
        )
    }
}

/// The one cell `selector` names, or why not.
fn one_cell<'d, 'a>(
    ds: &'d Dataset<'a>,
    selector: &CellSelector,
    side: &str,
) -> Result<&'d crate::dataset::CellData<'a>, String> {
    match ds.select(selector).as_slice() {
        [one] => Ok(one),
        [] => Err(format!("the {side} selector matches no cell")),
        many => Err(format!(
            "the {side} selector matches {} cells ({}); name conns or mode",
            many.len(),
            many.iter()
                .map(|c| c.id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// Checks `claim` against the data.
pub fn check(ds: &Dataset<'_>, claim: &ReferenceClaim) -> ClaimCheck {
    let not_checked = |why: String| ClaimCheck {
        claim: claim.clone(),
        ours: None,
        verdict: Verdict::NotChecked,
        why,
    };
    if !metrics::is_known(&claim.metric) {
        return not_checked(format!("unknown metric {:?}", claim.metric));
    }
    let cells = one_cell(ds, &claim.numerator, "numerator")
        .and_then(|n| Ok((n, one_cell(ds, &claim.denominator, "denominator")?)));
    let (num, den) = match cells {
        Ok(pair) => pair,
        Err(why) => return not_checked(why),
    };
    let summaries = (num.summary(&claim.metric), den.summary(&claim.metric));
    let (Some(ns), Some(dsum)) = summaries else {
        let which = if summaries.0.is_none() { num } else { den };
        let absence = which
            .absence()
            .unwrap_or_else(|| format!("no {} values", claim.metric));
        return not_checked(format!("{}: {absence}", which.id));
    };
    let Some(ours) = ratio_of_means(&ns, &dsum) else {
        return not_checked(format!("{}: mean {} is 0", den.id, claim.metric));
    };
    let (verdict, why) = judge(claim.seed_ratio, &ours);
    ClaimCheck {
        claim: claim.clone(),
        ours: Some(ours),
        verdict,
        why,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ratio(value: f64, low: f64, high: f64) -> Ratio {
        Ratio {
            value,
            ci95: Some(Interval { low, high }),
        }
    }

    #[test]
    fn each_verdict_is_reachable() {
        assert_eq!(judge(2.15, &ratio(2.0, 1.8, 2.3)).0, Verdict::Reproduced);
        assert_eq!(judge(2.15, &ratio(1.4, 1.3, 1.5)).0, Verdict::NotReproduced);
        assert!(judge(2.15, &ratio(1.4, 1.3, 1.5))
            .1
            .contains("same direction, smaller"));
        assert!(judge(2.15, &ratio(0.5, 0.4, 0.6))
            .1
            .contains("opposite direction"));
        assert_eq!(judge(2.15, &ratio(1.5, 0.8, 2.5)).0, Verdict::Inconclusive);
        assert_eq!(
            judge(
                2.15,
                &Ratio {
                    value: 2.0,
                    ci95: None
                }
            )
            .0,
            Verdict::Inconclusive
        );
    }

    #[test]
    fn a_no_difference_claim_needs_a_tight_interval() {
        assert_eq!(judge(1.0, &ratio(1.01, 0.95, 1.06)).0, Verdict::Reproduced);
        assert_eq!(judge(1.0, &ratio(1.1, 0.7, 1.5)).0, Verdict::Inconclusive);
        assert_eq!(judge(1.0, &ratio(1.5, 1.3, 1.7)).0, Verdict::NotReproduced);
    }
}
