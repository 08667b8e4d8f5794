//! From a run's outcome to the `BenchReport` (for `--json`) and to the human output in the
//! seed's shape: a table of QPS, P50/P90/P99 in µs and failures, plus `--hist` bars and the
//! `--syscalls` table.

use std::fmt::Write as _;
use std::time::Duration;

use echolab_core::hist::{self, LatencySummary};
use echolab_core::netstat::ConntrackFill;
use echolab_core::stats::BenchReport;
use hdrhistogram::Histogram;

use crate::engine::{EngineKind, Plan, RunOutcome, Stop};

/// The report fields every command fills the same way; the caller adds mode-specific ones.
pub(crate) fn base_report(
    plan: &Plan,
    outcome: &RunOutcome,
    engine: EngineKind,
    target: &str,
) -> BenchReport {
    let measured = outcome.measured(plan);
    let rec = &outcome.recorder;
    let secs = measured.as_secs_f64();
    BenchReport {
        tool: "echo-bench".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        args: std::env::args().skip(1).collect(),
        mode: plan.pattern.name().into(),
        engine: engine.name().into(),
        target: target.into(),
        conns: plan.conns as u64,
        rounds: match plan.stop {
            Stop::Rounds(n) => Some(n),
            Stop::Duration(_) => None,
        },
        payload_bytes: plan.request.len() as u64,
        reply_bytes: match &plan.reply {
            crate::engine::Reply::Echo => None,
            crate::engine::Reply::Fixed(bytes) => Some(bytes.len() as u64),
        },
        target_rate: plan.rate,
        started_at: outcome.started_at.clone(),
        duration_s: secs,
        requests_ok: rec.ok,
        requests_failed: rec.failed,
        failures: rec.failures.clone(),
        qps: if secs > 0.0 {
            rec.ok as f64 / secs
        } else {
            0.0
        },
        latency_us: LatencySummary::from_histogram(&rec.hist),
        latency_out_of_range: rec.out_of_range,
        histogram: hist::encode(&rec.hist),
        syscalls: outcome.syscalls.to_table(),
        client_cpu: outcome.cpu,
        intervals: rec.interval_records(measured),
        load_model: if plan.rate.is_some() {
            echolab_core::stats::LOAD_OPEN
        } else {
            echolab_core::stats::LOAD_CLOSED
        }
        .into(),
        threads: outcome.threads,
        threads_reason: match engine {
            EngineKind::Event | EngineKind::Uring => plan.threads_reason.clone(),
            EngineKind::Thread => "thread engine: one per connection".into(),
        },
        source_addrs: plan.sources.addrs.iter().map(|a| a.to_string()).collect(),
        source_addrs_reason: plan.sources.reason.clone(),
        short_sockets: plan.socket_reuse.label.into(),
        short_sockets_reason: plan.socket_reuse.reason.clone(),
        max_rss_kib: max_rss_kib(),
        cpus: allowed_cpus(),
        kernel_counters: echolab_core::netstat::deltas(
            &outcome.counters_at_start,
            &echolab_core::netstat::read(),
        ),
        // Set by the caller, which takes the signal ([`note_interrupt`]).
        interrupted: false,
        interrupted_by: None,
        extra: Default::default(),
    }
}

/// Marks `report` as cut short by `signal` (`"SIGINT"`, `"SIGTERM"`), with the window that
/// was asked for (`--duration`, seconds) in `extra.requested_duration_s` beside the measured
/// `duration_s`. A `--processes` report may already be marked by its shards.
pub(crate) fn note_interrupt(report: &mut BenchReport, signal: &str, asked: Option<Duration>) {
    report.interrupted = true;
    if report.interrupted_by.is_none() {
        report.interrupted_by = Some(signal.into());
    }
    if let Some(d) = asked {
        report.extra.requested_duration_s = Some(d.as_secs_f64());
    }
}

/// This process's peak resident memory in KiB (getrusage(2) `ru_maxrss`, which Linux gives
/// in KiB); 0 when the call fails.
pub(crate) fn max_rss_kib() -> u64 {
    nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF)
        .map_or(0, |u| u.max_rss().max(0) as u64)
}

