//! Verdicts that explain: the verdict table opens the report, every cell gets its bound label
//! from its own records and the seed's mechanisms are computed from the run's costs (the
//! attribution under `explain/` is tests/attribution.rs). Every figure here comes
//! from repetitions that differ from each other, so a computation that drops, repeats or
//! double-counts one gives another number than the one worked out by hand.

mod common;

use common::{closed_loop_runs, exp31_qps, manifest, rendered, row, section, shipped};
use echolab_core::experiment::{BenchMode, Cell};
use echolab_core::results::{ResourceSample, RunRecord, RunStatus};
use echolab_core::stats::{CpuTime, ServerStats};

/// (server CPU % of a core, client CPU % of a core) per repetition.
fn loads(c: &Cell) -> [(f64, f64); 3] {
    match (c.server.as_str(), c.mode) {
        // Server-bound: the server at 94–98%, the client at half a core.
        ("epoll-et", BenchMode::Short) => [(94.0, 50.0), (96.0, 50.0), (98.0, 50.0)],
        ("epoll-et", _) => [(90.0, 40.0), (92.0, 40.0), (94.0, 40.0)],
        // Client-bound: the client at 99%, the server at 60%.
        ("epoll-lt", BenchMode::Short) => [(60.0, 99.0), (61.0, 99.0), (59.0, 99.0)],
        // Both at their limit, the client steadily ahead by under a point (as exp31's long
        // cells measure): a lead whose interval excludes 0 but is below 5 points names both.
        _ => [(98.6, 99.5), (98.5, 99.5), (98.7, 99.5)],
    }
}

/// `run` with one server CPU sample over its 1 s window, the client's CPU time, and server
/// counters: 3 system calls and 1.5 events per request it read.
fn with_costs(mut run: RunRecord) -> RunRecord {
    let (server, client) = loads(&run.cell)[run.repetition as usize - 1];
    run.samples = vec![ResourceSample {
        t_s: 1.5,
        cpu_pct: server,
        cpu_user_pct: Some(server / 4.0),
        cpu_sys_pct: Some(server * 3.0 / 4.0),
        ..Default::default()
    }];
    let b = run.bench.as_mut().unwrap();
    b.client_cpu = CpuTime {
        user_s: client / 100.0 * 0.1,
        sys_s: client / 100.0 * 0.9,
    };
    b.cpus = "1".into();
    b.threads = 1;
    b.engine = "event".into();
    let read = b.requests_ok * 2;
    let mut s = ServerStats::default();
    s.totals.bytes_in = read * run.cell.payload;
    s.totals.events_returned = read * 3 / 2;
    for name in ["read", "write", "epoll_wait"] {
        s.totals.syscalls.insert(
            name.into(),
            echolab_core::stats::SyscallStat {
                count: read,
                total_ns: None,
            },
        );
    }
    run.server = Some(s);
    run
}

fn exp31_runs() -> (echolab_core::experiment::Experiment, Vec<RunRecord>) {
    let e = shipped("exp31");
    let runs = closed_loop_runs(&e, exp31_qps, |c, q| c.conns as f64 / q * 1e6)
        .into_iter()
        .map(with_costs)
        .collect();
    (e, runs)
}

#[test]
fn the_report_opens_with_the_verdicts_and_states_the_setting_once() {
    let (e, runs) = exp31_runs();
    let (_tmp, summary, md) = rendered("verdicts", &manifest(e, RunStatus::Complete, 12), &runs);
    let first = md.split("\n## ").nth(1).unwrap();
    assert!(first.starts_with("Verdicts\n"), "{md}");
    assert_eq!(summary.verdicts.len(), 5);
    // The seed's ET gain from its own rounds (seed 000 §5): 2.25× with an interval far wider
    // than the claim's ±15%, so our 2.16× can neither reproduce nor refute it.
    let et = row(first, "long/short QPS gain, ET server");
    assert_eq!(et[1], "2.25× (95% CI 0.815–6.23×, 3/3 rounds)");
    assert_eq!(et[3], "**seed too spread to decide**");
    // The per-claim setting paragraph is gone: the table states it once.
    assert_eq!(md.matches("### Setting: seed vs here").count(), 1, "{md}");
    assert_eq!(
        md.matches("Setting: this run differs from the seed: ")
            .count(),
        1,
        "{md}"
    );
    let cores = row(section(&md, "Verdicts"), "logical CPUs");
    assert_eq!(&cores[1..4], ["4", "2", "yes"]);
    // The terminal form names each verdict first.
    let text = echolab_report::verdicts::text(&summary.verdicts);
    assert!(
        text.starts_with(
            "  seed too spread to decide: long/short QPS gain, ET server (seed 2.25× (95% CI \
             0.815–6.23×, 3/3 rounds), here 2.16×"
        ),
        "{text}"
    );
}

