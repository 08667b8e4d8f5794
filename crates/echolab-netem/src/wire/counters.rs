//! The wire's counters, per direction: [`DirectionTally`], the live tally a direction's
//! thread keeps (with its histograms). What the wire prints of it, [`DirectionSnapshot`] in a
//! [`WireStats`] line, is a contract and so core's (`echolab_core::link_counters`, re-exported
//! here); a run's record keeps the difference of two snapshots over the run's window,
//! `echolab_core::link_counters::DirectionCounters`, made by the runtime's wiretap.

use echolab_core::hist::{self, LatencySummary};
use echolab_core::link_counters::PacketCounts;
pub use echolab_core::link_counters::{DirectionSnapshot, WireStats};
use hdrhistogram::Histogram;

/// Live counters of one direction, updated by its thread.
#[derive(Debug, Clone)]
pub struct DirectionTally {
    /// Packets written back (carried).
    pub packets: u64,
    /// Bytes of those packets (IP packets, without overhead).
    pub bytes: u64,
    /// Packets dropped by the loss model.
    pub drops_loss: u64,
    /// Packets dropped because the queue held `limit` packets.
    pub drops_queue: u64,
    /// Packets the kernel refused to take back (write errors).
    pub drops_write: u64,
    /// Most packets held at once.
    pub peak_queue: u64,
    /// Release error: time of the write minus the scheduled release time, ns.
    pub release_error: Histogram<u64>,
    /// Self-probe write-to-read times at startup, ns ([`super::probe`]).
    pub self_probe: Histogram<u64>,
    /// Subtracted from each packet's propagation delay, ns (the self-probe median; 0 when the
    /// probe was off or failed).
    pub compensation_ns: u64,
    /// How long before a release the direction wakes and polls, ns.
    pub early_wake_ns: u64,
    /// True when packets are scheduled from the kernel's arrival stamps ([`super::arrival`]);
    /// false when from the time the thread read them (then the self-probe compensates).
    pub kernel_stamps: bool,
    /// Packets scheduled from their read time because no stamp was found (with kernel
    /// stamps on: frames lost to a full ring).
    pub unstamped: u64,
    /// Packets discarded because they were not IPv4 (the TUN's own IPv6 chatter).
    pub not_ipv4: u64,
    /// Packets whose address the wire translated (a link across machines, [`super::nat`]).
    pub translated: u64,
    /// Read time minus kernel arrival stamp, ns: how long packets waited in the TUN for the
    /// thread (its wake-up), which the stamps keep out of the delay.
    pub tun_wait: Histogram<u64>,
    /// Times the direction gave up real-time priority because its TUN stayed undrained
    /// (overloaded; see `pump::Priority`).
    pub fair_share_spells: u64,
    /// Time spent in those spells, ns (counted when each ends).
    pub fair_share_ns: u64,
    /// The direction thread's scheduling class as it started: `"real-time (SCHED_FIFO 50)"`,
    /// or `"fair: "` and why real-time priority was refused (no CAP_SYS_NICE, or a cgroup
    /// without a real-time budget); empty until the thread has run.
    pub scheduling: String,
}

impl Default for DirectionTally {
    fn default() -> Self {
        Self {
            packets: 0,
            bytes: 0,
            drops_loss: 0,
            drops_queue: 0,
            drops_write: 0,
            peak_queue: 0,
            release_error: hist::new_latency_histogram(),
            self_probe: hist::new_latency_histogram(),
            compensation_ns: 0,
            early_wake_ns: 0,
            kernel_stamps: false,
            unstamped: 0,
            not_ipv4: 0,
            translated: 0,
            tun_wait: hist::new_latency_histogram(),
            fair_share_spells: 0,
            fair_share_ns: 0,
            scheduling: String::new(),
        }
    }
}

impl DirectionTally {
    /// The JSON form, with the direction's queue `limit`.
    pub fn to_stats(&self, limit: usize) -> DirectionSnapshot {
        DirectionSnapshot {
            counts: PacketCounts {
                packets: self.packets,
                bytes: self.bytes,
                drops_loss: self.drops_loss,
                drops_queue: self.drops_queue,
                drops_write: self.drops_write,
            },
            drops_device: None,
            peak_queue: self.peak_queue,
            limit: limit as u64,
            release_error_us: LatencySummary::from_histogram(&self.release_error),
            release_error_histogram: hist::encode(&self.release_error),
            compensation_us: self.compensation_ns as f64 / 1000.0,
            self_probe_us: LatencySummary::from_histogram(&self.self_probe),
            early_wake_us: self.early_wake_ns as f64 / 1000.0,
            arrival_from: if self.kernel_stamps {
                "kernel stamp"
            } else {
                "read time"
            }
            .into(),
            unstamped: self.unstamped,
            not_ipv4: self.not_ipv4,
            translated: self.translated,
            tun_wait_us: LatencySummary::from_histogram(&self.tun_wait),
            fair_share_spells: self.fair_share_spells,
            fair_share_ms: self.fair_share_ns as f64 / 1e6,
            scheduling: self.scheduling.clone(),
        }
    }
}
