//! What a backend provides to the runner: a server host on which echo-server is started and
//! stopped, and a client host on which echo-bench runs, with the server host's CPU and memory
//! sampled meanwhile. The Docker backend ([`crate::docker`]) and the local backend
//! ([`crate::local`]) implement it; the launcher's per-run loop and its RTT calibration
//! (echolab-up's `runner` and `rtt_probe`) are written once against it.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use echolab_core::cmd::{BenchCmd, Ready, ServerLaunch};
use echolab_core::results::ResourceSample;

/// How long echo-server may take to print its readiness line: generous, since the machine may
/// have two cores shared with builds and other tests.
pub const READY_DEADLINE: Duration = Duration::from_secs(30);
/// How long echo-server may take to print its final stats and exit after SIGTERM.
pub const STOP_DEADLINE: Duration = Duration::from_secs(30);
/// Upper bound of one echo-bench run, beyond which it is killed and the run marked failed; far
/// above any seed cell (the longest, seed 004's sustain, is 60 s plus warm-up).
pub const BENCH_DEADLINE: Duration = Duration::from_secs(20 * 60);
/// Interval of the local backend's /proc samples; the Docker backend gets the engine's stats
/// stream, one sample per second.
pub const SAMPLE_INTERVAL: Duration = Duration::from_millis(500);

/// A finished process: exit code (None when killed by a signal) and its output.
#[derive(Debug, Clone, Default)]
pub struct ProcOutput {
    /// Exit status.
    pub exit_code: Option<i64>,
    /// Everything it wrote to stdout.
    pub stdout: String,
    /// Everything it wrote to stderr.
    pub stderr: String,
    /// For a server: it had exited before [`Hosts::stop_server`] asked it to (it died during
    /// the cell), so its output ends with why, not with final stats.
    pub exited_before_stop: bool,
}

impl ProcOutput {
    /// `"exit 2"`, `"exit 137 (signal 9)"` or `"killed by a signal"`.
    pub fn status_text(&self) -> String {
        // Docker reports a process killed by signal N as exit 128 + N, as shells do.
        match self.exit_code {
            None => "killed by a signal".to_string(),
            Some(c) if (129..=128 + 64).contains(&c) => format!("exit {c} (signal {})", c - 128),
            Some(c) => format!("exit {c}"),
        }
    }

    /// Why a server ended on its own: its `echo-server: fatal:` reason (core's
    /// [`echolab_core::cmd::Fatal`]) with the exit status, else [`ProcOutput::describe`].
    pub fn server_exit_reason(&self) -> String {
        match echolab_core::cmd::Fatal::last_in(&self.stderr) {
            Some(f) => format!("{} ({})", f.reason, self.status_text()),
            None => self.describe(),
        }
    }

    /// `"exit 2: <last stderr line>"`, for errors.
    pub fn describe(&self) -> String {
        let code = self.status_text();
        let last = self
            .stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("(no stderr)");
        format!("{code}: {last}")
    }
}

/// One backend's hosts, already up.
#[allow(async_fn_in_trait)]
pub trait Hosts {
    /// A running echo-server.
    type Server;
    /// One reading of the link's counters ([`Hosts::link_snapshot`]); uninhabited where there
    /// is no link to read.
    type LinkReading;

    /// Replaces the client and server hosts with fresh ones (new network namespaces), so that
    /// a cell starts with no TIME_WAIT sockets, connection state or cached route metrics of
    /// an earlier one. Returns `false` when the backend cannot (local processes share this
    /// machine's namespace).
    ///
    /// # Errors
    /// A host could not be removed or made again.
    async fn fresh_hosts(&mut self) -> anyhow::Result<bool>;

    /// The link's counters now (the userspace wire's, or kernel netem's qdiscs'), or `None`
    /// where there is no link to read (loopback, local processes).
    async fn link_snapshot(&mut self) -> Option<anyhow::Result<Self::LinkReading>> {
        None
    }

