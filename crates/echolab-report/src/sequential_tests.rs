//! The design's error rates, by simulation of the launcher's stopping rule with the report's
//! own functions ([`Summary::at`], [`ratio`], [`claims::judge`]).

use super::*;
use crate::claims::{self, Verdict};
use crate::inference::{ratio, SplitMix, Summary};
use echolab_core::experiment::ClaimBand;

#[test]
fn looks_are_the_minimum_the_midpoint_and_the_maximum() {
    assert_eq!(Design::new(3, 10).looks, vec![3, 7, 10]);
    assert_eq!(Design::new(3, 4).looks, vec![3, 4]);
    assert_eq!(Design::new(3, 3).looks, vec![3]);
    assert_eq!(Design::new(0, 0).looks, vec![1], "a minimum of 0 is 1");
    assert_eq!(
        Design::new(5, 2).looks,
        vec![5],
        "a maximum below the minimum is the minimum"
    );
    assert!(Design::new(3, 10).is_look(7) && !Design::new(3, 10).is_look(5));
}

#[test]
fn pocock_levels_match_the_published_constants() {
    // J&T Table 2.1 gives c_P; its nominal per-look levels are 2.94% (K = 2), 2.21% (K = 3).
    let two = Confidence::pocock(2);
    let three = Confidence::pocock(3);
    assert!((two.alpha - 0.0294).abs() < 1e-4, "{two:?}");
    assert!((three.alpha - 0.0221).abs() < 1e-4, "{three:?}");
    assert_eq!(Confidence::pocock(1), Confidence::FIXED_95);
    // Large df: the t critical value approaches c_P itself.
    assert!((three.t(100_000).unwrap() - 2.289).abs() < 2e-3);
    // A fixed n keeps the plain table; a sequential design widens every interval.
    assert_eq!(Confidence::FIXED_95.t(2), Some(4.303));
    assert!(three.t(2).unwrap() > 6.0 && three.t(2).unwrap() < 7.0);
    assert_eq!(three.t(0), None);
}

/// The target half-width of the simulated cells (exp31's 5%).
const TARGET: f64 = 0.05;

/// One simulated run of a claim's two cells under the launcher's rule: at each look a cell
/// stops when its own interval is within [`TARGET`] and the claim's verdict is settled (not
/// inconclusive), else it runs on to the next look. Returns the final verdict and whether
/// the final interval covers `truth`.
fn one_run(
    g: &mut SplitMix,
    looks: &[u64],
    confidence: Confidence,
    truth: f64,
    band: &ClaimBand,
) -> (Verdict, bool) {
    let (mut num, mut den) = (Vec::new(), Vec::new());
    let (mut num_on, mut den_on) = (true, true);
    let last = *looks.last().unwrap();
    for &look in looks {
        let n = look as usize;
        if num_on {
            num.extend(g.sample(n - num.len(), 1000.0 * truth, 0.05));
        }
        if den_on {
            den.extend(g.sample(n - den.len(), 1000.0, 0.05));
        }
        let (sn, sd) = (
            Summary::at(&num, confidence).unwrap(),
            Summary::at(&den, confidence).unwrap(),
        );
        let r = ratio(&sn, &sd).unwrap();
        let (verdict, _) = claims::judge(band, &r);
        let ci = r.ci95.unwrap();
        let settled = verdict != Verdict::Inconclusive;
        let precise = |s: &Summary| s.relative_halfwidth().is_some_and(|h| h <= TARGET);
        num_on = !(settled && precise(&sn));
        den_on = !(settled && precise(&sd));
        if look == last || !(num_on || den_on) {
            return (verdict, ci.low <= truth && truth <= ci.high);
        }
    }
    unreachable!("the last look returns")
}

/// P(refuted), P(reproduced) and the final interval's coverage over `trials` runs.
fn simulate(looks: &[u64], confidence: Confidence, truth: f64, trials: usize) -> [f64; 3] {
    let mut g = SplitMix(0x005e_90e4_71a1);
    let band = ClaimBand {
        low: 2.0 / 1.15,
        high: 2.0 * 1.15,
        open: false,
    };
    let mut counts = [0usize; 3];
    for _ in 0..trials {
        let (verdict, covered) = one_run(&mut g, looks, confidence, truth, &band);
        counts[0] += usize::from(verdict == Verdict::Refuted);
        counts[1] += usize::from(verdict == Verdict::Reproduced);
        counts[2] += usize::from(covered);
    }
    counts.map(|k| k as f64 / trials as f64)
}

const TRIALS: usize = 4000;

/// Three standard errors of a proportion of 2.5% over [`TRIALS`] runs.
const SLACK: f64 = 0.0075;

#[test]
fn the_designs_wrong_verdicts_stay_at_their_nominal_rate_and_its_intervals_cover() {
    let design = Design::new(3, 10);
    let confidence = design.confidence();
    // On the band's upper edge the claim is as true as it is false: each verdict is an error,
    // each allowed 2.5% (one side of a 95% interval).
    let [refuted, reproduced, covered] = simulate(&design.looks, confidence, 2.3, TRIALS);
    eprintln!("edge: refuted {refuted}, reproduced {reproduced}, coverage {covered}");
    assert!(
        refuted <= 0.025 + SLACK && reproduced <= 0.025 + SLACK,
        "edge: refuted {refuted}, reproduced {reproduced}"
    );
    assert!(covered >= 0.94, "edge: coverage {covered}");
    // Inside the band a refutation is the error.
    let [refuted, reproduced, covered] = simulate(&design.looks, confidence, 2.0, TRIALS);
    eprintln!("inside: refuted {refuted}, reproduced {reproduced}, coverage {covered}");
    assert!(refuted <= 0.025 + SLACK, "inside: refuted {refuted}");
    assert!(covered >= 0.94, "inside: coverage {covered}");
    // And the design has power: inside the band it mostly reproduces.
    assert!(reproduced > 0.8, "inside: reproduced {reproduced}");
}

#[test]
fn looking_after_every_repetition_at_95_percent_inflates_the_errors() {
    // The rule this design replaces: a look after every repetition from 3 to 10, each with a
    // plain 95% interval. The simulation must see its inflation, or it could not see the
    // design's either.
    let every: Vec<u64> = (3..=10).collect();
    let [refuted, reproduced, covered] = simulate(&every, Confidence::FIXED_95, 2.3, TRIALS);
    eprintln!("every look at 95%: refuted {refuted}, reproduced {reproduced}, coverage {covered}");
    assert!(
        refuted.max(reproduced) > 0.025 + SLACK,
        "refuted {refuted}, reproduced {reproduced}"
    );
}

#[test]
fn a_cell_stopped_by_its_half_width_is_still_covered() {
    // The precision rule alone (netperf's -I): stop at a look once the interval is within 5%.
    let design = Design::new(3, 10);
    let confidence = design.confidence();
    let mut g = SplitMix(0xc0_7e4a6e);
    let mut covered = 0;
    for _ in 0..TRIALS {
        let mut values = Vec::new();
        for &look in &design.looks {
            values.extend(g.sample(look as usize - values.len(), 1000.0, 0.05));
            let s = Summary::at(&values, confidence).unwrap();
            let ci = s.ci95.unwrap();
            if s.relative_halfwidth().unwrap() <= TARGET || look == design.max() {
                covered += usize::from(ci.low <= 1000.0 && 1000.0 <= ci.high);
                break;
            }
        }
    }
    let coverage = covered as f64 / TRIALS as f64;
    eprintln!("half-width rule: coverage {coverage}");
    assert!(coverage >= 0.94, "coverage {coverage}");
}
