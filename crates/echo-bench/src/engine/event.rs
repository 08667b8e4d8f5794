//! The event engine: `--threads` workers, each an epoll reactor over its share of the
//! connections, every connection a small state machine driven closed-loop (the next request
//! leaves when the previous reply is verified) or open-loop (by its [`Pacer`]).
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

use echolab_core::hist;
use hdrhistogram::Histogram;

use super::window::{
    abandon, begin_drain, impl_connections, run_workers, sweep, worker_count, RunClock, WindowStep,
    WorkerResult,
};
use super::{Pacer, Pattern, Plan, RunOutcome};
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// No request in flight: between requests, or waiting for an open-loop slot.
    Idle,
    /// Non-blocking connect(2) in progress.
    Connecting,
    /// Request being written and/or reply being read.
    Exchanging,
    /// Storm: proven and kept open until the whole storm is established.
    Held,
    /// No more requests.
    Done,
}

struct Conn {
    /// Global connection index (for the open-loop stagger).
    id: usize,
    fd: RawFd,
    /// Bumped for every new socket, so that a stale event of a closed socket is ignored.
    generation: u32,
    state: State,
    sent: usize,
    received: usize,
    /// Latency origin: connect start (short, storm), send start (long), or intended time.
    origin: Instant,
    connect_start: Instant,
    deadline: Instant,
    rounds_left: u64,
    pacer: Option<Pacer>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Long mode: connecting everything before the start barrier; nothing is recorded.
    Setup,
    Run,
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
    sys: SyscallCounters,
    /// The measurement window, the recorder and the drain.
    clock: RunClock<'p>,
    connect_hist: Histogram<u64>,
    phase: Phase,
    /// Connections not yet Done or Held.
    active: usize,
    /// Connections whose next request starts at a coming loop turn, [`START_BATCH`] per turn:
    /// the first requests of the run, and requests after a failure (starting those at once
    /// could recurse without bound when connect(2) fails synchronously).
    runnable: VecDeque<usize>,
    /// Open-loop slots: (intended send time, connection index).
    timers: BinaryHeap<Reverse<(Instant, usize)>>,
    scratch: Vec<u8>,
    setup_failures: u64,
    established: u64,
    sweep_every: Duration,
}