/// The CPUs this process may run on (sched_getaffinity(2)) as a cpuset list: `"1"`, `"0-3"`,
/// `"0,2"`; empty when the call fails.
pub(crate) fn allowed_cpus() -> String {
    let Ok(set) = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)) else {
        return String::new();
    };
    let cpus: Vec<usize> = (0..nix::sched::CpuSet::count())
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .collect();
    cpu_list(&cpus)
}

/// Formats ascending CPU numbers as a cpuset list (cpuset(7) "List format"): runs of three or
/// more become `a-b`.
pub(crate) fn cpu_list(cpus: &[usize]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        match j - i {
            0 => parts.push(cpus[i].to_string()),
            1 => parts.push(format!("{},{}", cpus[i], cpus[j])),
            _ => parts.push(format!("{}-{}", cpus[i], cpus[j])),
        }
        i = j + 1;
    }
    parts.join(",")
}

/// Adds `extra.setup_connect_failures` to `report` when connections of the closed/open-loop
/// commands failed to connect before the measurement began (nothing when none did).
pub(crate) fn note_setup_failures(report: &mut BenchReport, outcome: &RunOutcome) {
    if outcome.setup_failures > 0 {
        report.extra.setup_connect_failures = Some(outcome.setup_failures);
    }
}

/// Records in `report` a connection-tracking table at least 90% full (`fill`, read at the end
/// of the run) as `extra.conntrack_nearly_full = {"entries", "max"}`, and removes the key
/// otherwise (a `--processes` parent's own reading replaces its shards').
pub(crate) fn note_conntrack(report: &mut BenchReport, fill: Option<ConntrackFill>) {
    report.extra.conntrack_nearly_full = fill.filter(ConntrackFill::nearly_full);
}

/// Client CPU microseconds per successful request, `None` without requests.
pub(crate) fn cpu_us_per_request(r: &BenchReport) -> Option<f64> {
    (r.requests_ok > 0)
        .then(|| (r.client_cpu.user_s + r.client_cpu.sys_s) * 1e6 / r.requests_ok as f64)
}

/// `value` in µs with `digits` decimals, or `—` when nothing was measured.
pub(crate) fn us(value: Option<f64>, digits: usize) -> String {
    value.map_or_else(|| "—".into(), |v| format!("{v:.digits$}"))
}

/// The seed-shaped summary: one header line and a table row.
pub(crate) fn render_summary(r: &BenchReport) -> String {
    let mut out = String::new();
    let bound = match (r.rounds, r.target_rate) {
        (Some(n), None) => format!("rounds={n}"),
        (Some(n), Some(rate)) => format!("rounds={n} rate={rate}/s"),
        (None, None) => format!("duration={:.3}s", r.duration_s),
        (None, Some(rate)) => format!("duration={:.3}s rate={rate}/s", r.duration_s),
    };
    let reply = r
        .reply_bytes
        .map(|b| format!(" reply={b}B"))
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "echo-bench {} engine={} target={} conns={} {} payload={}B{}",
        r.mode, r.engine, r.target, r.conns, bound, r.payload_bytes, reply
    );
    let _ = writeln!(
        out,
        "| mode | conns | requests | QPS | P50(µs) | P90(µs) | P99(µs) | fail |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|");
    let l = r.latency_us.as_ref();
    let at = |f: fn(&LatencySummary) -> f64, digits: usize| us(l.map(f), digits);
    let _ = writeln!(
        out,
        "| {} | {} | {} | {:.0} | {} | {} | {} | {} |",
        r.mode,
        r.conns,
        r.requests_ok,
        r.qps,
        at(|l| l.p50, 0),
        at(|l| l.p90, 0),
        at(|l| l.p99, 0),
        r.requests_failed
    );
    let _ = writeln!(
        out,
        "latency µs: min {} mean {} p99.9 {} max {}; measured {:.4} s",
        at(|l| l.min, 1),
        at(|l| l.mean, 1),
        at(|l| l.p999, 1),
        at(|l| l.max, 1),
        r.duration_s
    );
    if l.is_none() {
        let _ = writeln!(
            out,
            "no request succeeded: no latency was measured (— is not 0)"
        );
    }
    if r.latency_out_of_range > 0 {
        let _ = writeln!(
            out,
            "{} latencies fell outside the histogram's range (1 ns to 1 h) and were recorded at \
             its nearest bound",
            r.latency_out_of_range
        );
    }
    if r.interrupted {
        let asked = r
            .extra
            .requested_duration_s
            .map(|s| format!(" of the {s} s asked"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "INTERRUPTED by {}: the window was cut short after {:.3} s{asked}; these are \
             partial results (rates are per second of the shorter window)",
            r.interrupted_by.as_deref().unwrap_or("a signal"),
            r.duration_s
        );
    }
    if r.failures.is_empty() {
        let _ = writeln!(out, "failures: none");
    } else {
        let kinds: Vec<String> = r.failures.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = writeln!(out, "failures: {}", kinds.join(", "));
    }
    let per_req = cpu_us_per_request(r)
        .map(|us| format!(" ({us:.2} µs/request)"))
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "client CPU: user {:.3} s, sys {:.3} s{per_req}",
        r.client_cpu.user_s, r.client_cpu.sys_s
    );
    if r.max_rss_kib > 0 {
        let _ = writeln!(
            out,
            "client memory: peak RSS {:.1} MiB{}",
            r.max_rss_kib as f64 / 1024.0,
            r.extra
                .processes
                .map(|n| format!(" over {n} processes"))
                .unwrap_or_default()
        );
    }
    let trouble = kernel_trouble(r);
    if !trouble.is_empty() {
        let _ = writeln!(out, "kernel dropped, refused or retransmitted: {trouble}");
    }
    if let Some(f) = r.extra.conntrack_nearly_full {
        let _ = writeln!(
            out,
            "connection tracking table nearly full: {} of {} entries (nf_conntrack_max); when it \
             is full the kernel drops new connections' SYNs (see docs/methodology.md, \"Reading \
             the tails\")",
            f.entries, f.max
        );
    }
    out
}

