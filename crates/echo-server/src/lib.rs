//! `echo-server`: one TCP echo protocol, many I/O models, per-model syscall counters.
//! See `echo-server --help`, and `models` for how a model plugs in.
//!
//! A library with a thin binary, so that the launcher's tests can parse the command lines it
//! builds (`echolab_core::cmd::ServerCmd`) with this crate's own [`cli::Args`].

pub mod cli;
mod counters;
mod fatal;
mod listen;
mod models;
mod readiness;
mod reply;
mod serve;
mod signals;

use std::io::Write as _;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser as _;
use echolab_core::cli::EXIT_USAGE;
use echolab_core::cmd::{Ready, ServerModel};
use echolab_core::netstat::{self, CounterSnapshot};
use echolab_core::stats::ServerStats;

use crate::cli::Args;
use crate::counters::WorkerCounters;
use crate::serve::Running;
use crate::signals::{Meaning, Signals};

/// Prints one line and exits 2; clap's multi-line usage dump is folded into that line.
fn usage_error(msg: &str) -> ExitCode {
    eprintln!("echo-server: {msg}");
    ExitCode::from(EXIT_USAGE)
}

/// The whole program: parses the command line, serves until SIGTERM or SIGINT, prints the
/// final stats; the exit status is 0 (stopped by SIGTERM/SIGINT), 2 (bad input), 1 (an error
/// or a panic after start) or 128 + N (signal N), the last two after a `Fatal` line.
pub fn main() -> ExitCode {
    fatal::install();
    let args = match echolab_core::cli::parsed_or_exit("echo-server", Args::try_parse()) {
        Ok(a) => a,
        Err(code) => return ExitCode::from(code),
    };
    match run(args) {
        Ok(code) => code,
        Err(e) => {
            fatal::print(&format!("{e:#}"));
            ExitCode::from(fatal::STATUS as u8)
        }
    }
}

fn run(args: Args) -> anyhow::Result<ExitCode> {
    let model = args.model;
    let opts = &args.opts;
    let workers = match opts.workers {
        Some(n) if model.uses_workers() => usize::try_from(n).unwrap_or(usize::MAX),
        None if model.uses_workers() => std::thread::available_parallelism().map_or(1, |n| n.get()),
        _ => 1,
    };
    if opts.exclusive && model != ServerModel::Prefork {
        return Ok(usage_error("--exclusive applies to --model prefork only"));
    }
    if opts.time_syscalls {
        if !echolab_core::experiment::TIMED_MODELS.contains(&model) {
            let names: Vec<&str> = echolab_core::experiment::TIMED_MODELS
                .iter()
                .map(|m| m.name())
                .collect();
            return Ok(usage_error(&format!(
                "--time-syscalls applies to --model {} only, not {model}",
                names.join(", ")
            )));
        }
        counters::time_syscalls();
    }
    let inject = match fatal::inject() {
        Ok(i) => i,
        Err(msg) => return Ok(usage_error(&msg)),
    };
    let addr = SocketAddr::new(args.bind, args.port);
    let reuseport = model == ServerModel::Reuseport;
    // Checked before the bind too, so that every model (not only those whose bind would fail
    // with EADDRINUSE) names the reason the same way.
    if let Some(msg) = port_taken(addr, &[])? {
        return Ok(usage_error(&msg));
    }
    let listeners = match listen::listeners(
        addr,
        i32::try_from(opts.backlog).unwrap_or(i32::MAX),
        if reuseport { workers } else { 1 },
        reuseport,
        opts.nodelay,
    ) {
        Ok(l) => l,
        Err(e) => return Ok(usage_error(&format!("cannot listen on {addr}: {e}"))),
    };
    // And after: a server that started at the same moment bound beside ours (SO_REUSEPORT).
    if let Some(msg) = port_taken(addr, &listeners)? {
        return Ok(usage_error(&msg));
    }
    let bound = listeners[0].local_addr()?;
    let counters = counters::alloc_shared(workers)?;
    // Before any worker exists, so that every thread and child inherits the blocked mask.
    let mut signals = Signals::block()?;
    let report = Report {
        model,
        started: Instant::now(),
        counters,
        at_start: netstat::read(),
        nodelay: opts.nodelay,
    };
    let ctx = serve::ServeCtx {
        read_buf: usize::try_from(opts.read_buf.0).unwrap_or(usize::MAX),
        reply_bytes: args.reply_bytes,
        workers,
        exclusive: opts.exclusive,
        listeners,
        counters,
    };
    let mut running = models::start(model, ctx)?;
    let ready = Ready {
        addr: bound,
        model: model.name().to_string(),
        workers,
        pid: std::process::id(),
    };
    eprintln!("{ready}");
    let every = args.stats_interval.filter(|d| !d.is_zero());
    let ended = match inject {
        Some(fatal::Inject::Panic) => {
            let _ = std::thread::Builder::new()
                .name("fault-injection".into())
                .spawn(|| panic!("injected by ECHO_SERVER_FAULT=panic"));
            serve_until_signal(&mut signals, &mut running, &report, every)
        }
        Some(fatal::Inject::Error) => Err(Ended::Error(anyhow::anyhow!(
            "injected by ECHO_SERVER_FAULT=error"
        ))),
        None => serve_until_signal(&mut signals, &mut running, &report, every),
    };
    if let Some(children) = running.children.as_mut() {
        children.stop();
    }
    match ended {
        Ok(()) => {
            report.print(true, &running);
            Ok(ExitCode::SUCCESS)
        }
        Err(Ended::Signal(sig)) => {
            fatal::print(&format!("ended by signal {}", sig.as_str()));
            Ok(ExitCode::from(128 + sig as u8))
        }
        Err(Ended::Error(e)) => Err(e),
    }
}

