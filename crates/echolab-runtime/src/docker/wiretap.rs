//! The userspace wire's counters, read per run: the launcher sends the wire SIGUSR1, the wire
//! prints one [`WireStats`] line on stdout (echolab-netem's contract), and two such snapshots,
//! before and after a run, give what the link carried, dropped and how late it released
//! packets during that run.

use std::time::Duration;

use anyhow::anyhow;
use bollard::Docker;
use echolab_core::cmd::{Job, JobSignal, NetemCmd, SignalJob};
use echolab_core::hist;
use echolab_core::link_counters::{DirectionSnapshot, WireStats};
use echolab_core::results::{DirectionCounters, LinkCounters};
use tokio::sync::mpsc::UnboundedReceiver;

use super::exec;
use crate::hosts::STOP_DEADLINE;
use crate::image_archive::IMAGE_BIN_DIR;

/// How long the wire may take to answer SIGUSR1 with a stats line: it prints from its signal
/// thread at once; generous for a loaded 2-core machine.
const ANSWER_DEADLINE: Duration = Duration::from_secs(10);

/// The wire running in the link host, with its stdout lines.
pub struct WireTap {
    docker: Docker,
    link: String,
    lines: UnboundedReceiver<String>,
}

impl WireTap {
    /// Taps the wire running in container `link` whose stdout lines arrive on `lines`.
    pub fn new(docker: &Docker, link: &str, lines: UnboundedReceiver<String>) -> Self {
        Self {
            docker: docker.clone(),
            link: link.to_string(),
            lines,
        }
    }

    /// The wire's counters now.
    ///
    /// # Errors
    /// The signal could not be sent, or no stats line came within `ANSWER_DEADLINE` (the
    /// wire died or its stdout closed).
    pub async fn snapshot(&mut self) -> anyhow::Result<WireStats> {
        // Lines printed before this request (periodic or earlier answers) are not the answer.
        while self.lines.try_recv().is_ok() {}
        let cmd = Job::Signal(SignalJob {
            target: NetemCmd::PROGRAM.into(),
            signal: JobSignal::Usr1,
        })
        .command(IMAGE_BIN_DIR);
        let sent = exec::run(&self.docker, &self.link, &cmd, STOP_DEADLINE).await?;
        if sent.exit_code != Some(0) {
            return Err(anyhow!("SIGUSR1 to the wire: {}", sent.describe()));
        }
        let wait = async {
            while let Some(line) = self.lines.recv().await {
                if let Ok(stats) = serde_json::from_str::<WireStats>(&line) {
                    return Some(stats);
                }
            }
            None
        };
        match tokio::time::timeout(ANSWER_DEADLINE, wait).await {
            Ok(Some(stats)) => Ok(stats),
            Ok(None) => Err(anyhow!("the wire's output closed: it is no longer running")),
            Err(_) => Err(anyhow!(
                "the wire printed no stats within {ANSWER_DEADLINE:?} of SIGUSR1"
            )),
        }
    }
}

/// What the link did between snapshots `before` and `after` of the same wire.
pub fn between(before: &WireStats, after: &WireStats) -> LinkCounters {
    LinkCounters {
        backend: "userspace-wire".into(),
        uplink: direction_between(&before.uplink, &after.uplink),
        downlink: direction_between(&before.downlink, &after.downlink),
    }
}

/// The counters of several wires (one per client machine of a lab run on a link profile)
/// as one wire's: counts added, release-error histograms merged, the peak queue the largest
/// of them, so that [`between`] two sums is the sum of what each wire did in between.
/// Fields [`between`] does not read (the self-probe, the TUN wait, uptime) are the first
/// wire's.
///
/// # Errors
/// No wire, or a release-error histogram that does not decode.
pub fn summed(all: Vec<WireStats>) -> anyhow::Result<WireStats> {
    let mut all = all.into_iter();
    let mut total = all.next().ok_or_else(|| anyhow!("no wire to read"))?;
    for w in all {
        for (t, d) in [
            (&mut total.uplink, &w.uplink),
            (&mut total.downlink, &w.downlink),
        ] {
            add_direction(t, d)?;
        }
    }
    Ok(total)
}

fn add_direction(t: &mut DirectionSnapshot, d: &DirectionSnapshot) -> anyhow::Result<()> {
    t.counts.add(&d.counts);
    t.drops_device = match (t.drops_device, d.drops_device) {
        (Some(a), Some(b)) => Some(a + b),
        _ => None,
    };
    t.peak_queue = t.peak_queue.max(d.peak_queue);
    t.limit = t.limit.max(d.limit);
    t.fair_share_spells += d.fair_share_spells;
    t.fair_share_ms += d.fair_share_ms;
    t.translated += d.translated;
    t.unstamped += d.unstamped;
    t.not_ipv4 += d.not_ipv4;
    // Wires that started in different classes (one engine grants real time, another not)
    // are all named; the same class once.
    if !t.scheduling.split("; ").any(|c| c == d.scheduling) {
        t.scheduling = format!("{}; {}", t.scheduling, d.scheduling);
    }
    let merged = hist::merge([
        t.release_error_histogram.as_str(),
        d.release_error_histogram.as_str(),
    ])
    .map_err(|e| anyhow!("a wire's release-error histogram: {e}"))?;
    t.release_error_us = hist::LatencySummary::from_histogram(&merged);
    t.release_error_histogram = hist::encode(&merged);
    Ok(())
}

