//! One connection's request cycle as a state machine without I/O, shared by the event and
//! ring engines: what a connection does next given what its I/O reported.
//!
//! The engines own the sockets and the system calls (epoll and read/write, or io_uring
//! operations); they tell a [`Conn`] what happened (connected, n bytes sent, reply bytes
//! received, a failure) with the instant it happened, and the [`Conn`] answers with the
//! [`Next`] I/O to do. What every connection of a worker shares (the plan, the measurement
//! window and its recorder, the counters a worker reports) is the worker's [`Context`].
//!
//! A request's cycle: Idle → (Connecting →) Exchanging → Idle, Held (a storm's proven
//! connection) or Done; a failure goes through Closing, where the engine releases the
//! socket (at once, or once the ring has returned every operation of it) before the next
//! request may start.

use std::time::Instant;

use echolab_core::hist;
use hdrhistogram::Histogram;

use super::request::Request;
use super::window::{RunClock, WorkerResult};
use super::{Pacer, Pattern, Plan};
use crate::recorder::FailureKind;
use crate::syscalls::SyscallCounters;

/// Where a connection is in its request cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// No request in flight: between requests, or waiting for an open-loop slot.
    Idle,
    /// connect(2) made, its outcome not yet reported.
    Connecting,
    /// Request being sent and/or reply being received.
    Exchanging,
    /// Storm: proven and kept open until the whole storm is established.
    Held,
    /// The request failed; the engine is releasing the socket ([`Conn::released`]).
    Closing,
    /// No more requests.
    Done,
}

/// Where a worker is in its run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Long mode: connecting everything before the start gate; nothing is recorded.
    Setup,
    /// From the start gate on.
    Run,
}

/// The I/O a [`Conn`] asks of its engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Nothing new: wait for the I/O in flight or for a later call.
    Nothing,
    /// Open a socket unless one is kept (`--short-sockets reuse`), then connect it and call
    /// [`Conn::connecting`] as connect(2) is made.
    Connect,
    /// A new request: send [`Conn::unsent`] and receive the reply's [`Conn::owed`] bytes.
    Exchange,
    /// Send the rest of the request, [`Conn::unsent`].
    Send,
    /// Receive the rest of the reply, [`Conn::owed`] bytes.
    Receive,
    /// The reply is complete and verified: end the request's I/O (a short connection's
    /// disconnect or close) and call [`Conn::complete`] with the instant it ended.
    Complete,
    /// The request failed for this reason: release the socket, then call [`Conn::fail`] and,
    /// once nothing of the socket is in flight, [`Conn::released`].
    Fail(FailureKind),
    /// Start the next request ([`Conn::start`]) at a coming loop turn, not within this call:
    /// after a failure, starting at once could recurse without bound when socket(2) or
    /// connect(2) keeps failing synchronously. The instant is the `now` it was decided at,
    /// for an engine that keeps these in its timer queue.
    StartSoon(Instant),
    /// Start the next request ([`Conn::start`]) at this open-loop slot.
    StartAt(Instant),
    /// No more requests: the socket may go.
    Retire,
}

/// What a worker's connections share: the plan, the run's phase and window, and the totals
/// the worker hands back.
pub(crate) struct Context<'p> {
    /// The workload.
    pub(crate) plan: &'p Plan,
    /// The measurement window and the recorder.
    pub(crate) clock: RunClock<'p>,
    /// Connect latencies (connect(2) made until connected), nanoseconds.
    pub(crate) connect_hist: Histogram<u64>,
    /// Setup (long mode, before the gate) or run.
    pub(crate) phase: Phase,
    /// Connections not yet Done or Held.
    pub(crate) active: usize,
    /// Long mode: connects that failed before the gate (retried in the run).
    pub(crate) setup_failures: u64,
    /// Storm connections proven and held.
    pub(crate) established: u64,
}

impl<'p> Context<'p> {
    /// A worker's context for `conns` connections, before the start gate.
    pub(crate) fn new(plan: &'p Plan, conns: usize) -> Self {
        Self {
            plan,
            clock: RunClock::new(plan),
            connect_hist: hist::new_latency_histogram(),
            phase: Phase::Setup,
            active: conns,
            setup_failures: 0,
            established: 0,
        }
    }

    /// The start gate opened at `opened`: the run begins.
    pub(crate) fn open(&mut self, opened: Instant) {
        self.phase = Phase::Run;
        self.clock.open(opened);
    }

