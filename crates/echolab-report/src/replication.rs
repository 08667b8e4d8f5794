//! A magnitude claim judged against the seed's own rounds, not against its point.
//!
//! A seed that publishes its rounds (seed 000 §5: three per cell) gives its ratio an interval
//! of its own: its ET short QPS rounds 14900, 30824 and 29020 make the ET long/short gain
//! 2.25× with a 95% interval of about 0.8–6.2×. Set against the seed's point as if it were
//! exact, a ratio of ours inside that interval can read as refuted. So where both cells of a
//! magnitude claim have the seed's rounds for the claim's metric, the question becomes the
//! one a replication asks (Patil, Peng & Leek 2016, "What should researchers expect when they
//! replicate studies?", Perspectives on Psychological Science 11(4)): is our ratio the seed's,
//! given both studies' sampling error?
//!
//! Both ratios are estimated alike, as ratios of geometric means (the seed prints ratios of
//! arithmetic means: 2.15× where its rounds' geometric means give 2.25×). Their quotient
//! `R = ours / seed's` is `exp(d)`, `d = (ȳ₁ − ȳ₂) − (x̄₁ − x̄₂)` over the logarithms of the four
//! samples, with `se² = Σ sᵢ²/nᵢ` and Welch–Satterthwaite degrees of freedom
//! ([`crate::inference::welch`]). The claim's band, divided by its centre, is the band `R` must
//! keep to (the same band function as every claim: ±15% around 2.15× becomes 0.85–1.15).
//!
//! - **reproduced**: the 95% interval of `R` lies inside that band (equivalence with both
//!   uncertainties, read as two one-sided tests off the 95% interval, as for every claim);
//! - **refuted**: it lies wholly outside;
//! - **seed too spread to decide**: neither, and the seed's own 95% interval alone is wider
//!   than the band, so that no run here, however many repetitions it makes, could reproduce
//!   the claim: the seed's rounds do not pin its figure down to the precision the claim asks;
//! - **inconclusive**: neither, with a seed precise enough that more repetitions here could
//!   settle it.
//!
//! The module's tests check the rule's error rates by simulation: at a true `R` on the band's
//! edge a refuted or reproduced verdict each comes at most at the nominal 2.5%, and the
//! interval of `R` covers at least 94% of the time.

use echolab_core::experiment::{ClaimBand, ReferenceClaim};

use crate::format;
use crate::inference::{t_975, Interval};
use crate::sequential::Confidence;
use crate::welch::{welch, LogSample};

/// Whether `v` has a spread on the log scale: at least 2 values, all positive and finite.
fn usable(v: &[f64]) -> bool {
    v.len() >= 2 && v.iter().all(|x| x.is_finite() && *x > 0.0)
}

/// The seed's ratio from its rounds: the ratio of the two cells' geometric means with its 95%
/// interval (log-t, Welch).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SeedRatio {
    /// Ratio of the geometric means of the numerator's and the denominator's rounds.
    pub value: f64,
    /// Its 95% interval.
    pub ci95: Interval,
    /// Rounds of the numerator and of the denominator.
    pub rounds: (usize, usize),
}

impl SeedRatio {
    /// The seed's ratio from the rounds of its numerator and denominator cells, or `None`
    /// when a side has fewer than 2 rounds or a value that is not positive.
    pub fn of(numerator: &[f64], denominator: &[f64]) -> Option<Self> {
        if !(usable(numerator) && usable(denominator)) {
            return None;
        }
        let (n, d) = (LogSample::of(numerator), LogSample::of(denominator));
        let centre = n.mean - d.mean;
        let (se, df) = welch(&[n, d]);
        let t = t_975(df)?;
        Some(Self {
            value: centre.exp(),
            ci95: Interval {
                low: (centre - t * se).exp(),
                high: (centre + t * se).exp(),
            },
            rounds: (numerator.len(), denominator.len()),
        })
    }

    /// `2.25× (95% CI 0.81–6.2×, 3/3 rounds)`.
    pub fn text(&self) -> String {
        format!(
            "{} (95% CI {}, {}/{} rounds)",
            format::times(self.value),
            format::ratio_interval(self.ci95),
            self.rounds.0,
            self.rounds.1
        )
    }
}

/// Where the interval of ours over the seed's lies (see the module doc); the claims map it to
/// their verdicts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Inside the band: reproduced.
    Inside,
    /// Wholly outside: refuted.
    Outside,
    /// Across an edge, with a seed whose own interval is wider than the band.
    SeedTooSpread,
    /// Across an edge; more repetitions here could settle it.
    Across,
}

/// A claim judged against the seed's rounds: the seed's ratio, ours over the seed's with its
/// interval, the outcome and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Replication {
    /// The seed's ratio from its rounds.
    pub seed: SeedRatio,
    /// Ours over the seed's, `R`.
    pub relative: f64,
    /// The 95% interval of `R`, both spreads in it.
    pub relative_ci95: Interval,
    /// The outcome (see the module doc).
    pub outcome: Outcome,
    /// One sentence, no final full stop.
    pub why: String,
}

