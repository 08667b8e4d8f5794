//! The seeds' claims checked by equivalence: our interval against the claim's band.
//!
//! Each claim (the experiment's `reference.claims`, see
//! [`echolab_core::experiment::ReferenceClaim`]) is about the ratio of one metric between two
//! cells and states a band of ratios that agree with it: a magnitude with a tolerance
//! (2.15× ±15% = 1.83–2.47×), a direction (above 1×) or a shape (below 0.5×). Our ratio is the
//! one the tables print ([`crate::inference::ratio`]: exact, ratio of geometric means with a log-t
//! interval, or bootstrap). The rule, stated in the report as [`RULE`], is the two one-sided
//! tests of equivalence (Schuirmann 1987) read off a 95% interval, extended to one-sided
//! bands:
//!
//! - **reproduced**: our 95% interval lies inside the band (an exact ratio: the value does);
//! - **refuted**: our interval lies wholly outside the band;
//! - **inconclusive**: it straddles an edge of the band, or no interval exists (a side has
//!   fewer than 2 repetitions: the reason is given);
//! - **not comparable here**: the figure is set by the path, not the server — every request
//!   of both cells spends at least half its latency in network round trips (measured RTT ×
//!   round trips per request: 2 for a short connection, connect and echo; 1 for a long one), so
//!   a ratio of latencies or QPS counts round trips; unless the claim's own mechanism is the
//!   path's round trips (a `round-trips` mechanism that explains it), which is then judged;
//! - **not checked**: a cell of the claim has no data, or a selector does not name one cell.
//!
//! A spread claim ([`echolab_core::experiment::ClaimKind::Spread`]: the numerator's values
//! vary more across repetitions than the denominator's) is judged by [`judge_spread`]: a
//! one-sided F-test at 95% on the variances of the logarithms (NIST/SEMATECH e-Handbook of
//! Statistical Methods, §1.3.5.9, "F-Test for Equality of Two Variances"), reproduced when
//! significant in the claimed direction, refuted when significant in the opposite one,
//! inconclusive otherwise. Ours is then the ratio of the two cells' log-SDs.

use echolab_core::experiment::{BenchMode, ClaimBand, ReferenceClaim};
use echolab_core::results::Manifest;

use crate::dataset::{CellData, Dataset};
use crate::format;
use crate::inference::{ratio, Interval, Method, Ratio};
use crate::metrics;
use crate::setting;

/// A request whose path floor (RTT × round trips) is at least this share of its mean latency
/// is set by the path (see the module doc).
pub const PATH_BOUND_SHARE: f64 = 0.5;

/// The footnote that states the rule.
pub const RULE: &str = "Claims: each claim states a band of ratios that agree with it — a magnitude with its tolerance, \
a direction (above or below 1×) or a shape (beyond a bound); the band and where it comes from are in the experiment file. \
Ours is the ratio the tables print (exact when every repetition of both cells gave the same value, otherwise the ratio of \
geometric means with a log-t 95% interval, or a bootstrap interval when a value is 0). **Reproduced**: our 95% interval \
lies inside the band (equivalence, as two one-sided tests). **Refuted**: it lies wholly outside. **Inconclusive**: it \
straddles an edge of the band, or there is no interval (the reason is given). **Not comparable here**: on this profile \
at least half of every request's latency in both cells is network round trips (measured RTT × 2 for a short connection, \
× 1 for a long one), so the ratio reports the path, not the server (a claim whose stated mechanism is those round trips is \
judged there). **Not checked**: a cell has no data. **Spread claims** (the numerator varies more across repetitions than \
the denominator) are judged by a one-sided F-test at 95% on the variances of the logarithms (NIST/SEMATECH e-Handbook \
§1.3.5.9): ours is the ratio of the two cells' log-SDs with its one-sided 95% bounds; reproduced when F = s²(num)/s²(den) \
exceeds F(0.95; n₁−1, n₂−1), refuted when it is below F(0.05; n₁−1, n₂−1), inconclusive otherwise.";

