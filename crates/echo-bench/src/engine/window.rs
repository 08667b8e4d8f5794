//! What the event and ring engines share around their loops: starting the workers and
//! merging what they hand back ([`run_workers`]), and each worker's view of the measurement
//! window ([`RunClock`]): when warm-up ends, when a timed run's window closes and its drain
//! runs out, which requests count against ROUNDS, and what an open-loop schedule still owes.

use std::io;
use std::ops::Range;
use std::time::{Duration, Instant};

use echolab_core::hist;
use hdrhistogram::Histogram;

use super::{await_start, CpuMeter, Pacer, Plan, RunOutcome};
use crate::gate::{StartGate, Ticket};
use crate::recorder::{FailureKind, Recorder, Window};
use crate::syscalls::SyscallCounters;

/// What one worker hands back.
pub(crate) struct WorkerResult {
    pub(crate) recorder: Recorder,
    pub(crate) connect_hist: Histogram<u64>,
    pub(crate) syscalls: SyscallCounters,
    pub(crate) setup_failures: u64,
    pub(crate) established: u64,
}

/// Connection ids `[first, last)` of worker `w` of `workers` for `conns` connections:
/// contiguous, sizes differing by at most one.
pub(crate) fn share(conns: usize, workers: usize, w: usize) -> Range<usize> {
    let base = conns / workers;
    let extra = conns % workers;
    let first = w * base + w.min(extra);
    first..first + base + usize::from(w < extra)
}

/// Workers of a run: `--threads`, at most one per connection.
pub(crate) fn worker_count(plan: &Plan) -> usize {
    plan.threads.clamp(1, plan.conns.max(1))
}

/// Runs [`worker_count`] workers named `nameW` and merges their results.
/// `body(w, ids)` is called on this thread for worker `w` and its connection ids (global, so
/// `--processes` shards number theirs apart) and returns what the worker thread runs, given
/// its start-gate ticket; the coordinating thread meanwhile passes the gate
/// ([`await_start`]) and meters the run's CPU.
///
/// # Errors
/// A worker failed (its error) or could not be started.
pub(crate) fn run_workers<F>(
    plan: &Plan,
    name: &str,
    body: impl Fn(usize, Range<usize>) -> F,
) -> io::Result<RunOutcome>
where
    F: for<'g> FnOnce(Ticket<'g>) -> io::Result<WorkerResult> + Send,
{
    let workers = worker_count(plan);
    let start_gate = StartGate::new(workers + 1);
    let mut cpu = CpuMeter::start();
    let (start, results) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                let local = share(plan.conns, workers, w);
                let work = body(w, plan.first_id + local.start..plan.first_id + local.end);
                let start = start_gate.ticket();
                // On a failed spawn the closure, and with it the ticket, is dropped, so the
                // gate still opens for the others.
                std::thread::Builder::new()
                    .name(format!("{name}{w}"))
                    .spawn_scoped(s, move || work(start))
            })
            .collect();
        let start = await_start(plan, &start_gate, &mut cpu);
        let results: Vec<io::Result<WorkerResult>> = handles
            .into_iter()
            .map(|h| {
                h.and_then(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(io::Error::other(format!("{name} worker panicked")))
                    })
                })
            })
            .collect();
        (start, results)
    });
    let cpu = cpu.stop();
    let mut out = RunOutcome::empty(plan, start, cpu, workers as u64);
    for r in results {
        let r = r?;
        out.recorder.merge(&r.recorder);
        out.connect_hist.add(&r.connect_hist).expect("same bounds");
        out.syscalls.merge(&r.syscalls);
        out.setup_failures += r.setup_failures;
        out.established += r.established;
    }
    Ok(out)
}

/// What the window asks of a worker at the top of a loop turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WindowStep {
    /// Go on.
    Run,
    /// A timed run's window has just closed at the given instant: no request starts any more
    /// (except open-loop slots it still owes), those in flight finish.
    BeginDrain(Instant),
    /// The drain's `--timeout` ran out: what is still in flight and every unsent slot of the
    /// window (which closed at the given instant) fail by timeout, and the worker stops.
    Abandon(Instant),
}