    /// What the link carried and dropped from reading `before` to `after`.
    ///
    /// # Errors
    /// The readings cannot be compared (another backend, counters that went down).
    fn link_counters(
        before: &Self::LinkReading,
        after: &Self::LinkReading,
    ) -> anyhow::Result<echolab_core::results::LinkCounters>;

    /// The address echo-server binds: 127.0.0.1 for loopback, 0.0.0.0 behind a link.
    fn server_bind(&self) -> IpAddr;

    /// The address the client uses to reach a server that announced `ready`.
    fn target(&self, ready: &Ready) -> SocketAddr;

    /// Starts the server (echo-server, or a custom server under `echolab-up __serve`) with
    /// `cmd` on the server host and returns once it printed its readiness line (within
    /// [`READY_DEADLINE`]).
    ///
    /// # Errors
    /// It could not start, exited first (with its stderr), or was not ready in time.
    async fn start_server(&mut self, cmd: &ServerLaunch) -> anyhow::Result<(Self::Server, Ready)>;

    /// Runs echo-bench with `cmd` on the client host to completion (at most [`BENCH_DEADLINE`]),
    /// sampling `server`'s host meanwhile, and returns the samples of the measurement window,
    /// which opens `window_start` (the warm-up) after the client starts
    /// ([`sample_schedule`], [`window_samples`]).
    ///
    /// # Errors
    /// It could not be started or did not finish in time; a non-zero exit is not an error
    /// here (the caller reads [`ProcOutput`]).
    async fn run_bench(
        &mut self,
        cmd: &BenchCmd,
        server: &Self::Server,
        window_start: Duration,
    ) -> anyhow::Result<(ProcOutput, Vec<ResourceSample>)>;

    /// Runs echo-bench with `cmd` on the client host under the seed's
    /// `strace -f -c -e trace=connect,close` (seed 002's cross-check), to completion; the
    /// summary is on the output's stderr.
    ///
    /// # Errors
    /// It could not be started or did not finish in time.
    async fn trace_bench(&mut self, cmd: &BenchCmd) -> anyhow::Result<ProcOutput>;

    /// Sends SIGTERM to `server` and collects its output once it exited (within
    /// [`STOP_DEADLINE`], else it is killed). A server that had already exited is collected
    /// without a signal and marked [`ProcOutput::exited_before_stop`].
    ///
    /// # Errors
    /// The signal could not be delivered, or it did not exit in time.
    async fn stop_server(&mut self, server: Self::Server) -> anyhow::Result<ProcOutput>;
}

/// [`Hosts::link_counters`] of a backend that has no link to read (its `LinkReading` is
/// [`std::convert::Infallible`], so there is never a reading to compare).
pub fn no_link(
    before: &std::convert::Infallible,
) -> anyhow::Result<echolab_core::results::LinkCounters> {
    match *before {}
}

/// The seed 002 tracer command line, before the traced program (strace(1): `-f` follows the
/// client's threads, `-c` counts calls and their time).
pub const STRACE_ARGS: &[&str] = &["-f", "-c", "-e", "trace=connect,close"];

/// The sampling schedule of a client run whose measurement window opens `window_start` after
/// it starts: the first reading at the window's start, so that one sample covers the warm-up
/// alone, then one every [`SAMPLE_INTERVAL`].
pub fn sample_schedule(window_start: Duration) -> tokio::time::Interval {
    let first = if window_start.is_zero() {
        SAMPLE_INTERVAL
    } else {
        window_start
    };
    tokio::time::interval_at(tokio::time::Instant::now() + first, SAMPLE_INTERVAL)
}

