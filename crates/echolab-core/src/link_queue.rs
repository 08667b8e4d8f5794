//! The link's queue limit sized for the experiment it carries.
//!
//! A profile without random loss promises to carry every packet, but each direction of the
//! link holds at most `limit` packets (netem's `limit`, the wire's bounded queue;
//! [`LinkSpec::effective_limit`]), and an experiment puts many packets in flight at once: at
//! 5000 connections each direction holds up to 5000 requests or replies beside their ACKs
//! while they wait out the link's delay. A limit below that drops packets the profile never
//! meant to lose, and the drops (a retransmission after at least 200 ms) show up as the
//! server's latency. So the launcher sizes the limit before any host exists
//! ([`QueueSizing::new`], called by [`crate::lab_plan::LabPlan::new`]):
//!
//! - a direction whose profile gives no `limit` gets the larger of its default
//!   ([`LinkSpec::default_limit`]) and the experiment's packets in flight;
//! - a direction whose `limit` is below the packets in flight is refused in one line naming
//!   the profile, the field, the value and the number needed (an explicit limit is a claim
//!   about the path; silently raising it would run another path than the one named);
//! - an explicit limit at or above it is kept.
//!
//! The profile handed to the link host ([`QueueSizing::apply`]) then carries the limit in
//! force, so kernel netem and the userspace wire get the same number; the plan records it
//! and why (the manifest's `plan.queue`).

use serde::{Deserialize, Serialize};

use crate::experiment::{BenchMode, Cell, Experiment};
use crate::profile::{LinkSpec, Profile, Topology, FULL_SEGMENT_PAYLOAD};

/// The reply size of echo-bench `sustain` without `--reply-bytes` (echo-bench's default).
const SUSTAIN_DEFAULT_REPLY_BYTES: u64 = 1024;

/// Packets one connection of `cell` can have in one direction of the link at once.
///
/// echo-bench keeps one request in flight per connection (the next one starts after the
/// reply, closed or open loop), so a direction carries one message: the request's or the
/// reply's segments (of [`FULL_SEGMENT_PAYLOAD`] bytes each, at least one), plus one pure
/// ACK of the other direction's message (a delayed or quick ACK that did not ride on data).
/// A run that opens and closes connections in its window (`short`, `connect-storm`) adds one
/// control segment: the FIN of the connection that ends and the SYN of the one that replaces
/// it travel together, and after the server's answer the client's last ACK of the old
/// connection, the ACK of the new one's handshake and its request do.
pub fn packets_per_connection(cell: &Cell) -> u64 {
    let reply = match cell.mode {
        BenchMode::Sustain => cell.reply_bytes.unwrap_or(SUSTAIN_DEFAULT_REPLY_BYTES),
        _ => cell.reply_bytes.unwrap_or(cell.payload),
    };
    let message = cell
        .payload
        .max(reply)
        .div_ceil(FULL_SEGMENT_PAYLOAD)
        .max(1);
    let control = match cell.mode {
        BenchMode::Short | BenchMode::ConnectStorm => 1,
        BenchMode::Long | BenchMode::Sustain => 0,
    };
    message + 1 + control
}

/// The limit one direction got, and where it came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct SizedLimit {
    /// The limit in force, packets.
    pub limit: u32,
    /// What the profile gave (`None`: no `limit`, so the launcher chose it).
    pub profile_limit: Option<u32>,
}

/// The queue limits of a run's link, sized for its experiment: in the lab plan (the
/// manifest's `plan.queue`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct QueueSizing {
    /// Packets the experiment can put in one direction at once: the busiest cell's
    /// connections × [`packets_per_connection`].
    pub packets_in_flight: u64,
    /// That cell's id ([`Cell::id`]).
    pub cell: String,
    /// Client to server.
    pub uplink: SizedLimit,
    /// Server to client.
    pub downlink: SizedLimit,
    /// Why these limits, in one line.
    pub reason: String,
}

