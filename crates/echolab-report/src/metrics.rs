//! The metric names that tables, `reference.figures` and `reference.claims` use, and how each
//! is computed from one run record. This is the only place a metric is defined.
//!
//! | name | unit | computed from one run |
//! |---|---|---|
//! | `qps` | requests/s | `bench.qps` (= `requests_ok / duration_s`) |
//! | `p50_us`, `p90_us`, `p99_us` | µs | `bench.latency_us.p50` / `.p90` / `.p99` |
//! | `mean_us` | µs | `bench.latency_us.mean` |
//! | `failures` | requests | `bench.requests_failed` |
//! | `connect_s` | s | `bench.extra.time_to_establish_s` (connect-storm: time until all N connections were established, seed 004 "deadlink") |
//! | `cpu_pct` | % of one core | mean of `samples[].cpu_pct` (server host, as top(1)) |
//! | `mem_pct` | % of host memory | mean of `samples[].mem_pct` |
//! | `mem_mib` | MiB | mean of `samples[].mem_bytes` / 2²⁰ (server host) |
//! | `syscall.<name>.count` | calls | `bench.syscalls[name].count` (client) |
//! | `syscall.<name>.total_s` | s | `bench.syscalls[name].total_ns / 1e9` (client) |
//! | `strace.<name>.count`, `strace.<name>.total_s` | calls, s | the `calls` and `seconds` columns of the client's `strace -f -c` summary (`strace` field; seed 002's cross-check) |
//! | `server_cpu_us_per_req`, `client_syscalls_per_req`, … | µs, calls per request | each side's costs per request and CPU over the window ([`crate::costs`], which tabulates them) |
//!
//! A metric is absent (`None`) for a run that failed (`error` set), has no bench report, or
//! lacks the input (e.g. no resource samples).

use echolab_core::experiment::{BenchMode, Cell};
use echolab_core::results::RunRecord;

/// Requests per second.
pub const QPS: &str = "qps";
/// Median latency, µs.
pub const P50_US: &str = "p50_us";
/// 90th percentile latency, µs.
pub const P90_US: &str = "p90_us";
/// 99th percentile latency, µs.
pub const P99_US: &str = "p99_us";
/// Mean latency, µs.
pub const MEAN_US: &str = "mean_us";
/// Failed requests.
pub const FAILURES: &str = "failures";
/// Connect-storm time to establish all connections, s.
pub const CONNECT_S: &str = "connect_s";
/// Server CPU, % of one core.
pub const CPU_PCT: &str = "cpu_pct";
/// Server memory, % of host memory.
pub const MEM_PCT: &str = "mem_pct";
/// Server memory, MiB (2²⁰ bytes).
pub const MEM_MIB: &str = "mem_mib";

/// The metric a cell's adaptive repetitions are judged on (see
/// [`crate::inference::repetition_status`]): what the seed's table of that mode is about —
/// [`QPS`] for short and long connections (seeds 000, 001, 003), [`CONNECT_S`] for a connect
/// storm (seed 004 table 2-1), [`CPU_PCT`] for sustained load (seed 004 table 2-2).
pub fn headline_metric(cell: &Cell) -> &'static str {
    match cell.mode {
        BenchMode::Short | BenchMode::Long => QPS,
        BenchMode::ConnectStorm => CONNECT_S,
        BenchMode::Sustain => CPU_PCT,
    }
}

/// The headline metric ([`headline_metric`]) of one run, `None` for a run that failed or
/// lacks it. This is the value the launcher passes to
/// [`crate::inference::repetition_status`] after each repetition.
pub fn headline_value(run: &RunRecord) -> Option<f64> {
    value(run, headline_metric(&run.cell))
}

/// `syscall.<name>.count`.
pub fn syscall_count(name: &str) -> String {
    format!("syscall.{name}.count")
}

/// `syscall.<name>.total_s`.
pub fn syscall_total_s(name: &str) -> String {
    format!("syscall.{name}.total_s")
}

/// Unit of `metric`, for table headers and axis labels ("" for counts).
pub fn unit(metric: &str) -> &'static str {
    if let Some(u) = crate::costs::unit(metric) {
        return u;
    }
    match metric {
        QPS => "req/s",
        P50_US | P90_US | P99_US | MEAN_US => "µs",
        CONNECT_S => "s",
        CPU_PCT => "% of a core",
        MEM_PCT => "% of memory",
        MEM_MIB => "MiB",
        m if m.ends_with(".total_s") => "s",
        m if m.ends_with(".count") => "calls",
        _ => "",
    }
}

/// Whether `metric` is a name this module defines.
pub fn is_known(metric: &str) -> bool {
    matches!(
        metric,
        QPS | P50_US
            | P90_US
            | P99_US
            | MEAN_US
            | FAILURES
            | CONNECT_S
            | CPU_PCT
            | MEM_PCT
            | MEM_MIB
    ) || crate::costs::ALL.contains(&metric)
        || parse_syscall(metric).is_some()
}

