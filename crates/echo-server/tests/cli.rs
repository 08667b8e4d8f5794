//! Bad command-line input: one line naming the problem, exit status 2, no
//! panic, no backtrace.

mod common;

use std::net::TcpListener;
use std::process::Command;

/// Runs echo-server with `args` (RUST_BACKTRACE=1, so a panic would show its backtrace) and
/// returns (exit code, stderr).
fn run(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_echo-server"))
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("run echo-server");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn assert_usage_error(args: &[&str], must_name: &[&str]) {
    let (code, stderr) = run(args);
    assert_eq!(code, Some(2), "exit status for {args:?}; stderr: {stderr}");
    assert_eq!(
        stderr.trim_end().lines().count(),
        1,
        "one line for {args:?}, got:\n{stderr}"
    );
    for word in must_name {
        assert!(
            stderr.contains(word),
            "stderr for {args:?} does not name {word:?}: {stderr}"
        );
    }
    for bad in ["panicked", "backtrace", "RUST_BACKTRACE"] {
        assert!(
            !stderr.contains(bad),
            "stderr for {args:?} contains {bad:?}: {stderr}"
        );
    }
}

#[test]
fn unknown_model_is_named() {
    assert_usage_error(
        &["--model", "kqueue", "--port", "0"],
        &["kqueue", "--model"],
    );
}

#[test]
fn port_in_use_is_named() {
    let holder = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = holder.local_addr().unwrap().port().to_string();
    assert_usage_error(
        &[
            "--model",
            "epoll-et",
            "--bind",
            "127.0.0.1",
            "--port",
            &port,
        ],
        &[&port, "in use"],
    );
}

#[test]
fn bad_duration_is_named() {
    assert_usage_error(
        &[
            "--model",
            "poll",
            "--port",
            "0",
            "--stats-interval",
            "5parsecs",
        ],
        &["5parsecs", "--stats-interval"],
    );
}

#[test]
fn zero_read_buffer_is_named() {
    assert_usage_error(
        &["--model", "select", "--port", "0", "--read-buf", "0"],
        &["--read-buf"],
    );
}

#[test]
fn exclusive_outside_prefork_is_named() {
    assert_usage_error(
        &["--model", "reuseport", "--port", "0", "--exclusive"],
        &["--exclusive"],
    );
}

#[test]
fn bad_nodelay_value_is_named() {
    assert_usage_error(
        &["--model", "poll", "--port", "0", "--nodelay=maybe"],
        &["maybe", "--nodelay"],
    );
}
