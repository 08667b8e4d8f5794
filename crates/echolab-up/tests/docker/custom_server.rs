//! A server of the researcher's own (`servers: [{name, command, port}]`), here socat from
//! Debian's package, which is not echo-server under another name: taken from the PATH into the
//! lab image, checked to echo, measured beside echo-server, and refused by name when it does
//! not echo.

use std::process::Command;

use echolab_core::results::RunStatus;
use echolab_testkit::TempDir;

use super::common::*;

/// socat serving the echo protocol (PIPE writes back what it reads), one process per
/// connection, beside epoll-et.
const SOCAT_BESIDE_EPOLL: &str = "name: own\nquestion: q\nrepetitions: 1\nwarmup: 100ms\nwindow: 300ms\nmatrix:\n  - servers:\n      - epoll-et\n      - {name: socat-pipe, command: [socat, \"TCP-LISTEN:7000,fork,reuseaddr\", PIPE], port: 7000}\n    modes: [short, long]\n    conns: [10]\n    rounds: [10]\n";

fn socat_on_path() -> bool {
    Command::new("socat")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn socat_is_measured_beside_echo_server() {
    assert!(
        socat_on_path(),
        "socat is not installed (scripts/test installs it)"
    );
    let e = engine();
    let base = TempDir::new("up-docker-own-socat");
    let (mut cmd, out) = loopback_experiment(&base, "own.yaml", SOCAT_BESIDE_EPOLL);
    let r = completed(&mut cmd, &out);
    assert!(
        r.manifest.image.binaries.contains_key("socat"),
        "socat went into the image: {:?}",
        r.manifest.image.binaries.keys()
    );
    let socat: Vec<_> = r
        .runs
        .iter()
        .filter(|x| x.cell.server == "socat-pipe")
        .collect();
    assert_eq!(socat.len(), 2, "a short and a long cell");
    for run in socat {
        assert_eq!(run.error, None, "{}", run.cell.id());
        let bench = run.bench.as_ref().expect("measured");
        assert!(
            bench.requests_ok > 0 && bench.requests_failed == 0,
            "{bench:?}"
        );
        assert!(run.server.is_none(), "socat prints no echo-server stats");
        assert!(!run.samples.is_empty(), "its host's CPU was sampled");
    }
    let epoll = r.runs.iter().find(|x| x.cell.server == "epoll-et").unwrap();
    assert!(epoll.server.is_some(), "echo-server's stats are kept");
    let report = std::fs::read_to_string(r.path.join("report.md")).unwrap();
    assert!(
        report.contains("**socat-pipe** is not an echo-server model"),
        "{report}"
    );
    assert_nothing_left(&e, &r.manifest.run_id);
}

#[test]
fn a_server_that_does_not_echo_is_named_before_any_cell() {
    assert!(
        socat_on_path(),
        "socat is not installed (scripts/test installs it)"
    );
    let e = engine();
    let base = TempDir::new("up-docker-own-mute");
    // Reads go to /dev/null and nothing comes back: it accepts but does not echo.
    let mute = SOCAT_BESIDE_EPOLL
        .replace("PIPE]", "\"OPEN:/dev/null\"]")
        .replace("socat-pipe", "socat-mute");
    let (mut cmd, out) = loopback_experiment(&base, "mute.yaml", &mute);
    let o = cmd.output().expect("echolab-up runs");
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("server \"socat-mute\"") && err.contains("does not echo"),
        "{err}"
    );
    let r = results(&out);
    assert_eq!(
        r.manifest.status,
        RunStatus::Failed,
        "{:?}",
        r.manifest.status
    );
    assert!(r.runs.is_empty(), "no cell ran: {:?}", r.runs.len());
    assert_nothing_left(&e, &r.manifest.run_id);
}
