//! `uring`: one reactor thread driving io_uring (Linux 5.6+).
//!
//! Operations, by kernel support (probed at start, see [`Features`]):
//! - accept: one multishot accept (Linux 5.19) that yields a completion per connection;
//!   otherwise a single-shot accept re-armed after each completion.
//! - receive: one multishot recv per connection (Linux 6.0) with buffers picked by the kernel
//!   from a registered buffer ring ([`buf_ring`], Linux 5.19); otherwise a single-shot recv into
//!   the connection's own `--read-buf` buffer, re-armed when its bytes are written back.
//! - send: echo mode sends straight from the buffer the bytes arrived in (no copy) and hands
//!   the buffer back to the ring when the send completes; reply mode sends from a shared
//!   [`ReplyBody`]. At most one send per connection is in flight, so bytes leave in order; a
//!   short send is resubmitted for the rest.
//! - close: an io_uring close once no operation of the connection is in flight.
//!
//! The loop submits everything queued and waits for at least one completion in a single
//! `io_uring_enter`, then handles every completion reaped, so the system calls per request fall
//! as load rises (one enter serves a whole batch).
//!
//! Bounded output. A multishot recv keeps taking buffers as long as data arrives, whether or
//! not the client reads its echo. Two limits keep that bounded:
//! - Overall: received bytes only ever sit in the ring's buffers, a fixed pool of about
//!   [`POOL_TARGET_BYTES`] allocated (and made resident) at start, so the server's memory does
//!   not grow with what clients leave unread. When the pool runs dry a recv completes with
//!   ENOBUFS (counted as `errors.recv_buffer_exhausted`); that connection waits until some
//!   buffer is handed back and then re-arms, so it never spins on an empty ring.
//! - Per connection: holding [`MAX_HELD_BUFS`] buffers of unsent input cancels the
//!   connection's recv (ASYNC_CANCEL); it is re-armed once the held buffers drain to half. The
//!   kernel may fill more buffers before the cancel lands (whatever the socket had queued during
//!   one reactor turn), so this cap is soft: it keeps one slow reader from taking the pool in
//!   the common case, the pool's size is the hard bound. Reply mode holds no buffers (a count
//!   of owed bytes, [`Owed`]) and pauses the same way at [`MAX_OWED_BUFS`] buffers' worth.
//!
//! Single-shot receives hold one buffer per connection and never read ahead of the echo.
//!
//! Descriptor exhaustion: a failed accept (EMFILE...) ends a multishot accept; it is re-armed
//! after a Timeout operation of [`AcceptBackoff`] length instead of at once.
//!
//! Counters (slot 0): `syscalls.io_uring_enter` counts every enter (waits and the rare
//! flush of a full submission queue), `ops` counts submitted operations by opcode,
//! `events_returned` the completions reaped, `empty_wakeups` the waits that reaped none.

mod buf_ring;

use std::collections::VecDeque;
use std::net::TcpListener;
use std::os::fd::{AsRawFd as _, RawFd};
use std::sync::mpsc;

use anyhow::{anyhow, Context as _};
use io_uring::{cqueue, opcode, squeue, types, IoUring, Probe};
use nix::errno::Errno;

use self::buf_ring::BufRing;
use super::backoff::AcceptBackoff;
use super::reply::{Owed, ReplyBody};
use super::{Running, ServeCtx};
use crate::counters::{ErrKind, Op, Sys, WorkerCounters};

