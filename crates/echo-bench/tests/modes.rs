//! Short and long mode against the workspace's echo-server: exact system-call counts (seed
//! 002's strace question), the JSON report and its histogram, warm-up, open loop, linger.

mod common;

use common::{calls, reaped_children_cpu_s, report, time_wait_towards};
use echolab_core::hist;
use echolab_core::stats::BenchReport;
use echolab_testkit::spawn_echo_server;

/// `echo-bench 127.0.0.1 PORT ARGS... --json` against the test's echo-server on `port`.
fn bench(port: &str, args: &[&str]) -> BenchReport {
    let mut all = vec!["127.0.0.1", port];
    all.extend_from_slice(args);
    report(&all)
}

/// Seed 002's run, 100 connections x 10 rounds in `mode` with `engine`: all 1000 requests must
/// succeed. Returns the report for the mode's own call counts.
fn hundred_by_ten(port: &str, mode: &str, engine: &str) -> BenchReport {
    let r = bench(port, &["100", "10", "--mode", mode, "--engine", engine]);
    assert_eq!(
        (r.requests_ok, r.requests_failed),
        (1000, 0),
        "{mode}/{engine}: {:?}",
        r.failures
    );
    r
}

/// (connect, close, write) calls of a report.
fn connects_closes_writes(r: &BenchReport) -> (u64, u64, u64) {
    (calls(r, "connect"), calls(r, "close"), calls(r, "write"))
}

#[test]
fn short_mode_100x10_makes_exactly_1000_connects_and_closes() {
    let server = spawn_echo_server("epoll-et", &[]);
    let r = hundred_by_ten(&server.addr.port().to_string(), "short", "event");
    assert_eq!(connects_closes_writes(&r), (1000, 1000, 1000));
    assert!(r.syscalls["connect"].total_ns.unwrap() > 0);
}

#[test]
fn long_mode_100x10_makes_exactly_100_connects_and_closes() {
    let server = spawn_echo_server("epoll-et", &[]);
    let r = hundred_by_ten(&server.addr.port().to_string(), "long", "event");
    assert_eq!(connects_closes_writes(&r), (100, 100, 1000));
    assert!(calls(&r, "read") >= 1000);
    assert!(calls(&r, "epoll_wait") > 0);
}

#[test]
fn thread_engine_counts_the_same_calls() {
    let server = spawn_echo_server("epoll-et", &[]);
    let port = server.addr.port().to_string();
    let short = hundred_by_ten(&port, "short", "thread");
    assert_eq!(
        (calls(&short, "connect"), calls(&short, "close")),
        (1000, 1000)
    );
    let long = hundred_by_ten(&port, "long", "thread");
    assert_eq!((calls(&long, "connect"), calls(&long, "close")), (100, 100));
    assert_eq!(long.engine, "thread");
    assert_eq!(calls(&long, "epoll_wait"), 0);
}

#[test]
fn json_is_a_bench_report_whose_histogram_decodes_to_requests_ok() {
    let server = spawn_echo_server("epoll-et", &[]);
    let port = server.addr.port().to_string();
    let r = bench(
        &port,
        &["20", "50", "--mode", "long", "--payload-size", "100"],
    );
    assert_eq!(
        (r.tool.as_str(), r.mode.as_str(), r.engine.as_str()),
        ("echo-bench", "long", "event")
    );
    assert_eq!((r.conns, r.rounds, r.payload_bytes), (20, Some(50), 100));
    assert_eq!(r.target, format!("127.0.0.1:{port}"));
    assert_eq!(r.requests_ok, 1000);
    let h = hist::decode(&r.histogram).expect("histogram decodes");
    assert_eq!(h.len(), r.requests_ok);
    let s = hist::LatencySummary::from_histogram(&h).expect("requests succeeded");
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(1.0);
    let l = r.latency_us.as_ref().expect("requests succeeded");
    assert!(
        close(s.min, l.min) && close(s.mean, l.mean) && close(s.p50, l.p50) && close(s.p99, l.p99),
        "{s:?} vs {l:?}"
    );
    assert!(
        close(s.p999, l.p999) && close(s.max, l.max),
        "{s:?} vs {l:?}"
    );
    let l = r.latency_us.unwrap();
    assert!(l.min > 0.0 && l.p50 <= l.p99);
    assert!(r.duration_s > 0.0);
    assert!((r.qps - r.requests_ok as f64 / r.duration_s).abs() < 1e-6 * r.qps);
    assert!(r.intervals.is_empty(), "a rounds run has no intervals");
    assert!(r.started_at.ends_with('Z'));
}

#[test]
fn timed_run_with_warmup_excludes_warmup_and_reports_intervals() {
    // A namespace of its own: tens of thousands of short connections a second would
    // otherwise fill the host's connection-tracking table (where Docker's iptables rules
    // track loopback too), whose dropped SYNs stall the run's connections for a second.
    // Both engines that run short connections keep the window's rule, the thread engine's
    // per-thread syscall baseline at the warm-up's end included.
    for engine in ["event", "thread"] {
        timed_run_with_warmup_on(engine);
    }
}

