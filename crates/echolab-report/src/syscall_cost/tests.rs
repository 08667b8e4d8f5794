use super::*;
use crate::mechanism_check::MechanismVerdict;
use crate::sequential::Confidence;

const FIXED: Confidence = Confidence::FIXED_95;
use echolab_core::experiment::{BenchMode, Cell};
use echolab_core::stats::{ServerStats, SyscallStat};

/// A probe run whose server read `requests` 12-byte requests and spent `ns` in each call.
fn probe(requests: u64, calls: &[(&str, u64, Option<u64>)]) -> RunRecord {
    let mut server = ServerStats::default();
    server.totals.bytes_in = 12 * requests;
    for &(name, count, total_ns) in calls {
        server
            .totals
            .syscalls
            .insert(name.into(), SyscallStat { count, total_ns });
    }
    RunRecord {
        cell: Cell {
            server: "epoll-et".into(),
            mode: BenchMode::Short,
            conns: 100,
            rounds: None,
            duration: None,
            payload: 12,
            reply_bytes: None,
            rate: echolab_core::limits::Rate::new(2000.0).ok(),
            time_syscalls: true,
        },
        repetition: 1,
        started_at: String::new(),
        wall_s: 1.0,
        bench: None,
        server: Some(server),
        server_pid: None,
        samples: Vec::new(),
        settle: None,
        link: None,
        strace: None,
        error: None,
    }
}

#[test]
fn cost_is_the_timed_calls_per_request_without_the_waits() {
    // 1,000 requests: accept 1 × 2 µs, read 2 × 1.5 µs, write 1 × 4 µs, close 1 × 6 µs = 15 µs;
    // the blocked epoll_wait's 900 ms is idle time and left out.
    let r = probe(
        1_000,
        &[
            ("accept", 1_000, Some(2_000_000)),
            ("read", 2_000, Some(3_000_000)),
            ("write", 1_000, Some(4_000_000)),
            ("close", 1_000, Some(6_000_000)),
            ("epoll_wait", 1_500, Some(900_000_000)),
        ],
    );
    let c = cost_us(&r).unwrap();
    assert!((c - 15.0).abs() < 1e-9, "{c}");
}

#[test]
fn untimed_failed_or_empty_runs_have_no_cost() {
    let untimed = probe(1_000, &[("read", 2_000, None), ("write", 1_000, None)]);
    assert_eq!(cost_us(&untimed), None);
    let only_waits = probe(1_000, &[("epoll_wait", 10, Some(5_000))]);
    assert_eq!(cost_us(&only_waits), None);
    let mut failed = probe(1_000, &[("read", 1, Some(1))]);
    failed.error = Some("server died".into());
    assert_eq!(cost_us(&failed), None);
    assert_eq!(cost_us(&probe(0, &[("read", 1, Some(1))])), None);
}

#[test]
fn agreement_holds_fails_and_straddles_by_its_interval() {
    let a = 0.25;
    // Measured 4× (80k / 20k), predicted 4× (60 µs / 15 µs), a few percent of spread.
    let (mn, md) = (
        [79_000.0, 80_000.0, 81_000.0],
        [19_800.0, 20_000.0, 20_200.0],
    );
    let (pn, pd) = ([59.0, 60.0, 61.0], [14.9, 15.0, 15.1]);
    let ag = agreement(&mn, &md, &pn, &pd, a, FIXED).unwrap();
    assert!((ag.value - 1.0).abs() < 0.01, "{ag:?}");
    assert_eq!(ag.verdict, MechanismVerdict::Holds, "{ag:?}");
    // Predicted 2× against 4× measured: the interval of 2.0 lies above 1.25.
    let half = [29.5, 30.0, 30.5];
    let ag = agreement(&mn, &md, &half, &pd, a, FIXED).unwrap();
    assert!((ag.value - 2.0).abs() < 0.05, "{ag:?}");
    assert_eq!(ag.verdict, MechanismVerdict::DoesNotHold, "{ag:?}");
    // The same centres with a probe that swings ±40%: the interval reaches past the band.
    let wide = [36.0, 60.0, 84.0];
    let ag = agreement(&mn, &md, &wide, &pd, a, FIXED).unwrap();
    let ci = ag.ci95.unwrap();
    assert!(ci.low < 1.0 - a && ci.high > 1.0 + a, "{ag:?}");
    assert_eq!(ag.verdict, MechanismVerdict::Inconclusive);
    // One repetition on a side: no interval, so no verdict either way.
    let ag = agreement(&mn, &md, &[60.0], &pd, a, FIXED).unwrap();
    assert_eq!(
        (ag.ci95, ag.verdict),
        (None, MechanismVerdict::Inconclusive)
    );
    // Not positive: no agreement at all.
    assert_eq!(agreement(&mn, &md, &[0.0, 1.0], &pd, a, FIXED), None);
    assert_eq!(agreement(&mn, &[], &pn, &pd, a, FIXED), None);
}

/// SplitMix64 (Steele, Lea & Flood 2014): a seeded generator, so the simulation is the same
/// on every run.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    /// A standard normal draw (Box–Muller).
    fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform(), self.uniform());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
    /// `n` log-normal values around `median` with log-SD `sigma`.
    fn sample(&mut self, n: usize, median: f64, sigma: f64) -> Vec<f64> {
        (0..n)
            .map(|_| median * (sigma * self.normal()).exp())
            .collect()
    }
}

