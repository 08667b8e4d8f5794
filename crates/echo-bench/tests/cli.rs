//! Bad input: one line naming the problem, exit status 2 (1 for an environment that cannot
//! run the request), no usage dump, no panic.

mod common;

use std::os::unix::process::CommandExt;

use common::{run, run_with};

fn one_line_error(args: &[&str], expected_code: i32, must_contain: &[&str]) {
    let (out, _) = run(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(expected_code), "{args:?}: {stderr}");
    assert_eq!(
        stderr.lines().count(),
        1,
        "{args:?}: one line expected, got:\n{stderr}"
    );
    for s in must_contain {
        assert!(stderr.contains(s), "{args:?}: {s:?} missing in {stderr}");
    }
    assert!(
        !stderr.contains("panicked") && !stderr.contains("Usage"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}

/// A rate outside one request a day to ten million a second is refused as a usage error
/// naming the flag, the value and the range: 1e-300 used to panic a worker (its schedule's
/// first slot overflowed `Duration`) and 1e-17 ran a window in which no request was due.
#[test]
fn rates_outside_their_range_exit_2_naming_the_range() {
    for rate in ["1e-300", "1e-17", "0.00001", "1e8", "NaN", "inf"] {
        one_line_error(
            &["127.0.0.1", "1", "1", "1", "--rate", rate],
            2,
            &[
                "--rate",
                rate,
                "from 0.0000116",
                "to 10000000 requests per second",
            ],
        );
    }
    one_line_error(
        &["sustain", "127.0.0.1", "1", "1", "--rate", "1e-300"],
        2,
        &["--rate", "1e-300", "from 0.0000116"],
    );
}

/// Counts and durations past their documented maxima are refused before anything runs.
#[test]
fn counts_and_durations_past_their_maxima_exit_2() {
    one_line_error(
        &["127.0.0.1", "1", "1", "1000000001"],
        2,
        &["ROUNDS", "1000000001", "1..=1000000000"],
    );
    one_line_error(
        &["127.0.0.1", "1", "1", "--duration", "25h"],
        2,
        &["--duration", "25h", "at most 24h"],
    );
    one_line_error(
        &["127.0.0.1", "1", "1", "1", "--warmup", "1000h"],
        2,
        &["--warmup", "1000h", "from 0s to 24h"],
    );
    one_line_error(
        &["sustain", "127.0.0.1", "1", "1", "--interval", "48h"],
        2,
        &["--interval", "48h", "at most 24h"],
    );
}

#[test]
fn bad_values_exit_2_with_one_line() {
    one_line_error(
        &["127.0.0.1", "9", "10", "--duration", "10x"],
        2,
        &["--duration", "10x"],
    );
    one_line_error(
        &["127.0.0.1", "9", "10", "5", "--mode", "medium"],
        2,
        &["--mode", "medium"],
    );
    one_line_error(&["127.0.0.1", "9", "0", "5"], 2, &["CONNS", "0"]);
    one_line_error(
        &["127.0.0.1", "9", "10", "--duration", "1s", "--rate=0"],
        2,
        &["--rate", "0"],
    );
    one_line_error(
        &["127.0.0.1", "9", "10", "5", "--nodelay=maybe"],
        2,
        &["--nodelay", "maybe"],
    );
    one_line_error(
        &["127.0.0.1", "9", "10", "5", "--timeout", "0s"],
        2,
        &["--timeout", "0s"],
    );
    one_line_error(&["127.0.0.1", "9", "10"], 2, &["ROUNDS"]);
    // Refused before any connection is made (port 9 has no server: a run would fail later),
    // and with --processes once, by the parent, not once per process.
    for processes in ["1", "2"] {
        one_line_error(
            &[
                "127.0.0.1",
                "9",
                "10",
                "5",
                "--mode",
                "short",
                "--processes",
                processes,
                "--short-sockets",
                "reuse",
            ],
            2,
            &["--short-sockets reuse", "--linger0"],
        );
    }
    one_line_error(
        &["127.0.0.1", "9", "10", "5", "--short-sockets", "sometimes"],
        2,
        &["--short-sockets", "sometimes"],
    );
    one_line_error(&["127.0.0.1", "99999", "10", "5"], 2, &["PORT", "99999"]);
    one_line_error(
        &["sustain", "127.0.0.1", "9", "5", "--interval", "soon"],
        2,
        &["--interval", "soon"],
    );
    one_line_error(&["bad host name", "9", "1", "1"], 2, &["bad host name"]);
}

#[test]
fn help_teaches_and_exits_0() {
    let (out, _) = run(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    for s in [
        "--mode short",
        "connect to close",
        "send to receive",
        "seed 000",
        "connect-storm",
        "Examples",
    ] {
        assert!(help.contains(s), "{s:?} missing in help");
    }
}

#[test]
fn too_low_descriptor_limit_is_said_clearly() {
    let (out, _) = run_with(&["127.0.0.1", "9", "1000", "1"], |cmd| {
        // SAFETY: setrlimit(2) is async-signal-safe and touches only the child's own limits;
        // nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                let lim = libc::rlimit {
                    rlim_cur: 256,
                    rlim_max: 256,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    });
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("1000 connections") && stderr.contains("hard limit is 256"),
        "{stderr}"
    );
}
