//! What the report tests share: a results directory made by the test itself (manifest + run
//! records with real HdrHistograms, figures chosen so that the expected values can be computed
//! by hand), writing and rendering it, and reading the rendered report back.
//!
//! Each test file uses a part of it.
#![allow(dead_code)]

use std::path::Path;

use echolab_core::experiment::{BenchMode, Cell, Experiment};
use echolab_core::hist::{self, LatencySummary};
use echolab_core::results::{
    run_file_name, CalibrationCheck, CalibrationRecord, Environment, ImageInfo, LinkRecord,
    Manifest, ResourceSample, RunRecord, RunStatus, Timings, MANIFEST_FILE, MANIFEST_SCHEMA,
    RUNS_DIR,
};
use echolab_core::stats::{BenchReport, SyscallStat};
use echolab_report::claims::Verdict;
use echolab_testkit::TempDir;

/// A fresh directory for a test's results, removed on drop unless `ECHOLAB_REPORT_KEEP` is set,
/// to look at the report a test made.
pub(crate) fn temp_dir(tag: &str) -> TempDir {
    TempDir::new(&format!("report-test-{tag}")).kept_when_set("ECHOLAB_REPORT_KEEP")
}

pub(crate) const EXPERIMENT: &str = r#"
name: exp-test
question: Do long connections beat short ones, and does select accept slower than epoll?
repetitions: 3
matrix:
  - servers: [epoll-lt, epoll-et]
    modes: [short, long]
    conns: [100]
    rounds: [10]
  - servers: [epoll-et]
    modes: [short, long]
    conns: [500]
    rounds: [10]
  - servers: [select, epoll-lt]
    modes: [connect-storm]
    conns: [100, 300]
  - servers: [select, epoll-lt]
    modes: [sustain]
    conns: [100, 200]
    duration: 2s
    reply_bytes: 1KiB
bench:
  strace: true
reference:
  source: seeds 000/003/004 (test copy)
  environment: 4-core VM
  figures:
    - cell: {server: epoll-et, mode: long, conns: 100}
      values: {qps: 53528, p50_us: 1265, p99_us: 1894}
  claims:
    - name: long/short gain, ET
      metric: qps
      numerator: {server: epoll-et, mode: long, conns: 100}
      denominator: {server: epoll-et, mode: short, conns: 100}
      seed_ratio: 2.15
      kind: magnitude
      tolerance: 15%
    - name: long/short gain, LT
      metric: qps
      numerator: {server: epoll-lt, mode: long, conns: 100}
      denominator: {server: epoll-lt, mode: short, conns: 100}
      seed_ratio: 1.48
      kind: magnitude
      tolerance: 15%
    - name: long/short at 500 connections, ET
      metric: qps
      numerator: {server: epoll-et, mode: long, conns: 500}
      denominator: {server: epoll-et, mode: short, conns: 500}
      seed_ratio: 1.86
      kind: magnitude
      tolerance: 15%
"#;

/// QPS of each repetition, by cell id. Chosen so that the claims (each ±15% of the seed's
/// ratio) come out reproduced (ET: ratio of geometric means 2.161, log-t interval 1.94–2.41,
/// inside 1.83–2.47), refuted (LT: 1.000, interval 0.953–1.05, wholly below 1.26–1.70) and
/// inconclusive (ET at 500: 1.17, interval 0.294–4.67 across 1.58–2.14; noisy long cell).
/// Interval values computed by hand (Python, `statistics` module) from the module doc's
/// formulas: Welch df = 2, t = 4.303.
pub(crate) fn qps_of(id: &str) -> [f64; 3] {
    match id {
        "epoll-lt_short_c100_r10" => [26000.0, 26500.0, 27000.0],
        "epoll-lt_long_c100_r10" => [26400.0, 26500.0, 26600.0],
        "epoll-et_short_c100_r10" => [24000.0, 25000.0, 26000.0],
        "epoll-et_long_c100_r10" => [53000.0, 54000.0, 55000.0],
        "epoll-et_short_c500_r10" => [30000.0, 31000.0, 32000.0],
        "epoll-et_long_c500_r10" => [20000.0, 40000.0, 60000.0],
        _ => [1000.0, 1100.0, 1200.0],
    }
}

