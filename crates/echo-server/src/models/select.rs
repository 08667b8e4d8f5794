//! `select`: one thread, select(2) over a rebuilt fd_set each round (readiness::scan).
//!
//! An fd_set is a bitmap of FD_SETSIZE (1024) bits; setting a higher descriptor writes out of
//! bounds in C (select(2), BUGS) and panics in nix. So a connection whose descriptor is at or
//! above FD_SETSIZE is closed right after accept and counted as `errors.fd_over_setsize`; the
//! connections below the limit keep being served.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::time::Duration;

use nix::sys::select::{select, FdSet, FD_SETSIZE};
use nix::sys::time::TimeVal;

use crate::counters::{Sys, WorkerCounters};
use crate::readiness::conn::Slab;
use crate::readiness::scan::{self, Ready, Scanner};
use crate::serve::{Running, ServeCtx};

/// Starts the select reactor thread.
///
/// # Errors
/// When the listener's own descriptor is >= FD_SETSIZE (it could never be watched) or the thread
/// cannot start.
pub(super) fn start(ctx: ServeCtx) -> anyhow::Result<Running> {
    if let Some(listener) = ctx.listeners.first() {
        anyhow::ensure!(
            watchable(listener.as_raw_fd()),
            "the listening socket is descriptor {}, at or above select's FD_SETSIZE ({FD_SETSIZE})",
            listener.as_raw_fd()
        );
    }
    scan::start("select", SelectScanner, ctx)
}

fn watchable(fd: RawFd) -> bool {
    usize::try_from(fd).is_ok_and(|fd| fd < FD_SETSIZE)
}

struct SelectScanner;

impl Scanner for SelectScanner {
    fn wait(
        &mut self,
        listener: Option<BorrowedFd<'_>>,
        conns: &Slab,
        timeout: Option<Duration>,
        ready: &mut Vec<Ready>,
        c: &WorkerCounters,
    ) -> anyhow::Result<bool> {
        let mut readers = FdSet::new();
        let mut writers = FdSet::new();
        // Every descriptor inserted here is < FD_SETSIZE: the listener is checked in `start`,
        // connections by `admits` before they enter the slab.
        if let Some(l) = listener {
            readers.insert(l);
        }
        for conn in conns.iter() {
            if conn.has_pending() {
                writers.insert(conn.fd());
            } else {
                readers.insert(conn.fd());
            }
        }
        let mut tv = timeout.map(|d| TimeVal::new(d.as_secs() as _, d.subsec_micros() as _));
        let call = || select(None, &mut readers, &mut writers, None, tv.as_mut());
        if !scan::counted_wait(Sys::Select, c, call)? {
            return Ok(false);
        }
        for conn in conns.iter() {
            let readable = readers.contains(conn.fd());
            let writable = writers.contains(conn.fd());
            if readable || writable {
                ready.push(Ready {
                    fd: conn.raw_fd(),
                    readable,
                    writable,
                });
            }
        }
        Ok(listener.is_some_and(|l| readers.contains(l.as_fd())))
    }

    fn admits(&self, fd: RawFd) -> bool {
        watchable(fd)
    }
}