    /// What the worker hands back, given its system calls `sys`.
    pub(crate) fn result(&mut self, sys: &SyscallCounters) -> WorkerResult {
        self.clock.result(
            sys,
            &mut self.connect_hist,
            self.setup_failures,
            self.established,
        )
    }
}

/// One connection's request cycle.
#[derive(Debug)]
pub(crate) struct Conn {
    /// Global connection index (the open-loop stagger, the source address).
    id: usize,
    /// Bumped by the engine for every socket or request it must tell apart from earlier
    /// ones ([`Conn::renew`]), so that a stale event or completion is ignored.
    generation: u32,
    state: State,
    /// A long connection's socket is connected and may carry the next request.
    connected: bool,
    /// Request bytes sent so far.
    sent: usize,
    /// Reply bytes received and verified so far.
    received: usize,
    /// Latency origin: connect start (short, storm), send start (closed-loop long), or the
    /// pacer's intended time (open loop).
    origin: Instant,
    connect_start: Instant,
    /// When the operation in flight times out.
    deadline: Instant,
    rounds_left: u64,
    pacer: Option<Pacer>,
    /// This connection's request, stamped anew for every exchange.
    request: Request,
}

impl Conn {
    /// Connection `id` of `plan`, idle with [`Plan::rounds`] requests to make; `now` fills
    /// the instants until they mean something.
    pub(crate) fn new(id: usize, plan: &Plan, now: Instant) -> Self {
        Self {
            id,
            generation: 0,
            state: State::Idle,
            connected: false,
            sent: 0,
            received: 0,
            origin: now,
            connect_start: now,
            deadline: now,
            rounds_left: plan.rounds(),
            pacer: None,
            request: Request::new(plan, id),
        }
    }

    /// Global connection index.
    pub(crate) fn id(&self) -> usize {
        self.id
    }

    /// Where the connection is in its request cycle.
    pub(crate) fn state(&self) -> State {
        self.state
    }

    /// A connect or an exchange is in flight.
    pub(crate) fn in_flight(&self) -> bool {
        matches!(self.state, State::Connecting | State::Exchanging)
    }

    /// The deadline of the operation in flight.
    pub(crate) fn deadline(&self) -> Instant {
        self.deadline
    }

    /// The open-loop schedule (`None`: closed loop).
    pub(crate) fn pacer(&self) -> Option<&Pacer> {
        self.pacer.as_ref()
    }

    /// The open-loop schedule, to take slots from (the window's abandon).
    pub(crate) fn pacer_mut(&mut self) -> Option<&mut Pacer> {
        self.pacer.as_mut()
    }

    /// The current generation.
    pub(crate) fn generation(&self) -> u32 {
        self.generation
    }

    /// Starts a new generation and returns it: events tagged with an older one are stale.
    pub(crate) fn renew(&mut self) -> u32 {
        self.generation = self.generation.wrapping_add(1);
        self.generation
    }

    /// Whether an event tagged `generation` is for the operation in flight; any other (a
    /// closed socket's, an earlier request's, one after the request ended) is ignored.
    pub(crate) fn accepts(&self, generation: u32) -> bool {
        self.generation == generation && self.in_flight()
    }

    /// The start gate opened at `opened` (the context is open): the connection takes its
    /// open-loop schedule, if any, and its first request of the run is scheduled at `now`
    /// ([`Conn::schedule`]).
    pub(crate) fn begin_run(
        &mut self,
        opened: Instant,
        now: Instant,
        direct: bool,
        cx: &mut Context<'_>,
    ) -> Next {
        self.pacer = cx.plan.pacer(self.id, opened);
        self.schedule(now, direct, cx)
    }

    /// Schedules the next request after one ended at `now`: at once (closed loop or a late
    /// open-loop slot) or at its slot. `direct` starts it within this call; `false` answers
    /// [`Next::StartSoon`] instead. The state is left as it is: only an Idle connection starts.
    pub(crate) fn schedule(&mut self, now: Instant, direct: bool, cx: &mut Context<'_>) -> Next {
        match &self.pacer {
            Some(p) if p.due() > now => Next::StartAt(p.due()),
            _ if direct => self.start(now, cx),
            _ => Next::StartSoon(now),
        }
    }