/// Submission queue entries; more pending operations than this are flushed with an extra
/// enter mid-batch (counted like any other).
const SQ_ENTRIES: u32 = 1024;
/// Completion queue entries: multishot receives post many completions per submission, so the
/// CQ is sized well above the SQ (the kernel keeps overflowing completions anyway, NODROP).
const CQ_ENTRIES: u32 = 8 * SQ_ENTRIES;
/// Buffer group id of the provided-buffer ring.
const BUF_GROUP: u16 = 0;
/// Bytes of receive buffers in the ring (resident from the start, see [`buf_ring`]) ...
const POOL_TARGET_BYTES: usize = 4 << 20;
/// ... in at least this many buffers ...
const POOL_MIN_BUFS: usize = 16;
/// ... and at most this many.
const POOL_MAX_BUFS: usize = 4096;
/// Largest `--read-buf` served from the buffer ring (POOL_TARGET_BYTES / POOL_MIN_BUFS); larger
/// read buffers use single-shot receives into per-connection buffers instead.
const RING_MAX_BUF: usize = POOL_TARGET_BYTES / POOL_MIN_BUFS;
/// Per-connection cap on buffers holding received-but-unsent bytes (echo mode).
pub const MAX_HELD_BUFS: usize = 8;
/// Reply mode: owed bytes, in buffers' worth, at which a connection stops receiving.
pub const MAX_OWED_BUFS: usize = MAX_HELD_BUFS;

/// What the running kernel supports, decided once at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Features {
    /// IORING_ACCEPT_MULTISHOT (Linux 5.19).
    pub multishot_accept: bool,
    /// Multishot recv (Linux 6.0) with a registered buffer ring (Linux 5.19).
    pub multishot_recv: bool,
}

impl Features {
    /// Everything the kernel has, from its release (`/proc/sys/kernel/osrelease`): the
    /// multishot flags are not opcodes, so io_uring's opcode probe cannot see them. A kernel
    /// that claims a version but refuses a flag (EINVAL) is handled at run time by falling
    /// back for good.
    fn detect() -> Self {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let version = kernel_version(&release).unwrap_or((0, 0));
        Self {
            multishot_accept: version >= (5, 19),
            multishot_recv: version >= (6, 0),
        }
    }
}

/// `(major, minor)` of a kernel release string such as `"6.18.44-fc-v657"`.
fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.trim().split(|c: char| !c.is_ascii_digit());
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// Starts the reactor thread and returns once its ring is set up.
///
/// # Errors
/// io_uring unavailable (seccomp, `kernel.io_uring_disabled`, kernel too old: one line saying
/// so), or the thread cannot be spawned.
pub fn start(ctx: ServeCtx) -> anyhow::Result<Running> {
    let listener = ctx
        .listeners
        .into_iter()
        .next()
        .context("uring model: no listening socket")?;
    let counters = &ctx.counters[0];
    counters.pid.add(u64::from(std::process::id()));
    let config = Config {
        read_buf: ctx.read_buf,
        reply_bytes: ctx.reply_bytes,
        features: Features::detect(),
        pool_buffers: pool_buffers(ctx.read_buf),
    };
    let (ready_tx, ready_rx) = mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("uring-reactor".into())
        // The ring is created on the thread that uses it: IORING_SETUP_SINGLE_ISSUER binds it
        // to its creator.
        .spawn(move || match Reactor::new(listener, &config, counters) {
            Ok(reactor) => {
                let _ = ready_tx.send(Ok(reactor.describe()));
                reactor.run()
            }
            Err(e) => {
                let _ = ready_tx.send(Err(e));
            }
        })
        .context("cannot spawn the io_uring reactor thread")?;
    let description = ready_rx
        .recv()
        .context("the io_uring reactor thread died during setup")??;
    eprintln!("echo-server: uring: {description}");
    Ok(Running::default())
}

/// Settings of one reactor.
#[derive(Debug, Clone)]
struct Config {
    read_buf: usize,
    reply_bytes: Option<usize>,
    features: Features,
    /// Buffers in the ring (a power of two).
    pool_buffers: u16,
}

