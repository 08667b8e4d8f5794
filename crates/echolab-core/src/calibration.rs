//! The calibration verdict: a measured median RTT or goodput compared with a profile's
//! [`Expected`](crate::profile::Expected) figures. Written once, for both measurers:
//! `echolab-netem calibrate` (across a link, with its own probes) and echolab-up's RTT probe
//! (echo-server and echo-bench on the cells' own path, loopback profiles). [`verdict`] turns
//! a run's readings into its one calibration record (every path's, pass or fail).

use std::time::Duration;

pub mod verdict;
pub use verdict::{failure_message, judge_paths, judge_probe, judge_rtt};

use crate::profile::{LinkSpec, Profile, Topology, MTU_BYTES};
use crate::results::CalibrationCheck as Check;
use crate::units::{format_duration, RATE_UNITS};

/// How many times a calibration is measured at most before its miss is the verdict: a miss
/// is measured again after a wait for a quiet machine (`crate::quiet`), since one caused by
/// the host is gone then and a link not in effect misses every time. Used by
/// `echolab-netem calibrate --attempts` (its default) and echolab-up's loopback probe.
pub const CALIBRATION_ATTEMPTS: u32 = 3;

/// A repeated calibration's rule, without its I/O: after each attempt, [`Attempts::judge`]
/// says whether it decided (it passed, or it was the last allowed) or the caller should wait
/// for a quiet machine and measure again. `echolab-netem calibrate --attempts` and
/// echolab-up's loopback probe both drive it, so the rule and the reason it writes are one.
#[derive(Debug, Clone)]
pub struct Attempts {
    allowed: u32,
    made: u32,
    missed: Vec<crate::cmd::MissedAttempt>,
}

/// What [`Attempts::judge`] says of the attempt just measured.
#[derive(Debug, Clone, PartialEq)]
pub enum Attempt {
    /// This attempt is the verdict: its `reason`, rewritten to say which attempt of how many
    /// it was and why the earlier ones missed, and those misses, oldest first.
    Decided {
        /// The deciding reason.
        reason: String,
        /// The attempts before it.
        missed: Vec<crate::cmd::MissedAttempt>,
    },
    /// A miss with attempts left: wait for a quiet machine, then measure again.
    Again,
}

impl Attempts {
    /// At most `allowed` attempts (at least 1).
    pub fn new(allowed: u32) -> Self {
        Self {
            allowed: allowed.max(1),
            made: 0,
            missed: Vec::new(),
        }
    }

    /// Judges the attempt just measured: whether it `passed`, its `reason`, and `miss`, what a
    /// record keeps of it should it be a miss that is not the verdict.
    pub fn judge(
        &mut self,
        passed: bool,
        reason: &str,
        miss: impl FnOnce() -> crate::cmd::MissedAttempt,
    ) -> Attempt {
        self.made += 1;
        if passed || self.made >= self.allowed {
            let missed = std::mem::take(&mut self.missed);
            return Attempt::Decided {
                reason: deciding_reason(reason, (self.made, self.allowed), &missed),
                missed,
            };
        }
        self.missed.push(miss());
        Attempt::Again
    }
}

/// The reason of the attempt that decided a repeated calibration (number `n` of at most
/// `attempts`): its own `reason`, then which attempt it was and why the earlier ones
/// (`missed`, oldest first) missed; `reason` unchanged when nothing was missed before it.
fn deciding_reason(
    reason: &str,
    (n, attempts): (u32, u32),
    missed: &[crate::cmd::MissedAttempt],
) -> String {
    if missed.is_empty() {
        return reason.to_string();
    }
    let earlier = missed
        .iter()
        .enumerate()
        .map(|(i, m)| format!("attempt {} {}", i + 1, m.reason))
        .collect::<Vec<_>>()
        .join("; ");
    format!("{reason} (attempt {n} of {attempts}, after a wait for a steady machine; earlier: {earlier})")
}

/// One calibration RTT probe as an IP packet, bytes: IPv4 header 20 + TCP header 32 (20 and
/// the 12-byte timestamps option Linux sends by default) + the 16-byte probe
/// (`echolab-netem calibrate`'s echo mode). The `added_rtt` check expects a link to serialize
/// this much each way.
pub const PROBE_IP_BYTES: usize = 20 + 32 + 16;