    /// Starts the next request at `now`: [`Next::Retire`] when no more are to be made,
    /// [`Next::Exchange`] on a connected long connection, else [`Next::Connect`];
    /// [`Next::Nothing`] unless Idle.
    pub(crate) fn start(&mut self, now: Instant, cx: &mut Context<'_>) -> Next {
        if self.state != State::Idle {
            return Next::Nothing;
        }
        // A request starts at its slot in open loop (however late it is sent), else now; one
        // that would start after a timed run's window is not made.
        let starts_at = self.pacer.as_ref().map_or(now, Pacer::due);
        if self.rounds_left == 0 || cx.clock.after_window(starts_at) {
            self.retire(cx);
            return Next::Retire;
        }
        self.origin = self.pacer.as_mut().map_or(now, Pacer::take);
        if cx.plan.pattern == Pattern::Long && self.connected {
            self.begin_exchange(now, cx)
        } else {
            Next::Connect
        }
    }

    /// connect(2) is made at `now`; its deadline runs from here.
    pub(crate) fn connecting(&mut self, now: Instant, cx: &Context<'_>) {
        self.connect_start = now;
        self.deadline = now + cx.plan.timeout;
        self.state = State::Connecting;
    }

    /// The connect reported success at `now`: in setup the connection waits for the gate,
    /// in the run its request is exchanged.
    pub(crate) fn connected(&mut self, now: Instant, cx: &mut Context<'_>) -> Next {
        // A connect takes more than 1 ns and less than an hour (its deadline is --timeout).
        let _ = hist::record_ns(
            &mut cx.connect_hist,
            (now - self.connect_start).as_nanos() as u64,
        );
        self.connected = true;
        if cx.phase == Phase::Setup {
            self.state = State::Idle;
            return Next::Nothing;
        }
        self.begin_exchange(now, cx)
    }

    /// A closed-loop long connection times its application round trip from the send, not
    /// from a connect or a slot.
    fn closed_loop_long(&self, cx: &Context<'_>) -> bool {
        cx.plan.pattern == Pattern::Long && self.pacer.is_none()
    }

    fn begin_exchange(&mut self, now: Instant, cx: &Context<'_>) -> Next {
        if self.closed_loop_long(cx) {
            self.origin = now;
        }
        self.sent = 0;
        self.received = 0;
        // Nothing of the previous request's bytes is still to be sent: its reply came back
        // whole, or it failed and the engine released its socket.
        self.request.next();
        self.deadline = now + cx.plan.timeout;
        self.state = State::Exchanging;
        Next::Exchange
    }

    /// The request's first write started at `at`, a little after [`Next::Exchange`] was
    /// answered: a closed-loop long request's latency starts there instead.
    pub(crate) fn first_write(&mut self, at: Instant, cx: &Context<'_>) {
        if self.closed_loop_long(cx) {
            self.origin = at;
        }
    }

    /// Whether request bytes remain to be sent.
    pub(crate) fn sending(&self, plan: &Plan) -> bool {
        self.sent < plan.request.len()
    }

    /// The request bytes not yet sent (this connection's stamped request, which stays where
    /// it is, unchanged, until the next request starts).
    pub(crate) fn unsent(&self) -> &[u8] {
        &self.request.bytes()[self.sent..]
    }

    /// Reply bytes still owed; a receive never asks for more, so no byte of a later reply
    /// is taken.
    pub(crate) fn owed(&self, plan: &Plan) -> usize {
        plan.reply_len() - self.received
    }

    /// `n` more request bytes went out: [`Next::Send`] while some remain, else
    /// [`Next::Nothing`] (the reply is being received).
    pub(crate) fn on_sent(&mut self, n: usize, plan: &Plan) -> Next {
        self.sent += n;
        if self.sending(plan) {
            Next::Send
        } else {
            Next::Nothing
        }
    }

    /// Reply bytes arrived (empty: the peer closed): [`Next::Receive`] for more,
    /// [`Next::Complete`] when the reply is whole, or [`Next::Fail`] on EOF, on another
    /// request's echo or on a byte that differs from the expected reply ([`Request::check`]).
    /// At most [`Conn::owed`] bytes.
    pub(crate) fn on_received(&mut self, bytes: &[u8], plan: &Plan) -> Next {
        if bytes.is_empty() {
            return Next::Fail(FailureKind::Eof);
        }
        if let Err(kind) = self.request.check(&plan.reply, self.received, bytes) {
            return Next::Fail(kind);
        }
        let end = self.received + bytes.len();
        self.received = end;
        if end < plan.reply_len() {
            Next::Receive
        } else {
            Next::Complete
        }
    }

