//! What bounds each cell: from the run's own records, how busy the server and the client
//! were over the measured window (each against the CPUs it can use), and how much of a
//! request's latency the path's round trips take; from these one label per cell
//! (docs/methodology.md, "What bounds a cell"):
//!
//! - **path-bound**: round trips × calibrated RTT are at least [`PATH_BOUND_SHARE`] of the
//!   mean latency (the same rule that makes a claim "not comparable here");
//! - **server-bound** / **client-bound**: that side used at least [`SATURATED`] of the CPUs
//!   it can use, and the other side did not, or did but less: by [`LEAD`] or more over the
//!   whole 95% interval of the per-repetition difference of the two loads. In a closed loop
//!   the slower stage sets the pace and the other waits for it;
//! - **server- and client-bound**: both saturated and neither ahead by that rule, so either
//!   could be setting the pace;
//! - **unsaturated**: neither side nor the path is at its limit (the client's pacing, the
//!   connection count or something unmeasured sets the rate).
//!
//! The CPUs a side can use: a single-reactor server model (select, poll, epoll-lt, epoll-et,
//! uring) one core; another model the server host's pinned CPUs (all the machine's when
//! unpinned); echo-bench its worker threads, at most the CPUs it saw (the thread engine: the
//! CPUs it saw).

use echolab_core::experiment::BenchMode;
use echolab_core::results::{cpuset_list, Manifest};

use crate::claims::{measured_rtt_us, PATH_BOUND_SHARE};
use crate::costs;
use crate::dataset::{CellData, Dataset};
use crate::format::{self, Table};
use crate::metrics;

/// A side whose CPU use over the window is at least this share of the CPUs it can use is
/// saturated. Sampling a 1 s window in 0.5 s steps reads a busy core at 88–100% (exp31's
/// long cells on loopback: `echolab-up --out DIR`, then `echolab-report DIR`, section "What
/// bounds each cell"), so a threshold at 100% would never be met.
pub const SATURATED: f64 = 0.85;

/// When both sides are saturated, the busier one is named as the bound only when it leads the
/// other by at least this share of a full load (5 percentage points), over the whole 95%
/// interval of its lead where there are two or more repetitions. Below it both are at
/// their limit: on exp31's long cells the two sides sit at 94–99% (`echolab-up --out DIR`,
/// section "What bounds each cell"), a difference the repetitions' noise decides.
pub const LEAD: f64 = 0.05;

/// The bound of a cell (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// The path's round trips take at least half the latency.
    Path,
    /// The server is at its CPUs' limit.
    Server,
    /// The client is at its CPUs' limit.
    Client,
    /// Both are, and neither leads.
    ServerAndClient,
    /// Neither is, nor the path.
    Unsaturated,
}

impl Bound {
    /// The label as the report prints it.
    pub fn word(self) -> &'static str {
        match self {
            Bound::Path => "path-bound",
            Bound::Server => "server-bound",
            Bound::Client => "client-bound",
            Bound::ServerAndClient => "server- and client-bound",
            Bound::Unsaturated => "unsaturated",
        }
    }

    /// Whether the server's own work may set the cell's figures.
    pub fn involves_server(self) -> bool {
        matches!(self, Bound::Server | Bound::ServerAndClient)
    }
}

/// One cell's bound with the figures it was decided from (medians over repetitions).
#[derive(Debug, Clone, PartialEq)]
pub struct CellBound {
    /// The label.
    pub bound: Bound,
    /// Server CPU over the window as a share of the CPUs it can use.
    pub server_load: Option<f64>,
    /// The CPUs the server can use.
    pub server_cpus: f64,
    /// Client CPU over the window as a share of the CPUs it can use.
    pub client_load: Option<f64>,
    /// The CPUs the client can use.
    pub client_cpus: f64,
    /// Round trips × RTT over the mean latency.
    pub path_share: Option<f64>,
}

/// Models with one reactor thread: they can use one core whatever the host has.
const SINGLE_REACTOR: [&str; 5] = ["select", "poll", "epoll-lt", "epoll-et", "uring"];

/// The CPUs the server of `cell` can use on this run.
fn server_cpus(cell: &CellData<'_>, manifest: &Manifest) -> f64 {
    if SINGLE_REACTOR.contains(&cell.cell.server.as_str()) {
        return 1.0;
    }
    let pinned = manifest
        .cpu_plan
        .as_ref()
        .and_then(|p| p.server.as_deref())
        .map(|list| cpuset_list(list).len() as f64)
        .filter(|n| *n > 0.0);
    pinned.unwrap_or(manifest.environment.cpus.max(1) as f64)
}