#[test]
fn every_cell_gets_its_bound_from_its_own_records() {
    let (e, runs) = exp31_runs();
    let (_tmp, _, md) = rendered("bounds", &manifest(e, RunStatus::Complete, 12), &runs);
    let s = section(&md, "What bounds each cell");
    let label = |id: &str| row(s, id)[1].clone();
    assert_eq!(label("epoll-et_short_c100_d1s"), "**server-bound**");
    assert_eq!(label("epoll-et_long_c100_d1s"), "**server-bound**");
    assert_eq!(label("epoll-lt_short_c100_d1s"), "**client-bound**");
    assert_eq!(
        label("epoll-lt_long_c100_d1s"),
        "**server- and client-bound**"
    );
    let et_short = row(s, "epoll-et_short_c100_d1s");
    // Median server load 96%; CPU per request: 94e4/24000, 96e4/25000, 98e4/26000 µs, median
    // 38.4 (user a quarter, 9.60; kernel 28.8); client 50% over 25000 req/s median: 20.0 µs
    // (2.00 + 18.0); 3 calls per request read by the server; the client made none here.
    assert_eq!(et_short[2], "96.0% of 1");
    assert_eq!(et_short[5], "38.4 (9.60 + 28.8)");
    assert_eq!(et_short[6], "20.0 (2.00 + 18.0)");
    assert_eq!(et_short[7], "3.00");
    // Path share: 2 round trips × RTT 45 µs over a median mean latency of 100/25000 s =
    // 4000 µs, 2.25%, as the histogram's mean reads it.
    assert_eq!(et_short[4], "2.3%");
}

#[test]
fn the_gain_is_predicted_from_the_servers_cpu_per_request() {
    let (e, runs) = exp31_runs();
    let (_tmp, _, md) = rendered("mechanisms", &manifest(e, RunStatus::Complete, 12), &runs);
    let s = section(&md, "Mechanisms, checked from this run's costs");
    // ET: geometric means of the per-repetition costs, 38.415 µs short and 17.036 µs long:
    // 2.25× predicted against 2.16× measured (exp31 repeats 3 to 10 times, so the interval is
    // the design's repeated one, 1.83–2.56×, inside ±25% of 2.25×), which the utilisation law
    // makes an identity: consistent, not a mechanism that holds.
    let et = s
        .lines()
        .find(|l| l.contains("the gain is the server's CPU per request (ET)"))
        .unwrap();
    assert!(
        et.contains(
            "predicts 2.25× (95% CI 2.09–2.43×), measured 2.16× (95% CI 1.83–2.56×): consistent (an identity, not a test)"
        ) && et.contains("the utilisation law"),
        "{et}"
    );
    // LT short is client-bound: the prediction says what it leaves out.
    let lt = s
        .lines()
        .find(|l| l.contains("the gain is the server's CPU per request (LT)"))
        .unwrap();
    assert!(lt.contains("What the prediction leaves out here"), "{lt}");
    assert!(
        lt.contains("epoll-lt_short_c100_d1s is client-bound"),
        "{lt}"
    );
    // P50: round trips predict (45 + 17.0) / (90 + 38.4) = 0.483 on ET; Little's law, an
    // identity of a closed loop, gives the inverse QPS ratio, 0.463, which the data follow.
    let p50 = s
        .lines()
        .find(|l| l.contains("P50 follows round trips (ET)"))
        .unwrap();
    // The prediction's interval over the repetitions (each one's own server CPU, the RTT fixed).
    assert!(
        p50.contains("predicts 0.483× (95% CI 0.472–0.494×), measured 0.463×"),
        "{p50}"
    );
    // Its verdict carries both uncertainties: measured over predicted, 0.463 / 0.483 = 0.958,
    // with the P50s' and the predictions' spread, inside the ±25% band [0.8, 1.25].
    assert!(
        p50.contains("measured/predicted 0.958× (95% CI 0.808–1.14×): holds here"),
        "{p50}"
    );
    assert!(
        p50.contains("inverse QPS ratio 0.463× against the P50 ratio, consistent"),
        "{p50}"
    );
    assert!(!p50.contains("which holds here"), "{p50}");
}

#[test]
fn a_server_cost_mechanism_on_cells_the_server_does_not_pace_is_not_testable() {
    // The ET cells at a third of a core on both sides (unsaturated, as exp31 on crossnet is
    // path-bound): the server's cost cannot set QPS there, whatever the prediction says.
    let (e, runs) = exp31_runs();
    let runs: Vec<RunRecord> = runs
        .into_iter()
        .map(|mut r| {
            if r.cell.server == "epoll-et" {
                let load = 30.0 + r.repetition as f64;
                r.samples[0].cpu_pct = load;
                r.samples[0].cpu_user_pct = Some(load / 4.0);
                r.samples[0].cpu_sys_pct = Some(load * 3.0 / 4.0);
                let b = r.bench.as_mut().unwrap();
                b.client_cpu = CpuTime {
                    user_s: load / 100.0 * 0.1,
                    sys_s: load / 100.0 * 0.9,
                };
            }
            r
        })
        .collect();
    let (_tmp, _, md) = rendered("untestable", &manifest(e, RunStatus::Complete, 12), &runs);
    let s = section(&md, "Mechanisms, checked from this run's costs");
    let line = |what: &str| s.lines().find(|l| l.contains(what)).unwrap().to_string();
    let et = line("the gain is the server's CPU per request (ET)");
    assert!(et.contains("): not testable here"), "{et}");
    // LT's short cell is client-bound: a server cost compares two cells the server paces,
    // so one it does not pace makes it untestable too.
    let lt = line("the gain is the server's CPU per request (LT)");
    assert!(lt.contains("): not testable here"), "{lt}");
    // The round-trip mechanism is not a server-cost one: judged on the same ET cells.
    let p50 = line("P50 follows round trips (ET)");
    assert!(!p50.contains("not testable"), "{p50}");
}
