//! The reactor: one ring, one thread, every connection's operations, and the loop that
//! submits, waits and handles completions in batches (see the module documentation of
//! `models::uring`).

use std::net::TcpListener;
use std::os::fd::{AsRawFd as _, RawFd};

use io_uring::{cqueue, opcode, squeue, types, IoUring};
use nix::errno::Errno;

use super::buf_ring::BufRing;
use super::conn::{Chunk, Conn};
use super::features::{check_opcodes, new_ring, with_total_limit, Features, CQ_ENTRIES};
use super::user_data::{split_user_data, user_data, Kind};
use crate::counters::{ErrKind, Op, Sys, WorkerCounters};
use crate::models::backoff::AcceptBackoff;
use crate::reply::{Owed, ReplyBody};

/// Buffer group id of the provided-buffer ring.
const BUF_GROUP: u16 = 0;
/// Bytes of receive buffers in the ring (resident from the start, see [`super::buf_ring`]) ...
pub(super) const POOL_TARGET_BYTES: usize = 4 << 20;
/// ... in at least this many buffers ...
pub(super) const POOL_MIN_BUFS: usize = 16;
/// ... and at most this many.
pub(super) const POOL_MAX_BUFS: usize = 4096;
/// Largest `--read-buf` served from the buffer ring (POOL_TARGET_BYTES / POOL_MIN_BUFS); larger
/// read buffers use single-shot receives into per-connection buffers instead.
pub(super) const RING_MAX_BUF: usize = POOL_TARGET_BYTES / POOL_MIN_BUFS;
/// Per-connection cap on buffers holding received-but-unsent bytes (echo mode).
pub(super) const MAX_HELD_BUFS: usize = 8;
/// Reply mode: owed bytes, in buffers' worth, at which a connection stops receiving.
pub(super) const MAX_OWED_BUFS: usize = MAX_HELD_BUFS;

/// Settings of one reactor.
#[derive(Debug, Clone)]
pub(super) struct Config {
    pub(super) read_buf: usize,
    pub(super) reply_bytes: Option<usize>,
    pub(super) features: Features,
    /// Buffers in the ring (a power of two).
    pub(super) pool_buffers: u16,
}

/// Number of ring buffers for `buf_size`-byte buffers: a power of two (the ring's rule).
pub(super) fn pool_buffers(buf_size: usize) -> u16 {
    let wanted = (POOL_TARGET_BYTES / buf_size.max(1)).clamp(POOL_MIN_BUFS, POOL_MAX_BUFS);
    // Largest power of two <= wanted; both bounds are powers of two.
    let count = 1usize << (usize::BITS - 1 - wanted.leading_zeros());
    count as u16
}

/// The reactor. Field order matters: the ring is dropped before the buffers it may write to.
pub(super) struct Reactor {
    ring: IoUring,
    bufs: Option<BufRing>,
    listener: TcpListener,
    features: Features,
    read_buf: usize,
    reply: Option<ReplyBody>,
    counters: &'static WorkerCounters,
    conns: Vec<Conn>,
    free_slots: Vec<usize>,
    /// Ring buffers the kernel has filled and the reactor has not handed back yet.
    ring_held: usize,
    next_recv_tag: u32,
    accept_armed: bool,
    accept_backoff: AcceptBackoff,
    /// Read by the kernel when a Timeout is submitted; boxed so its address is stable.
    backoff_timespec: Box<types::Timespec>,
}

impl Reactor {
    pub(super) fn new(
        listener: TcpListener,
        config: &Config,
        counters: &'static WorkerCounters,
    ) -> anyhow::Result<Self> {
        let ring = new_ring()?;
        check_opcodes(&ring)?;
        let mut features = config.features;
        if config.read_buf > RING_MAX_BUF && features.multishot_recv {
            eprintln!(
                "echo-server: uring: --read-buf above {RING_MAX_BUF} B; using single-shot recv"
            );
            features.multishot_recv = false;
        }
        let bufs = if features.multishot_recv {
            match BufRing::register(
                &ring.submitter(),
                BUF_GROUP,
                config.pool_buffers,
                config.read_buf,
            ) {
                Ok(b) => Some(b),
                Err(e) => {
                    eprintln!("echo-server: uring: no buffer ring ({e}); using single-shot recv");
                    features.multishot_recv = false;
                    None
                }
            }
        } else {
            None
        };
        Ok(Self {
            ring,
            bufs,
            listener,
            features,
            read_buf: config.read_buf,
            reply: config.reply_bytes.map(ReplyBody::new),
            counters,
            conns: Vec::new(),
            free_slots: Vec::new(),
            ring_held: 0,
            next_recv_tag: 0,
            accept_armed: false,
            accept_backoff: AcceptBackoff::default(),
            backoff_timespec: Box::new(types::Timespec::new()),
        })
    }