/// The usage error for a port another process listens on ([`listen::foreign_listener`]), if
/// one does; `ours` are the server's own listeners.
fn port_taken(addr: SocketAddr, ours: &[std::net::TcpListener]) -> anyhow::Result<Option<String>> {
    let found = listen::foreign_listener(addr, ours)
        .map_err(|e| anyhow::anyhow!("cannot check who listens on {addr}: {e}"))?;
    Ok(found.map(|other| {
        format!(
            "cannot listen on {addr}: another process already listens on {other} (address in \
             use); a port is one server's, even with SO_REUSEPORT"
        )
    }))
}

/// Why the server stops other than by SIGTERM/SIGINT.
enum Ended {
    /// A signal whose default action ends the process.
    Signal(nix::sys::signal::Signal),
    /// Waiting for signals failed, or a worker process could not be replaced.
    Error(anyhow::Error),
}

/// The main thread once the model runs: waits for signals, prints a stats line every `every`
/// (a whole interval after the previous line, so lines are never closer than that), replaces
/// worker processes that die. Returns `Ok` on SIGTERM or SIGINT.
fn serve_until_signal(
    signals: &mut Signals,
    running: &mut Running,
    report: &Report,
    every: Option<Duration>,
) -> Result<(), Ended> {
    let mut next_line = every.map(|d| Instant::now() + d);
    loop {
        let timeout = next_line.map(|t| t.saturating_duration_since(Instant::now()));
        let got = signals
            .wait(timeout)
            .map_err(|e| Ended::Error(anyhow::anyhow!("waiting for signals: {e}")))?;
        for sig in got {
            match signals::meaning(sig) {
                Meaning::Stop => return Ok(()),
                Meaning::Fatal => return Err(Ended::Signal(sig)),
                Meaning::Child => {
                    if let Some(children) = running.children.as_mut() {
                        children
                            .reap_and_replace()
                            .map_err(|reason| Ended::Error(anyhow::anyhow!(reason)))?;
                    }
                }
            }
        }
        if let (Some(t), Some(d)) = (next_line, every) {
            if Instant::now() >= t {
                report.print(false, running);
                next_line = Some(Instant::now() + d);
            }
        }
    }
}

/// What a stats line is made of besides the live counters.
struct Report {
    model: ServerModel,
    started: Instant,
    counters: &'static [WorkerCounters],
    /// The kernel's TCP counters when the server started listening.
    at_start: CounterSnapshot,
    nodelay: bool,
}

impl Report {
    /// Prints one ServerStats line on stdout (`is_final` on the last one).
    fn print(&self, is_final: bool, running: &Running) {
        let (totals, workers) = counters::merge(self.counters, models::listed_syscalls(self.model));
        let line = ServerStats {
            model: self.model.name().to_string(),
            pid: std::process::id(),
            uptime_s: self.started.elapsed().as_secs_f64(),
            is_final,
            totals,
            workers,
            worker_restarts: running.children.as_ref().map_or(0, |c| c.restarts()),
            nodelay: self.nodelay,
            kernel_counters: netstat::deltas(&self.at_start, &netstat::read()),
        };
        let mut out = std::io::stdout().lock();
        let _ = serde_json::to_writer(&mut out, &line);
        let _ = out.write_all(b"\n");
        let _ = out.flush();
    }
}
