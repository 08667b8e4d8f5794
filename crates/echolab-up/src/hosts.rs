//! What a backend provides to the runner: a server host on which echo-server is started and
//! stopped, and a client host on which echo-bench runs, with the server host's CPU and memory
//! sampled meanwhile. The Docker backend ([`crate::docker`]) and the local backend
//! ([`crate::local`]) implement it; the runner ([`crate::runner`]) and calibration
//! ([`crate::calibrate`]) are written once against it.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use echolab_core::cmd::{BenchCmd, Ready, ServerCmd};
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
}

impl ProcOutput {
    /// `"exit 2: <last stderr line>"`, for errors.
    pub fn describe(&self) -> String {
        let code = self
            .exit_code
            .map_or("killed by a signal".to_string(), |c| format!("exit {c}"));
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

    /// The address echo-server binds: 127.0.0.1 for loopback, 0.0.0.0 behind a link.
    fn server_bind(&self) -> IpAddr;

    /// The address the client uses to reach a server that announced `ready`.
    fn target(&self, ready: &Ready) -> SocketAddr;

    /// Starts echo-server with `cmd` on the server host and returns once it printed its
    /// readiness line (within [`READY_DEADLINE`]).
    ///
    /// # Errors
    /// It could not start, exited first (with its stderr), or was not ready in time.
    async fn start_server(&mut self, cmd: &ServerCmd) -> anyhow::Result<(Self::Server, Ready)>;

    /// Runs echo-bench with `cmd` on the client host to completion (at most [`BENCH_DEADLINE`]),
    /// sampling `server`'s host meanwhile.
    ///
    /// # Errors
    /// It could not be started or did not finish in time; a non-zero exit is not an error
    /// here (the caller reads [`ProcOutput`]).
    async fn run_bench(
        &mut self,
        cmd: &BenchCmd,
        server: &Self::Server,
    ) -> anyhow::Result<(ProcOutput, Vec<ResourceSample>)>;

    /// Sends SIGTERM to `server` and collects its output once it exited (within
    /// [`STOP_DEADLINE`], else it is killed).
    ///
    /// # Errors
    /// The signal could not be delivered, or it did not exit in time.
    async fn stop_server(&mut self, server: Self::Server) -> anyhow::Result<ProcOutput>;
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
