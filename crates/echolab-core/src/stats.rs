//! The JSON contracts between echolab's binaries and its launcher (docs/architecture.md,
//! "Contracts"). Field names are part of the contract: the launcher and the report read them
//! back, so renaming one is a breaking change.
//!
//! - [`ServerStats`]: one JSON line printed by `echo-server` on SIGTERM/SIGINT and every
//!   `--stats-interval`.
//! - [`BenchReport`]: the document printed by `echo-bench --json`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::hist::LatencySummary;

/// How often a system call was made and, where the caller timed it, how long it took in total.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyscallStat {
    /// Number of calls.
    pub count: u64,
    /// Total time spent inside the call, nanoseconds (client side only; absent in ServerStats).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_ns: Option<u64>,
}

/// System calls by name (`"accept"`, `"read"`, `"write"`, `"close"`, `"connect"`,
/// `"epoll_wait"`, `"select"`, `"poll"`, `"io_uring_enter"`, ...).
pub type SyscallTable = BTreeMap<String, SyscallStat>;

/// Counts of things by kind, e.g. errors `{"emfile": 3, "econnreset": 1}`.
pub type KindCounts = BTreeMap<String, u64>;

/// The counters every echo-server model keeps, for the whole server and for each worker.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerCounters {
    /// Connections accepted.
    pub accepted: u64,
    /// Connections closed by the server (after EOF, error, or because they could not be watched).
    pub closed: u64,
    /// Payload bytes read from clients.
    pub bytes_in: u64,
    /// Payload bytes written to clients.
    pub bytes_out: u64,
    /// System calls made by the I/O path, by name, counts only.
    pub syscalls: SyscallTable,
    /// Readiness events (or completions) returned by the wait call, summed.
    pub events_returned: u64,
    /// Wait calls that returned no event (timeouts or spurious wake-ups).
    pub empty_wakeups: u64,
    /// Reads that returned EAGAIN/EWOULDBLOCK.
    pub eagain_read: u64,
    /// Writes that returned EAGAIN/EWOULDBLOCK.
    pub eagain_write: u64,
    /// io_uring operations submitted, by opcode (`"accept"`, `"recv"`, `"send"`, ...). These are
    /// not system calls (they are batched into `io_uring_enter`), so they are kept apart from
    /// `syscalls`. Empty for other models.
    #[serde(default, skip_serializing_if = "KindCounts::is_empty")]
    pub ops: KindCounts,
    /// Errors by kind, lower-case errno names (`"emfile"`, `"econnreset"`, `"epipe"`) or
    /// echolab's own (`"fd_over_setsize"`).
    pub errors: KindCounts,
}

/// Counters of one worker (thread, process or reactor) of a multi-worker model.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerStats {
    /// Worker index, 0-based.
    pub worker: u32,
    /// Process id of the worker (differs from the server's for `prefork`).
    pub pid: u32,
    /// That worker's counters.
    #[serde(flatten)]
    pub counters: ServerCounters,
}

/// One line of echo-server statistics.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerStats {
    /// I/O model name as given to `--model` (e.g. `"epoll-et"`).
    pub model: String,
    /// Process id of the server (the parent, for `prefork`).
    pub pid: u32,
    /// Seconds since the server started listening.
    pub uptime_s: f64,
    /// `true` on the line printed at shutdown, `false` on `--stats-interval` lines.
    #[serde(rename = "final")]
    pub is_final: bool,
    /// Totals over all workers.
    #[serde(flatten)]
    pub totals: ServerCounters,
    /// Per-worker counters; one entry for single-reactor models.
    pub workers: Vec<WorkerStats>,
    /// Worker processes the server started again after one died (`prefork`; 0 for the other
    /// models, whose workers are threads of one process). Absent in older records: 0.
    #[serde(default)]
    pub worker_restarts: u64,
    /// Whether accepted connections have TCP_NODELAY (Nagle's algorithm off, `--nodelay`).
    /// Absent in older records, whose servers never set it: `false`.
    #[serde(default)]
    pub nodelay: bool,
    /// Changes of the kernel's TCP counters in the server's network namespace since it
    /// started listening, by nstat name ([`crate::netstat`]); absent in older records.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub kernel_counters: crate::netstat::CounterDeltas,
}

