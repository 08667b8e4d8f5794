//! The wire's counters, per direction, in their two forms: [`DirectionTally`], the live tally
//! a direction's thread keeps (with its histograms), and [`DirectionSnapshot`], the JSON the
//! wire prints of it, cumulative since the wire started. A run's record keeps neither: it
//! keeps the difference of two snapshots over the run's window,
//! `echolab_core::results::DirectionCounters`, made by the runtime's wiretap.

use echolab_core::hist::{self, LatencySummary};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

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

/// JSON form of one direction's tally, cumulative since the wire started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DirectionSnapshot {
    /// Packets carried.
    pub packets: u64,
    /// Bytes carried.
    pub bytes: u64,
    /// Lost by the loss model.
    pub drops_loss: u64,
    /// Dropped at the queue limit.
    pub drops_queue: u64,
    /// Refused by the kernel on write-back.
    pub drops_write: u64,
    /// Dropped by the kernel at the direction's TUN before the wire read them (its
    /// `tx_dropped`: the TUN's queue was full because the wire fell behind); null when the
    /// counter could not be read. Not the profile's doing.
    #[serde(default)]
    pub drops_device: Option<u64>,
    /// Most packets held at once.
    pub peak_queue: u64,
    /// The queue limit, packets.
    pub limit: u64,
    /// Release error (write time minus scheduled time), µs: how late the wire is on its own
    /// schedule. The schedule is the profile's delay minus `compensation_us`, so the delay seen
    /// from outside is the profile's plus this plus the kernel's unseen share (which the
    /// compensation estimates); `examples/wire_perf.rs` measures that end to end. `null` before
    /// the first release.
    #[serde(default, deserialize_with = "hist::de_optional_summary")]
    pub release_error_us: Option<LatencySummary>,
    /// The release-error histogram (ns, HdrHistogram V2 base64), for merging.
    pub release_error_histogram: String,
    /// The wire's own per-pass overhead it subtracts from the profile's delay (never below
    /// zero), µs: the median of `self_probe_us`. 0 when not compensated.
    #[serde(default)]
    pub compensation_us: f64,
    /// Self-probe write-to-read times measured at startup, µs ([`super::probe`]); `null` when
    /// the probe was off or failed.
    #[serde(default, deserialize_with = "hist::de_optional_summary")]
    pub self_probe_us: Option<LatencySummary>,
    /// How long before each release the direction wakes and polls instead of sleeping, µs.
    #[serde(default)]
    pub early_wake_us: f64,
    /// What each packet's delay counts from: `"kernel stamp"` (when it entered the TUN, from
    /// a packet socket's ring) or `"read time"` (when the wire read it; the self-probe's
    /// compensation then estimates the difference).
    #[serde(default)]
    pub arrival_from: String,
    /// Packets scheduled from their read time although kernel stamps were on (no stamp
    /// found for them).
    #[serde(default)]
    pub unstamped: u64,
    /// Packets discarded because they were not IPv4: the TUN devices' own IPv6 chatter
    /// (router solicitations, MLD reports), which carries nothing between the hosts and
    /// would otherwise take draws from the seeded loss and jitter generator.
    #[serde(default)]
    pub not_ipv4: u64,
    /// Packets whose address the wire translated: on a link across machines, every packet
    /// between the client and the server (`--masquerade-client`); 0 otherwise.
    #[serde(default)]
    pub translated: u64,
    /// How long packets waited in the TUN before the wire read them, µs (all zeros without
    /// kernel stamps, or before the first packet).
    #[serde(default, deserialize_with = "hist::de_optional_summary")]
    pub tun_wait_us: Option<LatencySummary>,
    /// Times the direction was overloaded (its TUN undrained for 2 ms: packets arrived faster
    /// than it carried them) and gave up real-time priority to share its CPU, so that the
    /// applications it delivers to could run; release times slip during those spells.
    #[serde(default)]
    pub fair_share_spells: u64,
    /// Time spent in those spells, ms.
    #[serde(default)]
    pub fair_share_ms: f64,
    /// The direction thread's scheduling class as it started (`DirectionTally::scheduling`):
    /// without real-time priority, release times slip by the host's scheduling delays.
    #[serde(default)]
    pub scheduling: String,
}

impl DirectionTally {
    /// The JSON form, with the direction's queue `limit`.
    pub fn to_stats(&self, limit: usize) -> DirectionSnapshot {
        DirectionSnapshot {
            packets: self.packets,
            bytes: self.bytes,
            drops_loss: self.drops_loss,
            drops_queue: self.drops_queue,
            drops_write: self.drops_write,
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

/// What `echolab-netem wire` prints on SIGUSR1, every `--stats-interval`, and on exit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireStats {
    /// Always `"echolab-netem wire"`.
    pub tool: String,
    /// Profile name.
    pub profile: String,
    /// Seed of the loss and jitter generator (uplink uses it, downlink uses it + 1).
    pub seed: u64,
    /// Seconds since the wire started carrying packets.
    pub uptime_s: f64,
    /// True for the report printed on exit.
    #[serde(rename = "final")]
    pub is_final: bool,
    /// Client to server.
    pub uplink: DirectionSnapshot,
    /// Server to client.
    pub downlink: DirectionSnapshot,
}
