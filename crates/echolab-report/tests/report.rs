//! A results directory made by the test itself (manifest + run records with real HdrHistograms),
//! rendered, and checked against numbers computed here by hand: the tables' figures, the
//! claims' verdicts, the Little's-law flag, a partial directory, and a directory that is not a
//! results directory.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use echolab_core::experiment::{BenchMode, Cell, Experiment};
use echolab_core::hist::{self, LatencySummary};
use echolab_core::results::{
    run_file_name, CalibrationCheck, CalibrationRecord, Environment, ImageInfo, LinkRecord,
    Manifest, ResourceSample, RunRecord, RunStatus, Timings, MANIFEST_FILE, MANIFEST_SCHEMA,
    RUNS_DIR,
};
use echolab_core::stats::{BenchReport, SyscallStat};
use echolab_report::claims::Verdict;

/// A directory under the system temp dir, removed on drop (also when a test fails), unless
/// `ECHOLAB_REPORT_KEEP` is set, to look at the report a test made.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "echolab-report-test-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::env::var_os("ECHOLAB_REPORT_KEEP").is_some() {
            eprintln!("kept {}", self.0.display());
            return;
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const EXPERIMENT: &str = r#"
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
fn qps_of(id: &str) -> [f64; 3] {
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
const CLIENT_BOUND: &str = "epoll-et_short_c500_r10";

/// Seed 002's strace summaries (s33-short.sum / s33-long.sum).
const STRACE_SHORT: &str = "% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 54.46    1.757608        1757      1000           connect
 45.54    1.469822        1463      1004           close
------ ----------- ----------- --------- --------- ----------------
100.00    3.227430                  2004           total
";
const STRACE_LONG: &str = "% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 45.88    0.197627        1976       100           connect
 54.12    0.233087        2241       104           close
------ ----------- ----------- --------- --------- ----------------
100.00    0.430714                   204           total
";

/// A latency histogram (ns) with mean `mean_ns`: 90% of 1000 requests at 0.9 × mean and 10%
/// at 1.9 × mean (0.9·0.9 + 0.1·1.9 = 1).
fn histogram(mean_ns: f64) -> (String, LatencySummary) {
    let mut h = hist::new_latency_histogram();
    for i in 0..1000 {
        let v = if i % 10 == 9 {
            1.9 * mean_ns
        } else {
            0.9 * mean_ns
        };
        hist::record_ns(&mut h, v as u64);
    }
    (hist::encode(&h), LatencySummary::from_histogram(&h))
}

fn record(cell: &Cell, rep: u64) -> RunRecord {
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
            bench
                .extra
                .insert("time_to_establish_s".into(), serde_json::json!(t));
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
        samples,
        settle: None,
        link: None,
        strace,
        error: None,
    }
}

fn manifest(experiment: Experiment, status: RunStatus, runs_done: u64) -> Manifest {
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
        profile: serde_json::json!({"name": "loopback", "topology": "loopback", "description": "one machine, 127.0.0.1"}),
        inputs: Default::default(),
        environment: Environment {
            kernel: "6.1.0-test-amd64".into(),
            cpu_model: "Test CPU @ 2.40GHz".into(),
            cpus: 2,
            mem_bytes: 24 << 30,
            docker_version: "27.0.3".into(),
            git_rev: "0123abcd-dirty".into(),
            echolab_version: "0.1.0".into(),
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
    }
}

/// Writes a results directory; `keep(cell_id, rep)` decides which records exist, `fail`
/// which ones carry an error.
fn results_dir(
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
fn section<'m>(md: &'m str, title: &str) -> &'m str {
    let start = md
        .find(&format!("## {title}"))
        .unwrap_or_else(|| panic!("no section {title:?} in:\n{md}"));
    let rest = &md[start + 3..];
    &rest[..rest.find("\n## ").unwrap_or(rest.len())]
}

/// The cells of the table row whose first cell is `key`, in `text`.
fn row(text: &str, key: &str) -> Vec<String> {
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("| {key} |")))
        .unwrap_or_else(|| panic!("no row {key:?} in:\n{text}"));
    line.trim_matches('|')
        .split(" | ")
        .map(|c| c.trim().to_string())
        .collect()
}

