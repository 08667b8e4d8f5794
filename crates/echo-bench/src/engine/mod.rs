//! The two load engines and what they share: the resolved workload ([`Plan`]), the open-loop
//! schedule ([`Pacer`]), the measurement window and the merged result ([`RunOutcome`]).
//!
//! - [`event`]: `--threads` epoll workers multiplexing all connections (the default).
//! - [`thread`]: one blocking OS thread per connection, like seed 000's echo-kp-bench, kept
//!   for comparison.
//! - [`uring`]: `--threads` io_uring workers, long connections only.

pub(crate) mod conn;
pub(crate) mod event;
pub(crate) mod request;
pub(crate) mod thread;
pub(crate) mod uring;
pub(crate) mod window;

use std::time::{Duration, Instant};

use echolab_core::stats::CpuTime;
use hdrhistogram::Histogram;
use socket2::SockAddr;

use crate::recorder::{Recorder, Window};
use crate::syscalls::{SocketOptions, SyscallCounters};

pub(crate) use crate::pattern::Pattern;

/// When a run stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// Each connection completes this many requests (ok or failed), counted after warm-up.
    Rounds(u64),
    /// Measure for this long after warm-up; requests still in flight at the end are dropped.
    Duration(Duration),
}

/// Everything an engine needs to run, resolved from the command line.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// Server address.
    pub addr: SockAddr,
    /// Connection usage.
    pub pattern: Pattern,
    /// Concurrent connections of this process.
    pub conns: usize,
    /// This process's connections are numbered `first_id..first_id + conns` among
    /// `conns_total` (with `--processes`, each process runs a contiguous share; alone, `0`
    /// and `conns`). The numbers choose the open-loop slot and the source address, so the
    /// processes together make the schedule and spread one process would.
    pub first_id: usize,
    /// Connections of the whole run, over every process.
    pub conns_total: usize,
    /// Called by the coordinating thread once every worker is ready (connected, in long
    /// mode) and before the start gate opens: a `--processes` shard tells its parent and
    /// waits for the word to start. `None` alone.
    pub start_signal: Option<fn()>,
    /// Stop condition.
    pub stop: Stop,
    /// Warm-up before measurement (same load, results discarded).
    pub warmup: Duration,
    /// Open-loop total rate in requests/s; `None` for closed loop.
    pub rate: Option<f64>,
    /// Bytes of one request, unstamped: each connection sends its own stamped copy
    /// ([`request::Request`]).
    pub request: Vec<u8>,
    /// What one request must get back.
    pub reply: Reply,
    /// Per-operation deadline (connect; send plus receive).
    pub timeout: Duration,
    /// Socket options.
    pub sock: SocketOptions,
    /// Event-engine worker threads (ignored by the thread engine).
    pub threads: usize,
    /// Why `threads` (the `--threads` flag or the automatic rule), for the report.
    pub threads_reason: String,
    /// Source addresses, connection i using `sources.addrs[i % len]` (empty: the kernel's).
    pub sources: crate::sources::Sources,
    /// Whether short connections re-connect their socket ([`crate::short_sockets`]).
    pub socket_reuse: crate::short_sockets::SocketReuse,
    /// Per-interval records every this long (`None`: none).
    pub interval: Option<Duration>,
}

/// What a request must get back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply {
    /// The request itself, as its connection stamped it (echo mode).
    Echo,
    /// These bytes, whatever the request (`echo-server --reply-bytes N`).
    Fixed(Vec<u8>),
}

impl Plan {
    /// Bytes of one reply.
    pub(crate) fn reply_len(&self) -> usize {
        match &self.reply {
            Reply::Echo => self.request.len(),
            Reply::Fixed(bytes) => bytes.len(),
        }
    }

    /// The measurement window for a run whose start gate opened at `opened`.
    pub(crate) fn window(&self, opened: Instant) -> Window {
        let start = opened + self.warmup;
        let end = match self.stop {
            Stop::Duration(d) => Some(start + d),
            Stop::Rounds(_) => None,
        };
        Window {
            start,
            planned_end: end,
            interval: self.interval,
            interruptible: self.pattern != Pattern::Storm,
        }
    }