impl Drop for Worker<'_> {
    fn drop(&mut self) {
        for c in &mut self.conns {
            if c.fd >= 0 {
                sys::close(&mut self.sys, c.fd);
                c.fd = -1;
            }
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
        let conns = ids
            .map(|id| Conn {
                id,
                fd: -1,
                generation: 0,
                state: State::Idle,
                sent: 0,
                received: 0,
                origin: now,
                connect_start: now,
                deadline: now,
                rounds_left: plan.rounds(),
                pacer: None,
            })
            .collect::<Vec<_>>();
        let mut worker = Self {
            plan,
            epfd,
            tick_fd,
            active: conns.len(),
            conns,
            sys: SyscallCounters::default(),
            clock: RunClock::new(plan),
            connect_hist: hist::new_latency_histogram(),
            phase: Phase::Setup,
            runnable: VecDeque::new(),
            timers: BinaryHeap::new(),
            scratch: vec![0; plan.expected_reply.len().clamp(1, 64 * 1024)],
            setup_failures: 0,
            established: 0,
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
            self.pump(|w| w.conns.iter().all(|c| c.state != State::Connecting))?;
        }
        let opened = start.wait();
        self.phase = Phase::Run;
        self.clock.open(opened);
        let now = Instant::now();
        for i in 0..self.conns.len() {
            self.conns[i].pacer = self.plan.pacer(self.conns[i].id, opened);
            self.next_request(i, now, false);
        }
        let result = self.pump(|w| w.active == 0);
        if self.plan.pattern == Pattern::Storm {
            // Every worker reaches this point, also on error, so the gate always opens.
            hold.wait();
        } else {
            drop(hold);
        }
        result?;
        self.finish();
        Ok(self.clock.result(
            &self.sys,
            &mut self.connect_hist,
            self.setup_failures,
            self.established,
        ))
    }

    /// Closes every socket still open (held storm connections, a timed run's last requests).
    fn finish(&mut self) {
        for c in &mut self.conns {
            if c.fd >= 0 {
                sys::close(&mut self.sys, c.fd);
                c.fd = -1;
            }
            c.state = State::Done;
        }
    }

    /// The event loop: runs until `done` holds, or until the end of a timed run.
    fn pump(&mut self, done: impl Fn(&Self) -> bool) -> io::Result<()> {
        let mut events =
            vec![libc::epoll_event { events: 0, u64: 0 }; self.conns.len().clamp(1, 1024)];
        let mut next_sweep = Instant::now() + self.sweep_every;
        loop {
            let now = Instant::now();
            match self.clock.tick(now, &self.sys) {
                WindowStep::Run => {}
                WindowStep::BeginDrain(end) => begin_drain(self, end),
                WindowStep::Abandon(end) => {
                    abandon(self, end, now);
                    self.finish();
                    self.active = 0;
                    return Ok(());
                }
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
            if let Some(end) = self.clock.next_deadline().filter(|&e| e < next_sweep) {
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
        let c = &self.conns[i];
        if c.generation != generation || c.fd < 0 {
            return;
        }
        match c.state {
            State::Connecting if flags & WRITABLE != 0 => {
                if flags & BROKEN != 0 {
                    let fd = c.fd;
                    if let Some(e) = sys::take_socket_error(&mut self.sys, fd) {
                        return self.fail(i, FailureKind::from_io(&e));
                    }
                }
                self.on_connected(i);
            }
            State::Exchanging => {
                if flags & WRITABLE != 0
                    && c.sent < self.plan.request.len()
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

    /// Schedules connection `i`'s next request after one ended at `now`: at once (closed loop
    /// or a late open-loop slot) or at its slot. `direct` starts it within this call; failures
    /// pass `false` and go through the runnable queue.
    fn next_request(&mut self, i: usize, now: Instant, direct: bool) {
        let c = &mut self.conns[i];
        c.state = State::Idle;
        if let Some(p) = &c.pacer {
            if p.due() > now {
                self.timers.push(Reverse((p.due(), i)));
                return;
            }
        }
        if direct {
            self.start_request(i, now);
        } else {
            self.runnable.push_back(i);
        }
    }

    /// Starts connection `i`'s next request at `now`.
    fn start_request(&mut self, i: usize, now: Instant) {
        let c = &mut self.conns[i];
        if c.state != State::Idle {
            return;
        }
        // A request starts at its slot in open loop (however late it is sent), else now; one
        // that would start after a timed run's window is not made.
        let starts_at = c.pacer.as_ref().map_or(now, Pacer::due);
        let ended = self.clock.after_window(starts_at);
        if c.rounds_left == 0 || ended {
            return self.retire(i);
        }
        c.origin = c.pacer.as_mut().map_or(now, Pacer::take);
        if self.plan.pattern == Pattern::Long && c.fd >= 0 {
            self.begin_send(i, now);
        } else {
            self.begin_connect(i);
        }
    }

    fn retire(&mut self, i: usize) {
        let c = &mut self.conns[i];
        if c.fd >= 0 {
            sys::close(&mut self.sys, c.fd);
            c.fd = -1;
        }
        if !matches!(c.state, State::Done | State::Held) {
            self.active -= 1;
        }
        c.state = State::Done;
    }

    fn begin_connect(&mut self, i: usize) {
        // A socket kept by `--short-sockets reuse` is disconnected, still registered with
        // epoll under its token, and only needs the connect(2).
        if self.conns[i].fd < 0 {
            if let Err(e) = self.open_socket(i) {
                return self.fail(i, FailureKind::from_io(&e));
            }
        }
        let fd = self.conns[i].fd;
        let now = Instant::now();
        let c = &mut self.conns[i];
        c.connect_start = now;
        c.deadline = now + self.plan.timeout;
        c.state = State::Connecting;
        match sys::connect(&mut self.sys, fd, &self.plan.addr) {
            Ok(()) => self.on_connected(i),
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
            Err(e) => self.fail(i, FailureKind::from_io(&e)),
        }
    }

    /// Opens connection `i`'s socket and registers it under a new generation's token. On an
    /// error the socket, if made, is left in `conns[i].fd` for [`Self::fail`] to close.
    fn open_socket(&mut self, i: usize) -> io::Result<()> {
        let opts = SocketOptions {
            source: self.plan.source_for(self.conns[i].id),
            ..self.plan.sock
        };
        let fd = sys::open_tcp_socket(&mut self.sys, &self.plan.addr, &opts)?;
        let c = &mut self.conns[i];
        c.fd = fd;
        c.generation = c.generation.wrapping_add(1);
        let token = (u64::from(c.generation) << 32) | i as u64;
        sys::epoll_add(&mut self.sys, self.epfd, fd, INTEREST, token)
    }

    fn on_connected(&mut self, i: usize) {
        let now = Instant::now();
        let c = &mut self.conns[i];
        hist::record_ns(
            &mut self.connect_hist,
            (now - c.connect_start).as_nanos() as u64,
        );
        if self.phase == Phase::Setup {
            c.state = State::Idle;
            return;
        }
        self.begin_send(i, now);
    }

    /// Sends connection `i`'s request; `now` is at most a few hundred nanoseconds old.
    fn begin_send(&mut self, i: usize, now: Instant) {
        let c = &mut self.conns[i];
        let closed_loop_long = self.plan.pattern == Pattern::Long && c.pacer.is_none();
        if closed_loop_long {
            c.origin = now;
        }
        c.sent = 0;
        c.received = 0;
        c.deadline = now + self.plan.timeout;
        c.state = State::Exchanging;
        if let Some(first_write) = self.send_more(i) {
            if closed_loop_long {
                // The application RTT starts where the request's first write(2) did. A
                // failed request keeps `now`: it was recorded already.
                self.conns[i].origin = first_write;
            }
        }
    }

    /// Writes as much of the request as the socket takes. Returns when this call's first
    /// write(2) started, or `None` if the request failed.
    fn send_more(&mut self, i: usize) -> Option<Instant> {
        let request = &self.plan.request;
        let mut first = None;
        loop {
            let c = &mut self.conns[i];
            let written = sys::write(&mut self.sys, c.fd, &request[c.sent..]);
            let started = *first.get_or_insert_with(|| self.sys.last_start());
            match written {
                Ok(n) => {
                    c.sent += n;
                    if c.sent == request.len() {
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

    /// Reads and verifies reply bytes; completes the request when all have arrived. Reads
    /// never ask for more than the reply still owes, so no byte of a later reply is consumed.
    fn receive(&mut self, i: usize) {
        let expected = &self.plan.expected_reply;
        loop {
            let c = &mut self.conns[i];
            let want = (expected.len() - c.received).min(self.scratch.len());
            match sys::read(&mut self.sys, c.fd, &mut self.scratch[..want]) {
                Ok(0) => return self.fail(i, FailureKind::Eof),
                Ok(n) => {
                    if self.scratch[..n] != expected[c.received..c.received + n] {
                        return self.fail(i, FailureKind::Mismatch);
                    }
                    c.received += n;
                    if c.received == expected.len() {
                        return self.complete(i);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.fail(i, FailureKind::from_io(&e)),
            }
        }
    }

    fn complete(&mut self, i: usize) {
        let c = &mut self.conns[i];
        if self.plan.pattern == Pattern::Short {
            let kept = self.plan.socket_reuse.reuse && sys::disconnect(&mut self.sys, c.fd).is_ok();
            if !kept {
                // Also after a failed disconnect: the next request then opens a new socket.
                sys::close(&mut self.sys, c.fd);
                c.fd = -1;
            }
        }
        // The reply's last read(2) (or the short request's close(2) or disconnect) just
        // ended: its end is the request's end, without another clock read.
        let now = self.sys.last_end();
        let latency = now.saturating_duration_since(c.origin).as_nanos() as u64;
        self.clock.recorder.ok(
            c.origin,
            now,
            latency,
            self.plan.expected_reply.len() as u64,
        );
        if self.plan.pattern == Pattern::Storm {
            c.state = State::Held;
            self.established += 1;
            self.active -= 1;
            return;
        }
        self.count_round(i);
        self.next_request(i, now, true);
    }

    /// A request of connection `i` ended; it counts against ROUNDS when it started in the
    /// window (the recorder's rule), so warm-up requests never use up rounds.
    fn count_round(&mut self, i: usize) {
        let c = &mut self.conns[i];
        self.clock.count_round(c.origin, &mut c.rounds_left);
    }

    fn fail(&mut self, i: usize, kind: FailureKind) {
        let c = &mut self.conns[i];
        if c.fd >= 0 {
            sys::close(&mut self.sys, c.fd);
            c.fd = -1;
        }
        if self.phase == Phase::Setup {
            // Retried as the first request of the run, where it is counted.
            self.setup_failures += 1;
            c.state = State::Idle;
            return;
        }
        let now = Instant::now();
        self.clock.recorder.failure(c.origin, now, kind);
        if self.plan.pattern == Pattern::Storm {
            c.state = State::Done;
            self.active -= 1;
            return;
        }
        self.count_round(i);
        self.next_request(i, now, false);
    }
}

impl_connections!(Worker);