#[test]
fn a_complete_directory_gives_golden_tables_verdicts_and_flags() {
    let tmp = TempDir::new("complete");
    results_dir(&tmp.0, RunStatus::Complete, |_, _| true, |_, _| None);
    let summary = echolab_report::render(&tmp.0).unwrap();
    let md = std::fs::read_to_string(tmp.0.join("report.md")).unwrap();

    // Header: what the numbers are.
    for needle in [
        "complete (run status: complete)",
        "42 usable of 42 planned",
        "loopback (loopback topology)",
        "Calibration passed",
        "| rtt_median | 45.0 us | 40.0–140 us | pass |",
        "Measured: rtt_median_us 45.0 (nominal 50.0).",
        "6.1.0-test-amd64",
        "sha256:feedface00",
        "0123abcd-dirty",
        "Test CPU @ 2.40GHz",
        "27.0.3",
        "2026-11-30T01:57:37.000000Z",
        "| Link backend | none (loopback topology) |",
    ] {
        assert!(md.contains(needle), "header lacks {needle:?}:\n{md}");
    }
    assert!(summary.complete);
    assert_eq!(summary.counts.planned, 42);

    // (a) Four-quadrant matrix: medians with range, gain as a ratio of means.
    let quad = section(
        &md,
        "QPS matrix, server × mode (100 connections, 10 rounds)",
    );
    let et = row(quad, "epoll-et");
    assert!(
        // exp(mean ln ± 4.303 · sd ln / √3) of 24000, 25000, 26000.
        et[1].starts_with("25000 [24000–26000] (95% CI 22622–27599)"),
        "{et:?}"
    );
    assert!(et[2].starts_with("54000 [53000–55000]"), "{et:?}");
    assert!(et[3].starts_with("2.16× (95% CI 1.94–2.41×)"), "{et:?}");
    assert_eq!(et[4], "0 / 0", "failures by kind, short / long");
    let lt = row(quad, "epoll-lt");
    assert!(lt[3].starts_with("1.00×"), "{lt:?}");
    let gap = row(quad, "Gap epoll-et/epoll-lt");
    // Geometric means: 24987 / 26497 = 0.943; 53994 / 26500 = 2.038.
    assert!(
        gap[1].starts_with("0.943× (95% CI 0.845–1.05×)")
            && gap[2].starts_with("2.04× (95% CI 1.94–2.14×)"),
        "{gap:?}"
    );
    // The seed's figure beside it: our geometric mean, (53000 × 54000 × 55000)^(1/3) =
    // 53993.8, inside its own interval; 53993.8 / 53528 = 1.01.
    assert!(
        quad.contains(
            "| qps (req/s) | epoll-et_long_c100_r10 | 53528 | 53994 (51566–56536) | 1.01× |"
        ),
        "{quad}"
    );

    // Latency ratios beside (a): P50 = 0.9 × conns / QPS per repetition, so ET long/short is
    // the inverse of the QPS ratio of geometric means, 1 / 2.161 = 0.463 (interval
    // 0.415–0.516), and ET/LT long 1 / 2.038 = 0.491 (HdrHistogram buckets move the third
    // digit by at most 0.1%).
    let lat = section(
        &md,
        "Latency ratios, server × mode (100 connections, 10 rounds)",
    );
    assert!(
        row(lat, "epoll-et long/short")[1].starts_with("0.463× (95% CI 0.41"),
        "{lat}"
    );
    assert!(
        row(lat, "Long epoll-et/epoll-lt")[1].starts_with("0.491× (95% CI"),
        "{lat}"
    );

    // (3) Verdicts, one of each, beside the table.
    assert!(
        quad.contains(
            "long/short gain, ET: seed 2.15×, here 2.16× (95% CI 1.94–2.41×); band 1.83–2.47× (magnitude ±15%): \
             **reproduced**: our 95% CI 1.94–2.41× lies inside the band."
        ),
        "{quad}"
    );
    assert!(
        quad.contains("long/short gain, LT: seed 1.48×, here 1.00×"),
        "{quad}"
    );
    assert!(quad.contains("band 1.26–1.70× (magnitude ±15%): **refuted**: our 95% CI 0.953–1.05× lies wholly below the band."), "{quad}");
    let verdicts: Vec<(&str, Verdict)> = summary
        .claims
        .iter()
        .map(|(n, v)| (n.as_str(), *v))
        .collect();
    assert_eq!(
        verdicts,
        vec![
            ("long/short gain, ET", Verdict::Reproduced),
            ("long/short gain, LT", Verdict::Refuted),
            ("long/short at 500 connections, ET", Verdict::Inconclusive),
        ]
    );

    // (b) Per repetition, with the range and the noisy flag.
    let reps = section(&md, "QPS per repetition");
    assert_eq!(
        row(reps, "epoll-et_long_c500_r10"),
        [
            "epoll-et_long_c500_r10",
            "20000",
            "40000",
            "60000",
            "40000",
            "40000",
            "50.0% ⚠ noisy",
            "0"
        ]
    );
    assert_eq!(
        row(reps, "epoll-lt_long_c100_r10")[4..],
        ["26500", "200", "0.4%", "0"]
    );
    assert!(
        summary
            .noisy
            .iter()
            .any(|n| n.starts_with("epoll-et_long_c500_r10 (qps CV 50.0%")),
        "{:?}",
        summary.noisy
    );

    // (c) Percentiles: 90% of requests at 0.9 × mean, so the median P50 of the LT short cell
    // (26500 QPS) is 0.9 × 100 / 26500 s = 3396.2 µs; HdrHistogram reports the highest value
    // of its bucket (3 significant digits), 3398 µs, within 0.1%.
    let pct = section(&md, "Latency percentiles per cell");
    let lt_short = row(pct, "epoll-lt_short_c100_r10");
    assert!(lt_short[2].starts_with("3398 [3334–3463]"), "{lt_short:?}");
    let p50: f64 = lt_short[2].split(' ').next().unwrap().parse().unwrap();
    assert!((p50 / 3396.2 - 1.0).abs() < 0.001, "{p50}");
    // P99 is in the 10% at 1.9 × mean: 7170 µs; merged P99.9 is the slowest repetition's.
    assert!(lt_short[4].starts_with("7172 ["), "{lt_short:?}");
    assert!(lt_short[5].ends_with("/ 7311"), "{lt_short:?}");

    // (d) The scan of epoll-et over 100 and 500 connections, inconclusive claim beside it.
    let scan = section(&md, "Connection scan, epoll-et (10 rounds)");
    let at500 = row(scan, "500");
    assert!(
        at500[1].starts_with("31000 [30000–32000]") && at500[2].starts_with("40000 [20000–60000]"),
        "{at500:?}"
    );
    // Ratio of geometric means 36342 / 30989 = 1.17 (by hand, see qps_of), interval
    // 0.294–4.67×: positive however noisy the cell, and wider than the whole band.
    assert!(
        at500[3].starts_with("1.17× (95% CI 0.294–4.67×)"),
        "{at500:?}"
    );
    assert_eq!(at500[7], "0 / 0", "failures by kind");
    assert!(scan.contains("long/short at 500 connections, ET: seed 1.86×, here 1.17× (95% CI 0.294–4.67×); band 1.58–2.14× \
         (magnitude ±15%): **inconclusive**: our 95% CI 0.294–4.67× is wider than the band"), "{scan}");

    // (e) Syscalls: echo-bench's counts and the strace cross-check, seed 002's figures.
    let sys = section(
        &md,
        "Client system calls, short vs long (epoll-lt, 100 connections)",
    );
    let close = row(sys, "close() calls");
    assert!(
        close[1].starts_with("1004")
            && close[2].starts_with("104")
            && close[3].starts_with("-89.6%"),
        "{close:?}"
    );
    let strace_close_time = row(sys, "close() total time (s), strace");
    assert!(
        strace_close_time[1].starts_with("1.47") && strace_close_time[3].starts_with("-84.1%"),
        "{strace_close_time:?}"
    );
    let strace_total = row(sys, "total time of the above, strace (s)");
    assert!(
        strace_total[1].starts_with("3.23")
            && strace_total[2].starts_with("0.431")
            && strace_total[3].starts_with("-86.7%"),
        "{strace_total:?}"
    );

    // (f) Connect storm and sustain, per connection count, select vs epoll.
    let storm = section(&md, "Connect storm");
    let at300 = row(storm, "300");
    assert!(
        at300[1].starts_with("6.10 [6.00–6.20]") && at300[4].starts_with("0.0203 [0.0200–0.0207]"),
        "{at300:?}"
    );
    // Every repetition of select is 300× epoll's (6.0 vs 0.02, same spread): a ratio of means.
    assert!(at300[7].starts_with("300.00× (95% CI"), "{at300:?}");
    assert_eq!(
        (at300[3].as_str(), at300[6].as_str()),
        ("0", "0"),
        "failures by kind"
    );
    let sustain = section(&md, "Sustain");
    let at200 = row(sustain, "200");
    // select: 56 + rep − 1 → 56, 57, 58; epoll: 42, 43, 44.
    assert!(
        at200[1].starts_with("57.0 [56.0–58.0]") && at200[5].starts_with("43.0 [42.0–44.0]"),
        "{at200:?}"
    );

    // (4) Little's law: only the client-bound cell is flagged, by −50%.
    let ll = section(&md, "Consistency: Little's law");
    let bad = row(ll, CLIENT_BOUND);
    assert!(
        bad[4].starts_with("0.500 [0.500–0.500]") && bad[5].contains("R1 -50.0%"),
        "{bad:?}"
    );
    assert_eq!(row(ll, "epoll-et_long_c100_r10")[5], "ok");
    assert_eq!(summary.littles_law_flagged, vec![CLIENT_BOUND.to_string()]);

    // (5) Plots with labelled axes: 1-2-5 ticks on the log axes, each labelled once.
    let plots = tmp.0.join("plots");
    let qps_texts = svg_texts(&std::fs::read_to_string(plots.join("qps_vs_conns.svg")).unwrap());
    // Connections 100 and 500: the axis runs from 50 to 1000 (1-2-5 ends around 100/1.1 and
    // 500 × 1.1).
    assert_ticks_once(&qps_texts, &["50", "100", "200", "500", "1000"]);
    assert!(
        qps_texts.iter().any(|t| t == "epoll-et long (seed)"),
        "seed drawn: {qps_texts:?}"
    );
    assert!(
        qps_texts
            .iter()
            .any(|t| t == "bar: min–max over repetitions"),
        "{qps_texts:?}"
    );
    // Latency of ET long (mean 1852 µs: 1667 and 3519 µs): y from 1000 to 5000 µs.
    let lat_texts = svg_texts(
        &std::fs::read_to_string(plots.join("latency_epoll-et_long_c100_r10.svg")).unwrap(),
    );
    assert_ticks_once(&lat_texts, &["1000", "2000", "5000", "50%", "90%", "99%"]);
    assert!(
        lat_texts.iter().any(|t| t == "seed P50 / P90 / P99"),
        "{lat_texts:?}"
    );
    assert!(
        md.contains(echolab_report::plots::CAPTION),
        "plots are explained"
    );
    let qps_svg = std::fs::read_to_string(plots.join("qps_vs_conns.svg")).unwrap();
    assert!(
        qps_svg.contains("connections (log scale)") && qps_svg.contains("QPS (requests/s)"),
        "axis labels missing"
    );
    assert!(
        qps_svg.contains("epoll-et short") && qps_svg.contains("epoll-et long"),
        "legend missing"
    );
    let lat = std::fs::read_to_string(plots.join("latency_epoll-et_long_c100_r10.svg")).unwrap();
    assert!(
        lat.contains("percentile (log scale of 1/(1−q))")
            && lat.contains("latency (µs, log scale)")
            && lat.contains("99%")
    );
    let storm_svg = std::fs::read_to_string(plots.join("connect_storm.svg")).unwrap();
    assert!(
        storm_svg.contains("time to establish all (s)")
            && storm_svg.contains("connections (log scale)")
    );
    assert!(plots.join("sustain_cpu.svg").is_file());
    assert!(md.contains("![QPS vs connections](plots/qps_vs_conns.svg)"));
    // report.html: the same tables and the plots inlined, one file.
    let html = std::fs::read_to_string(tmp.0.join("report.html")).unwrap();
    assert!(html.contains("<h2>QPS matrix, server × mode (100 connections, 10 rounds)</h2>"));
    assert!(
        html.contains("<td>epoll-et</td><td>25000 [24000–26000] (95% CI 22622–27599)</td>"),
        "{html}"
    );
    assert_eq!(
        html.matches("<svg").count(),
        summary
            .written
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == "svg"))
            .count()
    );

    // summary.csv: a header and one row per run, numbers in full.
    let csv = std::fs::read_to_string(tmp.0.join("summary.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 1 + 42);
    assert!(lines[0].starts_with("run_file,status,cell_id,server,mode,conns"));
    assert!(csv.contains("epoll-et_long_c100_r10_rep2.json,ok,epoll-et_long_c100_r10,epoll-et,long,100,10,,12,,2,"), "{csv}");
}

#[test]
fn a_partial_directory_marks_missing_and_failed_cells() {
    let tmp = TempDir::new("partial");
    // LT long: repetition 1 failed, 2 and 3 never ran; select storm at 300: nothing at all.
    results_dir(
        &tmp.0,
        RunStatus::Interrupted,
        |id, rep| !(id == "epoll-lt_long_c100_r10" && rep > 1) && id != "select_connect-storm_c300",
        |id, _| (id == "epoll-lt_long_c100_r10").then_some("server did not start: address in use"),
    );
    let summary = echolab_report::render(&tmp.0).unwrap();
    let md = std::fs::read_to_string(tmp.0.join("report.md")).unwrap();
    assert!(!summary.complete);
    assert_eq!(
        (
            summary.counts.planned,
            summary.counts.ok,
            summary.counts.failed,
            summary.counts.missing
        ),
        (42, 36, 1, 5)
    );
    assert!(md.contains("**partial** (run status: interrupted)"), "{md}");

    let quad = section(&md, "QPS matrix");
    let lt = row(quad, "epoll-lt");
    assert_eq!(lt[2], "failed: server did not start: address in use");
    assert!(
        lt[3].starts_with("— (failed: server did not start"),
        "{lt:?}"
    );
    assert!(quad.contains("long/short gain, LT: seed 1.48×, here —; band 1.26–1.70× (magnitude ±15%): **not checked**: epoll-lt_long_c100_r10: failed: server did not start"), "{quad}");

    let reps = section(&md, "QPS per repetition");
    assert_eq!(
        row(reps, "epoll-lt_long_c100_r10")[1..4],
        [
            "failed: server did not start: address in use",
            "missing",
            "missing"
        ]
    );

    let storm = row(section(&md, "Connect storm"), "300");
    assert_eq!(storm[1], "missing");

    let holes = section(&md, "Missing and failed runs");
    assert!(
        holes.contains("- select_connect-storm_c300 R2: missing")
            && holes.contains("- epoll-lt_long_c100_r10 R1: failed"),
        "{holes}"
    );

    let csv = std::fs::read_to_string(tmp.0.join("summary.csv")).unwrap();
    assert!(
        csv.contains("select_connect-storm_c300_rep1.json,missing,"),
        "{csv}"
    );
    assert!(
        csv.contains("epoll-lt_long_c100_r10_rep1.json,failed,"),
        "{csv}"
    );
}

#[test]
fn a_directory_that_is_not_a_results_directory_fails_clearly() {
    let tmp = TempDir::new("empty");
    let err = echolab_report::render(&tmp.0).unwrap_err();
    assert_eq!(err.exit_code(), 2);
    assert!(
        err.to_string()
            .contains("is not an echolab results directory (no manifest.yaml)"),
        "{err}"
    );
    assert!(!tmp.0.join("report.md").exists(), "nothing is written");

    let bin = env!("CARGO_BIN_EXE_echolab-report");
    let out = Command::new(bin).arg(&tmp.0).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.lines().count(),
        1,
        "one line, no backtrace: {stderr}"
    );
    assert!(
        stderr.starts_with("echolab-report: ") && stderr.contains(&tmp.0.display().to_string()),
        "{stderr}"
    );

    let missing = tmp.0.join("does-not-exist");
    let out = Command::new(bin).arg(&missing).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not exist"));
    let file = tmp.0.join("a-file");
    std::fs::write(&file, "x").unwrap();
    let out = Command::new(bin).arg(&file).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a directory"));

    // A broken manifest names the file.
    std::fs::write(tmp.0.join(MANIFEST_FILE), "schema: [unclosed").unwrap();
    let out = Command::new(bin).arg(&tmp.0).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("manifest.yaml"));

    let help = Command::new(bin).arg("--help").output().unwrap();
    assert!(help.status.success() && String::from_utf8_lossy(&help.stdout).contains("Example:"));
}

