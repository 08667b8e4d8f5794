//! The event engine: `--threads` workers, each an epoll reactor over its share of the
//! connections, every connection a [`Conn`] state machine driven closed-loop (the next
//! request leaves when the previous reply is verified) or open-loop (by its
//! [`Pacer`](super::Pacer)); the reactor does the I/O each one asks for.
//!
//! Sockets are non-blocking and registered once, edge-triggered for both directions
//! (`EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET`, epoll(7)), so a round trip costs one write(2),
//! one read(2) and a share of one epoll_pwait2(2), with no epoll_ctl(2) re-arming.
//!
//! Deadlines (`--timeout`) are checked by a sweep every timeout/10 (1 ms to 100 ms), woken by
//! a periodic timerfd in the same epoll set, so the wait itself arms no timer in the common
//! case; only open-loop send slots (a min-heap) and an imminent end of run give the wait a
//! timeout. Requests start at most [`START_BATCH`] per loop turn, so a storm of connects is
//! interleaved with the handling of their completions.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use super::conn::{Conn, Context, Next, State};
use super::window::{run_workers, sweep, take_step, worker_count, RunClock, WorkerResult};
use super::{Pattern, Plan, RunOutcome};
use crate::gate::{StartGate, Ticket};
use crate::recorder::FailureKind;
use crate::syscalls::{self as sys, SocketOptions, SyscallCounters};

/// Runs `plan` on `min(plan.threads, plan.conns)` epoll workers.
///
/// # Errors
/// A worker could not create its epoll instance or its thread.
pub(crate) fn run(plan: &Plan) -> io::Result<RunOutcome> {
    // The storm keeps every connection open until all workers have established theirs.
    let hold_gate = StartGate::new(worker_count(plan));
    run_workers(plan, "echo-bench-w", |_, ids| {
        let hold = hold_gate.ticket();
        move |start| Worker::new(plan, ids).and_then(|wk| wk.run(start, hold))
    })
}

/// Requests started per loop turn from the runnable queue before events are handled again.
/// Starting thousands of connects in one go would charge the time spent issuing them to the
/// connect latency of the first ones; 64 keeps a storm both fast and honestly timed.
const START_BATCH: usize = 64;

/// epoll token of the tick timerfd. Connection tokens are `generation << 32 | index` with an
/// index below 1,000,000 (the CLI's connection limit), so they never equal it.
const TICK_TOKEN: u64 = u64::MAX;

const INTEREST: u32 = (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET) as u32;
const READABLE: u32 = (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLHUP | libc::EPOLLERR) as u32;
const WRITABLE: u32 = (libc::EPOLLOUT | libc::EPOLLHUP | libc::EPOLLERR) as u32;
const BROKEN: u32 = (libc::EPOLLHUP | libc::EPOLLERR) as u32;

struct Worker<'p> {
    plan: &'p Plan,
    epfd: RawFd,
    /// Periodic timerfd (every `sweep_every`) that wakes the epoll wait for deadline sweeps,
    /// so that the wait itself needs no timeout and arms no timer in the common case.
    tick_fd: RawFd,
    conns: Vec<Conn>,
    /// `fds[i]`: connection i's socket, -1 without one.
    fds: Vec<RawFd>,
    sys: SyscallCounters,
    /// The phase, the measurement window, the recorder and the worker's totals.
    cx: Context<'p>,
    /// Connections whose next request starts at a coming loop turn, [`START_BATCH`] per turn:
    /// the first requests of the run, and requests after a failure.
    runnable: VecDeque<usize>,
    /// Open-loop slots: (intended send time, connection index).
    timers: BinaryHeap<Reverse<(Instant, usize)>>,
    scratch: Vec<u8>,
    sweep_every: Duration,
}

impl Drop for Worker<'_> {
    fn drop(&mut self) {
        for i in 0..self.fds.len() {
            self.close_socket(i);
        }
        // SAFETY: the worker owns its epoll fd and timerfd and nothing uses them after drop.
        unsafe {
            libc::close(self.tick_fd);
            libc::close(self.epfd);
        }
    }
}

impl<'p> Worker<'p> {
    fn new(plan: &'p Plan, ids: std::ops::Range<usize>) -> io::Result<Self> {
        let sweep_every = RunClock::sweep_every(plan);
        let epfd = sys::epoll_create()?;
        let tick_fd = match sys::periodic_timerfd(sweep_every) {
            Ok(fd) => fd,
            Err(e) => {
                // SAFETY: epfd was just created here and is not used again.
                unsafe { libc::close(epfd) };
                return Err(e);
            }
        };
        let now = Instant::now();
        let conns = ids.map(|id| Conn::new(id, plan, now)).collect::<Vec<_>>();
        let mut worker = Self {
            plan,
            epfd,
            tick_fd,
            fds: vec![-1; conns.len()],
            cx: Context::new(plan, conns.len()),
            conns,
            sys: SyscallCounters::default(),
            runnable: VecDeque::new(),
            timers: BinaryHeap::new(),
            scratch: vec![0; plan.reply_len().clamp(1, 64 * 1024)],
            sweep_every,
        };
        sys::epoll_add(
            &mut worker.sys,
            epfd,
            tick_fd,
            libc::EPOLLIN as u32,
            TICK_TOKEN,
        )?;
        Ok(worker)
    }