impl QueueSizing {
    /// The limits of `profile`'s link for `experiment`; `None` for a profile without a link
    /// (loopback, native) or an experiment without cells.
    ///
    /// # Errors
    /// A direction's explicit `limit` is below the packets in flight, or the packets in
    /// flight exceed what a limit can hold (`u32`); one line naming the profile, the field,
    /// the value and the number needed.
    pub fn new(profile: &Profile, experiment: &Experiment) -> Result<Option<Self>, String> {
        let (Topology::Link, Some(up), Some(down)) =
            (profile.topology, &profile.uplink, &profile.downlink)
        else {
            return Ok(None);
        };
        let Some((cell, in_flight)) = experiment
            .cells()
            .into_iter()
            .map(|c| {
                let n = c.conns.saturating_mul(packets_per_connection(&c));
                (c, n)
            })
            .max_by_key(|(_, n)| *n)
        else {
            return Ok(None);
        };
        let per_conn = packets_per_connection(&cell);
        let why = format!(
            "experiment {} puts up to {in_flight} packets in each direction at once (cell {}: {} connections × {per_conn} packets: one message of {}-byte segments, its ACK{})",
            experiment.name,
            cell.id(),
            cell.conns,
            FULL_SEGMENT_PAYLOAD,
            if per_conn > 2 && matches!(cell.mode, BenchMode::Short | BenchMode::ConnectStorm) {
                ", a SYN or FIN"
            } else {
                ""
            },
        );
        let needed = u32::try_from(in_flight).map_err(|_| {
            format!(
                "profile {}: no queue limit can hold what {why}; a limit is at most {} packets",
                profile.name,
                u32::MAX
            )
        })?;
        let size = |spec: &LinkSpec, field: &str| {
            match spec.limit {
            Some(limit) if limit < needed => Err(format!(
                "profile {}: {field}.limit: {limit} packets is below the {needed} the link must hold: {why}; raise {field}.limit to at least {needed}, or leave it out and the launcher sizes it",
                profile.name
            )),
            Some(limit) => Ok(SizedLimit {
                limit,
                profile_limit: Some(limit),
            }),
            None => Ok(SizedLimit {
                limit: spec.default_limit().max(needed),
                profile_limit: None,
            }),
        }
        };
        let uplink = size(up, "uplink")?;
        let downlink = size(down, "downlink")?;
        let said = |s: &SizedLimit| match s.profile_limit {
            Some(l) => format!("the profile's {l}"),
            None => format!("{} (the profile gives none)", s.limit),
        };
        Ok(Some(QueueSizing {
            packets_in_flight: in_flight,
            cell: cell.id(),
            reason: format!(
                "{why}; uplink limit {}, downlink limit {}",
                said(&uplink),
                said(&downlink)
            ),
            uplink,
            downlink,
        }))
    }