/// The samples of the measurement window: those that end later than half an interval past
/// `window_start` (a sample is stamped when it ends; the warm-up's ends at `window_start`
/// plus the time of one reading) and, for a timed window of length `window`, begin before
/// its end. The schedule reads at the window's end; the last reading, taken when the client
/// has exited, covers its report and exit, when the server idles (on exp31's long cells a
/// sample of ~80 ms at 65–71% that took 2–3 points off a server at 95%: `echolab-up --out DIR`,
/// then `runs/epoll-et_long_c100_d1s_rep1.json`, `samples`).
pub fn window_samples(
    samples: Vec<ResourceSample>,
    window_start: Duration,
    window: Option<Duration>,
) -> Vec<ResourceSample> {
    let cut = if window_start.is_zero() {
        f64::NEG_INFINITY
    } else {
        (window_start + SAMPLE_INTERVAL / 2).as_secs_f64()
    };
    let end = window.map(|w| (window_start + w).as_secs_f64());
    let mut begins = 0.0;
    let mut kept = Vec::new();
    for s in samples {
        let start = std::mem::replace(&mut begins, s.t_s);
        if s.t_s > cut && end.is_none_or(|e| start < e) {
            kept.push(s);
        }
    }
    kept
}

/// CPU percent of one core between two readings of cumulative CPU time, as top(1) shows it.
pub fn cpu_percent(cpu_delta_s: f64, wall_delta_s: f64) -> f64 {
    if wall_delta_s <= 0.0 {
        0.0
    } else {
        100.0 * cpu_delta_s / wall_delta_s
    }
}

/// Total memory of this machine in bytes, from /proc/meminfo's MemTotal (proc(5)).
pub fn host_mem_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// Memory as percent of the host's total.
pub fn mem_percent(mem_bytes: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        100.0 * mem_bytes as f64 / total as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sample stamped `t_s` seconds after the sampler started.
    fn at(t_s: f64) -> ResourceSample {
        ResourceSample {
            t_s,
            ..Default::default()
        }
    }

    #[test]
    fn a_server_exit_is_told_by_its_fatal_line_or_its_last_words() {
        let out = |code, stderr: &str| ProcOutput {
            exit_code: code,
            stderr: stderr.into(),
            ..Default::default()
        };
        assert_eq!(
            out(Some(1), "listening\necho-server: fatal: accept: EMFILE\n").server_exit_reason(),
            "accept: EMFILE (exit 1)"
        );
        assert_eq!(
            out(Some(137), "listening\n").server_exit_reason(),
            "exit 137 (signal 9): listening"
        );
        assert_eq!(
            out(None, "").server_exit_reason(),
            "killed by a signal: (no stderr)"
        );
        assert_eq!(out(Some(128), "").status_text(), "exit 128");
        assert_eq!(out(Some(193), "").status_text(), "exit 193");
    }

    #[test]
    fn warmup_samples_are_dropped() {
        let samples = vec![at(1.002), at(1.503), at(2.004), at(2.1)];
        let kept: Vec<f64> = window_samples(samples.clone(), Duration::from_secs(1), None)
            .iter()
            .map(|s| s.t_s)
            .collect();
        assert_eq!(kept, [1.503, 2.004, 2.1]);
        assert_eq!(window_samples(samples, Duration::ZERO, None).len(), 4);
    }

    /// A 1 s window after a 0.5 s warm-up ends at 1.5 s: the sample that begins at the
    /// reading stamped 1.502 (the client's report and exit) is not the window's; a window
    /// shorter than the interval keeps its one sample, which begins inside it.
    #[test]
    fn the_sample_after_the_windows_end_is_dropped() {
        let samples = vec![at(0.501), at(1.001), at(1.502), at(1.58)];
        let kept = |start: u64, window: u64| -> Vec<f64> {
            window_samples(
                samples.clone(),
                Duration::from_millis(start),
                Some(Duration::from_millis(window)),
            )
            .iter()
            .map(|s| s.t_s)
            .collect()
        };
        assert_eq!(kept(500, 1000), [1.001, 1.502]);
        assert_eq!(kept(0, 1500), [0.501, 1.001, 1.502]);
        let short = vec![at(0.101), at(0.45)];
        let one = window_samples(
            short,
            Duration::from_millis(100),
            Some(Duration::from_millis(300)),
        );
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].t_s, 0.45);
    }
}
