//! The I/O system calls of the readiness models, each counted in the calling worker's slot
//! (one `Counter` increment per call, so counting costs a load and a store).
//!
//! With `--time-syscalls` each call is also timed ([`crate::counters::clock`]); without it
//! the only addition is one relaxed load and a branch per call.
//!
//! Writes use send(2) with MSG_NOSIGNAL: a peer that reset the connection yields EPIPE instead
//! of SIGPIPE, independently of the process's signal disposition. They are counted as `write`.

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::sys::socket::{accept4, send, MsgFlags, SockFlag};

use crate::counters::{clock, ErrKind, Sys, WorkerCounters};

/// Result of one read(2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadResult {
    /// `n > 0` bytes were read into the front of the buffer.
    Data(usize),
    /// The peer closed its sending side (read returned 0).
    Eof,
    /// Nothing to read now (EAGAIN); counted in `eagain_read`.
    WouldBlock,
    /// The connection failed (ECONNRESET, ...); counted in `errors`.
    Failed(Errno),
}

/// Result of one send(2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WriteResult {
    /// `n > 0` bytes were queued (possibly fewer than offered).
    Wrote(usize),
    /// The socket send buffer is full (EAGAIN); counted in `eagain_write`.
    WouldBlock,
    /// The connection failed (EPIPE, ECONNRESET, ...); counted in `errors`.
    Failed(Errno),
}

/// read(2) on `fd` into `buf`, retried on EINTR; counts the call, the bytes and the outcome.
#[inline]
pub(crate) fn read(fd: BorrowedFd<'_>, buf: &mut [u8], c: &WorkerCounters) -> ReadResult {
    loop {
        c.sys(Sys::Read).inc();
        let t = clock();
        let r = nix::unistd::read(fd, buf);
        c.timed(Sys::Read, t);
        match r {
            Ok(0) => return ReadResult::Eof,
            Ok(n) => {
                c.bytes_in.add(n as u64);
                return ReadResult::Data(n);
            }
            Err(Errno::EINTR) => continue,
            Err(Errno::EAGAIN) => {
                c.eagain_read.inc();
                return ReadResult::WouldBlock;
            }
            Err(e) => {
                c.error(ErrKind::from_errno(e)).inc();
                return ReadResult::Failed(e);
            }
        }
    }
}

/// send(2) of `buf` (non-empty) on `fd` with MSG_NOSIGNAL, retried on EINTR; counted as `write`.
#[inline]
pub(crate) fn write(fd: BorrowedFd<'_>, buf: &[u8], c: &WorkerCounters) -> WriteResult {
    loop {
        c.sys(Sys::Write).inc();
        let t = clock();
        let r = send(fd.as_raw_fd(), buf, MsgFlags::MSG_NOSIGNAL);
        c.timed(Sys::Write, t);
        match r {
            Ok(n) => {
                c.bytes_out.add(n as u64);
                return WriteResult::Wrote(n);
            }
            Err(Errno::EINTR) => continue,
            Err(Errno::EAGAIN) => {
                c.eagain_write.inc();
                return WriteResult::WouldBlock;
            }
            Err(e) => {
                c.error(ErrKind::from_errno(e)).inc();
                return WriteResult::Failed(e);
            }
        }
    }
}

/// accept4(2) on `listener` with SOCK_NONBLOCK | SOCK_CLOEXEC (no fcntl needed afterwards),
/// retried on EINTR. Counts the call and, on success, `accepted`; the caller classifies errors.
#[inline]
pub(crate) fn accept(listener: RawFd, c: &WorkerCounters) -> Result<OwnedFd, Errno> {
    loop {
        c.sys(Sys::Accept).inc();
        let t = clock();
        let r = accept4(listener, SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC);
        c.timed(Sys::Accept, t);
        match r {
            Ok(fd) => {
                c.accepted.inc();
                // SAFETY: accept4 just returned this descriptor; nothing else in the process
                // knows it, so the OwnedFd is its only owner and closes it exactly once.
                return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
            }
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Closes a connection, counting the close(2) and the closed connection.
#[inline]
pub(crate) fn close(fd: OwnedFd, c: &WorkerCounters) {
    c.sys(Sys::Close).inc();
    c.closed.inc();
    let t = clock();
    drop(fd);
    c.timed(Sys::Close, t);
}
