//! Runs that fail, and input refused before a run starts: each failure is recorded, said on
//! stderr, and leaves nothing on the engine.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use echolab_core::results::{ResultsDir, RunStatus};
use echolab_testkit::{wait_until, TempDir};

use super::common::*;

#[test]
fn a_forced_failure_leaves_nothing_behind() {
    let e = engine();
    let base = TempDir::new("up-docker-fail");
    // A valid experiment whose server cannot serve: a server of its own (socat without
    // `fork`) that answers the launcher's echo check and then exits. Every rule the file is
    // checked by passes (an input that cannot make sense is refused before any host exists);
    // the failure happens inside the run, after hosts exist, which is what cleanup must
    // survive.
    let (mut cmd, out) = loopback_experiment(
        &base,
        "bad-server.yaml",
        "name: bad-server\nquestion: does a failing cell stop the run cleanly?\nrepetitions: 1\nmatrix:\n  - servers:\n      - {name: gone, command: [socat, \"TCP-LISTEN:7000,reuseaddr\", PIPE], port: 7000}\n    modes: [long]\n    conns: [1]\n    rounds: [1]\n",
    );
    let o = cmd.output().expect("echolab-up runs");
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let r = results(&out);
    assert_eq!(r.manifest.status, RunStatus::Failed);
    let error = r.manifest.error.clone().unwrap_or_default();
    assert!(
        error.contains("exited right after its echo check"),
        "the error carries the server's reason: {error}"
    );
    assert!(
        r.runs.iter().all(|run| run.error.is_some()),
        "no cell passes for a result"
    );
    assert_nothing_left(&e, &r.manifest.run_id);
}

#[test]
fn a_failed_calibration_stops_the_run_before_any_cell() {
    let e = engine();
    let base = TempDir::new("up-docker-calfail");
    // Loopback round trips take tens of microseconds; this profile expects 5 s +- 1 ms, which
    // no path on this machine gives, so calibration must fail and no cell may run.
    let profile = write_input(&base, "five-seconds.yaml", "name: five-seconds\ndescription: a loopback that cannot pass calibration\nsource: test\ntopology: loopback\nexpected:\n  rtt: { value: 5s, minus: 1ms, plus: 1ms }\n");
    let bins = snapshot_bins(&base);
    let out = base.path().join("results");
    let o = run(
        &out,
        &bins,
        &profile_experiment(profile.to_str().unwrap(), "smoke"),
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let r = results(&out);
    let m = &r.manifest;
    assert_eq!(m.status, RunStatus::Failed, "{:?}", m.error);
    assert_eq!((m.runs_done, r.runs.len()), (0, 0), "no cell ran");
    let runs: Vec<_> = std::fs::read_dir(r.path.join("runs"))
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(runs.is_empty(), "no run file is written: {runs:?}");
    let cal = m.link.calibration.as_ref().expect("calibration recorded");
    assert!(!cal.passed, "{cal:?}");
    let measured = cal.measured["rtt_median_us"];
    // Loopback inside one network namespace: far below a millisecond, far above nothing.
    assert!(
        measured > 1.0 && measured < 1000.0,
        "measured {measured} us: {cal:?}"
    );
    assert_eq!(cal.expected["rtt_median_us"], 5_000_000.0, "{cal:?}");
    // A miss is measured again after a wait for a quiet machine; this one misses every time.
    assert_eq!(cal.missed_attempts.len(), 2, "{cal:?}");
    assert!(cal.reason.contains("attempt 3 of 3"), "{}", cal.reason);
    let error = m.error.clone().unwrap_or_default();
    assert!(
        error.contains("calibration of profile five-seconds")
            && error.contains(&format!("rtt_median {measured:.1} us"))
            && error.contains("expected 4999000.0..5001000.0, FAILED"),
        "the error names the measured and expected values: {error}"
    );
    assert!(stderr(&o).contains(&error), "{}", stderr(&o));
    assert_nothing_left(&e, &m.run_id);
}

#[test]
fn a_server_killed_during_a_cell_fails_that_run_and_the_next_cell_gets_a_fresh_one() {
    let e = engine();
    let base = TempDir::new("up-docker-server-dies");
    // Hosts reused across cells, so the next cell's server is fresh only because the launcher
    // noticed the death.
    let (mut cmd, out) = loopback_experiment(
        &base,
        "dies.yaml",
        "name: dies\nquestion: does a cell whose server died say so?\nrepetitions: 3\nmatrix:\n  - servers: [epoll-et]\n    modes: [long]\n    conns: [2]\n    rounds: [20000]\n",
    );
    let mut launcher = Child(
        cmd.arg("--reuse-hosts")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let stderr_pipe = launcher.0.stderr.take().unwrap();
    let stderr_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let mut p = stderr_pipe;
        let _ = std::io::Read::read_to_string(&mut p, &mut s);
        s
    });
    let dir = first_run_recorded(&out, &mut launcher);
    let run_id = ResultsDir::load(&dir).unwrap().manifest.run_id;
    let server_host = format!("echolab-{run_id}-server");
    // SIGKILL whichever echo-server runs on the server host, as soon as one does.
    let kill = ["echolab-up", "__signal", "echo-server", "KILL"].map(String::from);
    wait_until("an echo-server to kill", Duration::from_secs(120), || {
        let o = runtime()
            .block_on(echolab_runtime::docker::exec::run(
                &e.docker,
                &server_host,
                &kill,
                Duration::from_secs(30),
            ))
            .ok()?;
        (o.exit_code == Some(0)).then_some(())
    });
    let status = wait_until("the run to finish", Duration::from_secs(300), || {
        launcher.0.try_wait().unwrap()
    });
    let err = stderr_reader.join().unwrap();
    let r = ResultsDir::load(&dir).unwrap();
    // One run failed, the others measured: the run completes and says so in its exit code.
    assert_eq!(status.code(), Some(1), "{err}");
    assert_eq!(r.manifest.status, RunStatus::Complete, "{err}");
    assert_eq!((r.manifest.runs_done, r.runs.len()), (3, 3));
    let errors: Vec<&str> = r.runs.iter().filter_map(|x| x.error.as_deref()).collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].starts_with("server exited during the cell: exit 137 (signal 9)"),
        "{errors:?}"
    );
    assert_nothing_left(&e, &run_id);
}

