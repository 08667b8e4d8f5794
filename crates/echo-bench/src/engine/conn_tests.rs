//! The connection machine driven by synthetic events, no sockets.
use std::time::Duration;

use super::*;
use crate::engine::{test_plan, Reply, Stop};
use echolab_core::protocol;

const MS: Duration = Duration::from_millis(1);

/// One connection's plan: `pattern`, `rounds` requests, "ping" echoed (too short for a
/// stamp, so every request is those bytes), `--timeout` 1 s, and with `rate` an open loop
/// over 2 connections.
fn plan(pattern: Pattern, rounds: u64, rate: Option<f64>) -> Plan {
    let mut p = test_plan(Stop::Rounds(rounds), Duration::ZERO, 1000 * MS, 1, 2);
    p.pattern = pattern;
    p.rate = rate;
    p.request = b"ping".to_vec();
    p.reply = Reply::Echo;
    p
}

/// A context before the start gate, and its connection 1, idle.
fn before_gate(p: &Plan, t0: Instant) -> (Context<'_>, Conn) {
    (Context::new(p, 1), Conn::new(1, p, t0))
}

/// A context whose run opened at `t0`, and its connection 1, idle.
fn opened(p: &Plan, t0: Instant) -> (Context<'_>, Conn) {
    let (mut cx, mut c) = before_gate(p, t0);
    cx.open(t0);
    c.begin_run(t0, t0, false, &mut cx);
    (cx, c)
}

/// A context whose run opened at `t0`, and its connection 1 connecting since `t0`.
fn connecting(p: &Plan, t0: Instant) -> (Context<'_>, Conn) {
    let (mut cx, mut c) = opened(p, t0);
    assert_eq!(c.start(t0, &mut cx), Next::Connect);
    c.connecting(t0, &cx);
    (cx, c)
}

/// A context before the start gate, and its connection 1 connected in setup (long mode)
/// from `t0` to `t0` + 1 ms.
fn set_up(p: &Plan, t0: Instant) -> (Context<'_>, Conn) {
    let (mut cx, mut c) = before_gate(p, t0);
    c.connecting(t0, &cx);
    assert_eq!(c.connected(t0 + MS, &mut cx), Next::Nothing, "setup waits");
    assert_eq!(c.state(), State::Idle);
    (cx, c)
}

/// Sends the whole request and receives the whole reply; the request must be exchanging.
fn exchange(c: &mut Conn, p: &Plan) -> Next {
    assert_eq!(c.state(), State::Exchanging);
    assert_eq!(c.on_sent(p.request.len(), p), Next::Nothing);
    c.on_received(&p.request, p)
}

/// The recorded latency (the histogram's only one, or its largest) in nanoseconds.
fn latency(cx: &Context<'_>) -> u64 {
    cx.clock.recorder.hist.max()
}

/// Whether `got` is `want` within the histogram's precision.
fn near(got: u64, want: Duration) -> bool {
    (got as f64 - want.as_nanos() as f64).abs() <= want.as_nanos() as f64 / 100.0
}

#[test]
fn a_closed_loop_long_connection_makes_its_rounds_on_one_socket_then_is_done() {
    let p = plan(Pattern::Long, 3, None);
    let t0 = Instant::now();
    let (mut cx, mut c) = set_up(&p, t0);
    assert_eq!(cx.connect_hist.len(), 1);
    cx.open(t0 + 2 * MS);
    let mut now = t0 + 3 * MS;
    let first = c.begin_run(t0 + 2 * MS, now, false, &mut cx);
    assert_eq!(first, Next::StartSoon(now));
    assert_eq!(c.start(now, &mut cx), Next::Exchange, "no reconnect");
    for round in 1..=3 {
        // The first write starts 1 ms after the request was made: the latency is from it.
        c.first_write(now + MS, &cx);
        assert_eq!(exchange(&mut c, &p), Next::Complete);
        now += 5 * MS;
        let next = c.complete(now, &mut cx);
        assert!(near(latency(&cx), 4 * MS), "round {round}: from the write");
        if round < 3 {
            assert_eq!(next, Next::Exchange, "round {round}: the next one at once");
        } else {
            assert_eq!(next, Next::Retire);
        }
    }
    assert_eq!(c.state(), State::Done);
    assert_eq!((cx.clock.recorder.ok, cx.clock.recorder.failed), (3, 0));
    assert_eq!(cx.active, 0);
    assert_eq!(c.start(now, &mut cx), Next::Nothing, "done stays done");
}

