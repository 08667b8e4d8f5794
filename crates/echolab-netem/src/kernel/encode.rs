//! The bytes of netem requests: `RTM_NEWQDISC` / `RTM_DELQDISC` / `RTM_GETQDISC`, and the
//! decoding of the kernel's dump for read-back.
//!
//! Layouts from linux/pkt_sched.h and linux/rtnetlink.h; the exact byte sequence is the one
//! iproute2 6.1 `tc` sends (captured with `tests/fixtures/capture-tc.sh`, compared in the
//! tests below): `tcmsg`, `TCA_KIND "netem"`, then `TCA_OPTIONS` whose payload is a
//! `struct tc_netem_qopt` FOLLOWED by attributes (`addattr_nest_compat`), in the order
//! `TCA_NETEM_RATE64`, `TCA_NETEM_RATE`, `TCA_NETEM_LATENCY64`, `TCA_NETEM_JITTER64`,
//! `TCA_NETEM_DELAY_DIST`.

use std::time::Duration;

use echolab_core::link_counters::QdiscStats;
use echolab_core::profile::{JitterDistribution, LinkSpec};
use serde::Serialize;

use super::dist::normal_table;
use crate::nl::{self, Message, NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_REPLACE, NLM_F_REQUEST};

/// `RTM_NEWQDISC` (linux/rtnetlink.h).
pub(crate) const RTM_NEWQDISC: u16 = 36;
/// `RTM_DELQDISC`.
pub(crate) const RTM_DELQDISC: u16 = 37;
/// `RTM_GETQDISC`.
pub(crate) const RTM_GETQDISC: u16 = 38;
/// `TC_H_ROOT`: the parent of a device's root qdisc.
pub(crate) const TC_H_ROOT: u32 = 0xFFFF_FFFF;

const TCA_KIND: u16 = 1;
const TCA_OPTIONS: u16 = 2;
/// `TCA_STATS2` and its nested attributes (`include/uapi/linux/rtnetlink.h`,
/// `include/uapi/linux/gen_stats.h`).
const TCA_STATS2: u16 = 7;
const TCA_STATS_BASIC: u16 = 1;
const TCA_STATS_QUEUE: u16 = 3;
const TCA_STATS_PKT64: u16 = 8;
const TCA_NETEM_DELAY_DIST: u16 = 2;
const TCA_NETEM_RATE: u16 = 6;
const TCA_NETEM_RATE64: u16 = 8;
const TCA_NETEM_LATENCY64: u16 = 10;
const TCA_NETEM_JITTER64: u16 = 11;

/// Nanoseconds per psched tick: `PSCHED_SHIFT` is 6 (include/net/pkt_sched.h), and
/// `/proc/net/psched` advertises 1000 ns per µs and 64 ns per tick. `tc_netem_qopt` carries
/// times in ticks.
pub(crate) const NS_PER_TICK: u64 = 64;

/// Ethernet header bytes that netem already counts in a packet's length on an Ethernet-like
/// device (veth, Docker's eth0); subtracted from a [`LinkSpec::overhead`] that is stated per
/// IP packet.
pub(crate) const ETHERNET_HEADER_BYTES: i32 = 14;

/// netem parameters in the kernel's units: what one `RTM_NEWQDISC` installs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NetemParams {
    /// Added delay, ns.
    pub latency_ns: u64,
    /// Jitter, ns (σ with a normal table, half-width without).
    pub jitter_ns: u64,
    /// Loss probability scaled to `u32::MAX` (netem: 0 = none, `!0` = 100%).
    pub loss: u32,
    /// Queue limit, packets.
    pub limit: u32,
    /// Rate, bytes per second; 0 = unlimited.
    pub rate_bytes_per_s: u64,
    /// Bytes added to each packet's length for the rate (`tc_netem_rate.packet_overhead`).
    pub packet_overhead: i32,
    /// Send iproute2's normal table (`distribution normal`); otherwise jitter is uniform.
    pub normal_table: bool,
}

