//! "Kernel and link counters": what the kernel of each namespace and the link counted during
//! every cell, so that a tail can be explained by what was dropped, refused or retransmitted
//! instead of guessed at. The client's TCP counters cover its measurement window, the server's
//! its whole life (one cell: start, warm-up, window); the link's cover the client's run.
//!
//! A cell is flagged when any repetition shows trouble: a counter of
//! [`echolab_core::netstat::TROUBLE`] above zero in either namespace (listen-queue overflows,
//! SYN retransmissions, retransmission timeouts, aborts), or link packets dropped other than
//! by the profile's loss model (a full queue, a refused write). A retransmitted SYN waits the
//! initial RTO of 1 s (RFC 6298 §2.1), a retransmitted segment at least 200 ms on Linux
//! (TCP_RTO_MIN), so either puts such delays into the tail.

use std::collections::BTreeMap;

use echolab_core::netstat::TROUBLE;

use crate::dataset::{CellData, Dataset};

/// Release error p99 (µs) above which the userspace wire counts as behind its schedule: the
/// wire's own benchmark keeps p99 within tens of µs on an unloaded core (docs/measurements.md,
/// "Userspace wire"), so 100 µs is a wire that waited for CPU.
pub const WIRE_LATE_US: f64 = 100.0;

/// Counters shown for every cell (beside the trouble ones), per run: how much TIME_WAIT
/// the client made and how many new connections reused a TIME_WAIT port.
const SHOWN: [&str; 2] = ["TcpExtTW", "TcpExtTWRecycled"];

/// Mean per usable repetition of each counter in `pick` over the cell's runs.
fn means<'a>(
    c: &CellData<'a>,
    pick: impl Fn(&'a echolab_core::results::RunRecord) -> Option<&'a BTreeMap<String, i64>>,
) -> BTreeMap<String, f64> {
    let runs: Vec<_> = c.ok_runs().filter_map(&pick).collect();
    let mut sums: BTreeMap<String, f64> = BTreeMap::new();
    for r in &runs {
        for (k, v) in r.iter() {
            *sums.entry(k.clone()).or_default() += *v as f64;
        }
    }
    let n = runs.len().max(1) as f64;
    sums.into_iter().map(|(k, v)| (k, v / n)).collect()
}

fn trouble_text(m: &BTreeMap<String, f64>) -> Vec<String> {
    TROUBLE
        .iter()
        .filter_map(|k| {
            m.get(*k).filter(|v| **v > 0.0).map(|v| {
                format!(
                    "{} {}",
                    k.trim_start_matches("TcpExt").trim_start_matches("Tcp"),
                    fmt(*v)
                )
            })
        })
        .collect()
}