#[test]
fn a_short_connection_connects_for_every_request_and_times_it_from_the_start() {
    let p = plan(Pattern::Short, 2, None);
    let t0 = Instant::now();
    let (mut cx, mut c) = connecting(&p, t0);
    assert_eq!(c.deadline(), t0 + p.timeout);
    for round in 1..=2u32 {
        let began = t0 + MS * (10 * (round - 1));
        assert_eq!(c.state(), State::Connecting);
        assert_eq!(c.connected(began + 2 * MS, &mut cx), Next::Exchange);
        c.first_write(began + 3 * MS, &cx);
        assert_eq!(exchange(&mut c, &p), Next::Complete);
        let next = c.complete(began + 10 * MS, &mut cx);
        assert!(near(latency(&cx), 10 * MS), "round {round}: from its start");
        if round == 1 {
            assert_eq!(next, Next::Connect, "a new connect per request");
            c.connecting(began + 11 * MS, &cx);
            assert_eq!(c.deadline(), began + 11 * MS + p.timeout);
        } else {
            assert_eq!(next, Next::Retire);
        }
    }
    assert_eq!(cx.connect_hist.len(), 2);
    assert_eq!(cx.clock.recorder.ok, 2);
}

#[test]
fn a_storm_connection_is_held_after_its_proven_echo_and_done_after_a_failure() {
    let p = plan(Pattern::Storm, 1, None);
    let t0 = Instant::now();
    let (mut cx, mut held) = connecting(&p, t0);
    assert_eq!(held.connected(t0 + MS, &mut cx), Next::Exchange);
    assert_eq!(exchange(&mut held, &p), Next::Complete);
    assert_eq!(held.complete(t0 + 2 * MS, &mut cx), Next::Nothing);
    assert_eq!(held.state(), State::Held);
    assert_eq!((cx.established, cx.active), (1, 0));
    held.retire(&mut cx);
    assert_eq!(cx.active, 0, "a held connection is no longer active");

    let (mut cx, mut lost) = connecting(&p, t0);
    lost.fail(t0 + MS, FailureKind::Refused, &mut cx);
    assert_eq!(lost.state(), State::Done);
    assert_eq!((cx.established, cx.active), (0, 0));
    assert_eq!(lost.released(t0 + MS, &mut cx), Next::Nothing, "no retry");
    assert_eq!(cx.clock.recorder.failures.get("refused"), Some(&1));
}

#[test]
fn an_open_loop_request_waits_for_its_slot_and_is_timed_from_it() {
    // 1000 requests/s over 2 connections: connection 1's slots are t0 + 1, 3, 5... ms.
    let p = plan(Pattern::Long, 10, Some(1000.0));
    let t0 = Instant::now();
    let (mut cx, mut c) = set_up(&p, t0);
    cx.open(t0);
    assert_eq!(c.begin_run(t0, t0, false, &mut cx), Next::StartAt(t0 + MS));
    assert_eq!(c.schedule(t0, true, &mut cx), Next::StartAt(t0 + MS));
    // Sent late, at 1.5 ms, and its write later still: the latency is from the slot.
    let late = t0 + 3 * MS / 2;
    assert_eq!(c.start(late, &mut cx), Next::Exchange);
    c.first_write(late + MS, &cx);
    assert_eq!(exchange(&mut c, &p), Next::Complete);
    assert_eq!(c.complete(t0 + 2 * MS, &mut cx), Next::StartAt(t0 + 3 * MS));
    assert!(near(latency(&cx), MS), "from the slot at 1 ms");
    assert_eq!(c.state(), State::Idle);
    // A reply at 7 ms is past the slots at 3 and 5 ms: the next request leaves at once,
    // timed from the slot at 3 ms.
    assert_eq!(c.start(t0 + 3 * MS, &mut cx), Next::Exchange);
    assert_eq!(exchange(&mut c, &p), Next::Complete);
    assert_eq!(c.complete(t0 + 7 * MS, &mut cx), Next::Exchange);
    assert!(near(latency(&cx), 4 * MS));
    assert_eq!(
        c.pacer().unwrap().due(),
        t0 + 7 * MS,
        "the slot at 5 ms taken"
    );
    assert_eq!(exchange(&mut c, &p), Next::Complete);
    c.complete(t0 + 8 * MS, &mut cx);
    assert!(near(latency(&cx), 4 * MS), "the largest");
    assert_eq!(cx.clock.recorder.hist.len(), 3);
}