/// The cell whose measured QPS is half of connections / mean latency (Little's law flag).
pub(crate) const CLIENT_BOUND: &str = "epoll-et_short_c500_r10";

/// Seed 002's strace summaries (s33-short.sum / s33-long.sum).
pub(crate) const STRACE_SHORT: &str = "% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 54.46    1.757608        1757      1000           connect
 45.54    1.469822        1463      1004           close
------ ----------- ----------- --------- --------- ----------------
100.00    3.227430                  2004           total
";
pub(crate) const STRACE_LONG: &str = "% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 45.88    0.197627        1976       100           connect
 54.12    0.233087        2241       104           close
------ ----------- ----------- --------- --------- ----------------
100.00    0.430714                   204           total
";

/// A latency histogram (ns) with mean `mean_ns`: 90% of 1000 requests at 0.9 × mean and 10%
/// at 1.9 × mean (0.9·0.9 + 0.1·1.9 = 1).
pub(crate) fn histogram(mean_ns: f64) -> (String, Option<LatencySummary>) {
    let mut h = hist::new_latency_histogram();
    for i in 0..1000 {
        let v = if i % 10 == 9 {
            1.9 * mean_ns
        } else {
            0.9 * mean_ns
        };
        // A fixture's mean below a nanosecond records at the histogram's 1 ns floor.
        let _ = hist::record_ns(&mut h, v as u64);
    }
    (hist::encode(&h), LatencySummary::from_histogram(&h))
}

pub(crate) fn record(cell: &Cell, rep: u64) -> RunRecord {
    let id = cell.id();
    let i = (rep - 1) as usize;
    let mut bench = BenchReport {
        tool: "echo-bench".into(),
        mode: cell.mode.name().into(),
        engine: "event".into(),
        conns: cell.conns,
        rounds: cell.rounds,
        payload_bytes: cell.payload,
        duration_s: 1.0,
        ..Default::default()
    };
    let mut samples = Vec::new();
    let mut strace = None;
    match cell.mode {
        BenchMode::Short | BenchMode::Long => {
            let qps = qps_of(&id)[i];
            // Little's law: mean latency = conns / QPS; the client-bound cell measures half.
            let consistent_qps = if id == CLIENT_BOUND { 2.0 * qps } else { qps };
            let (h, summary) = histogram(cell.conns as f64 / consistent_qps * 1e9);
            bench.qps = qps;
            bench.requests_ok = qps as u64;
            bench.histogram = h;
            bench.latency_us = summary;
            let short = cell.mode == BenchMode::Short;
            let per_conn = cell.rounds.unwrap_or(1);
            let n = if short {
                cell.conns * per_conn
            } else {
                cell.conns
            };
            bench.syscalls.insert(
                "connect".into(),
                SyscallStat {
                    count: n,
                    total_ns: Some(n * 1_500_000),
                },
            );
            bench.syscalls.insert(
                "close".into(),
                SyscallStat {
                    count: n + 4,
                    total_ns: Some((n + 4) * 1_400_000),
                },
            );
            if cell.server == "epoll-lt" {
                strace = Some(if short { STRACE_SHORT } else { STRACE_LONG }.to_string());
            }
        }
        BenchMode::ConnectStorm => {
            let base = match (cell.server.as_str(), cell.conns) {
                ("select", 300) => 6.0,
                ("select", _) => 0.10,
                (_, 300) => 0.02,
                _ => 0.01,
            };
            let t = base * [1.0, 1.0 + 1.0 / 60.0, 1.0 + 2.0 / 60.0][i];
            bench.extra.time_to_establish_s = Some(t);
        }
        BenchMode::Sustain => {
            bench.qps = 5000.0;
            let cpu = if cell.server == "select" { 28.0 } else { 21.0 } * cell.conns as f64 / 100.0;
            samples = (0..4)
                .map(|k| ResourceSample {
                    t_s: k as f64,
                    cpu_pct: cpu + i as f64,
                    mem_bytes: 1 << 20,
                    mem_pct: 0.3,
                    ..Default::default()
                })
                .collect();
        }
    }
    RunRecord {
        cell: cell.clone(),
        repetition: rep,
        started_at: "2026-11-30T01:57:37.000000Z".into(),
        wall_s: 2.0,
        bench: Some(bench),
        server: None,
        server_pid: None,
        samples,
        settle: None,
        link: None,
        strace,
        error: None,
    }
}

