//! The run's calibration verdict from its readings: the RTT probe's figures judged against
//! the profile ([`judge_probe`], [`judge_rtt`]), several client paths' records joined into
//! one that passes only when every path did ([`judge_paths`]), and the line a failed
//! calibration stops the run with ([`failure_message`]). The runtime and echolab-netem
//! measure; this is the only place a run's calibration passes or fails.

use std::collections::BTreeMap;
use std::time::Duration;

use super::rtt_check;
use crate::profile::Profile;
use crate::results::{CalibrationCheck, CalibrationRecord};

/// Compares a measured median RTT (µs) with the profile by the one RTT verdict
/// ([`rtt_check`]); fills `expected`, the `rtt_median` check (replacing an earlier one),
/// `passed` and `reason`.
pub fn judge_rtt(profile: &Profile, median_us: f64, record: &mut CalibrationRecord) {
    // NaN becomes 0 (`max`), an infinite median the longest duration: both fail the check.
    let median = Duration::try_from_secs_f64(median_us.max(0.0) / 1e6).unwrap_or(Duration::MAX);
    let check = rtt_check(profile, median);
    let (lo_us, hi_us) = (check.low, check.high);
    record.expected.insert(
        CalibrationRecord::RTT_MEDIAN_US.into(),
        profile.expected.rtt.value.0.as_secs_f64() * 1e6,
    );
    record.checks.retain(|c| c.name != check.name);
    let pass = check.pass;
    record.checks.push(CalibrationCheck {
        measured: median_us,
        ..check
    });
    let verdict = format!("RTT median {median_us:.1} us, expected {lo_us:.1}..{hi_us:.1} us");
    record.passed = pass;
    record.reason = if pass {
        format!("ok: {verdict}")
    } else {
        format!("failed: {verdict}")
    };
}

/// The record of one RTT probe of `rounds` round trips, `failed` of which failed, with the
/// figures `measured` (`rtt_median_us` among them when any round trip succeeded, `None` as
/// `median_us` otherwise): no round trip is a failed calibration, never a 0 µs path; a right
/// median with failed round trips fails too.
pub fn judge_probe(
    profile: &Profile,
    measured: BTreeMap<String, f64>,
    median_us: Option<f64>,
    rounds: u64,
    failed: u64,
) -> CalibrationRecord {
    let Some(median_us) = median_us else {
        return CalibrationRecord {
            measured,
            passed: false,
            reason: format!(
                "failed: none of {rounds} probe round trips succeeded ({failed} failed)"
            ),
            ..Default::default()
        };
    };
    let mut record = CalibrationRecord {
        measured,
        ..Default::default()
    };
    judge_rtt(profile, median_us, &mut record);
    if failed > 0 && record.passed {
        record.passed = false;
        record.reason = format!("failed: {failed} of {rounds} probe round trips failed");
    }
    record
}

/// One calibration record of a run's client paths, `paths` in the lab file's order (one path,
/// named `""`, off a lab): the first path's record as it is, and each other's figures and
/// checks beside it, prefixed with `<engine>.` (`c.rtt_median_us`, settles too) and
/// `engine c: `; it passes when every path passed, and its reason names each path that did
/// not. Its link counters are the first path's calibration's (each calibration counts every
/// wire of the run, and the other paths' carry nothing meanwhile).
///
/// # Panics
/// Never; an empty `paths` gives a failed record saying nothing was measured.
pub fn judge_paths(mut paths: Vec<(String, CalibrationRecord)>) -> CalibrationRecord {
    if paths.is_empty() {
        return CalibrationRecord {
            reason: "failed: no path was measured".into(),
            ..Default::default()
        };
    }
    if paths.len() == 1 {
        return paths.remove(0).1;
    }
    let (first_name, mut out) = paths.remove(0);
    let mut failed: Vec<String> = Vec::new();
    if !out.passed {
        failed.push(format!("engine {first_name}: {}", out.reason));
    }
    for (name, r) in paths {
        for (k, v) in r.measured {
            out.measured.insert(format!("{name}.{k}"), v);
        }
        for (k, v) in r.expected {
            out.expected.insert(format!("{name}.{k}"), v);
        }
        for mut c in r.checks {
            c.name = format!("engine {name}: {}", c.name);
            out.checks.push(c);
        }
        for (k, v) in r.settle {
            out.settle.insert(format!("{name}.{k}"), v);
        }
        for mut m in r.missed_attempts {
            m.reason = format!("engine {name}: {}", m.reason);
            out.missed_attempts.push(m);
        }
        if !r.passed {
            failed.push(format!("engine {name}: {}", r.reason));
        }
        out.passed &= r.passed;
    }
    if !failed.is_empty() {
        out.reason = failed.join("; ");
    }
    out
}

