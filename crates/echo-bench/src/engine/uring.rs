//! The ring engine (`--engine uring`, long connections only): `--threads` workers, each an
//! io_uring (io_uring(7)) over its share of the connections. A request is a send and a receive
//! queued on the ring side by side; every loop turn hands the kernel all operations queued since the last
//! one and waits for completions in one io_uring_enter(2), so a turn that completes k replies
//! costs one system call instead of the event engine's 2k plus an epoll wait.
//!
//! Measured against the event engine, same server, same run (`scripts/compare-engines`): on a
//! 2-core VM with 100 long connections, fewer system calls cut the client's CPU per request,
//! which the server under test gets back. The event engine stays the default: it runs every
//! mode, and on kernels or in containers without io_uring (Docker's default seccomp profile
//! refuses it) this engine cannot start.
//!
//! Differences from the event engine, all on purpose:
//! - Sockets are blocking: the ring waits for them (its internal poll), and a non-blocking
//!   socket would make a receive fail with EAGAIN instead of waiting. Making them so costs
//!   two fcntl(2) calls per socket, counted.
//! - A request's latency starts when it is queued, not at its write's first instant: the
//!   send leaves at the next io_uring_enter of the same loop turn.
//! - Deadlines (`--timeout`) are checked by a sweep every timeout/10 (1 ms to 100 ms), like
//!   the event engine's; a request past its deadline has its operations cancelled
//!   (IORING_OP_ASYNC_CANCEL) and its socket closed.
//! - connect(2) goes through the ring too, so `--syscalls` shows no `connect` row.
//! - A connection's buffer is reused only once the ring has returned every operation that
//!   pointed at it (`pending`), so a late completion can never write into a later request.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use io_uring::{opcode, squeue, types, IoUring};

use super::conn::{Conn, Context, Next, State};
use super::window::{run_workers, sweep, take_step, RunClock, WorkerResult};
use super::{Pattern, Plan, RunOutcome};
use crate::gate::Ticket;
use crate::recorder::FailureKind;
use crate::syscalls::{self as sys, Call, SocketOptions, SyscallCounters};

/// Runs `plan` (long connections) on `min(plan.threads, plan.conns)` ring workers.
///
/// # Errors
/// Another pattern than long connections (the caller refuses those first), or a worker could
/// not create its ring (no io_uring in this kernel, or a seccomp filter refuses it) or its
/// thread.
pub(crate) fn run(plan: &Plan) -> io::Result<RunOutcome> {
    if plan.pattern != Pattern::Long {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "the ring engine runs long connections only",
        ));
    }
    // A ring is made (and dropped) before any thread starts, so a kernel without io_uring
    // fails the run at once, with nothing connected. Each worker makes its own: a
    // SINGLE_ISSUER ring belongs to the thread that created it.
    drop(new_ring(1)?);
    run_workers(plan, "echo-bench-u", |_, ids| {
        move |start| new_ring(ids.len()).and_then(|ring| Worker::new(plan, ids, ring).run(start))
    })
}

/// A ring for `conns` connections: room for each one's send and receive plus cancels.
/// DEFER_TASKRUN with SINGLE_ISSUER (Linux 6.1) runs completion work only inside this
/// thread's io_uring_enter, where it waits anyway; older kernels get a plain ring.
fn new_ring(conns: usize) -> io::Result<IoUring> {
    let entries = (conns * 2 + 8).next_power_of_two().min(32_768) as u32;
    IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_cqsize(entries * 2)
        .build(entries)
        .or_else(|_| IoUring::builder().setup_cqsize(entries * 2).build(entries))
        .map_err(|e| io::Error::new(e.kind(), format!("io_uring_setup: {e}")))
}

/// Operation kinds, in bits 24..26 of the user data.
const OP_CONNECT: u64 = 0;
const OP_SEND: u64 = 1;
const OP_RECV: u64 = 2;
/// A cancel of another operation; its own completion is not counted in `pending`.
const OP_CANCEL: u64 = 3;

fn user_data(i: usize, op: u64, generation: u32) -> u64 {
    (u64::from(generation) << 32) | (op << 24) | i as u64
}

fn split(ud: u64) -> (usize, u64, u32) {
    ((ud & 0xff_ffff) as usize, (ud >> 24) & 3, (ud >> 32) as u32)
}