#[test]
fn bad_input_exits_2_and_creates_nothing() {
    let base = TempDir::new("up-docker-badinput");
    let o = Command::new(BIN)
        .args(["--profile", "mars", "--out"])
        .arg(base.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("unknown profile 'mars'") && err.contains("loopback"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    let bad = write_input(&base, "broken.yaml", "name: x\nquestion: [\n");
    let o = Command::new(BIN)
        .args(["--experiment", bad.to_str().unwrap(), "--out"])
        .arg(base.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("broken.yaml") && err.contains("line") && err.contains("column"),
        "{err}"
    );
    // Missing lab binaries are found before anything is created.
    let o = Command::new(BIN)
        .args(["--experiment", "smoke", "--bin-dir"])
        .arg(base.path().join("no-binaries-here"))
        .arg("--out")
        .arg(base.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("echo-server") && err.contains("missing") && err.contains("--bin-dir"),
        "{err}"
    );
    // A rate in megabytes/s where the expected goodput says megabits: warned about at load.
    let shipped = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../netem/crossnet.yaml"),
    )
    .unwrap();
    let mbps = write_input(
        &base,
        "mbps.yaml",
        shipped.replace("rate: 50mbit", "rate: 50mbps"),
    );
    let o = Command::new(BIN)
        .args(["--profile", mbps.to_str().unwrap(), "--bin-dir"])
        .arg(base.path().join("no-binaries-here"))
        .arg("--out")
        .arg(base.path())
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(
        err.contains("warning: profile")
            && err.contains("mbps.yaml")
            && err.contains("rate 400mbit"),
        "{err}"
    );
    let leftovers: Vec<_> = std::fs::read_dir(base.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .collect();
    assert!(
        leftovers.is_empty(),
        "no results directory for bad input: {leftovers:?}"
    );
}
