//! Counting rules of the readiness models: every connection, byte and I/O system call is
//! counted, and a 12-byte request/response costs the minimum the model allows: one read, one
//! write and one wait call (edge-triggered reads stop at a short read, not at EAGAIN; a
//! connection is registered with epoll once and never modified).

mod common;

use std::io::Read;
use std::net::Shutdown;

use common::*;
use echolab_core::protocol::DEFAULT_PAYLOAD;
use echolab_testkit::spawn_echo_server;

const ROUNDS: u64 = 200;

fn sequential_echo_counts(model: &str, args: &[&str]) -> echolab_core::stats::ServerStats {
    let server = spawn_echo_server(model, args);
    let mut s = connect(server.addr);
    for _ in 0..ROUNDS {
        assert_eq!(
            round_trip(&mut s, DEFAULT_PAYLOAD).unwrap(),
            DEFAULT_PAYLOAD
        );
    }
    s.shutdown(Shutdown::Write).unwrap();
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).unwrap();
    let st = stop_ok(server);
    let bytes = ROUNDS * DEFAULT_PAYLOAD.len() as u64;
    assert_eq!(
        (st.totals.accepted, st.totals.closed),
        (1, 1),
        "{model}: {st:?}"
    );
    assert_eq!(
        (st.totals.bytes_in, st.totals.bytes_out),
        (bytes, bytes),
        "{model}"
    );
    assert_eq!(
        syscalls(&st, "write"),
        ROUNDS,
        "{model}: one write per 12-byte reply"
    );
    assert_eq!(syscalls(&st, "close"), 1, "{model}");
    let reads = syscalls(&st, "read");
    // 200 requests, the EOF read, and a little slack for an EAGAIN read around connect/close.
    assert!(
        (ROUNDS + 1..=ROUNDS + 3).contains(&reads),
        "{model}: {reads} reads for {ROUNDS} requests"
    );
    assert!(st.totals.events_returned >= ROUNDS, "{model}: {st:?}");
    st
}

fn wait_calls(st: &echolab_core::stats::ServerStats, name: &str) -> u64 {
    let n = syscalls(st, name);
    assert!(
        (ROUNDS..=ROUNDS + 10).contains(&n),
        "{n} {name} calls for {ROUNDS} sequential requests: {st:?}"
    );
    n
}

#[test]
fn select_costs_one_select_read_write_per_request() {
    let st = sequential_echo_counts("select", &[]);
    wait_calls(&st, "select");
}

#[test]
fn poll_costs_one_poll_read_write_per_request() {
    let st = sequential_echo_counts("poll", &[]);
    wait_calls(&st, "poll");
}

#[test]
fn epoll_lt_registers_each_connection_once_when_output_never_blocks() {
    let st = sequential_echo_counts("epoll-lt", &[]);
    wait_calls(&st, "epoll_wait");
    assert_eq!(
        syscalls(&st, "epoll_ctl"),
        2,
        "listener + connection ADD: {st:?}"
    );
}

#[test]
fn epoll_et_costs_one_read_write_wait_per_request() {
    let st = sequential_echo_counts("epoll-et", &[]);
    wait_calls(&st, "epoll_wait");
    assert_eq!(
        syscalls(&st, "epoll_ctl"),
        2,
        "listener + connection ADD, never MOD: {st:?}"
    );
}

#[test]
fn reuseport_counts_per_reactor() {
    let st = sequential_echo_counts("reuseport", &["--workers", "2"]);
    assert_eq!(st.workers.len(), 2);
    let serving: Vec<_> = st
        .workers
        .iter()
        .filter(|w| w.counters.accepted == 1)
        .collect();
    assert_eq!(
        serving.len(),
        1,
        "one reactor accepted the one connection: {st:?}"
    );
    assert!(
        st.workers.iter().all(|w| w.pid == st.pid),
        "reactors are threads of the server"
    );
    // Each reactor's listener ADD, the connection's ADD; its reactor waits once per request.
    assert_eq!(syscalls(&st, "epoll_ctl"), 3, "{st:?}");
    let waits = serving[0].counters.syscalls["epoll_wait"].count;
    assert!(
        (ROUNDS..=ROUNDS + 10).contains(&waits),
        "{waits} epoll_wait calls: {st:?}"
    );
}

#[test]
fn prefork_children_count_into_shared_slots() {
    for exclusive in [false, true] {
        let args: &[&str] = if exclusive {
            &["--workers", "2", "--exclusive"]
        } else {
            &["--workers", "2"]
        };
        let st = sequential_echo_counts("prefork", args);
        assert_eq!(st.workers.len(), 2);
        let pids: Vec<u32> = st.workers.iter().map(|w| w.pid).collect();
        assert!(
            pids.iter().all(|&p| p != 0 && p != st.pid) && pids[0] != pids[1],
            "child pids {pids:?}"
        );
        assert_eq!(
            syscalls(&st, "epoll_ctl"),
            3,
            "exclusive={exclusive}: {st:?}"
        );
    }
}
