//! Failures are counted by kind, never a panic or a hang: wrong bytes, silence, a closed port.

mod common;

use std::time::Duration;

use common::{closed_port, failures, report, run, FaultyServer};
use echolab_testkit::spawn_echo_server;

#[test]
fn wrong_bytes_are_counted_as_mismatch() {
    let server = FaultyServer::bit_flipper();
    let port = server.port.to_string();
    for engine in ["event", "thread", "uring"] {
        let r = report(&["127.0.0.1", &port, "4", "3", "--engine", engine]);
        assert_eq!((r.requests_ok, r.requests_failed), (0, 12), "{engine}");
        assert_eq!(failures(&r, "mismatch"), 12, "{engine}: {:?}", r.failures);
    }
    // A run in which nothing succeeded fails with or without --fail-on-error.
    for extra in [&[][..], &["--fail-on-error"][..]] {
        let (out, _) = run(&[&["127.0.0.1", &port, "2", "1"][..], extra].concat());
        assert_eq!(out.status.code(), Some(1), "{extra:?}");
    }
}

#[test]
fn some_failures_fail_the_exit_status_only_when_asked_to() {
    // Three of six requests succeed (see the overrunner below).
    let server = FaultyServer::overrunner();
    let port = server.port.to_string();
    let (out, _) = run(&["127.0.0.1", &port, "3", "2", "--fail-on-error"]);
    assert_eq!(out.status.code(), Some(1));
    let (out, _) = run(&["127.0.0.1", &port, "3", "2"]);
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn a_run_in_which_nothing_succeeded_has_no_latency_in_any_output() {
    let port = closed_port().to_string();
    let (out, _) = run(&["127.0.0.1", &port, "2", "1"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("| — | — | — |") && !text.contains("| 0 | 0 | 0 |"),
        "the table shows no latency, not 0 µs: {text}"
    );
    assert!(text.contains("min — mean —"), "{text}");
}

#[test]
fn bytes_after_a_reply_are_never_taken_as_part_of_it() {
    // Each reply comes in two parts, the second followed by 5 bytes nobody asked for. A
    // client that asks only for what the reply still owes gets the first reply of each
    // connection whole; the 5 bytes then head the next one, which is a mismatch (and the
    // connection is dropped). One that asked for more would take them into the first reply.
    let server = FaultyServer::overrunner();
    let port = server.port.to_string();
    for engine in ["event", "thread", "uring"] {
        let r = report(&["127.0.0.1", &port, "3", "2", "--engine", engine]);
        assert_eq!((r.requests_ok, r.requests_failed), (3, 3), "{engine}");
        assert_eq!(failures(&r, "mismatch"), 3, "{engine}: {:?}", r.failures);
    }
}

#[test]
fn sustain_verifies_reply_content() {
    // An echo server answers "hello echo\r\n", not the 1 KiB reply body sustain expects.
    let server = spawn_echo_server("epoll-et", &[]);
    let port = server.addr.port().to_string();
    let r = report(&[
        "sustain",
        "127.0.0.1",
        &port,
        "2",
        "--reply-bytes",
        "12",
        "--duration",
        "1s",
        "--timeout",
        "500ms",
    ]);
    assert_eq!(r.requests_ok, 0);
    assert!(failures(&r, "mismatch") > 0, "{:?}", r.failures);
}

#[test]
fn silence_is_counted_as_timeout_within_the_deadline() {
    let server = FaultyServer::mute();
    let port = server.port.to_string();
    for engine in ["event", "thread", "uring"] {
        let args = [
            "127.0.0.1",
            &port,
            "2",
            "2",
            "--timeout",
            "300ms",
            "--engine",
            engine,
            "--json",
        ];
        let (out, took) = run(&args);
        assert_eq!(out.status.code(), Some(1), "nothing succeeded");
        let r: echolab_core::stats::BenchReport = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            r.latency_us, None,
            "{engine}: no request succeeded, so no latency"
        );
        assert_eq!(failures(&r, "timeout"), 4, "{engine}: {:?}", r.failures);
        // Two 300 ms timeouts in a row per connection, the connections side by side: 0.6 s
        // measured, never less; the slack is a loaded host's scheduling, not another timeout.
        assert!(
            (0.6..0.9).contains(&r.duration_s) && took < Duration::from_secs(3),
            "{engine}: measured {} s, ran {took:?}",
            r.duration_s
        );
    }
}

#[test]
fn closed_port_is_counted_as_refused() {
    let port = closed_port().to_string();
    for (mode, engine) in [
        ("short", "event"),
        ("long", "event"),
        ("short", "thread"),
        ("long", "thread"),
        ("long", "uring"),
    ] {
        let r = report(&[
            "127.0.0.1",
            &port,
            "3",
            "2",
            "--mode",
            mode,
            "--engine",
            engine,
        ]);
        assert_eq!(
            (r.requests_ok, r.requests_failed),
            (0, 6),
            "{mode}/{engine}"
        );
        assert_eq!(
            failures(&r, "refused"),
            6,
            "{mode}/{engine}: {:?}",
            r.failures
        );
        // Long connections are made before the measurement starts: each of the 3 failed
        // there once too, which the report notes apart (short ones connect per request).
        let setup = r.extra.setup_connect_failures;
        let expected = (mode == "long").then_some(3);
        assert_eq!(setup, expected, "{mode}/{engine}: {:?}", r.extra);
    }
}

#[test]
fn a_connect_that_fails_at_once_is_counted_by_its_errno() {
    // In a namespace with only loopback up, connect(2) to TEST-NET-1 (RFC 5737) fails within
    // the call with ENETUNREACH, not with EINPROGRESS and a later error: the failure is that
    // errno, not a timeout after --timeout.
    let r = common::in_fresh_netns(|| {
        report(&[
            "192.0.2.1",
            "9",
            "2",
            "1",
            "--mode",
            "short",
            "--timeout",
            "30s",
        ])
    });
    assert_eq!((r.requests_ok, r.requests_failed), (0, 2));
    assert_eq!(failures(&r, "enetunreach"), 2, "{:?}", r.failures);
}