/// `strace.<name>.count`.
pub fn strace_count(name: &str) -> String {
    format!("strace.{name}.count")
}

/// `strace.<name>.total_s`.
pub fn strace_total_s(name: &str) -> String {
    format!("strace.{name}.total_s")
}

/// Where a per-syscall metric comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SyscallSource {
    /// `bench.syscalls`, echo-bench's own accounting.
    Bench,
    /// The `strace -c` summary.
    Strace,
}

/// `syscall.<name>.<field>` or `strace.<name>.<field>` → `(source, name, field)` for field
/// `count` or `total_s`.
fn parse_syscall(metric: &str) -> Option<(SyscallSource, &str, &str)> {
    let (source, rest) = if let Some(rest) = metric.strip_prefix("syscall.") {
        (SyscallSource::Bench, rest)
    } else {
        (SyscallSource::Strace, metric.strip_prefix("strace.")?)
    };
    let (name, field) = rest.rsplit_once('.')?;
    (!name.is_empty() && matches!(field, "count" | "total_s")).then_some((source, name, field))
}

/// One row of an `strace -c` summary table.
#[derive(Debug, Clone, PartialEq)]
pub struct StraceRow {
    /// System call name.
    pub name: String,
    /// The `seconds` column: total time in the call.
    pub seconds: f64,
    /// The `calls` column.
    pub calls: u64,
}

/// The rows of an `strace -c` summary (strace(1), `-c`: columns `% time, seconds, usecs/call,
/// calls, errors, syscall`, `errors` empty when none), without the `total` row. Lines that
/// are not such rows (headers, rules, attach messages) are skipped.
pub fn parse_strace_summary(text: &str) -> Vec<StraceRow> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if !(5..=6).contains(&f.len()) {
                return None;
            }
            f[0].parse::<f64>().ok()?;
            let seconds = f[1].parse::<f64>().ok()?;
            let calls = f[3].parse::<u64>().ok()?;
            let name = *f.last()?;
            (name != "total").then(|| StraceRow {
                name: name.to_string(),
                seconds,
                calls,
            })
        })
        .collect()
}

/// System call names a run accounts for: echo-bench's, then strace's not already listed.
pub fn syscall_names(run: &RunRecord) -> Vec<String> {
    let mut names: Vec<String> = run
        .bench
        .iter()
        .flat_map(|b| b.syscalls.keys().cloned())
        .collect();
    for row in run
        .strace
        .as_deref()
        .map(parse_strace_summary)
        .unwrap_or_default()
    {
        if !names.contains(&row.name) {
            names.push(row.name);
        }
    }
    names
}

