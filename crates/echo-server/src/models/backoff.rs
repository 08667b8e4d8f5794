//! Pacing of accept retries after accept(2) fails.
//!
//! When accept fails with EMFILE/ENFILE (no free descriptor) the connection stays in the
//! backlog and the listener stays readable, so retrying at once spins a core until some
//! descriptor is closed. Nothing signals "a descriptor is free again", so the only cure is to
//! wait before retrying (the approach of libuv's and Go's net accept loops): these delays grow
//! exponentially from [`FIRST_DELAY`] to [`MAX_DELAY`] and restart after a success. The cap
//! bounds how long a recovered server takes to notice, the growth bounds the CPU a server with
//! no free descriptor burns (a few wake-ups per second).

use std::io;
use std::time::Duration;

use crate::counters::ErrKind;

/// Delay after the first failure in a row.
pub(crate) const FIRST_DELAY: Duration = Duration::from_millis(1);
/// Longest delay between retries.
pub(crate) const MAX_DELAY: Duration = Duration::from_millis(250);

/// Consecutive-failure backoff for an accept loop.
#[derive(Debug, Clone)]
pub(crate) struct AcceptBackoff {
    next: Duration,
}

impl Default for AcceptBackoff {
    fn default() -> Self {
        Self { next: FIRST_DELAY }
    }
}

impl AcceptBackoff {
    /// Records a failed accept and returns how long to wait before the next attempt.
    pub(crate) fn failed(&mut self) -> Duration {
        let wait = self.next;
        self.next = (self.next * 2).min(MAX_DELAY);
        wait
    }

    /// Records a successful accept: the next failure waits [`FIRST_DELAY`] again.
    pub(crate) fn succeeded(&mut self) {
        self.next = FIRST_DELAY;
    }
}

/// Whether an accept error means "no descriptor or memory right now" (EMFILE, ENFILE,
/// ENOBUFS, ENOMEM): retrying at once would fail the same way, so the loop backs off. Other
/// errors (ECONNABORTED: the peer left before accept) concern one connection only.
pub(crate) fn accept_error_needs_backoff(e: &io::Error) -> bool {
    matches!(
        ErrKind::from_io(e),
        ErrKind::Emfile | ErrKind::Enfile | ErrKind::Enobufs | ErrKind::Enomem
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_cap_and_reset_after_success() {
        let mut b = AcceptBackoff::default();
        let first: Vec<Duration> = (0..4).map(|_| b.failed()).collect();
        assert_eq!(first, [1, 2, 4, 8].map(Duration::from_millis));
        for _ in 0..20 {
            b.failed();
        }
        assert_eq!(b.failed(), MAX_DELAY);
        b.succeeded();
        assert_eq!(b.failed(), FIRST_DELAY);
    }

    #[test]
    fn only_resource_exhaustion_backs_off() {
        let err = |n| io::Error::from_raw_os_error(n);
        assert!(accept_error_needs_backoff(&err(libc::EMFILE)));
        assert!(accept_error_needs_backoff(&err(libc::ENFILE)));
        assert!(!accept_error_needs_backoff(&err(libc::ECONNABORTED)));
        assert!(!accept_error_needs_backoff(&io::Error::other("no errno")));
    }
}
