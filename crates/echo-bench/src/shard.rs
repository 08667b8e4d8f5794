//! `--processes N`: one run split over N client processes, as distributed load generators
//! split one over several machines.
//!
//! Why processes and not threads: a process may hold at most RLIMIT_NOFILE descriptors, and
//! some machines cap the hard limit (20,000 on the ones this was built on, in containers too),
//! so 50,000 connections need several processes. The parent starts N copies of itself with
//! the same arguments and a hidden `--shard K/N`; shard K runs the contiguous share K of the
//! connections (numbered as in one process, so the open-loop schedule and the source
//! addresses are the same), connects, and prints [`READY_LINE`]. When every shard is ready the
//! parent writes one line to each shard's stdin and they all start; a shard whose parent is
//! gone (stdin closed) stops. The parent then merges the shards' reports ([`merge`]).

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use echolab_core::hist::{self, LatencySummary};
use echolab_core::stats::{BenchReport, IntervalRecord};

/// The line a shard prints on stdout when all its connections are set up, before its JSON.
pub const READY_LINE: &str = "echo-bench shard ready";

/// Key of a shard's per-interval histograms in its report's `extra` (removed by [`merge`]).
pub const INTERVAL_HISTOGRAMS: &str = "shard_interval_histograms";

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

/// In a shard: tells the parent this shard is ready and blocks until it says go. Exits the
/// process (status 1) when the parent is gone, since nobody would read the result.
pub(crate) fn wait_for_go() {
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{READY_LINE}")
        .and_then(|()| out.flush())
        .is_err()
    {
        std::process::exit(1);
    }
    drop(out);
    let mut line = String::new();
    match std::io::stdin().lock().read_line(&mut line) {
        Ok(n) if n > 0 => {}
        _ => {
            eprintln!("echo-bench: shard: the parent process is gone; stopping");
            std::process::exit(1);
        }
    }
}

/// The arguments of a shard: the parent's, without `--processes` and the output flags the
/// parent handles itself, plus `--json --shard K/N`.
pub(crate) fn shard_args(parent: &[String], shard: Shard) -> Vec<String> {
    const DROP_FLAGS: [&str; 4] = ["--json", "--hist", "--syscalls", "--fail-on-error"];
    let mut out = Vec::new();
    let mut skip_value = false;
    for a in parent {
        if std::mem::take(&mut skip_value) {
            continue;
        }
        if a == "--processes" {
            skip_value = true;
        } else if !(a.starts_with("--processes=") || DROP_FLAGS.contains(&a.as_str())) {
            out.push(a.clone());
        }
    }
    out.extend([
        "--json".into(),
        "--shard".into(),
        format!("{}/{}", shard.index, shard.count),
    ]);
    out
}

/// Kills and reaps the shards still running when dropped (an error path).
struct Shards(Vec<Child>);

impl Drop for Shards {
    fn drop(&mut self) {
        for c in &mut self.0 {
            if matches!(c.try_wait(), Ok(None)) {
                let _ = c.kill();
            }
            let _ = c.wait();
        }
    }
}

enum Event {
    Ready,
    Done(usize, String),
}

