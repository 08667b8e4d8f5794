//! `--processes N`: one run over N client processes, merged into one report whose counts are
//! exactly the run's (every connection's rounds, every system call), whose histogram holds
//! every request, and whose intervals add up to the whole.

mod common;

use echolab_testkit::spawn_echo_server;

#[test]
fn three_processes_make_exactly_the_requests_of_one() {
    let server = spawn_echo_server("epoll-et", &[]);
    let port = server.addr.port().to_string();
    let r = common::report(&["127.0.0.1", &port, "30", "5", "--processes", "3"]);
    assert_eq!((r.conns, r.requests_ok, r.requests_failed), (30, 150, 0));
    assert_eq!(echolab_core::hist::decode(&r.histogram).unwrap().len(), 150);
    assert_eq!(common::calls(&r, "write"), 150);
    assert_eq!(common::calls(&r, "connect"), 30);
    assert_eq!(r.extra.processes, Some(3));
    let rss = r.extra.max_rss_kib_per_process.as_ref().unwrap();
    assert_eq!(rss.len(), 3);
    assert_eq!(r.max_rss_kib, rss.iter().sum::<u64>());
    assert!(rss.iter().all(|&v| v > 0));
    assert!(
        r.threads_reason.starts_with("3 processes, each "),
        "{}",
        r.threads_reason
    );
    assert_eq!(r.extra.shard_interval_histograms, None);
}

#[test]
fn timed_short_run_over_two_processes_merges_its_intervals() {
    let server = spawn_echo_server("epoll-et", &[]);
    let port = server.addr.port().to_string();
    let r = common::report(&[
        "127.0.0.1",
        &port,
        "8",
        "--duration",
        "2s",
        "--mode",
        "short",
        "--rate",
        "200",
        "--processes",
        "2",
    ]);
    // Open loop at 200/s, so that the test leaves a few hundred TIME_WAIT sockets, not a
    // table full; the two shards' schedules interleave into one of 200/s.
    assert_eq!(r.requests_failed, 0);
    assert!((300..=401).contains(&r.requests_ok), "{}", r.requests_ok);
    assert_eq!(r.intervals.len(), 2);
    let in_intervals: u64 = r.intervals.iter().map(|i| i.requests_ok).sum();
    assert_eq!(in_intervals, r.requests_ok);
    assert_eq!(common::calls(&r, "connect"), common::calls(&r, "close"));
    // Short connections to loopback: both shards spread over the same 16 addresses.
    assert_eq!(r.source_addrs.len(), 16);
}

#[test]
fn more_processes_than_connections_and_bad_hosts_are_refused_once() {
    let (out, _) = common::run(&["127.0.0.1", "9", "3", "1", "--processes", "5"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--processes 5") && stderr.contains("CONNS 3"),
        "{stderr}"
    );
    let (out, _) = common::run(&["no-such-host.invalid", "9", "4", "1", "--processes", "2"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(
        stderr.lines().count(),
        1,
        "one line, not one per shard: {stderr}"
    );
}
