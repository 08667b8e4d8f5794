//! One semantic suite, run against both engines: whatever the engine, the same request gets
//! the same outcome (completed, or failed by the same kind) within the same deadline. The
//! right values come from the request itself (its size, the server's behaviour, `--timeout`),
//! not from either engine.

mod common;

use std::time::Duration;

use common::{failures, report, run, FaultyServer, TRICKLE_GAP};
use echolab_core::stats::BenchReport;
use echolab_testkit::spawn_echo_server;

const ENGINES: [&str; 3] = ["event", "thread", "uring"];

/// The modes `engine` runs: the ring engine runs long connections only.
fn modes(engine: &str) -> &'static [&'static str] {
    if engine == "uring" {
        &["long"]
    } else {
        &["long", "short"]
    }
}

fn bench_json(args: &[&str]) -> (BenchReport, Duration) {
    let mut all = args.to_vec();
    all.push("--json");
    let (out, took) = run(&all);
    (common::checked_report(&all, &out), took)
}

#[test]
fn a_request_larger_than_both_socket_buffers_completes() {
    // 16 MiB and 12 MiB are far beyond the default socket buffers of both ends (tcp_wmem and
    // tcp_rmem top out at 4 and 6 MiB): a client that wrote the whole request before reading
    // would wait for a server blocked on writing the echo back.
    let server = spawn_echo_server("epoll-et", &[]);
    let port = server.addr.port().to_string();
    for size in ["16777216", "12582912"] {
        for engine in ENGINES {
            for &mode in modes(engine) {
                let r = report(&[
                    "127.0.0.1",
                    &port,
                    "1",
                    "1",
                    "--payload-size",
                    size,
                    "--mode",
                    mode,
                    "--engine",
                    engine,
                    "--timeout",
                    "20s",
                ]);
                assert_eq!(
                    (r.requests_ok, r.requests_failed),
                    (1, 0),
                    "{size} B, {mode}, {engine}: {:?}",
                    r.failures
                );
                assert_eq!(r.payload_bytes.to_string(), size, "{mode}/{engine}");
            }
        }
    }
}

#[test]
fn timeout_is_a_deadline_on_the_request_not_on_each_call() {
    // The reply keeps coming, one byte per TRICKLE_GAP (0.4 s): 12 bytes would take 4.8 s.
    // With --timeout 1s the request fails by timeout at 1 s after it started, not when
    // the last byte arrives, and not when one read waits longer than 1 s (none does).
    let server = FaultyServer::trickler();
    let port = server.port.to_string();
    assert!(TRICKLE_GAP < Duration::from_secs(1));
    for engine in ENGINES {
        for &mode in modes(engine) {
            let (r, took) = bench_json(&[
                "127.0.0.1",
                &port,
                "1",
                "1",
                "--timeout",
                "1s",
                "--mode",
                mode,
                "--engine",
                engine,
            ]);
            assert_eq!(
                (r.requests_ok, failures(&r, "timeout")),
                (0, 1),
                "{mode}/{engine}: {:?}",
                r.failures
            );
            // The deadline is 1 s; the event engine sweeps deadlines every timeout/10 and a
            // loaded host adds scheduling delay, never another trickle gap (0.4 s).
            assert!(
                (1.0..1.35).contains(&r.duration_s),
                "{mode}/{engine}: measured {} s (ran {took:?})",
                r.duration_s
            );
        }
    }
}

#[test]
fn an_open_loop_schedule_left_unsent_when_the_drain_runs_out_is_counted_as_timeouts() {
    // One connection at 10 requests/s for a 1 s window: slots at 0, 0.1, ..., 0.9 s. The
    // server never answers and --timeout is 2 s: the slot-0 request times out at 2 s, the
    // slot-0.1 request (already late) is sent then and is still in flight when the drain
    // ends (window end + timeout, 3 s), and slots 0.2..0.9 were never sent. All ten slots of
    // the window are failures by timeout; the slot at 1.0 s is the next window's.
    let server = FaultyServer::mute();
    let port = server.port.to_string();
    for engine in ENGINES {
        let (r, took) = bench_json(&[
            "127.0.0.1",
            &port,
            "1",
            "--duration",
            "1s",
            "--rate",
            "10",
            "--timeout",
            "2s",
            "--engine",
            engine,
        ]);
        assert_eq!(
            (r.requests_ok, r.requests_failed, failures(&r, "timeout")),
            (0, 10, 10),
            "{engine}: {:?}",
            r.failures
        );
        assert!(took < Duration::from_secs(6), "{engine}: ran {took:?}");
    }
}

#[test]
fn a_request_in_flight_when_the_window_closes_still_counts() {
    // Every reply comes 400 ms after its request: one closed-loop connection starts requests
    // at 0, 0.4 and 0.8 s of a 1 s window; the third completes at 1.2 s, after the window
    // closed, and belongs to it (it started in it). None starts at 1.2 s.
    fn slow(mut s: std::net::TcpStream) {
        use std::io::{Read, Write};
        let mut buf = [0u8; 12];
        while s.read_exact(&mut buf).is_ok() {
            std::thread::sleep(Duration::from_millis(400));
            if s.write_all(&buf).is_err() {
                return;
            }
        }
    }
    let server = FaultyServer::start(slow);
    let port = server.port.to_string();
    for engine in ENGINES {
        let (r, _) = bench_json(&[
            "127.0.0.1",
            &port,
            "1",
            "--duration",
            "1s",
            "--engine",
            engine,
        ]);
        assert_eq!(
            (r.requests_ok, r.requests_failed),
            (3, 0),
            "{engine}: {:?}",
            r.failures
        );
    }
}

