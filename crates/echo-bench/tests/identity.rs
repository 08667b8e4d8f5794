//! Echoes prove whose they are: every request carries its connection's id and sequence number
//! (`echolab_core::protocol::stamp`), so a reply that is another connection's bytes, or an
//! earlier request's, fails as `foreign_echo`, apart from damaged bytes (`mismatch`), on every
//! engine and mode that echoes.

mod common;

use common::{failures, report, FaultyServer};

#[test]
fn swapped_replies_are_foreign_echoes_on_every_engine_and_mode() {
    let server = FaultyServer::swapper();
    let port = server.port.to_string();
    // --processes 2: one connection per process, numbered across both.
    for (mode, engine, processes) in [
        ("long", "event", "1"),
        ("short", "event", "1"),
        ("long", "thread", "1"),
        ("short", "thread", "1"),
        ("long", "uring", "1"),
        ("long", "event", "2"),
    ] {
        let r = report(&[
            "127.0.0.1",
            &port,
            "2",
            "3",
            "--mode",
            mode,
            "--engine",
            engine,
            "--processes",
            processes,
        ]);
        let run = format!("{mode}/{engine}/{processes}: {:?}", r.failures);
        assert_eq!((r.requests_ok, r.requests_failed), (0, 6), "{run}");
        assert_eq!(failures(&r, "foreign_echo"), 6, "{run}");
    }
}

#[test]
fn a_stale_echo_of_the_same_connection_is_foreign_too() {
    // Request 0 comes back as itself; request 1 as request 0, which fails it and drops the
    // connection; request 2, on a new connection, comes back as itself.
    let server = FaultyServer::replayer();
    let port = server.port.to_string();
    for engine in ["event", "thread", "uring"] {
        let r = report(&["127.0.0.1", &port, "1", "3", "--engine", engine]);
        let run = format!("{engine}: {:?}", r.failures);
        assert_eq!((r.requests_ok, r.requests_failed), (2, 1), "{run}");
        assert_eq!(failures(&r, "foreign_echo"), 1, "{run}");
    }
}