/// CPU time a process used, from getrusage(2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuTime {
    /// User-mode CPU seconds.
    pub user_s: f64,
    /// Kernel-mode CPU seconds.
    pub sys_s: f64,
}

/// One interval of a timed run (`echo-bench sustain`, `--duration`), usually one second.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IntervalRecord {
    /// Seconds from the start of measurement to the end of this interval.
    pub t_s: f64,
    /// Requests completed in this interval.
    pub requests_ok: u64,
    /// Requests failed in this interval.
    pub requests_failed: u64,
    /// Requests per second over this interval.
    pub qps: f64,
    /// Payload bytes received per second over this interval.
    pub rx_bytes_per_s: f64,
    /// Latency percentiles of this interval, microseconds; `null` when no request completed
    /// in it.
    #[serde(default, deserialize_with = "crate::hist::de_optional_summary")]
    pub latency_us: Option<LatencySummary>,
}

/// [`BenchReport::load_model`] of a closed-loop run.
pub const LOAD_CLOSED: &str = "closed";
/// [`BenchReport::load_model`] of an open-loop run.
pub const LOAD_OPEN: &str = "open";

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The result of one `echo-bench` run, as printed by `--json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BenchReport {
    /// Always `"echo-bench"`.
    pub tool: String,
    /// echo-bench's version.
    pub version: String,
    /// The command line, argv[1..].
    pub args: Vec<String>,
    /// `"short"`, `"long"`, `"connect-storm"` or `"sustain"`.
    pub mode: String,
    /// `"event"` (epoll workers) or `"thread"` (one thread per connection).
    pub engine: String,
    /// `host:port` as given.
    pub target: String,
    /// Concurrent connections.
    pub conns: u64,
    /// Rounds per connection, when the run was bounded by count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rounds: Option<u64>,
    /// Request payload size in bytes.
    pub payload_bytes: u64,
    /// Reply size in bytes, when it differs from the payload (`sustain --reply-bytes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_bytes: Option<u64>,
    /// Open-loop target rate in requests/s (`--rate`); absent for closed loop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_rate: Option<f64>,
    /// RFC 3339 UTC time at which measurement began (after warm-up).
    pub started_at: String,
    /// Measured wall time, seconds (warm-up excluded).
    pub duration_s: f64,
    /// Requests that completed and echoed correctly.
    pub requests_ok: u64,
    /// Requests that failed (any kind).
    pub requests_failed: u64,
    /// Failures by kind: `"timeout"`, `"refused"`, `"reset"`, `"mismatch"` (bytes that differ
    /// from what was sent or from the reply body), `"foreign_echo"` (an echo that is another
    /// request's: another connection's, or an earlier one of the same connection, told by the
    /// stamp of [`crate::protocol`]), `"addr_not_avail"`, `"eof"`, or a lower-case errno name.
    pub failures: KindCounts,
    /// `requests_ok / duration_s`.
    pub qps: f64,
    /// Latency percentiles, microseconds (short: connect to close; long: send to receive);
    /// `null` when no request succeeded: a run that measured nothing has no latency, not 0 µs
    /// (an all-zero summary in an older record is read as `null` too).
    #[serde(default, deserialize_with = "crate::hist::de_optional_summary")]
    pub latency_us: Option<LatencySummary>,
    /// Latencies that fell outside the histogram's range (1 ns to one hour,
    /// [`crate::hist::MAX_TRACKABLE_NS`]) and were recorded at its nearest bound; absent when
    /// none did. Not 0 means the extreme percentiles are bounds, not measurements.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub latency_out_of_range: u64,
    /// The latency histogram, nanoseconds, compressed HdrHistogram V2 in base64 (uncompressed
    /// V2 in older records; see [`crate::hist`]).
    pub histogram: String,
    /// Client system calls with count and total time.
    pub syscalls: SyscallTable,
    /// Client CPU time during measurement.
    pub client_cpu: CpuTime,
    /// Per-interval records (timed runs and `sustain`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub intervals: Vec<IntervalRecord>,
    /// The load model: [`LOAD_CLOSED`] (the next request of a connection leaves when the
    /// previous reply is in) or [`LOAD_OPEN`] (requests leave on a schedule at `target_rate`);
    /// empty in records older than the field.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub load_model: String,
    /// Event-engine worker threads that ran (the thread engine: one per connection).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub threads: u64,
    /// Why that many threads: `"--threads N"`, or echo-bench's automatic rule with the CPU
    /// count it started from; absent in older records.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub threads_reason: String,
    /// Local addresses the connections were made from, connection i from address i mod N;
    /// empty when the kernel chose (one address, the route's). More than one changes what the
    /// server sees (several peers) and what the client's kernel does (a port space per
    /// address, so TIME_WAIT ports are not searched).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub source_addrs: Vec<String>,
    /// Why those source addresses (`--source-addrs` or its automatic rule); absent in older
    /// records.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source_addrs_reason: String,
    /// Short connections only: `"fresh"` (socket(2) ... close(2) per request) or `"reuse"`
    /// (each connection re-connects one socket after connect(2) with AF_UNSPEC, which sends
    /// the RST of an SO_LINGER 0 close: the same packets, less client work); absent for the
    /// other modes and in older records. echo-bench's `--short-sockets`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub short_sockets: String,
    /// Why `short_sockets` (the flag or its automatic rule); absent with it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub short_sockets_reason: String,
    /// The client's peak resident memory, KiB (getrusage(2) `ru_maxrss`, at the end of the
    /// run); with `--processes`, the sum of the processes' peaks. Absent in older records.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub max_rss_kib: u64,
    /// The CPUs the client could run on (sched_getaffinity(2)), as a cpuset list (`"1"`,
    /// `"0-3"`): what the launcher's CPU plan gave it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cpus: String,
    /// Changes of the kernel's TCP counters in the client's network namespace over the
    /// measurement window (end of warm-up to the end of the run), by nstat name
    /// ([`crate::netstat`]); absent in older records.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub kernel_counters: crate::netstat::CounterDeltas,
    /// The run was cut short by a signal (SIGINT, as Ctrl-C sends, or SIGTERM): the first one
    /// ends the measurement window early and echo-bench reports what it measured until then,
    /// as iperf3 and wrk print their partial results. `duration_s` and the rates are those of
    /// the shorter window. Absent (false) for a whole run and in older records.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
    /// The signal that cut the run short, `"SIGINT"` or `"SIGTERM"`; absent with
    /// `interrupted` false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted_by: Option<String>,
    /// Results of one mode or circumstance (connect-storm's time to establish, a shard's
    /// interval histograms, ...): in JSON the object `extra`, absent when nothing applies.
    #[serde(default, skip_serializing_if = "BenchExtra::is_empty")]
    pub extra: BenchExtra,
}