/// The one-line message of a failed calibration of profile `profile`: measured and expected
/// figures of every check.
pub fn failure_message(profile: &str, record: &CalibrationRecord) -> String {
    let checks = record
        .checks
        .iter()
        .map(|c| {
            format!(
                "{} {:.1} {} (expected {:.1}..{:.1}{})",
                c.name,
                c.measured,
                c.unit,
                c.low,
                c.high,
                if c.pass { "" } else { ", FAILED" }
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    format!(
        "calibration of profile {profile} {}; {checks}",
        record.reason
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(passed: bool, rtt_us: f64) -> CalibrationRecord {
        CalibrationRecord {
            passed,
            reason: if passed {
                "ok".into()
            } else {
                "RTT too high".into()
            },
            measured: [("rtt_median_us".to_string(), rtt_us)].into(),
            expected: [("rtt_median_us".to_string(), 100.0)].into(),
            checks: vec![CalibrationCheck {
                name: "rtt".into(),
                unit: "us".into(),
                measured: rtt_us,
                low: 0.0,
                high: 500.0,
                pass: passed,
                reason: String::new(),
            }],
            link_counters: None,
            bulk_transfer: None,
            missed_attempts: vec![crate::results::MissedAttempt {
                rtt_median_us: rtt_us * 10.0,
                reason: "FAIL: busy host".into(),
                ..Default::default()
            }],
            settle: [(
                "baseline".to_string(),
                crate::results::Settle {
                    waited_s: rtt_us / 100.0,
                    last_busy: 0.0,
                    quiet: true,
                    wake_p99_us: Some(rtt_us / 2.0),
                },
            )]
            .into(),
        }
    }

    #[test]
    fn several_paths_pass_only_together_and_keep_every_figure() {
        let one = judge_paths(vec![("b".into(), record(true, 80.0))]);
        assert_eq!(one, record(true, 80.0));
        let both = judge_paths(vec![
            ("b".into(), record(true, 80.0)),
            ("c".into(), record(true, 90.0)),
        ]);
        assert!(both.passed);
        assert_eq!(both.measured["rtt_median_us"], 80.0);
        assert_eq!(both.measured["c.rtt_median_us"], 90.0);
        assert_eq!(both.expected["c.rtt_median_us"], 100.0);
        let names: Vec<&str> = both.checks.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["rtt", "engine c: rtt"]);
        let waits: Vec<(&str, f64)> = both
            .settle
            .iter()
            .map(|(k, s)| (k.as_str(), s.waited_s))
            .collect();
        assert_eq!(waits, [("baseline", 0.8), ("c.baseline", 0.9)]);
        let misses: Vec<(&str, f64)> = both
            .missed_attempts
            .iter()
            .map(|m| (m.reason.as_str(), m.rtt_median_us))
            .collect();
        assert_eq!(
            misses,
            [
                ("FAIL: busy host", 800.0),
                ("engine c: FAIL: busy host", 900.0)
            ]
        );
        let second_fails = judge_paths(vec![
            ("b".into(), record(true, 80.0)),
            ("c".into(), record(false, 900.0)),
        ]);
        assert!(!second_fails.passed);
        assert_eq!(second_fails.reason, "engine c: RTT too high");
        let first_fails = judge_paths(vec![
            ("b".into(), record(false, 900.0)),
            ("c".into(), record(true, 90.0)),
        ]);
        assert!(!first_fails.passed);
        assert_eq!(first_fails.reason, "engine b: RTT too high");
        assert!(
            !judge_paths(Vec::new()).passed,
            "nothing measured never passes"
        );
    }
}