pub use crate::profile::FULL_SEGMENT_PAYLOAD;

/// The congestion control of a calibration's bulk senders (`TCP_CONGESTION`, tcp(7)): Reno
/// (RFC 5681) is built into every Linux kernel and any process may choose it, so the
/// transfer does not depend on the host's default (cubic, bbr, ...), and its slow start simply
/// grows until the window bound of [`bulk_window_bytes`] stops it.
pub const BULK_CONGESTION_CONTROL: &str = "reno";

/// The most payload a calibration's bulk transfer keeps unacknowledged, bytes, when its data
/// crosses `forward` and its ACKs come back over `back`, on a path whose RTT without the link
/// is `base_rtt` (the baseline, zero when unmeasured): the round trip's pipe at `forward`'s
/// rate (`base_rtt` plus both directions' delay plus four jitter widths, in [`MTU_BYTES`]
/// packets, rounded up) plus half the room that `forward`'s queue limit leaves beyond its own pipe
/// ([`LinkSpec::bdp_packets`]), in [`FULL_SEGMENT_PAYLOAD`]s; at least two segments. The limit
/// counted is at most the direction's default ([`LinkSpec::default_limit`]): a limit the
/// launcher raised to hold an experiment's connections (`crate::link_queue`) would only let
/// the transfer build a longer queue, and the same profile is calibrated alike whatever
/// experiment follows. `None` when `forward` has no rate: nothing to fill, nothing to overflow.
///
/// Why a bound: a sender so bounded keeps the link busy (its window covers the round trip,
/// and the queue room absorbs half the limit's worth of host delay), while in steady state the
/// forward direction holds at most its pipe and half its room, never the limit, so the link
/// drops nothing and the goodput is the link's rate, not the sender's loss recovery. Unbounded,
/// a sender grows its window until the queue overflows (a 500-packet queue at crossnet, per transfer
/// and direction: Reno in 18 of 18, cubic in 10 of 20, bbr in 0 of 20, on a 2-core AMD VM,
/// `wire_perf --section release` under each host default), and what it carries
/// after that depends on how its recovery meets the host's timing (a CI run, whose drops were
/// not recorded, measured 37-44 Mbit/s against at least 44.25 in three attempts at crossnet).
pub fn bulk_window_bytes(
    forward: &LinkSpec,
    back: Option<&LinkSpec>,
    base_rtt: Duration,
) -> Option<u64> {
    let rate = forward.rate?.0 as f64;
    let round_trip = base_rtt
        + forward.max_added_delay()
        + back.map_or(Duration::ZERO, LinkSpec::max_added_delay);
    let pipe = (rate * round_trip.as_secs_f64() / (8.0 * MTU_BYTES as f64)).ceil() as u64;
    let limit = forward.effective_limit().min(forward.default_limit());
    let room = u64::from(limit).saturating_sub(forward.bdp_packets());
    Some((pipe + room / 2).max(2) * FULL_SEGMENT_PAYLOAD)
}

/// How long the baseline's prober pauses after each round trip (`echolab-netem rtt --pace`):
/// the RTT `profile` is expected to add to one probe, µs resolution.
///
/// Why: through the link every round trip waits that long, so the server sits idle that long
/// between probes and wakes from a deeper idle state, slower (on a 2-core AMD EPYC VM: a
/// paced baseline's median was 56 µs at 40 µs of idle and 172 µs at 20 ms, in
/// UDP round trips between the wire's testbed namespaces). An unpaced baseline leaves that wake-up out, and the
/// `added_rtt` check charged it to the link (a 1 Mbit/s profile measured 333 µs above its
/// 3.088 ms). Paced, the server's wake-up is in both figures and cancels.
pub fn baseline_pace(profile: &Profile) -> Duration {
    let added = profile.expected_added_rtt(PROBE_IP_BYTES);
    Duration::from_micros(added.as_micros() as u64)
}

/// A check `name` of a time in µs: `measured` against the range `low..=high`, with the verdict
/// and its reason.
fn check_in_us(
    name: &str,
    measured: f64,
    (low, high): (Duration, Duration),
    (pass, reason): (bool, String),
) -> Check {
    let us = |d: Duration| d.as_nanos() as f64 / 1e3;
    Check {
        name: name.into(),
        measured,
        low: us(low),
        high: us(high),
        unit: "us".into(),
        pass,
        reason,
    }
}