/// One worker's view of the measurement window.
pub(crate) struct RunClock<'p> {
    plan: &'p Plan,
    /// The window (a placeholder until [`RunClock::open`]).
    pub(crate) window: Window,
    /// The measurements (replaced at [`RunClock::open`]).
    pub(crate) recorder: Recorder,
    /// The window of a timed run has closed.
    pub(crate) draining: bool,
    /// The worker's system calls at the end of warm-up.
    sys_at_window: Option<SyscallCounters>,
    open: bool,
}

impl<'p> RunClock<'p> {
    /// Before the start gate: no window yet.
    pub(crate) fn new(plan: &'p Plan) -> Self {
        let window = Window {
            start: Instant::now(),
            end: None,
            interval: None,
        };
        Self {
            plan,
            window,
            recorder: Recorder::new(window),
            draining: false,
            sys_at_window: None,
            open: false,
        }
    }

    /// The start gate opened at `opened`: the window is set from it.
    pub(crate) fn open(&mut self, opened: Instant) {
        self.window = self.plan.window(opened);
        self.recorder = Recorder::new(self.window);
        self.open = true;
    }

    /// How often deadlines are swept: timeout/10, from 1 ms to 100 ms.
    pub(crate) fn sweep_every(plan: &Plan) -> Duration {
        (plan.timeout / 10).clamp(Duration::from_millis(1), Duration::from_millis(100))
    }

    /// At the top of a loop turn at `now`, with the worker's system calls so far: notes the
    /// end of warm-up and says what the window asks.
    pub(crate) fn tick(&mut self, now: Instant, sys: &SyscallCounters) -> WindowStep {
        if !self.open {
            return WindowStep::Run;
        }
        if self.sys_at_window.is_none() && !self.plan.warmup.is_zero() && now >= self.window.start {
            self.sys_at_window = Some(sys.clone());
        }
        let Some(end) = self.window.end else {
            return WindowStep::Run;
        };
        if self.draining && now >= end + self.plan.timeout {
            WindowStep::Abandon(end)
        } else if now >= end && !self.draining {
            self.draining = true;
            WindowStep::BeginDrain(end)
        } else {
            WindowStep::Run
        }
    }

    /// When the window next needs a turn of the loop: its end, or the drain's; `None` before
    /// the gate or without a timed window.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        let end = self.window.end.filter(|_| self.open)?;
        Some(if self.draining {
            end + self.plan.timeout
        } else {
            end
        })
    }

    /// Whether a request of connection starting at `starts_at` would start after a timed
    /// run's window (and so is not made).
    pub(crate) fn after_window(&self, starts_at: Instant) -> bool {
        self.window.end.is_some_and(|end| starts_at >= end)
    }

    /// A request that started at `origin` ended: it counts against ROUNDS (`rounds_left`)
    /// when it started in the window (the recorder's rule), so warm-up requests never use up
    /// rounds.
    pub(crate) fn count_round(&self, origin: Instant, rounds_left: &mut u64) {
        if self.recorder.in_window(origin) {
            *rounds_left = rounds_left.saturating_sub(1);
        }
    }

    /// The worker's system calls over the window: all of them without warm-up, those since
    /// its end with one (none if the run never got there).
    pub(crate) fn syscalls(&self, sys: &SyscallCounters) -> SyscallCounters {
        match &self.sys_at_window {
            Some(b) => sys.since(b),
            None if !self.plan.warmup.is_zero() => SyscallCounters::default(),
            None => sys.clone(),
        }
    }

    /// What the worker hands back, its recorder taken.
    pub(crate) fn result(
        &mut self,
        sys: &SyscallCounters,
        connect_hist: &mut Histogram<u64>,
        setup_failures: u64,
        established: u64,
    ) -> WorkerResult {
        WorkerResult {
            syscalls: self.syscalls(sys),
            recorder: std::mem::replace(&mut self.recorder, Recorder::new(self.window)),
            connect_hist: std::mem::replace(connect_hist, hist::new_latency_histogram()),
            setup_failures,
            established,
        }
    }
}