    /// The request's last I/O ended at `now` after [`Next::Complete`]: records it, then holds
    /// a storm connection or schedules the next request ([`Conn::schedule`], direct).
    pub(crate) fn complete(&mut self, now: Instant, cx: &mut Context<'_>) -> Next {
        let latency = now.saturating_duration_since(self.origin).as_nanos() as u64;
        let bytes = cx.plan.reply_len() as u64;
        cx.clock.recorder.ok(self.origin, now, latency, bytes);
        if cx.plan.pattern == Pattern::Short {
            // The engine disconnected or closed the socket: the next request connects.
            self.connected = false;
        }
        if cx.plan.pattern == Pattern::Storm {
            self.state = State::Held;
            cx.established += 1;
            cx.active -= 1;
            return Next::Nothing;
        }
        cx.clock.count_round(self.origin, &mut self.rounds_left);
        self.state = State::Idle;
        self.schedule(now, true, cx)
    }

    /// The request failed for `kind`, noticed at `now`, and the engine has closed the socket:
    /// recorded (in setup, only counted), then Closing until [`Conn::released`]; a storm
    /// connection is Done.
    pub(crate) fn fail(&mut self, now: Instant, kind: FailureKind, cx: &mut Context<'_>) {
        self.connected = false;
        if cx.phase == Phase::Setup {
            // Retried as the first request of the run, where it is counted.
            cx.setup_failures += 1;
            self.state = State::Closing;
            return;
        }
        cx.clock.recorder.failure(self.origin, now, kind);
        if cx.plan.pattern == Pattern::Storm {
            self.state = State::Done;
            cx.active -= 1;
            return;
        }
        cx.clock.count_round(self.origin, &mut self.rounds_left);
        self.state = State::Closing;
    }

    /// Whether a failed request is still releasing its socket.
    pub(crate) fn closing(&self) -> bool {
        self.state == State::Closing
    }

    /// Nothing of the failed request's socket is in flight any more at `now`: Idle, and in
    /// the run the next request is scheduled ([`Conn::schedule`], not direct).
    pub(crate) fn released(&mut self, now: Instant, cx: &mut Context<'_>) -> Next {
        if self.state != State::Closing {
            return Next::Nothing;
        }
        self.state = State::Idle;
        if cx.phase == Phase::Run {
            self.schedule(now, false, cx)
        } else {
            Next::Nothing
        }
    }

    /// No more requests: Done, and no longer active.
    pub(crate) fn retire(&mut self, cx: &mut Context<'_>) {
        if !matches!(self.state, State::Done | State::Held) {
            cx.active -= 1;
        }
        self.state = State::Done;
    }

    /// The worker stops: Done, whatever was in flight (the counters no longer matter).
    pub(crate) fn finish(&mut self) {
        self.state = State::Done;
    }
}

/// Implements [`Connections`](super::window::Connections) for an engine's `Worker`, whose `conns` are
/// [`Conn`]s, whose `cx` is their [`Context`], and
/// whose own `fail` and `retire` do the work; and the worker's `open_run`, by its own
/// `follow(i, next)` doing the I/O a [`Next`] asks.
macro_rules! impl_connections {
    ($worker:ident) => {
        impl $worker<'_> {
            /// The start gate opened at `opened`: the run begins, and every connection's first
            /// request is scheduled ([`Conn::schedule`] with
            /// `direct`).
            fn open_run(&mut self, opened: std::time::Instant, direct: bool) {
                self.cx.open(opened);
                let now = std::time::Instant::now();
                for i in 0..self.conns.len() {
                    let next = self.conns[i].begin_run(opened, now, direct, &mut self.cx);
                    self.follow(i, next);
                }
            }
        }

        impl $crate::engine::window::Connections for $worker<'_> {
            fn count(&self) -> usize {
                self.conns.len()
            }

            fn in_flight(&self, i: usize) -> bool {
                self.conns[i].in_flight()
            }

            fn idle(&self, i: usize) -> bool {
                self.conns[i].state() == $crate::engine::conn::State::Idle
            }

            fn deadline(&self, i: usize) -> std::time::Instant {
                self.conns[i].deadline()
            }

            fn pacer(&self, i: usize) -> Option<&$crate::engine::Pacer> {
                self.conns[i].pacer()
            }

            fn pacer_and_recorder(
                &mut self,
                i: usize,
            ) -> (
                Option<&mut $crate::engine::Pacer>,
                &mut $crate::recorder::Recorder,
            ) {
                (self.conns[i].pacer_mut(), &mut self.cx.clock.recorder)
            }

            fn fail(&mut self, i: usize, kind: $crate::recorder::FailureKind) {
                $worker::fail(self, i, kind);
            }

            fn retire(&mut self, i: usize) {
                $worker::retire(self, i);
            }
        }
    };
}
pub(crate) use impl_connections;

#[cfg(test)]
#[path = "conn_tests.rs"]
mod tests;
