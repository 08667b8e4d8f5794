//! The measurement window, in both engines: a request belongs to the window in which it
//! started; warm-up requests never use up ROUNDS; open-loop latency runs from the intended
//! send time (coordinated omission corrected). Every expected figure here is derived in the
//! test from the stall it provokes, not from echo-bench's own code.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{report, FaultyServer};
use echolab_core::stats::BenchReport;
use echolab_testkit::spawn_echo_server;

/// Every engine; all run long connections, which every test here uses.
const ENGINES: [&str; 3] = ["event", "thread", "uring"];

/// Echoes every chunk, except that the first chunk read `after` or later since the
/// connection's first chunk is held for `stall` before it is echoed (once per connection).
fn echo_with_one_stall(mut s: TcpStream, after: Duration, stall: Duration) {
    let mut buf = [0u8; 4096];
    let mut first: Option<Instant> = None;
    let mut stalled = false;
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
        let t0 = *first.get_or_insert_with(Instant::now);
        if !stalled && t0.elapsed() >= after {
            stalled = true;
            std::thread::sleep(stall);
        }
        if s.write_all(&buf[..n]).is_err() {
            break;
        }
    }
}

/// echo-bench `ARGS --engine ENGINE` against a fresh [`FaultyServer`] running `serve`.
fn against(serve: fn(TcpStream), engine: &str, args: &[&str]) -> BenchReport {
    let server = FaultyServer::start(serve);
    let port = server.port.to_string();
    let mut all = vec!["127.0.0.1", port.as_str()];
    all.extend_from_slice(args);
    all.extend(["--engine", engine]);
    report(&all)
}

#[test]
fn warmup_requests_never_use_up_rounds() {
    // exp31's exact form with a warm-up: every connection must still make its 10 measured
    // rounds, whatever it did during the warm-up.
    let server = spawn_echo_server("epoll-et", &[]);
    let port = server.addr.port().to_string();
    for engine in ENGINES {
        let r = report(&[
            "127.0.0.1",
            &port,
            "100",
            "10",
            "--mode",
            "long",
            "--warmup",
            "300ms",
            "--engine",
            engine,
        ]);
        assert_eq!(
            (r.requests_ok, r.requests_failed),
            (1000, 0),
            "{engine}: {:?}",
            r.failures
        );
        let warmup = r.extra.warmup_requests.expect("warmup_requests");
        assert!(
            warmup >= 100,
            "{engine}: 300 ms of warm-up on 100 connections made only {warmup} requests"
        );
    }
}

#[test]
fn a_request_stalled_across_the_end_of_warmup_is_not_measured() {
    // One connection; the server holds the request that arrives 150 ms after the first one
    // for 400 ms, so it starts in the 300 ms warm-up and completes ~250 ms into the window.
    // It belongs to the warm-up: the 20 measured rounds all start after it and none waits
    // for the stall.
    fn serve(s: TcpStream) {
        echo_with_one_stall(s, Duration::from_millis(150), Duration::from_millis(400));
    }
    for engine in ENGINES {
        let r = against(
            serve,
            engine,
            &["1", "20", "--mode", "long", "--warmup", "300ms"],
        );
        let l = r.latency_us.expect("requests succeeded");
        assert_eq!((r.requests_ok, r.requests_failed), (20, 0), "{engine}");
        assert!(
            l.max < 200_000.0,
            "{engine}: the stalled warm-up request was measured (max {} µs)",
            l.max
        );
        // Little's law for a closed loop of one connection: QPS × mean latency ≈ 1. The
        // window runs from the end of warm-up to the last completion, which includes the wait
        // for the stalled warm-up request to finish, so the product can only fall below 1.
        let little = r.qps * l.mean / 1e6;
        assert!(little <= 1.1, "{engine}: QPS × mean latency = {little:.2}");
    }
}

#[test]
fn open_loop_latency_runs_from_the_intended_send_time() {
    // 1000 requests/s on one connection for 2 s; the server stalls once for 500 ms, 500 ms
    // in. The 500 requests due during the stall are sent late, and each is measured from its
    // slot: the one due at stall start + t waits 500 ms − t, so a quarter of all requests
    // have latencies spread evenly over (0, 500 ms]. The p90 is then where that tail holds
    // 10% of all requests: (500 ms − x) / 2 s = 0.1, x = 300 ms; the p99: x = 480 ms.
    // Measured from the actual send instead, every latency would be tens of microseconds.
    fn serve(s: TcpStream) {
        echo_with_one_stall(s, Duration::from_millis(500), Duration::from_millis(500));
    }
    for engine in ENGINES {
        let r = against(serve, engine, &["1", "--duration", "2s", "--rate", "1000"]);
        let l = r.latency_us.expect("requests succeeded");
        let p90_ms = l.p90 / 1000.0;
        let p99_ms = l.p99 / 1000.0;
        assert!(
            (230.0..=380.0).contains(&p90_ms),
            "{engine}: p90 {p90_ms:.1} ms, expected about 300 ms"
        );
        assert!(
            (420.0..=560.0).contains(&p99_ms),
            "{engine}: p99 {p99_ms:.1} ms, expected about 480 ms"
        );
        assert!(
            l.p50 < 50_000.0,
            "{engine}: p50 {} µs: the unstalled half must stay fast",
            l.p50
        );
        // Every slot of the window is accounted for (2000), sent late or not.
        let slots = r.requests_ok + r.requests_failed;
        assert!(
            (1990..=2000).contains(&slots),
            "{engine}: {slots} of the window's 2000 slots accounted for"
        );
    }
}