#[test]
fn an_open_loop_connection_with_no_slot_left_in_the_window_retires_when_it_closes() {
    // 0.5 requests/s for a 1 s window: one slot, at 0. The next (2 s) is outside the window,
    // so the run ends when the window does instead of waiting for it.
    let server = spawn_echo_server("epoll-et", &[]);
    let port = server.addr.port().to_string();
    for engine in ENGINES {
        let (r, took) = bench_json(&[
            "127.0.0.1",
            &port,
            "1",
            "--duration",
            "1s",
            "--rate",
            "0.5",
            "--engine",
            engine,
        ]);
        assert_eq!((r.requests_ok, r.requests_failed), (1, 0), "{engine}");
        assert!(
            took < Duration::from_millis(1700),
            "{engine}: ran {took:?}, waited for the slot after the window"
        );
    }
}

#[test]
fn a_server_that_closes_without_answering_is_end_of_stream() {
    let server = FaultyServer::closer();
    let port = server.port.to_string();
    for engine in ENGINES {
        for &mode in modes(engine) {
            let r = report(&[
                "127.0.0.1",
                &port,
                "3",
                "1",
                "--mode",
                mode,
                "--engine",
                engine,
                "--timeout",
                "5s",
            ]);
            assert_eq!(
                (r.requests_ok, r.requests_failed, failures(&r, "eof")),
                (0, 3, 3),
                "{mode}/{engine}: {:?}",
                r.failures
            );
        }
    }
}

#[test]
fn both_engines_count_the_same_requests_and_connects() {
    let server = spawn_echo_server("epoll-lt", &[]);
    let port = server.addr.port().to_string();
    for mode in ["long", "short"] {
        let rs: Vec<BenchReport> = ["event", "thread"]
            .iter()
            .map(|e| {
                report(&[
                    "127.0.0.1",
                    &port,
                    "5",
                    "4",
                    "--payload-size",
                    "100",
                    "--mode",
                    mode,
                    "--engine",
                    e,
                ])
            })
            .collect();
        let connects = if mode == "long" { 5 } else { 20 };
        for r in &rs {
            let summary = (
                r.requests_ok,
                r.requests_failed,
                r.payload_bytes,
                r.syscalls["connect"].count,
                r.syscalls["close"].count,
            );
            assert_eq!(
                summary,
                (20, 0, 100, connects, connects),
                "{mode}/{}",
                r.engine
            );
        }
    }
}

#[test]
fn the_ring_engine_counts_requests_and_sockets_and_connects_through_the_ring() {
    let server = spawn_echo_server("epoll-lt", &[]);
    let port = server.addr.port().to_string();
    let r = report(&[
        "127.0.0.1",
        &port,
        "5",
        "4",
        "--payload-size",
        "100",
        "--engine",
        "uring",
    ]);
    assert_eq!(
        (
            r.requests_ok,
            r.requests_failed,
            r.payload_bytes,
            r.engine.as_str()
        ),
        (20, 0, 100, "uring")
    );
    // One socket, two fcntl (blocking) and one close per connection; connects, sends and
    // receives are ring operations, so no connect, read or write calls; at most one
    // io_uring_enter per completion (20 replies, 5 connects, 20 sends) and the end's reaping.
    assert_eq!(
        (
            r.syscalls["socket"].count,
            r.syscalls["fcntl"].count,
            r.syscalls["close"].count
        ),
        (5, 10, 5)
    );
    for call in ["connect", "read", "write", "epoll_wait"] {
        assert!(!r.syscalls.contains_key(call), "{call}: {:?}", r.syscalls);
    }
    let enters = r.syscalls["io_uring_enter"].count;
    assert!((1..=46).contains(&enters), "{enters} io_uring_enter calls");
}

#[test]
fn the_ring_engine_refuses_short_connections_by_name() {
    let (out, _) = run(&[
        "127.0.0.1",
        "9",
        "1",
        "1",
        "--mode",
        "short",
        "--engine",
        "uring",
    ]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--engine uring runs long connections only"),
        "{stderr}"
    );
}

#[test]
fn a_client_stopped_and_continued_mid_run_loses_nothing() {
    // SIGSTOP then SIGCONT (what a debugger or strace attaching does) makes a wait in
    // epoll_wait(2) or io_uring_enter(2) return EINTR even without a handler (signal(7)).
    // At 20 requests/s on 2 connections the client spends nearly all its time in that wait,
    // so each of the three stops below lands in one; the run must go on as if it had not
    // been stopped: every slot of the 1.5 s window sent and answered.
    let server = spawn_echo_server("epoll-et", &[]);
    let port = server.addr.port().to_string();
    for engine in ENGINES {
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_echo-bench"))
            .args([
                "127.0.0.1",
                &port,
                "2",
                "--duration",
                "1500ms",
                "--rate",
                "20",
            ])
            .args(["--engine", engine, "--json"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("echo-bench starts");
        let pid = child.id() as libc::pid_t;
        for _ in 0..3 {
            std::thread::sleep(Duration::from_millis(300));
            // SAFETY: kill(2) on our own child, which has not been waited for yet.
            unsafe {
                assert_eq!(libc::kill(pid, libc::SIGSTOP), 0);
                std::thread::sleep(Duration::from_millis(20));
                assert_eq!(libc::kill(pid, libc::SIGCONT), 0);
            }
        }
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{engine}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let r: BenchReport = serde_json::from_slice(&out.stdout).unwrap();
        // --rate is the whole run's: 20 slots/s over 1.5 s. A slot that fell in a stop is
        // sent late, not skipped (the open-loop test's rule: the window's last slot may be
        // the one not yet due when it closes).
        assert_eq!(r.requests_failed, 0, "{engine}: {:?}", r.failures);
        assert!(
            (29..=30).contains(&r.requests_ok),
            "{engine}: {} requests of the window's 30 slots",
            r.requests_ok
        );
    }
}
