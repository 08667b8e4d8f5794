//! The signals the main thread acts on, read from a signalfd(2) so that the main thread can
//! wait for a signal and for the next `--stats-interval` line in one poll(2), and so that the
//! server stays one thread until its model starts (prefork forks from it, also later to
//! replace a worker).
//!
//! [`Signals::block`] blocks them in the calling thread before any other thread exists; every
//! thread started later inherits the mask, so the signals are only ever delivered to the
//! signalfd. A forked worker calls [`unblock_in_child`] to get the default actions back.

use std::os::fd::AsFd as _;
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};

/// What a signal asks of the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Meaning {
    /// SIGTERM, SIGINT: print the final stats line and exit 0.
    Stop,
    /// SIGCHLD: a worker process changed state (prefork).
    Child,
    /// A signal whose default action would end the process: say so and exit 128 + its number.
    Fatal,
}

/// The catchable signals whose default action ends the process (signal(7)), besides SIGTERM
/// and SIGINT. SIGPIPE is left ignored, as Rust programs start (writes use MSG_NOSIGNAL
/// anyway); the fault signals are `fatal`'s.
const FATAL: [Signal; 12] = [
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGALRM,
    Signal::SIGVTALRM,
    Signal::SIGPROF,
    Signal::SIGXCPU,
    Signal::SIGXFSZ,
    Signal::SIGIO,
    Signal::SIGPWR,
    Signal::SIGSTKFLT,
];

/// What `sig` asks of the server.
pub(crate) fn meaning(sig: Signal) -> Meaning {
    match sig {
        Signal::SIGTERM | Signal::SIGINT => Meaning::Stop,
        Signal::SIGCHLD => Meaning::Child,
        _ => Meaning::Fatal,
    }
}

fn handled() -> SigSet {
    let mut set = SigSet::empty();
    for sig in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGCHLD]
        .into_iter()
        .chain(FATAL)
    {
        set.add(sig);
    }
    set
}

/// The blocked signals, readable from one descriptor.
pub(crate) struct Signals {
    fd: SignalFd,
}

impl Signals {
    /// Blocks the handled signals in the calling thread (and so in every thread it starts
    /// later) and opens the signalfd that receives them.
    ///
    /// # Errors
    /// pthread_sigmask or signalfd failing.
    pub(crate) fn block() -> nix::Result<Self> {
        let set = handled();
        set.thread_block()?;
        let fd = SignalFd::with_flags(&set, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)?;
        Ok(Self { fd })
    }

    /// Waits up to `timeout` (`None`: without limit) for signals and returns those that came
    /// (empty when the time ran out), in arrival order.
    ///
    /// # Errors
    /// poll or read failing other than with EINTR/EAGAIN.
    pub(crate) fn wait(&mut self, timeout: Option<Duration>) -> nix::Result<Vec<Signal>> {
        let limit = match timeout {
            None => PollTimeout::NONE,
            // Rounded up so that the wake-up is not a millisecond early.
            Some(d) => {
                PollTimeout::try_from(d + Duration::from_micros(999)).unwrap_or(PollTimeout::MAX)
            }
        };
        let mut fds = [PollFd::new(self.fd.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, limit) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => return Err(e),
        }
        let mut got = Vec::new();
        loop {
            match self.fd.read_signal() {
                Ok(Some(info)) => {
                    if let Ok(sig) = Signal::try_from(info.ssi_signo as i32) {
                        got.push(sig);
                    }
                }
                Ok(None) | Err(Errno::EAGAIN) => return Ok(got),
                Err(Errno::EINTR) => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// In a forked worker: unblocks every signal, so that SIGTERM, SIGINT and the rest have their
/// default actions on it (the parent reads them from its signalfd instead).
///
/// # Errors
/// pthread_sigmask failing.
pub(crate) fn unblock_in_child() -> nix::Result<()> {
    nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_mean_what_their_default_actions_mean() {
        assert_eq!(meaning(Signal::SIGTERM), Meaning::Stop);
        assert_eq!(meaning(Signal::SIGINT), Meaning::Stop);
        assert_eq!(meaning(Signal::SIGCHLD), Meaning::Child);
        assert_eq!(meaning(Signal::SIGHUP), Meaning::Fatal);
        let set = handled();
        for sig in [
            Signal::SIGTERM,
            Signal::SIGHUP,
            Signal::SIGUSR1,
            Signal::SIGCHLD,
        ] {
            assert!(set.contains(sig), "{sig} handled");
        }
        // Never blocked: the faults are reported by `fatal`'s handler, SIGKILL/SIGSTOP cannot
        // be caught, SIGPIPE stays ignored.
        for sig in [
            Signal::SIGSEGV,
            Signal::SIGABRT,
            Signal::SIGPIPE,
            Signal::SIGKILL,
        ] {
            assert!(!set.contains(sig), "{sig} not handled");
        }
    }
}