#[test]
fn a_wrong_byte_or_an_early_eof_fails_the_request_and_a_long_one_reconnects() {
    let p = plan(Pattern::Long, 5, None);
    let t0 = Instant::now();
    let (mut cx, mut c) = set_up(&p, t0);
    cx.open(t0);
    assert_eq!(c.start(t0 + 2 * MS, &mut cx), Next::Exchange);
    assert_eq!(c.on_sent(4, &p), Next::Nothing);
    assert_eq!(c.on_received(b"pi", &p), Next::Receive);
    assert_eq!(
        c.on_received(b"nk", &p),
        Next::Fail(FailureKind::Mismatch),
        "the third byte differs"
    );
    c.fail(t0 + 3 * MS, FailureKind::Mismatch, &mut cx);
    assert!(c.closing() && !c.in_flight());
    assert_eq!(
        c.start(t0 + 3 * MS, &mut cx),
        Next::Nothing,
        "not while closing"
    );
    assert_eq!(
        c.released(t0 + 4 * MS, &mut cx),
        Next::StartSoon(t0 + 4 * MS)
    );
    assert_eq!(
        c.start(t0 + 4 * MS, &mut cx),
        Next::Connect,
        "its socket is gone"
    );
    c.connecting(t0 + 4 * MS, &cx);
    assert_eq!(c.connected(t0 + 5 * MS, &mut cx), Next::Exchange);
    assert_eq!(c.on_received(b"", &p), Next::Fail(FailureKind::Eof));
    c.fail(t0 + 6 * MS, FailureKind::Eof, &mut cx);
    let failures = &cx.clock.recorder.failures;
    assert_eq!(
        (failures.get("mismatch"), failures.get("eof")),
        (Some(&1), Some(&1))
    );
    assert_eq!(cx.clock.recorder.ok, 0);
    assert_eq!(c.rounds_left, 3, "failures count as rounds");
}

#[test]
fn partial_sends_and_receives_continue_where_they_stopped() {
    let mut p = plan(Pattern::Long, 1, None);
    p.request = b"abcdef".to_vec();
    p.reply = Reply::Fixed(b"ABCDEF".to_vec());
    let t0 = Instant::now();
    let (mut cx, mut c) = opened(&p, t0);
    c.connecting(t0, &cx);
    assert_eq!(c.connected(t0, &mut cx), Next::Exchange);
    assert_eq!((c.unsent(), c.owed(&p)), (&b"abcdef"[..], 6));
    assert_eq!(c.on_sent(2, &p), Next::Send);
    assert!(c.sending(&p));
    assert_eq!(c.unsent(), b"cdef");
    assert_eq!(
        c.on_received(b"AB", &p),
        Next::Receive,
        "echoed while sending"
    );
    assert_eq!(c.on_sent(4, &p), Next::Nothing);
    assert!(!c.sending(&p));
    assert_eq!(c.owed(&p), 4);
    assert_eq!(c.on_received(b"CDE", &p), Next::Receive);
    assert_eq!(c.owed(&p), 1);
    assert_eq!(c.on_received(b"F", &p), Next::Complete);
}