/// The outcome of checking one claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// See the module doc.
    Reproduced,
    /// See the module doc.
    Refuted,
    /// See the module doc.
    Inconclusive,
    /// See the module doc.
    NotComparable,
    /// A magnitude claim judged against the seed's rounds whose own interval is wider than
    /// the band, so that no run could settle it ([`crate::replication`]).
    SeedTooSpread,
    /// See the module doc.
    NotChecked,
}

impl Verdict {
    /// The word used in the report.
    pub fn word(self) -> &'static str {
        match self {
            Verdict::Reproduced => "reproduced",
            Verdict::Refuted => "refuted",
            Verdict::Inconclusive => "inconclusive",
            Verdict::NotComparable => "not comparable here",
            Verdict::SeedTooSpread => "seed too spread to decide",
            Verdict::NotChecked => "not checked",
        }
    }
}

/// A claim with our figure and the verdict.
#[derive(Debug, Clone)]
pub struct ClaimCheck {
    /// The claim as the experiment states it.
    pub claim: ReferenceClaim,
    /// Its band, when well formed.
    pub band: Option<ClaimBand>,
    /// Our ratio, when both cells have data. For a spread claim: the ratio of the cells'
    /// log-SDs (`sqrt(F)`), whose `ci95` holds its two one-sided 95% confidence bounds
    /// (together a 90% interval; see [`spread_ratio`]).
    pub ours: Option<Ratio>,
    /// The verdict.
    pub verdict: Verdict,
    /// One sentence: why.
    pub why: String,
    /// Where the comparison stands (see [`setting::Comparison::sentence`]); empty when the
    /// experiment states no seed setup.
    pub setting: String,
    /// The seed's ratio from its rounds, when the claim was judged against them
    /// ([`crate::replication`]).
    pub seed_rounds: Option<crate::replication::SeedRatio>,
}

impl ClaimCheck {
    /// `name: seed 2.15×, here 2.03× (95% CI 1.80–2.30×); band 1.83–2.47× (magnitude ±15%):
    /// **reproduced**: <why>.` The setting is stated once per report, in the table under the
    /// verdicts ([`crate::setting::table`]), not per claim.
    pub fn line(&self) -> String {
        let here = self.here();
        let seed = match (self.claim.seed_ratio, self.claim.expect) {
            _ if self.seed_rounds.is_some() => format!("seed {}, ", self.seed()),
            (Some(r), Some(e)) => format!(
                "seed {} (the claim's words: {}), ",
                format::times(r),
                format::times(e)
            ),
            (Some(r), None) => format!("seed {}, ", format::times(r)),
            (None, _) => String::new(),
        };
        let band = match &self.band {
            Some(b) => format!("; band {b} ({})", kind_text(&self.claim)),
            None => String::new(),
        };
        format!(
            "{}: {seed}here {here}{band}: **{}**: {}.",
            self.claim.name,
            self.verdict.word(),
            self.why
        )
    }
}

impl ClaimCheck {
    /// The seed's figure as the verdict table prints it: from its rounds with their interval
    /// (`2.25× (95% CI 0.81–6.2×, 3/3 rounds)`), else its published ratio, else `—`.
    pub fn seed(&self) -> String {
        match (&self.seed_rounds, self.claim.seed_ratio) {
            (Some(s), _) => s.text(),
            (None, Some(r)) => format::times(r),
            (None, None) => "—".into(),
        }
    }

    /// Our figure as the verdict table prints it: the ratio with its 95% CI, or for a spread
    /// claim `log-SD ratio 4.6× (one-sided 95% bounds 1.3–17×)`; `—` without one.
    pub fn here(&self) -> String {
        let Some(r) = &self.ours else {
            return "—".into();
        };
        match (self.claim.effective_kind(), r.ci95) {
            (echolab_core::experiment::ClaimKind::Spread, Some(ci)) => format!(
                "log-SD ratio {} (90% CI: one-sided 95% bounds {})",
                format::times(r.value),
                format::ratio_interval(ci)
            ),
            (echolab_core::experiment::ClaimKind::Spread, None) => format!(
                "log-SD ratio {} (no bounds: {})",
                format::times(r.value),
                r.no_ci.as_deref().unwrap_or("no interval")
            ),
            _ => format::ratio(r),
        }
    }
}