/// The CPUs echo-bench can use in `cell`: its worker threads, at most the CPUs it saw.
fn client_cpus(cell: &CellData<'_>) -> f64 {
    let Some(bench) = cell.ok_runs().find_map(|r| r.bench.as_ref()) else {
        return 1.0;
    };
    let seen = cpuset_list(&bench.cpus).len() as f64;
    let seen = if seen > 0.0 { seen } else { 1.0 };
    if bench.engine == "thread" || bench.threads == 0 {
        seen
    } else {
        seen.min(bench.threads as f64)
    }
}

/// Round trips one request of `mode` makes on the path: a short connection's handshake and
/// its echo, a long connection's echo.
pub fn round_trips(mode: BenchMode) -> Option<f64> {
    match mode {
        BenchMode::Short => Some(2.0),
        BenchMode::Long => Some(1.0),
        _ => None,
    }
}

/// Which of two saturated sides sets the pace, from the cell's per-repetition loads
/// ([`pace_setter`]).
fn leader(cell: &CellData<'_>, scpus: f64, ccpus: f64) -> Bound {
    let diffs: Vec<f64> = cell
        .ok_runs()
        .filter_map(|r| {
            let s = metrics::value(r, costs::SERVER_CPU_PCT)? / 100.0 / scpus;
            let c = metrics::value(r, costs::CLIENT_CPU_PCT)? / 100.0 / ccpus;
            Some(c - s)
        })
        .collect();
    pace_setter(&diffs)
}

/// Which of two saturated sides sets the pace, given the per-repetition differences of their
/// loads (client load minus server load, each a share of the CPUs that side can use): the
/// client when the 95% t interval of the mean difference lies wholly at or above [`LEAD`],
/// the server when wholly at or below −[`LEAD`], both otherwise. A single repetition has no
/// interval: its difference alone decides.
fn pace_setter(diffs: &[f64]) -> Bound {
    let n = diffs.len();
    if n == 0 {
        return Bound::ServerAndClient;
    }
    let mean = diffs.iter().sum::<f64>() / n as f64;
    let (low, high) = match crate::inference::t_975(n as u64 - 1).filter(|_| n >= 2) {
        Some(t) => {
            let var = diffs.iter().map(|d| (d - mean).powi(2)).sum::<f64>() / (n as f64 - 1.0);
            let half = t * (var / n as f64).sqrt();
            (mean - half, mean + half)
        }
        None => (mean, mean),
    };
    // The lead must clear LEAD with its whole interval, not only on average: two cores at
    // 94% and 99% are both near their limit, and a mean lead that crosses LEAD in one run
    // and not in the next would make the label flip (the claims' band rule, applied here).
    if low >= LEAD {
        Bound::Client
    } else if high <= -LEAD {
        Bound::Server
    } else {
        Bound::ServerAndClient
    }
}

/// The bound of `cell` on the run `manifest` describes; `None` for a cell without usable
/// runs or one that sends no requests (a connect storm).
pub fn of_cell(cell: &CellData<'_>, manifest: &Manifest) -> Option<CellBound> {
    if !cell.sends_requests() || cell.ok_runs().next().is_none() {
        return None;
    }
    let median = |m: &str| cell.summary(m).map(|s| s.median);
    let (scpus, ccpus) = (server_cpus(cell, manifest), client_cpus(cell));
    let server_load = median(costs::SERVER_CPU_PCT).map(|p| p / 100.0 / scpus);
    let client_load = median(costs::CLIENT_CPU_PCT).map(|p| p / 100.0 / ccpus);
    let path_share = match (measured_rtt_us(manifest), round_trips(cell.cell.mode)) {
        (Some(rtt), Some(trips)) => median(metrics::MEAN_US)
            .filter(|m| *m > 0.0)
            .map(|mean| trips * rtt / mean),
        _ => None,
    };
    let sat = |l: Option<f64>| l.is_some_and(|l| l >= SATURATED);
    let bound = if path_share.is_some_and(|s| s >= PATH_BOUND_SHARE) {
        Bound::Path
    } else {
        match (sat(server_load), sat(client_load)) {
            (true, true) => leader(cell, scpus, ccpus),
            (true, false) => Bound::Server,
            (false, true) => Bound::Client,
            (false, false) => Bound::Unsaturated,
        }
    };
    Some(CellBound {
        bound,
        server_load,
        server_cpus: scpus,
        client_load,
        client_cpus: ccpus,
        path_share,
    })
}

/// `server 93% of 1 CPU, client 99% of 1 CPU, path 4%`: the figures behind a label.
pub fn figures_text(b: &CellBound) -> String {
    let load = |l: Option<f64>, cpus: f64| match l {
        Some(l) => format!("{} of {} CPU", format::pct(l), cpus.round()),
        None => "not sampled".into(),
    };
    let mut parts = vec![
        format!("server {}", load(b.server_load, b.server_cpus)),
        format!("client {}", load(b.client_load, b.client_cpus)),
    ];
    if let Some(p) = b.path_share {
        parts.push(format!("path {}", format::pct(p)));
    }
    parts.join(", ")
}

