//! seed 003's top point, seed 004's deadlink and activelink, against echo-server.

mod common;

use common::{calls, failures, report};
use echolab_testkit::spawn_echo_server;

#[test]
fn five_thousand_long_connections_complete_without_failure() {
    let server = spawn_echo_server("epoll-et", &[]);
    let port = server.addr.port().to_string();
    let r = report(&[
        "127.0.0.1",
        &port,
        "5000",
        "2",
        "--mode",
        "long",
        "--timeout",
        "30s",
    ]);
    assert_eq!(
        (r.requests_ok, r.requests_failed),
        (10_000, 0),
        "{:?}",
        r.failures
    );
    assert_eq!(calls(&r, "connect"), 5000);
    assert_eq!(calls(&r, "close"), 5000);
}

#[test]
fn connect_storm_of_200_establishes_all() {
    let server = spawn_echo_server("epoll-et", &[]);
    let port = server.addr.port().to_string();
    let r = report(&["connect-storm", "127.0.0.1", &port, "200"]);
    assert_eq!(r.mode, "connect-storm");
    assert_eq!(r.extra.established, Some(200));
    assert_eq!(
        (r.requests_ok, r.requests_failed),
        (200, 0),
        "{:?}",
        r.failures
    );
    let t = r.extra.time_to_establish_s.unwrap();
    assert!(t > 0.0 && t == r.duration_s, "{t}");
    let connect = r.extra.connect_latency_us.unwrap();
    assert!(
        connect.p50 > 0.0 && connect.max <= r.latency_us.unwrap().max,
        "{connect:?} vs {:?}",
        r.latency_us
    );
    // Every connection is opened once and proven by one 1-byte echo.
    assert_eq!(
        (calls(&r, "connect"), calls(&r, "write"), calls(&r, "close")),
        (200, 200, 200)
    );
    assert_eq!(r.payload_bytes, 1);
}

#[test]
fn connect_storm_counts_refusals() {
    let port = common::closed_port().to_string();
    let r = report(&["connect-storm", "127.0.0.1", &port, "50"]);
    assert_eq!(r.extra.established, Some(0));
    assert_eq!(failures(&r, "refused"), 50, "{:?}", r.failures);
}

#[test]
fn sustain_with_1kib_replies_gives_interval_records() {
    let server = spawn_echo_server("epoll-et", &["--reply-bytes", "1024"]);
    let port = server.addr.port().to_string();
    let cpu_before = common::reaped_children_cpu_s();
    let r = report(&[
        "sustain",
        "127.0.0.1",
        &port,
        "20",
        "--reply-bytes",
        "1024",
        "--duration",
        "2s",
    ]);
    assert_eq!(
        (r.mode.as_str(), r.reply_bytes, r.payload_bytes),
        ("sustain", Some(1024), 12)
    );
    assert_eq!(r.requests_failed, 0, "{:?}", r.failures);
    assert_eq!(r.intervals.len(), 2);
    assert!(
        r.intervals
            .iter()
            .all(|i| i.requests_ok > 0 && i.latency_us.is_some_and(|l| l.p50 > 0.0)),
        "{:?}",
        r.intervals
    );
    for iv in &r.intervals {
        assert!((iv.rx_bytes_per_s - iv.qps * 1024.0).abs() < 1e-6 * iv.rx_bytes_per_s.max(1.0));
    }
    assert_eq!(
        r.intervals.iter().map(|i| i.requests_ok).sum::<u64>(),
        r.requests_ok
    );
    // Without a warm-up the report's client CPU is nearly all of the process's, as seen from
    // outside it (start-up and exit cost little next to 2 s of load).
    let whole_run_cpu = common::reaped_children_cpu_s() - cpu_before;
    let client_cpu = r.client_cpu.user_s + r.client_cpu.sys_s;
    assert!(
        client_cpu <= whole_run_cpu + 0.01 && client_cpu >= 0.8 * whole_run_cpu,
        "client_cpu {client_cpu:.3} s, whole run {whole_run_cpu:.3} s"
    );
}
