//! `prefork`: --workers child processes sharing the one listening socket, each running its own
//! edge-triggered epoll reactor (models::epoll::run). With `--exclusive` the listener is
//! registered with EPOLLEXCLUSIVE (epoll_ctl(2), Linux 4.5) so that a new connection wakes one
//! (or a few) of the children instead of all of them, the thundering herd.
//!
//! Children write their counters into the shared mapping (counters.rs); the parent prints them.
//! Each child dies with its parent (PR_SET_PDEATHSIG), so killing the server leaks no process.

use std::net::TcpListener;

use anyhow::Context as _;
use nix::sys::signal::{signal, SigHandler, Signal};
use nix::unistd::{fork, getpid, getppid, ForkResult, Pid};

use super::epoll::{self, ReactorSpec, Trigger};
use crate::counters::WorkerCounters;
use crate::readiness::conn::Protocol;
use crate::serve::{Running, ServeCtx};

/// Forks `ctx.workers` children and returns their pids; only the parent returns.
///
/// Must be called while the process has a single thread (main.rs calls it before starting any
/// other thread), so that the children inherit no lock held by a thread that does not exist in
/// them.
///
/// # Errors
/// When the listener cannot be made non-blocking or fork fails (children already forked are
/// killed first).
pub fn start(ctx: ServeCtx) -> anyhow::Result<Running> {
    let listener = ctx.listeners.first().context("no listener")?;
    // The SAFETY argument of fork below, checked rather than assumed.
    let threads = std::fs::read_dir("/proc/self/task").map_or(1, |d| d.count());
    anyhow::ensure!(
        threads == 1,
        "prefork must fork while single-threaded, found {threads} threads"
    );
    let parent = getpid();
    let spec = ReactorSpec {
        trigger: Trigger::Edge,
        exclusive: ctx.exclusive,
    };
    let mut running = Running::default();
    for (i, counters) in ctx.counters.iter().enumerate().take(ctx.workers) {
        // SAFETY: the process is single-threaded here (see above), so the child may use any
        // library function; it never returns into the parent's code (child_main diverges).
        match unsafe { fork() } {
            Ok(ForkResult::Child) => child_main(i, parent, listener, spec, &ctx, counters),
            Ok(ForkResult::Parent { child }) => {
                // Written here rather than by the child, so the pid is known as soon as the
                // server announces readiness; the child never writes this counter.
                counters.pid.add(u64::from(child.as_raw() as u32));
                running.children.push(child);
            }
            Err(e) => {
                for pid in &running.children {
                    let _ = nix::sys::signal::kill(*pid, Signal::SIGKILL);
                    let _ = nix::sys::wait::waitpid(*pid, None);
                }
                anyhow::bail!("fork of prefork worker {i}: {e}");
            }
        }
    }
    // The parent only waits for signals; the children hold the listener.
    drop(ctx.listeners);
    Ok(running)
}

fn child_main(
    i: usize,
    parent: Pid,
    listener: &TcpListener,
    spec: ReactorSpec,
    ctx: &ServeCtx,
    counters: &WorkerCounters,
) -> ! {
    let who = format!("prefork worker {i}");
    let result = (|| -> anyhow::Result<std::convert::Infallible> {
        nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).context("prctl(PR_SET_PDEATHSIG)")?;
        // The parent may have died before the death signal was armed.
        anyhow::ensure!(getppid() == parent, "parent exited during startup");
        for sig in [Signal::SIGTERM, Signal::SIGINT] {
            // SAFETY: restoring the default disposition installs no handler code. Without it the
            // inherited signal-hook handler would write into the parent's wake-up pipe, making
            // the parent believe it was asked to stop.
            unsafe { signal(sig, SigHandler::SigDfl) }.context("reset signal disposition")?;
        }
        let listener = listener.try_clone().context("dup listener")?;
        epoll::run(
            listener,
            spec,
            Protocol::new(ctx.read_buf, ctx.reply_bytes),
            counters,
        )
    })();
    let Err(e) = result;
    eprintln!("echo-server: fatal: {who}: {e:#}");
    // SAFETY: _exit ends the child without running the parent's exit handlers or flushing
    // stdio buffers it inherited (which the parent flushes itself).
    unsafe { libc::_exit(1) }
}