    /// `profile` with each direction's `limit` set to the one in force: the profile the link
    /// host gets (`--profile-json`), so that both backends use the sized limit.
    pub fn apply(&self, profile: &Profile) -> Profile {
        let mut out = profile.clone();
        if let Some(up) = out.uplink.as_mut() {
            up.limit = Some(self.uplink.limit);
        }
        if let Some(down) = out.downlink.as_mut() {
            down.limit = Some(self.downlink.limit);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROFILE: &str = "name: p\ndescription: d\nsource: s\ntopology: link\n\
        uplink: { delay: 10ms, jitter: 1ms, rate: 50mbit, overhead: 38 }\n\
        downlink: { delay: 10ms, jitter: 1ms, rate: 50mbit, overhead: 38 }\n\
        expected:\n  rtt: { value: 20.1ms, minus: 1.5ms, plus: 2ms }\n";

    fn profile(extra_up: &str) -> Profile {
        let text = PROFILE.replace(
            "overhead: 38 }\ndown",
            &format!("overhead: 38{extra_up} }}\ndown"),
        );
        Profile::from_yaml(&text, "p.yaml").unwrap()
    }

    fn experiment(modes: &str, conns: &str) -> Experiment {
        Experiment::parse(
            &format!("name: e\nquestion: q\nrepetitions: 1\nwindow: 1s\nmatrix:\n  - servers: [epoll-et]\n    modes: [{modes}]\n    conns: [{conns}]\n    rounds: [10]\n"),
            "e.yaml",
        )
        .unwrap()
    }

    #[test]
    fn exp33s_5000_connections_need_15000_packets_per_direction() {
        let exp33 = experiment("short, long", "100, 500, 1000, 2000, 5000");
        let s = QueueSizing::new(&profile(""), &exp33).unwrap().unwrap();
        // Short connections: request (one 12-byte segment) + ACK + SYN/FIN, 5000 of them.
        assert_eq!(s.packets_in_flight, 15_000);
        assert_eq!(s.cell, "epoll-et_short_c5000_d1s");
        assert_eq!(
            (s.uplink.clone(), s.downlink.limit),
            (
                SizedLimit {
                    limit: 15_000,
                    profile_limit: None
                },
                15_000
            )
        );
        assert!(
            s.reason.contains("5000 connections × 3 packets"),
            "{}",
            s.reason
        );
        // Long connections alone: message + ACK.
        let long = experiment("long", "5000");
        let s = QueueSizing::new(&profile(""), &long).unwrap().unwrap();
        assert_eq!(s.packets_in_flight, 10_000);
        // The sized profile is what the link host gets: both directions carry the limit.
        let applied = s.apply(&profile(""));
        assert_eq!(applied.uplink.as_ref().unwrap().effective_limit(), 10_000);
        assert_eq!(applied.downlink.as_ref().unwrap().effective_limit(), 10_000);
        assert_eq!(
            Profile::from_json(&applied.to_json(), "json").unwrap(),
            applied
        );
    }

    #[test]
    fn an_unset_limit_keeps_its_default_when_that_is_enough() {
        let s = QueueSizing::new(&profile(""), &experiment("long", "100"))
            .unwrap()
            .unwrap();
        assert_eq!(s.packets_in_flight, 200);
        assert_eq!(s.uplink.limit, LinkSpec::default().default_limit());
        assert!(
            s.reason.contains("(the profile gives none)"),
            "{}",
            s.reason
        );
    }

    #[test]
    fn an_explicit_limit_below_the_need_is_refused_in_one_line() {
        let e =
            QueueSizing::new(&profile(", limit: 500"), &experiment("long", "5000")).unwrap_err();
        assert!(!e.contains('\n'), "{e}");
        assert!(
            e.starts_with(
                "profile p: uplink.limit: 500 packets is below the 10000 the link must hold"
            ),
            "{e}"
        );
        assert!(e.contains("5000 connections × 2 packets"), "{e}");
        // At or above the need, the profile's own limit is kept.
        let s = QueueSizing::new(&profile(", limit: 10000"), &experiment("long", "5000"))
            .unwrap()
            .unwrap();
        assert_eq!(
            (
                s.uplink.limit,
                s.uplink.profile_limit,
                s.downlink.profile_limit
            ),
            (10_000, Some(10_000), None)
        );
        assert!(
            s.reason.contains("uplink limit the profile's 10000"),
            "{}",
            s.reason
        );
    }

    #[test]
    fn big_messages_count_their_segments_and_no_link_needs_no_sizing() {
        let mut cell = experiment("long", "1").cells().remove(0);
        cell.payload = 3 * FULL_SEGMENT_PAYLOAD + 1;
        assert_eq!(packets_per_connection(&cell), 4 + 1);
        cell.mode = BenchMode::Sustain;
        cell.payload = 12;
        cell.reply_bytes = None;
        assert_eq!(
            packets_per_connection(&cell),
            2,
            "a 1024-byte reply is one segment"
        );
        let loopback = Profile::from_yaml(
            "name: l\ndescription: d\nsource: s\ntopology: loopback\nexpected:\n  rtt: { value: 0s, minus: 0s, plus: 1ms }\n",
            "l.yaml",
        )
        .unwrap();
        assert_eq!(
            QueueSizing::new(&loopback, &experiment("long", "5000")),
            Ok(None)
        );
    }
}
