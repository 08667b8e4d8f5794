//! One echo-bench run split into shards, each running a contiguous share of the connections
//! and all started together, and their reports merged into one: the contract between
//! `echo-bench --processes N` and its shard processes, and between the launcher and the
//! echo-bench of each client machine of a lab run with several (`roles.client: [b, c]`).
//!
//! A shard is `echo-bench ... --json --shard K/N`: it sets up its connections (numbered as in
//! one process, so the open-loop schedule and the source addresses are the same), prints
//! [`READY_LINE`] on stdout, waits for one line on stdin, runs, and prints its report, whose
//! `extra.shard_interval_histograms` holds its per-interval histograms. [`merge`] makes
//! one report of them, as distributed load generators merge their workers' histograms.

use crate::hist::{self, LatencySummary};
use crate::stats::{BenchReport, IntervalRecord};

/// The line a shard prints on stdout when all its connections are set up, before its JSON.
pub const READY_LINE: &str = "echo-bench shard ready";

/// Shard `index` of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// 0-based.
    pub index: u64,
    /// Number of shards.
    pub count: u64,
}

/// Parses `--shard K/N`.
///
/// # Errors
/// Not two numbers `K/N` with `K < N`.
pub fn parse_shard(text: &str) -> Result<Shard, String> {
    let parsed = text
        .split_once('/')
        .and_then(|(k, n)| Some((k.parse::<u64>().ok()?, n.parse::<u64>().ok()?)));
    match parsed {
        Some((index, count)) if index < count => Ok(Shard { index, count }),
        _ => Err(format!("{text:?} is not K/N with K < N")),
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// Where the shards' kernel counters (`BenchReport.kernel_counters`) were read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterScope {
    /// Every shard read the same network namespace over the same window (processes on one
    /// machine): each saw every shard's connections, so the merged change is the largest
    /// any shard saw, of either sign.
    OneNamespace,
    /// Each shard read its own machine's kernel: the changes add up.
    SeparateMachines,
}

/// One report for the whole run from the shards' reports: counts, failures, CPU, system calls
/// and memory add up; latency comes from the merged histograms (per interval too, from
/// [`INTERVAL_HISTOGRAMS`]); the kernel's counters as `scope` says.
///
/// The caller sets what only it knows: `args`, `cpus`, `threads_reason`, and `extra`'s
/// count of parts (`processes` or `client_machines`); `max_rss_kib_per_process` lists the
/// parts' peaks in their order.
///
/// # Errors
/// No reports, or a histogram that does not decode.
pub fn merge(mut parts: Vec<BenchReport>, scope: CounterScope) -> Result<BenchReport, String> {
    if parts.is_empty() {
        return Err("no shard reports".into());
    }
    let mut out = parts[0].clone();
    let merged = hist::merge(parts.iter().map(|p| p.histogram.as_str()))
        .map_err(|e| format!("a shard's histogram: {e}"))?;
    out.histogram = hist::encode(&merged);
    out.latency_us = LatencySummary::from_histogram(&merged);
    out.latency_out_of_range = parts.iter().map(|p| p.latency_out_of_range).sum();
    out.conns = parts.iter().map(|p| p.conns).sum();
    out.requests_ok = parts.iter().map(|p| p.requests_ok).sum();
    out.requests_failed = parts.iter().map(|p| p.requests_failed).sum();
    // One interrupted shard makes the whole run partial.
    out.interrupted = parts.iter().any(|p| p.interrupted);
    out.interrupted_by = parts.iter().find_map(|p| p.interrupted_by.clone());
    out.duration_s = parts.iter().map(|p| p.duration_s).fold(0.0, f64::max);
    out.qps = if out.duration_s > 0.0 {
        out.requests_ok as f64 / out.duration_s
    } else {
        0.0
    };
    out.failures.clear();
    out.syscalls.clear();
    out.kernel_counters.clear();
    out.client_cpu = Default::default();
    out.threads = 0;
    out.max_rss_kib = 0;
    for p in &parts {
        for (k, v) in &p.failures {
            *out.failures.entry(k.clone()).or_default() += v;
        }
        for (k, s) in &p.syscalls {
            let e = out.syscalls.entry(k.clone()).or_default();
            e.count += s.count;
            e.total_ns = Some(e.total_ns.unwrap_or(0) + s.total_ns.unwrap_or(0));
        }
        for (k, &v) in &p.kernel_counters {
            match scope {
                CounterScope::OneNamespace => {
                    let e = out.kernel_counters.entry(k.clone()).or_insert(v);
                    if v.abs() > e.abs() {
                        *e = v;
                    }
                }
                CounterScope::SeparateMachines => {
                    *out.kernel_counters.entry(k.clone()).or_default() += v;
                }
            }
        }
        out.client_cpu.user_s += p.client_cpu.user_s;
        out.client_cpu.sys_s += p.client_cpu.sys_s;
        out.threads += p.threads;
        out.max_rss_kib += p.max_rss_kib;
    }
    out.intervals = merge_intervals(&mut parts)?;
    out.extra.shard_interval_histograms = None;
    let total = |count: fn(&BenchReport) -> Option<u64>| {
        Some(parts.iter().filter_map(count).sum()).filter(|&n: &u64| n > 0)
    };
    out.extra.setup_connect_failures = total(|p| p.extra.setup_connect_failures);
    out.extra.warmup_requests = total(|p| p.extra.warmup_requests);
    out.extra.max_rss_kib_per_process = Some(parts.iter().map(|p| p.max_rss_kib).collect());
    Ok(out)
}

fn merge_intervals(parts: &mut [BenchReport]) -> Result<Vec<IntervalRecord>, String> {
    let count = parts.iter().map(|p| p.intervals.len()).max().unwrap_or(0);
    let hists: Vec<Vec<String>> = parts
        .iter_mut()
        .map(|p| p.extra.shard_interval_histograms.take().unwrap_or_default())
        .collect();
    (0..count)
        .map(|i| {
            let here: Vec<&IntervalRecord> =
                parts.iter().filter_map(|p| p.intervals.get(i)).collect();
            let merged = hist::merge(hists.iter().filter_map(|h| h.get(i).map(String::as_str)))
                .map_err(|e| format!("a shard's interval histogram: {e}"))?;
            Ok(IntervalRecord {
                t_s: here.iter().map(|r| r.t_s).fold(0.0, f64::max),
                requests_ok: here.iter().map(|r| r.requests_ok).sum(),
                requests_failed: here.iter().map(|r| r.requests_failed).sum(),
                qps: here.iter().map(|r| r.qps).sum(),
                rx_bytes_per_s: here.iter().map(|r| r.rx_bytes_per_s).sum(),
                latency_us: LatencySummary::from_histogram(&merged),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_that_measured_no_time_has_no_rate() {
        let mut a = part(0, &[], 0.0);
        a.duration_s = 0.0;
        let m = merge(vec![a], CounterScope::OneNamespace).unwrap();
        assert_eq!(m.qps, 0.0);
        assert!(merge(Vec::new(), CounterScope::OneNamespace).is_err());
    }

    #[test]
    fn shards_parse_and_bad_ones_are_refused() {
        assert_eq!(parse_shard("2/4"), Ok(Shard { index: 2, count: 4 }));
        for bad in ["4/4", "a/2", "3", "-1/2"] {
            assert!(parse_shard(bad).is_err(), "{bad}");
        }
    }

    fn histogram_of(latencies_us: &[u64]) -> String {
        let mut h = hist::new_latency_histogram();
        for &l in latencies_us {
            assert!(!hist::record_ns(&mut h, l * 1000));
        }
        hist::encode(&h)
    }

    /// A shard's report: `ok` requests at `latencies_us`, in two 1 s intervals (all latencies
    /// in the first, none in the second).
    fn part(ok: u64, latencies_us: &[u64], cpu: f64) -> BenchReport {
        let mut r = BenchReport {
            conns: 10,
            requests_ok: ok,
            requests_failed: 1,
            duration_s: 2.0,
            histogram: histogram_of(latencies_us),
            threads: 1,
            max_rss_kib: 3000,
            ..Default::default()
        };
        r.client_cpu.sys_s = cpu;
        r.client_cpu.user_s = cpu / 10.0;
        r.failures.insert("timeout".into(), 1);
        r.kernel_counters.insert("TcpExtTW".into(), 50);
        r.syscalls.insert(
            "write".into(),
            crate::stats::SyscallStat {
                count: ok,
                total_ns: Some(ok * 1000),
            },
        );
        r.intervals = vec![
            IntervalRecord {
                t_s: 1.0,
                requests_ok: ok,
                qps: ok as f64,
                rx_bytes_per_s: 12.0 * ok as f64,
                ..Default::default()
            },
            IntervalRecord {
                t_s: 2.0,
                ..Default::default()
            },
        ];
        r.extra.shard_interval_histograms =
            Some(vec![histogram_of(latencies_us), histogram_of(&[])]);
        r
    }

    #[test]
    fn merged_report_adds_counts_and_takes_percentiles_of_all_latencies() {
        // Shard A's latencies are all 100 µs, shard B's all 900 µs: the merged p50 is one of
        // them and the p99 is B's, which neither shard's own summary could give alone.
        let mut a = part(99, &[100; 99], 0.5);
        let mut b = part(101, &[900; 101], 0.7);
        // One namespace, read by both: the largest change either saw, of either sign.
        b.kernel_counters.insert("TcpExtTW".into(), 70);
        a.kernel_counters.insert("TcpCurrEstab".into(), -100);
        b.kernel_counters.insert("TcpCurrEstab".into(), -90);
        a.extra.setup_connect_failures = Some(2);
        b.extra.setup_connect_failures = Some(3);
        a.extra.warmup_requests = Some(0);
        let m = merge(vec![a, b], CounterScope::OneNamespace).unwrap();
        assert_eq!((m.conns, m.requests_ok, m.requests_failed), (20, 200, 2));
        assert_eq!(m.failures["timeout"], 2);
        assert_eq!(m.qps, 100.0);
        assert!((m.client_cpu.sys_s - 1.2).abs() < 1e-9);
        assert!((m.client_cpu.user_s - 0.12).abs() < 1e-9);
        assert_eq!((m.threads, m.max_rss_kib), (2, 6000));
        assert_eq!(m.kernel_counters["TcpExtTW"], 70);
        assert_eq!(m.kernel_counters["TcpCurrEstab"], -100);
        assert_eq!(
            (m.syscalls["write"].count, m.syscalls["write"].total_ns),
            (200, Some(200_000))
        );
        assert_eq!(m.extra.setup_connect_failures, Some(5));
        assert_eq!(m.extra.warmup_requests, None);
        assert_eq!(m.extra.shard_interval_histograms, None);
        // Intervals: counts and rates add; percentiles come from the merged histograms.
        assert_eq!(m.intervals.len(), 2);
        let first = &m.intervals[0];
        assert_eq!((first.t_s, first.requests_ok, first.qps), (1.0, 200, 200.0));
        assert_eq!(first.rx_bytes_per_s, 2400.0);
        let first_latency = first.latency_us.unwrap();
        assert!((899.0..=901.0).contains(&first_latency.p99), "{first:?}");
        assert!((99.0..=101.0).contains(&first_latency.min), "{first:?}");
        assert_eq!((m.intervals[1].t_s, m.intervals[1].requests_ok), (2.0, 0));
        assert_eq!(
            m.intervals[1].latency_us, None,
            "an empty interval has no latency"
        );
        assert_eq!(hist::decode(&m.histogram).unwrap().len(), 200);
        let latency = m.latency_us.unwrap();
        assert!((899.0..=901.0).contains(&latency.p99), "{latency:?}");
        assert!((899.0..=901.0).contains(&latency.p50), "{latency:?}");
        assert_eq!(m.extra.max_rss_kib_per_process, Some(vec![3000, 3000]));
    }

    #[test]
    fn counters_of_separate_machines_add_up() {
        // Two machines' kernels: 50 + 70 connections entered TIME_WAIT, 100 + 90 closed.
        let mut a = part(1, &[100], 0.1);
        let mut b = part(1, &[100], 0.1);
        b.kernel_counters.insert("TcpExtTW".into(), 70);
        a.kernel_counters.insert("TcpCurrEstab".into(), -100);
        b.kernel_counters.insert("TcpCurrEstab".into(), -90);
        let m = merge(vec![a, b], CounterScope::SeparateMachines).unwrap();
        assert_eq!(m.kernel_counters["TcpExtTW"], 120);
        assert_eq!(m.kernel_counters["TcpCurrEstab"], -190);
    }

    #[test]
    fn a_shard_spells_and_parses_back_as_k_of_n() {
        let s = Shard { index: 2, count: 3 };
        assert_eq!(s.to_string(), "2/3");
        assert_eq!(parse_shard(&s.to_string()), Ok(s));
    }
}
