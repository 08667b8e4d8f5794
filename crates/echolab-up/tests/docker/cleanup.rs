//! Stopping and removing runs: Ctrl-C, `--keep`, and `--down` telling live runs from those
//! whose launcher is gone.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use echolab_core::results::{ResultsDir, RunStatus};
use echolab_runtime::docker::cleanup;
use echolab_testkit::{wait_until, TempDir};

use super::common::*;

#[test]
fn ctrl_c_interrupts_and_cleans_up() {
    let e = engine();
    let base = TempDir::new("up-docker-sigint");
    let (cmd, out) = loopback_experiment(&base, "long.yaml", MANY_LONG_RUNS);
    let r = interrupted_after_first_run(cmd, &out);
    assert_nothing_left(&e, &r.manifest.run_id);
}

#[test]
fn down_removes_only_runs_whose_launcher_is_gone() {
    let e = engine();
    // Planned far longer than the test (1000 cells of 40,000 echoes): still going when --down
    // runs, whenever each launcher got through its start; the test stops them with SIGINT.
    let yaml = "name: busy\nquestion: does --down leave a live run alone?\nrepetitions: 1000\nmatrix:\n  - servers: [epoll-et]\n    modes: [long]\n    conns: [2]\n    rounds: [20000]\n";
    let bases: Vec<TempDir> = ["up-docker-live-a", "up-docker-live-b", "up-docker-killed"]
        .into_iter()
        .map(TempDir::new)
        .collect();
    let mut launchers = Vec::new();
    let mut outs = Vec::new();
    for base in &bases {
        let (mut cmd, out) = loopback_experiment(base, "busy.yaml", yaml);
        // Hosts kept across cells: a run never has a moment without objects for --down to see.
        let child = cmd
            .arg("--reuse-hosts")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        launchers.push(Child(child.unwrap()));
        outs.push(out);
    }
    let dirs: Vec<PathBuf> = outs
        .iter()
        .zip(launchers.iter_mut())
        .map(|(out, l)| first_run_recorded(out, l))
        .collect();
    // The third launcher dies without a word: its hosts stay, its manifest says running.
    let mut killed = launchers.pop().unwrap();
    killed.0.kill().unwrap();
    killed.0.wait().unwrap();
    let killed_id = ResultsDir::load(&dirs[2]).unwrap().manifest.run_id;
    let left = runtime()
        .block_on(cleanup::list_labelled(&e.docker, Some(&killed_id)))
        .unwrap();
    assert!(!left.containers.is_empty(), "the killed run's hosts remain");

    let o = Command::new(BIN)
        .args(["--down", "--out"])
        .arg(bases[2].path().join("results"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert_nothing_left(&e, &killed_id);
    let abandoned = ResultsDir::load(&dirs[2]).unwrap().manifest;
    assert_eq!(abandoned.status, RunStatus::Abandoned, "{err}");
    assert!(abandoned.runs_done >= 1, "its finished runs are kept");
    for (dir, launcher) in dirs.iter().zip(launchers.iter_mut()) {
        let at_down = ResultsDir::load(dir).unwrap().manifest;
        let run_id = at_down.run_id.clone();
        assert!(
            launcher.0.try_wait().unwrap().is_none(),
            "run {run_id} ended before --down: {:?}",
            at_down.error
        );
        // Its hosts live through the whole run (--reuse-hosts), so --down saw and kept them.
        assert!(
            err.contains(&format!(
                "kept run {run_id}: its launcher (pid {}",
                launcher.0.id()
            )),
            "{err}"
        );
        // It goes on measuring on the hosts --down kept: two more runs recorded after it.
        wait_until(
            "a live run to record two more runs after --down",
            Duration::from_secs(300),
            || {
                assert!(
                    launcher.0.try_wait().unwrap().is_none(),
                    "run {run_id} ended after --down"
                );
                let done = ResultsDir::load(dir).ok()?.manifest.runs_done;
                (done >= at_down.runs_done + 2).then_some(())
            },
        );
        // Then it is stopped as a user would (it is planned far longer than the test).
        // SAFETY: kill(2) on our own child's pid, which has not been reaped (we still own it).
        unsafe { libc::kill(launcher.0.id() as i32, libc::SIGINT) };
        let status = wait_until(
            "a live run to stop after SIGINT",
            Duration::from_secs(120),
            || launcher.0.try_wait().unwrap(),
        );
        let r = ResultsDir::load(dir).unwrap();
        assert_eq!(status.code(), Some(130), "{run_id}: {:?}", r.manifest.error);
        assert_eq!(r.manifest.status, RunStatus::Interrupted);
        let failed: Vec<_> = r.runs.iter().filter_map(|x| x.error.as_ref()).collect();
        assert!(
            failed.is_empty(),
            "{run_id}: every recorded run measured: {failed:?}"
        );
        assert_nothing_left(&e, &run_id);
    }
}

#[test]
fn keep_leaves_the_lab_up_and_down_removes_it_once_its_launcher_is_gone() {
    let e = engine();
    let base = TempDir::new("up-docker-keep");
    let (mut cmd, out) = loopback_experiment(
        &base,
        "k.yaml",
        "name: k\nquestion: does --keep keep?\nrepetitions: 1\nmatrix:\n  - servers: [epoll-et]\n    modes: [long]\n    conns: [2]\n    rounds: [10]\n",
    );
    let o = cmd.arg("--keep").output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let run_id = results(&out).manifest.run_id;
    let kept = runtime()
        .block_on(cleanup::list_labelled(&e.docker, Some(&run_id)))
        .unwrap();
    // Loopback: the server host and the client host in its network namespace.
    assert_eq!(kept.containers.len(), 2, "{kept:?}");
    assert!(stderr(&o).contains("--keep"), "{}", stderr(&o));
    // A kept host that has since stopped is still the run's: `--down` removes it too.
    succeeds(Command::new("docker").args(["stop", "--time", "0", &kept.containers[0]]));
    let o = Command::new(BIN)
        .args(["--down", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_nothing_left(&e, &run_id);
}
