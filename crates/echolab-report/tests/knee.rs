//! The knee mechanism on exp33's long-connection scan: the first conns where the server's
//! CPU reaches 85% of its core against the first conns after which QPS stops rising beyond
//! its 95% interval.

mod common;

use echolab_core::results::{ResourceSample, ResultsDir, RunStatus};
use echolab_report::dataset::Dataset;
use echolab_report::mechanisms::{
    check, judge_knee, measured_knee, predicted_knee, section, MechanismVerdict, ScanPoint,
};

use common::*;

/// exp33 with long-connection QPS `qps(conns)` (three repetitions, ±1%) and server CPU
/// `cpu(conns)` (% of one core, three repetitions 1 point apart); the knee mechanism checked:
/// its verdict, its short text and the report's section.
fn exp33_knee(
    qps: impl Fn(u64) -> f64,
    cpu: impl Fn(u64) -> f64,
) -> (MechanismVerdict, String, String) {
    let e = shipped("exp33");
    let mut runs = closed_loop_runs(
        &e,
        |c| {
            let q = qps(c.conns);
            vec![q * 0.99, q, q * 1.01]
        },
        |c, q| c.conns as f64 / q * 1e6,
    );
    for r in &mut runs {
        let pct = cpu(r.cell.conns) + r.repetition as f64;
        r.samples = (0..4)
            .map(|k| ResourceSample {
                t_s: k as f64,
                cpu_pct: pct,
                mem_bytes: 1 << 20,
                mem_pct: 0.3,
                ..Default::default()
            })
            .collect();
    }
    let m = manifest(e, RunStatus::Complete, runs.len() as u64);
    let results = ResultsDir {
        path: std::path::PathBuf::new(),
        manifest: m.clone(),
        runs,
        unreadable: Vec::new(),
    };
    let ds = Dataset::new(&results);
    let mech = m
        .experiment
        .reference
        .mechanisms
        .iter()
        .find(|m| m.kind == echolab_core::experiment::MechanismKind::Knee)
        .unwrap();
    let c = check(&ds, &m, mech);
    (c.verdict, c.short(), section(std::slice::from_ref(&c)))
}

#[test]
fn cpu_saturating_where_qps_peaks_holds() {
    // CPU: 60% up to 100, 92% from 500; QPS rises 5k → 60k, then flat (59k, 58k, 57k).
    let (v, text, section) = exp33_knee(
        |c| match c {
            1 => 5_000.0,
            10 => 15_000.0,
            100 => 30_000.0,
            500 => 60_000.0,
            1000 => 59_000.0,
            2000 => 58_000.0,
            _ => 57_000.0,
        },
        |c| if c < 500 { 60.0 } else { 92.0 },
    );
    assert_eq!(v, MechanismVerdict::Holds, "{text}");
    assert!(
        text.contains("reaches 85.0% of its core(s) at 500 conns"),
        "{text}"
    );
    assert!(
        text.contains("QPS stops rising beyond its 95% CI at 500 conns"),
        "{text}"
    );
    // The section gives the figures once, after the verdict.
    assert_eq!(section.matches("QPS stops rising").count(), 1, "{section}");
    assert!(section.contains(": holds here."), "{section}");
}

#[test]
fn cpu_saturating_long_before_qps_stops_rising_does_not_hold() {
    // CPU already 90% at the first point; QPS rises until 2000 and only then levels off.
    let (v, text, _) = exp33_knee(
        |c| match c {
            1 => 2_000.0,
            10 => 5_000.0,
            100 => 10_000.0,
            500 => 20_000.0,
            1000 => 30_000.0,
            2000 => 40_000.0,
            _ => 39_500.0,
        },
        |_| 90.0,
    );
    assert_eq!(v, MechanismVerdict::DoesNotHold, "{text}");
    assert!(text.contains("at 1 conns"), "{text}");
    assert!(text.contains("95% CI at 2000 conns"), "{text}");
}

fn point(conns: u64, load: f64, qps: f64, high: f64) -> ScanPoint {
    ScanPoint {
        conns,
        server_load: Some(load),
        qps,
        qps_high: high,
    }
}

#[test]
fn knee_rules_on_a_scan() {
    let scan = [
        point(100, 0.50, 30_000.0, 31_000.0),
        point(500, 0.80, 45_000.0, 46_000.0),
        point(1000, 0.90, 47_000.0, 48_000.0),
        point(2000, 0.95, 47_500.0, 48_500.0),
    ];
    // First load ≥ 85%: 1000. First point whose successor is within its CI: 1000 (47500 ≤ 48000).
    assert_eq!(predicted_knee(&scan), Some(2));
    assert_eq!(measured_knee(&scan), Some(2));
    // Adjacent scan points agree; two steps apart do not; a missing knee is inconclusive.
    assert_eq!(judge_knee(Some(1), Some(2)), MechanismVerdict::Holds);
    assert_eq!(judge_knee(Some(0), Some(2)), MechanismVerdict::DoesNotHold);
    assert_eq!(judge_knee(None, Some(2)), MechanismVerdict::Inconclusive);
    // Saturated at the first point with QPS flat from there: censored, not a test.
    assert_eq!(judge_knee(Some(0), Some(0)), MechanismVerdict::NotTestable);
    assert_eq!(judge_knee(Some(0), Some(1)), MechanismVerdict::NotTestable);
    // QPS rising significantly at every step: no knee within the scan.
    let rising = [
        point(100, 0.5, 10_000.0, 10_500.0),
        point(500, 0.6, 20_000.0, 20_500.0),
        point(1000, 0.7, 30_000.0, 30_500.0),
    ];
    assert_eq!(measured_knee(&rising), None);
    assert_eq!(predicted_knee(&rising), None);
}