pub(crate) fn manifest(experiment: Experiment, status: RunStatus, runs_done: u64) -> Manifest {
    let runs_planned = experiment.cells().len() as u64 * experiment.repetitions;
    let mut cal = CalibrationRecord {
        passed: true,
        reason: "RTT within tolerance".into(),
        ..Default::default()
    };
    cal.measured.insert("rtt_median_us".into(), 45.0);
    cal.expected.insert("rtt_median_us".into(), 50.0);
    cal.checks.push(CalibrationCheck {
        name: "rtt_median".into(),
        unit: "us".into(),
        measured: 45.0,
        low: 40.0,
        high: 140.0,
        pass: true,
        reason: String::new(),
    });
    Manifest {
        schema: MANIFEST_SCHEMA.into(),
        run_id: "20261130T015737Z-exp-test-loopback".into(),
        status,
        launcher: None,
        error: None,
        created_at: "2026-11-30T01:57:37.000000Z".into(),
        finished_at: Some("2026-11-30T02:07:37.000000Z".into()),
        args: vec![
            "--profile".into(),
            "loopback".into(),
            "--experiment".into(),
            "exp-test".into(),
        ],
        backend: "docker".into(),
        experiment,
        profile: echolab_testkit::fixtures::recorded_loopback_profile(),
        inputs: Default::default(),
        environment: Environment {
            kernel: "6.1.0-test-amd64".into(),
            cpu_model: "Test CPU @ 2.40GHz".into(),
            cpus: 2,
            mem_bytes: 24 << 30,
            docker_version: "27.0.3".into(),
            git_rev: "0123abcd-dirty".into(),
            echolab_version: "0.1.0".into(),
            tcp_congestion_control: "cubic".into(),
        },
        image: ImageInfo {
            reference: "echolab:feedface".into(),
            id: "sha256:feedface00".into(),
            binaries: Default::default(),
        },
        hosts: Default::default(),
        link: LinkRecord {
            backend: "none".into(),
            reason: "loopback topology".into(),
            installed: serde_json::Value::Null,
            calibration: Some(cal),
        },
        runs_planned,
        runs_done,
        timings: Timings::default(),
        cpu_plan: None,
        order: None,
        privileges: Default::default(),
        engines: Default::default(),
        plan: None,
    }
}

/// Writes a results directory; `keep(cell_id, rep)` decides which records exist, `fail`
/// which ones carry an error.
pub(crate) fn results_dir(
    dir: &Path,
    status: RunStatus,
    keep: impl Fn(&str, u64) -> bool,
    fail: impl Fn(&str, u64) -> Option<&'static str>,
) {
    let experiment = Experiment::parse(EXPERIMENT, "exp-test.yaml").unwrap();
    std::fs::create_dir_all(dir.join(RUNS_DIR)).unwrap();
    let mut done = 0;
    for cell in experiment.cells() {
        for rep in 1..=experiment.repetitions {
            if !keep(&cell.id(), rep) {
                continue;
            }
            let mut r = record(&cell, rep);
            if let Some(e) = fail(&cell.id(), rep) {
                r.error = Some(e.into());
                r.bench = None;
            }
            std::fs::write(
                dir.join(RUNS_DIR).join(run_file_name(&cell, rep)),
                serde_json::to_string_pretty(&r).unwrap(),
            )
            .unwrap();
            done += 1;
        }
    }
    let m = manifest(experiment, status, done);
    std::fs::write(dir.join(MANIFEST_FILE), serde_yaml::to_string(&m).unwrap()).unwrap();
}