/// What the ring holds of a connection, beside its [`Conn`].
struct Io {
    /// The socket, -1 without one.
    fd: RawFd,
    /// Operations on the ring that will still post a completion for this connection.
    pending: u32,
    /// Where receives land.
    buf: Vec<u8>,
}

// Field order matters: the ring is dropped (and its operations cancelled) before the
// connections' buffers.
struct Worker<'p> {
    ring: IoUring,
    plan: &'p Plan,
    conns: Vec<Conn>,
    /// `io[i]`: connection i's socket, operations in flight and buffer.
    io: Vec<Io>,
    sys: SyscallCounters,
    /// The phase, the measurement window, the recorder and the worker's totals.
    cx: Context<'p>,
    /// Open-loop slots and requests after a failure: (start time, connection index).
    timers: BinaryHeap<Reverse<(Instant, usize)>>,
    sweep_every: Duration,
}

impl<'p> Worker<'p> {
    fn new(plan: &'p Plan, ids: std::ops::Range<usize>, ring: IoUring) -> Self {
        let now = Instant::now();
        let buf_len = plan.reply_len().clamp(1, 64 * 1024);
        let conns: Vec<Conn> = ids.map(|id| Conn::new(id, plan, now)).collect();
        let io = conns
            .iter()
            .map(|_| Io {
                fd: -1,
                pending: 0,
                buf: vec![0; buf_len],
            })
            .collect();
        Self {
            ring,
            plan,
            io,
            cx: Context::new(plan, conns.len()),
            conns,
            sys: SyscallCounters::default(),
            timers: BinaryHeap::new(),
            sweep_every: RunClock::sweep_every(plan),
        }
    }

    fn run(mut self, start: Ticket<'_>) -> io::Result<WorkerResult> {
        for i in 0..self.conns.len() {
            self.begin_connect(i);
        }
        let setup = self.pump(|w| w.conns.iter().all(|c| c.state() != State::Connecting));
        let opened = start.wait();
        setup?;
        self.open_run(opened, true);
        let result = self.pump(|w| w.cx.active == 0);
        self.quiesce();
        result?;
        Ok(self.cx.result(&self.sys))
    }

    /// Queues `entry`; when the submission queue is full, hands it to the kernel first.
    fn push(&mut self, entry: &squeue::Entry) {
        loop {
            // SAFETY: every buffer and address an entry points at (the plan's address, the
            // connection's request and receive buffer) outlives the operation: the plan
            // outlives the worker, the connections' buffers are heap allocations the worker
            // owns until `quiesce` has reaped every operation, and a receive buffer is reused
            // only after its operations completed (`pending`). A request is stamped anew only
            // when the next one starts, once its reply came back whole (so the kernel had
            // copied every byte of the send) or its failure was released (`pending` 0).
            if unsafe { self.ring.submission().push(entry) }.is_ok() {
                return;
            }
            let ring = &self.ring;
            // A full queue is submitted without waiting; errors surface at the next wait.
            let _ = self.sys.timed(Call::UringEnter, || ring.submit());
        }
    }

    fn begin_connect(&mut self, i: usize) {
        let opts = SocketOptions {
            source: self.plan.source_for(self.conns[i].id()),
            ..self.plan.sock
        };
        let fd = match sys::open_tcp_socket(&mut self.sys, &self.plan.addr, &opts) {
            Ok(fd) => fd,
            Err(e) => return self.fail(i, FailureKind::from_io(&e)),
        };
        if let Err(e) = set_blocking(&mut self.sys, fd) {
            sys::close(&mut self.sys, fd);
            return self.fail(i, FailureKind::from_io(&e));
        }
        let now = Instant::now();
        self.io[i].fd = fd;
        self.io[i].pending += 1;
        let c = &mut self.conns[i];
        let generation = c.renew();
        c.connecting(now, &self.cx);
        let addr = &self.plan.addr;
        let entry = opcode::Connect::new(types::Fd(fd), addr.as_ptr().cast(), addr.len())
            .build()
            .user_data(user_data(i, OP_CONNECT, generation));
        self.push(&entry);
    }

