//! The link's counters, defined once for both sides: what the link host prints of them
//! (the userspace wire's [`WireStats`] on SIGUSR1 and on exit, `echolab-netem show`'s
//! [`QdiscStats`] for kernel netem), and what a run's record keeps of them ([`LinkCounters`],
//! the difference of two readings over the run's window). The packet counts shared by a
//! wire's snapshot and a run's interval are one struct, [`PacketCounts`], flattened into
//! both, so the JSON keys stay `packets`, `bytes`, `drops_loss`, `drops_queue`, `drops_write`.
//!
//! echolab-netem prints these, the runtime reads them back (its `wiretap` and `qdisctap`) and
//! the report reads the records; none of them needs the other's crate for the types.

use serde::{Deserialize, Serialize};

use crate::hist::{self, LatencySummary};

/// What one direction of a link carried and dropped: cumulative in a wire's snapshot
/// ([`DirectionSnapshot`]), over an interval in a run's record ([`DirectionCounters`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PacketCounts {
    /// Packets carried.
    pub packets: u64,
    /// Bytes of those packets (IP packets, without link-layer overhead).
    pub bytes: u64,
    /// Dropped by the profile's loss model (intended).
    pub drops_loss: u64,
    /// Dropped because the queue held its limit (the profile's queue overflowed).
    pub drops_queue: u64,
    /// Refused by the kernel when written back (not the profile's doing).
    pub drops_write: u64,
}

impl PacketCounts {
    /// What `self` (a later reading of the same wire) gained since `before`, each count
    /// saturating at zero (a wire that restarted reads as nothing gained, not as a wrap).
    pub fn since(&self, before: &PacketCounts) -> PacketCounts {
        PacketCounts {
            packets: self.packets.saturating_sub(before.packets),
            bytes: self.bytes.saturating_sub(before.bytes),
            drops_loss: self.drops_loss.saturating_sub(before.drops_loss),
            drops_queue: self.drops_queue.saturating_sub(before.drops_queue),
            drops_write: self.drops_write.saturating_sub(before.drops_write),
        }
    }

    /// Adds `other`'s counts to these (several wires read as one).
    pub fn add(&mut self, other: &PacketCounts) {
        self.packets += other.packets;
        self.bytes += other.bytes;
        self.drops_loss += other.drops_loss;
        self.drops_queue += other.drops_queue;
        self.drops_write += other.drops_write;
    }
}

/// One direction of `echolab-netem wire`'s JSON (the wire's live tally of it), cumulative
/// since the wire started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DirectionSnapshot {
    /// Packets carried and dropped since the wire started (flattened: the JSON keys are
    /// [`PacketCounts`]'s).
    #[serde(flatten)]
    pub counts: PacketCounts,
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
    /// Self-probe write-to-read times measured at startup, µs (echolab-netem's `wire::probe`); `null` when
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
    /// The direction thread's scheduling class as it started (echolab-netem's `wire::counters::DirectionTally`):
    /// without real-time priority, release times slip by the host's scheduling delays.
    #[serde(default)]
    pub scheduling: String,
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

/// A qdisc's counters, from the kernel's `TCA_STATS2` (`struct gnet_stats_basic` and
/// `struct gnet_stats_queue`, `include/uapi/linux/gen_stats.h`), cumulative since the qdisc
/// was created: what `tc -s qdisc show` prints as "Sent B bytes P pkt (dropped D, overlimits O
/// requeues R) backlog Bb Qp".
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QdiscStats {
    /// Bytes sent (dequeued), including link-layer headers.
    pub bytes: u64,
    /// Packets sent (dequeued).
    pub packets: u64,
    /// Packets dropped: netem's random loss, and packets refused at the `limit`.
    pub drops: u32,
    /// Times the qdisc was over a limit (netem: a packet held back by its rate).
    pub overlimits: u32,
    /// Packets put back for a later dequeue.
    pub requeues: u32,
    /// Bytes queued when read.
    pub backlog_bytes: u32,
    /// Packets queued when read.
    pub qlen: u32,
}