/// The [`echolab_core::netstat::TROUBLE`] counters that moved during the run, as
/// `"TcpExtTCPTimeWaitOverflow 118328, ..."`; empty when none did. TCPTimeWaitOverflow means
/// the kernel's TIME_WAIT table (`net.ipv4.tcp_max_tw_buckets`) was full, so those closes
/// kept no TIME_WAIT.
pub(crate) fn kernel_trouble(r: &BenchReport) -> String {
    echolab_core::netstat::TROUBLE
        .iter()
        .filter_map(|&name| {
            let n = r.kernel_counters.get(name).copied().unwrap_or(0);
            (n != 0).then(|| format!("{name} {n}"))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `--syscalls` table: calls, total and mean time, calls per successful request.
pub(crate) fn render_syscalls(r: &BenchReport) -> String {
    // The name column fits the longest name (io_uring_enter, 14).
    let mut out = format!(
        "{:<14} {:>8} {:>12} {:>10} {:>12}\n",
        "syscall", "calls", "total ms", "mean ns", "per request"
    );
    for (name, s) in &r.syscalls {
        let total = s.total_ns.unwrap_or(0);
        let mean = total.checked_div(s.count).unwrap_or(0);
        let per = if r.requests_ok > 0 {
            format!("{:.2}", s.count as f64 / r.requests_ok as f64)
        } else {
            "-".into()
        };
        let _ = writeln!(
            out,
            "{name:<14} {:>8} {:>12.3} {mean:>10} {per:>12}",
            s.count,
            total as f64 / 1e6
        );
    }
    out
}

/// Bars of a `--hist`: at most this many geometric buckets between min and max.
pub(crate) const HIST_BUCKETS: usize = 16;
const BAR_WIDTH: usize = 40;

/// A latency histogram (nanoseconds) as text bars over geometric buckets in µs, so that both
/// the body and the tail of a skewed distribution are visible.
pub(crate) fn render_histogram(h: &Histogram<u64>) -> String {
    if h.is_empty() {
        return "latency histogram: no successful requests\n".into();
    }
    let (lo, hi) = (h.min().max(1) as f64, h.max().max(1) as f64);
    let buckets = if hi / lo < 1.01 { 1 } else { HIST_BUCKETS };
    let ratio = (hi / lo).powf(1.0 / buckets as f64);
    let edges: Vec<f64> = (0..=buckets).map(|i| lo * ratio.powi(i as i32)).collect();
    let mut counts = vec![0u64; buckets];
    for v in h.iter_recorded() {
        let x = h.median_equivalent(v.value_iterated_to()) as f64;
        let idx = edges[1..]
            .iter()
            .position(|&e| x <= e * (1.0 + 1e-9))
            .unwrap_or(buckets - 1);
        counts[idx] += v.count_at_value();
    }
    let most = *counts.iter().max().unwrap_or(&1);
    let mut out = format!("latency histogram (µs, {} requests)\n", h.len());
    for (i, &c) in counts.iter().enumerate() {
        let bar = "#".repeat(((c as f64 / most as f64) * BAR_WIDTH as f64).round() as usize);
        let _ = writeln!(
            out,
            "{:>10.1} .. {:>10.1} |{bar:<BAR_WIDTH$}| {c:>9} {:>5.1}%",
            edges[i] / 1e3,
            edges[i + 1] / 1e3,
            100.0 * c as f64 / h.len() as f64
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_use_ranges_from_three() {
        assert_eq!(cpu_list(&[]), "");
        assert_eq!(cpu_list(&[1]), "1");
        assert_eq!(cpu_list(&[0, 1]), "0,1");
        assert_eq!(cpu_list(&[0, 1, 2, 3, 6, 8, 9]), "0-3,6,8,9");
    }

    #[test]
    fn histogram_bars_account_for_every_request() {
        let mut h = hist::new_latency_histogram();
        for ns in [10_000u64, 10_000, 20_000, 400_000, 1_000_000] {
            assert!(!hist::record_ns(&mut h, ns));
        }
        let text = render_histogram(&h);
        let total: u64 = text
            .lines()
            .skip(1)
            .map(|l| {
                l.split('|')
                    .nth(2)
                    .unwrap()
                    .split_whitespace()
                    .next()
                    .unwrap()
                    .parse::<u64>()
                    .unwrap()
            })
            .sum();
        assert_eq!(total, 5, "{text}");
        assert_eq!(text.lines().count(), 1 + HIST_BUCKETS);
    }

    #[test]
    fn a_nearly_full_conntrack_table_is_recorded_and_said_and_a_fuller_one_replaces_it() {
        let mut r = BenchReport::default();
        note_conntrack(
            &mut r,
            Some(ConntrackFill {
                entries: 1000,
                max: 262_144,
            }),
        );
        note_conntrack(&mut r, None);
        assert!(r.extra.is_empty());
        assert!(!render_summary(&r).contains("connection tracking"));
        note_conntrack(
            &mut r,
            Some(ConntrackFill {
                entries: 262_144,
                max: 262_144,
            }),
        );
        assert_eq!(
            r.extra.conntrack_nearly_full,
            Some(ConntrackFill {
                entries: 262_144,
                max: 262_144
            })
        );
        assert!(render_summary(&r).contains(
            "connection tracking table nearly full: 262144 of 262144 entries (nf_conntrack_max)"
        ));
        // A parent's own reading, below nine tenths, takes its shard's away.
        note_conntrack(
            &mut r,
            Some(ConntrackFill {
                entries: 200_000,
                max: 262_144,
            }),
        );
        assert_eq!(r.extra.conntrack_nearly_full, None);
    }

    #[test]
    fn summary_names_the_trouble_counters_that_moved_and_only_those() {
        let mut r = BenchReport::default();
        r.kernel_counters.insert("TcpExtTW".into(), 500);
        assert!(!render_summary(&r).contains("kernel dropped"));
        r.kernel_counters
            .insert("TcpExtTCPTimeWaitOverflow".into(), 118_328);
        r.kernel_counters.insert("TcpExtTCPSynRetrans".into(), 3);
        assert_eq!(
            kernel_trouble(&r),
            "TcpExtTCPSynRetrans 3, TcpExtTCPTimeWaitOverflow 118328"
        );
        assert!(render_summary(&r).ends_with(
            "kernel dropped, refused or retransmitted: TcpExtTCPSynRetrans 3, \
             TcpExtTCPTimeWaitOverflow 118328\n"
        ));
    }

    #[test]
    fn single_value_histogram_has_one_bar() {
        let mut h = hist::new_latency_histogram();
        assert!(!hist::record_ns(&mut h, 5_000));
        assert_eq!(render_histogram(&h).lines().count(), 2);
    }
}
