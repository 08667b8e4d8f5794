//! Per-connection state of the readiness models: one read buffer and a bounded amount of
//! pending output.
//!
//! Bounded buffering: a connection never reads while output is pending. In echo mode the
//! unwritten remainder stays in the read buffer (no copy), so at most `--read-buf` bytes wait per
//! connection. In reply mode only a count of owed bytes is kept and replies are written from a
//! shared template, so a request burst costs no memory. A client that does not read therefore
//! fills the kernel buffers, the server stops reading it, and TCP flow control stops the client.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use super::io::{self, ReadResult, WriteResult};
use crate::counters::WorkerCounters;
use crate::reply::{Owed, ReplyBody};

/// What the server answers, shared by all connections of one reactor.
pub(crate) struct Protocol {
    read_buf: usize,
    /// Reply mode's shared reply bytes (crate::reply); `None` in echo mode.
    reply: Option<ReplyBody>,
}

impl Protocol {
    /// `read_buf`: bytes per connection read buffer (>= 1). `reply_bytes`: `Some(n)` answers each
    /// '\n' with `reply_body(n)` (echolab_core::protocol); `None` echoes.
    pub(crate) fn new(read_buf: usize, reply_bytes: Option<usize>) -> Self {
        Self {
            read_buf: read_buf.max(1),
            reply: reply_bytes.map(ReplyBody::new),
        }
    }
}

/// Outcome of handling one readiness notification, telling the reactor what to wait for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// No output pending: wait until readable.
    WantRead,
    /// Output pending and the send buffer is full: wait until writable, do not read.
    WantWrite,
    /// (edge-triggered only) the read budget ran out with input possibly still queued; the
    /// reactor must come back without waiting for a new edge.
    Yield,
    /// The connection is finished (EOF, error, reset): close it.
    Close,
}

/// Result of one read and the writes it caused.
enum ReadStep {
    /// EAGAIN: the socket is empty.
    Empty,
    /// The read returned fewer bytes than the buffer holds: the socket was empty after it.
    Short,
    /// The read filled the buffer: more input may be queued.
    Full,
    /// The answer could not be written completely: wait for writability.
    Blocked,
    Close,
}

/// One accepted connection.
pub(crate) struct Conn {
    fd: OwnedFd,
    buf: Box<[u8]>,
    /// Echo mode: `buf[out_start..out_end]` is read but not yet written back.
    out_start: usize,
    out_end: usize,
    /// Reply mode: the replies still owed.
    owed: Owed,
    /// Edge-triggered: the peer's FIN (or an error) was reported once; sticky, because that edge
    /// is not repeated and reading must then continue to EOF even after a short read.
    peer_closed: bool,
}

impl Conn {
    /// Wraps an accepted non-blocking socket with a zeroed read buffer of the protocol's size.
    pub(crate) fn new(fd: OwnedFd, proto: &Protocol) -> Self {
        Self {
            fd,
            buf: vec![0; proto.read_buf].into_boxed_slice(),
            out_start: 0,
            out_end: 0,
            owed: Owed::default(),
            peer_closed: false,
        }
    }

    /// The socket.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The socket's number (the reactors' slab index).
    pub(crate) fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Gives the socket back for closing.
    pub(crate) fn into_fd(self) -> OwnedFd {
        self.fd
    }

    /// Whether output waits to be written (the connection must not be read meanwhile).
    pub(crate) fn has_pending(&self) -> bool {
        self.out_start < self.out_end || self.owed.left() > 0
    }

    /// Level-triggered handling (select, poll, epoll-lt): at most one read per notification, as
    /// the seeds' LT server does. `readable`/`writable` are what the wait call reported (hang-up
    /// and error conditions count as readable: the read then reports them).
    pub(crate) fn on_level_event(
        &mut self,
        readable: bool,
        writable: bool,
        proto: &Protocol,
        c: &WorkerCounters,
    ) -> Step {
        if self.has_pending() {
            if !writable {
                return Step::WantWrite;
            }
            // Reading resumes on the next notification: level triggering reports it again.
            return self.flush(proto, c);
        }
        if !readable {
            return Step::WantRead;
        }
        match self.read_step(proto, c) {
            ReadStep::Empty | ReadStep::Short | ReadStep::Full => Step::WantRead,
            ReadStep::Blocked => Step::WantWrite,
            ReadStep::Close => Step::Close,
        }
    }