/// The `rtt_median` check: `median` against the profile's asymmetric RTT range
/// ([`RttExpectation::range`](crate::profile::RttExpectation::range), both ends included).
/// Measured, low and high are in µs; the reason says which way a miss went and what it
/// means (below the link's delays: the link is not in effect; above: host delay).
pub fn rtt_check(profile: &Profile, median: Duration) -> Check {
    let (low, high) = profile.expected.rtt.range();
    // From whole nanoseconds, so that a range end such as 19.1 ms is exactly 19100.0 µs.
    let us = |d: Duration| d.as_nanos() as f64 / 1e3;
    let (pass, reason) = if median < low {
        let why = if profile.topology == Topology::Link {
            format!(
                "median RTT {} is below {} (expected {} - {}): the link's delay ({} added RTT) is not in effect",
                format_duration(median),
                format_duration(low),
                profile.expected.rtt.value,
                profile.expected.rtt.minus,
                format_duration(profile.added_rtt())
            )
        } else {
            format!(
                "median RTT {} is below {}",
                format_duration(median),
                format_duration(low)
            )
        };
        (false, why)
    } else if median > high {
        (false, format!("median RTT {} is above {}: more base delay than the profile allows (loaded host, extra hops?)", format_duration(median), format_duration(high)))
    } else if profile.topology != Topology::Link {
        let what = if profile.topology == Topology::Native {
            "native: the real path, nothing added"
        } else {
            "loopback: no impairment expected"
        };
        (
            true,
            format!(
                "median RTT {} within {}..{}; {what}",
                format_duration(median),
                format_duration(low),
                format_duration(high)
            ),
        )
    } else {
        (
            true,
            format!(
                "median RTT {} within {}..{}",
                format_duration(median),
                format_duration(low),
                format_duration(high)
            ),
        )
    };
    check_in_us("rtt_median", us(median), (low, high), (pass, reason))
}

/// The `added_rtt` check: what the link adds, `median` (through it) minus `baseline` (the
/// same path forwarded plainly, measured just before the link was installed), against
/// [`Profile::expected_added_rtt`] for probes of `ip_bytes` with the profile's
/// [`added_rtt_tolerance`](Profile::added_rtt_tolerance). In µs. A link that adds too little
/// is "not in effect"; one that adds too much is "too slow"; both reasons give the three
/// numbers (total, baseline, added).
pub fn added_rtt_check(
    profile: &Profile,
    baseline: Duration,
    median: Duration,
    ip_bytes: usize,
) -> Check {
    let expected = profile.expected_added_rtt(ip_bytes);
    let (low, high) = profile.added_rtt_tolerance().range(expected);
    let us = |d: Duration| d.as_nanos() as f64 / 1e3;
    let added_us = us(median) - us(baseline);
    let numbers = format!(
        "added RTT {added_us:.1} us (median {:.1} us through the link - baseline {:.1} us)",
        us(median),
        us(baseline)
    );
    let range = format!(
        "{}..{} (expected {})",
        format_duration(low),
        format_duration(high),
        format_duration(expected)
    );
    let (pass, reason) = if added_us < us(low) {
        (
            false,
            format!("{numbers} is below {range}: the link's delay is not in effect"),
        )
    } else if added_us > us(high) {
        (
            false,
            format!(
                "{numbers} is above {range}: the link is too slow (its own overhead adds delay)"
            ),
        )
    } else {
        (true, format!("{numbers} within {range}"))
    };
    check_in_us("added_rtt", added_us, (low, high), (pass, reason))
}

