//! `echo-server`: one TCP echo protocol, many I/O models, per-model syscall counters.
//! See `echo-server --help`, and `models` for how a model plugs in.
//!
//! A library with a thin binary, so that the launcher's tests can parse the command lines it
//! builds (`echolab_core::cmd::ServerCmd`) with this crate's own [`cli::Args`].

pub mod cli;
mod counters;
mod listen;
mod models;
mod readiness;
mod reply;
mod serve;

use std::io::Write as _;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser as _;
use echolab_core::cli::EXIT_USAGE;
use echolab_core::stats::ServerStats;
use signal_hook::consts::{SIGINT, SIGTERM};

use echolab_core::cmd::{Ready, ServerModel};

use crate::cli::Args;
/// Prints one line and exits 2; clap's multi-line usage dump is folded into that line.
fn usage_error(msg: &str) -> ExitCode {
    eprintln!("echo-server: {msg}");
    ExitCode::from(EXIT_USAGE)
}

/// The whole program: parses the command line, serves until SIGTERM or SIGINT, prints the
/// final stats; the exit status is 0, 1 (a failure after start) or 2 (bad input).
pub fn main() -> ExitCode {
    let args = match echolab_core::cli::parsed_or_exit("echo-server", Args::try_parse()) {
        Ok(a) => a,
        Err(code) => return ExitCode::from(code),
    };
    match run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("echo-server: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> anyhow::Result<ExitCode> {
    let model = args.model;
    let workers = match args.workers {
        Some(0) => return Ok(usage_error("--workers must be at least 1")),
        Some(n) if model.uses_workers() => n,
        None if model.uses_workers() => std::thread::available_parallelism().map_or(1, |n| n.get()),
        _ => 1,
    };
    if args.exclusive && model != ServerModel::Prefork {
        return Ok(usage_error("--exclusive applies to --model prefork only"));
    }
    let addr = SocketAddr::new(args.bind, args.port);
    let reuseport = model == ServerModel::Reuseport;
    let listeners = match listen::listeners(
        addr,
        args.backlog,
        if reuseport { workers } else { 1 },
        reuseport,
    ) {
        Ok(l) => l,
        Err(e) => return Ok(usage_error(&format!("cannot listen on {addr}: {e}"))),
    };
    let bound = listeners[0].local_addr()?;
    let counters = counters::alloc_shared(workers)?;
    // Registered before any worker exists so that no thread or child can miss the disposition.
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT])?;
    let started = Instant::now();
    // Leaked once so the printing closure stays Copy for the --stats-interval thread.
    let counters_at_start: &'static _ = Box::leak(Box::new(echolab_core::netstat::read()));
    let ctx = serve::ServeCtx {
        read_buf: args.read_buf,
        reply_bytes: args.reply_bytes,
        workers,
        exclusive: args.exclusive,
        listeners,
        counters,
    };
    let running = models::start(model, ctx)?;
    let ready = Ready {
        addr: bound,
        model,
        workers,
        pid: std::process::id(),
    };
    eprintln!("{ready}");

    let print = move |is_final: bool| {
        let (totals, workers) = counters::merge(counters, models::listed_syscalls(model));
        let line = ServerStats {
            model: model.name().to_string(),
            pid: std::process::id(),
            uptime_s: started.elapsed().as_secs_f64(),
            is_final,
            totals,
            workers,
            kernel_counters: echolab_core::netstat::deltas(
                counters_at_start,
                &echolab_core::netstat::read(),
            ),
        };
        let mut out = std::io::stdout().lock();
        let _ = serde_json::to_writer(&mut out, &line);
        let _ = out.write_all(b"\n");
        let _ = out.flush();
    };
    if let Some(every) = args.stats_interval.filter(|d| !d.is_zero()) {
        // A periodic report, not a wait for a condition: sleeping is what this thread is for.
        std::thread::spawn(move || loop {
            std::thread::sleep(every);
            print(false);
        });
    }
    // Blocks until SIGTERM or SIGINT.
    let _ = signals.forever().next();
    for pid in &running.children {
        let _ = nix::sys::signal::kill(*pid, nix::sys::signal::Signal::SIGKILL);
    }
    for pid in &running.children {
        let _ = nix::sys::wait::waitpid(*pid, None);
    }
    print(true);
    Ok(ExitCode::SUCCESS)
}
