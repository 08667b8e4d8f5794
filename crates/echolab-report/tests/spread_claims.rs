//! Spread claims: the numerator's values vary more across repetitions than the
//! denominator's, judged by a one-sided F-test on the variances of the logarithms.

mod common;

use echolab_core::experiment::Experiment;
use echolab_core::results::RunStatus;
use echolab_report::claims::{judge_spread, Verdict};

use common::*;

const SPREAD: &str = "LT's long-connection QPS swings more across repetitions than ET's";

/// exp32 rendered with LT's long QPS `lt` and ET's `et` per repetition.
fn exp32_verdict(lt: &[f64], et: &[f64]) -> (Verdict, String) {
    let e = shipped("exp32");
    let runs = closed_loop_runs(
        &e,
        |c| {
            if c.server == "epoll-lt" {
                lt.to_vec()
            } else {
                et.to_vec()
            }
        },
        |c, q| c.conns as f64 / q * 1e6,
    );
    let m = manifest(e, RunStatus::Complete, runs.len() as u64);
    let (_tmp, summary, md) = rendered("spread", &m, &runs);
    let v = verdicts(&summary)
        .into_iter()
        .find(|(n, _)| n == SPREAD)
        .unwrap()
        .1;
    (v, md)
}

#[test]
fn lt_swinging_as_in_three_runs_here_reproduces() {
    // Three runs here: LT long 222k, 100k, 187k; ET 200k–217k. F = 104.6 > F(0.95; 2, 2) = 19.
    let (v, md) = exp32_verdict(
        &[222_000.0, 100_000.0, 187_000.0],
        &[200_000.0, 210_000.0, 217_000.0],
    );
    assert_eq!(v, Verdict::Reproduced, "{md}");
    assert!(md.contains("exceeds F(0.95; 2, 2) = 19"), "{md}");
    assert!(md.contains("log-SD ratio"), "{md}");
}

#[test]
fn equal_spreads_are_inconclusive_with_the_fold_needed() {
    // Both cells swing by about 5%: F = 1.45, inside (1/19, 19).
    let (v, md) = exp32_verdict(
        &[200_000.0, 205_000.0, 212_000.0],
        &[201_000.0, 206_000.0, 211_000.0],
    );
    assert_eq!(v, Verdict::Inconclusive, "{md}");
    assert!(
        md.contains("3 repetitions each cannot tell spreads apart unless their variances differ by more than F(0.95; 2, 2) = 19×"),
        "{md}"
    );
}

#[test]
fn lt_steadier_than_et_refutes() {
    // LT 201k–211k, ET 150k–260k: F = 0.0074 < 1/19.
    let (v, md) = exp32_verdict(
        &[201_000.0, 206_000.0, 211_000.0],
        &[150_000.0, 220_000.0, 260_000.0],
    );
    assert_eq!(v, Verdict::Refuted, "{md}");
    assert!(md.contains("is below 1/F(0.95; 2, 2) = 0.053"), "{md}");
}

#[test]
fn the_seeds_own_rounds_pass_the_test_and_give_its_ratio() {
    // Seed 001 section 3.2: LT 55785, 32067, 29177; ET 56094, 49337, 55152.
    let (r, v, why) =
        judge_spread(&[55785.0, 32067.0, 29177.0], &[56094.0, 49337.0, 55152.0]).unwrap();
    assert_eq!(v, Verdict::Reproduced, "{why}");
    assert!((r.value - 5.02).abs() < 0.005, "{}", r.value);
    let ci = r.ci95.unwrap();
    // One-sided bounds: sqrt(F / 19) and sqrt(F × 19), F = 25.21.
    assert!((ci.low - (25.21_f64 / 19.0).sqrt()).abs() < 0.01, "{ci:?}");
    assert!((ci.high - (25.21_f64 * 19.0).sqrt()).abs() < 0.1, "{ci:?}");
}

#[test]
fn unequal_repetitions_and_degenerate_spreads() {
    // 5 against 3 repetitions: F(0.95; 4, 2) = 19.25.
    let (_, v, why) =
        judge_spread(&[100.0, 101.0, 102.0, 103.0, 104.0], &[100.0, 101.0, 103.0]).unwrap();
    assert_eq!(v, Verdict::Inconclusive);
    assert!(why.contains("5 and 3 repetitions"), "{why}");
    assert!(why.contains("F(0.95; 4, 2) = 19.247"), "{why}");
    // A denominator that never varies: no test, inconclusive, said why.
    let (_, v, why) = judge_spread(&[100.0, 120.0, 90.0], &[100.0, 100.0, 100.0]).unwrap();
    assert_eq!(v, Verdict::Inconclusive);
    assert!(why.contains("same value in every repetition"), "{why}");
    // Fewer than 2 values, or a zero: no spread at all.
    assert!(judge_spread(&[100.0], &[100.0, 101.0]).is_err());
    assert!(judge_spread(&[0.0, 1.0], &[100.0, 101.0]).is_err());
}

#[test]
fn a_spread_claim_takes_no_tolerance_direction_bound_or_expect() {
    let base = "name: t\nquestion: q\nrepetitions: 3\nmatrix:\n  - servers: [epoll-et, epoll-lt]\n    modes: [long]\n    conns: [100]\n    rounds: [10]\n\
reference:\n  source: s\n  claims:\n    - name: c\n      metric: qps\n      numerator: {server: epoll-lt}\n      denominator: {server: epoll-et}\n      kind: spread\n";
    Experiment::parse(base, "ok").unwrap();
    for (extra, field) in [
        ("      tolerance: 15%\n", "tolerance"),
        ("      direction: higher\n", "direction"),
        ("      bound: {above: 2}\n", "bound"),
        ("      expect: 2\n", "expect"),
    ] {
        let err = format!(
            "{:#}",
            Experiment::parse(&format!("{base}{extra}"), "bad").unwrap_err()
        );
        assert!(
            err.contains(&format!("{field}: not used by a spread claim")),
            "{err}"
        );
    }
}
