//! What the Docker tests share: the engine, the lab binaries, launching echolab-up and reading
//! its results back, and checking that a run left nothing on the engine.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use echolab_core::experiment::BenchMode;
use echolab_core::results::{ResultsDir, RunStatus};
use echolab_runtime::docker::engine;
use echolab_testkit::{wait_until, TempDir};

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_echolab-up");

/// A private copy of the lab binaries: other builds may replace target/debug's files while a
/// test runs, and an image must be built from one consistent set. The testkit refuses a sibling
/// binary older than its sources (`cargo nextest run -p echolab-up` builds only this crate's).
pub(crate) fn snapshot_bins(dir: &TempDir) -> PathBuf {
    let snap = dir.path().join("bin");
    std::fs::create_dir_all(&snap).unwrap();
    for name in ["echo-server", "echo-bench", "echolab-netem", "echolab-up"] {
        std::fs::copy(echolab_testkit::workspace_bin(name), snap.join(name)).unwrap();
    }
    snap
}

/// The link backend a link host on this kernel must get: kernel netem where the kernel can
/// create a netem qdisc (tried in a fresh network namespace; engines on this machine, the
/// second ones included, share its kernel), else the userspace wire.
pub(crate) fn expected_link_backend() -> &'static str {
    if echolab_netem::kernel::probe().has_netem {
        "kernel-netem"
    } else {
        "userspace-wire"
    }
}

pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// The Docker engine; fails the test with the reason when none is reachable.
pub(crate) fn engine() -> engine::Engine {
    runtime()
        .block_on(engine::connect())
        .unwrap_or_else(|reason| {
            panic!("this test needs a Docker engine (see the README's test requirements): {reason}")
        })
}

pub(crate) fn launch(out: &Path, bins: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(args)
        .arg("--out")
        .arg(out)
        .arg("--bin-dir")
        .arg(bins)
        .arg("--backend")
        .arg("docker");
    c.stdin(Stdio::null());
    c
}

pub(crate) fn run(out: &Path, bins: &Path, args: &[&str]) -> Output {
    launch(out, bins, args).output().expect("echolab-up runs")
}

/// Writes an input file (an experiment, a profile, a lab file) named `name` into `base`;
/// returns its path.
pub(crate) fn write_input(base: &TempDir, name: &str, text: impl AsRef<str>) -> PathBuf {
    let path = base.path().join(name);
    std::fs::write(&path, text.as_ref()).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    path
}

/// echolab-up's arguments for `experiment` (a name or a file) on `profile`.
pub(crate) fn profile_experiment<'a>(profile: &'a str, experiment: &'a str) -> [&'a str; 4] {
    ["--profile", profile, "--experiment", experiment]
}

/// echolab-up, not yet started, running the experiment file `file_name` (`yaml`, written into
/// `base`) on the loopback profile from a snapshot of the binaries; also returns its results
/// base directory, `base/results`.
pub(crate) fn loopback_experiment(
    base: &TempDir,
    file_name: &str,
    yaml: &str,
) -> (Command, PathBuf) {
    let exp = write_input(base, file_name, yaml);
    let out = base.path().join("results");
    let bins = snapshot_bins(base);
    let cmd = launch(
        &out,
        &bins,
        &profile_experiment("loopback", exp.to_str().unwrap()),
    );
    (cmd, out)
}

/// The single results directory under `base`.
pub(crate) fn results(base: &Path) -> ResultsDir {
    let dirs: Vec<PathBuf> = std::fs::read_dir(base)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(
        dirs.len(),
        1,
        "one results directory in {}: {dirs:?}",
        base.display()
    );
    ResultsDir::load(&dirs[0]).unwrap_or_else(|e| panic!("{e}"))
}

pub(crate) fn assert_nothing_left(e: &engine::Engine, run_id: &str) {
    // Asked of the engine directly, not through the launcher's own listing (which a bug in
    // cleanup would share): every container, running or not, and every network that carries
    // the run's label.
    use bollard::query_parameters::{ListContainersOptions, ListNetworksOptions};
    let filters: std::collections::HashMap<String, Vec<String>> =
        [("label".to_string(), vec![format!("echolab.run={run_id}")])].into();
    let (containers, networks) = runtime().block_on(async {
        let c = e
            .docker
            .list_containers(Some(ListContainersOptions {
                all: true,
                filters: Some(filters.clone()),
                ..Default::default()
            }))
            .await
            .unwrap();
        let n = e
            .docker
            .list_networks(Some(ListNetworksOptions {
                filters: Some(filters.clone()),
            }))
            .await
            .unwrap();
        (c, n)
    });
    let names = |v: Vec<Option<String>>| v.into_iter().flatten().collect::<Vec<_>>();
    let containers = names(containers.into_iter().map(|c| c.id).collect());
    let networks = names(networks.into_iter().map(|n| n.name).collect());
    assert!(
        containers.is_empty() && networks.is_empty(),
        "run {run_id} left containers {containers:?} and networks {networks:?}"
    );
}