    /// The open-loop schedule of connection `conn_id`, or `None` for closed loop.
    pub(crate) fn pacer(&self, conn_id: usize, opened: Instant) -> Option<Pacer> {
        self.rate
            .map(|rate| Pacer::new(opened, conn_id, self.conns_total, rate))
    }

    /// The source address of connection `conn_id`, `None` for the kernel's choice.
    pub(crate) fn source_for(&self, conn_id: usize) -> Option<std::net::IpAddr> {
        let addrs = &self.sources.addrs;
        (!addrs.is_empty()).then(|| addrs[conn_id % addrs.len()])
    }

    /// Rounds still to do for a fresh connection (`u64::MAX` for a timed run).
    pub(crate) fn rounds(&self) -> u64 {
        match self.stop {
            Stop::Rounds(n) => n,
            Stop::Duration(_) => u64::MAX,
        }
    }
}

/// The open-loop schedule of one connection.
///
/// The total rate R is split evenly: connection i of N sends its j-th request at
/// `start + (i + j·N) / R`, so the N connections interleave into one evenly spaced stream.
/// A request that could not be sent on time (the previous reply was late) is sent at once,
/// and its latency is still measured from its intended time: this is the coordinated-omission
/// correction of wrk2 (Gil Tene, "How NOT to Measure Latency", 2015).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pacer {
    next: Instant,
    period: Duration,
}

impl Pacer {
    /// How far ahead a slot may lie: ten times [`echolab_core::limits::MAX_RUN`], past the end
    /// of any window (warm-up, run and the last request's deadline). A slot beyond it could
    /// never be sent, so clamping it there changes no run, and keeps every `Duration` and
    /// `Instant` the schedule computes in range whatever the rate (a rate near zero puts the
    /// next slot centuries away, past what `Duration::from_secs_f64` and `Instant` hold).
    const HORIZON_S: f64 = 10.0 * echolab_core::limits::MAX_RUN.as_secs() as f64;

    /// The schedule of connection `conn_id` of `conns` at `rate` requests/s in total.
    pub(crate) fn new(start: Instant, conn_id: usize, conns: usize, rate: f64) -> Self {
        Self {
            next: Self::after(start, conn_id as f64 / rate),
            // At least 1 ns: a zero period would hand out one slot forever to the engines'
            // loops that take every slot before the window's end.
            period: Self::within_horizon(conns as f64 / rate).max(Duration::from_nanos(1)),
        }
    }

    /// `secs` (NaN, infinite or beyond the horizon included) as a duration within it.
    fn within_horizon(secs: f64) -> Duration {
        // NaN.clamp gives NaN, which max(0.0) turns into 0.
        Duration::from_secs_f64(secs.clamp(0.0, Self::HORIZON_S).max(0.0))
    }

    /// `start` plus `secs` clamped to the horizon, or `start` itself when the clock cannot
    /// hold even that.
    fn after(start: Instant, secs: f64) -> Instant {
        start
            .checked_add(Self::within_horizon(secs))
            .unwrap_or(start)
    }

    /// Intended send time of the next request.
    pub(crate) fn due(&self) -> Instant {
        self.next
    }

    /// Consumes the next slot; returns its intended send time. Past the clock's range the
    /// slot stays put rather than overflow.
    pub(crate) fn take(&mut self) -> Instant {
        let t = self.next;
        self.next = t.checked_add(self.period).unwrap_or(t);
        t
    }
}

/// The merged result of one run.
#[derive(Debug)]
pub(crate) struct RunOutcome {
    /// All workers' measurements.
    pub recorder: Recorder,
    /// Connect latencies (connect(2) until writable), nanoseconds; filled by the storm.
    pub connect_hist: Histogram<u64>,
    /// System calls of the I/O path (warm-up excluded when there was one).
    pub syscalls: SyscallCounters,
    /// Start of measurement (end of warm-up).
    pub measure_start: Instant,
    /// Wall-clock time at `measure_start`, RFC 3339.
    pub started_at: String,
    /// The instant the start gate opened (all connections began).
    pub gate_opened: Instant,
    /// Client CPU time (getrusage(2), whole process): from before the workers start (so a
    /// long-mode run includes its connects, like its syscall counts) or, with a warm-up, from
    /// the end of warm-up.
    pub cpu: CpuTime,
    /// Long mode: connections that failed to connect before the barrier (retried in the run).
    pub setup_failures: u64,
    /// Connections established by the storm (a proven echo each).
    pub established: u64,
    /// The kernel's TCP counters of the client's namespace at the start of measurement (end
    /// of warm-up, or the gate with none).
    pub counters_at_start: echolab_core::netstat::CounterSnapshot,
    /// Worker threads that ran.
    pub threads: u64,
}