/// Creates a ring, preferring the flags that cut task-work overhead for a single-threaded
/// reactor (Linux 6.1) and retrying without them on older kernels.
fn new_ring() -> anyhow::Result<IoUring> {
    let tuned = IoUring::builder()
        .setup_cqsize(CQ_ENTRIES)
        .setup_submit_all()
        .setup_coop_taskrun()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(SQ_ENTRIES);
    let result = match tuned {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => IoUring::builder()
            .setup_cqsize(CQ_ENTRIES)
            .build(SQ_ENTRIES),
        other => other,
    };
    result.map_err(|e| match e.raw_os_error() {
        Some(code @ (libc::EPERM | libc::ENOSYS)) => anyhow!(
            "io_uring is not available here (io_uring_setup: {}): Docker's default seccomp profile \
             blocks it (or sysctl kernel.io_uring_disabled is set); run with a seccomp profile allowing \
             io_uring_setup/io_uring_enter/io_uring_register",
            Errno::from_raw(code).desc()
        ),
        _ => anyhow!("io_uring_setup failed: {e}"),
    })
}

/// Fails unless the kernel has every opcode this model issues.
fn check_opcodes(ring: &IoUring) -> anyhow::Result<()> {
    let mut probe = Probe::new();
    ring.submitter().register_probe(&mut probe).map_err(|e| {
        anyhow!("io_uring opcode probe failed ({e}); the uring model needs Linux 5.6 or later")
    })?;
    let needed = [
        (opcode::Accept::CODE, "ACCEPT"),
        (opcode::Recv::CODE, "RECV"),
        (opcode::Send::CODE, "SEND"),
        (opcode::Close::CODE, "CLOSE"),
        (opcode::Timeout::CODE, "TIMEOUT"),
        (opcode::AsyncCancel::CODE, "ASYNC_CANCEL"),
    ];
    match needed.iter().find(|(code, _)| !probe.is_supported(*code)) {
        Some((_, name)) => Err(anyhow!("this kernel's io_uring lacks IORING_OP_{name}; the uring model needs Linux 5.6 or later")),
        None => Ok(()),
    }
}

/// Number of ring buffers for `buf_size`-byte buffers: a power of two (the ring's rule).
fn pool_buffers(buf_size: usize) -> u16 {
    let wanted = (POOL_TARGET_BYTES / buf_size.max(1)).clamp(POOL_MIN_BUFS, POOL_MAX_BUFS);
    // Largest power of two <= wanted; both bounds are powers of two.
    let count = 1usize << (usize::BITS - 1 - wanted.leading_zeros());
    count as u16
}

/// What a completion belongs to: the low [`KIND_BITS`] bits of `user_data`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u64)]
enum Kind {
    Accept = 0,
    AcceptBackoff = 1,
    Recv = 2,
    Send = 3,
    Cancel = 4,
    Close = 5,
}

const KIND_BITS: u32 = 3;
const SLOT_BITS: u32 = 29;

/// `user_data` layout: kind (3 bits) | connection slot (29 bits) | tag (32 bits). The tag is the
/// connection's generation for sends and the arm number for receives, so a completion can be
/// matched to the exact operation it ends.
fn user_data(kind: Kind, slot: usize, tag: u32) -> u64 {
    debug_assert!(slot < 1 << SLOT_BITS);
    kind as u64 | (slot as u64) << KIND_BITS | u64::from(tag) << (KIND_BITS + SLOT_BITS)
}

fn split_user_data(data: u64) -> (Option<Kind>, usize, u32) {
    let kind = match data & ((1 << KIND_BITS) - 1) {
        0 => Some(Kind::Accept),
        1 => Some(Kind::AcceptBackoff),
        2 => Some(Kind::Recv),
        3 => Some(Kind::Send),
        4 => Some(Kind::Cancel),
        5 => Some(Kind::Close),
        _ => None,
    };
    let slot = ((data >> KIND_BITS) & ((1 << SLOT_BITS) - 1)) as usize;
    (kind, slot, (data >> (KIND_BITS + SLOT_BITS)) as u32)
}

/// Received bytes waiting to be sent back (echo mode), `len` bytes from `off`.
#[derive(Debug, Clone, Copy)]
enum Chunk {
    /// In ring buffer `bid`, handed back when fully sent.
    Ring { bid: u16, off: u32, len: u32 },
    /// In the connection's own buffer (single-shot receive).
    Own { off: u32, len: u32 },
}