/// Runs `cmd` (an echolab-up writing under `out`), requires it to succeed and its run to be
/// complete, and returns the run.
pub(crate) fn completed(cmd: &mut Command, out: &Path) -> ResultsDir {
    let o = cmd.output().expect("echolab-up runs");
    assert!(o.status.success(), "echolab-up failed: {}", stderr(&o));
    let r = results(out);
    assert_eq!(
        r.manifest.status,
        RunStatus::Complete,
        "{:?}",
        r.manifest.error
    );
    assert_hosts_as_planned(&r.manifest);
    r
}

/// The manifest holds a host record for every host of the plan it recorded, on the plan's
/// engine, and no host the plan does not name: the runtime made what the plan said.
pub(crate) fn assert_hosts_as_planned(m: &echolab_core::results::Manifest) {
    let plan = m.plan.as_ref().expect("the manifest records its plan");
    for h in &plan.hosts {
        let record = m.hosts.get(&h.name).unwrap_or_else(|| {
            panic!(
                "planned host {} has no record: {:?}",
                h.name,
                m.hosts.keys()
            )
        });
        if let Some(engine) = &h.engine {
            assert_eq!(record["engine"], engine.as_str(), "host {}", h.name);
        }
    }
    let planned = plan.host_names();
    for name in m.hosts.keys() {
        // The io_uring probe's and each link's network records sit beside the hosts'.
        let beside = name == "io_uring" || name.starts_with("networks");
        assert!(
            beside || planned.contains(name),
            "host record {name} is not in the plan {planned:?}"
        );
    }
}

pub(crate) fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs `cmd` (a helper command of the test: docker, ip, sh) to completion and fails the test
/// with its stderr unless it succeeded.
pub(crate) fn succeeds(cmd: &mut Command) -> Output {
    let o = cmd.output().expect("the command runs");
    assert!(o.status.success(), "{cmd:?}: {}", stderr(&o));
    o
}

pub(crate) fn check_complete_smoke(
    e: &engine::Engine,
    base: &Path,
    o: &Output,
    backend: &str,
) -> ResultsDir {
    assert!(o.status.success(), "echolab-up failed: {}", stderr(o));
    let r = results(base);
    let m = &r.manifest;
    assert_eq!(m.status, RunStatus::Complete, "{:?}", m.error);
    assert_hosts_as_planned(m);
    assert_eq!(
        (m.runs_done, m.runs_planned, r.runs.len() as u64),
        (8, 8, 8)
    );
    assert_eq!(m.backend, "docker");
    assert_eq!(m.link.backend, backend);
    let cal = m.link.calibration.as_ref().expect("calibration recorded");
    assert!(
        cal.passed && cal.measured.contains_key("rtt_median_us"),
        "{cal:?}"
    );
    assert!(m.image.id.starts_with("sha256:") && m.image.binaries.contains_key("echo-server"));
    assert!(!m.environment.docker_version.is_empty() && !m.environment.kernel.is_empty());
    for phase in ["image", "topology_up", "calibration", "cells", "teardown"] {
        assert!(
            m.timings.phases.contains_key(phase),
            "timing {phase} missing: {:?}",
            m.timings
        );
    }
    let server = &m.hosts["server"];
    assert_eq!(server["privileged"], false);
    assert!(
        server["cap_add"].as_array().unwrap().is_empty(),
        "the server host has no added capability"
    );
    for rec in &r.runs {
        assert!(rec.error.is_none(), "{}: {:?}", rec.file_name(), rec.error);
        let bench = rec.bench.as_ref().expect("bench report");
        assert_eq!(bench.requests_ok, 10 * 20, "{}", rec.file_name());
        let stats = rec.server.as_ref().expect("server stats");
        // 10 connections x 20 rounds of the 12-byte payload: a short-connection run opens a
        // connection per request, a long one opens each connection once.
        let connections = match rec.cell.mode {
            BenchMode::Short => 200,
            BenchMode::Long => 10,
            other => panic!("smoke has no {other:?} cells"),
        };
        let t = &stats.totals;
        assert!(stats.is_final, "{}", rec.file_name());
        assert_eq!(
            (t.accepted, t.closed, t.bytes_in, t.bytes_out),
            (connections, connections, 200 * 12, 200 * 12),
            "{}",
            rec.file_name()
        );
    }
    // The CPU plan, seen from inside the client container (echo-bench's own
    // sched_getaffinity), and server and client on disjoint CPUs where there are two.
    let plan = m.cpu_plan.as_ref().expect("cpu plan recorded");
    if m.environment.cpus >= 2 {
        let (server, client) = (plan.server.clone().unwrap(), plan.client.clone().unwrap());
        assert_ne!(server, client, "{plan:?}");
        assert_eq!(server_cpuset(m), server);
        for rec in &r.runs {
            let bench = rec.bench.as_ref().unwrap();
            assert_eq!(
                bench.cpus,
                client,
                "{}: affinity inside the container",
                rec.file_name()
            );
            assert_eq!(
                bench.threads,
                1,
                "{}: one client CPU, one worker",
                rec.file_name()
            );
            // The launcher told echo-bench the server has CPUs of its own.
            assert!(
                bench.threads_reason.contains("(--server-cpus separate)"),
                "{}: {}",
                rec.file_name(),
                bench.threads_reason
            );
        }
    }
    let order = m.order.as_ref().expect("order recorded");
    assert_eq!(order.kind, "shuffled");
    assert!(order.fresh_hosts_per_cell);
    assert!(r.path.join("summary.csv").is_file());
    assert_nothing_left(e, &m.run_id);
    r
}