impl RunOutcome {
    /// An outcome with nothing recorded yet, for a run whose gate opened at `opened`.
    pub(crate) fn empty(plan: &Plan, start: StartInfo, cpu: CpuTime, threads: u64) -> Self {
        let StartInfo {
            opened,
            started_at,
            counters,
        } = start;
        let window = plan.window(opened);
        Self {
            recorder: Recorder::new(window),
            connect_hist: echolab_core::hist::new_latency_histogram(),
            syscalls: SyscallCounters::default(),
            measure_start: window.start,
            started_at,
            gate_opened: opened,
            cpu,
            setup_failures: 0,
            established: 0,
            counters_at_start: counters,
            threads,
        }
    }

    /// Measured wall time: the window of a timed run, else start to last completion; a
    /// window cut short by SIGINT/SIGTERM ends at the signal, so that rates are per second of
    /// what was measured, not of what was asked.
    pub(crate) fn measured(&self, plan: &Plan) -> Duration {
        let window = plan
            .window(self.gate_opened)
            .end()
            .map(|end| end.saturating_duration_since(self.measure_start));
        match plan.stop {
            Stop::Duration(d) => window.unwrap_or(d),
            Stop::Rounds(_) => {
                let ran = self.recorder.last_completion.map_or(Duration::ZERO, |l| {
                    l.saturating_duration_since(self.measure_start)
                });
                window.map_or(ran, |w| w.min(ran))
            }
        }
    }
}

/// Process CPU time so far (getrusage(2), RUSAGE_SELF).
pub(crate) fn process_cpu() -> CpuTime {
    use nix::sys::resource::{getrusage, UsageWho};
    match getrusage(UsageWho::RUSAGE_SELF) {
        Ok(u) => {
            let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
            CpuTime {
                user_s: secs(u.user_time()),
                sys_s: secs(u.system_time()),
            }
        }
        Err(_) => CpuTime::default(),
    }
}

/// CPU time used between two [`process_cpu`] snapshots.
pub(crate) fn cpu_between(before: CpuTime, after: CpuTime) -> CpuTime {
    CpuTime {
        user_s: (after.user_s - before.user_s).max(0.0),
        sys_s: (after.sys_s - before.sys_s).max(0.0),
    }
}

/// Measures client CPU over the window: from now (no warm-up) or from the end of warm-up.
/// Called by the engine's coordinating thread once the start gate has opened.
pub(crate) struct CpuMeter {
    baseline: CpuTime,
}

impl CpuMeter {
    /// Starts metering now.
    pub(crate) fn start() -> Self {
        Self {
            baseline: process_cpu(),
        }
    }

    /// Restarts metering at `at` (the end of warm-up), sleeping until then; a schedule, not a
    /// readiness wait. A SIGINT/SIGTERM during warm-up ends the sleep within 100 ms, so that
    /// the run it cut short does not wait out the warm-up.
    pub(crate) fn restart_at(&mut self, at: Instant) {
        const SLICE: Duration = Duration::from_millis(100);
        loop {
            let now = Instant::now();
            if at <= now || crate::interrupt::cut_at().is_some() {
                break;
            }
            std::thread::sleep((at - now).min(SLICE));
        }
        self.baseline = process_cpu();
    }

    /// CPU used since the baseline.
    pub(crate) fn stop(&self) -> CpuTime {
        cpu_between(self.baseline, process_cpu())
    }
}

/// What the coordinating thread saw at the start of measurement.
pub(crate) struct StartInfo {
    /// The instant the start gate opened.
    pub(crate) opened: Instant,
    /// Wall-clock time at which measurement began, RFC 3339.
    pub(crate) started_at: String,
    /// The namespace's TCP counters then.
    pub(crate) counters: echolab_core::netstat::CounterSnapshot,
}