fn timed_run_with_warmup_on(engine: &'static str) {
    common::in_fresh_netns(move || {
        let server = spawn_echo_server("epoll-et", &[]);
        let port = server.addr.port().to_string();
        let cpu_before = reaped_children_cpu_s();
        let r = bench(
            &port,
            &[
                "10",
                "--duration",
                "2s",
                "--warmup",
                "1s",
                "--mode",
                "short",
                "--engine",
                engine,
            ],
        );
        let whole_run_cpu = reaped_children_cpu_s() - cpu_before;
        assert_eq!(r.duration_s, 2.0);
        assert_eq!(r.rounds, None);
        let warmup = r.extra.warmup_requests.unwrap();
        // The server saw every connection of the run, one per short request: the warm-up's, the
        // measured ones, and at most one per connection cut off at either end of the window.
        let accepted = common_stop(server).totals.accepted;
        assert!(
            accepted.abs_diff(warmup + r.requests_ok) <= 2 * r.conns,
            "{engine}: server accepted {accepted}, client reports {warmup} warm-up + {} measured",
            r.requests_ok
        );
        assert_eq!(r.intervals.len(), 2);
        let in_intervals: u64 = r.intervals.iter().map(|i| i.requests_ok).sum();
        assert_eq!(in_intervals, r.requests_ok);
        assert!(r.intervals.iter().all(|i| i.requests_ok > 0));
        // Warm-up requests are not in the counts: every measured connect belongs to a measured
        // request, up to the requests straddling the two ends of the window (one per connection
        // each).
        let connects = calls(&r, "connect");
        assert!(
            connects.abs_diff(r.requests_ok) <= 2 * r.conns,
            "{engine}: {connects} vs {}",
            r.requests_ok
        );
        // client_cpu covers the measured window only: the same work per request as the warm-up,
        // so its share of the process's whole CPU time (seen from outside) is about the measured
        // requests' share, 2 s of 3 (start-up and exit cost little next to 3 s of load).
        let measured_cpu = r.client_cpu.user_s + r.client_cpu.sys_s;
        let share = r.requests_ok as f64 / (r.requests_ok + warmup) as f64;
        assert!(
            measured_cpu <= whole_run_cpu + 0.01 && (measured_cpu / whole_run_cpu - share).abs() < 0.2,
            "{engine}: client_cpu {measured_cpu:.3} s of {whole_run_cpu:.3} s, measured share of requests {share:.2}"
        );
    });
}

/// Stops `server` and returns its final stats.
fn common_stop(server: echolab_testkit::ServerProcess) -> echolab_core::stats::ServerStats {
    let (code, stats, _) = server.stop();
    assert_eq!(code, 0, "echo-server exit status");
    stats
}

#[test]
fn open_loop_rate_is_held() {
    let server = spawn_echo_server("epoll-et", &[]);
    let port = server.addr.port().to_string();
    let r = bench(&port, &["20", "--duration", "3s", "--rate", "2000"]);
    assert_eq!(r.target_rate, Some(2000.0));
    assert_eq!(r.requests_failed, 0, "{:?}", r.failures);
    // 6000 slots in 3 s; a loaded machine may fall a little behind, never ahead.
    assert!(r.qps > 1700.0 && r.qps <= 2001.0, "qps {}", r.qps);
    for e in ["event", "thread"] {
        let r = bench(&port, &["10", "100", "--rate", "1000", "--engine", e]);
        // 1000 requests at 1000/s take about one second: the schedule, not the server, sets it.
        assert!(
            r.duration_s > 0.9 && r.duration_s < 1.5,
            "{e}: {}",
            r.duration_s
        );
    }
}

#[test]
fn linger0_leaves_no_client_time_wait() {
    // A namespace of its own: a TIME_WAIT table filled by other tests (or by anything else
    // on the machine) would keep no TIME_WAIT at all, and the second check could not pass.
    common::in_fresh_netns(|| {
        let server = spawn_echo_server("epoll-et", &[]);
        let port = server.addr.port();
        let p = port.to_string();
        let r = bench(&p, &["20", "5", "--mode", "short", "--linger0"]);
        assert_eq!(r.requests_ok, 100);
        assert_eq!(
            time_wait_towards(port),
            0,
            "--linger0 must leave no TIME_WAIT"
        );
        // Long connections on every engine: each closes once at the end, with RST, also when
        // the ring engine still has operations on the socket to cancel.
        for engine in ["event", "thread", "uring"] {
            let r = bench(&p, &["20", "5", "--linger0", "--engine", engine]);
            assert_eq!(r.requests_ok, 100, "{engine}");
            assert_eq!(time_wait_towards(port), 0, "{engine}: --linger0, long");
        }
        // Without it the client, which closes first, keeps one TIME_WAIT per request.
        let r = bench(&p, &["20", "5", "--mode", "short"]);
        assert_eq!(r.requests_ok, 100);
        assert_eq!(time_wait_towards(port), 100);
    });
}

