//! The seed experiments' claims, rendered from runs whose figures are chosen here: verdicts on
//! loopback and across a link, adaptive repetitions, and intervals on every shipped experiment
//! and profile.

mod common;

use echolab_core::experiment::{BenchMode, Experiment};
use echolab_core::results::{RunRecord, RunStatus};
use echolab_report::claims::Verdict;

use common::*;

#[test]
fn exp31_on_loopback_judged_against_the_seeds_rounds_and_exp34_its_counts() {
    // exp31: short 26000–27000 req/s, long 57000–59000: long/short QPS 2.19× and P50 (from
    // Little's law, mean = conns / QPS) 26497 / 57994 = 0.457×, both with a few % spread.
    // As published (the seed's 100 × 10), so that the setting matches the seed's, and at a
    // fixed 3 repetitions like the seed's (`--reps 3`): under exp31's own 3 to 10 the intervals
    // are the sequential design's wider repeated ones, and a straddling claim's cells would
    // have run on to the next look.
    let mut e = shipped("exp31").as_published();
    e.max_repetitions = Some(3);
    let runs = closed_loop_runs(
        &e,
        |c| match c.mode {
            BenchMode::Short => vec![26000.0, 26500.0, 27000.0],
            _ => vec![57000.0, 58000.0, 59000.0],
        },
        |c, q| c.conns as f64 / q * 1e6,
    );
    let mut m = manifest(e, RunStatus::Complete, runs.len() as u64);
    m.environment.kernel = "3.10.0-1160.el7.x86_64".into();
    m.environment.cpus = 4;
    let (_tmp, summary, md) = rendered("exp31", &m, &runs);
    assert_no_negative_bound(&md);
    let v = verdicts(&summary);
    let of = |name: &str| v.iter().find(|(n, _)| n.starts_with(name)).unwrap().1;
    // Judged against the seed's rounds (seed 000 §5): its ET P50 rounds give 0.439× with a 95%
    // interval (0.325–0.593×) wider than the claim's ±20%, so no run could settle that claim;
    // LT's steadier rounds give 0.421× (0.378–0.468×), and ours, 0.457×, is 1.09× of it
    // (1.00–1.18× with both spreads), inside 0.8–1.2.
    assert_eq!(
        of("long/short P50 latency, ET server (about halved)"),
        Verdict::SeedTooSpread,
        "{md}"
    );
    assert_eq!(
        of("long/short P50 latency, LT server (about halved)"),
        Verdict::Reproduced
    );
    // The seed's QPS rounds swing (ET short 14900–30824, LT long 29177–55785): both gains'
    // own intervals (0.815–6.23× and 0.676–3.04×) dwarf ±15%, so 2.19× settles neither.
    assert_eq!(of("long/short QPS gain, ET server"), Verdict::SeedTooSpread);
    assert_eq!(
        of("long/short QPS gain, LT server"),
        Verdict::SeedTooSpread,
        "against the seed's point, 2.19× is above 1.26–1.70×; against its rounds, undecidable"
    );
    assert_eq!(
        of("ET long/short QPS gain within the predicted 2-5x"),
        Verdict::Reproduced
    );
    assert!(
        md.contains("band 0.417–0.6× (magnitude ±20%): **reproduced**"),
        "{md}"
    );
    // Same topology, cores and kernel as the seed: the setting says so.
    assert!(
        md.contains(
            "Setting: this run has the same topology, cores, kernel and timing method as the seed."
        ),
        "{md}"
    );

    // exp34: 1000 vs 100 calls in every repetition, exact; the seed's 0.1036 for close()
    // included 4 thread closes, and the claim "cut by ~90%" holds.
    let e = shipped("exp34");
    let runs = closed_loop_runs(
        &e,
        |_| vec![26000.0, 26500.0, 27000.0],
        |c, q| c.conns as f64 / q * 1e6,
    );
    let m = manifest(e, RunStatus::Complete, runs.len() as u64);
    let (_tmp, summary, md) = rendered("exp34", &m, &runs);
    assert_no_negative_bound(&md);
    let v = verdicts(&summary);
    assert_eq!(
        v[0],
        (
            "connect() calls, long/short (cut by ~90%)".into(),
            Verdict::Reproduced
        )
    );
    assert_eq!(
        v[1],
        (
            "close() calls, long/short (cut by ~90%)".into(),
            Verdict::Reproduced
        )
    );
    assert!(
        md.contains(
            "seed 0.104× (the claim's words: 0.100×), here 0.100× (exact); band 0.08–0.12× (magnitude ±0.02): \
             **reproduced**: our exact ratio 0.100× lies inside the band; it is the same in every repetition, \
             set by the experiment's parameters, so this checks the counting, not a measured effect."
        ),
        "{md}"
    );
    // The per-call times are from in-process wrappers, the seed's from ptrace: said beside it.
    assert!(
        md.contains(
            "timed by in-process wrappers around each call here, by strace -c (ptrace) in the seed"
        ),
        "{md}"
    );
    let sys = section(&md, "Client system calls");
    assert!(
        row(sys, "connect() calls")[1].starts_with("1000 (exact, all 3 reps)"),
        "{sys}"
    );
    assert!(
        row(sys, "connect() calls")[3].starts_with("-90.0% (exact)"),
        "{sys}"
    );
}