/// The body of the section whose heading starts with `## {title}`, up to the next heading.
pub(crate) fn section<'m>(md: &'m str, title: &str) -> &'m str {
    let start = md
        .find(&format!("## {title}"))
        .unwrap_or_else(|| panic!("no section {title:?} in:\n{md}"));
    let rest = &md[start + 3..];
    &rest[..rest.find("\n## ").unwrap_or(rest.len())]
}

/// The cells of the table row whose first cell is `key`, in `text`.
pub(crate) fn row(text: &str, key: &str) -> Vec<String> {
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("| {key} |")))
        .unwrap_or_else(|| panic!("no row {key:?} in:\n{text}"));
    line.trim_matches('|')
        .split(" | ")
        .map(|c| c.trim().to_string())
        .collect()
}

/// The text of every `<text>` element of an SVG document, trimmed and unescaped.
pub(crate) fn svg_texts(svg: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = svg;
    while let Some(start) = rest.find("<text") {
        let open_end = start + rest[start..].find('>').unwrap() + 1;
        let close = open_end + rest[open_end..].find("</text>").unwrap();
        out.push(
            rest[open_end..close]
                .trim()
                .replace("&apos;", "'")
                .replace("&quot;", "\"")
                .replace("&lt;", "<")
                .replace("&gt;", ">")
                .replace("&amp;", "&"),
        );
        rest = &rest[close..];
    }
    out
}

/// Each of `ticks` is the text of exactly one `<text>` element of `texts`.
pub(crate) fn assert_ticks_once(texts: &[String], ticks: &[&str]) {
    for tick in ticks {
        let n = texts.iter().filter(|t| t == tick).count();
        assert_eq!(n, 1, "tick {tick} labelled {n} times in {texts:?}");
    }
}

/// A shipped experiment file, as the launcher loads it.
pub(crate) fn shipped(name: &str) -> Experiment {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../experiments/{name}.yaml"));
    Experiment::load(&path).unwrap()
}

/// A short or long run as echo-bench reports it: `qps`, latency with mean `mean_us` (P50 =
/// 0.9 × mean, see [`histogram`]), and the client's connect/close counts without extra
/// closes: conns × rounds for short, conns for long, 1.5 ms per call.
pub(crate) fn closed_loop_run(cell: &Cell, rep: u64, qps: f64, mean_us: f64) -> RunRecord {
    let (h, latency) = histogram(mean_us * 1000.0);
    let calls = if cell.mode == BenchMode::Short {
        cell.conns * cell.rounds.unwrap_or(1)
    } else {
        cell.conns
    };
    let mut bench = BenchReport {
        tool: "echo-bench".into(),
        mode: cell.mode.name().into(),
        conns: cell.conns,
        rounds: cell.rounds,
        payload_bytes: cell.payload,
        duration_s: 1.0,
        qps,
        requests_ok: qps as u64,
        histogram: h,
        latency_us: latency,
        ..Default::default()
    };
    for name in ["connect", "close"] {
        bench.syscalls.insert(
            name.into(),
            SyscallStat {
                count: calls,
                total_ns: Some(calls * (1_500_000 + rep * 1000)),
            },
        );
    }
    RunRecord {
        cell: cell.clone(),
        repetition: rep,
        started_at: "2026-11-30T01:57:37.000000Z".into(),
        wall_s: 1.0,
        bench: Some(bench),
        server: None,
        server_pid: None,
        samples: Vec::new(),
        settle: None,
        link: None,
        strace: None,
        error: None,
    }
}

