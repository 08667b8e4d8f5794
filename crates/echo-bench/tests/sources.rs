//! `--source-addrs`: short connections to loopback are made from 16 loopback addresses by
//! default, seen as such by the server (its accepted peers) and by the kernel (the client's
//! TIME_WAIT sockets, /proc/net/tcp), and recorded in the report; `kernel` makes them from
//! one; an address that is not local is refused before anything connects.

mod common;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpStream};
use std::sync::Mutex;

use common::FaultyServer;

/// Peer addresses the recording server accepted (one server per test binary at a time).
static PEERS: Mutex<BTreeSet<IpAddr>> = Mutex::new(BTreeSet::new());
static SERIAL: Mutex<()> = Mutex::new(());

fn recording_echo(mut s: TcpStream) {
    PEERS.lock().unwrap().insert(s.peer_addr().unwrap().ip());
    let mut buf = [0u8; 4096];
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 || s.write_all(&buf[..n]).is_err() {
            break;
        }
    }
}

fn loopback(range: std::ops::RangeInclusive<u8>) -> BTreeSet<IpAddr> {
    range
        .map(|n| IpAddr::V4(Ipv4Addr::new(127, 0, 0, n)))
        .collect()
}

/// Runs 20 connections × 2 rounds in `mode` with `extra` flags against a fresh recording
/// server, in a network namespace of its own (whose TIME_WAIT table no other test fills);
/// returns the report, the peers the server saw and the client's new TIME_WAIT sources.
fn run(
    mode: &str,
    extra: &[&str],
) -> (
    echolab_core::stats::BenchReport,
    BTreeSet<IpAddr>,
    BTreeSet<IpAddr>,
) {
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    PEERS.lock().unwrap().clear();
    let mut args: Vec<String> = ["127.0.0.1", "PORT", "20", "2", "--mode", mode]
        .iter()
        .chain(extra)
        .map(|a| a.to_string())
        .collect();
    let (report, tw) = common::in_fresh_netns(move || {
        let server = FaultyServer::start(recording_echo);
        args[1] = server.port.to_string();
        let before = common::time_wait_sockets(server.port);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let report = common::report(&args);
        let tw: BTreeSet<IpAddr> = common::time_wait_sockets(server.port)
            .difference(&before)
            .map(|&(ip, _)| ip)
            .collect();
        drop(server);
        (report, tw)
    });
    let peers = std::mem::take(&mut *PEERS.lock().unwrap());
    (report, peers, tw)
}

#[test]
fn short_loopback_connections_come_from_16_addresses_by_default() {
    let (r, peers, tw) = run("short", &[]);
    assert_eq!(r.requests_ok, 40);
    let expected = loopback(1..=16);
    assert_eq!(peers, expected, "peers the server accepted");
    assert_eq!(tw, expected, "the client's TIME_WAIT sockets");
    let listed: BTreeSet<IpAddr> = r.source_addrs.iter().map(|a| a.parse().unwrap()).collect();
    assert_eq!((listed, r.source_addrs.len()), (expected, 16));
    assert!(
        r.source_addrs_reason.starts_with("auto: 16"),
        "{}",
        r.source_addrs_reason
    );
    // Each of the 40 sockets is bound before its connect.
    assert_eq!(common::calls(&r, "bind"), 40);
}

#[test]
fn kernel_choice_and_explicit_lists_are_obeyed() {
    let (r, peers, tw) = run("short", &["--source-addrs", "kernel"]);
    assert_eq!(peers, loopback(1..=1));
    assert_eq!(tw, loopback(1..=1));
    assert!(r.source_addrs.is_empty());
    assert_eq!(common::calls(&r, "bind"), 0);

    let (r, peers, _) = run(
        "short",
        &["--source-addrs", "127.0.0.5-127.0.0.7,127.0.0.9"],
    );
    let mut expected = loopback(5..=7);
    expected.insert(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 9)));
    assert_eq!(peers, expected);
    assert_eq!(
        r.source_addrs,
        ["127.0.0.5", "127.0.0.6", "127.0.0.7", "127.0.0.9"]
    );

    // --linger0 keeps no TIME_WAIT, and long connections connect once: auto leaves the
    // address to the kernel for both.
    let (r, peers, _) = run("short", &["--linger0"]);
    assert_eq!((r.source_addrs.len(), peers), (0, loopback(1..=1)));
    let (r, peers, _) = run("long", &[]);
    assert_eq!((r.mode.as_str(), peers), ("long", loopback(1..=1)));
    // An explicit list is obeyed by long connections too, in every engine that makes them.
    for engine in ["event", "thread", "uring"] {
        let (r, peers, _) = run(
            "long",
            &["--engine", engine, "--source-addrs", "127.0.0.5,127.0.0.6"],
        );
        assert_eq!(r.requests_ok, 40, "{engine}");
        assert_eq!(peers, loopback(5..=6), "{engine}");
    }
}

#[test]
fn an_address_that_is_not_local_is_refused_before_connecting() {
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    PEERS.lock().unwrap().clear();
    let server = FaultyServer::start(recording_echo);
    let port = server.port.to_string();
    // 192.0.2.0/24 is TEST-NET-1 (RFC 5737): no host has it.
    let (out, _) = common::run(&[
        "127.0.0.1",
        &port,
        "2",
        "1",
        "--mode",
        "short",
        "--source-addrs",
        "192.0.2.7",
    ]);
    drop(server);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("192.0.2.7") && stderr.contains("not an address of this host"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(PEERS.lock().unwrap().is_empty(), "nothing connected");
}