/// What a [`BenchReport`] carries beyond every mode's fields; each key is present in JSON only
/// when it applies. Keys a reader does not know (from a newer echo-bench) are ignored.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BenchExtra {
    /// connect-storm: seconds from the first connect(2) until all N connections were
    /// established (seed 004's "deadlink").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_to_establish_s: Option<f64>,
    /// connect-storm: connections established and proven by their echo.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub established: Option<u64>,
    /// connect-storm: connect latency percentiles, µs (connect(2) to writable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_latency_us: Option<LatencySummary>,
    /// sustain: length of one interval record, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_s: Option<f64>,
    /// Connections that failed to connect before the measurement began (long connections
    /// and sustain); absent when none did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup_connect_failures: Option<u64>,
    /// Requests completed during `--warmup` (discarded); absent without any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup_requests: Option<u64>,
    /// An interrupted run: the `--duration` that was asked for, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_duration_s: Option<f64>,
    /// The connection-tracking table was at least 90% full at the end of the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conntrack_nearly_full: Option<crate::netstat::ConntrackFill>,
    /// `--processes N`: the client processes whose reports were merged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes: Option<u64>,
    /// `--processes N`: each process's peak RSS, KiB, in shard order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rss_kib_per_process: Option<Vec<u64>>,
    /// A shard's per-interval histograms (base64 compressed HdrHistogram V2), for its parent
    /// to merge; never in a merged report ([`crate::shard`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard_interval_histograms: Option<Vec<String>>,
    /// A run over several client machines: the Docker engines that ran its clients.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_machines: Option<Vec<String>>,
}