/// Runs `count` shards of this command line and returns their reports, in shard order.
/// `setup_deadline` bounds the wait for all of them to be ready.
///
/// # Errors
/// A shard that cannot start, exits before it is ready or prints no report (its own stderr,
/// which is the parent's, says why), or a setup that takes longer than `setup_deadline`.
pub(crate) fn run_shards(count: u64, setup_deadline: Duration) -> Result<Vec<BenchReport>, String> {
    let exe = std::env::current_exe()
        .map_err(|e| format!("--processes: cannot find this program: {e}"))?;
    let parent: Vec<String> = std::env::args().skip(1).collect();
    let mut shards = Shards(Vec::new());
    let mut stdins: Vec<ChildStdin> = Vec::new();
    let (tx, rx) = mpsc::channel();
    for index in 0..count {
        let mut child = Command::new(&exe)
            .args(shard_args(&parent, Shard { index, count }))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("--processes: cannot start shard {index}: {e}"))?;
        stdins.push(child.stdin.take().expect("piped"));
        let stdout = child.stdout.take().expect("piped");
        shards.0.push(child);
        let tx = tx.clone();
        let k = index as usize;
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut first = String::new();
            let _ = reader.read_line(&mut first);
            let mut rest = String::new();
            if first.trim_end() == READY_LINE {
                let _ = tx.send(Event::Ready);
            } else {
                rest = first;
            }
            let _ = reader.read_to_string(&mut rest);
            let _ = tx.send(Event::Done(k, rest));
        });
    }
    drop(tx);
    let deadline = std::time::Instant::now() + setup_deadline;
    let mut outputs: Vec<Option<String>> = vec![None; count as usize];
    let mut ready = 0;
    while ready < count {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(Event::Ready) => ready += 1,
            Ok(Event::Done(k, _)) => {
                return Err(format!(
                    "--processes: shard {k} ended before it was ready (its message is above)"
                ))
            }
            Err(_) => {
                return Err(format!(
                    "--processes: {} of {count} shards were not ready within {setup_deadline:?}",
                    count - ready
                ))
            }
        }
    }
    // Every shard is connected and waiting: release them together.
    for s in &mut stdins {
        let _ = s.write_all(b"go\n").and_then(|()| s.flush());
    }
    while let Ok(Event::Done(k, text)) = rx.recv() {
        outputs[k] = Some(text);
    }
    let mut reports = Vec::new();
    for (k, text) in outputs.into_iter().enumerate() {
        let text = text.unwrap_or_default();
        let report = serde_json::from_str::<BenchReport>(&text).map_err(|e| {
            format!("--processes: shard {k} printed no report ({e}); its message is above")
        })?;
        reports.push(report);
    }
    for c in &mut shards.0 {
        let _ = c.wait();
    }
    shards.0.clear();
    Ok(reports)
}

/// One report for the whole run from the shards' reports: counts, failures, CPU, system calls
/// and memory add up; latency comes from the merged histograms (per interval too, from
/// [`INTERVAL_HISTOGRAMS`]); the kernel's counters, which every shard read over the same
/// window of the same network namespace, are the largest change any shard saw.
///
/// `cpus` is the parent's allowed CPUs, as `BenchReport.cpus` gives them.
///
/// # Errors
/// No reports, or a histogram that does not decode.
pub(crate) fn merge(mut parts: Vec<BenchReport>, cpus: String) -> Result<BenchReport, String> {
    if parts.is_empty() {
        return Err("no shard reports".into());
    }
    let mut out = parts[0].clone();
    let n = parts.len();
    let merged = hist::merge(parts.iter().map(|p| p.histogram.as_str()))
        .map_err(|e| format!("a shard's histogram: {e}"))?;
    out.histogram = hist::encode(&merged);
    out.latency_us = LatencySummary::from_histogram(&merged);
    out.args = std::env::args().skip(1).collect();
    out.conns = parts.iter().map(|p| p.conns).sum();
    out.requests_ok = parts.iter().map(|p| p.requests_ok).sum();
    out.requests_failed = parts.iter().map(|p| p.requests_failed).sum();
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
            let e = out.kernel_counters.entry(k.clone()).or_insert(v);
            if v.abs() > e.abs() {
                *e = v;
            }
        }
        out.client_cpu.user_s += p.client_cpu.user_s;
        out.client_cpu.sys_s += p.client_cpu.sys_s;
        out.threads += p.threads;
        out.max_rss_kib += p.max_rss_kib;
    }
    out.threads_reason = format!("{n} processes, each {}", parts[0].threads_reason);
    out.cpus = cpus;
    out.intervals = merge_intervals(&mut parts)?;
    out.extra.remove(INTERVAL_HISTOGRAMS);
    for key in ["setup_connect_failures", "warmup_requests"] {
        let total: u64 = parts
            .iter()
            .filter_map(|p| p.extra.get(key).and_then(|v| v.as_u64()))
            .sum();
        if total > 0 {
            out.extra.insert(key.into(), total.into());
        } else {
            out.extra.remove(key);
        }
    }
    out.extra.insert("processes".into(), n.into());
    out.extra.insert(
        "max_rss_kib_per_process".into(),
        parts
            .iter()
            .map(|p| p.max_rss_kib)
            .collect::<Vec<_>>()
            .into(),
    );
    Ok(out)
}