#[test]
fn crossnet_marks_path_bound_claims_not_comparable_and_seed_figures_as_context() {
    // crossnet: RTT 20.1 ms; short requests take 47.4 ms (2 round trips), long 22.6 ms (1).
    // As published (rounds), so the cell ids below are the seed's.
    let e = shipped("exp31").as_published();
    let runs = closed_loop_runs(&e, |_| vec![0.0; 3], |_, _| 0.0)
        .into_iter()
        .map(|r| {
            let mean_us = if r.cell.mode == BenchMode::Short {
                47_400.0
            } else {
                22_600.0
            } + r.repetition as f64 * 100.0;
            closed_loop_run(
                &r.cell,
                r.repetition,
                r.cell.conns as f64 / mean_us * 1e6,
                mean_us,
            )
        })
        .collect::<Vec<_>>();
    let mut m = manifest(e, RunStatus::Complete, runs.len() as u64);
    m.profile = echolab_testkit::fixtures::recorded_profile("crossnet");
    m.environment.kernel = "6.18.0-test".into();
    let cal = m.link.calibration.as_mut().unwrap();
    cal.measured.insert("rtt_median_us".into(), 20_100.0);
    let (tmp, summary, md) = rendered("crossnet", &m, &runs);
    assert_no_negative_bound(&md);
    for (name, v) in verdicts(&summary) {
        // The P50 claims' own mechanism is round trips (exp31's `round-trips` mechanisms):
        // where the path sets the ratio they are judged, against the seed's rounds
        // (0.9 × 22.6 / 0.9 × 47.4 ms ≈ 0.48×): ET's rounds (0.439×, 95% CI 0.325–0.593×) are
        // wider than ±20%, LT's (0.421×, 0.378–0.468×) are not, and 0.48/0.421 = 1.14 sits at
        // the band's 1.2 edge. The QPS claims are about the server and are set aside.
        let expected = if name.contains("P50 latency, ET") {
            Verdict::SeedTooSpread
        } else if name.contains("P50") {
            Verdict::Inconclusive
        } else {
            Verdict::NotComparable
        };
        assert_eq!(v, expected, "{name}:\n{md}");
    }
    // 2 × 20100 / 47600 = 84% (HdrHistogram's mean of the short cell is 47605 µs).
    assert!(
        md.contains("epoll-et_short_c100_r10: 2 × RTT 20100 µs = 84% of its mean latency 47605 µs"),
        "{md}"
    );
    for needle in [
        "⚠ Context, not like for like: this run differs from the seed: topology link (profile crossnet) here, loopback in \
         the seed (closest profile loopback); 2 logical CPUs here, 4 in the seed; kernel 6.18 here, 3.10 in the seed.",
        "| Here/seed (context only) |",
        "## Why results may differ from the seed",
        "Path: the calibration measured a median RTT of 20100 µs",
    ] {
        assert!(md.contains(needle), "no {needle:?} in:\n{md}");
    }
    assert!(md.contains("- Cores: "), "{md}");
    // On machines of their own (a lab run), the cores bullet says so instead.
    m.cpu_plan = Some(echolab_core::results::CpuPlanRecord {
        mode: "machines".into(),
        note:
            "server on engine a's machine (8 CPUs), client on engine b's (4 CPUs); nothing pinned"
                .into(),
        machine_cpus: 4,
        ..Default::default()
    });
    let (_tmp2, _, lab_md) = rendered("native", &m, &runs);
    let cores = "- Cores: the server and the client ran on machines of their own (server on engine a's machine (8 CPUs), \
                 client on engine b's (4 CPUs); nothing pinned), so neither took CPU from the other; the seed's machine had 4.";
    assert!(lab_md.contains(cores), "no {cores:?} in:\n{lab_md}");
    // The y axis of a 20 ms path's latency plot carries numbers: short requests take 42.7–90.4
    // ms (0.9 and 1.9 × the mean), so the axis runs 20000–100000 µs, ticked at 1-2-5 values.
    let svg = std::fs::read_to_string(tmp.path().join("plots/latency_epoll-et_short_c100_r10.svg"))
        .unwrap();
    let texts = svg_texts(&svg);
    assert_ticks_once(&texts, &["20000", "50000", "100000"]);
}