/// `magnitude ±15%`, `direction: higher`, `shape`, or `magnitude ±15%, assumed: the file
/// states no kind`.
fn kind_text(claim: &ReferenceClaim) -> String {
    use echolab_core::experiment::{ClaimKind, Direction, LEGACY_TOLERANCE};
    match (claim.kind, claim.effective_kind()) {
        (None, _) => format!(
            "magnitude {}, assumed: the experiment predates claims with a stated band",
            claim.tolerance.unwrap_or(LEGACY_TOLERANCE)
        ),
        (_, ClaimKind::Magnitude) => {
            format!("magnitude {}", claim.tolerance.unwrap_or(LEGACY_TOLERANCE))
        }
        (_, ClaimKind::Direction) => match claim.direction {
            Some(Direction::Lower) => "direction: numerator lower".into(),
            _ => "direction: numerator higher".into(),
        },
        (_, ClaimKind::Shape) => "shape".into(),
        (_, ClaimKind::Spread) => "spread: numerator's log-SD larger, one-sided F-test".into(),
    }
}

/// Whether interval `ci` lies inside `band`.
fn inside(ci: Interval, band: &ClaimBand) -> bool {
    band.contains(ci.low) && band.contains(ci.high)
}

/// Whether no point of `ci` lies in `band`.
fn disjoint(ci: Interval, band: &ClaimBand) -> bool {
    if band.open {
        ci.high <= band.low || ci.low >= band.high
    } else {
        ci.high < band.low || ci.low > band.high
    }
}

/// Applies the band rule to our ratio. Returns the verdict and why (one sentence, no final
/// full stop).
pub fn judge(band: &ClaimBand, ours: &Ratio) -> (Verdict, String) {
    let Some(ci) = ours.ci95 else {
        return (
            Verdict::Inconclusive,
            format!(
                "no interval: {}",
                ours.no_ci.as_deref().unwrap_or("no interval")
            ),
        );
    };
    let what = if ours.method == Method::Exact {
        format!("our exact ratio {}", format::times(ours.value))
    } else {
        format!("our 95% CI {}", format::ratio_interval(ci))
    };
    // An exact ratio is the same in every repetition: a count the experiment's own parameters
    // fix (exp34's rounds per connection), so the verdict checks the counting, not an effect
    // that could have come out otherwise.
    let construction = if ours.method == Method::Exact {
        "; it is the same in every repetition, set by the experiment's parameters, so this checks the counting, not a measured effect"
    } else {
        ""
    };
    if inside(ci, band) {
        (
            Verdict::Reproduced,
            format!("{what} lies inside the band{construction}"),
        )
    } else if disjoint(ci, band) {
        let side = if ci.high <= band.low {
            "below"
        } else {
            "above"
        };
        (
            Verdict::Refuted,
            format!("{what} lies wholly {side} the band"),
        )
    } else if !band.contains(ci.low) && !band.contains(ci.high) {
        (
            Verdict::Inconclusive,
            format!("{what} is wider than the band (it crosses both edges)"),
        )
    } else {
        let edge = if ci.low < band.low || (band.open && ci.low == band.low) {
            "lower"
        } else {
            "upper"
        };
        (
            Verdict::Inconclusive,
            format!("{what} straddles the band's {edge} edge"),
        )
    }
}

pub use crate::spread::{log_sd, spread_ratio, SPREAD_CONFIDENCE};

/// A spread claim's verdict ([`crate::spread::test_spread`]): reproduced when the numerator's
/// spread is significantly wider, refuted when significantly narrower, else inconclusive; with
/// the log-SD ratio and the reason.
///
/// # Errors
/// Fewer than 2 values on a side, or a value that is not positive.
pub fn judge_spread(
    numerator: &[f64],
    denominator: &[f64],
) -> Result<(Ratio, Verdict, String), String> {
    let (ours, outcome, why) = crate::spread::test_spread(numerator, denominator)?;
    let verdict = match outcome {
        crate::spread::SpreadOutcome::NumeratorWider => Verdict::Reproduced,
        crate::spread::SpreadOutcome::NumeratorNarrower => Verdict::Refuted,
        crate::spread::SpreadOutcome::Undecided => Verdict::Inconclusive,
    };
    Ok((ours, verdict, why))
}