impl BenchExtra {
    /// Nothing applies (the JSON leaves `extra` out).
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extra_is_typed_absent_when_empty_and_reads_keys_it_does_not_know() {
        let whole = serde_json::to_value(BenchReport::default()).unwrap();
        assert!(whole.get("extra").is_none(), "{whole}");
        let mut raw = whole;
        raw["extra"] = serde_json::json!({"time_to_establish_s": 0.25, "established": 50,
            "conntrack_nearly_full": {"entries": 9, "max": 10}, "from_a_newer_echo_bench": 1});
        let r: BenchReport = serde_json::from_value(raw).unwrap();
        assert_eq!(r.extra.time_to_establish_s, Some(0.25));
        assert_eq!(r.extra.established, Some(50));
        assert_eq!(
            r.extra.conntrack_nearly_full.map(|c| (c.entries, c.max)),
            Some((9, 10))
        );
        let again = serde_json::to_value(&r).unwrap();
        assert_eq!(again["extra"]["established"], 50);
        assert!(again["extra"].get("setup_connect_failures").is_none());
    }

    #[test]
    fn server_stats_json_has_the_contract_field_names() {
        let mut s = ServerStats {
            model: "epoll-et".into(),
            pid: 7,
            is_final: true,
            ..Default::default()
        };
        s.totals.accepted = 3;
        s.totals.syscalls.insert(
            "epoll_wait".into(),
            SyscallStat {
                count: 9,
                total_ns: None,
            },
        );
        s.workers.push(WorkerStats {
            worker: 0,
            pid: 7,
            counters: s.totals.clone(),
        });
        let v: serde_json::Value = serde_json::to_value(&s).unwrap();
        for key in [
            "model",
            "pid",
            "uptime_s",
            "final",
            "accepted",
            "closed",
            "bytes_in",
            "bytes_out",
            "syscalls",
            "events_returned",
            "empty_wakeups",
            "eagain_read",
            "eagain_write",
            "errors",
            "workers",
            "worker_restarts",
            "nodelay",
        ] {
            assert!(v.get(key).is_some(), "missing {key} in {v}");
        }
        assert_eq!(v["syscalls"]["epoll_wait"], serde_json::json!({"count": 9}));
        assert_eq!(v["workers"][0]["accepted"], 3);
        let back: ServerStats = serde_json::from_value(v).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn server_stats_without_the_newer_fields_still_parse() {
        // A final line as echo-server printed it before worker_restarts and nodelay existed.
        let old = r#"{"model":"prefork","pid":7,"uptime_s":1.5,"final":true,"accepted":2,"closed":2,"bytes_in":24,"bytes_out":24,"syscalls":{},"events_returned":4,"empty_wakeups":0,"eagain_read":0,"eagain_write":0,"errors":{},"workers":[]}"#;
        let s: ServerStats = serde_json::from_str(old).unwrap();
        assert_eq!(
            (s.worker_restarts, s.nodelay, s.totals.bytes_in),
            (0, false, 24)
        );
    }

    #[test]
    fn bench_report_round_trips() {
        let mut r = BenchReport {
            tool: "echo-bench".into(),
            mode: "long".into(),
            conns: 100,
            rounds: Some(10),
            ..Default::default()
        };
        r.syscalls.insert(
            "connect".into(),
            SyscallStat {
                count: 100,
                total_ns: Some(12345),
            },
        );
        let text = serde_json::to_string(&r).unwrap();
        assert!(
            text.contains("\"latency_us\":null"),
            "a run with no successful request has no latency: {text}"
        );
        assert!(
            !text.contains("intervals"),
            "empty intervals are omitted: {text}"
        );
        assert_eq!(serde_json::from_str::<BenchReport>(&text).unwrap(), r);
    }
}