impl NetemParams {
    /// Converts a profile direction: durations to ns, percent to netem's `u32` scale
    /// (iproute2 `get_percent`: rint(p / 100 × `u32::MAX`)), bits to bytes per second (floor),
    /// and [`LinkSpec::overhead`] (per IP packet) less [`ETHERNET_HEADER_BYTES`].
    pub fn from_spec(spec: &LinkSpec) -> Self {
        let jitter_ns = spec.jitter.0.as_nanos() as u64;
        Self {
            latency_ns: spec.delay.0.as_nanos() as u64,
            jitter_ns,
            loss: (spec.loss.0 / 100.0 * u32::MAX as f64).round_ties_even() as u32,
            limit: spec.effective_limit(),
            rate_bytes_per_s: spec.rate.map(|r| r.0 / 8).unwrap_or(0),
            packet_overhead: if spec.rate.is_some() && spec.overhead > 0 {
                spec.overhead as i32 - ETHERNET_HEADER_BYTES
            } else {
                0
            },
            normal_table: jitter_ns > 0 && spec.distribution == JitterDistribution::Normal,
        }
    }
}

/// `struct tcmsg` for the root qdisc of `ifindex`.
fn tcmsg(ifindex: u32, handle: u32, parent: u32) -> [u8; 20] {
    let mut b = [0u8; 20];
    b[4..8].copy_from_slice(&(ifindex as i32).to_ne_bytes());
    b[8..12].copy_from_slice(&handle.to_ne_bytes());
    b[12..16].copy_from_slice(&parent.to_ne_bytes());
    b
}

/// Time in psched ticks as iproute2's `tc_core_time2tick` computes it from whole µs
/// (µs × 1000 / 64, truncated), saturated to `u32`.
fn ticks(ns: u64) -> u32 {
    let us = ns / 1000;
    (us * 1000 / NS_PER_TICK).min(u32::MAX as u64) as u32
}

/// The `TCA_OPTIONS` payload of a netem qdisc: `struct tc_netem_qopt {latency, limit, loss,
/// gap, duplicate, jitter}` (six `u32`, times in ticks) and the attributes after it.
pub(crate) fn netem_options(p: &NetemParams, msg: &mut Message) {
    let mut qopt = Vec::with_capacity(24);
    for v in [
        ticks(p.latency_ns),
        p.limit,
        p.loss,
        0,
        0,
        ticks(p.jitter_ns),
    ] {
        qopt.extend_from_slice(&v.to_ne_bytes());
    }
    msg.begin_nest(TCA_OPTIONS, &qopt, false);
    if p.rate_bytes_per_s > 0 {
        let rate32 = if p.rate_bytes_per_s >= 1 << 32 {
            msg.attr(TCA_NETEM_RATE64, &p.rate_bytes_per_s.to_ne_bytes());
            u32::MAX
        } else {
            p.rate_bytes_per_s as u32
        };
        let mut rate = Vec::with_capacity(16);
        rate.extend_from_slice(&rate32.to_ne_bytes());
        rate.extend_from_slice(&p.packet_overhead.to_ne_bytes());
        rate.extend_from_slice(&0u32.to_ne_bytes()); // cell_size
        rate.extend_from_slice(&0i32.to_ne_bytes()); // cell_overhead
        msg.attr(TCA_NETEM_RATE, &rate);
    }
    // Like iproute2, the 64-bit times are sent only when the tick fields cannot hold them.
    if p.latency_ns / 1000 * 1000 / NS_PER_TICK > u32::MAX as u64 {
        msg.attr(TCA_NETEM_LATENCY64, &(p.latency_ns as i64).to_ne_bytes());
    }
    if p.jitter_ns / 1000 * 1000 / NS_PER_TICK > u32::MAX as u64 {
        msg.attr(TCA_NETEM_JITTER64, &(p.jitter_ns as i64).to_ne_bytes());
    }
    if p.normal_table {
        let table: Vec<u8> = normal_table()
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        msg.attr(TCA_NETEM_DELAY_DIST, &table);
    }
    msg.end_nest();
}

/// `tc qdisc replace dev IF root netem ...`: creates or replaces the root qdisc of `ifindex`.
pub(crate) fn replace_root_netem(ifindex: u32, p: &NetemParams, seq: u32) -> Message {
    let flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_REPLACE | NLM_F_CREATE;
    let mut msg = Message::new(RTM_NEWQDISC, flags, seq, &tcmsg(ifindex, 0, TC_H_ROOT));
    msg.attr_str(TCA_KIND, "netem");
    netem_options(p, &mut msg);
    msg
}

