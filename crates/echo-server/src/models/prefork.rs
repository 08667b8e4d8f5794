//! `prefork`: --workers child processes sharing the one listening socket, each running its own
//! edge-triggered epoll reactor (models::epoll::run). With `--exclusive` the listener is
//! registered with EPOLLEXCLUSIVE (epoll_ctl(2), Linux 4.5) so that a new connection wakes one
//! (or a few) of the children instead of all of them, the thundering herd.
//!
//! Children write their counters into the shared mapping (counters.rs); the parent prints them.
//! Each child dies with its parent (PR_SET_PDEATHSIG), so killing the server leaks no process.
//!
//! Supervision: the parent keeps the listener and learns of a dead child at once (SIGCHLD, read
//! by the main thread). It says so on stderr and forks a replacement with the same worker
//! index and counter slot, counted in ServerStats' `worker_restarts`, so that a "prefork (N)"
//! result always comes from N workers. A worker that cannot be replaced (fork fails, or more
//! than [`RESTART_LIMIT`] restarts within [`RESTART_WINDOW`]: it dies as soon as it starts)
//! ends the server with the reason.

use std::collections::VecDeque;
use std::net::TcpListener;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{fork, getpid, getppid, ForkResult, Pid};

use super::epoll::{self, ReactorSpec, Trigger};
use crate::counters::WorkerCounters;
use crate::readiness::conn::Protocol;
use crate::serve::{Children, Running, ServeCtx};

/// Restarts allowed within [`RESTART_WINDOW`] before the server gives up on its workers.
pub(super) const RESTART_LIMIT: usize = 10;
/// See [`RESTART_LIMIT`].
pub(super) const RESTART_WINDOW: Duration = Duration::from_secs(10);

/// Forks `ctx.workers` children and returns them for the main thread to supervise; only the
/// parent returns.
///
/// Must be called while the process has a single thread (main.rs calls it before starting any
/// other thread), so that the children inherit no lock held by a thread that does not exist in
/// them.
///
/// # Errors
/// When fork fails (children already forked are killed first) or the process is not
/// single-threaded.
pub(super) fn start(ctx: ServeCtx) -> anyhow::Result<Running> {
    let listener = ctx.listeners.into_iter().next().context("no listener")?;
    let mut pool = Pool {
        listener,
        spec: ReactorSpec {
            trigger: Trigger::Edge,
            exclusive: ctx.exclusive,
        },
        read_buf: ctx.read_buf,
        reply_bytes: ctx.reply_bytes,
        counters: &ctx.counters[..ctx.workers.min(ctx.counters.len())],
        parent: getpid(),
        pids: Vec::new(),
        restarts: 0,
        recent: VecDeque::new(),
    };
    for i in 0..pool.counters.len() {
        if let Err(e) = pool.fork(i) {
            pool.stop();
            return Err(e);
        }
    }
    if let Err(e) = pool.wait_listening(epoll::STARTUP_DEADLINE) {
        pool.stop();
        return Err(e);
    }
    Ok(Running {
        children: Some(Box::new(pool)),
    })
}

/// The workers and what it takes to fork one again.
struct Pool {
    /// Kept open by the parent (which never accepts on it) for the workers forked later.
    listener: TcpListener,
    spec: ReactorSpec,
    read_buf: usize,
    reply_bytes: Option<usize>,
    /// One slot per worker; worker `i` counts into `counters[i]`, and so does its replacement.
    counters: &'static [WorkerCounters],
    parent: Pid,
    /// `pids[i]`: the process of worker `i`.
    pids: Vec<Pid>,
    restarts: u64,
    /// When the restarts of the last [`RESTART_WINDOW`] happened.
    recent: VecDeque<Instant>,
}

