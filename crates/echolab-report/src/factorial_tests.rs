//! The factorial's plans, its estimates on known data, and its intervals' coverage by
//! simulation.

use super::*;
use crate::inference::SplitMix;

fn names(k: usize) -> Vec<String> {
    ["cpu plan", "client", "measure", "hosts"][..k]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

#[test]
fn full_designs_up_to_three_factors_and_a_resolution_iv_half_fraction_for_four() {
    let two = Plan::new(names(2));
    assert_eq!(two.runs.len(), 4);
    assert_eq!(two.terms().len(), 3, "A, B, AB");
    let four = Plan::new(names(4));
    assert!(four.half_fraction);
    assert_eq!(four.runs.len(), 8);
    // I = ABCD: every run has an even number of factors at the seed's level, here (none) and
    // all four among them.
    assert!(four
        .runs
        .iter()
        .all(|r| r.iter().filter(|h| **h).count() % 2 == 0));
    assert!(four.here_run().is_some() && four.runs.iter().any(|r| r.iter().all(|h| *h)));
    let terms = four.terms();
    assert_eq!(terms.len(), 4 + 3, "4 main effects and 3 aliased pairs");
    assert_eq!(
        four.name(&terms[4]),
        "cpu plan × client (= measure × hosts, aliased)"
    );
    // Every pair of columns is orthogonal: each term's signs sum to zero over the runs.
    for t in &terms {
        let sum: f64 = (0..8).map(|i| four.sign(i, t)).sum();
        assert_eq!(sum, 0.0, "{t:?}");
    }
}

/// Noiseless-looking responses (two nearly equal values a cell) from a model in logs.
fn responses(plan: &Plan, model: impl Fn(&[bool]) -> f64) -> Vec<Option<Response>> {
    plan.runs
        .iter()
        .map(|r| {
            let v = 1000.0 * model(r).exp();
            Response::of(
                &[v * 0.9999, v * 1.0001],
                &[1000.0 * 0.9999, 1000.0 * 1.0001],
            )
        })
        .collect()
}

#[test]
fn effects_and_an_interaction_are_recovered_from_a_known_model() {
    let plan = Plan::new(names(2));
    // Here 5×; the cpu plan halves the ratio, the client alone does nothing, and together
    // they give 0.6 of here instead of the 0.5 the product would.
    let (a, ab) = (0.5f64.ln(), (0.6f64 / 0.5).ln());
    let model =
        |r: &[bool]| 5f64.ln() + if r[0] { a } else { 0.0 } + if r[0] && r[1] { ab } else { 0.0 };
    let resp = responses(&plan, model);
    let terms = plan.terms();
    let est = |t: &Term| estimate(&plan, &resp, t, Confidence::FIXED_95, Some(2.0)).unwrap();
    // Main effect of A averages its change over B's levels: (ln 0.5 + ln 0.6) / 2.
    let main_a = est(&terms[0]);
    assert!(
        (main_a.change.value - (0.5f64 * 0.6).sqrt()).abs() < 1e-3,
        "{main_a:?}"
    );
    // B's main effect averages 0 (A low) and ln 1.2 (A high); AB is half of ln 1.2 twice over.
    let main_b = est(&terms[1]);
    assert!(
        (main_b.change.value - 1.2f64.sqrt()).abs() < 1e-3,
        "{main_b:?}"
    );
    let inter = est(&terms[2]);
    assert!(
        (inter.change.value - 1.2f64.sqrt()).abs() < 1e-3,
        "{inter:?}"
    );
    assert!(inter.share.is_none(), "an interaction gets no share");
    // Share of A: ln(√0.3) over ln(2/5).
    let (share, _) = main_a.share.unwrap();
    assert!(
        (share - 0.3f64.sqrt().ln() / (2.0f64 / 5.0).ln()).abs() < 1e-3,
        "{share}"
    );
    // A run without a response leaves no estimate.
    let mut missing = resp.clone();
    missing[1] = None;
    assert!(estimate(&plan, &missing, &terms[0], Confidence::FIXED_95, None).is_none());
}

#[test]
fn intervals_cover_their_effects_and_null_effects_rarely_move() {
    // A 2^3 design, 3 repetitions a cell at a CV of 5%: A changes the ratio by 0.8×, B by
    // nothing, C by 1.1× only with A (an AC interaction); the seed's figure sits where A alone
    // would close half the gap.
    const TRIALS: usize = 2000;
    let plan = Plan::new(names(3));
    let truth_log = |r: &[bool]| {
        (if r[0] { 0.8f64.ln() } else { 0.0 }) + if r[0] && r[2] { 1.1f64.ln() } else { 0.0 }
    };
    let terms = plan.terms();
    // True effects: average over the 8 runs of sign × y, times 2/N.
    let true_effect = |t: &Term| -> f64 {
        (0..plan.runs.len())
            .map(|i| plan.sign(i, t) * truth_log(&plan.runs[i]))
            .sum::<f64>()
            * 2.0
            / plan.runs.len() as f64
    };
    let a = true_effect(&terms[0]);
    let seed = (5f64.ln() + 2.0 * a).exp() * 1.0;
    let mut g = SplitMix(0x0fac_70a1);
    let mut covered = vec![0usize; terms.len()];
    let (mut share_covered, mut b_moves) = (0usize, 0usize);
    for _ in 0..TRIALS {
        let resp: Vec<Option<Response>> = plan
            .runs
            .iter()
            .map(|r| {
                let num = g.sample(3, 5000.0 * truth_log(r).exp(), 0.05);
                let den = g.sample(3, 1000.0, 0.05);
                Response::of(&num, &den)
            })
            .collect();
        for (k, t) in terms.iter().enumerate() {
            let e = estimate(&plan, &resp, t, Confidence::FIXED_95, Some(seed)).unwrap();
            let ci = e.change.ci95.unwrap();
            covered[k] +=
                usize::from(ci.low <= true_effect(t).exp() && true_effect(t).exp() <= ci.high);
            if k == 0 {
                let (_, si) = e.share.unwrap();
                share_covered += usize::from(si.low <= 0.5 && 0.5 <= si.high);
            }
            if k == 1 {
                // B does nothing: a "move" past 1 ± 5% is an error.
                b_moves += usize::from(ci.high < 1.0 / 1.05 || ci.low > 1.05);
            }
        }
    }
    let f = |k: usize| k as f64 / TRIALS as f64;
    for (k, c) in covered.iter().enumerate() {
        assert!(
            f(*c) >= 0.94,
            "{}: coverage {}",
            plan.name(&terms[k]),
            f(*c)
        );
    }
    assert!(
        f(share_covered) >= 0.93,
        "share coverage {}",
        f(share_covered)
    );
    assert!(f(b_moves) <= 0.025, "a null effect moved {}", f(b_moves));
    eprintln!(
        "coverage {:?}, share {}, null moves {}",
        covered.iter().map(|c| f(*c)).collect::<Vec<_>>(),
        f(share_covered),
        f(b_moves)
    );
}