/// `tc qdisc del dev IF root`: deletes the root qdisc, restoring the device's default.
pub(crate) fn delete_root(ifindex: u32, seq: u32) -> Message {
    Message::new(
        RTM_DELQDISC,
        NLM_F_REQUEST | NLM_F_ACK,
        seq,
        &tcmsg(ifindex, 0, TC_H_ROOT),
    )
}

/// `tc qdisc show`: a dump of every qdisc (filter the replies by ifindex).
pub(crate) fn dump_qdiscs(seq: u32) -> Message {
    Message::new(
        RTM_GETQDISC,
        NLM_F_REQUEST | NLM_F_DUMP,
        seq,
        &tcmsg(0, 0, 0),
    )
}

/// One qdisc as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QdiscInfo {
    /// Device index.
    pub ifindex: u32,
    /// Handle, e.g. `0x80010000` for `8001:`.
    pub handle: u32,
    /// Parent handle; [`TC_H_ROOT`] for a root qdisc.
    pub parent: u32,
    /// Qdisc kind: `netem`, `noqueue`, `fq_codel`, ...
    pub kind: String,
    /// netem's settings when `kind` is `netem`.
    pub netem: Option<NetemReadBack>,
    /// The qdisc's counters since it was created (`tc -s qdisc show`), when the kernel sent
    /// them.
    pub stats: Option<QdiscStats>,
}

/// Decodes `TCA_STATS2`'s nested attributes; `None` without a basic or queue block.
pub(crate) fn decode_stats2(nest: &[u8]) -> Option<QdiscStats> {
    let mut basic = None;
    let mut queue = None;
    let mut packets64 = None;
    for (k, v) in nl::attrs(nest) {
        match k {
            // struct gnet_stats_basic { __u64 bytes; __u32 packets; }
            TCA_STATS_BASIC => basic = Some((nl::u64_at(v, 0)?, nl::u32_at(v, 8)?)),
            // struct gnet_stats_queue { qlen, backlog, drops, requeues, overlimits } (__u32)
            TCA_STATS_QUEUE => {
                queue = Some([
                    nl::u32_at(v, 0)?,
                    nl::u32_at(v, 4)?,
                    nl::u32_at(v, 8)?,
                    nl::u32_at(v, 12)?,
                    nl::u32_at(v, 16)?,
                ])
            }
            // The packet count in 64 bits, which kernels since 5.4 add beside the 32-bit one.
            TCA_STATS_PKT64 => packets64 = nl::u64_at(v, 0),
            _ => {}
        }
    }
    let (bytes, packets32) = basic?;
    let [qlen, backlog_bytes, drops, requeues, overlimits] = queue?;
    Some(QdiscStats {
        bytes,
        packets: packets64.unwrap_or(u64::from(packets32)),
        drops,
        overlimits,
        requeues,
        backlog_bytes,
        qlen,
    })
}

/// netem settings read back from the kernel, in display units. The kernel does not report the
/// distribution table, so the jitter's shape cannot be read back.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NetemReadBack {
    /// Delay, µs.
    pub delay_us: f64,
    /// Jitter, µs.
    pub jitter_us: f64,
    /// Loss, percent.
    pub loss_percent: f64,
    /// Limit, packets.
    pub limit: u32,
    /// Rate, bits per second; absent when unlimited.
    pub rate_bits_per_s: Option<u64>,
    /// Per-packet overhead for the rate, bytes.
    pub packet_overhead: i32,
}

/// Decodes one `RTM_NEWQDISC` dump body (after the `nlmsghdr`). `None` when malformed.
pub(crate) fn decode_qdisc(body: &[u8]) -> Option<QdiscInfo> {
    let ifindex = nl::u32_at(body, 4)?;
    let handle = nl::u32_at(body, 8)?;
    let parent = nl::u32_at(body, 12)?;
    let mut kind = String::new();
    let mut options: &[u8] = &[];
    let mut stats = None;
    for (k, v) in nl::attrs(body.get(20..)?) {
        match k {
            TCA_KIND => {
                kind = String::from_utf8_lossy(v)
                    .trim_end_matches('\0')
                    .to_string()
            }
            TCA_OPTIONS => options = v,
            TCA_STATS2 => stats = decode_stats2(v),
            _ => {}
        }
    }
    let netem = if kind == "netem" {
        decode_netem_options(options)
    } else {
        None
    };
    Some(QdiscInfo {
        ifindex,
        handle,
        parent,
        kind,
        netem,
        stats,
    })
}