    /// One line on the operations in use, for the server's stderr.
    pub(super) fn describe(&self) -> String {
        let accept = if self.features.multishot_accept {
            "multishot"
        } else {
            "single-shot"
        };
        let recv = match &self.bufs {
            Some(b) => format!(
                "multishot{}, buffer ring of {} x {} B",
                if self.features.recv_limit {
                    " with a byte limit"
                } else {
                    ""
                },
                b.count(),
                b.buf_size()
            ),
            None => format!(
                "single-shot into a {} B buffer per connection",
                self.read_buf
            ),
        };
        format!("accept={accept} recv={recv}")
    }

    /// Serves forever; a failing io_uring_enter ends the process.
    pub(super) fn run(mut self) -> ! {
        self.arm_accept();
        let mut reaped: Vec<(u64, i32, u32)> = Vec::with_capacity(CQ_ENTRIES as usize);
        loop {
            if let Some(b) = self.bufs.as_mut() {
                b.publish();
            }
            let entered = self.ring.submit_and_wait(1);
            self.counters.sys(Sys::IoUringEnter).inc();
            match entered {
                Ok(_) => {}
                // A signal for another thread, or completions stuck in the overflow list: reap
                // what is there and enter again.
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINTR | libc::EBUSY | libc::EAGAIN)
                    ) => {}
                Err(e) => crate::fatal::exit(&format!("io_uring_enter: {e}")),
            }
            reaped.clear();
            reaped.extend(
                self.ring
                    .completion()
                    .map(|c| (c.user_data(), c.result(), c.flags())),
            );
            self.counters.events_returned.add(reaped.len() as u64);
            if reaped.is_empty() {
                self.counters.empty_wakeups.inc();
            }
            for &(data, res, flags) in &reaped {
                self.complete(data, res, flags);
            }
        }
    }

    /// Queues `entry`, flushing the submission queue first if it is full.
    ///
    /// # Safety
    /// Every buffer `entry` points to must stay valid until its completion arrives.
    unsafe fn push(&mut self, entry: &squeue::Entry) {
        loop {
            // SAFETY: the caller guarantees the entry's buffers outlive the operation.
            if unsafe { self.ring.submission().push(entry) }.is_ok() {
                return;
            }
            let flushed = self.ring.submit();
            self.counters.sys(Sys::IoUringEnter).inc();
            if let Err(e) = flushed {
                if !matches!(
                    e.raw_os_error(),
                    Some(libc::EINTR | libc::EBUSY | libc::EAGAIN)
                ) {
                    crate::fatal::exit(&format!("io_uring_enter: {e}"));
                }
            }
        }
    }

    fn arm_accept(&mut self) {
        let fd = types::Fd(self.listener.as_raw_fd());
        let (entry, op) = if self.features.multishot_accept {
            (
                opcode::AcceptMulti::new(fd)
                    .flags(libc::SOCK_CLOEXEC)
                    .build(),
                Op::AcceptMulti,
            )
        } else {
            let entry = opcode::Accept::new(fd, std::ptr::null_mut(), std::ptr::null_mut())
                .flags(libc::SOCK_CLOEXEC)
                .build();
            (entry, Op::Accept)
        };
        // SAFETY: accept without a peer address points at no memory of ours.
        unsafe { self.push(&entry.user_data(user_data(Kind::Accept, 0, 0))) };
        self.counters.op(op).inc();
        self.accept_armed = true;
    }

    /// Handles one completion.
    fn complete(&mut self, data: u64, res: i32, flags: u32) {
        let (kind, slot, tag) = split_user_data(data);
        match kind {
            Some(Kind::Accept) => self.accepted(res, flags),
            Some(Kind::AcceptBackoff) => self.arm_accept(),
            Some(Kind::Recv) => self.received(slot, tag, res, flags),
            Some(Kind::Send) => self.sent(slot, tag, res),
            // A cancel that found nothing (ENOENT, EALREADY) lost a race with the operation's
            // own end, which is fine; the cancelled operation reports separately.
            Some(Kind::Cancel) => {}
            Some(Kind::Close) if res < 0 => self
                .counters
                .error(ErrKind::from_errno(Errno::from_raw(-res)))
                .inc(),
            Some(Kind::Close) | None => {}
        }
    }

    fn accepted(&mut self, res: i32, flags: u32) {
        if !cqueue::more(flags) {
            self.accept_armed = false;
        }
        if res >= 0 {
            self.accept_backoff.succeeded();
            self.counters.accepted.inc();
            let slot = self.new_conn(res);
            self.pump(slot);
        } else {
            let errno = Errno::from_raw(-res);
            self.counters.error(ErrKind::from_errno(errno)).inc();
            if errno == Errno::EINVAL && self.features.multishot_accept {
                // The kernel refused the multishot flag: single-shot from now on.
                self.features.multishot_accept = false;
                eprintln!("echo-server: uring: multishot accept refused (EINVAL); using single-shot accept");
            }
        }
        if !self.accept_armed {
            if res >= 0 {
                self.arm_accept();
            } else {
                self.arm_accept_after_backoff();
            }
        }
    }

    fn arm_accept_after_backoff(&mut self) {
        *self.backoff_timespec = types::Timespec::from(self.accept_backoff.failed());
        let entry = opcode::Timeout::new(&*self.backoff_timespec as *const types::Timespec)
            .build()
            .user_data(user_data(Kind::AcceptBackoff, 0, 0));
        // SAFETY: the timespec is boxed in the reactor, which outlives every operation; the
        // kernel copies it when the entry is submitted.
        unsafe { self.push(&entry) };
        self.accept_armed = true;
    }

    fn new_conn(&mut self, fd: RawFd) -> usize {
        let slot = self.free_slots.pop().unwrap_or_else(|| {
            self.conns.push(Conn::default());
            self.conns.len() - 1
        });
        let c = &mut self.conns[slot];
        let generation = c.generation.wrapping_add(1);
        let own_buf = c.own_buf.take();
        *c = Conn {
            live: true,
            fd,
            generation,
            own_buf,
            ..Conn::default()
        };
        slot
    }

    /// Handles a recv completion.
    fn received(&mut self, slot: usize, tag: u32, res: i32, flags: u32) {
        let bid = cqueue::buffer_select(flags);
        if bid.is_some() {
            self.ring_held += 1;
        }
        let current = self
            .conns
            .get(slot)
            .is_some_and(|c| c.live && c.recv_tag == tag && c.recv_armed);
        if !current {
            debug_assert!(false, "recv completion for no armed recv");
            if let Some(b) = bid {
                self.give_back(b);
            }
            return;
        }
        let c = &mut self.conns[slot];
        if !cqueue::more(flags) {
            c.recv_armed = false;
            c.cancel_sent = false;
        }
        if res > 0 {
            let len = res as u32;
            self.counters.bytes_in.add(u64::from(len));
            let c = &mut self.conns[slot];
            if c.dead {
                if let Some(b) = bid {
                    self.give_back(b);
                }
            } else if let Some(body) = &self.reply {
                let input = match bid {
                    Some(b) => self
                        .bufs
                        .as_ref()
                        .expect("ring buffers")
                        .filled(b, len as usize),
                    None => &c.own_buf.as_deref().expect("single-shot recv has a buffer")
                        [..len as usize],
                };
                c.owed.add_requests(body, input);
                if let Some(b) = bid {
                    self.give_back(b);
                }
            } else {
                c.out.push_back(match bid {
                    Some(bid) => Chunk::Ring { bid, off: 0, len },
                    None => Chunk::Own { off: 0, len },
                });
            }
        } else {
            if let Some(b) = bid {
                self.give_back(b);
            }
            let c = &mut self.conns[slot];
            match Errno::from_raw(-res) {
                _ if res == 0 => c.read_eof = true,
                Errno::ENOBUFS => {
                    self.counters.error(ErrKind::RecvBufferExhausted).inc();
                    c.ring_dry = true;
                }
                Errno::ECANCELED | Errno::EINTR | Errno::EAGAIN => {}
                Errno::EINVAL if c.recv_limited && self.features.recv_limit => {
                    self.features.recv_limit = false;
                    eprintln!("echo-server: uring: multishot recv with a byte limit refused (EINVAL); using the cancel cap only");
                }
                Errno::EINVAL if c.recv_multishot && self.features.multishot_recv => {
                    self.features.multishot_recv = false;
                    eprintln!("echo-server: uring: multishot recv refused (EINVAL); using single-shot recv");
                }
                errno => {
                    self.counters.error(ErrKind::from_errno(errno)).inc();
                    c.dead = true;
                }
            }
        }
        self.pump(slot);
    }

    /// Handles a send completion.
    fn sent(&mut self, slot: usize, tag: u32, res: i32) {
        let current = self
            .conns
            .get(slot)
            .is_some_and(|c| c.live && c.generation == tag && c.send_in_flight);
        if !current {
            debug_assert!(false, "send completion for no send in flight");
            return;
        }
        let c = &mut self.conns[slot];
        c.send_in_flight = false;
        if res > 0 {
            let wrote = res as u32;
            self.counters.bytes_out.add(u64::from(wrote));
            if let Some(body) = &self.reply {
                c.owed.consume(body, wrote as usize);
            } else {
                let finished = match c.out.front_mut().expect("a send has a chunk") {
                    Chunk::Ring { off, len, bid } => {
                        *off += wrote;
                        (*off == *len).then_some(Some(*bid))
                    }
                    Chunk::Own { off, len } => {
                        *off += wrote;
                        (*off == *len).then_some(None)
                    }
                };
                if let Some(ring_bid) = finished {
                    c.out.pop_front();
                    if let Some(b) = ring_bid {
                        self.give_back(b);
                    }
                }
            }
        } else {
            // 0 cannot happen for a non-empty send on a stream socket; treat it as an error
            // rather than resubmit forever.
            let errno = if res == 0 {
                Errno::UnknownErrno
            } else {
                Errno::from_raw(-res)
            };
            self.counters.error(ErrKind::from_errno(errno)).inc();
            self.conns[slot].dead = true;
        }
        self.pump(slot);
    }

    fn give_back(&mut self, bid: u16) {
        self.bufs
            .as_mut()
            .expect("ring buffers in use")
            .give_back(bid);
        self.ring_held -= 1;
    }

    /// Whether the next receive of `c` may take buffers from the ring: the kernel has
    /// multishot recv, the connection's last receive did not find the ring empty, and the ring
    /// has room for a whole connection's share ([`MAX_HELD_BUFS`]) besides what is held. A
    /// receive that may not goes to the connection's own buffer instead, so that no connection
    /// ever waits for buffers that others (clients that do not read) hold.
    fn may_use_ring(&self, c: &Conn) -> bool {
        self.features.multishot_recv
            && !c.ring_dry
            && self
                .bufs
                .as_ref()
                .is_some_and(|b| b.count() - self.ring_held >= MAX_HELD_BUFS)
    }

    /// Whether a connection's unsent output is at the cap (stop receiving), and whether it is
    /// low enough to receive again.
    fn backlog(&self, c: &Conn) -> (bool, bool) {
        let buf = self.read_buf as u64;
        match &self.reply {
            Some(_) => (
                c.owed.left() >= MAX_OWED_BUFS as u64 * buf,
                c.owed.left() <= MAX_OWED_BUFS as u64 * buf / 2,
            ),
            None => (
                c.out.len() >= MAX_HELD_BUFS,
                c.out.len() <= MAX_HELD_BUFS / 2,
            ),
        }
    }

    /// Issues whatever connection `slot` can do next: a send of pending output, a receive (or
    /// its cancellation when output piles up), or the close.
    fn pump(&mut self, slot: usize) {
        if self.conns[slot].dead {
            return self.wind_down(slot);
        }
        if !self.conns[slot].send_in_flight {
            self.send_next(slot);
        }
        let (full, low) = self.backlog(&self.conns[slot]);
        let c = &self.conns[slot];
        if c.recv_armed {
            if full && c.recv_multishot && !c.cancel_sent {
                self.cancel_recv(slot);
            }
        } else if !c.read_eof && low && !c.own_buf_busy() {
            self.arm_recv(slot);
        }
        let c = &self.conns[slot];
        let idle = !c.recv_armed && !c.send_in_flight && c.out.is_empty() && c.owed.left() == 0;
        if c.read_eof && idle {
            self.close(slot);
        }
    }

    /// A dead connection: drop its output (handing buffers back), cancel its receive, and
    /// close it once nothing is in flight.
    fn wind_down(&mut self, slot: usize) {
        let c = &mut self.conns[slot];
        c.owed = Owed::default();
        // The chunk of an in-flight send stays until that send completes.
        let keep = usize::from(c.send_in_flight && !c.out.is_empty());
        let dropped: Vec<Chunk> = c.out.drain(keep..).collect();
        for chunk in dropped {
            if let Chunk::Ring { bid, .. } = chunk {
                self.give_back(bid);
            }
        }
        let c = &self.conns[slot];
        if c.recv_armed && !c.cancel_sent {
            self.cancel_recv(slot);
        }
        let c = &self.conns[slot];
        if !c.recv_armed && !c.send_in_flight {
            self.close(slot);
        }
    }

    fn send_next(&mut self, slot: usize) {
        let c = &self.conns[slot];
        let (ptr, len) = match &self.reply {
            Some(body) => {
                let next = c.owed.next(body);
                (next.as_ptr(), next.len())
            }
            None => match c.out.front() {
                None => return,
                Some(&Chunk::Ring { bid, off, len }) => {
                    // SAFETY: `off` < `len` <= buffer size, inside buffer `bid`.
                    (
                        unsafe {
                            self.bufs
                                .as_ref()
                                .expect("ring buffers")
                                .buf_ptr(bid)
                                .add(off as usize)
                                .cast_const()
                        },
                        (len - off) as usize,
                    )
                }
                Some(&Chunk::Own { off, len }) => {
                    let own = c.own_buf.as_deref().expect("own buffer");
                    (own[off as usize..].as_ptr(), (len - off) as usize)
                }
            },
        };
        if len == 0 {
            return;
        }
        let len = u32::try_from(len).unwrap_or(u32::MAX);
        let entry = opcode::Send::new(types::Fd(c.fd), ptr, len)
            .flags(libc::MSG_NOSIGNAL)
            .build()
            .user_data(user_data(Kind::Send, slot, c.generation));
        // SAFETY: the bytes live in a ring buffer (not handed back before this send completes),
        // in the connection's boxed own buffer (kept while a chunk refers to it, and the slot
        // is not reused before its operations complete), or in the reactor's reply body.
        unsafe { self.push(&entry) };
        self.counters.op(Op::Send).inc();
        self.conns[slot].send_in_flight = true;
    }

    fn arm_recv(&mut self, slot: usize) {
        self.next_recv_tag = self.next_recv_tag.wrapping_add(1);
        let tag = self.next_recv_tag;
        let multishot = self.may_use_ring(&self.conns[slot]);
        let limited = multishot && self.features.recv_limit;
        // Echo mode: what may still come in before the connection holds its cap (reply mode
        // holds no buffers; its cap counts owed bytes, checked in `pump`).
        let cap = MAX_HELD_BUFS as u64 * self.read_buf as u64;
        let room = match self.reply {
            Some(_) => cap,
            None => cap.saturating_sub(self.conns[slot].held_bytes()),
        };
        let c = &mut self.conns[slot];
        c.ring_dry = false;
        let fd = types::Fd(c.fd);
        let entry = if multishot {
            let entry = opcode::RecvMulti::new(fd, BUF_GROUP).build();
            if limited {
                // The kernel ends the recv at the completion that reaches the limit, which can
                // overshoot it by up to a buffer less one byte: so the limit stops that much
                // short of the room. At least one byte: 0 would mean no limit.
                let limit = room.saturating_sub(self.read_buf as u64 - 1).max(1);
                with_total_limit(entry, u32::try_from(limit).unwrap_or(u32::MAX))
            } else {
                entry
            }
        } else {
            let read_buf = self.read_buf;
            let own = c
                .own_buf
                .get_or_insert_with(|| vec![0; read_buf].into_boxed_slice());
            opcode::Recv::new(
                fd,
                own.as_mut_ptr(),
                u32::try_from(own.len()).unwrap_or(u32::MAX),
            )
            .build()
        };
        c.recv_tag = tag;
        c.recv_armed = true;
        c.recv_multishot = multishot;
        c.recv_limited = limited;
        c.cancel_sent = false;
        // SAFETY: a multishot recv writes only into ring buffers; a single-shot one into the
        // connection's boxed own buffer, which no chunk refers to (checked by the caller) and
        // which stays allocated until the connection's operations have completed.
        unsafe { self.push(&entry.user_data(user_data(Kind::Recv, slot, tag))) };
        self.counters
            .op(if multishot { Op::RecvMulti } else { Op::Recv })
            .inc();
    }

    fn cancel_recv(&mut self, slot: usize) {
        let c = &mut self.conns[slot];
        c.cancel_sent = true;
        let target = user_data(Kind::Recv, slot, c.recv_tag);
        let entry = opcode::AsyncCancel::new(target)
            .build()
            .user_data(user_data(Kind::Cancel, slot, 0));
        // SAFETY: a cancel points at no memory.
        unsafe { self.push(&entry) };
        self.counters.op(Op::Cancel).inc();
    }

    fn close(&mut self, slot: usize) {
        let c = &mut self.conns[slot];
        debug_assert!(!c.recv_armed && !c.send_in_flight);
        c.live = false;
        let entry = opcode::Close::new(types::Fd(c.fd))
            .build()
            .user_data(user_data(Kind::Close, slot, 0));
        // SAFETY: a close points at no memory; the descriptor is owned by this connection and
        // no operation on it is in flight.
        unsafe { self.push(&entry) };
        self.counters.op(Op::Close).inc();
        self.counters.closed.inc();
        self.free_slots.push(slot);
    }
}