/// Writes `manifest` and `runs` as a results directory.
pub(crate) fn write_dir(dir: &Path, manifest: &Manifest, runs: &[RunRecord]) {
    std::fs::create_dir_all(dir.join(RUNS_DIR)).unwrap();
    for r in runs {
        std::fs::write(
            dir.join(RUNS_DIR)
                .join(run_file_name(&r.cell, r.repetition)),
            serde_json::to_string_pretty(r).unwrap(),
        )
        .unwrap();
    }
    std::fs::write(
        dir.join(MANIFEST_FILE),
        serde_yaml::to_string(manifest).unwrap(),
    )
    .unwrap();
}

/// Writes `manifest` and `runs` to a fresh directory tagged `tag` and renders it: the
/// directory (kept alive), the summary and report.md.
pub(crate) fn rendered(
    tag: &str,
    manifest: &Manifest,
    runs: &[RunRecord],
) -> (TempDir, echolab_report::ReportSummary, String) {
    let tmp = temp_dir(tag);
    write_dir(tmp.path(), manifest, runs);
    let summary = echolab_report::render(tmp.path()).unwrap();
    let md = std::fs::read_to_string(tmp.path().join("report.md")).unwrap();
    (tmp, summary, md)
}

/// exp31 as published, every cell at 26000, 26500 and 27000 req/s with the mean latency
/// Little's law gives (conns / QPS): a steady run for tests that change one aspect of it.
pub(crate) fn steady_exp31() -> (Experiment, Vec<RunRecord>) {
    let e = shipped("exp31").as_published();
    let runs = closed_loop_runs(
        &e,
        |_| vec![26000.0, 26500.0, 27000.0],
        |c, q| c.conns as f64 / q * 1e6,
    );
    (e, runs)
}

/// QPS per repetition (differing), as in the claims test data: ET gain 2.161×, LT 3.09×.
pub(crate) fn exp31_qps(c: &Cell) -> Vec<f64> {
    match (c.server.as_str(), c.mode) {
        ("epoll-et", BenchMode::Short) => vec![24000.0, 25000.0, 26000.0],
        ("epoll-et", _) => vec![53000.0, 54000.0, 55000.0],
        ("epoll-lt", BenchMode::Short) => vec![26000.0, 26500.0, 27000.0],
        _ => vec![80000.0, 82000.0, 84000.0],
    }
}

/// Closed-loop runs of every cell of `e`: QPS per repetition from `qps(cell)`, mean latency
/// from Little's law (conns / QPS) unless `mean_us` says otherwise.
pub(crate) fn closed_loop_runs(
    e: &Experiment,
    qps: impl Fn(&Cell) -> Vec<f64>,
    mean_us: impl Fn(&Cell, f64) -> f64,
) -> Vec<RunRecord> {
    e.cells()
        .iter()
        .flat_map(|c| {
            qps(c)
                .into_iter()
                .enumerate()
                .map(|(i, q)| closed_loop_run(c, i as u64 + 1, q, mean_us(c, q)))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Every `95% CI lo–hi` of `md` has a lower bound that is not negative; changes in % (a
/// ratio − 1, `-90.0%`) are the one signed quantity and may be.
pub(crate) fn assert_no_negative_bound(md: &str) {
    for (i, _) in md.match_indices("95% CI ") {
        let rest = &md[i + "95% CI ".len()..];
        let first: String = rest
            .chars()
            .take_while(|c| !matches!(c, '–' | ' ' | ')' | '×'))
            .collect();
        assert!(
            !first.starts_with(['-', '−']) || first.ends_with('%'),
            "negative bound at: {}",
            &rest[..rest.len().min(40)]
        );
    }
}

pub(crate) fn verdicts(summary: &echolab_report::ReportSummary) -> Vec<(String, Verdict)> {
    summary.claims.clone()
}