/// One connection.
#[derive(Debug, Default)]
struct Conn {
    live: bool,
    fd: RawFd,
    /// Bumped whenever the slot is reused.
    generation: u32,
    /// Arm number of the current (or last) receive.
    recv_tag: u32,
    recv_armed: bool,
    recv_multishot: bool,
    cancel_sent: bool,
    send_in_flight: bool,
    /// The client half-closed (recv returned 0): flush, then close.
    read_eof: bool,
    /// A fatal error: drop pending output, stop in-flight operations, close.
    dead: bool,
    /// Waiting for the buffer ring to be refilled (ENOBUFS).
    starved: bool,
    out: VecDeque<Chunk>,
    owed: Owed,
    /// Buffer for single-shot receives, made on first use.
    own_buf: Option<Box<[u8]>>,
}

impl Conn {
    fn own_buf_busy(&self) -> bool {
        self.out.iter().any(|c| matches!(c, Chunk::Own { .. }))
    }
}

/// The reactor. Field order matters: the ring is dropped before the buffers it may write to.
struct Reactor {
    ring: IoUring,
    bufs: Option<BufRing>,
    listener: TcpListener,
    features: Features,
    read_buf: usize,
    reply: Option<ReplyBody>,
    counters: &'static WorkerCounters,
    conns: Vec<Conn>,
    free_slots: Vec<usize>,
    /// (slot, generation) of connections waiting for ring buffers.
    starved: Vec<(usize, u32)>,
    next_recv_tag: u32,
    accept_armed: bool,
    accept_backoff: AcceptBackoff,
    /// Read by the kernel when a Timeout is submitted; boxed so its address is stable.
    backoff_timespec: Box<types::Timespec>,
}