/// The one cell `selector` names, or why not.
fn one_cell<'d, 'a>(
    ds: &'d Dataset<'a>,
    selector: &echolab_core::experiment::CellSelector,
    side: &str,
) -> Result<&'d CellData<'a>, String> {
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

/// The measured median RTT of the calibration, µs.
pub fn measured_rtt_us(manifest: &Manifest) -> Option<f64> {
    manifest
        .link
        .calibration
        .as_ref()?
        .rtt_median_us()
        .filter(|v| *v > 0.0)
}

/// Round trips of one request on the path: a short connection's connect handshake and its
/// echo, or a long connection's echo alone.
fn round_trips(mode: BenchMode) -> Option<f64> {
    match mode {
        BenchMode::Short => Some(2.0),
        BenchMode::Long => Some(1.0),
        _ => None,
    }
}

/// Why the claim's ratio is set by the path on this run, or `None` when it is not (see the
/// module doc).
pub fn path_bound(metric: &str, cells: [&CellData<'_>; 2], rtt_us: Option<f64>) -> Option<String> {
    let latency_like = matches!(
        metric,
        metrics::QPS | metrics::P50_US | metrics::P90_US | metrics::P99_US | metrics::MEAN_US
    );
    let rtt = rtt_us?;
    if !latency_like {
        return None;
    }
    let mut parts = Vec::new();
    for c in cells {
        let trips = round_trips(c.cell.mode)?;
        let mean = c.summary(metrics::MEAN_US)?.mean;
        let share = rtt * trips / mean;
        // A NaN share (zero mean latency) is not path-bound either.
        if share.is_nan() || share < PATH_BOUND_SHARE {
            return None;
        }
        parts.push(format!(
            "{}: {trips:.0} × RTT {} µs = {:.0}% of its mean latency {} µs",
            c.id,
            format::num(rtt),
            share * 100.0,
            format::num(mean)
        ));
    }
    Some(format!(
        "the path sets this ratio here ({}), so it counts round trips, not server work",
        parts.join("; ")
    ))
}

/// Checks `claim` against the data of the run `manifest` describes.
pub fn check(ds: &Dataset<'_>, manifest: &Manifest, claim: &ReferenceClaim) -> ClaimCheck {
    let reference = &manifest.experiment.reference;
    let setting = setting::compare(manifest, reference.setup.as_ref(), &[&claim.metric])
        .map(|c| format!("this run {}", c.sentence()))
        .unwrap_or_default();
    let band = claim.band();
    let mut out = ClaimCheck {
        claim: claim.clone(),
        band: band.as_ref().ok().copied(),
        ours: None,
        verdict: Verdict::NotChecked,
        why: String::new(),
        setting,
        seed_rounds: None,
    };
    let not_checked = |mut out: ClaimCheck, why: String| {
        out.why = why;
        out
    };
    let band = match band {
        Ok(b) => b,
        Err(e) => return not_checked(out, format!("the claim's band is not usable: {e}")),
    };
    if !metrics::is_known(&claim.metric) {
        return not_checked(out, format!("unknown metric {:?}", claim.metric));
    }
    let cells = one_cell(ds, &claim.numerator, "numerator")
        .and_then(|n| Ok((n, one_cell(ds, &claim.denominator, "denominator")?)));
    let (num, den) = match cells {
        Ok(pair) => pair,
        Err(why) => return not_checked(out, why),
    };
    let summaries = (num.summary(&claim.metric), den.summary(&claim.metric));
    let (Some(ns), Some(dsum)) = summaries else {
        let which = if summaries.0.is_none() { num } else { den };
        let absence = which
            .absence()
            .unwrap_or_else(|| format!("no {} values", claim.metric));
        return not_checked(out, format!("{}: {absence}", which.id));
    };
    let spread = claim.effective_kind() == echolab_core::experiment::ClaimKind::Spread;
    let judged = if spread {
        match judge_spread(&ns.values, &dsum.values) {
            Ok((r, v, why)) => Some((v, why, r)),
            Err(why) => {
                out.verdict = Verdict::Inconclusive;
                out.why = format!("no spread test: {why}");
                return out;
            }
        }
    } else {
        None
    };
    let ours = match &judged {
        Some((_, _, r)) => r.clone(),
        None => match ratio(&ns, &dsum) {
            Ok(r) => r,
            Err(why) => return not_checked(out, format!("{}: {why}", den.id)),
        },
    };
    out.ours = Some(ours.clone());
    let path = path_bound(&claim.metric, [num, den], measured_rtt_us(manifest));
    // A claim whose stated mechanism is the path's round trips is about the path: where the
    // path sets the ratio, it is judged, not set aside.
    let about_the_path = reference.mechanisms.iter().any(|m| {
        m.kind == echolab_core::experiment::MechanismKind::RoundTrips
            && m.explains.contains(&claim.name)
    });
    if let (Some(why), false) = (&path, about_the_path) {
        out.verdict = Verdict::NotComparable;
        out.why = why.clone();
        return out;
    }
    let replication =
        crate::replication::rounds_of(reference, claim, [num, den]).and_then(|(sn, sd)| {
            let centre = claim.expect.or(claim.seed_ratio)?;
            crate::replication::judge(
                &band,
                centre,
                (&ns.values, &dsum.values),
                (sn, sd),
                ns.confidence,
            )
        });
    let (verdict, why) = match (judged, replication) {
        (Some((v, why, _)), _) => (v, why),
        (None, Some(r)) => {
            use crate::replication::Outcome;
            out.seed_rounds = Some(r.seed);
            let verdict = match r.outcome {
                Outcome::Inside => Verdict::Reproduced,
                Outcome::Outside => Verdict::Refuted,
                Outcome::SeedTooSpread => Verdict::SeedTooSpread,
                Outcome::Across => Verdict::Inconclusive,
            };
            (verdict, r.why)
        }
        (None, None) => judge(&band, &ours),
    };
    out.verdict = verdict;
    out.why = match path {
        Some(_) => format!(
            "{why}; the path sets this ratio here, and round trips are the claim's own mechanism, so it is judged"
        ),
        None => why,
    };
    out
}

/// The claims of `results` whose interval straddles an edge of their band (inconclusive
/// with an interval): another repetition of their cells may settle them. The launcher keeps
/// repeating those cells, up to the experiment's maximum, so that a verdict settles instead
/// of flipping between runs.
pub fn straddling(results: &echolab_core::results::ResultsDir) -> Vec<ClaimCheck> {
    let ds = Dataset::new(results);
    results
        .manifest
        .experiment
        .reference
        .claims
        .iter()
        .map(|c| check(&ds, &results.manifest, c))
        .filter(|c| {
            c.verdict == Verdict::Inconclusive && c.ours.as_ref().is_some_and(|r| r.ci95.is_some())
        })
        .collect()
}

/// How far a claim that ended inconclusive sits from the band edge its interval straddles:
/// `at its edge: 4.67× is 6.6% below the upper edge 5×`; `None` for any other verdict.
pub fn edge_distance(check: &ClaimCheck) -> Option<String> {
    let (band, ours) = (check.band?, check.ours.as_ref()?);
    let ci = ours.ci95?;
    // A claim judged against the seed's rounds has its quotient's edges in its why already.
    if check.verdict != Verdict::Inconclusive || check.seed_rounds.is_some() {
        return None;
    }
    let (name, edge) = if ci.low <= band.low && band.low > 0.0 {
        ("lower", band.low)
    } else if band.high.is_finite() {
        ("upper", band.high)
    } else {
        ("lower", band.low)
    };
    let off = ours.value / edge - 1.0;
    Some(format!(
        "it sits at its {name} edge: {} is {} {} the edge {}",
        format::times(ours.value),
        format::pct(off.abs()),
        if off < 0.0 { "below" } else { "above" },
        format::times(edge)
    ))
}

#[cfg(test)]
#[path = "claims_tests.rs"]
mod tests;