#[test]
fn a_damaged_run_file_is_named_and_left_out_not_fatal() {
    let tmp = TempDir::new("damaged");
    results_dir(&tmp.0, RunStatus::Complete, |_, _| true, |_, _| None);
    let runs = tmp.0.join("runs");
    let mut files: Vec<_> = std::fs::read_dir(&runs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let victim = files[0].clone();
    std::fs::write(&victim, "{broken").unwrap();
    let summary = echolab_report::render(&tmp.0).unwrap();
    assert!(!summary.complete, "a left-out run makes the report partial");
    assert_eq!(summary.counts.missing, 1, "{:?}", summary.counts);
    let md = std::fs::read_to_string(tmp.0.join("report.md")).unwrap();
    let name = victim.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        md.contains("Unreadable run files") && md.contains(&name),
        "{md}"
    );
}

#[test]
fn stdout_mode_prints_the_report_and_writes_nothing() {
    let tmp = TempDir::new("stdout");
    results_dir(&tmp.0, RunStatus::Complete, |_, _| true, |_, _| None);
    let out = Command::new(env!("CARGO_BIN_EXE_echolab-report"))
        .arg("--stdout")
        .arg(&tmp.0)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("# exp-test: "));
    assert!(
        !tmp.0.join("report.md").exists()
            && !tmp.0.join("summary.csv").exists()
            && !tmp.0.join("plots").exists()
    );
}

