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
