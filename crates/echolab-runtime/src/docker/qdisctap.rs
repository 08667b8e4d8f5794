//! Kernel netem's counters, read per run: `echolab-netem show DEV` in the link host prints each
//! direction's root qdisc with its counters (`TCA_STATS2` over netlink: bytes, packets, drops,
//! overlimits, requeues, backlog), and two such snapshots, before and after a run, give what
//! the link carried and dropped during that run, as the wire's do for the userspace wire
//! ([`super::wiretap`]).

use anyhow::anyhow;
use bollard::Docker;
use echolab_core::cmd::NetemCmd;
use echolab_core::results::{DirectionCounters, LinkCounters};
use echolab_netem::kernel::QdiscStats;

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

/// Both directions' qdisc counters at one moment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QdiscSnapshot {
    /// The uplink's qdisc (client to server; the server-side device's egress).
    pub uplink: QdiscStats,
    /// The downlink's qdisc (the client-side device's egress).
    pub downlink: QdiscStats,
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

    async fn read(&self, dev: &str) -> anyhow::Result<QdiscStats> {
        let mut cmd = vec![format!("{IMAGE_BIN_DIR}/{}", NetemCmd::PROGRAM)];
        cmd.extend(NetemCmd::Show { dev: dev.into() }.argv());
        let out = exec::run(&self.docker, &self.link, &cmd, STOP_DEADLINE).await?;
        if out.exit_code != Some(0) {
            return Err(anyhow!("echolab-netem show {dev}: {}", out.describe()));
        }
        stats_of(&out.stdout).map_err(|e| anyhow!("echolab-netem show {dev}: {e}"))
    }
}

/// The counters in `echolab-netem show`'s JSON (its `stats`), of a netem qdisc.
fn stats_of(stdout: &str) -> Result<QdiscStats, String> {
    let v: serde_json::Value =
        serde_json::from_str(stdout.trim()).map_err(|e| format!("not JSON ({e}): {stdout:?}"))?;
    if v["kind"] != "netem" {
        return Err(format!("the root qdisc is {}, not netem", v["kind"]));
    }
    serde_json::from_value(v["stats"].clone())
        .map_err(|e| format!("no counters in the qdisc's dump ({e})"))
}

/// Several link hosts' snapshots (one per client machine of a lab run) as one: every counter
/// added, so that [`between`] two sums is the sum of what each link did in between.
pub fn summed(all: &[QdiscSnapshot]) -> QdiscSnapshot {
    let add = |a: QdiscStats, b: &QdiscStats| QdiscStats {
        bytes: a.bytes + b.bytes,
        packets: a.packets + b.packets,
        drops: a.drops + b.drops,
        overlimits: a.overlimits + b.overlimits,
        requeues: a.requeues + b.requeues,
        backlog_bytes: a.backlog_bytes + b.backlog_bytes,
        qlen: a.qlen + b.qlen,
    };
    QdiscSnapshot {
        uplink: all
            .iter()
            .fold(QdiscStats::default(), |t, s| add(t, &s.uplink)),
        downlink: all
            .iter()
            .fold(QdiscStats::default(), |t, s| add(t, &s.downlink)),
    }
}

/// What the link did between snapshots `before` and `after` of the same qdiscs.
///
/// # Errors
/// A counter went down: the qdisc was replaced in between.
pub fn between(before: &QdiscSnapshot, after: &QdiscSnapshot) -> anyhow::Result<LinkCounters> {
    let direction = |b: &QdiscStats, a: &QdiscStats, name: &str| {
        let d = b
            .delta(a)
            .ok_or_else(|| anyhow!("the {name} qdisc's counters went down: it was replaced"))?;
        Ok::<_, anyhow::Error>(DirectionCounters {
            packets: d.packets,
            bytes: d.bytes,
            drops_qdisc: u64::from(d.drops),
            overlimits: u64::from(d.overlimits),
            requeues: u64::from(d.requeues),
            ..Default::default()
        })
    };
    Ok(LinkCounters {
        backend: "kernel-netem".into(),
        uplink: direction(&before.uplink, &after.uplink, "uplink")?,
        downlink: direction(&before.downlink, &after.downlink, "downlink")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(packets: u64, drops: u32) -> QdiscStats {
        QdiscStats {
            bytes: packets * 100,
            packets,
            drops,
            overlimits: 3,
            ..Default::default()
        }
    }

    #[test]
    fn a_run_is_the_difference_of_two_readings() {
        let before = QdiscSnapshot {
            uplink: stats(1000, 2),
            downlink: stats(900, 0),
        };
        let after = QdiscSnapshot {
            uplink: stats(1500, 7),
            downlink: stats(1300, 1),
        };
        let c = between(&before, &after).unwrap();
        assert_eq!(c.backend, "kernel-netem");
        assert_eq!(
            (
                c.uplink.packets,
                c.uplink.bytes,
                c.uplink.drops_qdisc,
                c.uplink.overlimits
            ),
            (500, 50_000, 5, 0)
        );
        assert_eq!((c.downlink.packets, c.downlink.drops_qdisc), (400, 1));
        assert!(between(&after, &before)
            .unwrap_err()
            .to_string()
            .contains("replaced"));
    }

    #[test]
    fn two_link_hosts_read_as_one() {
        let a = QdiscSnapshot {
            uplink: stats(1000, 2),
            downlink: stats(900, 0),
        };
        let b = QdiscSnapshot {
            uplink: stats(1500, 7),
            downlink: stats(1300, 1),
        };
        let both = summed(&[a, b]);
        assert_eq!(
            (
                both.uplink.packets,
                both.uplink.drops,
                both.downlink.packets,
                both.downlink.bytes
            ),
            (2500, 9, 2200, 220_000)
        );
        assert_eq!(summed(&[a]), a);
    }

    #[test]
    fn show_output_gives_the_counters_of_a_netem_qdisc_only() {
        let line = r#"{"ifindex":7,"handle":1,"parent":4294967295,"kind":"netem","netem":null,"stats":{"bytes":4554,"packets":99,"drops":102,"overlimits":0,"requeues":0,"backlog_bytes":0,"qlen":0}}"#;
        let s = stats_of(line).unwrap();
        assert_eq!((s.packets, s.drops, s.bytes), (99, 102, 4554));
        let other = line.replace("\"netem\",\"netem\"", "\"noqueue\",\"netem\"");
        assert!(stats_of(&other).unwrap_err().contains("noqueue"));
        assert!(stats_of("nope").is_err());
    }
}