    /// Does the I/O connection `i`'s machine asks for.
    fn follow(&mut self, i: usize, next: Next) {
        match next {
            Next::Nothing => {}
            Next::Connect => self.begin_connect(i),
            // The request's send and, beside it, the receive of its reply. They are not
            // linked: a request larger than the socket buffers is echoed back while it is
            // still being sent, and a client that read only after its last byte was sent
            // would wait for a server blocked on writing that echo.
            Next::Exchange => {
                // A new generation per request: a completion of an earlier one is never
                // taken for this one's.
                self.conns[i].renew();
                self.io[i].pending += 2;
                self.queue_send(i);
                self.queue_recv(i);
            }
            // The ring sends what the socket buffer takes; the rest goes in another send.
            Next::Send => {
                self.io[i].pending += 1;
                self.queue_send(i);
            }
            Next::Receive => {
                self.io[i].pending += 1;
                self.queue_recv(i);
            }
            Next::Complete => {
                // The reply arrived by the end of the io_uring_enter that returned it: its
                // end is the request's end, without another clock read.
                let now = self.sys.last_end();
                let next = self.conns[i].complete(now, &mut self.cx);
                self.follow(i, next);
            }
            Next::Fail(kind) => self.fail(i, kind),
            Next::StartSoon(at) | Next::StartAt(at) => self.timers.push(Reverse((at, i))),
            // The socket stays open until the worker quiesces.
            Next::Retire => {}
        }
    }

    /// Queues a send of what the request still has to send.
    fn queue_send(&mut self, i: usize) {
        let rest = self.conns[i].unsent();
        let entry = opcode::Send::new(types::Fd(self.io[i].fd), rest.as_ptr(), rest.len() as u32)
            .build()
            .user_data(user_data(i, OP_SEND, self.conns[i].generation()));
        self.push(&entry);
    }

    /// Queues a receive of what the reply still owes.
    fn queue_recv(&mut self, i: usize) {
        let want = self.conns[i].owed(self.plan);
        let generation = self.conns[i].generation();
        let io = &mut self.io[i];
        let want = want.min(io.buf.len());
        let entry = opcode::Recv::new(types::Fd(io.fd), io.buf.as_mut_ptr(), want as u32)
            .build()
            .user_data(user_data(i, OP_RECV, generation));
        self.push(&entry);
    }

    /// The event loop: runs until `done` holds, or until the end of a timed run.
    fn pump(&mut self, done: impl Fn(&Self) -> bool) -> io::Result<()> {
        let mut next_sweep = Instant::now() + self.sweep_every;
        let mut completions: Vec<(u64, i32)> = Vec::with_capacity(self.conns.len() * 2);
        loop {
            let now = Instant::now();
            let step = self.cx.clock.tick(now, &self.sys);
            if take_step(self, step, now) {
                return Ok(());
            }
            while let Some(&Reverse((due, i))) = self.timers.peek() {
                if due > now {
                    break;
                }
                self.timers.pop();
                self.start_request(i, now);
            }
            if now >= next_sweep {
                sweep(self, now);
                next_sweep = now + self.sweep_every;
            }
            if done(self) {
                return Ok(());
            }
            let mut wake = next_sweep;
            if let Some(&Reverse((due, _))) = self.timers.peek() {
                wake = wake.min(due);
            }
            if let Some(end) = self.cx.clock.next_deadline() {
                wake = wake.min(end);
            }
            self.enter(wake.saturating_duration_since(now))?;
            completions.clear();
            completions.extend(self.ring.completion().map(|e| (e.user_data(), e.result())));
            for &(ud, res) in &completions {
                self.on_completion(ud, res);
            }
        }
    }