impl Reactor {
    fn new(
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
            starved: Vec::new(),
            next_recv_tag: 0,
            accept_armed: false,
            accept_backoff: AcceptBackoff::default(),
            backoff_timespec: Box::new(types::Timespec::new()),
        })
    }

    /// One line on the operations in use, for the server's stderr.
    fn describe(&self) -> String {
        let accept = if self.features.multishot_accept {
            "multishot"
        } else {
            "single-shot"
        };
        let recv = match &self.bufs {
            Some(b) => format!(
                "multishot, buffer ring of {} x {} B",
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
    fn run(mut self) -> ! {
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
                Err(e) => {
                    eprintln!("echo-server: fatal: io_uring_enter: {e}");
                    std::process::exit(1);
                }
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
            let mut buffers_returned = false;
            for &(data, res, flags) in &reaped {
                buffers_returned |= self.complete(data, res, flags);
            }
            if buffers_returned {
                self.feed_starved();
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
                    eprintln!("echo-server: fatal: io_uring_enter: {e}");
                    std::process::exit(1);
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

    /// Handles one completion; returns whether it handed ring buffers back.
    fn complete(&mut self, data: u64, res: i32, flags: u32) -> bool {
        let (kind, slot, tag) = split_user_data(data);
        match kind {
            Some(Kind::Accept) => self.accepted(res, flags),
            Some(Kind::AcceptBackoff) => self.arm_accept(),
            Some(Kind::Recv) => return self.received(slot, tag, res, flags),
            Some(Kind::Send) => return self.sent(slot, tag, res),
            // A cancel that found nothing (ENOENT, EALREADY) lost a race with the operation's
            // own end, which is fine; the cancelled operation reports separately.
            Some(Kind::Cancel) => {}
            Some(Kind::Close) if res < 0 => self
                .counters
                .error(ErrKind::from_errno(Errno::from_raw(-res)))
                .inc(),
            Some(Kind::Close) | None => {}
        }
        false
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

    /// Handles a recv completion; returns whether a ring buffer was handed back.
    fn received(&mut self, slot: usize, tag: u32, res: i32, flags: u32) -> bool {
        let bid = cqueue::buffer_select(flags);
        let current = self
            .conns
            .get(slot)
            .is_some_and(|c| c.live && c.recv_tag == tag && c.recv_armed);
        if !current {
            debug_assert!(false, "recv completion for no armed recv");
            return bid.is_some_and(|b| self.give_back(b));
        }
        let c = &mut self.conns[slot];
        if !cqueue::more(flags) {
            c.recv_armed = false;
            c.cancel_sent = false;
        }
        let mut returned = false;
        if res > 0 {
            let len = res as u32;
            self.counters.bytes_in.add(u64::from(len));
            let c = &mut self.conns[slot];
            if c.dead {
                returned = bid.is_some_and(|b| self.give_back(b));
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
                returned = bid.is_some_and(|b| self.give_back(b));
            } else {
                c.out.push_back(match bid {
                    Some(bid) => Chunk::Ring { bid, off: 0, len },
                    None => Chunk::Own { off: 0, len },
                });
            }
        } else {
            if let Some(b) = bid {
                returned = self.give_back(b);
            }
            let c = &mut self.conns[slot];
            match Errno::from_raw(-res) {
                _ if res == 0 => c.read_eof = true,
                Errno::ENOBUFS => {
                    self.counters.error(ErrKind::RecvBufferExhausted).inc();
                    c.starved = true;
                    self.starved.push((slot, c.generation));
                }
                Errno::ECANCELED | Errno::EINTR | Errno::EAGAIN => {}
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
        returned
    }

    /// Handles a send completion; returns whether a ring buffer was handed back.
    fn sent(&mut self, slot: usize, tag: u32, res: i32) -> bool {
        let current = self
            .conns
            .get(slot)
            .is_some_and(|c| c.live && c.generation == tag && c.send_in_flight);
        if !current {
            debug_assert!(false, "send completion for no send in flight");
            return false;
        }
        let c = &mut self.conns[slot];
        c.send_in_flight = false;
        let mut returned = false;
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
                        returned = self.give_back(b);
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
        returned
    }

    fn give_back(&mut self, bid: u16) -> bool {
        self.bufs
            .as_mut()
            .expect("ring buffers in use")
            .give_back(bid);
        true
    }

    /// Re-arms the receives of connections that found the buffer ring empty.
    fn feed_starved(&mut self) {
        for (slot, generation) in std::mem::take(&mut self.starved) {
            let c = &mut self.conns[slot];
            if c.live && c.generation == generation && c.starved {
                c.starved = false;
                self.pump(slot);
            }
        }
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
        } else if !c.read_eof && !c.starved && low && !c.own_buf_busy() {
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
        let multishot = self.features.multishot_recv;
        let c = &mut self.conns[slot];
        let fd = types::Fd(c.fd);
        let entry = if multishot {
            opcode::RecvMulti::new(fd, BUF_GROUP).build()
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

#[cfg(test)]
mod tests {
    //! The reactor on a loopback listener in this process, with the kernel features forced on
    //! or off, so that the single-shot fallbacks run on a kernel that has everything. Each
    //! reactor thread serves until the test process exits (nextest runs one test per process).

    use super::*;
    use crate::counters::alloc_shared;
    use echolab_core::protocol::reply_body;
    use std::io::{Read as _, Write as _};
    use std::net::{SocketAddr, TcpStream};
    use std::time::{Duration, Instant};

    /// Generous: the machine has two cores shared with builds and other tests.
    const DEADLINE: Duration = Duration::from_secs(60);

    const ALL_FEATURES: [Features; 4] = [
        Features {
            multishot_accept: true,
            multishot_recv: true,
        },
        Features {
            multishot_accept: true,
            multishot_recv: false,
        },
        Features {
            multishot_accept: false,
            multishot_recv: true,
        },
        Features {
            multishot_accept: false,
            multishot_recv: false,
        },
    ];

    struct Server {
        addr: SocketAddr,
        counters: &'static WorkerCounters,
    }

    fn serve(
        features: Features,
        read_buf: usize,
        reply_bytes: Option<usize>,
        pool_buffers: u16,
    ) -> Server {
        serve_on(
            TcpListener::bind("127.0.0.1:0").unwrap(),
            features,
            read_buf,
            reply_bytes,
            pool_buffers,
        )
    }

    /// A listener whose accepted sockets have a `rcvbuf`-byte receive buffer (inherited from
    /// the listener; the kernel doubles the value, socket(7)), which also bounds what a
    /// multishot recv can find queued in one reactor turn.
    fn small_rcvbuf_listener(rcvbuf: usize) -> TcpListener {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        s.set_recv_buffer_size(rcvbuf).unwrap();
        s.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
            .unwrap();
        s.listen(16).unwrap();
        s.into()
    }

    fn serve_on(
        listener: TcpListener,
        features: Features,
        read_buf: usize,
        reply_bytes: Option<usize>,
        pool_buffers: u16,
    ) -> Server {
        let addr = listener.local_addr().unwrap();
        let counters = &alloc_shared(1).unwrap()[0];
        let config = Config {
            read_buf,
            reply_bytes,
            features,
            pool_buffers,
        };
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let reactor = Reactor::new(listener, &config, counters)
                .expect("io_uring reactor (is io_uring allowed here?)");
            tx.send(()).unwrap();
            reactor.run()
        });
        rx.recv_timeout(DEADLINE).expect("reactor set up");
        Server { addr, counters }
    }

    fn connect(addr: SocketAddr) -> TcpStream {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(DEADLINE)).unwrap();
        s
    }

    /// Polls `cond` until it holds or [`DEADLINE`] passes.
    fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
        let start = Instant::now();
        while !cond() {
            assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
            std::thread::yield_now();
        }
    }

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    /// Sends `data` from one thread while this one reads it back after `start_reading` holds,
    /// sampling the bytes the server holds (read but not yet sent) meanwhile; returns the echo
    /// and the largest holding seen.
    fn echo_with_late_reader(
        server: &Server,
        data: Vec<u8>,
        start_reading: impl Fn() -> bool,
    ) -> (Vec<u8>, u64) {
        let mut stream = connect(server.addr);
        let mut writer = stream.try_clone().unwrap();
        let len = data.len();
        let sender = std::thread::spawn(move || writer.write_all(&data).map(|()| writer));
        let c = server.counters;
        // bytes_in is read before bytes_out, so a sample never overstates the holding.
        let held = || c.bytes_in.get().saturating_sub(c.bytes_out.get());
        let mut max_held = 0;
        wait_for(
            "the server to stop receiving for a reader that does not read",
            || {
                max_held = max_held.max(held());
                start_reading()
            },
        );
        let mut back = vec![0u8; len];
        let mut got = 0;
        while got < len {
            let n = stream.read(&mut back[got..(got + 4096).min(len)]).unwrap();
            assert!(n > 0, "server closed after {got} of {len} bytes");
            got += n;
            max_held = max_held.max(held());
        }
        let writer = sender.join().unwrap().unwrap();
        drop(writer);
        (back, max_held)
    }

    #[test]
    fn echoes_requests_larger_than_the_read_buffer_in_every_mode() {
        for features in ALL_FEATURES {
            let server = serve(features, 4096, None, 64);
            let clients: Vec<_> = (0..3u8)
                .map(|i| {
                    let data = pattern(64 << 10, i);
                    let mut s = connect(server.addr);
                    s.write_all(&data).unwrap();
                    (s, data)
                })
                .collect();
            for (mut s, data) in clients {
                let mut back = vec![0u8; data.len()];
                s.read_exact(&mut back).unwrap();
                assert!(back == data, "{features:?}: echo differs");
            }
            let c = server.counters;
            let multi = |op| c.op(op).get() > 0;
            assert_eq!(
                (multi(Op::AcceptMulti), multi(Op::Accept)),
                (features.multishot_accept, !features.multishot_accept),
                "{features:?}"
            );
            assert_eq!(
                (multi(Op::RecvMulti), multi(Op::Recv)),
                (features.multishot_recv, !features.multishot_recv),
                "{features:?}"
            );
            assert_eq!(c.bytes_in.get(), 3 * (64 << 10));
        }
    }

    #[test]
    fn closes_after_flushing_when_the_client_half_closes() {
        for features in [ALL_FEATURES[0], ALL_FEATURES[3]] {
            let server = serve(features, 4096, None, 64);
            let mut s = connect(server.addr);
            let data = pattern(300_000, 7);
            s.write_all(&data).unwrap();
            s.shutdown(std::net::Shutdown::Write).unwrap();
            let mut back = Vec::new();
            s.read_to_end(&mut back).unwrap();
            assert!(
                back == data,
                "{features:?}: {} of {} bytes before EOF",
                back.len(),
                data.len()
            );
            wait_for("the server to count the close", || {
                server.counters.closed.get() == 1
            });
        }
    }

    #[test]
    fn reply_mode_answers_every_newline_even_split_across_reads() {
        for features in [ALL_FEATURES[0], ALL_FEATURES[3]] {
            let server = serve(features, 16, Some(1000), 64);
            let mut s = connect(server.addr);
            s.write_all(b"hello echo\r\nhel").unwrap();
            s.write_all(b"lo\n\nno newline yet").unwrap();
            let mut back = vec![0u8; 3000];
            s.read_exact(&mut back).unwrap();
            assert!(back == reply_body(1000).repeat(3), "{features:?}");
        }
    }

    #[test]
    fn slow_reader_gets_every_byte_while_the_server_holds_little_and_serves_others() {
        let read_buf = 4096;
        let total = 8 << 20;
        // An uncapped multishot server would hold nearly all 8 MiB the client has not read; a
        // capped one holds MAX_HELD_BUFS buffers plus what one turn finds in a 64 KiB socket
        // buffer. 1 MiB separates the two with a wide margin for a loaded machine.
        let bound = 1 << 20;
        for features in [ALL_FEATURES[0], ALL_FEATURES[1]] {
            let server = serve_on(
                small_rcvbuf_listener(32 << 10),
                features,
                read_buf,
                None,
                4096,
            );
            let c = server.counters;
            let data = pattern(total, 3);
            let other = server.addr;
            let start_reading = || {
                let stalled = if features.multishot_recv {
                    c.op(Op::Cancel).get() > 0
                } else {
                    // A single-shot server holds one buffer by construction; read once the
                    // client is well ahead of the echo.
                    c.bytes_in.get() >= 1 << 20
                };
                if stalled {
                    // Another client is served while the slow one holds its share.
                    let mut s = connect(other);
                    s.write_all(b"meanwhile\n").unwrap();
                    let mut back = [0u8; 10];
                    s.read_exact(&mut back).unwrap();
                    assert_eq!(&back, b"meanwhile\n");
                }
                stalled
            };
            let (back, max_held) = echo_with_late_reader(&server, data.clone(), start_reading);
            assert!(back == data, "{features:?}: echo differs");
            // The other client's 10 bytes are in the counters too.
            let bound = if features.multishot_recv {
                bound
            } else {
                read_buf as u64 + 10
            };
            assert!(
                max_held <= bound,
                "{features:?}: server held {max_held} bytes, bound {bound}"
            );
        }
    }

    #[test]
    fn an_empty_buffer_ring_is_counted_and_every_connection_still_gets_its_echo() {
        // 16 buffers, while three non-reading clients may each hold MAX_HELD_BUFS (8).
        let server = serve(ALL_FEATURES[0], 4096, None, 16);
        let c = server.counters;
        let datas: Vec<Vec<u8>> = (0..3).map(|i| pattern(2 << 20, i)).collect();
        let mut streams = Vec::new();
        let mut senders = Vec::new();
        for data in &datas {
            let s = connect(server.addr);
            let mut w = s.try_clone().unwrap();
            let d = data.clone();
            senders.push(std::thread::spawn(move || w.write_all(&d).map(|()| w)));
            streams.push(s);
        }
        wait_for("the ring to run dry", || {
            c.error(ErrKind::RecvBufferExhausted).get() > 0
        });
        let readers: Vec<_> = streams
            .into_iter()
            .zip(datas)
            .map(|(mut s, data)| {
                std::thread::spawn(move || {
                    let mut back = vec![0u8; data.len()];
                    s.read_exact(&mut back).unwrap();
                    back == data
                })
            })
            .collect();
        for r in readers {
            assert!(r.join().unwrap(), "an echo differs");
        }
        for s in senders {
            s.join().unwrap().unwrap();
        }
    }

    #[test]
    fn a_client_reset_with_output_pending_is_closed_and_the_next_client_served() {
        for features in [ALL_FEATURES[0], ALL_FEATURES[3]] {
            let server = serve_on(small_rcvbuf_listener(32 << 10), features, 4096, None, 64);
            let c = server.counters;
            let s = connect(server.addr);
            socket2::SockRef::from(&s)
                .set_recv_buffer_size(4096)
                .unwrap();
            s.set_nonblocking(true).unwrap();
            let chunk = pattern(64 << 10, 1);
            let mut sent = 0usize;
            // Fill both directions until the server holds echo output it cannot send. A full
            // send buffer alone is not enough: the server may still drain it into its own
            // (autotuned, megabytes) send buffer, so keep writing until it holds bytes.
            let start = Instant::now();
            while c.bytes_in.get() <= c.bytes_out.get() {
                match (&s).write(&chunk) {
                    Ok(n) => sent += n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::yield_now()
                    }
                    Err(e) => panic!("{features:?}: send: {e}"),
                }
                assert!(
                    sent < 64 << 20,
                    "{features:?}: the server never stopped reading"
                );
                assert!(
                    start.elapsed() < DEADLINE,
                    "{features:?}: the server never held output"
                );
            }
            socket2::SockRef::from(&s)
                .set_linger(Some(Duration::ZERO))
                .unwrap();
            drop(s);
            wait_for("the reset connection to be closed", || c.closed.get() == 1);
            let errors = c.error(ErrKind::Econnreset).get() + c.error(ErrKind::Epipe).get();
            assert!(errors >= 1, "{features:?}: the reset was not counted");
            let mut next = connect(server.addr);
            next.write_all(b"after the reset\n").unwrap();
            let mut back = [0u8; 16];
            next.read_exact(&mut back).unwrap();
            assert_eq!(&back, b"after the reset\n");
        }
    }

    #[test]
    fn user_data_round_trips() {
        let data = user_data(Kind::Send, (1 << SLOT_BITS) - 1, u32::MAX);
        assert_eq!(
            split_user_data(data),
            (Some(Kind::Send), (1 << SLOT_BITS) - 1, u32::MAX)
        );
        assert_eq!(
            split_user_data(user_data(Kind::Accept, 0, 0)),
            (Some(Kind::Accept), 0, 0)
        );
        assert_eq!(split_user_data(7).0, None);
    }

    #[test]
    fn kernel_versions_parse_from_release_strings() {
        assert_eq!(kernel_version("6.18.44-fc-v657\n"), Some((6, 18)));
        assert_eq!(kernel_version("5.4.0-150-generic"), Some((5, 4)));
        assert_eq!(kernel_version("garbage"), None);
    }

    #[test]
    fn pool_sizes_are_powers_of_two_within_bounds() {
        assert_eq!(pool_buffers(4096), 1024);
        assert_eq!(pool_buffers(16 << 10), 256);
        assert_eq!(pool_buffers(RING_MAX_BUF), POOL_MIN_BUFS as u16);
        assert_eq!(pool_buffers(64 << 20), POOL_MIN_BUFS as u16);
        assert_eq!(pool_buffers(1), POOL_MAX_BUFS as u16);
        assert!(pool_buffers(5000).is_power_of_two());
    }
}