impl Pool {
    /// [`epoll::wait_listening`] for the children, each checked with waitpid(2) for an end at
    /// start-up.
    fn wait_listening(&self, deadline: Duration) -> anyhow::Result<()> {
        epoll::wait_listening(self.counters, deadline, |i| {
            match waitpid(self.pids[i], Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) | Err(Errno::EINTR) => Ok(()),
                Ok(status) => anyhow::bail!("prefork worker {i} {} at start-up", ended(status)),
                Err(e) => anyhow::bail!("waitpid for prefork worker {i}: {e}"),
            }
        })
    }

    /// Forks worker `i` (a new one, or the replacement of a dead one).
    fn fork(&mut self, i: usize) -> anyhow::Result<Pid> {
        // The SAFETY argument of fork below, checked rather than assumed.
        let threads = std::fs::read_dir("/proc/self/task").map_or(1, |d| d.count());
        anyhow::ensure!(
            threads == 1,
            "prefork must fork while single-threaded, found {threads} threads"
        );
        // SAFETY: the process is single-threaded here (see above), so the child may use any
        // library function; it never returns into the parent's code (child_main diverges).
        match unsafe { fork() } {
            Ok(ForkResult::Child) => child_main(i, self),
            Ok(ForkResult::Parent { child }) => {
                // Written here rather than by the child, so the pid is known as soon as the
                // server announces readiness; the child never writes this counter.
                self.counters[i].pid.set(u64::from(child.as_raw() as u32));
                if i < self.pids.len() {
                    self.pids[i] = child;
                } else {
                    self.pids.push(child);
                }
                Ok(child)
            }
            Err(e) => anyhow::bail!("fork of prefork worker {i}: {e}"),
        }
    }
}

/// How a worker ended, for the line that reports it.
fn ended(status: WaitStatus) -> String {
    match status {
        WaitStatus::Exited(_, code) => format!("exited with status {code}"),
        WaitStatus::Signaled(_, sig, _) => format!("was killed by signal {}", sig.as_str()),
        other => format!("ended ({other:?})"),
    }
}

impl Children for Pool {
    fn reap_and_replace(&mut self) -> Result<(), String> {
        loop {
            let status = match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => return Ok(()),
                Ok(s) => s,
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(format!("waitpid: {e}")),
            };
            let Some(pid) = status.pid() else { continue };
            let Some(i) = self.pids.iter().position(|&p| p == pid) else {
                continue;
            };
            if !matches!(status, WaitStatus::Exited(..) | WaitStatus::Signaled(..)) {
                continue;
            }
            let what = format!("prefork worker {i} (pid {pid}) {}", ended(status));
            let now = Instant::now();
            while self
                .recent
                .front()
                .is_some_and(|&t| now.duration_since(t) > RESTART_WINDOW)
            {
                self.recent.pop_front();
            }
            if self.recent.len() >= RESTART_LIMIT {
                return Err(format!(
                    "{what}; {RESTART_LIMIT} workers were restarted within {RESTART_WINDOW:?}, \
                     giving up"
                ));
            }
            match self.fork(i) {
                Ok(new) => {
                    self.restarts += 1;
                    self.recent.push_back(now);
                    eprintln!("echo-server: {what}; restarted it as pid {new}");
                }
                Err(e) => return Err(format!("{what} and cannot be restarted: {e:#}")),
            }
        }
    }

    fn restarts(&self) -> u64 {
        self.restarts
    }

    fn stop(&mut self) {
        for &pid in &self.pids {
            let _ = kill(pid, Signal::SIGKILL);
        }
        for &pid in &self.pids {
            let _ = waitpid(pid, None);
        }
    }
}

fn child_main(i: usize, pool: &Pool) -> ! {
    let who = format!("prefork worker {i}");
    let result = (|| -> anyhow::Result<std::convert::Infallible> {
        nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).context("prctl(PR_SET_PDEATHSIG)")?;
        // The parent may have died before the death signal was armed.
        anyhow::ensure!(getppid() == pool.parent, "parent exited during startup");
        // The parent reads its signals from a signalfd, with the signals blocked; the worker
        // takes the default actions (SIGTERM ends it).
        crate::signals::unblock_in_child().context("reset signal mask")?;
        let listener = pool.listener.try_clone().context("dup listener")?;
        epoll::run(
            listener,
            pool.spec,
            Protocol::new(pool.read_buf, pool.reply_bytes),
            &pool.counters[i],
        )
    })();
    let Err(e) = result;
    crate::fatal::exit_child(&format!("{who}: {e:#}"))
}