/// The text of every `<text>` element of an SVG document, trimmed and unescaped.
fn svg_texts(svg: &str) -> Vec<String> {
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
fn assert_ticks_once(texts: &[String], ticks: &[&str]) {
    for tick in ticks {
        let n = texts.iter().filter(|t| t == tick).count();
        assert_eq!(n, 1, "tick {tick} labelled {n} times in {texts:?}");
    }
}

/// A shipped experiment file, as the launcher loads it.
fn shipped(name: &str) -> Experiment {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../experiments/{name}.yaml"));
    Experiment::load(&path).unwrap()
}

/// A short or long run as echo-bench reports it: `qps`, latency with mean `mean_us` (P50 =
/// 0.9 × mean, see [`histogram`]), and the client's connect/close counts without extra
/// closes: conns × rounds for short, conns for long, 1.5 ms per call.
fn closed_loop_run(cell: &Cell, rep: u64, qps: f64, mean_us: f64) -> RunRecord {
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
        samples: Vec::new(),
        settle: None,
        link: None,
        strace: None,
        error: None,
    }
}

/// Writes `manifest` and `runs` as a results directory.
fn write_dir(dir: &Path, manifest: &Manifest, runs: &[RunRecord]) {
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
fn rendered(
    tag: &str,
    manifest: &Manifest,
    runs: &[RunRecord],
) -> (TempDir, echolab_report::ReportSummary, String) {
    let tmp = TempDir::new(tag);
    write_dir(&tmp.0, manifest, runs);
    let summary = echolab_report::render(&tmp.0).unwrap();
    let md = std::fs::read_to_string(tmp.0.join("report.md")).unwrap();
    (tmp, summary, md)
}

/// exp31 as published, every cell at 26000, 26500 and 27000 req/s with the mean latency
/// Little's law gives (conns / QPS): a steady run for tests that change one aspect of it.
fn steady_exp31() -> (Experiment, Vec<RunRecord>) {
    let e = shipped("exp31").as_published();
    let runs = closed_loop_runs(
        &e,
        |_| vec![26000.0, 26500.0, 27000.0],
        |c, q| c.conns as f64 / q * 1e6,
    );
    (e, runs)
}

/// Closed-loop runs of every cell of `e`: QPS per repetition from `qps(cell)`, mean latency
/// from Little's law (conns / QPS) unless `mean_us` says otherwise.
fn closed_loop_runs(
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
fn assert_no_negative_bound(md: &str) {
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

fn verdicts(summary: &echolab_report::ReportSummary) -> Vec<(String, Verdict)> {
    summary.claims.clone()
}

#[test]
fn exp31_on_loopback_reproduces_about_halved_and_exp34_its_counts() {
    // exp31: short 26000–27000 req/s, long 57000–59000: long/short QPS 2.19× and P50 (from
    // Little's law, mean = conns / QPS) 26497 / 57994 = 0.457×, both with a few % spread.
    // As published (the seed's 100 × 10), so that the setting matches the seed's.
    let e = shipped("exp31").as_published();
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
    assert_eq!(
        of("long/short P50 latency, ET server (about halved)"),
        Verdict::Reproduced,
        "{md}"
    );
    assert_eq!(
        of("long/short P50 latency, LT server (about halved)"),
        Verdict::Reproduced
    );
    assert_eq!(of("long/short QPS gain, ET server"), Verdict::Reproduced);
    assert_eq!(
        of("long/short QPS gain, LT server"),
        Verdict::Refuted,
        "2.19× is above 1.26–1.70×"
    );
    assert_eq!(
        of("ET long/short QPS gain within the predicted 2-5x"),
        Verdict::Reproduced
    );
    assert!(
        md.contains("band 0.4–0.6× (magnitude ±20%): **reproduced**"),
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
             **reproduced**: our exact ratio 0.100× lies inside the band."
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
    m.profile =
        serde_json::json!({"name": "crossnet", "topology": "link", "description": "20 ms RTT"});
    m.environment.kernel = "6.18.0-test".into();
    let cal = m.link.calibration.as_mut().unwrap();
    cal.measured.insert("rtt_median_us".into(), 20_100.0);
    let (tmp, summary, md) = rendered("crossnet", &m, &runs);
    assert_no_negative_bound(&md);
    for (name, v) in verdicts(&summary) {
        assert_eq!(v, Verdict::NotComparable, "{name}:\n{md}");
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
    // The y axis of a 20 ms path's latency plot carries numbers: short requests take 42.7–90.4
    // ms (0.9 and 1.9 × the mean), so the axis runs 20000–100000 µs, ticked at 1-2-5 values.
    let svg =
        std::fs::read_to_string(tmp.0.join("plots/latency_epoll-et_short_c100_r10.svg")).unwrap();
    let texts = svg_texts(&svg);
    assert_ticks_once(&texts, &["20000", "50000", "100000"]);
}

#[test]
fn an_old_manifest_without_claim_kinds_or_new_keys_still_renders() {
    let tmp = TempDir::new("old");
    results_dir(&tmp.0, RunStatus::Complete, |_, _| true, |_, _| None);
    let path = tmp.0.join(MANIFEST_FILE);
    let text = std::fs::read_to_string(&path).unwrap();
    // Manifests written before this change had no kind, tolerance, setup or max_repetitions.
    let old: String = text
        .lines()
        .filter(|l| {
            !l.trim_start().starts_with("kind:") && !l.trim_start().starts_with("tolerance:")
        })
        .map(|l| format!("{l}\n"))
        .collect();
    assert_ne!(old, text);
    std::fs::write(&path, old).unwrap();
    let summary = echolab_report::render(&tmp.0).unwrap();
    let md = std::fs::read_to_string(tmp.0.join("report.md")).unwrap();
    assert!(
        md.contains("band 1.83–2.47× (magnitude ±15%, assumed: the experiment predates claims with a stated band): **reproduced**"),
        "{md}"
    );
    assert_eq!(summary.claims.len(), 3);
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
    // spread ±20% → the maximum without reaching it. ET short: 4 values and the run
    // interrupted. ET long: 3 identical values → exact.
    let runs = closed_loop_runs(
        &e,
        |c| match (c.server.as_str(), c.mode) {
            ("epoll-lt", BenchMode::Short) => vec![26400.0, 26500.0, 26600.0],
            ("epoll-lt", _) => vec![20000.0, 30000.0, 25000.0, 20000.0, 30000.0, 25000.0],
            ("epoll-et", BenchMode::Short) => vec![20000.0, 30000.0, 25000.0, 22000.0],
            _ => vec![50000.0; 3],
        },
        |c, q| c.conns as f64 / q * 1e6,
    );
    let m = manifest(e, RunStatus::Interrupted, runs.len() as u64);
    let (_tmp, summary, md) = rendered("adaptive", &m, &runs);
    // Repetitions beyond the last one run are not missing: 3 + 6 + 4 + 3 planned.
    assert_eq!((summary.counts.planned, summary.counts.missing), (16, 0));
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
        lt_long[4].starts_with("not reached: 6 repetitions (the maximum) left the half-width at"),
        "{lt_long:?}"
    );
    assert_eq!(
        row(reps, "epoll-et_short_c100_r10")[4],
        "not reached: the run stopped after 4 of up to 6 repetitions (run status interrupted)"
    );
    assert!(reps.contains("2 of 4 cells reached the target"), "{reps}");
}

#[test]
fn readme_results_script_splices_a_real_report_between_the_markers() {
    let tmp = TempDir::new("readme");
    let dir = tmp.0.join("run");
    results_dir(&dir, RunStatus::Complete, |_, _| true, |_, _| None);
    let readme = tmp.0.join("README.md");
    let before = format!(
        "# echolab\n\nIntro.\n\n{}\nhand-written text\n{}\n\n## Next\n",
        echolab_report::readme::BEGIN,
        echolab_report::readme::END
    );
    std::fs::write(&readme, &before).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/readme-results");
    let run = || {
        Command::new(&script)
            .arg(&dir)
            .env("ECHOLAB_REPORT", env!("CARGO_BIN_EXE_echolab-report"))
            .env("ECHOLAB_README", &readme)
            .output()
            .unwrap()
    };
    let out = run();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = std::fs::read_to_string(&readme).unwrap();
    assert!(
        after.starts_with("# echolab\n\nIntro.\n\n") && after.ends_with("\n\n## Next\n"),
        "{after}"
    );
    assert!(!after.contains("hand-written text"));
    // The report's own tables and verdicts, with where they come from.
    let report = echolab_report::build(&dir).unwrap().markdown;
    let et_row = report
        .lines()
        .find(|l| l.starts_with("| epoll-et | 25000"))
        .unwrap();
    assert!(after.contains(et_row), "{after}");
    assert!(
        after.contains("#### QPS matrix, server × mode (100 connections, 10 rounds)"),
        "{after}"
    );
    assert!(after.contains("#### Latency ratios"), "{after}");
    assert!(
        after.contains("**reproduced**: our 95% CI 1.94–2.41× lies inside the band."),
        "{after}"
    );
    assert!(
        after.contains("run `20261130T015737Z-exp-test-loopback`"),
        "{after}"
    );
    assert!(
        !after.contains("## Connect storm"),
        "only the excerpt's sections"
    );
    // Running it again changes nothing.
    assert!(run().status.success());
    assert_eq!(std::fs::read_to_string(&readme).unwrap(), after);

    // A partial run is refused, and the README is left alone.
    let partial = tmp.0.join("partial");
    results_dir(
        &partial,
        RunStatus::Interrupted,
        |id, _| id != "select_connect-storm_c300",
        |_, _| None,
    );
    let out = Command::new(&script)
        .arg(&partial)
        .env("ECHOLAB_REPORT", env!("CARGO_BIN_EXE_echolab-report"))
        .env("ECHOLAB_README", &readme)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("partial run"));
    assert_eq!(std::fs::read_to_string(&readme).unwrap(), after);
}

#[test]
fn failures_by_kind_and_the_load_model_are_stated_beside_qps() {
    let (e, mut runs) = steady_exp31();
    for r in &mut runs {
        let b = r.bench.as_mut().unwrap();
        if r.cell.id() == "epoll-et_short_c100_r10" && r.repetition == 1 {
            b.requests_failed = 4;
            b.failures.insert("timeout".into(), 2);
            b.failures.insert("reset".into(), 1);
            // One failure of an older BenchReport, counted without a kind.
        }
        if r.cell.server == "epoll-lt" {
            b.target_rate = Some(20000.0);
        }
    }
    let tmp = TempDir::new("failures");
    let m = manifest(e, RunStatus::Complete, runs.len() as u64);
    write_dir(&tmp.0, &m, &runs);
    echolab_report::render(&tmp.0).unwrap();
    let md = std::fs::read_to_string(tmp.0.join("report.md")).unwrap();
    let quad = section(&md, "QPS matrix");
    assert_eq!(
        row(quad, "epoll-et")[4],
        "reset 1, timeout 2, 1 (kind not recorded) / 0",
        "{quad}"
    );
    assert!(
        quad.contains(
            "Load: closed loop (each connection sends its next request when the previous reply arrives) in some runs, \
             open loop at 20000 req/s (requests sent on schedule, latency from the intended send time) in others."
        ),
        "{quad}"
    );
    let reps = section(&md, "QPS per repetition");
    assert_eq!(
        row(reps, "epoll-et_short_c100_r10").last().unwrap(),
        "reset 1, timeout 2, 1 (kind not recorded)"
    );
    assert!(
        section(&md, "Why results may differ")
            .contains("Failed requests: epoll-et_short_c100_r10 (reset 1"),
        "{md}"
    );
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
                let tmp = TempDir::new("all");
                let mut m = manifest(e, RunStatus::Complete, runs.len() as u64);
                m.profile = serde_json::json!({"name": profile, "topology": topology, "description": "test"});
                m.link
                    .calibration
                    .as_mut()
                    .unwrap()
                    .measured
                    .insert("rtt_median_us".into(), rtt_us);
                write_dir(&tmp.0, &m, &runs);
                let report = echolab_report::build(&tmp.0).unwrap();
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

#[test]
fn kernel_and_link_counters_flag_the_cells_whose_tail_they_explain() {
    let (e, mut runs) = steady_exp31();
    let late = |p99: f64| LatencySummary {
        p99,
        ..Default::default()
    };
    for r in &mut runs {
        let b = r.bench.as_mut().unwrap();
        b.kernel_counters.insert("TcpExtTW".into(), 1000);
        let troubled = r.cell.id() == "epoll-lt_short_c100_r10";
        if troubled {
            // 120, 121 and 122 SYN retransmissions over the three repetitions: mean 121.
            b.kernel_counters
                .insert("TcpExtTCPSynRetrans".into(), 119 + r.repetition as i64);
        }
        let mut link = echolab_core::results::LinkCounters {
            backend: "userspace-wire".into(),
            ..Default::default()
        };
        link.uplink.packets = 1000;
        link.uplink.release_error_us = late(if troubled { 2500.0 } else { 20.0 });
        link.uplink.drops_queue = if troubled { 40 } else { 0 };
        link.uplink.drops_loss = 3;
        r.link = Some(link);
    }
    let tmp = TempDir::new("counters");
    let m = manifest(e, RunStatus::Complete, runs.len() as u64);
    write_dir(&tmp.0, &m, &runs);
    echolab_report::render(&tmp.0).unwrap();
    let md = std::fs::read_to_string(tmp.0.join("report.md")).unwrap();
    let s = section(&md, "Kernel and link counters");
    let bad = row(s, "epoll-lt_short_c100_r10");
    assert_eq!(bad[1], "TW 1000, TWRecycled 0", "{s}");
    assert_eq!(bad[2], "TCPSynRetrans 121", "{s}");
    assert_eq!(
        bad[4],
        "1000 packets, 3 lost by the profile, 40 dropped otherwise, queue peak 0, release error p99 2500 µs"
    );
    assert!(
        bad[5].starts_with("drops (queue full or refused) 40; release error p99 2500 µs"),
        "{s}"
    );
    let good = row(s, "epoll-et_long_c100_r10");
    assert_eq!(
        (good[2].as_str(), good[5].as_str()),
        ("none", "none"),
        "{s}"
    );
    assert!(
        s.contains("⚠ epoll-lt_short_c100_r10: client TCPSynRetrans 121, link drops (queue full or refused) 40"),
        "{s}"
    );
    assert_eq!(
        s.matches('⚠').count(),
        1,
        "only the troubled cell is flagged: {s}"
    );
}

#[test]
fn runs_that_started_on_a_busy_machine_are_named_at_the_top_and_in_why_results_differ() {
    let (e, mut runs) = steady_exp31();
    for r in &mut runs {
        let busy = r.cell.id() == "epoll-et_long_c100_r10" && r.repetition <= 2;
        r.settle = Some(echolab_core::results::Settle {
            waited_s: if busy { 10.0 } else { 0.3 },
            last_busy: if busy {
                0.5 + 0.1 * r.repetition as f64
            } else {
                0.02
            },
            quiet: !busy,
        });
    }
    let (_tmp, _, md) = rendered(
        "busy",
        &manifest(e, RunStatus::Complete, runs.len() as u64),
        &runs,
    );
    let line = "⚠ Busy machine: 2 runs started while other processes kept the CPUs busy (up to 70% of all CPUs after \
                the launcher's bounded wait for quiet): epoll-et_long_c100_r10 (2 of 3).";
    let top = md.split("## ").next().unwrap();
    assert!(
        top.contains(line),
        "the warning stands above the first table:\n{top}"
    );
    assert!(
        section(&md, "Why results may differ").contains(line),
        "{md}"
    );
}