#[test]
fn events_of_an_older_generation_or_after_the_request_are_ignored() {
    let p = plan(Pattern::Long, 1, None);
    let t0 = Instant::now();
    let (mut cx, mut c) = opened(&p, t0);
    let old = c.renew();
    c.connecting(t0, &cx);
    assert!(c.accepts(old));
    let current = c.renew();
    assert!(!c.accepts(old) && c.accepts(current));
    assert_eq!(c.generation(), current);
    c.fail(t0 + MS, FailureKind::Timeout, &mut cx);
    assert!(!c.accepts(current), "nothing in flight");
}

#[test]
fn setup_failures_are_counted_not_recorded_and_retried_in_the_run() {
    let p = plan(Pattern::Long, 1, None);
    let t0 = Instant::now();
    let (mut cx, mut c) = before_gate(&p, t0);
    c.connecting(t0, &cx);
    c.fail(t0 + MS, FailureKind::Refused, &mut cx);
    assert_eq!(
        c.released(t0 + MS, &mut cx),
        Next::Nothing,
        "waits for the gate"
    );
    assert_eq!((cx.setup_failures, cx.clock.recorder.failed), (1, 0));
    cx.open(t0 + 2 * MS);
    assert_eq!(c.start(t0 + 2 * MS, &mut cx), Next::Connect);
}

#[test]
fn no_request_starts_after_a_timed_window() {
    let mut p = plan(Pattern::Long, 1, None);
    p.stop = Stop::Duration(10 * MS);
    let t0 = Instant::now();
    let (mut cx, mut c) = opened(&p, t0);
    assert_eq!(c.start(t0 + 10 * MS, &mut cx), Next::Retire);
    assert_eq!((c.state(), cx.active), (State::Done, 0));
    c.retire(&mut cx);
    assert_eq!(cx.active, 0, "retired once");
}

#[test]
fn every_request_carries_its_own_stamp_and_another_ones_echo_is_foreign() {
    let mut p = plan(Pattern::Long, 3, None);
    p.request = protocol::payload(12);
    let t0 = Instant::now();
    let (mut cx, mut c) = set_up(&p, t0);
    cx.open(t0);
    assert_eq!(c.start(t0, &mut cx), Next::Exchange);
    let first = c.unsent().to_vec();
    assert_eq!(protocol::read_stamp(&first), Some((1, 0)));
    assert_eq!(c.on_sent(12, &p), Next::Nothing);
    assert_eq!(c.on_received(&first, &p), Next::Complete);
    assert_eq!(
        c.complete(t0 + MS, &mut cx),
        Next::Exchange,
        "closed loop: at once"
    );
    assert_eq!(protocol::read_stamp(c.unsent()), Some((1, 1)));
    // The previous request's echo again: stale, so foreign, even split across reads.
    assert_eq!(c.on_sent(12, &p), Next::Nothing);
    assert_eq!(
        c.on_received(&first[..4], &p),
        Next::Receive,
        "the id is its own"
    );
    assert_eq!(
        c.on_received(&first[4..], &p),
        Next::Fail(FailureKind::ForeignEcho)
    );
    c.fail(t0 + 2 * MS, FailureKind::ForeignEcho, &mut cx);
    assert_eq!(
        c.released(t0 + 2 * MS, &mut cx),
        Next::StartSoon(t0 + 2 * MS)
    );
    assert_eq!(c.start(t0 + 2 * MS, &mut cx), Next::Connect);
    c.connecting(t0 + 2 * MS, &cx);
    assert_eq!(c.connected(t0 + 3 * MS, &mut cx), Next::Exchange);
    // Connection 2's request of the same number.
    let mut other = protocol::payload(12);
    protocol::stamp(&mut other, 2, 2);
    assert_eq!(protocol::read_stamp(c.unsent()), Some((1, 2)));
    assert_eq!(
        c.on_received(&other, &p),
        Next::Fail(FailureKind::ForeignEcho)
    );
    c.fail(t0 + 4 * MS, FailureKind::ForeignEcho, &mut cx);
    let failures = &cx.clock.recorder.failures;
    assert_eq!(
        (failures.get("foreign_echo"), failures.get("mismatch")),
        (Some(&2), None)
    );
}