impl QdiscStats {
    /// The counters `after` gained since `self`, both read from the same qdisc (the backlog
    /// and queue length as `after` read them).
    ///
    /// The kernel's `gnet_stats_queue` counters are 32 bits wide and wrap (a link that drops
    /// or is over its rate limit for long enough passes 2^32), and so does the packet count
    /// of kernels without `TCA_STATS_PKT64`; each difference is taken modulo its width, so a
    /// wrap between two readings gives what was gained, as long as that is below 2^32. A
    /// counter that went down is therefore no sign of a replaced qdisc: compare the two
    /// readings' handles for that (`echolab-netem show`'s `handle`; a replaced root qdisc gets a new
    /// one).
    pub fn delta(&self, after: &QdiscStats) -> QdiscStats {
        let packets = match (u32::try_from(self.packets), u32::try_from(after.packets)) {
            // A 32-bit count (no TCA_STATS_PKT64) that wrapped.
            (Ok(b), Ok(a)) if a < b => u64::from(a.wrapping_sub(b)),
            _ => after.packets.wrapping_sub(self.packets),
        };
        QdiscStats {
            bytes: after.bytes.wrapping_sub(self.bytes),
            packets,
            drops: after.drops.wrapping_sub(self.drops),
            overlimits: after.overlimits.wrapping_sub(self.overlimits),
            requeues: after.requeues.wrapping_sub(self.requeues),
            backlog_bytes: after.backlog_bytes,
            qlen: after.qlen,
        }
    }
}

/// What one direction of the link did over an interval (a run, or calibration).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DirectionCounters {
    /// Packets carried and dropped over the interval (flattened: the JSON keys are
    /// [`PacketCounts`]'s).
    #[serde(flatten)]
    pub counts: PacketCounts,
    /// Dropped by the kernel at the link's TUN before the wire read them: the wire fell
    /// behind (not the profile's doing).
    #[serde(default)]
    pub drops_device: u64,
    /// Most packets queued at once since the link started (a running maximum: it cannot be
    /// split by interval).
    pub peak_queue_since_start: u64,
    /// The queue limit, packets.
    pub limit: u64,
    /// Release error over the interval (write time minus scheduled release), µs; `null` when
    /// the wire released no packet in it.
    #[serde(default, deserialize_with = "hist::de_optional_summary")]
    pub release_error_us: Option<hist::LatencySummary>,
    /// Times over the interval the wire was overloaded (packets arrived faster than it
    /// carried them for 2 ms) and shared its CPU instead of keeping real-time priority.
    #[serde(default)]
    pub overloaded_spells: u64,
    /// Kernel netem: packets its qdisc dropped, its random loss and its `limit` together
    /// (the kernel counts them as one; `tc -s qdisc`'s "dropped").
    #[serde(default)]
    pub drops_qdisc: u64,
    /// Kernel netem: times its qdisc was over a limit (a packet held back by its rate).
    #[serde(default)]
    pub overlimits: u64,
    /// Kernel netem: packets its qdisc put back for a later dequeue.
    #[serde(default)]
    pub requeues: u64,
    /// The wire's scheduling class at the interval's end, as its ready line says it
    /// (`real-time (SCHED_FIFO 50)`, or `fair: <the kernel's refusal>`; several wires' classes
    /// joined by `; `); empty where the link does not say (kernel netem, older records).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scheduling: String,
}

/// The link's counters over an interval, per direction (uplink = client to server).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LinkCounters {
    /// `userspace-wire`, or `kernel-netem` (its qdiscs' counters, `echolab-netem show`).
    pub backend: String,
    /// Client to server.
    pub uplink: DirectionCounters,
    /// Server to client.
    pub downlink: DirectionCounters,
}

impl LinkCounters {
    /// Packets dropped in both directions that the profile's loss model did not drop (queue
    /// overflow, write-back refusals, a full TUN queue in front of the wire).
    pub fn unintended_drops(&self) -> u64 {
        [&self.uplink, &self.downlink]
            .iter()
            .map(|d| d.counts.drops_queue + d.counts.drops_write + d.drops_device)
            .sum()
    }
}