fn direction_between(b: &DirectionSnapshot, a: &DirectionSnapshot) -> DirectionCounters {
    // The release-error histogram is cumulative: the interval's own is the difference.
    let release = match (
        hist::decode(&b.release_error_histogram),
        hist::decode(&a.release_error_histogram),
    ) {
        (Ok(before), Ok(mut after)) => match after.subtract(&before) {
            Ok(()) => hist::LatencySummary::from_histogram(&after),
            // The snapshot's own summary covers the wire's whole life, not this interval.
            Err(_) => None,
        },
        _ => None,
    };
    DirectionCounters {
        counts: a.counts.since(&b.counts),
        drops_device: a
            .drops_device
            .unwrap_or(0)
            .saturating_sub(b.drops_device.unwrap_or(0)),
        peak_queue_since_start: a.peak_queue,
        limit: a.limit,
        release_error_us: release,
        overloaded_spells: a.fair_share_spells.saturating_sub(b.fair_share_spells),
        scheduling: a.scheduling.clone(),
        // Kernel netem's own counters; the wire counts its drops by cause above.
        drops_qdisc: 0,
        overlimits: 0,
        requeues: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use echolab_core::link_counters::PacketCounts;

    fn direction(packets: u64, drops_queue: u64, release_ns: &[u64]) -> DirectionSnapshot {
        let mut h = hist::new_latency_histogram();
        for &ns in release_ns {
            assert!(!hist::record_ns(&mut h, ns));
        }
        DirectionSnapshot {
            counts: PacketCounts {
                packets,
                bytes: packets * 100,
                drops_loss: 1,
                drops_queue,
                drops_write: 0,
            },
            drops_device: Some(0),
            peak_queue: 40,
            limit: 100,
            release_error_us: hist::LatencySummary::from_histogram(&h),
            release_error_histogram: hist::encode(&h),
            compensation_us: 0.0,
            self_probe_us: Default::default(),
            early_wake_us: 0.0,
            arrival_from: "kernel stamp".into(),
            unstamped: 0,
            not_ipv4: 0,
            translated: 0,
            tun_wait_us: Default::default(),
            fair_share_spells: 0,
            fair_share_ms: 0.0,
            scheduling: "real-time (SCHED_FIFO 50)".into(),
        }
    }

    fn stats(up: DirectionSnapshot, down: DirectionSnapshot) -> WireStats {
        WireStats {
            tool: "echolab-netem wire".into(),
            profile: "lan100".into(),
            seed: 1,
            uptime_s: 1.0,
            is_final: false,
            uplink: up,
            downlink: down,
        }
    }

    #[test]
    fn two_wires_add_up_to_what_each_did() {
        // Wire 1 carried 300 packets during the run (10 ms late each), wire 2 carried 200
        // (30 ms late each) and dropped 4 at its queue; both had 10 earlier 5 us releases.
        let mut w1 = (
            stats(
                direction(100, 0, &[5_000; 10]),
                direction(50, 0, &[5_000; 10]),
            ),
            stats(
                direction(
                    400,
                    0,
                    &[&[5_000u64; 10][..], &[10_000_000; 300][..]].concat(),
                ),
                direction(50, 0, &[5_000; 10]),
            ),
        );
        let mut w2 = (
            stats(
                direction(10, 1, &[5_000; 10]),
                direction(7, 0, &[5_000; 10]),
            ),
            stats(
                direction(
                    210,
                    5,
                    &[&[5_000u64; 10][..], &[30_000_000; 200][..]].concat(),
                ),
                direction(7, 0, &[5_000; 10]),
            ),
        );
        w2.1.uplink.peak_queue = 90;
        w2.1.uplink.drops_device = None;
        // The loss models dropped 1 (wire 1) and 2 (wire 2) during the run, and the kernel
        // refused 2 of wire 2's write-backs.
        w1.1.uplink.counts.drops_loss = 2;
        (
            w2.1.uplink.counts.drops_loss,
            w2.1.uplink.counts.drops_write,
        ) = (3, 2);
        // Counters the run record does not take, added all the same: 3 and 4 packets
        // translated, 1 and 2 unstamped, 5 and 6 not IPv4, 1.5 and 2.5 ms of fair share; wire
        // 2 with a larger queue limit.
        let (mut a, mut b) = (w1.1.clone(), w2.1.clone());
        (a.uplink.translated, b.uplink.translated) = (3, 4);
        (a.uplink.unstamped, b.uplink.unstamped) = (1, 2);
        (a.uplink.not_ipv4, b.uplink.not_ipv4) = (5, 6);
        (a.uplink.fair_share_ms, b.uplink.fair_share_ms) = (1.5, 2.5);
        (a.uplink.fair_share_spells, b.uplink.fair_share_spells) = (2, 3);
        (a.uplink.drops_device, b.uplink.drops_device) = (Some(2), Some(3));
        b.uplink.limit = 1000;
        let u = summed(vec![a, b]).unwrap().uplink;
        assert_eq!((u.fair_share_spells, u.drops_device), (5, Some(5)));
        assert_eq!(
            u.scheduling, "real-time (SCHED_FIFO 50)",
            "the same class once"
        );
        let mut fair = w2.1.clone();
        fair.uplink.scheduling = "fair: EPERM".into();
        let three = summed(vec![w1.1.clone(), fair, w2.1.clone()]).unwrap();
        assert_eq!(
            three.uplink.scheduling,
            "real-time (SCHED_FIFO 50); fair: EPERM"
        );
        assert_eq!(
            (
                u.translated,
                u.unstamped,
                u.not_ipv4,
                u.fair_share_ms,
                u.limit
            ),
            (7, 3, 11, 4.0, 1000)
        );
        let before = summed(vec![w1.0.clone(), w2.0.clone()]).unwrap();
        let after = summed(vec![w1.1.clone(), w2.1.clone()]).unwrap();
        let c = between(&before, &after);
        assert_eq!(
            (c.uplink.counts.packets, c.uplink.counts.bytes),
            (500, 50_000)
        );
        assert_eq!(c.uplink.counts.drops_queue, 4);
        assert_eq!(
            (c.uplink.counts.drops_loss, c.uplink.counts.drops_write),
            (3, 2)
        );
        assert_eq!(c.uplink.peak_queue_since_start, 90);
        // A wire that could not read its TUN's counter makes the sum unknown, not smaller.
        assert_eq!(after.uplink.drops_device, None);
        // 300 releases 10 ms late and 200 30 ms late: the median is wire 1's, the p99 wire 2's.
        let release = c.uplink.release_error_us.unwrap();
        let (p50, p99) = (release.p50, release.p99);
        assert!((9_900.0..=10_100.0).contains(&p50), "p50 {p50}");
        assert!((29_700.0..=30_300.0).contains(&p99), "p99 {p99}");
        assert_eq!(c.downlink.counts.packets, 0);
        assert!(summed(Vec::new()).is_err());
    }

    #[test]
    fn a_run_gets_the_difference_of_two_snapshots() {
        let before = stats(
            direction(1000, 2, &[5_000; 10]),
            direction(900, 0, &[5_000; 10]),
        );
        // During the run: 500 more packets, 19 queue drops, and releases 50 µs late.
        let after = stats(
            direction(
                1500,
                21,
                &[&[5_000u64; 10][..], &[50_000; 500][..]].concat(),
            ),
            direction(1400, 0, &[5_000; 10]),
        );
        let (mut before, mut after) = (before, after);
        // The TUN dropped 4 packets before the run and 3 more during it.
        before.uplink.drops_device = Some(4);
        after.uplink.drops_device = Some(7);
        // It was overloaded twice before the run and three times during it.
        before.uplink.fair_share_spells = 2;
        after.uplink.fair_share_spells = 5;
        let c = between(&before, &after);
        assert_eq!(
            (c.uplink.counts.packets, c.uplink.counts.bytes),
            (500, 50_000)
        );
        assert_eq!(
            (c.uplink.counts.drops_queue, c.uplink.counts.drops_loss),
            (19, 0)
        );
        assert_eq!(c.uplink.drops_device, 3);
        assert_eq!(c.uplink.overloaded_spells, 3);
        assert_eq!(c.unintended_drops(), 19 + 3);
        assert_eq!(c.uplink.peak_queue_since_start, 40);
        // Only the run's 500 releases: all 50 µs late, none of the earlier 5 µs ones.
        let p50 = c.uplink.release_error_us.unwrap().p50;
        assert!((49.0..=51.0).contains(&p50), "p50 {p50}");
        assert_eq!(c.downlink.counts.packets, 500);
        assert_eq!(
            c.downlink.release_error_us, None,
            "no release in the run: no release error, not 0 µs"
        );
        // The class the wire ends the run in.
        after.downlink.scheduling = "fair: EPERM".into();
        let c = between(&before, &after);
        assert_eq!(
            (c.uplink.scheduling.as_str(), c.downlink.scheduling.as_str()),
            ("real-time (SCHED_FIFO 50)", "fair: EPERM")
        );
    }
}