/// The cpuset the manifest recorded for the server host.
pub(crate) fn server_cpuset(m: &echolab_core::results::Manifest) -> String {
    m.hosts["server"]["cpuset"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Many seconds of long-connection runs, so that a signal lands mid-run.
pub(crate) const MANY_LONG_RUNS: &str = "name: long\nquestion: is a run cut short by Ctrl-C cleaned up?\nrepetitions: 50\nmatrix:\n  - servers: [epoll-et]\n    modes: [long]\n    conns: [2]\n    rounds: [2000]\n";

/// Starts `cmd` (an echolab-up writing under `out`), sends it SIGINT once its first run
/// record exists, and checks that it ended as interrupted (exit 130, manifest status
/// interrupted, some but not all runs done); returns its results directory.
pub(crate) fn interrupted_after_first_run(mut cmd: Command, out: &Path) -> ResultsDir {
    let mut guard = Child(cmd.stderr(Stdio::piped()).spawn().unwrap());
    // Drained in the background so a full pipe can never block echolab-up.
    let stderr_pipe = guard.0.stderr.take().unwrap();
    let stderr_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let mut p = stderr_pipe;
        let _ = std::io::Read::read_to_string(&mut p, &mut s);
        s
    });
    // Wait until at least one run record exists: the topology is up and cells are running.
    let run_dir = wait_until("a first run record", Duration::from_secs(180), || {
        let found = std::fs::read_dir(out)
            .ok()
            .and_then(|mut d| d.next())
            .and_then(|e| e.ok())
            .map(|e| e.path())
            .filter(|d| std::fs::read_dir(d.join("runs")).is_ok_and(|mut r| r.next().is_some()));
        if found.is_none() {
            assert!(
                guard.0.try_wait().unwrap().is_none(),
                "echolab-up exited before the first run"
            );
        }
        found
    });
    // SAFETY: kill(2) on our own child's pid, which has not been reaped (we still own it).
    unsafe { libc::kill(guard.0.id() as i32, libc::SIGINT) };
    let status = wait_until(
        "echolab-up to exit after SIGINT",
        Duration::from_secs(120),
        || guard.0.try_wait().unwrap(),
    );
    let err = stderr_reader.join().unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    let r = ResultsDir::load(&run_dir).unwrap();
    assert_eq!(r.manifest.status, RunStatus::Interrupted, "{err}");
    assert!(r.manifest.runs_done >= 1 && r.manifest.runs_done < r.manifest.runs_planned);
    r
}

/// The results directory under `out` once its manifest counts a first run (cells are running).
pub(crate) fn first_run_recorded(out: &Path, launcher: &mut Child) -> PathBuf {
    wait_until("a first run record", Duration::from_secs(180), || {
        assert!(
            launcher.0.try_wait().unwrap().is_none(),
            "echolab-up exited before its first run"
        );
        std::fs::read_dir(out)
            .ok()
            .and_then(|mut d| d.next())
            .and_then(|e| e.ok())
            .map(|e| e.path())
            // The manifest counts a run once its record is written: wait for the count.
            .filter(|d| ResultsDir::load(d).is_ok_and(|r| r.manifest.runs_done >= 1))
    })
}

/// A child process stopped on drop (the test's launchers, whatever the test's outcome).
pub(crate) struct Child(pub(crate) std::process::Child);

impl Drop for Child {
    /// SIGINT first, so that a launcher still running when a test fails removes its hosts;
    /// SIGKILL after 60 s.
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            // SAFETY: kill(2) on our own child's pid, not yet reaped (try_wait said running).
            unsafe { libc::kill(self.0.id() as i32, libc::SIGINT) };
            let until = Instant::now() + Duration::from_secs(60);
            while Instant::now() < until && matches!(self.0.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