#[test]
fn nagle_can_be_left_on() {
    let server = spawn_echo_server("epoll-et", &[]);
    let port = server.addr.port().to_string();
    let with = bench(&port, &["4", "10", "--nodelay=false"]);
    let without = bench(&port, &["4", "10"]);
    assert_eq!((with.requests_ok, without.requests_ok), (40, 40));
    // TCP_NODELAY is one setsockopt per socket; leaving Nagle on skips it.
    assert_eq!(calls(&with, "setsockopt"), 0);
    assert_eq!(calls(&without, "setsockopt"), 4);
}

/// How the connections to [`ending_counter`] ended: reset (RST) and end of stream (FIN).
static RESETS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static FINS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// An echo server connection that counts how its client ended it, from the server's side of
/// the wire: a read failing with ECONNRESET is an RST, a read of 0 bytes a FIN.
fn ending_counter(mut s: std::net::TcpStream) {
    use std::io::{Read, Write};
    use std::sync::atomic::Ordering::SeqCst;
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => {
                FINS.fetch_add(1, SeqCst);
                return;
            }
            Ok(n) if s.write_all(&buf[..n]).is_ok() => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                RESETS.fetch_add(1, SeqCst);
                return;
            }
            _ => return,
        }
    }
}

#[test]
fn reused_short_sockets_look_like_fresh_ones_to_the_server() {
    use std::sync::atomic::Ordering::SeqCst;
    let server = common::FaultyServer::start(ending_counter);
    let port = server.port.to_string();
    // (RST, FIN) endings the server has counted, waited for until `want` connections ended:
    // the server's threads may see the last RSTs after echo-bench has exited.
    let endings_reach = |want: u64| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let seen = (RESETS.load(SeqCst), FINS.load(SeqCst));
            if seen.0 + seen.1 >= want || std::time::Instant::now() > deadline {
                return seen;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    };
    let fresh = bench(
        &port,
        &[
            "20",
            "5",
            "--mode",
            "short",
            "--linger0",
            "--short-sockets",
            "fresh",
        ],
    );
    assert_eq!(endings_reach(100), (100, 0), "fresh sockets, --linger0");
    let reused = bench(&port, &["20", "5", "--mode", "short", "--linger0"]);
    // Every request is a connection of its own that ends in RST, as with fresh sockets.
    assert_eq!(endings_reach(200), (200, 0), "reused sockets, --linger0");
    assert_eq!(
        (
            fresh.requests_ok,
            reused.requests_ok,
            reused.requests_failed
        ),
        (100, 100, 0)
    );
    assert_eq!(
        (fresh.short_sockets.as_str(), reused.short_sockets.as_str()),
        ("fresh", "reuse")
    );
    assert!(reused.short_sockets_reason.starts_with("auto:"));
    // Fresh: a socket, a connect and a close per request. Reused: one socket per connection,
    // closed at the end, and a connect and a disconnect per request. Each socket is registered
    // with epoll once, beside each worker's tick timer.
    let per = |r: &BenchReport| {
        let epoll_ctl_for_sockets = calls(r, "epoll_ctl") - r.threads;
        ["socket", "connect", "disconnect", "close"]
            .map(|name| calls(r, name))
            .into_iter()
            .chain([epoll_ctl_for_sockets])
            .collect::<Vec<_>>()
    };
    assert_eq!(per(&fresh), [100, 100, 0, 100, 100]);
    assert_eq!(per(&reused), [20, 100, 100, 20, 20]);
    // Without --linger0 the automatic choice keeps fresh sockets, and says why.
    let graceful = bench(&port, &["20", "5", "--mode", "short"]);
    assert_eq!(endings_reach(300), (200, 100), "plain close sends FIN");
    assert_eq!(graceful.short_sockets, "fresh");
    assert!(graceful.short_sockets_reason.contains("needs --linger0"));
    assert_eq!(calls(&graceful, "socket"), 100);
    // In open loop too, since a socket idle until its slot would take an extra wake-up.
    let open = bench(
        &port,
        &[
            "4",
            "--duration",
            "1s",
            "--rate",
            "40",
            "--mode",
            "short",
            "--linger0",
        ],
    );
    assert_eq!(open.short_sockets, "fresh");
    assert!(open.short_sockets_reason.contains("open loop"));
    // Long connections have no short sockets to speak of.
    let long = bench(&port, &["20", "5", "--mode", "long", "--linger0"]);
    assert_eq!((long.short_sockets.as_str(), long.requests_ok), ("", 100));
}
