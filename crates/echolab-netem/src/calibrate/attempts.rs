//! Repeated calibration attempts (`echolab-netem calibrate --attempts N`): a calibration
//! that misses is measured again after a wait for a quiet machine
//! ([`echolab_core::quiet`]), up to N attempts; the verdict is the last attempt's, and the
//! report keeps every miss before it with its figures and reason.
//!
//! Why: one calibration is 40 round trips and two bulk transfers, a few seconds of one
//! machine's time; on a 2-core host the kernel's teardown of another test's network
//! namespace, or another engine's containers starting, can take the CPU for part of it. Seen
//! in CI on a 2-core AMD EPYC VM: crossnet's median RTT 22.5 ms (band
//! 18.6–22.1) with goodput 41 Mbit/s (band 44.2–49.9) with nothing else of the suite running,
//! where 8 runs by hand passed. Such a miss is the host's, not the link's. (A miss that stays
//! through every attempt is not: one such, a second client machine's lan100 path at 737–970 µs
//! in all three attempts of a run, is still unexplained; see .config/nextest.toml.) A link
//! that is not in effect (or too slow) misses every attempt, so repeating
//! cannot turn it into a pass; it can only make a borderline link pass on a quieter try,
//! which the record then shows.

use std::io;

use echolab_core::calibration::{Attempt, Attempts};
use echolab_core::cmd::CalibrationReport;
use echolab_core::results::{MissedAttempt, Settle};

/// The default number of attempts.
pub const DEFAULT_ATTEMPTS: u32 = echolab_core::calibration::CALIBRATION_ATTEMPTS;

/// Runs `measure` until an attempt passes or `attempts` (at least 1) have run, calling `wait`
/// (a wait for a quiet machine; `None` where it cannot look) before each repeat. Returns the
/// deciding attempt's report, with the misses before it in `missed_attempts`, the wait
/// before it in `settle`, and its `reason` saying which attempt of how many decided.
///
/// # Errors
/// An attempt could not measure (the path stopped carrying, the peer went away): that is
/// an error at once, not a miss to repeat.
pub fn with_attempts(
    attempts: u32,
    mut measure: impl FnMut() -> io::Result<CalibrationReport>,
    mut wait: impl FnMut() -> Option<Settle>,
) -> io::Result<CalibrationReport> {
    let mut rule = Attempts::new(attempts);
    let mut settle = None;
    loop {
        let mut report = measure()?;
        report.settle = settle;
        let miss = || MissedAttempt {
            rtt_median_us: report.rtt_median_us,
            goodput_uplink_mbit: report.goodput_uplink_mbit,
            goodput_downlink_mbit: report.goodput_downlink_mbit,
            reason: report.reason.clone(),
            settle: report.settle,
        };
        match rule.judge(report.pass, &report.reason, miss) {
            Attempt::Decided { reason, missed } => {
                report.reason = reason;
                report.missed_attempts = missed;
                return Ok(report);
            }
            Attempt::Again => settle = wait(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn report(pass: bool, rtt: f64) -> CalibrationReport {
        CalibrationReport {
            profile: "lan100".into(),
            target: "10.0.2.2:7070".into(),
            probes: 40,
            rtt_min_us: rtt - 10.0,
            rtt_median_us: rtt,
            rtt_baseline_median_us: None,
            added_rtt_us: None,
            goodput_uplink_mbit: Some(93.0),
            goodput_downlink_mbit: None,
            bulk_transfer: None,
            checks: vec![],
            pass,
            reason: if pass {
                format!("PASS: median RTT {rtt} us")
            } else {
                format!("FAIL: median RTT {rtt} us is above 605 us")
            },
            missed_attempts: vec![],
            settle: None,
        }
    }

    fn quiet(waited_s: f64) -> Settle {
        Settle {
            waited_s,
            last_busy: 0.02,
            quiet: true,
            wake_p99_us: Some(90.0),
        }
    }

    #[test]
    fn a_first_pass_decides_without_waiting() {
        let waits = Cell::new(0);
        let r = with_attempts(
            3,
            || Ok(report(true, 300.0)),
            || {
                waits.set(waits.get() + 1);
                None
            },
        )
        .unwrap();
        assert!(r.pass && r.missed_attempts.is_empty() && r.settle.is_none());
        assert_eq!(r.reason, "PASS: median RTT 300 us");
        assert_eq!(waits.get(), 0);
    }

    #[test]
    fn misses_are_repeated_after_a_wait_and_kept_with_their_figures() {
        let rtts = [917.0, 850.0, 310.0];
        let n = Cell::new(0);
        let waited = Cell::new(0.0);
        let r = with_attempts(
            3,
            || {
                let i = n.get();
                n.set(i + 1);
                Ok(report(i == 2, rtts[i]))
            },
            || {
                waited.set(waited.get() + 1.0);
                Some(quiet(waited.get()))
            },
        )
        .unwrap();
        assert!(r.pass);
        assert_eq!(r.rtt_median_us, 310.0);
        assert_eq!(
            r.settle,
            Some(quiet(2.0)),
            "the wait before the deciding attempt"
        );
        let seen: Vec<_> = r.missed_attempts.iter().map(|m| m.rtt_median_us).collect();
        assert_eq!(seen, [917.0, 850.0]);
        assert_eq!(
            r.missed_attempts[0].settle, None,
            "no wait before the first"
        );
        assert_eq!(r.missed_attempts[1].settle, Some(quiet(1.0)));
        assert_eq!(r.missed_attempts[1].goodput_uplink_mbit, Some(93.0));
        assert_eq!(
            r.reason,
            "PASS: median RTT 310 us (attempt 3 of 3, after a wait for a steady machine; earlier: attempt 1 FAIL: median RTT 917 us is above 605 us; attempt 2 FAIL: median RTT 850 us is above 605 us)"
        );
    }

    #[test]
    fn a_link_that_misses_every_attempt_fails_with_the_last_figures() {
        let n = Cell::new(0);
        let r = with_attempts(
            2,
            || {
                n.set(n.get() + 1);
                Ok(report(false, 100.0 * n.get() as f64))
            },
            || Some(quiet(0.3)),
        )
        .unwrap();
        assert!(!r.pass);
        assert_eq!(n.get(), 2);
        assert_eq!(r.rtt_median_us, 200.0);
        assert_eq!(r.missed_attempts.len(), 1);
        assert!(
            r.reason.starts_with("FAIL: median RTT 200 us"),
            "{}",
            r.reason
        );
        assert!(r.reason.contains("attempt 2 of 2"), "{}", r.reason);
    }

    #[test]
    fn one_attempt_means_no_repeat_and_an_error_is_not_repeated() {
        let n = Cell::new(0);
        let r = with_attempts(
            1,
            || {
                n.set(n.get() + 1);
                Ok(report(false, 900.0))
            },
            || panic!("no wait with one attempt"),
        )
        .unwrap();
        assert!(!r.pass && r.missed_attempts.is_empty() && n.get() == 1);
        assert_eq!(r.reason, "FAIL: median RTT 900 us is above 605 us");
        let n = Cell::new(0);
        let e = with_attempts(
            3,
            || {
                n.set(n.get() + 1);
                Err(io::Error::new(io::ErrorKind::TimedOut, "no answer"))
            },
            || panic!("an error is not a miss"),
        )
        .unwrap_err();
        assert_eq!((e.kind(), n.get()), (io::ErrorKind::TimedOut, 1));
    }
}
