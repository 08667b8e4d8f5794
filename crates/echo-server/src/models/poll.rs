//! `poll`: one thread, poll(2) over a pollfd array rebuilt each round (readiness::scan).

use std::os::fd::BorrowedFd;
use std::time::Duration;

use anyhow::Context as _;
use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use super::{Running, ServeCtx};
use crate::counters::{Sys, WorkerCounters};
use crate::readiness::conn::{Protocol, Slab};
use crate::readiness::scan::{self, Ready, Scanner};
use crate::readiness::worker;

/// Starts the poll reactor thread.
///
/// # Errors
/// When the thread cannot start.
pub fn start(ctx: ServeCtx) -> anyhow::Result<Running> {
    let listener = ctx.listeners.into_iter().next().context("no listener")?;
    let proto = Protocol::new(ctx.read_buf, ctx.reply_bytes);
    let counters = &ctx.counters[0];
    counters.pid.add(u64::from(std::process::id()));
    worker::spawn("poll".into(), move || {
        scan::run(PollScanner, listener, proto, counters)
    })?;
    Ok(Running::default())
}

struct PollScanner;

impl Scanner for PollScanner {
    fn wait(
        &mut self,
        listener: Option<BorrowedFd<'_>>,
        conns: &Slab,
        timeout: Option<Duration>,
        ready: &mut Vec<Ready>,
        c: &WorkerCounters,
    ) -> anyhow::Result<bool> {
        let mut fds = Vec::with_capacity(conns.len() + 1);
        if let Some(l) = listener {
            fds.push(PollFd::new(l, PollFlags::POLLIN));
        }
        let first_conn = fds.len();
        for conn in conns.iter() {
            let interest = if conn.has_pending() {
                PollFlags::POLLOUT
            } else {
                PollFlags::POLLIN
            };
            fds.push(PollFd::new(conn.fd(), interest));
        }
        // Rounded up so that a pause is not woken a millisecond early.
        let timeout = match timeout {
            Some(d) => PollTimeout::try_from(d.as_millis() as u64 + 1).unwrap_or(PollTimeout::MAX),
            None => PollTimeout::NONE,
        };
        c.sys(Sys::Poll).inc();
        let n = match poll(&mut fds, timeout) {
            Ok(n) => n,
            Err(Errno::EINTR) => return Ok(false),
            Err(e) => anyhow::bail!("poll: {e}"),
        };
        c.events_returned.add(n as u64);
        if n == 0 {
            c.empty_wakeups.inc();
            return Ok(false);
        }
        // A hang-up or error is reported whatever the interest; the next read or write returns
        // it, so it counts as both.
        let failed = PollFlags::POLLHUP | PollFlags::POLLERR | PollFlags::POLLNVAL;
        for (pfd, conn) in fds[first_conn..].iter().zip(conns.iter()) {
            let revents = pfd.revents().unwrap_or(PollFlags::empty());
            if revents.is_empty() {
                continue;
            }
            let broken = revents.intersects(failed);
            ready.push(Ready {
                fd: conn.raw_fd(),
                readable: broken || revents.contains(PollFlags::POLLIN),
                writable: broken || revents.contains(PollFlags::POLLOUT),
            });
        }
        Ok(first_conn == 1 && fds[0].revents().is_some_and(|r| !r.is_empty()))
    }
}