    fn run(mut self, start: Ticket<'_>, hold: Ticket<'_>) -> io::Result<WorkerResult> {
        if self.plan.pattern == Pattern::Long {
            for i in 0..self.conns.len() {
                self.begin_connect(i);
            }
            self.pump(|w| w.conns.iter().all(|c| c.state() != State::Connecting))?;
        }
        let opened = start.wait();
        self.open_run(opened, false);
        let result = self.pump(|w| w.cx.active == 0);
        if self.plan.pattern == Pattern::Storm {
            // Every worker reaches this point, also on error, so the gate always opens.
            hold.wait();
        } else {
            drop(hold);
        }
        result?;
        self.finish();
        Ok(self.cx.result(&self.sys))
    }

    /// Closes every socket still open (held storm connections, a timed run's last requests).
    fn finish(&mut self) {
        for i in 0..self.conns.len() {
            self.close_socket(i);
            self.conns[i].finish();
        }
    }

    fn close_socket(&mut self, i: usize) {
        if self.fds[i] >= 0 {
            sys::close(&mut self.sys, self.fds[i]);
            self.fds[i] = -1;
        }
    }

    /// The event loop: runs until `done` holds, or until the end of a timed run.
    fn pump(&mut self, done: impl Fn(&Self) -> bool) -> io::Result<()> {
        let mut events =
            vec![libc::epoll_event { events: 0, u64: 0 }; self.conns.len().clamp(1, 1024)];
        let mut next_sweep = Instant::now() + self.sweep_every;
        loop {
            let now = Instant::now();
            let step = self.cx.clock.tick(now, &self.sys);
            if take_step(self, step, now) {
                self.finish();
                self.cx.active = 0;
                return Ok(());
            }
            for _ in 0..self.runnable.len().min(START_BATCH) {
                let i = self.runnable.pop_front().expect("counted");
                self.start_request(i, Instant::now());
            }
            while let Some(&Reverse((due, i))) = self.timers.peek() {
                if due > now {
                    break;
                }
                self.timers.pop();
                self.start_request(i, Instant::now());
            }
            if now >= next_sweep {
                sweep(self, now);
                next_sweep = now + self.sweep_every;
            }
            if done(self) {
                return Ok(());
            }
            // Sweeps are woken by the tick timerfd; only an open-loop slot, or an end of run
            // that comes before the next tick, needs a timeout on the wait itself.
            let mut wake = self.timers.peek().map(|&Reverse((due, _))| due);
            if let Some(end) = self.cx.clock.next_deadline().filter(|&e| e < next_sweep) {
                wake = Some(wake.map_or(end, |w| w.min(end)));
            }
            let timeout = if self.runnable.is_empty() {
                wake.map(|w| w.saturating_duration_since(now))
            } else {
                Some(Duration::ZERO)
            };
            let n = sys::epoll_wait(&mut self.sys, self.epfd, &mut events, timeout)?;
            for ev in &events[..n] {
                let (flags, token) = (ev.events, ev.u64);
                if token == TICK_TOKEN {
                    sys::drain_timerfd(self.tick_fd);
                } else {
                    self.dispatch(token as u32 as usize, (token >> 32) as u32, flags);
                }
            }
        }
    }

    fn dispatch(&mut self, i: usize, generation: u32, flags: u32) {
        if self.fds[i] < 0 || !self.conns[i].accepts(generation) {
            return;
        }
        match self.conns[i].state() {
            State::Connecting if flags & WRITABLE != 0 => {
                if flags & BROKEN != 0 {
                    if let Some(e) = sys::take_socket_error(&mut self.sys, self.fds[i]) {
                        return self.fail(i, FailureKind::from_io(&e));
                    }
                }
                self.on_connected(i);
            }
            State::Exchanging => {
                if flags & WRITABLE != 0
                    && self.conns[i].sending(self.plan)
                    && self.send_more(i).is_none()
                {
                    return;
                }
                if flags & READABLE != 0 {
                    self.receive(i);
                }
            }
            _ => {}
        }
    }

