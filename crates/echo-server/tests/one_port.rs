//! A port is one server's: a second echo-server on a port another process listens on refuses
//! to start, whatever its model (SO_REUSEPORT included), while one reuseport server's own
//! workers still share their port.

mod common;

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;

use common::{connect, round_trip, stop_ok, ALL_MODELS, DEADLINE};
use echolab_core::cmd::Ready;
use echolab_testkit::{dies_with_parent, spawn_echo_server, workspace_bin};

/// Starts echo-server with `args` and returns its exit code and stderr once it exits; a
/// server that announces readiness instead is killed and the test fails with its stderr.
fn must_refuse(args: &[&str]) -> (Option<i32>, String) {
    let mut child = dies_with_parent(Command::new(workspace_bin("echo-server")).args(args))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start echo-server");
    let stderr = child.stderr.take().expect("stderr is piped");
    let (tx, rx) = mpsc::channel();
    // Lines as they come, so that a server that starts is seen at its readiness line rather
    // than when it would exit (never).
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut seen = String::new();
    loop {
        match rx.recv_timeout(DEADLINE) {
            Ok(line) => {
                seen.push_str(&line);
                seen.push('\n');
                if line.starts_with(Ready::PREFIX) {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("echo-server {args:?} started on a taken port:\n{seen}");
                }
            }
            // stderr closed: the process is exiting.
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("echo-server {args:?} neither started nor exited:\n{seen}");
            }
        }
    }
    let status = child.wait().expect("wait for echo-server");
    (status.code(), seen)
}

#[test]
fn a_second_server_on_a_served_port_refuses_to_start_for_every_model() {
    for &model in ALL_MODELS {
        let first = spawn_echo_server(model, &["--workers", "2"]);
        let at = first.addr.to_string();
        let port = first.addr.port().to_string();
        // The same address, and the wildcard that covers it.
        for bind in ["127.0.0.1", "0.0.0.0"] {
            let args = [
                "--model",
                model,
                "--bind",
                bind,
                "--port",
                &port,
                "--workers",
                "2",
            ];
            let (code, stderr) = must_refuse(&args);
            assert_eq!(code, Some(2), "{model} on {bind}: {stderr}");
            assert_eq!(stderr.trim_end().lines().count(), 1, "{model}: {stderr}");
            let mine = format!("{bind}:{port}");
            for needed in [
                mine.as_str(),
                at.as_str(),
                "another process already listens",
            ] {
                assert!(
                    stderr.contains(needed),
                    "{model} on {bind}: no {needed:?} in {stderr}"
                );
            }
        }
        // The first server was not disturbed.
        let mut s = connect(first.addr);
        assert_eq!(
            round_trip(&mut s, b"still mine\n").unwrap(),
            b"still mine\n"
        );
        drop(s);
        stop_ok(first);
    }
}

#[test]
fn one_reuseport_server_shares_its_port_among_its_own_workers() {
    let server = spawn_echo_server("reuseport", &["--workers", "4"]);
    let conns: Vec<_> = (0..16).map(|_| connect(server.addr)).collect();
    for (i, mut s) in conns.into_iter().enumerate() {
        let msg = format!("conn {i}\n");
        assert_eq!(round_trip(&mut s, msg.as_bytes()).unwrap(), msg.as_bytes());
    }
    let stats = stop_ok(server);
    assert_eq!(stats.workers.len(), 4, "{stats:?}");
    assert_eq!(stats.totals.accepted, 16, "{stats:?}");
}
