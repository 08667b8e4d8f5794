//! `poll`: one thread, poll(2) over a pollfd array rebuilt each round (readiness::scan).

use std::os::fd::BorrowedFd;
use std::time::Duration;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use crate::counters::{Sys, WorkerCounters};
use crate::readiness::conn::Slab;
use crate::readiness::scan::{self, Ready, Scanner};
use crate::serve::{Running, ServeCtx};

/// Starts the poll reactor thread.
///
/// # Errors
/// When the thread cannot start.
pub(super) fn start(ctx: ServeCtx) -> anyhow::Result<Running> {
    scan::start("poll", PollScanner, ctx)
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
        if !scan::counted_wait(Sys::Poll, c, || poll(&mut fds, timeout))? {
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
