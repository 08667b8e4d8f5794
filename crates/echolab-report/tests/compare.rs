//! `echolab-report compare`: runs of one experiment side by side, with repetitions that
//! differ, so a ratio that drops or repeats one is off the figure worked out by hand.

mod common;

use common::{closed_loop_runs, manifest, shipped, temp_dir, write_dir};
use echolab_core::experiment::BenchMode;
use echolab_core::results::RunStatus;
use echolab_report::compare::{compare, markdown, DEFAULT_MARGIN};

/// exp31 with every cell at `base` × (1, 1.02, 1.04) req/s, long cells × `long`.
fn run(dir: &std::path::Path, long: f64, git: &str) {
    let e = shipped("exp31");
    let runs = closed_loop_runs(
        &e,
        |c| {
            let f = if c.mode == BenchMode::Long { long } else { 1.0 };
            vec![50_000.0 * f, 51_000.0 * f, 52_000.0 * f]
        },
        |c, q| c.conns as f64 / q * 1e6,
    );
    let mut m = manifest(e, RunStatus::Complete, 12);
    m.environment.git_rev = git.into();
    write_dir(dir, &m, &runs);
}

#[test]
fn a_run_against_itself_is_the_same_everywhere_and_a_changed_one_is_not() {
    let tmp = temp_dir("compare");
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    run(&a, 1.0, "r1");
    run(&b, 0.5, "r2");
    let itself = compare(&[a.clone(), a.clone()], DEFAULT_MARGIN).unwrap();
    let r = &itself.runs[0];
    assert!(!r.metrics.is_empty());
    assert!(
        r.metrics
            .iter()
            .all(|m| m.verdict == "same" && m.ratio == 1.0),
        "{r:?}"
    );
    assert!(r.differences.is_empty());
    let c = compare(&[a.clone(), b.clone()], DEFAULT_MARGIN).unwrap();
    let qps = |cell: &str| {
        c.runs[0]
            .metrics
            .iter()
            .find(|m| m.cell == cell && m.metric == "qps")
            .unwrap()
            .clone()
    };
    // Long cells at half the QPS: 0.500× (the same spread on both sides), different; short
    // cells unchanged: identical repetitions, exactly the same.
    let long = qps("epoll-et_long_c100_d1s");
    assert_eq!(
        (format!("{:.3}", long.ratio), long.verdict.as_str()),
        ("0.500".into(), "different")
    );
    let short = qps("epoll-et_short_c100_d1s");
    assert_eq!((short.ratio, short.verdict.as_str()), (1.0, "same"));
    let md = markdown(&c);
    assert!(md.contains("| git revision | r1 | r2 |"), "{md}");
    let json: serde_json::Value = serde_json::from_str(&echolab_report::compare::json(&c)).unwrap();
    assert_eq!(json["experiment"], "exp31");
}

#[test]
fn different_experiments_are_refused_by_name() {
    let tmp = temp_dir("compare-other");
    let a = tmp.path().join("a");
    run(&a, 1.0, "r1");
    let b = tmp.path().join("b");
    let mut e = shipped("exp31");
    e.name = "exp32".into();
    write_dir(&b, &manifest(e, RunStatus::Complete, 0), &[]);
    let err = compare(&[a, b], DEFAULT_MARGIN).unwrap_err().to_string();
    assert!(
        err.contains("different experiments") && err.contains("exp32"),
        "{err}"
    );
    assert!(compare(&[tmp.path().join("a")], DEFAULT_MARGIN).is_err());
}

#[test]
fn the_gate_exits_3_naming_the_slower_cells_and_passes_a_run_against_itself() {
    let bin = echolab_testkit::workspace_bin("echolab-report");
    let tmp = temp_dir("compare-gate");
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    run(&a, 1.0, "r1");
    run(&b, 0.5, "r2");
    let gate = |x: &std::path::Path, y: &std::path::Path| {
        std::process::Command::new(&bin)
            .arg("compare")
            .arg(x)
            .arg(y)
            .args(["--gate", "slower"])
            .output()
            .unwrap()
    };
    let same = gate(&a, &a);
    assert_eq!(same.status.code(), Some(0));
    let slower = gate(&a, &b);
    assert_eq!(
        slower.status.code(),
        Some(echolab_report::gate::EXIT_GATE_FAILED.into())
    );
    let err = String::from_utf8_lossy(&slower.stderr);
    assert!(err.contains("FAILED"), "{err}");
    // The long cells at half the QPS are named; the unchanged short cells are not.
    let listed = err
        .lines()
        .find(|l| l.trim_start().starts_with("slower:"))
        .unwrap();
    assert!(listed.contains("epoll-et_long_c100_d1s qps"), "{listed}");
    assert!(!listed.contains("short"), "{listed}");
    // The other way round the long cells are faster: `slower` passes, `either` fails.
    let faster = gate(&b, &a);
    assert_eq!(faster.status.code(), Some(0));
}