/// Judges our ratio (from `ours`, the numerator's and the denominator's repetitions) against
/// the seed's (from `seed`, its rounds), for a magnitude claim whose band is `band` around
/// `centre`, with the relative interval at `confidence` (our repetitions' design,
/// [`crate::sequential`]). `None` when either side lacks 2 positive values.
pub fn judge(
    band: &ClaimBand,
    centre: f64,
    ours: (&[f64], &[f64]),
    seed: (&[f64], &[f64]),
    confidence: Confidence,
) -> Option<Replication> {
    let seed_ratio = SeedRatio::of(seed.0, seed.1)?;
    if !(usable(ours.0) && usable(ours.1) && centre.is_finite() && centre > 0.0) {
        return None;
    }
    let samples = [
        LogSample::of(ours.0),
        LogSample::of(ours.1),
        LogSample::of(seed.0),
        LogSample::of(seed.1),
    ];
    let d = samples[0].mean - samples[1].mean - (samples[2].mean - samples[3].mean);
    let (se, df) = welch(&samples);
    let t = confidence.t(df)?;
    let relative_ci95 = Interval {
        low: (d - t * se).exp(),
        high: (d + t * se).exp(),
    };
    let rel = ClaimBand {
        low: band.low / centre,
        high: band.high / centre,
        open: band.open,
    };
    let inside = rel.contains(relative_ci95.low) && rel.contains(relative_ci95.high);
    let outside = relative_ci95.high < rel.low || relative_ci95.low > rel.high;
    // The seed's own half-width on the log scale against the band's narrower half.
    let seed_half = (seed_ratio.ci95.high / seed_ratio.ci95.low).ln() / 2.0;
    let band_half = (rel.high.ln()).min(-rel.low.ln());
    let what = format!(
        "ours over the seed's {} (95% CI {}, both spreads) against {}",
        format::times(d.exp()),
        format::ratio_interval(relative_ci95),
        rel
    );
    let (outcome, why) = if inside {
        (Outcome::Inside, format!("{what}: inside"))
    } else if outside {
        (Outcome::Outside, format!("{what}: wholly outside"))
    } else if seed_half > band_half {
        (
            Outcome::SeedTooSpread,
            format!(
                "{what}: across it, and the seed's own rounds give {}, wider than the band, so \
                 no run here could settle the claim",
                seed_ratio.text()
            ),
        )
    } else {
        (
            Outcome::Across,
            format!("{what}: across an edge; more repetitions here could settle it"),
        )
    };
    Some(Replication {
        seed: seed_ratio,
        relative: d.exp(),
        relative_ci95,
        outcome,
        why,
    })
}