fn merge_intervals(parts: &mut [BenchReport]) -> Result<Vec<IntervalRecord>, String> {
    let count = parts.iter().map(|p| p.intervals.len()).max().unwrap_or(0);
    let hists: Vec<Vec<String>> = parts
        .iter_mut()
        .map(|p| {
            p.extra
                .remove(INTERVAL_HISTOGRAMS)
                .and_then(|v| serde_json::from_value(v).ok())
                .unwrap_or_default()
        })
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

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_run_that_measured_no_time_has_no_rate() {
        let mut a = part(0, &[], 0.0);
        a.duration_s = 0.0;
        let m = merge(vec![a], String::new()).unwrap();
        assert_eq!(m.qps, 0.0);
        assert!(merge(Vec::new(), String::new()).is_err());
    }

    #[test]
    fn shards_parse_and_bad_ones_are_refused() {
        assert_eq!(parse_shard("2/4"), Ok(Shard { index: 2, count: 4 }));
        for bad in ["4/4", "a/2", "3", "-1/2"] {
            assert!(parse_shard(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn shard_args_drop_processes_and_output_flags() {
        let parent = strings(&[
            "127.0.0.1",
            "9988",
            "100",
            "--processes",
            "4",
            "--json",
            "--hist",
            "--mode",
            "short",
            "--processes=4",
            "--fail-on-error",
            "--syscalls",
        ]);
        assert_eq!(
            shard_args(&parent, Shard { index: 1, count: 4 }),
            strings(&[
                "127.0.0.1",
                "9988",
                "100",
                "--mode",
                "short",
                "--json",
                "--shard",
                "1/4"
            ])
        );
    }

    fn histogram_of(latencies_us: &[u64]) -> String {
        let mut h = hist::new_latency_histogram();
        for &l in latencies_us {
            hist::record_ns(&mut h, l * 1000);
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
            echolab_core::stats::SyscallStat {
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
        r.extra.insert(
            INTERVAL_HISTOGRAMS.into(),
            serde_json::json!([histogram_of(latencies_us), histogram_of(&[])]),
        );
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
        a.extra.insert("setup_connect_failures".into(), 2.into());
        b.extra.insert("setup_connect_failures".into(), 3.into());
        a.extra.insert("warmup_requests".into(), 0.into());
        let m = merge(vec![a, b], "0-1".into()).unwrap();
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
        assert_eq!(m.extra["setup_connect_failures"], 5);
        assert!(!m.extra.contains_key("warmup_requests"));
        assert!(!m.extra.contains_key(INTERVAL_HISTOGRAMS));
        // Intervals: counts and rates add; percentiles come from the merged histograms.
        assert_eq!(m.intervals.len(), 2);
        let first = &m.intervals[0];
        assert_eq!((first.t_s, first.requests_ok, first.qps), (1.0, 200, 200.0));
        assert_eq!(first.rx_bytes_per_s, 2400.0);
        assert!((899.0..=901.0).contains(&first.latency_us.p99), "{first:?}");
        assert!((99.0..=101.0).contains(&first.latency_us.min), "{first:?}");
        assert_eq!((m.intervals[1].t_s, m.intervals[1].requests_ok), (2.0, 0));
        assert_eq!(hist::decode(&m.histogram).unwrap().len(), 200);
        assert!(
            (899.0..=901.0).contains(&m.latency_us.p99),
            "{:?}",
            m.latency_us
        );
        assert!(
            (899.0..=901.0).contains(&m.latency_us.p50),
            "{:?}",
            m.latency_us
        );
        assert_eq!(m.extra["processes"], 2);
        assert_eq!(
            m.extra["max_rss_kib_per_process"],
            serde_json::json!([3000, 3000])
        );
    }
}
