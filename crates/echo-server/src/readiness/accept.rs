//! Accepting connections without spinning when descriptors run out.
//!
//! When accept(2) fails with EMFILE (or ENFILE, ENOBUFS, ENOMEM) the pending connection stays in
//! the backlog, so the listener stays readable: a level-triggered loop that keeps watching it
//! wakes at once, fails again, and burns a core. The [`Acceptor`] instead *pauses*: the reactor
//! takes the listener out of its interest set and puts it back when a connection of this reactor
//! closes (a descriptor was freed) or after [`PAUSE`], whichever comes first. Pending connections
//! wait in the backlog rather than being accepted and dropped (the alternative "reserve fd"
//! trick, libev's documentation of EMFILE, would reset them).

use std::io;
use std::net::TcpListener;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use nix::errno::Errno;

use super::io as sys;
use crate::counters::{ErrKind, WorkerCounters};

/// How long the listener stays out of the interest set after running out of descriptors when no
/// connection closes meanwhile: at most 10 failing accept calls a second, negligible CPU, while a
/// freed descriptor resumes accepting at once.
pub(crate) const PAUSE: Duration = Duration::from_millis(100);

/// Result of one accept attempt.
#[derive(Debug)]
pub(crate) enum Accepted {
    /// A new non-blocking connection.
    Conn(OwnedFd),
    /// The backlog is empty (EAGAIN).
    Empty,
    /// Out of descriptors or memory: the reactor must stop watching the listener until
    /// [`Acceptor::resume`] says otherwise.
    Paused,
    /// The connection died in the backlog (ECONNABORTED, EPROTO, EPERM); try the next one.
    Skipped,
}

/// A non-blocking listener with the pause state described in the module documentation.
pub(crate) struct Acceptor {
    listener: TcpListener,
    paused_until: Option<Instant>,
}

impl Acceptor {
    /// Switches `listener` to non-blocking mode (for `prefork` this affects every process sharing
    /// it, which all want that).
    ///
    /// # Errors
    /// fcntl failure.
    pub(crate) fn new(listener: TcpListener) -> io::Result<Self> {
        listener.set_nonblocking(true)?;
        Ok(Self {
            listener,
            paused_until: None,
        })
    }

    /// The listening socket.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.listener.as_fd()
    }

    /// One accept4(2) call; counts errors by kind.
    pub(crate) fn accept(&mut self, c: &WorkerCounters) -> Accepted {
        match sys::accept(self.listener.as_raw_fd(), c) {
            Ok(fd) => Accepted::Conn(fd),
            Err(Errno::EAGAIN) => Accepted::Empty,
            Err(e @ (Errno::ECONNABORTED | Errno::EPROTO | Errno::EPERM)) => {
                c.error(ErrKind::from_errno(e)).inc();
                Accepted::Skipped
            }
            Err(e) => {
                // EMFILE, ENFILE, ENOBUFS, ENOMEM, and anything unexpected: retrying at once
                // would fail the same way, so back off rather than spin.
                c.error(ErrKind::from_errno(e)).inc();
                self.paused_until = Some(Instant::now() + PAUSE);
                Accepted::Paused
            }
        }
    }

    /// Whether the listener is out of the interest set.
    pub(crate) fn is_paused(&self) -> bool {
        self.paused_until.is_some()
    }

    /// How long the wait call may block before the pause ends (`None`: not paused, no limit).
    pub(crate) fn wait_limit(&self) -> Option<Duration> {
        self.paused_until
            .map(|t| t.saturating_duration_since(Instant::now()))
    }

    /// Ends the pause if `fd_freed` (a connection of this reactor closed) or the pause expired.
    /// Returns `true` when the reactor must put the listener back into its interest set.
    pub(crate) fn resume(&mut self, fd_freed: bool) -> bool {
        match self.paused_until {
            Some(t) if fd_freed || Instant::now() >= t => {
                self.paused_until = None;
                true
            }
            _ => false,
        }
    }
}