    /// Edge-triggered handling (epoll-et, prefork, reuseport): flush pending output, then read
    /// until the socket is drained, the output blocks, or `max_reads` full reads were done.
    ///
    /// Drained means EAGAIN or a short read: a read returning less than the buffer took everything
    /// queued at that moment, and data arriving later raises a new edge (the rule nginx's
    /// `ngx_unix_recv` applies), which saves the EAGAIN read per request. `peer_closed` (EPOLLRDHUP,
    /// EPOLLHUP or EPOLLERR was reported, now or by an earlier notification) disables that
    /// shortcut: the FIN's edge is not repeated, so reading continues until EOF or EAGAIN.
    pub(crate) fn on_edge_event(
        &mut self,
        peer_closed: bool,
        max_reads: u32,
        proto: &Protocol,
        c: &WorkerCounters,
    ) -> Step {
        self.peer_closed |= peer_closed;
        if self.has_pending() {
            match self.flush(proto, c) {
                Step::WantRead => {}
                other => return other,
            }
        }
        for _ in 0..max_reads {
            match self.read_step(proto, c) {
                ReadStep::Empty => return Step::WantRead,
                ReadStep::Short if !self.peer_closed => return Step::WantRead,
                ReadStep::Short | ReadStep::Full => {}
                ReadStep::Blocked => return Step::WantWrite,
                ReadStep::Close => return Step::Close,
            }
        }
        Step::Yield
    }

    /// One read, then the answer written as far as the socket takes it.
    fn read_step(&mut self, proto: &Protocol, c: &WorkerCounters) -> ReadStep {
        debug_assert!(!self.has_pending());
        let n = match io::read(self.fd.as_fd(), &mut self.buf, c) {
            ReadResult::Data(n) => n,
            ReadResult::WouldBlock => return ReadStep::Empty,
            ReadResult::Eof | ReadResult::Failed(_) => return ReadStep::Close,
        };
        match &proto.reply {
            None => {
                self.out_start = 0;
                self.out_end = n;
            }
            Some(body) => self.owed.add_requests(body, &self.buf[..n]),
        }
        match self.flush(proto, c) {
            Step::WantRead if n < self.buf.len() => ReadStep::Short,
            Step::WantRead => ReadStep::Full,
            Step::WantWrite => ReadStep::Blocked,
            _ => ReadStep::Close,
        }
    }

    /// Writes pending output until none is left (`WantRead`), the socket is full (`WantWrite`),
    /// or the connection failed (`Close`).
    fn flush(&mut self, proto: &Protocol, c: &WorkerCounters) -> Step {
        while self.has_pending() {
            let chunk = match &proto.reply {
                None => &self.buf[self.out_start..self.out_end],
                Some(body) => self.owed.next(body),
            };
            let n = match io::write(self.fd.as_fd(), chunk, c) {
                WriteResult::Wrote(n) => n,
                WriteResult::WouldBlock => return Step::WantWrite,
                WriteResult::Failed(_) => return Step::Close,
            };
            match &proto.reply {
                None => self.out_start += n,
                Some(body) => self.owed.consume(body, n),
            }
        }
        Step::WantRead
    }
}

/// Open connections of one reactor, indexed by descriptor number (descriptors are small
/// integers that the kernel reuses lowest-first, so the vector stays as long as the peak count).
#[derive(Default)]
pub(crate) struct Slab {
    conns: Vec<Option<Conn>>,
    len: usize,
}

impl Slab {
    /// Stores `conn` under its descriptor.
    pub(crate) fn insert(&mut self, conn: Conn) {
        let i = conn.raw_fd() as usize;
        if i >= self.conns.len() {
            self.conns.resize_with(i + 1, || None);
        }
        if self.conns[i].replace(conn).is_none() {
            self.len += 1;
        }
    }

    /// The connection on descriptor `fd`, if open.
    #[inline]
    pub(crate) fn get_mut(&mut self, fd: RawFd) -> Option<&mut Conn> {
        self.conns.get_mut(fd as usize).and_then(Option::as_mut)
    }

    /// Takes the connection on `fd` out (to close it).
    pub(crate) fn remove(&mut self, fd: RawFd) -> Option<Conn> {
        let taken = self.conns.get_mut(fd as usize).and_then(Option::take);
        if taken.is_some() {
            self.len -= 1;
        }
        taken
    }

    /// Open connections, in descriptor order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Conn> {
        self.conns.iter().flatten()
    }

    /// Number of open connections.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}