/// The seed's rounds of `claim`'s metric for its two cells, when the claim is a magnitude and
/// the experiment's figures give rounds for both ([`crate::replication`]).
pub(crate) fn rounds_of<'r>(
    reference: &'r echolab_core::experiment::Reference,
    claim: &ReferenceClaim,
    cells: [&crate::dataset::CellData<'_>; 2],
) -> Option<(&'r [f64], &'r [f64])> {
    if claim.effective_kind() != echolab_core::experiment::ClaimKind::Magnitude {
        return None;
    }
    let of = |cell: &crate::dataset::CellData<'_>| {
        reference
            .figures
            .iter()
            .filter(|f| f.cell.matches(&cell.cell))
            .find_map(|f| f.rounds.get(&claim.metric))
            .map(Vec::as_slice)
    };
    Some((of(cells[0])?, of(cells[1])?))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED_ET_SHORT: [f64; 3] = [14900.0, 30824.0, 29020.0];
    const SEED_ET_LONG: [f64; 3] = [56094.0, 49337.0, 55152.0];

    fn band(centre: f64, tol: f64) -> ClaimBand {
        ClaimBand {
            low: centre * (1.0 - tol),
            high: centre * (1.0 + tol),
            open: false,
        }
    }

    #[test]
    fn the_seeds_et_gain_has_a_wide_interval_of_its_own() {
        let s = SeedRatio::of(&SEED_ET_LONG, &SEED_ET_SHORT).unwrap();
        assert!((s.value - 2.25).abs() < 0.01, "{s:?}");
        assert!(
            (0.75..0.9).contains(&s.ci95.low) && (5.8..6.6).contains(&s.ci95.high),
            "{s:?}"
        );
    }

    #[test]
    fn a_gain_inside_the_seeds_interval_is_not_refuted() {
        // This machine's ET gain: about 5.8x with a tight interval, as exp31 gives here.
        let long = [29_000.0, 29_500.0, 30_000.0];
        let short = [5_000.0, 5_100.0, 5_200.0];
        let r = judge(
            &band(2.15, 0.15),
            2.15,
            (&long, &short),
            (&SEED_ET_LONG, &SEED_ET_SHORT),
            FIXED,
        )
        .unwrap();
        assert_eq!(r.outcome, Outcome::SeedTooSpread, "{r:?}");
        assert!(r.why.contains("wider than the band"), "{}", r.why);
    }

    #[test]
    fn precise_studies_that_disagree_are_refuted_and_agree_reproduced() {
        let seed = ([200.0, 201.0, 199.0], [100.0, 100.5, 99.5]);
        let far = judge(
            &band(2.0, 0.15),
            2.0,
            (&[300.0, 301.0, 299.0], &[100.0, 100.2, 99.8]),
            (&seed.0, &seed.1),
            FIXED,
        )
        .unwrap();
        assert_eq!(far.outcome, Outcome::Outside, "{far:?}");
        let near = judge(
            &band(2.0, 0.15),
            2.0,
            (&[202.0, 203.0, 201.0], &[100.0, 100.2, 99.8]),
            (&seed.0, &seed.1),
            FIXED,
        )
        .unwrap();
        assert_eq!(near.outcome, Outcome::Inside, "{near:?}");
        // Noisy here, precise seed: more repetitions could settle it.
        let noisy = judge(
            &band(2.0, 0.15),
            2.0,
            (&[150.0, 260.0, 220.0], &[100.0, 100.2, 99.8]),
            (&seed.0, &seed.1),
            FIXED,
        )
        .unwrap();
        assert_eq!(noisy.outcome, Outcome::Across, "{noisy:?}");
    }

    #[test]
    fn too_few_rounds_or_a_zero_give_no_replication() {
        let b = band(2.0, 0.15);
        assert!(judge(
            &b,
            2.0,
            (&[1.0, 2.0], &[1.0, 2.0]),
            (&[1.0], &[1.0, 2.0]),
            FIXED
        )
        .is_none());
        assert!(judge(
            &b,
            2.0,
            (&[1.0, 0.0], &[1.0, 2.0]),
            (&[1.0, 2.0], &[1.0, 2.0]),
            FIXED
        )
        .is_none());
    }

    use crate::inference::SplitMix;
    const FIXED: Confidence = Confidence::FIXED_95;

    /// Outcome counts and interval coverage over `trials` simulated pairs of studies whose
    /// true ours/seed's quotient is `truth`: the seed with 3 rounds at log-SD `seed_sd`, ours
    /// with `n` repetitions at log-SD 0.05 (a CV of 5%).
    fn simulate(truth: f64, seed_sd: f64, n: usize, trials: usize) -> (f64, f64, f64) {
        let mut g = SplitMix(0x0005_eed0_f1ab);
        let b = band(2.0, 0.15);
        let (mut refuted, mut reproduced, mut covered) = (0, 0, 0);
        for _ in 0..trials {
            let seed = (g.sample(3, 200.0, seed_sd), g.sample(3, 100.0, seed_sd));
            let ours = (g.sample(n, 200.0 * truth, 0.05), g.sample(n, 100.0, 0.05));
            let r = judge(&b, 2.0, (&ours.0, &ours.1), (&seed.0, &seed.1), FIXED).unwrap();
            refuted += usize::from(r.outcome == Outcome::Outside);
            reproduced += usize::from(r.outcome == Outcome::Inside);
            covered += usize::from(r.relative_ci95.low <= truth && truth <= r.relative_ci95.high);
        }
        let f = |k: usize| k as f64 / trials as f64;
        (f(refuted), f(reproduced), f(covered))
    }

    /// Three standard errors of a proportion near 2.5% over the trials below: the slack a
    /// rate may show above its nominal value before the test calls it inflated.
    const SLACK: f64 = 0.0075;

    #[test]
    fn wrong_verdicts_stay_at_their_nominal_rate_and_intervals_cover() {
        const TRIALS: usize = 4000;
        // The band's two edges (1/1.15 and 1.15 as quotients of the seed's ratio): the claim is
        // exactly as true as it is false there, so either verdict is an error, each allowed at
        // most 2.5% (a one-sided test at 2.5% each way off a 95% interval).
        for seed_sd in [0.05, 0.3] {
            for truth in [0.85, 1.15] {
                let (refuted, reproduced, covered) = simulate(truth, seed_sd, 3, TRIALS);
                assert!(
                    refuted <= 0.025 + SLACK && reproduced <= 0.025 + SLACK,
                    "truth {truth}, seed log-SD {seed_sd}: refuted {refuted}, reproduced {reproduced}"
                );
                assert!(covered >= 0.94, "truth {truth}: coverage {covered}");
            }
        }
        // Inside the band a refutation is the error; far outside a reproduction is.
        let (refuted, _, covered) = simulate(1.0, 0.05, 5, TRIALS);
        assert!(
            refuted <= 0.025 + SLACK && covered >= 0.94,
            "{refuted} {covered}"
        );
        let (_, reproduced, _) = simulate(2.0, 0.05, 5, TRIALS);
        assert!(reproduced <= 0.025 + SLACK, "{reproduced}");
        // And the rule has power: a precise seed and a quotient of 2 is refuted nearly always.
        let (refuted, _, _) = simulate(2.0, 0.05, 5, TRIALS);
        assert!(refuted > 0.9, "{refuted}");
    }
}