    /// Does the I/O connection `i`'s machine asks for.
    fn follow(&mut self, i: usize, next: Next) {
        match next {
            // Edge-triggered: the socket's next readiness event carries the exchange on.
            Next::Nothing | Next::Send | Next::Receive => {}
            Next::Connect => self.begin_connect(i),
            Next::Exchange => {
                if let Some(first_write) = self.send_more(i) {
                    // A failed request keeps its origin: it was recorded with it.
                    self.conns[i].first_write(first_write, &self.cx);
                }
            }
            Next::Complete => self.complete(i),
            Next::Fail(kind) => self.fail(i, kind),
            Next::StartSoon(_) => self.runnable.push_back(i),
            Next::StartAt(due) => self.timers.push(Reverse((due, i))),
            Next::Retire => self.close_socket(i),
        }
    }

    /// Starts connection `i`'s next request at `now`.
    fn start_request(&mut self, i: usize, now: Instant) {
        let next = self.conns[i].start(now, &mut self.cx);
        self.follow(i, next);
    }

    fn retire(&mut self, i: usize) {
        self.close_socket(i);
        self.conns[i].retire(&mut self.cx);
    }

    fn begin_connect(&mut self, i: usize) {
        // A socket kept by `--short-sockets reuse` is disconnected, still registered with
        // epoll under its token, and only needs the connect(2).
        if self.fds[i] < 0 {
            if let Err(e) = self.open_socket(i) {
                return self.fail(i, FailureKind::from_io(&e));
            }
        }
        self.conns[i].connecting(Instant::now(), &self.cx);
        match sys::connect(&mut self.sys, self.fds[i], &self.plan.addr) {
            Ok(()) => self.on_connected(i),
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
            Err(e) => self.fail(i, FailureKind::from_io(&e)),
        }
    }

    /// Opens connection `i`'s socket and registers it under a new generation's token. On an
    /// error the socket, if made, is left in `fds[i]` for [`Self::fail`] to close.
    fn open_socket(&mut self, i: usize) -> io::Result<()> {
        let opts = SocketOptions {
            source: self.plan.source_for(self.conns[i].id()),
            ..self.plan.sock
        };
        let fd = sys::open_tcp_socket(&mut self.sys, &self.plan.addr, &opts)?;
        self.fds[i] = fd;
        let token = (u64::from(self.conns[i].renew()) << 32) | i as u64;
        sys::epoll_add(&mut self.sys, self.epfd, fd, INTEREST, token)
    }

    fn on_connected(&mut self, i: usize) {
        let next = self.conns[i].connected(Instant::now(), &mut self.cx);
        self.follow(i, next);
    }

    /// Writes as much of the request as the socket takes. Returns when this call's first
    /// write(2) started, or `None` if the request failed.
    fn send_more(&mut self, i: usize) -> Option<Instant> {
        let mut first = None;
        loop {
            let written = sys::write(&mut self.sys, self.fds[i], self.conns[i].unsent());
            let started = *first.get_or_insert_with(|| self.sys.last_start());
            match written {
                Ok(n) => {
                    if self.conns[i].on_sent(n, self.plan) != Next::Send {
                        return Some(started);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Some(started),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.fail(i, FailureKind::from_io(&e));
                    return None;
                }
            }
        }
    }

    /// Reads and verifies reply bytes until the socket has no more or the reply is whole.
    fn receive(&mut self, i: usize) {
        loop {
            let want = self.conns[i].owed(self.plan).min(self.scratch.len());
            match sys::read(&mut self.sys, self.fds[i], &mut self.scratch[..want]) {
                Ok(n) => match self.conns[i].on_received(&self.scratch[..n], self.plan) {
                    Next::Receive => {}
                    next => return self.follow(i, next),
                },
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.fail(i, FailureKind::from_io(&e)),
            }
        }
    }

    fn complete(&mut self, i: usize) {
        if self.plan.pattern == Pattern::Short {
            let fd = self.fds[i];
            let kept = self.plan.socket_reuse.reuse && sys::disconnect(&mut self.sys, fd).is_ok();
            if !kept {
                // Also after a failed disconnect: the next request then opens a new socket.
                self.close_socket(i);
            }
        }
        // The reply's last read(2) (or the short request's close(2) or disconnect) just
        // ended: its end is the request's end, without another clock read.
        let now = self.sys.last_end();
        let next = self.conns[i].complete(now, &mut self.cx);
        self.follow(i, next);
    }

    fn fail(&mut self, i: usize, kind: FailureKind) {
        self.close_socket(i);
        let now = Instant::now();
        self.conns[i].fail(now, kind, &mut self.cx);
        // A closed socket has nothing in flight: the machine may go on at once.
        let next = self.conns[i].released(now, &mut self.cx);
        self.follow(i, next);
    }
}

super::conn::impl_connections!(Worker);