/// The coordinating thread's part of the start: passes the gate with the workers, then
/// restarts the CPU meter and reads the kernel's counters at the end of warm-up, so that both
/// cover the measurement window.
pub(crate) fn await_start(
    plan: &Plan,
    gate: &crate::gate::StartGate,
    cpu: &mut CpuMeter,
) -> StartInfo {
    if let Some(signal) = plan.start_signal {
        gate.await_others();
        signal();
    }
    let opened = gate.ticket().wait();
    if !plan.warmup.is_zero() {
        cpu.restart_at(opened + plan.warmup);
    }
    StartInfo {
        opened,
        started_at: echolab_core::utc_now_rfc3339(),
        counters: echolab_core::netstat::read(),
    }
}

/// Runs `plan` on the event engine or the thread engine.
///
/// # Errors
/// Only for failures of the client itself (cannot create an epoll instance or a thread);
/// everything that goes wrong with a connection is counted as a failure instead.
pub(crate) fn run(plan: &Plan, engine: EngineKind) -> std::io::Result<RunOutcome> {
    match engine {
        EngineKind::Event => event::run(plan),
        EngineKind::Thread => thread::run(plan),
        EngineKind::Uring => uring::run(plan),
    }
}

/// Which engine drives the connections: core's definition, shared with experiment files and
/// the launcher.
pub(crate) use echolab_core::cmd::BenchEngine as EngineKind;

/// A long-connection, closed-loop plan for tests with what the window and the connection
/// machine read: stop, warm-up, `--timeout`, threads, connections; an empty request, echoed.
#[cfg(test)]
pub(crate) fn test_plan(
    stop: Stop,
    warmup: Duration,
    timeout: Duration,
    threads: usize,
    conns: usize,
) -> Plan {
    Plan {
        addr: socket2::SockAddr::from(std::net::SocketAddr::from(([127, 0, 0, 1], 9))),
        pattern: Pattern::Long,
        conns,
        first_id: 0,
        conns_total: conns,
        start_signal: None,
        stop,
        warmup,
        rate: None,
        request: vec![],
        reply: Reply::Echo,
        timeout,
        sock: SocketOptions {
            nodelay: true,
            linger0: false,
            blocking_timeout: None,
            source: None,
        },
        threads,
        threads_reason: String::new(),
        sources: crate::sources::Sources {
            addrs: vec![],
            reason: String::new(),
        },
        socket_reuse: Default::default(),
        interval: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pacer_interleaves_connections_into_one_even_stream() {
        let t0 = Instant::now();
        let mut a = Pacer::new(t0, 0, 2, 1000.0);
        let mut b = Pacer::new(t0, 1, 2, 1000.0);
        assert_eq!(a.take(), t0);
        assert_eq!(b.take(), t0 + Duration::from_millis(1));
        assert_eq!(a.take(), t0 + Duration::from_millis(2));
        assert_eq!(b.due(), t0 + Duration::from_millis(3));
    }

    #[test]
    fn pacer_at_degenerate_rates_stays_on_the_clock() {
        let t0 = Instant::now();
        let horizon = Duration::from_secs_f64(Pacer::HORIZON_S);
        let slowest = echolab_core::limits::MIN_RATE;
        // The slowest rate --rate takes, over the most connections: each connection's slots
        // are ~2,700 years apart, clamped to the horizon.
        let mut p = Pacer::new(t0, 999_999, 1_000_000, slowest);
        assert_eq!(p.take(), t0 + horizon);
        assert_eq!(p.due(), t0 + horizon * 2);
        // Rates no flag admits, which Pacer is still safe with.
        for rate in [
            1e-300,
            0.0,
            -1.0,
            f64::NAN,
            f64::INFINITY,
            f64::MIN_POSITIVE,
        ] {
            let mut p = Pacer::new(t0, 3, 10, rate);
            let first = p.take();
            assert!(first >= t0 && first <= t0 + horizon, "{rate}");
            assert!(p.due() >= first, "{rate}");
        }
    }
}