/// The median of `metric` in `cell`, formatted, or `—`.
fn cost(cell: &CellData<'_>, metric: &str) -> String {
    cell.summary(metric)
        .map(|s| format::num(s.median))
        .unwrap_or_else(|| "—".into())
}

/// One paragraph per custom server (an experiment's own server, not an echo-server model):
/// what is measured of it and what is not; empty when the experiment has none.
pub fn custom_servers_note(manifest: &Manifest) -> String {
    manifest
        .experiment
        .custom_servers()
        .iter()
        .map(|c| {
            format!(
                "**{}** is not an echo-server model but the experiment's own server (`{}`, port {}): its CPU and \
                 memory are sampled from its host like echo-server's, while its system calls, epoll waits and \
                 events are not counted (—), since only echo-server counts its own.\n\n",
                c.name,
                c.command.join(" "),
                c.port
            )
        })
        .collect()
}

/// The section "What bounds each cell": one row per cell that sends requests, with the label
/// and both sides' load, CPU per request (user + kernel) and system calls per request.
pub fn section(ds: &Dataset<'_>, manifest: &Manifest) -> String {
    let mut t = Table::new([
        "Cell",
        "Bound",
        "Server load",
        "Client load",
        "Path share",
        "Server CPU µs/req (user + sys)",
        "Client CPU µs/req (user + sys)",
        "Server syscalls/req",
        "Client syscalls/req",
    ]);
    for cell in &ds.cells {
        let Some(b) = of_cell(cell, manifest) else {
            continue;
        };
        let load = |l: Option<f64>, cpus: f64| {
            l.map(|l| format!("{} of {}", format::pct(l), cpus.round()))
                .unwrap_or_else(|| "—".into())
        };
        let split = |total: &str, user: &str, sys: &str| {
            let t = cost(cell, total);
            match (cell.summary(user), cell.summary(sys)) {
                (Some(u), Some(s)) => format!(
                    "{t} ({} + {})",
                    format::num(u.median),
                    format::num(s.median)
                ),
                _ => t,
            }
        };
        t.row([
            cell.id.clone(),
            format!("**{}**", b.bound.word()),
            load(b.server_load, b.server_cpus),
            load(b.client_load, b.client_cpus),
            b.path_share.map(format::pct).unwrap_or_else(|| "—".into()),
            split(
                costs::SERVER_CPU_US,
                costs::SERVER_USER_US,
                costs::SERVER_SYS_US,
            ),
            split(
                costs::CLIENT_CPU_US,
                costs::CLIENT_USER_US,
                costs::CLIENT_SYS_US,
            ),
            cost(cell, costs::SERVER_SYSCALLS),
            cost(cell, costs::CLIENT_SYSCALLS),
        ]);
    }
    if t.is_empty() {
        return String::new();
    }
    format!(
        "## What bounds each cell\n\n{}Medians over repetitions, from each run's own records: the server's CPU from its host's \
         samples over the window, the client's from its own accounting (getrusage), each as a share of the CPUs that side \
         can use; the path share is round trips × calibrated RTT over the mean latency. A side at {} or more of its CPUs is \
         saturated; when both are, the one whose load is higher by {} points or more across repetitions (over \
         the whole 95% interval of the per-repetition difference) sets the pace (closed loop: the slower \
         stage sets it). \
         Per-request costs divide the window's CPU by the window's requests; the server's system calls run from its start \
         and divide by every request it read.\n\n{}\n",
        custom_servers_note(manifest),
        format::pct(SATURATED),
        (LEAD * 100.0).round(),
        t.to_markdown()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lead names its side only when its whole interval clears 5 points: a mean lead of
    /// 5.2 points whose interval reaches down to 3.6 names both, as does a steady lead of
    /// under a point; 10 points either way names the leader; one repetition decides alone.
    #[test]
    fn a_side_sets_the_pace_only_when_its_whole_lead_clears_the_threshold() {
        assert_eq!(pace_setter(&[0.055, 0.057, 0.045]), Bound::ServerAndClient);
        assert_eq!(pace_setter(&[0.009, 0.010, 0.008]), Bound::ServerAndClient);
        assert_eq!(pace_setter(&[0.09, 0.10, 0.11]), Bound::Client);
        assert_eq!(pace_setter(&[-0.09, -0.10, -0.11]), Bound::Server);
        assert_eq!(pace_setter(&[0.06]), Bound::Client);
        assert_eq!(pace_setter(&[0.04]), Bound::ServerAndClient);
        assert_eq!(pace_setter(&[]), Bound::ServerAndClient);
    }
}
