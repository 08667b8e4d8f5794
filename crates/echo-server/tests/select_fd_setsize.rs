//! `select` with descriptors at or above FD_SETSIZE (1024): no undefined behaviour (the server
//! survives), a connection it cannot watch is closed and counted as `fd_over_setsize`, and the
//! others keep being served.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;

use common::*;
use echolab_testkit::wait_until;

/// More connections than select can watch: the server's own descriptors (0-2, listener, signal
/// pipe) plus these exceed 1024.
const HELD: usize = 1040;

/// `true` if the server echoed on `s`, `false` if it had closed `s` (EOF or reset).
fn served(s: &mut TcpStream, msg: &[u8]) -> bool {
    if let Err(e) = s.write_all(msg) {
        assert!(
            matches!(e.kind(), ErrorKind::BrokenPipe | ErrorKind::ConnectionReset),
            "write: {e}"
        );
        return false;
    }
    let mut back = vec![0; msg.len()];
    match s.read_exact(&mut back) {
        Ok(()) => {
            assert_eq!(back, msg);
            true
        }
        Err(e)
            if matches!(
                e.kind(),
                ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset
            ) =>
        {
            false
        }
        Err(e) => panic!("read: {e}"),
    }
}

#[test]
fn select_closes_and_counts_descriptors_over_fd_setsize() {
    raise_own_nofile();
    let mut server = spawn_with_nofile("select", &[], 4096);
    let mut clients: Vec<TcpStream> = (0..HELD).map(|_| connect(server.addr)).collect();
    let mut closed_by_server = 0u64;
    let mut served_ok = Vec::new();
    for (i, c) in clients.iter_mut().enumerate() {
        if served(c, format!("conn {i}\n").as_bytes()) {
            served_ok.push(i);
        } else {
            closed_by_server += 1;
        }
    }
    assert!(
        server.is_running(),
        "select server died; stderr:\n{}",
        server.stderr()
    );
    assert!(
        closed_by_server >= 1,
        "no connection was refused although {HELD} were open"
    );
    assert!(
        served_ok.len() >= 1000,
        "only {} of {HELD} connections served",
        served_ok.len()
    );
    // The watched connections are still served after the refusals.
    for &i in served_ok.iter().take(5) {
        assert!(
            served(&mut clients[i], b"still here\n"),
            "connection {i} lost after the refusals"
        );
    }
    // Closing served connections frees descriptors below 1024; new clients get served again once
    // the server has closed them (until then a new connection may still land above the limit).
    for i in served_ok.iter().rev().take(10) {
        clients[*i].shutdown(std::net::Shutdown::Both).unwrap();
    }
    let mut refused_later = 0u64;
    wait_until(
        "a new connection to be served after descriptors were freed",
        DEADLINE,
        || {
            let ok = served(&mut connect(server.addr), b"new\n");
            refused_later += u64::from(!ok);
            ok.then_some(())
        },
    );
    let st = stop_ok(server);
    assert_eq!(
        errors(&st, "fd_over_setsize"),
        closed_by_server + refused_later,
        "{st:?}"
    );
}