#[test]
fn adaptive_repetitions_are_reported_per_cell() {
    let text = EXPERIMENT.replace(
        "repetitions: 3",
        "repetitions: 3\nmax_repetitions: 6\ntarget_halfwidth: 5%",
    );
    let mut e = Experiment::parse(&text, "exp-test.yaml").unwrap();
    e.matrix.truncate(1);
    e.reference.claims.truncate(2);
    // LT short: 3 tight values (0.9% half-width) → reached at the minimum. LT long: 6 values
    // spread ±20% → the maximum without reaching it. ET short: 3 values spread ±20% (the
    // minimum, not reached) and the run interrupted. ET long: 3 identical values → exact.
    let runs = closed_loop_runs(
        &e,
        |c| match (c.server.as_str(), c.mode) {
            ("epoll-lt", BenchMode::Short) => vec![26400.0, 26500.0, 26600.0],
            ("epoll-lt", _) => vec![20000.0, 30000.0, 25000.0, 20000.0, 30000.0, 25000.0],
            ("epoll-et", BenchMode::Short) => vec![20000.0, 30000.0, 25000.0],
            _ => vec![50000.0; 3],
        },
        |c, q| c.conns as f64 / q * 1e6,
    );
    let m = manifest(e, RunStatus::Interrupted, runs.len() as u64);
    let (_tmp, summary, md) = rendered("adaptive", &m, &runs);
    // Repetitions beyond the last one run are not missing: 3 + 6 + 3 + 3 planned.
    assert_eq!((summary.counts.planned, summary.counts.missing), (15, 0));
    assert!(
        md.contains("(4 cells × 3–6 repetitions, adaptive, target half-width 5.0%)"),
        "{md}"
    );
    let reps = section(&md, "Repetitions");
    assert!(reps.contains("each cell repeats 3–6 times"), "{reps}");
    assert_eq!(row(reps, "epoll-lt_short_c100_r10")[4], "reached");
    assert_eq!(
        row(reps, "epoll-et_long_c100_r10")[3..],
        ["0.0%", "reached"]
    );
    let lt_long = row(reps, "epoll-lt_long_c100_r10");
    assert_eq!(lt_long[2], "6");
    assert!(
        lt_long[4].starts_with("not reached: 6 repetitions (the maximum) left the half-width at")
            && !lt_long[4].contains("a fixed count"),
        "an adaptive plan is not called a fixed count: {lt_long:?}"
    );
    assert_eq!(
        row(reps, "epoll-et_short_c100_r10")[4],
        "not reached: the run stopped after 3 of up to 6 repetitions (run status interrupted)"
    );
    assert!(reps.contains("2 of 4 cells reached the target"), "{reps}");
}

#[test]
fn every_shipped_experiment_on_every_profile_has_no_negative_bound_or_unexplained_no_ci() {
    for name in [
        "exp31",
        "exp32",
        "exp33",
        "exp34",
        "select-vs-epoll",
        "smoke",
    ] {
        for (profile, topology, rtt_us) in [
            ("loopback", "loopback", 45.0),
            ("lan100", "link", 260.0),
            ("crossnet", "link", 20_100.0),
        ] {
            for reps in [1, 2, 3] {
                let mut e = shipped(name);
                e.repetitions = reps.min(e.repetitions);
                let runs: Vec<RunRecord> = e
                    .cells()
                    .iter()
                    .flat_map(|c| (1..=e.repetitions).map(move |rep| record(c, rep)))
                    .collect();
                let tmp = temp_dir("all");
                let mut m = manifest(e, RunStatus::Complete, runs.len() as u64);
                m.profile = echolab_testkit::fixtures::recorded_profile(profile);
                assert_eq!(m.profile.profile.topology.name(), topology);
                m.link
                    .calibration
                    .as_mut()
                    .unwrap()
                    .measured
                    .insert("rtt_median_us".into(), rtt_us);
                write_dir(tmp.path(), &m, &runs);
                let report = echolab_report::build(tmp.path()).unwrap();
                let md = report.markdown;
                assert_no_negative_bound(&md);
                for (i, _) in md.match_indices("no CI") {
                    let explained = md[i..].starts_with("no CI: ") || md[..i].ends_with("1 rep, ");
                    assert!(
                        explained,
                        "{name} on {profile}, {reps} reps: unexplained at {}",
                        &md[i.saturating_sub(60)..i + 20]
                    );
                }
                assert!(!report.summary.claims.is_empty(), "{name}");
            }
        }
    }
}