fn fmt(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// Whether the profile `manifest` records gives either direction a random loss (its
/// `uplink.loss`/`downlink.loss`, percent): kernel netem counts those drops with its limit's.
fn profile_has_loss(manifest: &echolab_core::results::Manifest) -> bool {
    let p = &manifest.profile.profile;
    [&p.uplink, &p.downlink]
        .into_iter()
        .flatten()
        .any(|link| link.loss.0 > 0.0)
}

/// Kernel netem's part of a cell's link column, from its qdiscs' counters (means per
/// repetition over `links`), and its trouble: drops where the profile has no random loss are
/// its queue's `limit`.
fn kernel_netem_text(
    links: &[&echolab_core::results::LinkCounters],
    lossy_profile: bool,
    trouble: &mut Vec<String>,
) -> String {
    let n = links.len().max(1) as f64;
    let mean = |f: &dyn Fn(&echolab_core::results::LinkCounters) -> u64| {
        links.iter().map(|l| f(l) as f64).sum::<f64>() / n
    };
    let packets = mean(&|l| l.uplink.counts.packets + l.downlink.counts.packets);
    let drops = mean(&|l| l.uplink.drops_qdisc + l.downlink.drops_qdisc);
    let overlimits = mean(&|l| l.uplink.overlimits + l.downlink.overlimits);
    if drops > 0.0 && !lossy_profile {
        trouble.push(format!(
            "qdisc drops {} (the profile has no random loss: its queue limit was reached)",
            fmt(drops)
        ));
    }
    format!(
        "kernel netem: {} packets, {} dropped by its qdiscs ({}), overlimits {}",
        fmt(packets),
        fmt(drops),
        if lossy_profile {
            "random loss and queue limit together"
        } else {
            "queue limit only: no random loss"
        },
        fmt(overlimits)
    )
}

/// The section in Markdown, empty when no run recorded counters (older results).
pub fn section(ds: &Dataset<'_>, manifest: &echolab_core::results::Manifest) -> String {
    let lossy_profile = profile_has_loss(manifest);
    let mut rows = Vec::new();
    let mut flags = Vec::new();
    let mut any = false;
    for c in &ds.cells {
        let client = means(c, |r| r.bench.as_ref().map(|b| &b.kernel_counters));
        let server = means(c, |r| r.server.as_ref().map(|s| &s.kernel_counters));
        let links: Vec<_> = c.ok_runs().filter_map(|r| r.link.as_ref()).collect();
        if client.is_empty() && server.is_empty() && links.is_empty() {
            continue;
        }
        any = true;
        let shown: Vec<String> = SHOWN
            .iter()
            .map(|k| {
                format!(
                    "{} {}",
                    k.trim_start_matches("TcpExt"),
                    fmt(client.get(*k).copied().unwrap_or(0.0))
                )
            })
            .collect();
        let trouble = trouble_text(&client);
        let mut link_trouble = Vec::new();
        let server_trouble = trouble_text(&server);
        let link_text = if links.is_empty() {
            "—".to_string()
        } else if links.iter().all(|l| l.backend == "kernel-netem") {
            kernel_netem_text(&links, lossy_profile, &mut link_trouble)
        } else {
            let n = links.len() as f64;
            let mean = |f: &dyn Fn(&echolab_core::results::LinkCounters) -> u64| {
                links.iter().map(|l| f(l) as f64).sum::<f64>() / n
            };
            let unintended = mean(&|l| l.unintended_drops());
            let lost = mean(&|l| l.uplink.counts.drops_loss + l.downlink.counts.drops_loss);
            let packets = mean(&|l| l.uplink.counts.packets + l.downlink.counts.packets);
            let peak = links
                .iter()
                .map(|l| {
                    l.uplink
                        .peak_queue_since_start
                        .max(l.downlink.peak_queue_since_start)
                })
                .max()
                .unwrap_or(0);
            // The worst direction's release error: how late the wire ran on its own schedule.
            let late_us = links
                .iter()
                .flat_map(|l| [l.uplink.release_error_us, l.downlink.release_error_us])
                .flatten()
                .map(|r| r.p99)
                .fold(0.0, f64::max);
            if unintended > 0.0 {
                link_trouble.push(format!(
                    "drops (queue full, refused, or TUN full) {}",
                    fmt(unintended)
                ));
            }
            let overloaded = mean(&|l| l.uplink.overloaded_spells + l.downlink.overloaded_spells);
            if overloaded > 0.0 {
                link_trouble.push(format!(
                    "overloaded {} times (packets arrived faster than the wire carried them; it gave up \
                     real-time priority and its release times slipped)",
                    fmt(overloaded)
                ));
            }
            if late_us > WIRE_LATE_US {
                link_trouble.push(format!(
                    "release error p99 {late_us:.0} µs: the wire lacked CPU and fell behind its schedule, so its queue \
                     and drops are its own, not the profile's"
                ));
            }
            format!(
                "{} packets, {} lost by the profile, {} dropped otherwise, queue peak {peak}, release error p99 {late_us:.0} µs",
                fmt(packets),
                fmt(lost),
                fmt(unintended)
            )
        };
        let all_trouble: Vec<String> = trouble
            .iter()
            .map(|t| format!("client {t}"))
            .chain(server_trouble.iter().map(|t| format!("server {t}")))
            .chain(link_trouble.iter().map(|t| format!("link {t}")))
            .collect();
        if !all_trouble.is_empty() {
            flags.push(format!(
                "⚠ {}: {} per run — its tail includes waits for retransmission (a SYN waits 1 s, a segment at least 200 ms).",
                c.id,
                all_trouble.join(", ")
            ));
        }
        rows.push(format!(
            "| {} | {} | {} | {} | {} | {} |",
            c.id,
            shown.join(", "),
            if trouble.is_empty() {
                "none".to_string()
            } else {
                trouble.join(", ")
            },
            if server_trouble.is_empty() {
                "none".to_string()
            } else {
                server_trouble.join(", ")
            },
            link_text,
            if link_trouble.is_empty() {
                "none".to_string()
            } else {
                link_trouble.join("; ")
            }
        ));
    }
    if !any {
        return String::new();
    }
    let mut md = String::from(
        "## Kernel and link counters\n\nMeans per usable repetition. The client's TCP counters (nstat names) cover its \
         measurement window, the server's its whole life (one cell); on loopback both live in one namespace, so the \
         server column repeats what the client saw plus its warm-up. TWRecycled counts connects that reused a port \
         still in TIME_WAIT. Trouble: listen-queue overflows and drops, SYN retransmissions, retransmission timeouts, \
         retransmitted segments, aborts, TIME_WAIT overflows.\n\n\
         | Cell | Client TIME_WAIT | Client trouble | Server trouble | Link | Link trouble |\n|---|---|---|---|---|---|\n",
    );
    md.push_str(&rows.join("\n"));
    md.push_str("\n\n");
    if flags.is_empty() {
        md.push_str("No cell shows kernel or link trouble: no tail here comes from drops or retransmissions.\n\n");
    } else {
        for f in flags {
            md.push_str(&f);
            md.push_str("\n\n");
        }
    }
    md
}
