//! A lab engine that stops answering mid-run (its dockerd stopped with SIGSTOP: no answer, no
//! reset, as when its machine or link dies): the run fails on its own within the engine
//! deadlines, naming the engine, and an interrupt returns within seconds. A submodule of
//! tests/docker.rs, for its helpers; the lab's pieces are [`super::lab::LabRun`]'s.

use std::path::Path;
use std::process::{Child as Process, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use echolab_core::results::{ResultsDir, RunStatus};
use echolab_runtime::docker::deadlines::{IDLE, PING};
use echolab_testkit::wait_until;

use super::common::*;
use super::lab::{connect_second, down, second_engine, LabRun};

/// What the launcher may take, beyond the engine deadlines, to finish the cell it was in on
/// the other engine, write the record and the report, and exit.
const SLACK: Duration = Duration::from_secs(10);

/// Starts echolab-up writing under `out` with its stderr read in the background.
fn started(r: &LabRun, out: &Path) -> (Child, JoinHandle<String>) {
    let mut launcher = Child(
        launch(out, &r.bins, &r.args(&[]))
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut pipe = launcher.0.stderr.take().unwrap();
    let stderr = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut pipe, &mut s);
        s
    });
    (launcher, stderr)
}

/// Waits at most `bound` for `p` to exit; its exit code and how long it took.
fn exits_within(p: &mut Process, bound: Duration, what: &str) -> (Option<i32>, Duration) {
    let t0 = Instant::now();
    let status = wait_until(what, bound, || p.try_wait().unwrap());
    (status.code(), t0.elapsed())
}

#[test]
fn a_lab_engine_that_stops_answering_fails_the_run_in_bounded_time_and_ctrl_c_returns_promptly() {
    let r = LabRun::new("lab-frozen", second_engine(), MANY_LONG_RUNS);
    let endpoint = format!("engine b ({})", r.second.endpoint);

    // On its own: the cell waiting on engine b fails once the engine misses a ping, the run
    // stops there, and teardown names what it could not remove from b.
    let out = r.base.path().join("results-frozen");
    let (mut launcher, err) = started(&r, &out);
    let dir = first_run_recorded(&out, &mut launcher);
    let frozen = r.second.freeze().unwrap();
    let bound = IDLE + PING + PING + SLACK;
    let (code, took) = exits_within(&mut launcher.0, bound, "echolab-up to fail on its own");
    let err = err.join().unwrap();
    assert_eq!(code, Some(1), "{err}");
    assert!(took < bound, "{took:?}: {err}");
    let run = ResultsDir::load(&dir).unwrap();
    let m = &run.manifest;
    assert_eq!(m.status, RunStatus::Failed, "{err}");
    let error = m.error.clone().unwrap_or_default();
    assert!(
        error.contains(&format!("{endpoint}: ")) && error.contains("stopped answering"),
        "{error}"
    );
    // What was written stays: every record the manifest counts, the last one the failed cell.
    assert!(m.runs_done >= 1 && m.runs_done < m.runs_planned, "{m:?}");
    assert_eq!(run.runs.len() as u64, m.runs_done);
    assert!(run
        .runs
        .iter()
        .any(|rec| rec.error.as_ref().is_some_and(|e| e.contains(&endpoint))));
    // Teardown removed the server host on engine a, and names the client host it left on b.
    let client = format!("echolab-{}-client", m.run_id);
    assert!(
        error.contains(&format!("left there: containers {client}"))
            && error.contains("echolab-up --down --lab"),
        "{error}"
    );
    assert_nothing_left(&r.a, &m.run_id);
    let first_run = m.run_id.clone();
    drop(frozen);
    down(Some(&r.lab), &out);

    // Ctrl-C while engine b does not answer: the launcher ends within the teardown's ping.
    let out = r.base.path().join("results-interrupted");
    let (mut launcher, err) = started(&r, &out);
    let dir = first_run_recorded(&out, &mut launcher);
    let frozen = r.second.freeze().unwrap();
    // SAFETY: kill(2) on our own child's pid, not yet reaped (first_run_recorded saw it run).
    unsafe { libc::kill(launcher.0.id() as i32, libc::SIGINT) };
    let bound = PING + SLACK;
    let (code, took) = exits_within(&mut launcher.0, bound, "echolab-up to end after SIGINT");
    let err = err.join().unwrap();
    assert!(took < bound, "{took:?}: {err}");
    // Interrupted, and a teardown that left something: exit 1 (130 is for a clean interrupt).
    assert_eq!(code, Some(1), "{err}");
    let run = ResultsDir::load(&dir).unwrap();
    let m = &run.manifest;
    assert_eq!(m.status, RunStatus::Interrupted, "{err}");
    let error = m.error.clone().unwrap_or_default();
    assert!(
        error.starts_with("interrupted by SIGINT")
            && error.contains(&format!("{endpoint}: the engine did not answer a ping"))
            && error.contains(&format!("echolab-{}-client", m.run_id)),
        "{error}"
    );
    assert_eq!(run.runs.len() as u64, m.runs_done);
    assert_nothing_left(&r.a, &m.run_id);
    drop(frozen);
    down(Some(&r.lab), &out);
    let b = connect_second(&r.lab);
    assert_nothing_left(&b, &first_run);
    assert_nothing_left(&b, &m.run_id);
}