/// The `rtt_median` check of a link across machines (`echolab-up --lab`): the profile's
/// `expected.rtt` band describes its path on one machine, but between two machines the RTT is
/// the real path's (`baseline`, measured through the link host before the link was
/// installed) plus what the link adds. So `median` is judged against `baseline +`
/// [`Profile::expected_added_rtt`] for probes of `ip_bytes`, with the profile's
/// [`added_rtt_tolerance`](Profile::added_rtt_tolerance). In µs; the reason gives the sum.
pub fn sum_rtt_check(
    profile: &Profile,
    baseline: Duration,
    median: Duration,
    ip_bytes: usize,
) -> Check {
    let added = profile.expected_added_rtt(ip_bytes);
    let (added_low, added_high) = profile.added_rtt_tolerance().range(added);
    let (low, high) = (baseline + added_low, baseline + added_high);
    let us = |d: Duration| d.as_nanos() as f64 / 1e3;
    let sum = format!(
        "{}..{} (the real path's baseline {} + the link's {} added)",
        format_duration(low),
        format_duration(high),
        format_duration(baseline),
        format_duration(added)
    );
    let (pass, reason) = if median < low {
        (
            false,
            format!(
                "median RTT {} is below {sum}: the link's delay is not in effect",
                format_duration(median)
            ),
        )
    } else if median > high {
        (
            false,
            format!(
                "median RTT {} is above {sum}: the link or the machines add delay of their own",
                format_duration(median)
            ),
        )
    } else {
        (
            true,
            format!("median RTT {} within {sum}", format_duration(median)),
        )
    };
    check_in_us("rtt_median", us(median), (low, high), (pass, reason))
}

