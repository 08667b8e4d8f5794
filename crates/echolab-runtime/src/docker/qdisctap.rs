//! Kernel netem's counters, read per run: `echolab-netem show DEV` in the link host prints each
//! direction's root qdisc with its counters (`TCA_STATS2` over netlink: bytes, packets, drops,
//! overlimits, requeues, backlog), and two such snapshots, before and after a run, give what
//! the link carried and dropped during that run, as the wire's do for the userspace wire
//! ([`super::wiretap`]).

use anyhow::anyhow;
use bollard::Docker;
use echolab_core::cmd::NetemCmd;
use echolab_core::link_counters::QdiscStats;
use echolab_core::results::LinkCounters;

use super::exec;
use crate::hosts::STOP_DEADLINE;
use crate::image_archive::IMAGE_BIN_DIR;

/// Kernel netem's qdiscs in the link host: the device whose egress carries each direction.
pub struct QdiscTap {
    docker: Docker,
    link: String,
    uplink_dev: String,
    downlink_dev: String,
}

/// One root qdisc's identity and counters at one moment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QdiscReading {
    /// Its handle (`8001:` is `0x80010000`): the kernel gives a replacing root qdisc a new
    /// one, so two readings of one qdisc have the same handle and parent.
    pub handle: u32,
    /// Its parent (the root, `TC_H_ROOT`, for the qdisc echolab installs).
    pub parent: u32,
    /// Its counters since it was created.
    pub stats: QdiscStats,
}

/// Both directions' qdiscs of one link host at one moment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QdiscSnapshot {
    /// The uplink's qdisc (client to server; the server-side device's egress).
    pub uplink: QdiscReading,
    /// The downlink's qdisc (the client-side device's egress).
    pub downlink: QdiscReading,
}

impl QdiscTap {
    /// Taps the netem qdiscs on `uplink_dev` and `downlink_dev` of container `link`.
    pub fn new(docker: &Docker, link: &str, uplink_dev: &str, downlink_dev: &str) -> Self {
        Self {
            docker: docker.clone(),
            link: link.to_string(),
            uplink_dev: uplink_dev.to_string(),
            downlink_dev: downlink_dev.to_string(),
        }
    }

    /// Both qdiscs' counters now.
    ///
    /// # Errors
    /// `echolab-netem show` failed, or printed no counters (the qdisc is not there).
    pub async fn snapshot(&self) -> anyhow::Result<QdiscSnapshot> {
        Ok(QdiscSnapshot {
            uplink: self.read(&self.uplink_dev).await?,
            downlink: self.read(&self.downlink_dev).await?,
        })
    }

    async fn read(&self, dev: &str) -> anyhow::Result<QdiscReading> {
        let mut cmd = vec![format!("{IMAGE_BIN_DIR}/{}", NetemCmd::PROGRAM)];
        cmd.extend(NetemCmd::Show { dev: dev.into() }.argv());
        let out = exec::run(&self.docker, &self.link, &cmd, STOP_DEADLINE).await?;
        if out.exit_code != Some(0) {
            return Err(anyhow!("echolab-netem show {dev}: {}", out.describe()));
        }
        stats_of(&out.stdout).map_err(|e| anyhow!("echolab-netem show {dev}: {e}"))
    }
}

/// The handle, parent and counters in `echolab-netem show`'s JSON, of a netem qdisc.
fn stats_of(stdout: &str) -> Result<QdiscReading, String> {
    let v: serde_json::Value =
        serde_json::from_str(stdout.trim()).map_err(|e| format!("not JSON ({e}): {stdout:?}"))?;
    if v["kind"] != "netem" {
        return Err(format!("the root qdisc is {}, not netem", v["kind"]));
    }
    let id = |key: &str| {
        v[key]
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| format!("no {key} in the qdisc's dump: {stdout:?}"))
    };
    Ok(QdiscReading {
        handle: id("handle")?,
        parent: id("parent")?,
        stats: serde_json::from_value(v["stats"].clone())
            .map_err(|e| format!("no counters in the qdisc's dump ({e})"))?,
    })
}

/// A handle as tc prints it (`8001:`, or `8001:2` for a minor number).
fn tc_handle(h: u32) -> String {
    match h & 0xffff {
        0 => format!("{:x}:", h >> 16),
        minor => format!("{:x}:{minor:x}", h >> 16),
    }
}

