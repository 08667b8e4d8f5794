//! The loop shared by the scanning models, `select` and `poll`: every round the interest set is
//! rebuilt from the open connections (read interest, or write interest while output is pending),
//! handed to the wait call, and the ready connections are served level-triggered (one read each).
//! Only the wait call differs, behind [`Scanner`]; [`start`] and [`counted_wait`] are the parts
//! of a model around it that are the same for every scanner.

use std::convert::Infallible;
use std::net::TcpListener;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::time::Duration;

use anyhow::Context as _;

use super::accept::{Accepted, Acceptor};
use super::conn::{Conn, Protocol, Slab, Step};
use super::{io, worker};
use crate::counters::{ErrKind, Sys, WorkerCounters};
use crate::serve::{Running, ServeCtx};

/// A connection the wait call reported.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ready {
    /// Descriptor of the connection.
    pub fd: RawFd,
    /// Readable, hung up, or in error.
    pub readable: bool,
    /// Writable, hung up, or in error.
    pub writable: bool,
}

/// One readiness API that takes the whole interest set on every call.
pub(crate) trait Scanner {
    /// Waits up to `timeout` (`None`: without limit) for `listener` (when given) to become
    /// readable or a connection of `conns` to become ready: readable when it has no pending
    /// output, writable when it has. Pushes the ready connections onto `ready` (empty on entry),
    /// returns whether the listener is readable, and counts the call, the events and empty
    /// wake-ups in `c`.
    ///
    /// # Errors
    /// When the wait call fails other than with EINTR (which returns `Ok(false)` and no events).
    fn wait(
        &mut self,
        listener: Option<BorrowedFd<'_>>,
        conns: &Slab,
        timeout: Option<Duration>,
        ready: &mut Vec<Ready>,
        c: &WorkerCounters,
    ) -> anyhow::Result<bool>;

    /// Whether a new connection on `fd` can be watched; if not, it is closed and counted as
    /// `fd_over_setsize` (select(2) cannot watch descriptors >= FD_SETSIZE).
    fn admits(&self, _fd: RawFd) -> bool {
        true
    }
}

/// Starts reactor thread `name` serving the one listener of `ctx` with `scanner` (see [`run`]);
/// it counts in `ctx.counters[0]`, stamped with this process's pid.
///
/// # Errors
/// When `ctx` has no listener or the thread cannot start.
pub(crate) fn start<S: Scanner + Send + 'static>(
    name: &str,
    scanner: S,
    ctx: ServeCtx,
) -> anyhow::Result<Running> {
    let listener = ctx.listeners.into_iter().next().context("no listener")?;
    let proto = Protocol::new(ctx.read_buf, ctx.reply_bytes);
    let counters = &ctx.counters[0];
    counters.pid.add(u64::from(std::process::id()));
    worker::spawn(name.into(), move || run(scanner, listener, proto, counters))?;
    Ok(Running::default())
}

/// Makes a scanner's wait call `call` (select(2) or poll(2): the number of ready descriptors, or
/// an errno), counted in `c` as system call `sys`, its events, and an empty wake-up when it
/// timed out.
///
/// Returns whether anything is ready: `false` after a timeout or EINTR, when the round has
/// nothing to serve.
///
/// # Errors
/// When the call fails other than with EINTR, as `"<sys name>: <errno>"`.
pub(crate) fn counted_wait(
    sys: Sys,
    c: &WorkerCounters,
    call: impl FnOnce() -> nix::Result<i32>,
) -> anyhow::Result<bool> {
    c.sys(sys).inc();
    let t = crate::counters::clock();
    let r = call();
    c.timed(sys, t);
    let n = match r {
        Ok(n) => n,
        Err(nix::errno::Errno::EINTR) => return Ok(false),
        Err(e) => anyhow::bail!("{}: {e}", sys.name()),
    };
    c.events_returned.add(n as u64);
    if n == 0 {
        c.empty_wakeups.inc();
        return Ok(false);
    }
    Ok(true)
}

/// Serves `listener` forever with `scanner`; returns only when the wait call fails.
pub(crate) fn run<S: Scanner>(
    mut scanner: S,
    listener: TcpListener,
    proto: Protocol,
    c: &WorkerCounters,
) -> anyhow::Result<Infallible> {
    let mut acceptor = Acceptor::new(listener).context("listener to non-blocking")?;
    let mut conns = Slab::default();
    let mut ready = Vec::new();
    loop {
        let listening = (!acceptor.is_paused()).then(|| acceptor.fd());
        ready.clear();
        let accept_ready = scanner.wait(listening, &conns, acceptor.wait_limit(), &mut ready, c)?;
        let mut freed = false;
        for r in &ready {
            let Some(conn) = conns.get_mut(r.fd) else {
                continue;
            };
            if conn.on_level_event(r.readable, r.writable, &proto, c) == Step::Close {
                if let Some(conn) = conns.remove(r.fd) {
                    io::close(conn.into_fd(), c);
                    freed = true;
                }
            }
        }
        if accept_ready {
            // One accept per notification, the level-triggered style; a fuller backlog keeps
            // the listener readable for the next round.
            match acceptor.accept(c) {
                Accepted::Conn(fd) if scanner.admits(fd.as_raw_fd()) => {
                    conns.insert(Conn::new(fd, &proto))
                }
                Accepted::Conn(fd) => {
                    c.error(ErrKind::FdOverSetsize).inc();
                    io::close(fd, c);
                }
                Accepted::Empty | Accepted::Skipped | Accepted::Paused => {}
            }
        }
        // A paused listener is left out of the next round's set (see `accept`).
        acceptor.resume(freed);
    }
}
