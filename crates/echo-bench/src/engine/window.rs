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
            planned_end: None,
            interval: None,
            interruptible: false,
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
        let Some(end) = self.window.end() else {
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
        let end = self.window.end().filter(|_| self.open)?;
        Some(if self.draining {
            end + self.plan.timeout
        } else {
            end
        })
    }

    /// Whether a request of connection starting at `starts_at` would start after a timed
    /// run's window (and so is not made).
    pub(crate) fn after_window(&self, starts_at: Instant) -> bool {
        self.window.end().is_some_and(|end| starts_at >= end)
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

/// A worker's connections as the window's rules see them; the event and ring engines
/// implement this over their connection machines (the `impl_connections!` macro).
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

/// Fails every request whose deadline has passed at `now`.
pub(crate) fn sweep(w: &mut impl Connections, now: Instant) {
    for i in 0..w.count() {
        if w.in_flight(i) && now >= w.deadline(i) {
            w.fail(i, FailureKind::Timeout);
        }
    }
}

/// Does on `w` what the window's `step` at `now` asks ([`RunClock::tick`]); returns whether
/// the worker stops (the drain ran out).
pub(crate) fn take_step(w: &mut impl Connections, step: WindowStep, now: Instant) -> bool {
    match step {
        WindowStep::Run => false,
        WindowStep::BeginDrain(end) => {
            begin_drain(w, end);
            false
        }
        WindowStep::Abandon(end) => {
            abandon(w, end, now);
            true
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
    use super::*;
    use crate::engine::{test_plan as plan, Stop};
    use crate::syscalls::Call;

    const MS: Duration = Duration::from_millis(1);

    fn calls(n: usize) -> SyscallCounters {
        let mut c = SyscallCounters::default();
        for _ in 0..n {
            c.timed(Call::Read, || ());
        }
        c
    }

    #[test]
    fn a_timed_window_opens_after_warmup_closes_drains_then_abandons() {
        // warm-up 100 ms, 1 s measured, --timeout 200 ms, the gate opened at t0: the window
        // is [t0+100ms, t0+1.1s), the drain ends at t0+1.3s.
        let p = plan(Stop::Duration(1000 * MS), 100 * MS, 200 * MS, 1, 1);
        let mut clock = RunClock::new(&p);
        let t0 = Instant::now();
        assert_eq!(
            clock.tick(t0 + 5000 * MS, &calls(0)),
            WindowStep::Run,
            "before the gate"
        );
        assert_eq!(clock.next_deadline(), None);
        clock.open(t0);
        let (start, end) = (t0 + 100 * MS, t0 + 1100 * MS);
        assert_eq!(clock.next_deadline(), Some(end));
        assert_eq!(clock.tick(t0 + 50 * MS, &calls(3)), WindowStep::Run);
        assert_eq!(
            clock.syscalls(&calls(3)).count(Call::Read),
            0,
            "warm-up only: none counted"
        );
        assert_eq!(clock.tick(start, &calls(5)), WindowStep::Run);
        assert_eq!(
            clock.syscalls(&calls(12)).count(Call::Read),
            7,
            "those since the warm-up ended"
        );
        assert_eq!(clock.tick(end - MS, &calls(20)), WindowStep::Run);
        assert!(!clock.after_window(end - MS) && clock.after_window(end));
        assert_eq!(clock.tick(end, &calls(20)), WindowStep::BeginDrain(end));
        assert!(clock.draining);
        assert_eq!(clock.next_deadline(), Some(end + 200 * MS));
        assert_eq!(
            clock.tick(end + 199 * MS, &calls(20)),
            WindowStep::Run,
            "draining once"
        );
        assert_eq!(
            clock.tick(end + 200 * MS, &calls(20)),
            WindowStep::Abandon(end)
        );
        // Requests that started in warm-up use up no rounds; those in the window do.
        let mut left = 10;
        clock.count_round(start - MS, &mut left);
        assert_eq!(left, 10);
        clock.count_round(start, &mut left);
        clock.count_round(end - MS, &mut left);
        assert_eq!(left, 8);
    }

    #[test]
    fn a_rounds_run_has_no_end_and_without_warmup_counts_every_call() {
        let p = plan(Stop::Rounds(10), Duration::ZERO, 200 * MS, 1, 1);
        let mut clock = RunClock::new(&p);
        let t0 = Instant::now();
        clock.open(t0);
        assert_eq!(
            clock.tick(t0 + 3600 * 1000 * MS, &calls(1)),
            WindowStep::Run
        );
        assert_eq!(clock.next_deadline(), None);
        assert!(!clock.after_window(t0 + 3600 * 1000 * MS));
        assert_eq!(clock.syscalls(&calls(4)).count(Call::Read), 4);
    }

    #[test]
    fn workers_get_their_ids_start_together_and_their_results_add_up() {
        // 10 connections numbered from 100 (a shard's), 3 workers: 4 + 3 + 3 ids, every
        // worker past the start gate before it returns, each reporting 1 setup failure, its
        // ids as established, and as many reads.
        let mut p = plan(Stop::Rounds(1), Duration::ZERO, MS, 3, 10);
        p.first_id = 100;
        let seen = std::sync::Mutex::new(Vec::new());
        let window = p.window(Instant::now());
        // Workers that reached the gate, as each one saw it once through: all of them, even
        // when the last one comes late.
        let arrived = std::sync::atomic::AtomicUsize::new(0);
        let saw = std::sync::Mutex::new(Vec::new());
        let out = run_workers(&p, "test", |w, ids| {
            seen.lock().unwrap().push((w, ids.clone()));
            let (arrived, saw) = (&arrived, &saw);
            move |ticket: Ticket<'_>| {
                if w == 2 {
                    // The late worker is the situation under test, not a wait for a condition.
                    std::thread::sleep(50 * MS);
                }
                arrived.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                ticket.wait();
                saw.lock()
                    .unwrap()
                    .push(arrived.load(std::sync::atomic::Ordering::SeqCst));
                Ok(WorkerResult {
                    recorder: Recorder::new(window),
                    connect_hist: hist::new_latency_histogram(),
                    syscalls: calls(ids.len()),
                    setup_failures: 1,
                    established: ids.len() as u64,
                })
            }
        })
        .unwrap();
        let mut seen = seen.into_inner().unwrap();
        seen.sort_by_key(|(w, _)| *w);
        assert_eq!(seen, vec![(0, 100..104), (1, 104..107), (2, 107..110)]);
        assert_eq!(
            (out.established, out.setup_failures, out.threads),
            (10, 3, 3)
        );
        assert_eq!(out.syscalls.count(Call::Read), 10);
        assert_eq!(
            saw.into_inner().unwrap(),
            vec![3, 3, 3],
            "no worker started before the last one reached the gate"
        );
    }

    #[test]
    fn sweeps_run_at_a_tenth_of_the_timeout_within_1_to_100_ms() {
        let every = |t| RunClock::sweep_every(&plan(Stop::Rounds(1), Duration::ZERO, t, 1, 1));
        assert_eq!(every(200 * MS), 20 * MS);
        assert_eq!(every(5 * MS), MS);
        assert_eq!(every(5000 * MS), 100 * MS);
    }

    #[test]
    fn workers_are_threads_but_never_more_than_connections_nor_none() {
        let n = |threads, conns| {
            worker_count(&plan(Stop::Rounds(1), Duration::ZERO, MS, threads, conns))
        };
        assert_eq!(n(2, 100), 2);
        assert_eq!(n(4, 3), 3);
        assert_eq!(n(0, 3), 1);
        assert_eq!(n(4, 0), 1);
    }

    /// Connections as plain vectors, recording what the window's rules did to them.
    struct Fake {
        in_flight: Vec<bool>,
        deadline: Vec<Instant>,
        pacer: Vec<Option<Pacer>>,
        recorder: Recorder,
        failed: Vec<(usize, FailureKind)>,
        retired: Vec<usize>,
    }

    impl Connections for Fake {
        fn count(&self) -> usize {
            self.in_flight.len()
        }
        fn in_flight(&self, i: usize) -> bool {
            self.in_flight[i]
        }
        fn idle(&self, i: usize) -> bool {
            !self.in_flight[i]
        }
        fn deadline(&self, i: usize) -> Instant {
            self.deadline[i]
        }
        fn pacer(&self, i: usize) -> Option<&Pacer> {
            self.pacer[i].as_ref()
        }
        fn pacer_and_recorder(&mut self, i: usize) -> (Option<&mut Pacer>, &mut Recorder) {
            (self.pacer[i].as_mut(), &mut self.recorder)
        }
        fn fail(&mut self, i: usize, kind: FailureKind) {
            self.failed.push((i, kind));
            self.in_flight[i] = false;
        }
        fn retire(&mut self, i: usize) {
            self.retired.push(i);
        }
    }

    fn fake(t0: Instant, in_flight: &[bool], pacers: Vec<Option<Pacer>>) -> Fake {
        Fake {
            in_flight: in_flight.to_vec(),
            deadline: vec![t0; in_flight.len()],
            pacer: pacers,
            recorder: Recorder::new(Window {
                start: t0,
                planned_end: Some(t0 + 1000 * MS),
                interval: None,
                interruptible: true,
            }),
            failed: vec![],
            retired: vec![],
        }
    }

    #[test]
    fn only_requests_in_flight_past_their_deadline_time_out() {
        let t0 = Instant::now();
        let mut w = fake(t0, &[true, true, false], vec![None; 3]);
        w.deadline = vec![t0, t0 + 10 * MS, t0];
        sweep(&mut w, t0);
        assert_eq!(w.failed, vec![(0, FailureKind::Timeout)]);
    }

    #[test]
    fn the_drain_retires_idle_connections_but_keeps_a_slot_owed_to_the_window() {
        let t0 = Instant::now();
        let end = t0 + 1000 * MS;
        // 10 requests/s over 2 connections: each has a slot every 200 ms, connection 1's
        // first at +100 ms. Connection 2 owes one before the end (its next slot is at
        // end - 100 ms); connection 3's next is after the end.
        let mut owes = Pacer::new(t0, 1, 2, 10.0);
        while owes.due() < end - 100 * MS {
            owes.take();
        }
        let mut paid = Pacer::new(t0, 0, 2, 10.0);
        while paid.due() < end {
            paid.take();
        }
        let mut w = fake(
            t0,
            &[false, true, false, false],
            vec![None, None, Some(owes), Some(paid)],
        );
        begin_drain(&mut w, end);
        assert_eq!(w.retired, vec![0, 3]);
    }

    #[test]
    fn abandoning_fails_what_is_in_flight_and_every_unsent_slot_of_the_window() {
        let t0 = Instant::now();
        let end = t0 + 1000 * MS;
        // 100 requests/s on one connection: slots every 10 ms from t0; at the abandon the
        // slots from t0+950ms to the end were never sent: 5 of them, each a timeout.
        let mut p = Pacer::new(t0, 0, 1, 100.0);
        while p.due() < t0 + 950 * MS {
            p.take();
        }
        let mut w = fake(t0, &[true, false], vec![None, Some(p)]);
        abandon(&mut w, end, end + 200 * MS);
        assert_eq!(w.failed, vec![(0, FailureKind::Timeout)]);
        assert_eq!(w.recorder.failed, 5);
        assert_eq!(
            w.pacer[1].unwrap().due(),
            end,
            "the backlog is taken, and the slot at the end (not the window's) left"
        );
    }

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