/// A worker's connections as the window's rules see them; the event and ring engines keep
/// their own connection states and implement this over them.
pub(crate) trait Connections {
    /// How many connections the worker has.
    fn count(&self) -> usize;
    /// Connection `i` has a connect or an exchange in flight.
    fn in_flight(&self, i: usize) -> bool;
    /// Connection `i` has nothing in flight and may start a request.
    fn idle(&self, i: usize) -> bool;
    /// The deadline of connection `i`'s operation in flight.
    fn deadline(&self, i: usize) -> Instant;
    /// Connection `i`'s open-loop schedule (`None`: closed loop).
    fn pacer(&self, i: usize) -> Option<&Pacer>;
    /// Connection `i`'s schedule and the worker's recorder, borrowed together.
    fn pacer_and_recorder(&mut self, i: usize) -> (Option<&mut Pacer>, &mut Recorder);
    /// Fails connection `i`'s request by `kind` (recorded, socket closed).
    fn fail(&mut self, i: usize, kind: FailureKind);
    /// Connection `i` makes no more requests.
    fn retire(&mut self, i: usize);
}

/// Implements [`Connections`] for an engine's `Worker`, whose `conns[i]` have `state`
/// (`State::Connecting`, `State::Exchanging` and `State::Idle` in scope), `deadline` and
/// `pacer`, whose `clock` is a [`RunClock`], and whose own `fail` and `retire` do the work.
macro_rules! impl_connections {
    ($worker:ident) => {
        impl $crate::engine::window::Connections for $worker<'_> {
            fn count(&self) -> usize {
                self.conns.len()
            }

            fn in_flight(&self, i: usize) -> bool {
                matches!(self.conns[i].state, State::Connecting | State::Exchanging)
            }

            fn idle(&self, i: usize) -> bool {
                self.conns[i].state == State::Idle
            }

            fn deadline(&self, i: usize) -> std::time::Instant {
                self.conns[i].deadline
            }

            fn pacer(&self, i: usize) -> Option<&$crate::engine::Pacer> {
                self.conns[i].pacer.as_ref()
            }

            fn pacer_and_recorder(
                &mut self,
                i: usize,
            ) -> (
                Option<&mut $crate::engine::Pacer>,
                &mut $crate::recorder::Recorder,
            ) {
                (self.conns[i].pacer.as_mut(), &mut self.clock.recorder)
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

/// Fails every request whose deadline has passed at `now`.
pub(crate) fn sweep(w: &mut impl Connections, now: Instant) {
    for i in 0..w.count() {
        if w.in_flight(i) && now >= w.deadline(i) {
            w.fail(i, FailureKind::Timeout);
        }
    }
}

/// The window of a timed run closed at `end`: connections with nothing in flight retire,
/// except open-loop ones whose next slot was due before `end` (that request belongs to the
/// window and is still sent); the rest finish what they have in flight.
pub(crate) fn begin_drain(w: &mut impl Connections, end: Instant) {
    for i in 0..w.count() {
        let owes_slot = w.pacer(i).is_some_and(|p| p.due() < end);
        if w.idle(i) && !owes_slot {
            w.retire(i);
        }
    }
}

/// The drain's `--timeout` ran out at `now`: what is still in flight, and every open-loop slot
/// of the window (closed at `end`) not yet sent, fail by timeout, each counted against the
/// window it started in, so the schedule's backlog is not silently dropped.
pub(crate) fn abandon(w: &mut impl Connections, end: Instant, now: Instant) {
    for i in 0..w.count() {
        if w.in_flight(i) {
            w.fail(i, FailureKind::Timeout);
        }
        if let (Some(p), recorder) = w.pacer_and_recorder(i) {
            while p.due() < end {
                let slot = p.take();
                recorder.failure(slot, now, FailureKind::Timeout);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::share;

    #[test]
    fn shares_cover_all_connections_once() {
        for (conns, workers) in [(10, 3), (2, 2), (5000, 2), (1, 1)] {
            let ranges: Vec<_> = (0..workers).map(|w| share(conns, workers, w)).collect();
            assert_eq!(ranges[0].start, 0);
            assert_eq!(ranges[workers - 1].end, conns);
            assert!(ranges.windows(2).all(|p| p[0].end == p[1].start));
            assert!(ranges
                .iter()
                .all(|r| r.len() == conns / workers || r.len() == conns / workers + 1));
        }
    }
}