/// The prediction's 95% interval covers the true cost ratio, and the agreement interval the
/// true agreement (1: the mechanism exactly right), at about their nominal rate: 3
/// repetitions a cell, as exp31 runs, log-SDs of 3-15% as the lab's cells show.
#[test]
fn intervals_cover_the_true_values_at_about_their_nominal_rate() {
    const TRIALS: usize = 4_000;
    let mut rng = Rng(0x5EED_0000);
    let (true_short, true_long) = (60.0, 15.0);
    let true_gain = true_short / true_long;
    let (mut covered, mut agreed, mut held, mut refuted) = (0, 0, 0, 0);
    for i in 0..TRIALS {
        let (sc, sq) = ([0.03, 0.08, 0.15][i % 3], [0.02, 0.05, 0.1][i % 3]);
        let cost_short = rng.sample(3, true_short, sc);
        let cost_long = rng.sample(3, true_long, sc);
        let (a, b) = (
            Summary::of(&cost_short).unwrap(),
            Summary::of(&cost_long).unwrap(),
        );
        let ci = ratio(&a, &b).unwrap().ci95.unwrap();
        covered += usize::from(ci.low <= true_gain && true_gain <= ci.high);
        // The saturated cells' QPS obeys the mechanism exactly: gain = cost ratio.
        let qps_long = rng.sample(3, 20_000.0 * true_gain, sq);
        let qps_short = rng.sample(3, 20_000.0, sq);
        let ag = agreement(&qps_long, &qps_short, &cost_short, &cost_long, 0.25, FIXED).unwrap();
        let ci = ag.ci95.unwrap();
        agreed += usize::from(ci.low <= 1.0 && 1.0 <= ci.high);
        held += usize::from(ag.verdict == MechanismVerdict::Holds);
        refuted += usize::from(ag.verdict == MechanismVerdict::DoesNotHold);
    }
    let rate = |k: usize| k as f64 / TRIALS as f64;
    // Nominal 95%; the simulation's own standard error at 4,000 trials is 0.35 points, and
    // the floored Welch df widens the interval a little, so coverage may run above 95%.
    for (what, k) in [("prediction", covered), ("agreement", agreed)] {
        assert!(
            (0.935..=0.99).contains(&rate(k)),
            "{what} interval covered the truth in {:.1}% of trials",
            100.0 * rate(k)
        );
    }
    // A right mechanism is refuted at most about as often as its interval misses (≤ 2.5%
    // one-sided, within simulation error).
    assert!(
        rate(refuted) <= 0.03,
        "refuted {:.1}%",
        100.0 * rate(refuted)
    );
    assert!(held > 0, "no trial held");
}

/// The round-trips mechanism's shape: each repetition's prediction (round trips × RTT + its
/// own server CPU per request) and its P50 share that repetition's server CPU, so the two
/// move together. The agreement interval treats them as independent samples (Welch); with
/// the shared term the true variance of their difference is smaller, so the interval must err
/// wide: a right mechanism covered at least at the nominal 95% and refuted at most 2.5%.
#[test]
fn the_agreement_errs_wide_when_prediction_and_measurement_share_repetitions() {
    const TRIALS: usize = 4_000;
    let mut rng = Rng(0x5EED_0001);
    let rtt = 45.0;
    let (mut agreed, mut refuted) = (0, 0);
    for i in 0..TRIALS {
        let (s_cpu, s_rest) = ([0.05, 0.1, 0.2][i % 3], [0.02, 0.05, 0.1][i % 3]);
        // One cell: `trips` round trips, server CPU per request around `cpu` µs.
        let mut cell = |trips: f64, cpu: f64| -> (Vec<f64>, Vec<f64>) {
            let server = rng.sample(3, cpu, s_cpu);
            let predicted: Vec<f64> = server.iter().map(|s| trips * rtt + s).collect();
            // The mechanism exactly right, up to noise of the P50's own.
            let p50 = predicted
                .iter()
                .map(|p| p * (s_rest * rng.normal()).exp())
                .collect();
            (p50, predicted)
        };
        let (p50_long, pred_long) = cell(1.0, 17.0);
        let (p50_short, pred_short) = cell(2.0, 38.0);
        let ag = agreement(&p50_long, &p50_short, &pred_long, &pred_short, 0.25, FIXED).unwrap();
        let ci = ag.ci95.unwrap();
        agreed += usize::from(ci.low <= 1.0 && 1.0 <= ci.high);
        refuted += usize::from(ag.verdict == MechanismVerdict::DoesNotHold);
    }
    let rate = |k: usize| k as f64 / TRIALS as f64;
    // At least nominal, less the simulation's own standard error (0.35 points at 4,000).
    assert!(
        rate(agreed) >= 0.945,
        "covered {:.1}%",
        100.0 * rate(agreed)
    );
    assert!(
        rate(refuted) <= 0.025,
        "refuted {:.1}%",
        100.0 * rate(refuted)
    );
    println!(
        "shared repetitions: agreement covered 1 in {:.1}% of trials, refuted {:.1}%",
        100.0 * rate(agreed),
        100.0 * rate(refuted)
    );
}