/// What the links did between snapshots `before` and `after`, one of each per link host in
/// the same order (several on a lab run with several client machines): each host's
/// difference ([`QdiscStats::delta`], which survives a wrap of the kernel's 32-bit counters),
/// added up.
///
/// # Errors
/// A qdisc's handle or parent changed in between (it was replaced, so its counters restarted
/// and the difference means nothing), or the snapshots are of different numbers of hosts.
pub fn between(before: &[QdiscSnapshot], after: &[QdiscSnapshot]) -> anyhow::Result<LinkCounters> {
    if before.len() != after.len() {
        return Err(anyhow!(
            "{} link hosts' qdiscs read before, {} after",
            before.len(),
            after.len()
        ));
    }
    let mut out = LinkCounters {
        backend: "kernel-netem".into(),
        ..Default::default()
    };
    for (b, a) in before.iter().zip(after) {
        for (name, b, a, total) in [
            ("uplink", &b.uplink, &a.uplink, &mut out.uplink),
            ("downlink", &b.downlink, &a.downlink, &mut out.downlink),
        ] {
            if (b.handle, b.parent) != (a.handle, a.parent) {
                return Err(anyhow!(
                    "the {name} qdisc was replaced between two readings (handle {} parent {} before, {} parent {} after)",
                    tc_handle(b.handle),
                    tc_handle(b.parent),
                    tc_handle(a.handle),
                    tc_handle(a.parent)
                ));
            }
            let d = b.stats.delta(&a.stats);
            total.counts.packets += d.packets;
            total.counts.bytes += d.bytes;
            total.drops_qdisc += u64::from(d.drops);
            total.overlimits += u64::from(d.overlimits);
            total.requeues += u64::from(d.requeues);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(handle: u32, packets: u64, drops: u32) -> QdiscReading {
        QdiscReading {
            handle,
            parent: u32::MAX,
            stats: QdiscStats {
                bytes: packets * 100,
                packets,
                drops,
                overlimits: 3,
                ..Default::default()
            },
        }
    }

    fn host(up: QdiscReading, down: QdiscReading) -> QdiscSnapshot {
        QdiscSnapshot {
            uplink: up,
            downlink: down,
        }
    }

    const H: u32 = 0x8001_0000;

    #[test]
    fn a_run_is_the_difference_of_two_readings() {
        let before = host(reading(H, 1000, 2), reading(H + 0x1_0000, 900, 0));
        let after = host(reading(H, 1500, 7), reading(H + 0x1_0000, 1300, 1));
        let c = between(&[before], &[after]).unwrap();
        assert_eq!(c.backend, "kernel-netem");
        assert_eq!(
            (
                c.uplink.counts.packets,
                c.uplink.counts.bytes,
                c.uplink.drops_qdisc,
                c.uplink.overlimits
            ),
            (500, 50_000, 5, 0)
        );
        assert_eq!(
            (c.downlink.counts.packets, c.downlink.drops_qdisc),
            (400, 1)
        );
    }

    #[test]
    fn a_wrapped_counter_is_counted_and_a_replaced_qdisc_is_known_by_its_handle() {
        // drops and overlimits wrap past 2^32 between the readings: 20 and 7 gained.
        let mut before = host(reading(H, 1000, u32::MAX - 9), reading(H, 10, 0));
        before.uplink.stats.overlimits = u32::MAX - 2;
        let mut after = host(reading(H, 1100, 10), reading(H, 10, 0));
        after.uplink.stats.overlimits = 4;
        let c = between(&[before], &[after]).unwrap();
        assert_eq!(
            (
                c.uplink.drops_qdisc,
                c.uplink.overlimits,
                c.uplink.counts.packets
            ),
            (20, 7, 100)
        );
        // A qdisc replaced in between has a new handle, whatever its counters say: here they
        // even went up.
        let replaced = host(reading(H + 0x1_0000, 2000, 0), reading(H, 10, 0));
        let e = between(&[before], &[replaced]).unwrap_err().to_string();
        assert_eq!(
            e,
            "the uplink qdisc was replaced between two readings (handle 8001: parent ffff:ffff before, 8002: parent ffff:ffff after)"
        );
        // Counters that went down on the same qdisc are a wrap, not a replacement.
        assert!(between(&[after], &[before]).is_ok());
    }

    #[test]
    fn two_link_hosts_read_as_one() {
        let a = host(reading(H, 1000, 2), reading(H, 900, 0));
        let b = host(reading(H, 1500, 7), reading(H, 1300, 1));
        let a2 = host(reading(H, 1010, 3), reading(H, 905, 0));
        let b2 = host(reading(H, 1600, 7), reading(H, 1400, 1));
        let c = between(&[a, b], &[a2, b2]).unwrap();
        assert_eq!(
            (
                c.uplink.counts.packets,
                c.uplink.drops_qdisc,
                c.downlink.counts.packets,
                c.downlink.counts.bytes
            ),
            (110, 1, 105, 10_500)
        );
        assert!(between(&[a, b], &[a2]).is_err());
    }

    #[test]
    fn show_output_gives_the_handle_and_counters_of_a_netem_qdisc_only() {
        let line = r#"{"ifindex":7,"handle":2147549184,"parent":4294967295,"kind":"netem","netem":null,"stats":{"bytes":4554,"packets":99,"drops":102,"overlimits":0,"requeues":0,"backlog_bytes":0,"qlen":0}}"#;
        let s = stats_of(line).unwrap();
        assert_eq!((s.handle, s.parent), (0x8001_0000, u32::MAX));
        assert_eq!(
            (s.stats.packets, s.stats.drops, s.stats.bytes),
            (99, 102, 4554)
        );
        let other = line.replace("\"netem\",\"netem\"", "\"noqueue\",\"netem\"");
        assert!(stats_of(&other).unwrap_err().contains("noqueue"));
        assert!(stats_of("nope").is_err());
    }
}