/// The `goodput_<direction>` check (`direction` is `uplink` or `downlink`) of a measured
/// goodput in bits per second against the profile's goodput range; in Mbit/s. `None` when the
/// profile expects no goodput.
pub fn goodput_check(profile: &Profile, direction: &str, measured_bps: f64) -> Option<Check> {
    let g = profile.expected.goodput.as_ref()?;
    let (low, high) = g.range();
    let mbit = |b: f64| b / 1e6;
    let (pass, reason) = if measured_bps > high {
        (
            false,
            format!(
                "{direction} goodput {:.2} Mbit/s is above {:.2}: the rate limit is not in effect, or the profile's rate is in other units than meant ({RATE_UNITS})",
                mbit(measured_bps),
                mbit(high)
            ),
        )
    } else if measured_bps < low {
        (false, format!("{direction} goodput {:.2} Mbit/s is below {:.2} (loss, a small queue, or a host too slow for the rate)", mbit(measured_bps), mbit(low)))
    } else {
        (
            true,
            format!(
                "{direction} goodput {:.2} Mbit/s within {:.2}..{:.2}",
                mbit(measured_bps),
                mbit(low),
                mbit(high)
            ),
        )
    };
    Some(Check {
        name: format!("goodput_{direction}"),
        measured: mbit(measured_bps),
        low: mbit(low),
        high: mbit(high),
        unit: "mbit/s".into(),
        pass,
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_decide_on_a_pass_or_the_last_and_name_the_misses_before() {
        let miss = |r: &str| crate::cmd::MissedAttempt {
            reason: r.into(),
            ..Default::default()
        };
        let mut first = Attempts::new(3);
        assert_eq!(
            first.judge(true, "ok", || unreachable!(
                "a pass is never kept as a miss"
            )),
            Attempt::Decided {
                reason: "ok".into(),
                missed: vec![]
            }
        );
        let mut rule = Attempts::new(3);
        assert_eq!(rule.judge(false, "slow", || miss("slow")), Attempt::Again);
        assert_eq!(
            rule.judge(false, "slower", || miss("slower")),
            Attempt::Again
        );
        let Attempt::Decided { reason, missed } = rule.judge(false, "slowest", || miss("x")) else {
            panic!("the third of three attempts decides");
        };
        assert_eq!(
            reason,
            "slowest (attempt 3 of 3, after a wait for a steady machine; earlier: attempt 1 slow; attempt 2 slower)"
        );
        assert_eq!(missed.len(), 2);
        // Zero attempts allowed still measures once.
        assert!(matches!(
            Attempts::new(0).judge(false, "no", || miss("no")),
            Attempt::Decided { .. }
        ));
    }

    fn profile(extra: &str) -> Profile {
        let text = format!(
            "name: t\ndescription: d\nsource: s\ntopology: link\nuplink: {{ delay: 10ms, rate: 50mbit }}\n\
             downlink: {{ delay: 10ms, rate: 50mbit }}\nexpected:\n  rtt: {{ value: 20.1ms, minus: 1ms, plus: 2ms }}\n{extra}"
        );
        Profile::from_yaml(&text, "t.yaml").unwrap()
    }

    fn spec(yaml: &str) -> LinkSpec {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn the_bulk_window_is_the_round_trip_pipe_plus_half_the_queue_room() {
        // crossnet, by hand: 50 Mbit/s x (10 + 4 x 1 ms) x 2 = 1.4 Mbit = 116.7 -> 117 packets
        // of 1500 bytes; the forward pipe 50 Mbit/s x 14 ms = 58.3 -> 59, room 500 - 59 = 441,
        // half 220; 337 segments of 1448 bytes.
        let crossnet = spec("{ delay: 10ms, jitter: 1ms, rate: 50mbit, overhead: 38, limit: 500 }");
        assert_eq!(
            bulk_window_bytes(&crossnet, Some(&crossnet), Duration::ZERO),
            Some(337 * 1448)
        );
        // lan100: 100 Mbit/s x 200 us = 1.67 -> 2 packets; pipe 0.83 -> 1, room 99, half 49.
        let lan100 = spec("{ delay: 100us, rate: 100mbit, overhead: 38, limit: 100 }");
        assert_eq!(
            bulk_window_bytes(&lan100, Some(&lan100), Duration::ZERO),
            Some(51 * 1448)
        );
        // A real path under the link (across machines) lengthens the round trip: 10 ms more
        // at 50 Mbit/s is 41.7 packets, so 38 ms in all is 158.3 -> 159, plus the same 220.
        assert_eq!(
            bulk_window_bytes(&crossnet, Some(&crossnet), Duration::from_millis(10)),
            Some(379 * 1448)
        );
        // No way back given: the forward delay alone, 58.3 -> 59 + 220.
        assert_eq!(
            bulk_window_bytes(&crossnet, None, Duration::ZERO),
            Some(279 * 1448)
        );
        // The back direction's delay counts, not its rate: a slow back link changes nothing.
        let slow_back = spec("{ delay: 10ms, jitter: 1ms, rate: 1mbit, limit: 500 }");
        assert_eq!(
            bulk_window_bytes(&crossnet, Some(&slow_back), Duration::ZERO),
            Some(337 * 1448)
        );
        // Without a rate there is no window to set.
        let delay_only = spec("{ delay: 10ms }");
        assert_eq!(
            bulk_window_bytes(&delay_only, Some(&crossnet), Duration::ZERO),
            None
        );
        // A limit raised for an experiment's connections counts as the default (1000): room
        // 1000 - 59 = 941, half 470, plus the pipe's 117; the same as no limit at all.
        let sized = spec("{ delay: 10ms, jitter: 1ms, rate: 50mbit, overhead: 38, limit: 15000 }");
        let unset = spec("{ delay: 10ms, jitter: 1ms, rate: 50mbit, overhead: 38 }");
        for forward in [&sized, &unset] {
            assert_eq!(
                bulk_window_bytes(forward, Some(&crossnet), Duration::ZERO),
                Some(587 * 1448)
            );
        }
        // A limit equal to a tiny pipe still leaves the sender two segments.
        let tiny = spec("{ delay: 1us, rate: 1mbit, limit: 1 }");
        assert_eq!(
            bulk_window_bytes(&tiny, None, Duration::ZERO),
            Some(2 * 1448)
        );
    }

    #[test]
    fn rtt_below_the_delays_is_reported_as_not_in_effect() {
        let c = rtt_check(&profile(""), Duration::from_micros(60));
        assert!(!c.pass);
        assert!(c.reason.contains("not in effect"), "{}", c.reason);
        assert!(rtt_check(&profile(""), Duration::from_micros(20_500)).pass);
        assert!(!rtt_check(&profile(""), Duration::from_millis(25)).pass);
    }

    #[test]
    fn the_rtt_range_includes_both_ends_in_microseconds() {
        // 20.1 ms - 1 ms .. 20.1 ms + 2 ms.
        let c = rtt_check(&profile(""), Duration::from_micros(19_100));
        assert!(c.pass, "{}", c.reason);
        assert_eq!((c.measured, c.low, c.high), (19_100.0, 19_100.0, 22_100.0));
        assert_eq!((c.name.as_str(), c.unit.as_str()), ("rtt_median", "us"));
        assert!(rtt_check(&profile(""), Duration::from_micros(22_100)).pass);
        assert!(!rtt_check(&profile(""), Duration::from_nanos(22_100_001)).pass);
    }

    #[test]
    fn goodput_above_the_rate_is_reported_as_not_in_effect() {
        let p = profile("  goodput: { value: 47mbit, tolerance: 5% }\n");
        let c = goodput_check(&p, "uplink", 900e6).unwrap();
        assert!(
            !c.pass && c.reason.contains("not in effect"),
            "{}",
            c.reason
        );
        assert!(goodput_check(&p, "uplink", 46e6).unwrap().pass);
        assert!(!goodput_check(&p, "uplink", 30e6).unwrap().pass);
        assert!(
            goodput_check(&profile(""), "uplink", 1.0).is_none(),
            "no expectation, no check"
        );
    }

    /// lan100's links: 100 us and 100 Mbit/s with 38 bytes of framing each way.
    fn lan100(extra: &str) -> Profile {
        let text = format!(
            "name: l\ndescription: d\nsource: s\ntopology: link\n\
             uplink: {{ delay: 100us, rate: 100mbit, overhead: 38 }}\n\
             downlink: {{ delay: 100us, rate: 100mbit, overhead: 38 }}\n\
             expected:\n  rtt: {{ value: 250us, minus: 30us, plus: 300us }}\n{extra}"
        );
        Profile::from_yaml(&text, "l.yaml").unwrap()
    }

    #[test]
    fn the_baseline_pauses_as_long_as_the_link_holds_a_probe_in_whole_microseconds() {
        // 2 x 100 us + 2 x (68 + 38) x 8 bits / 100 Mbit/s = 200 + 16.96 us, truncated.
        assert_eq!(baseline_pace(&lan100("")), Duration::from_micros(216));
        // 2 x 10 ms + 2 x 68 x 8 bits / 50 Mbit/s = 20 ms + 21.76 us.
        assert_eq!(baseline_pace(&profile("")), Duration::from_micros(20_021));
        let lo = Profile::from_yaml(
            "name: lo\ndescription: d\nsource: s\ntopology: loopback\nexpected:\n  rtt: { value: 0s, minus: 0s, plus: 1s }\n",
            "lo.yaml",
        )
        .unwrap();
        assert_eq!(
            baseline_pace(&lo),
            Duration::ZERO,
            "nothing added, no pause"
        );
    }

    #[test]
    fn the_added_rtt_is_checked_against_delay_plus_serialization_with_the_larger_tolerance() {
        // 68-byte probes: (68 + 38) x 8 bits at 100 Mbit/s = 8.48 us per direction, so
        // 2 x 108.48 = 216.96 us; 10% is 21.7 us, less than 50 us, so 166.96..266.96 us.
        let p = lan100("");
        let at = |added_us: u64| {
            added_rtt_check(
                &p,
                Duration::from_micros(40),
                Duration::from_micros(40 + added_us),
                68,
            )
        };
        let c = at(200);
        assert!(c.pass, "{}", c.reason);
        assert_eq!((c.name.as_str(), c.unit.as_str()), ("added_rtt", "us"));
        assert_eq!((c.measured, c.low, c.high), (200.0, 166.96, 266.96));
        let short = at(160);
        assert!(
            !short.pass && short.reason.contains("not in effect"),
            "{}",
            short.reason
        );
        // The reason gives all three numbers.
        for n in ["added RTT 160.0 us", "median 200.0 us", "baseline 40.0 us"] {
            assert!(short.reason.contains(n), "{n}: {}", short.reason);
        }
        let slow = at(270);
        assert!(
            !slow.pass && slow.reason.contains("too slow"),
            "{}",
            slow.reason
        );
        assert!(at(167).pass && at(266).pass && !at(166).pass && !at(267).pass);
    }

    #[test]
    fn a_relative_tolerance_wins_on_a_long_link_and_the_profile_can_set_both() {
        // 20 ms with no rate: 10% = 2 ms, more than 50 us.
        let c = added_rtt_check(&profile(""), Duration::ZERO, Duration::from_millis(20), 68);
        // profile(): 10 ms each way at 50 Mbit/s, no overhead: 2 x (10 ms + 10.88 us).
        assert_eq!((c.low, c.high), (18_019.584, 22_023.936));
        let tight = lan100("  added_rtt: { relative: 1%, at_least: 5us }\n");
        let c = added_rtt_check(&tight, Duration::ZERO, Duration::from_micros(210), 68);
        assert_eq!((c.low, c.high), (211.96, 221.96));
        assert!(!c.pass);
    }

    #[test]
    fn range_ends_pass_and_values_are_reported_in_the_check_units() {
        // Goodput: 47 Mbit/s +- 5% = 44.65..49.35 Mbit/s, both ends accepted, reported in Mbit/s.
        let p = profile("  goodput: { value: 47mbit, tolerance: 5% }\n");
        let c = goodput_check(&p, "downlink", 46e6).unwrap();
        assert_eq!((c.measured, c.unit.as_str()), (46.0, "mbit/s"));
        assert!(
            (c.low - 44.65).abs() < 1e-9 && (c.high - 49.35).abs() < 1e-9,
            "{c:?}"
        );
        let (low, high) = p.expected.goodput.as_ref().unwrap().range();
        assert!(goodput_check(&p, "downlink", low).unwrap().pass);
        assert!(goodput_check(&p, "downlink", high).unwrap().pass);
        // Added RTT with a zero baseline: the measured value is the median itself, so the
        // range ends can be hit exactly (216.96 +- 50 us for lan100's links).
        let l = lan100("");
        for end_ns in [166_960, 266_960] {
            let c = added_rtt_check(&l, Duration::ZERO, Duration::from_nanos(end_ns), 68);
            assert!(c.pass, "{end_ns} ns: {}", c.reason);
        }
        // A loopback pass says that nothing was expected to be added; a link pass does not.
        let lo = Profile::from_yaml(
            "name: lo\ndescription: d\nsource: s\ntopology: loopback\nexpected:\n  rtt: { value: 0s, minus: 0s, plus: 1ms }\n",
            "lo.yaml",
        )
        .unwrap();
        let c = rtt_check(&lo, Duration::from_micros(30));
        assert!(
            c.pass && c.reason.contains("loopback: no impairment expected"),
            "{}",
            c.reason
        );
        let c = rtt_check(&profile(""), Duration::from_micros(20_500));
        assert!(c.pass && !c.reason.contains("loopback"), "{}", c.reason);
    }

    #[test]
    fn across_machines_the_total_is_the_real_path_plus_what_the_link_adds() {
        // lan100 by hand: 2 x (100 us + (68 + 38) bytes x 8 bits / 100 Mbit/s = 8.48 us)
        // = 216.96 us added, +-50 us (10% is 21.7 us, less than at_least 50 us). On a real
        // path of 400 us the total must lie in 566.96..666.96 us, far outside the profile's
        // one-machine band (250 us -30/+300 us).
        let p = lan100("");
        let base = Duration::from_micros(400);
        let c = sum_rtt_check(&p, base, Duration::from_micros(620), 68);
        assert!(c.pass, "{}", c.reason);
        assert_eq!(c.name, "rtt_median");
        assert!(
            (c.low - 566.96).abs() < 1e-6 && (c.high - 666.96).abs() < 1e-6,
            "{c:?}"
        );
        assert_eq!(c.measured, 620.0);
        assert!(
            c.reason.contains("400") && c.reason.contains("216.96"),
            "{}",
            c.reason
        );
        assert!(
            !rtt_check(&p, Duration::from_micros(620)).pass,
            "the one-machine band would refuse it"
        );
        let low = sum_rtt_check(&p, base, Duration::from_micros(450), 68);
        assert!(
            !low.pass && low.reason.contains("not in effect"),
            "{}",
            low.reason
        );
        let high = sum_rtt_check(&p, base, Duration::from_micros(700), 68);
        assert!(
            !high.pass && high.reason.contains("above"),
            "{}",
            high.reason
        );
        // Both ends are in.
        assert!(sum_rtt_check(&p, base, Duration::from_nanos(566_960), 68).pass);
        assert!(sum_rtt_check(&p, base, Duration::from_nanos(666_960), 68).pass);
        assert!(!sum_rtt_check(&p, base, Duration::from_nanos(666_961), 68).pass);
    }
}