/// The value of `metric` in `run`, or `None` (see the module table).
pub fn value(run: &RunRecord, metric: &str) -> Option<f64> {
    if run.error.is_some() {
        return None;
    }
    let mean_of = |f: fn(&echolab_core::results::ResourceSample) -> f64| {
        (!run.samples.is_empty())
            .then(|| run.samples.iter().map(f).sum::<f64>() / run.samples.len() as f64)
    };
    match metric {
        CPU_PCT => return mean_of(|s| s.cpu_pct),
        MEM_PCT => return mean_of(|s| s.mem_pct),
        MEM_MIB => return mean_of(|s| s.mem_bytes as f64 / (1u64 << 20) as f64),
        m if crate::costs::ALL.contains(&m) => return crate::costs::value(run, m),
        _ => {}
    }
    let bench = run.bench.as_ref()?;
    match metric {
        QPS => Some(bench.qps),
        // No successful request, no latency: absent, never 0 µs.
        P50_US => bench.latency_us.map(|l| l.p50),
        P90_US => bench.latency_us.map(|l| l.p90),
        P99_US => bench.latency_us.map(|l| l.p99),
        MEAN_US => bench.latency_us.map(|l| l.mean),
        FAILURES => Some(bench.requests_failed as f64),
        CONNECT_S => bench.extra.time_to_establish_s,
        _ => {
            let (source, name, field) = parse_syscall(metric)?;
            match source {
                SyscallSource::Bench => {
                    let stat = bench.syscalls.get(name)?;
                    match field {
                        "count" => Some(stat.count as f64),
                        _ => stat.total_ns.map(|ns| ns as f64 / 1e9),
                    }
                }
                SyscallSource::Strace => {
                    let rows = parse_strace_summary(run.strace.as_deref()?);
                    let row = rows.iter().find(|r| r.name == name)?;
                    Some(if field == "count" {
                        row.calls as f64
                    } else {
                        row.seconds
                    })
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use echolab_core::results::ResourceSample;
    use echolab_core::stats::{BenchReport, SyscallStat};

    fn run() -> RunRecord {
        let mut bench = BenchReport {
            qps: 1234.5,
            requests_failed: 3,
            ..Default::default()
        };
        bench.latency_us = Some(echolab_core::hist::LatencySummary {
            p99: 900.0,
            ..Default::default()
        });
        bench.syscalls.insert(
            "close".into(),
            SyscallStat {
                count: 1004,
                total_ns: Some(1_469_822_000),
            },
        );
        bench.extra.time_to_establish_s = Some(0.25);
        RunRecord {
            cell: Cell {
                server: "select".into(),
                mode: BenchMode::Short,
                conns: 10,
                rounds: Some(1),
                duration: None,
                payload: 12,
                reply_bytes: None,
                rate: None,
                time_syscalls: false,
            },
            repetition: 1,
            started_at: String::new(),
            wall_s: 1.0,
            bench: Some(bench),
            server: None,
            server_pid: None,
            samples: vec![
                ResourceSample {
                    t_s: 1.0,
                    cpu_pct: 20.0,
                    mem_bytes: 3 << 20,
                    mem_pct: 0.3,
                    ..Default::default()
                },
                ResourceSample {
                    t_s: 2.0,
                    cpu_pct: 30.0,
                    mem_bytes: 4 << 20,
                    mem_pct: 0.5,
                    ..Default::default()
                },
            ],
            settle: None,
            link: None,
            strace: None,
            error: None,
        }
    }

    #[test]
    fn a_run_in_which_nothing_succeeded_has_no_latency() {
        // As echo-bench wrote such a run before it printed `null`: every figure 0.0 µs.
        let zeros = r#"{"min":0.0,"mean":0.0,"p50":0.0,"p90":0.0,"p99":0.0,"p999":0.0,"max":0.0}"#;
        for latency in [zeros, "null"] {
            let mut r = run();
            let mut json = serde_json::to_value(r.bench.take().unwrap()).unwrap();
            json["requests_ok"] = 0.into();
            json["latency_us"] = serde_json::from_str(latency).unwrap();
            r.bench = Some(serde_json::from_value(json).unwrap());
            for m in [P50_US, P90_US, P99_US, MEAN_US] {
                assert_eq!(value(&r, m), None, "{m} of {latency}");
            }
        }
    }

    #[test]
    fn every_metric_reads_its_field() {
        let r = run();
        assert_eq!(value(&r, QPS), Some(1234.5));
        assert_eq!(value(&r, P99_US), Some(900.0));
        assert_eq!(value(&r, FAILURES), Some(3.0));
        assert_eq!(value(&r, CONNECT_S), Some(0.25));
        assert_eq!(value(&r, CPU_PCT), Some(25.0));
        assert_eq!(value(&r, MEM_PCT), Some(0.4));
        assert_eq!(value(&r, MEM_MIB), Some(3.5));
        // A short cell's headline is QPS; a storm's its time; a sustain run's the server CPU.
        assert_eq!(headline_value(&r), Some(1234.5));
        let mut storm = r.clone();
        storm.cell.mode = BenchMode::ConnectStorm;
        assert_eq!(headline_value(&storm), Some(0.25));
        storm.cell.mode = BenchMode::Sustain;
        assert_eq!(headline_value(&storm), Some(25.0));
        assert_eq!(value(&r, "syscall.close.count"), Some(1004.0));
        assert_eq!(value(&r, "syscall.close.total_s"), Some(1.469822));
        assert_eq!(value(&r, "syscall.connect.count"), None);
        assert_eq!(value(&r, "bogus"), None);
        assert!(
            is_known("syscall.connect.total_s") && !is_known("syscall..count") && !is_known("qpx")
        );
    }

    /// The client summary of seed 002, short mode (s33-short.sum).
    const SEED_002_SHORT: &str = "strace: Process 4242 attached
% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 54.46    1.757608        1757      1000           connect
 45.54    1.469822        1463      1004         2 close
------ ----------- ----------- --------- --------- ----------------
100.00    3.227430                  2004         2 total
";

    #[test]
    fn strace_summaries_are_read_by_column() {
        let rows = parse_strace_summary(SEED_002_SHORT);
        assert_eq!(rows.len(), 2, "{rows:?}");
        assert_eq!(
            rows[0],
            StraceRow {
                name: "connect".into(),
                seconds: 1.757608,
                calls: 1000
            }
        );
        assert_eq!(
            rows[1],
            StraceRow {
                name: "close".into(),
                seconds: 1.469822,
                calls: 1004
            }
        );
        let mut r = run();
        r.strace = Some(SEED_002_SHORT.into());
        assert_eq!(value(&r, "strace.close.count"), Some(1004.0));
        assert_eq!(value(&r, "strace.connect.total_s"), Some(1.757608));
        assert_eq!(
            syscall_names(&r),
            vec!["close".to_string(), "connect".to_string()]
        );
    }

    #[test]
    fn a_failed_run_has_no_metrics() {
        let mut r = run();
        r.error = Some("server did not start".into());
        assert_eq!(value(&r, QPS), None);
        assert_eq!(value(&r, CPU_PCT), None);
    }
}