    /// Submits what is queued and waits for one completion or `timeout`.
    fn enter(&mut self, timeout: Duration) -> io::Result<()> {
        let ts = types::Timespec::from(timeout);
        let args = types::SubmitArgs::new().timespec(&ts);
        let ring = &self.ring;
        match self.sys.timed(Call::UringEnter, || {
            ring.submitter().submit_with_args(1, &args)
        }) {
            Ok(_) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::ETIME) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => Ok(()),
            Err(e) => Err(io::Error::new(e.kind(), format!("io_uring_enter: {e}"))),
        }
    }

    fn on_completion(&mut self, ud: u64, res: i32) {
        let (i, op, generation) = split(ud);
        if op == OP_CANCEL {
            return;
        }
        self.io[i].pending -= 1;
        let c = &mut self.conns[i];
        if !c.accepts(generation) {
            if c.closing() && self.io[i].pending == 0 {
                self.settled(i);
            }
            return;
        }
        let next = match op {
            _ if res < 0 => Next::Fail(FailureKind::from_io(&os_error(res))),
            OP_CONNECT => c.connected(Instant::now(), &mut self.cx),
            OP_SEND => c.on_sent(res as usize, self.plan),
            _ => c.on_received(&self.io[i].buf[..res as usize], self.plan),
        };
        self.follow(i, next);
    }

    /// Starts connection `i`'s next request at `now`.
    fn start_request(&mut self, i: usize, now: Instant) {
        let next = self.conns[i].start(now, &mut self.cx);
        self.follow(i, next);
    }

    fn retire(&mut self, i: usize) {
        self.conns[i].retire(&mut self.cx);
    }

    /// Fails connection `i`'s request: cancels its operations, closes its socket, and (in
    /// the run) records the failure; the next request waits until the ring has returned
    /// every operation that pointed at the buffer.
    fn fail(&mut self, i: usize, kind: FailureKind) {
        let fd = self.io[i].fd;
        if fd >= 0 {
            self.cancel_pending(i);
            sys::close(&mut self.sys, fd);
            self.io[i].fd = -1;
        }
        self.conns[i].renew();
        self.conns[i].fail(Instant::now(), kind, &mut self.cx);
        if self.io[i].pending == 0 {
            self.settled(i);
        }
    }

    /// Connection `i` failed and the ring holds nothing of it any more.
    fn settled(&mut self, i: usize) {
        let next = self.conns[i].released(Instant::now(), &mut self.cx);
        self.follow(i, next);
    }

    /// Cancels whatever connection `i` still has on the ring (IORING_OP_ASYNC_CANCEL by user
    /// data, one per kind of operation), so that its completions come back and the buffer is
    /// free again. close(2) alone would not do it: the ring holds the socket open, so a
    /// receive would wait for a reply that may never come. Cancelling keeps the close what it
    /// is (FIN, or RST with `--linger0`), where shutdown(2) would send a FIN first.
    fn cancel_pending(&mut self, i: usize) {
        if self.io[i].pending == 0 {
            return;
        }
        let generation = self.conns[i].generation();
        for op in [OP_CONNECT, OP_SEND, OP_RECV] {
            let entry = opcode::AsyncCancel::new(user_data(i, op, generation))
                .build()
                .user_data(user_data(i, OP_CANCEL, generation));
            self.push(&entry);
        }
    }

    /// Before the buffers go: cancels what is still on the ring and reaps completions until
    /// it holds nothing, for at most one `--timeout`; then closes every socket.
    fn quiesce(&mut self) {
        for i in 0..self.conns.len() {
            self.cancel_pending(i);
        }
        let deadline = Instant::now() + self.plan.timeout;
        while self.io.iter().any(|io| io.pending > 0) && Instant::now() < deadline {
            if self.enter(Duration::from_millis(10)).is_err() {
                break;
            }
            let done: Vec<u64> = self.ring.completion().map(|e| e.user_data()).collect();
            for ud in done {
                let (i, op, _) = split(ud);
                if op != OP_CANCEL {
                    self.io[i].pending -= 1;
                }
            }
        }
        for i in 0..self.conns.len() {
            let fd = self.io[i].fd;
            if fd >= 0 {
                sys::close(&mut self.sys, fd);
                self.io[i].fd = -1;
            }
            self.conns[i].finish();
        }
    }
}

fn os_error(res: i32) -> io::Error {
    io::Error::from_raw_os_error(-res)
}

/// Clears O_NONBLOCK (fcntl(2), counted): the ring waits for blocking sockets itself.
fn set_blocking(c: &mut SyscallCounters, fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl(2) on a descriptor the caller owns, with integer arguments only.
    let flags = c.timed(Call::Fcntl, || unsafe { libc::fcntl(fd, libc::F_GETFL) });
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    let set = c.timed(Call::Fcntl, || unsafe {
        libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK)
    });
    if set < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

super::conn::impl_connections!(Worker);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_data_round_trips_index_operation_and_generation() {
        for (i, op, g) in [
            (0, OP_CONNECT, 0),
            (999_999, OP_RECV, u32::MAX),
            (7, OP_SEND, 3),
        ] {
            assert_eq!(split(user_data(i, op, g)), (i, op, g));
        }
    }
}