/// Decodes netem's `TCA_OPTIONS` (qopt + attributes), preferring the 64-bit attributes the
/// kernel adds (`netem_dump` always sends `TCA_NETEM_LATENCY64`/`JITTER64`).
pub(crate) fn decode_netem_options(opt: &[u8]) -> Option<NetemReadBack> {
    let latency_ticks = nl::u32_at(opt, 0)?;
    let limit = nl::u32_at(opt, 4)?;
    let loss = nl::u32_at(opt, 8)?;
    let jitter_ticks = nl::u32_at(opt, 20)?;
    let mut latency_ns = latency_ticks as u64 * NS_PER_TICK;
    let mut jitter_ns = jitter_ticks as u64 * NS_PER_TICK;
    let mut rate: Option<u64> = None;
    let mut rate64: Option<u64> = None;
    let mut packet_overhead = 0;
    for (k, v) in nl::attrs(opt.get(nl::align4(24)..).unwrap_or_default()) {
        match k {
            TCA_NETEM_LATENCY64 => latency_ns = nl::u64_at(v, 0)?,
            TCA_NETEM_JITTER64 => jitter_ns = nl::u64_at(v, 0)?,
            TCA_NETEM_RATE => {
                rate = Some(nl::u32_at(v, 0)? as u64);
                packet_overhead = nl::u32_at(v, 4)? as i32;
            }
            TCA_NETEM_RATE64 => rate64 = Some(nl::u64_at(v, 0)?),
            _ => {}
        }
    }
    let rate_bytes = rate64.or(rate).filter(|&r| r > 0);
    Some(NetemReadBack {
        delay_us: Duration::from_nanos(latency_ns).as_secs_f64() * 1e6,
        jitter_us: Duration::from_nanos(jitter_ns).as_secs_f64() * 1e6,
        loss_percent: loss as f64 / u32::MAX as f64 * 100.0,
        limit,
        rate_bits_per_s: rate_bytes.map(|b| b * 8),
        packet_overhead,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use echolab_core::units::{BitRate, Dur, Percent};
    use JitterDistribution::{Normal, Uniform};

    /// Reads a fixture written by `tests/fixtures/capture-tc.sh`: strace's hex dump of the
    /// message `tc` sent.
    fn fixture(name: &str) -> Vec<u8> {
        let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let mut out = Vec::new();
        for line in text.lines().filter(|l| l.starts_with(" | ")) {
            // " | 00000  60 00 ... 00  `...ascii |": hex bytes sit between the offset and the ascii.
            let hex = &line[10..59];
            out.extend(
                hex.split_whitespace()
                    .map(|h| u8::from_str_radix(h, 16).expect("hex byte")),
            );
        }
        assert!(!out.is_empty(), "{path} holds no dump");
        out
    }

    /// Compares with the sequence number (bytes 8..12) taken from the fixture, since tc uses
    /// the time as its sequence.
    fn assert_same_bytes(ours: &Message, name: &str) {
        let theirs = fixture(name);
        let mut ours = ours.bytes().to_vec();
        ours[8..12].copy_from_slice(&theirs[8..12]);
        assert_eq!(ours.len(), theirs.len(), "{name}: length");
        for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
            assert_eq!(
                a, b,
                "{name}: byte {i:#x} differs (ours {a:#04x}, tc {b:#04x})"
            );
        }
    }

    fn spec(
        delay_us: u64,
        jitter_us: u64,
        loss: f64,
        rate: Option<u64>,
        limit: u32,
        dist: JitterDistribution,
    ) -> LinkSpec {
        LinkSpec {
            delay: Dur(Duration::from_micros(delay_us)),
            jitter: Dur(Duration::from_micros(jitter_us)),
            distribution: dist,
            loss: Percent(loss),
            rate: rate.map(BitRate),
            limit: Some(limit),
            ..LinkSpec::default()
        }
    }

    // The fixtures were captured in a fresh namespace, where `lo` has index 1.
    const LO: u32 = 1;

    /// Encodes `spec` as a root netem qdisc on `lo` and checks it against `tc`'s `fixture`;
    /// returns the parameters for checks of their own.
    fn assert_netem_matches_tc(spec: &LinkSpec, fixture: &str) -> NetemParams {
        let p = NetemParams::from_spec(spec);
        assert_same_bytes(&replace_root_netem(LO, &p, 0), fixture);
        p
    }

    #[test]
    fn uniform_jitter_loss_rate_matches_tc() {
        let s = spec(10_000, 1_000, 1.0, Some(100_000_000), 2000, Uniform);
        assert_netem_matches_tc(&s, "tc-netem-uniform.hex");
    }

    #[test]
    fn lan100_matches_tc() {
        let s = spec(100, 0, 0.0, Some(100_000_000), 100, Normal);
        let p = assert_netem_matches_tc(&s, "tc-netem-lan100.hex");
        assert!(!p.normal_table, "no table without jitter");
    }

    #[test]
    fn normal_distribution_table_matches_tc() {
        let s = spec(10_000, 1_000, 0.0, None, 1000, Normal);
        assert_netem_matches_tc(&s, "tc-netem-normal.hex");
    }

    #[test]
    fn rate_above_32_bits_uses_rate64_like_tc() {
        let s = spec(10_000, 0, 0.0, Some(40_000_000_000), 1000, Normal);
        assert_netem_matches_tc(&s, "tc-netem-rate64.hex");
    }

    /// One netlink attribute: length, type, payload, padded to 4 bytes.
    fn nla(kind: u16, payload: &[u8]) -> Vec<u8> {
        let mut a = ((4 + payload.len()) as u16).to_ne_bytes().to_vec();
        a.extend_from_slice(&kind.to_ne_bytes());
        a.extend_from_slice(payload);
        a.resize(nl::align4(a.len()), 0);
        a
    }

    #[test]
    fn qdisc_counters_are_read_from_tca_stats2() {
        // gnet_stats_basic: bytes 123456789012 (beyond 32 bits), packets 4000; then
        // gnet_stats_queue: qlen 3, backlog 4500, drops 17, requeues 2, overlimits 9.
        let mut basic = 123_456_789_012u64.to_ne_bytes().to_vec();
        basic.extend_from_slice(&4000u32.to_ne_bytes());
        basic.extend_from_slice(&[0; 4]);
        let queue: Vec<u8> = [3u32, 4500, 17, 2, 9]
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        let mut nest = nla(TCA_STATS_BASIC, &basic);
        nest.extend(nla(TCA_STATS_QUEUE, &queue));
        let want = QdiscStats {
            bytes: 123_456_789_012,
            packets: 4000,
            drops: 17,
            overlimits: 9,
            requeues: 2,
            backlog_bytes: 4500,
            qlen: 3,
        };
        assert_eq!(decode_stats2(&nest), Some(want));
        // The 64-bit packet count wins where the kernel sends it.
        let mut with64 = nest.clone();
        with64.extend(nla(TCA_STATS_PKT64, &5_000_000_000u64.to_ne_bytes()));
        assert_eq!(decode_stats2(&with64).unwrap().packets, 5_000_000_000);
        // In a qdisc message: tcmsg (20 bytes), TCA_KIND, TCA_STATS2.
        let mut body = vec![0u8; 20];
        body[4..8].copy_from_slice(&7u32.to_ne_bytes());
        body.extend(nla(TCA_KIND, b"netem\0"));
        body.extend(nla(TCA_STATS2, &nest));
        let q = decode_qdisc(&body).unwrap();
        assert_eq!(
            (q.ifindex, q.kind.as_str(), q.stats),
            (7, "netem", Some(want))
        );
        // Deltas between two readings.
        let later = QdiscStats {
            packets: 4100,
            drops: 20,
            ..want
        };
        let d = want.delta(&later);
        assert_eq!((d.packets, d.drops, d.bytes, d.qlen), (100, 3, 0, 3));
    }

    #[test]
    fn deltas_survive_a_wrap_of_the_32_bit_counters() {
        // Every 32-bit counter 5 short of 2^32, then 10 more of each: the readings go from
        // 4294967291 to 5, which is 10 gained, not a qdisc that went backwards.
        let near = u32::MAX - 4;
        let before = QdiscStats {
            bytes: u64::MAX - 99,
            packets: u64::from(near),
            drops: near,
            overlimits: near,
            requeues: near,
            backlog_bytes: 7,
            qlen: 1,
        };
        let after = QdiscStats {
            bytes: 900,
            packets: 5,
            drops: 5,
            overlimits: 5,
            requeues: 5,
            backlog_bytes: 0,
            qlen: 0,
        };
        let d = before.delta(&after);
        assert_eq!(
            (d.bytes, d.packets, d.drops, d.overlimits, d.requeues),
            (1000, 10, 10, 10, 10)
        );
        assert_eq!((d.backlog_bytes, d.qlen), (0, 0), "the queue as read after");
        // A 64-bit packet count (TCA_STATS_PKT64) past 2^32 is not taken for a wrapped one.
        let big = QdiscStats {
            packets: 5_000_000_000,
            ..Default::default()
        };
        let bigger = QdiscStats {
            packets: 5_000_000_100,
            ..Default::default()
        };
        assert_eq!(big.delta(&bigger).packets, 100);
    }

    #[test]
    fn delete_matches_tc() {
        assert_same_bytes(&delete_root(LO, 0), "tc-qdisc-del.hex");
    }

    #[test]
    fn overhead_is_stated_per_ip_packet() {
        let mut s = spec(100, 0, 0.0, Some(100_000_000), 100, Normal);
        s.overhead = 38;
        assert_eq!(
            NetemParams::from_spec(&s).packet_overhead,
            24,
            "38 bytes of framing less the 14-byte header netem counts"
        );
    }

    /// The units the kernel reads, stated from its headers rather than from `tc`'s bytes:
    /// `tc_netem_qopt` times in psched ticks of 64 ns (`PSCHED_TICKS2NS(x) = x << 6`), loss on
    /// the u32 scale (`~0U` = 100%), `tc_netem_rate.rate` in bytes per second.
    #[test]
    fn qopt_fields_are_in_the_kernels_units() {
        let s = spec(10_000, 1_500, 1.0, Some(50_000_000), 500, Uniform);
        let msg = replace_root_netem(LO, &NetemParams::from_spec(&s), 0);
        let body = &msg.bytes()[16..];
        let options = nl::attrs(&body[20..])
            .find(|(k, _)| *k == TCA_OPTIONS)
            .map(|(_, v)| v)
            .expect("TCA_OPTIONS");
        let field = |i: usize| nl::u32_at(options, i * 4).unwrap();
        assert_eq!(
            field(0) as u64 * 64,
            10_000_000,
            "latency: 10 ms in 64 ns ticks"
        );
        assert_eq!(field(1), 500, "limit: packets");
        assert_eq!(field(2), 42_949_673, "loss: 1% of u32::MAX, rounded");
        assert_eq!(field(5), 23_437, "jitter: 1.5 ms in whole 64 ns ticks");
        let rate = nl::attrs(&options[24..])
            .find(|(k, _)| *k == TCA_NETEM_RATE)
            .map(|(_, v)| nl::u32_at(v, 0).unwrap())
            .expect("TCA_NETEM_RATE");
        assert_eq!(rate, 6_250_000, "rate: 50 Mbit/s in bytes per second");
    }

    #[test]
    fn read_back_decodes_what_was_encoded_and_kernel_64bit_times() {
        let p = NetemParams::from_spec(&spec(10_000, 1_000, 1.0, Some(100_000_000), 2000, Uniform));
        let msg = replace_root_netem(7, &p, 0);
        let info = decode_qdisc(&msg.bytes()[16..]).unwrap();
        assert_eq!(
            (info.ifindex, info.parent, info.kind.as_str()),
            (7, TC_H_ROOT, "netem")
        );
        let nb = info.netem.unwrap();
        assert_eq!(
            (nb.delay_us, nb.jitter_us, nb.limit),
            (10_000.0, 1_000.0, 2000)
        );
        assert!((nb.loss_percent - 1.0).abs() < 1e-6, "{}", nb.loss_percent);
        assert_eq!(nb.rate_bits_per_s, Some(100_000_000));
        // The kernel's dump adds TCA_NETEM_LATENCY64 in ns, which wins over the tick field.
        let mut m = Message::new(RTM_NEWQDISC, 0, 0, &tcmsg(7, 0x8001_0000, TC_H_ROOT));
        m.attr_str(TCA_KIND, "netem");
        m.begin_nest(TCA_OPTIONS, &[0u8; 24], false);
        m.attr(TCA_NETEM_LATENCY64, &12_345_678i64.to_ne_bytes());
        m.end_nest();
        let nb = decode_qdisc(&m.bytes()[16..]).unwrap().netem.unwrap();
        assert_eq!(nb.delay_us, 12_345.678);
        assert_eq!(nb.rate_bits_per_s, None);
    }
}
