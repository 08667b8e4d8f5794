//! echolab-up against this machine's Docker engine, end to end: the smoke experiment on the
//! loopback and crossnet profiles, cleanup after a forced failure and after Ctrl-C, a second
//! run right after the first, and the lab image's id staying the same across builds.
//!
//! Each test fails, with the engine's reason, when no Docker engine is reachable: the README's
//! test command needs one, and a test that quietly passed without it would hide a broken
//! setup. The lab image is built from the binaries next to echolab-up (target/debug when run
//! by `cargo nextest run --workspace`, which builds every workspace binary first).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use echolab_core::experiment::BenchMode;
use echolab_core::results::{ResultsDir, RunStatus};
use echolab_runtime::docker::{cleanup, engine};

const BIN: &str = env!("CARGO_BIN_EXE_echolab-up");

#[path = "docker/privileges.rs"]
mod privileges;

#[path = "docker/lab.rs"]
mod lab;

#[path = "docker/lab_clients.rs"]
mod lab_clients;

#[path = "docker/custom_server.rs"]
mod custom_server;

/// A private copy of the lab binaries: other builds may replace target/debug's files while a
/// test runs, and an image must be built from one consistent set. The testkit refuses a sibling
/// binary older than its sources (`cargo nextest run -p echolab-up` builds only this crate's).
fn snapshot_bins(dir: &TempDir) -> PathBuf {
    let snap = dir.0.join("bin");
    std::fs::create_dir_all(&snap).unwrap();
    for name in ["echo-server", "echo-bench", "echolab-netem", "echolab-up"] {
        std::fs::copy(echolab_testkit::workspace_bin(name), snap.join(name)).unwrap();
    }
    snap
}

/// The link backend a link host on this kernel must get: kernel netem where the kernel can
/// create a netem qdisc (tried in a fresh network namespace; engines on this machine, the
/// second ones included, share its kernel), else the userspace wire.
fn expected_link_backend() -> &'static str {
    if echolab_netem::kernel::probe().has_netem {
        "kernel-netem"
    } else {
        "userspace-wire"
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// The Docker engine; fails the test with the reason when none is reachable.
fn engine() -> engine::Engine {
    runtime()
        .block_on(engine::connect())
        .unwrap_or_else(|reason| {
            panic!("this test needs a Docker engine (see the README's test requirements): {reason}")
        })
}

/// A results base directory removed on drop, even when the test fails.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let d = std::env::temp_dir().join(format!(
            "echolab-up-it-{tag}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&d).unwrap();
        Self(d)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn launch(out: &Path, bins: &Path, args: &[&str]) -> Command {
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

fn run(out: &Path, bins: &Path, args: &[&str]) -> Output {
    launch(out, bins, args).output().expect("echolab-up runs")
}

/// echolab-up's arguments for `experiment` (a name or a file) on `profile`.
fn profile_experiment<'a>(profile: &'a str, experiment: &'a str) -> [&'a str; 4] {
    ["--profile", profile, "--experiment", experiment]
}

/// echolab-up, not yet started, running the experiment file `file_name` (`yaml`, written into
/// `base`) on the loopback profile from a snapshot of the binaries; also returns its results
/// base directory, `base/results`.
fn loopback_experiment(base: &TempDir, file_name: &str, yaml: &str) -> (Command, PathBuf) {
    let exp = base.0.join(file_name);
    std::fs::write(&exp, yaml).unwrap();
    let out = base.0.join("results");
    let bins = snapshot_bins(base);
    let cmd = launch(
        &out,
        &bins,
        &profile_experiment("loopback", exp.to_str().unwrap()),
    );
    (cmd, out)
}

/// Polls `probe` every 50 ms until it gives a value; fails the test with `timeout_message`
/// when `limit` passes first.
fn wait_until<T>(
    limit: Duration,
    timeout_message: &str,
    mut probe: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(Instant::now() < deadline, "{timeout_message}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The single results directory under `base`.
fn results(base: &Path) -> ResultsDir {
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

fn assert_nothing_left(e: &engine::Engine, run_id: &str) {
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
fn completed(cmd: &mut Command, out: &Path) -> ResultsDir {
    let o = cmd.output().expect("echolab-up runs");
    assert!(o.status.success(), "echolab-up failed: {}", stderr(&o));
    let r = results(out);
    assert_eq!(
        r.manifest.status,
        RunStatus::Complete,
        "{:?}",
        r.manifest.error
    );
    r
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs `cmd` (a helper command of the test: docker, ip, sh) to completion and fails the test
/// with its stderr unless it succeeded.
fn succeeds(cmd: &mut Command) -> Output {
    let o = cmd.output().expect("the command runs");
    assert!(o.status.success(), "{cmd:?}: {}", stderr(&o));
    o
}

fn check_complete_smoke(e: &engine::Engine, base: &Path, o: &Output, backend: &str) -> ResultsDir {
    assert!(o.status.success(), "echolab-up failed: {}", stderr(o));
    let r = results(base);
    let m = &r.manifest;
    assert_eq!(m.status, RunStatus::Complete, "{:?}", m.error);
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
fn server_cpuset(m: &echolab_core::results::Manifest) -> String {
    m.hosts["server"]["cpuset"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn smoke_on_loopback_then_again_right_after() {
    let e = engine();
    let first = TempDir::new("loop1");
    let bins = snapshot_bins(&first);
    let o = run(
        &first.0.join("results"),
        &bins,
        &profile_experiment("loopback", "smoke"),
    );
    let r1 = check_complete_smoke(&e, &first.0.join("results"), &o, "none");
    assert!(r1.manifest.hosts["client"]["network_mode"]
        .as_str()
        .unwrap()
        .starts_with("container:"));
    // The same command again at once: the image is reused, names do not collide.
    let second = TempDir::new("loop2");
    let o = run(&second.0, &bins, &profile_experiment("loopback", "smoke"));
    let r2 = check_complete_smoke(&e, &second.0, &o, "none");
    assert_ne!(r1.manifest.run_id, r2.manifest.run_id);
    assert_eq!(
        r1.manifest.image.id, r2.manifest.image.id,
        "same binaries, same image id"
    );
}

#[test]
fn smoke_on_crossnet_through_the_link() {
    let e = engine();
    let base = TempDir::new("crossnet");
    let bins = snapshot_bins(&base);
    let out = base.0.join("results");
    let o = run(&out, &bins, &profile_experiment("crossnet", "smoke"));
    let expected_backend = expected_link_backend();
    let r = check_complete_smoke(&e, &out, &o, expected_backend);
    let link = &r.manifest.hosts["link"];
    assert_eq!(
        link["cap_add"],
        serde_json::json!(["NET_ADMIN", "NET_RAW", "SYS_NICE"])
    );
    assert_eq!(link["devices"], serde_json::json!(["/dev/net/tun"]));
    assert_eq!(link["sysctls"]["net.ipv4.ip_forward"], "1");
    // The wire's counters per run: every request crossed it (a short request is at least
    // SYN, the ACK with the 12 bytes and a FIN uplink; a long one its data), none was
    // dropped by a queue on this unloaded path.
    if expected_backend == "userspace-wire" {
        // With NET_RAW the wire counts each packet's delay from the kernel's arrival stamp.
        let ready = r.manifest.link.installed["installed"]["ready"]
            .as_str()
            .unwrap_or("");
        assert!(ready.contains("delay from kernel stamp"), "{ready}");
        // The link host asked for a real-time budget: granted, the wire's threads run
        // real-time (CAP_SYS_NICE is granted too); refused (an engine whose cgroup has no
        // budget to give), the record says why and the wire says it runs fair-scheduled.
        match link["cpu_realtime_runtime_us"].as_i64() {
            Some(400_000) => assert!(
                ready.ends_with("scheduling real-time (SCHED_FIFO 50)"),
                "{ready}"
            ),
            None => {
                let note = link["realtime_note"].as_str().unwrap_or("");
                assert!(note.contains("refused a real-time budget"), "{link}");
                assert!(ready.contains("scheduling fair: "), "{ready}");
            }
            other => panic!("cpu_realtime_runtime_us {other:?}: {link}"),
        }
        for rec in &r.runs {
            let link = rec.link.as_ref().expect("link counters in the run record");
            let at_least = match rec.cell.mode {
                BenchMode::Short => 200 * 3,
                _ => 200,
            };
            assert!(
                link.uplink.packets >= at_least && link.downlink.packets >= 200,
                "{}: {link:?}",
                rec.file_name()
            );
            assert_eq!(link.unintended_drops(), 0, "{}: {link:?}", rec.file_name());
        }
        let cal = r.manifest.link.calibration.as_ref().unwrap();
        let cal_link = cal
            .link_counters
            .as_ref()
            .expect("calibration's link counters");
        assert!(
            cal_link.uplink.bytes > 1_000_000,
            "the bulk transfers crossed: {cal_link:?}"
        );
    }
    // Calibration checked what the link adds over the path measured before it was installed:
    // crossnet adds 2 x (10 ms + (68 + 38) B at 50 Mbit/s = 16.96 us) = 20.03392 ms, +- 10%.
    let cal = r.manifest.link.calibration.as_ref().unwrap();
    let added = cal.checks.iter().find(|c| c.name == "added_rtt");
    let added = added.unwrap_or_else(|| panic!("an added_rtt check: {cal:?}"));
    assert!(added.pass, "{cal:?}");
    assert!(
        (added.low - 18_030.528).abs() < 1e-6 && (added.high - 22_037.312).abs() < 1e-6,
        "{added:?}"
    );
    let (base, total) = (
        cal.measured["rtt_baseline_median_us"],
        cal.measured["rtt_median_us"],
    );
    assert!(
        base > 0.0 && base < 5_000.0,
        "a plain path is fast: {cal:?}"
    );
    assert!(
        (cal.measured["added_rtt_us"] - (total - base)).abs() < 1e-6,
        "added = total - baseline: {cal:?}"
    );
    // The profile adds 20 ms of RTT: a long-connection round trip cannot be faster.
    for rec in r
        .runs
        .iter()
        .filter(|r| r.cell.mode == echolab_core::experiment::BenchMode::Long)
    {
        let p50 = rec.bench.as_ref().unwrap().latency_us.p50;
        assert!(
            p50 >= 18_000.0,
            "{}: p50 {p50} us is below the link's 20 ms RTT",
            rec.file_name()
        );
    }
}

#[test]
fn an_overfull_link_queue_shows_its_drops_in_the_run_record() {
    let e = engine();
    if std::fs::read_to_string("/proc/modules").is_ok_and(|m| m.contains("sch_netem")) {
        panic!("this test reads the userspace wire's counters; on a kernel with sch_netem the link is kernel netem, whose qdisc statistics are not read yet");
    }
    let base = TempDir::new("overfull");
    // 1 Mbit/s with room for 3 packets: 20 connections sending 1400-byte requests at once
    // put 20 packets into a queue of 3, so at least 17 are dropped on the first round (TCP
    // retransmits them, so the run still completes).
    let profile = base.0.join("narrow.yaml");
    std::fs::write(
        &profile,
        "name: narrow\ndescription: a 1 Mbit/s link with a 3-packet queue\nsource: test\ntopology: link\nuplink: { delay: 1ms, rate: 1mbit, limit: 3 }\ndownlink: { delay: 1ms, rate: 1mbit, limit: 3 }\nexpected:\n  rtt: { value: 3ms, minus: 1ms, plus: 100ms }\n",
    )
    .unwrap();
    let exp = base.0.join("burst.yaml");
    std::fs::write(
        &exp,
        "name: burst\nquestion: does an overfull queue show?\nrepetitions: 1\nmatrix:\n  - servers: [epoll-et]\n    modes: [long]\n    conns: [20]\n    rounds: [2]\n    payload: 1400\nbench:\n  timeout: 20s\n",
    )
    .unwrap();
    let bins = snapshot_bins(&base);
    let out = base.0.join("results");
    let o = run(
        &out,
        &bins,
        &profile_experiment(profile.to_str().unwrap(), exp.to_str().unwrap()),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let r = results(&out);
    assert_eq!(r.runs.len(), 1);
    let rec = &r.runs[0];
    let link = rec.link.as_ref().expect("link counters in the run record");
    let dropped = link.uplink.drops_queue + link.downlink.drops_queue;
    assert!(dropped >= 17, "queue drops {dropped}: {link:?}");
    assert_eq!(link.uplink.limit, 3);
    assert!(link.uplink.peak_queue_since_start >= 3, "{link:?}");
    // Both calibration measurements waited for a quiet machine: at least three 100 ms looks
    // at the CPUs (echolab-up's quiet module) after the hosts and calib-server were started.
    let cal = r.manifest.link.calibration.as_ref().expect("calibration");
    for name in ["baseline", "calibration"] {
        let s = cal.settle.get(name);
        assert!(s.is_some_and(|s| s.waited_s >= 0.3), "{name}: {cal:?}");
    }
    assert_nothing_left(&e, &r.manifest.run_id);
}

#[test]
fn a_forced_failure_leaves_nothing_behind() {
    let e = engine();
    let base = TempDir::new("fail");
    // A valid experiment whose server refuses to start (echo-server caps --read-buf at 64 MiB):
    // the failure happens inside the run, after hosts exist, which is what cleanup must survive.
    let (mut cmd, out) = loopback_experiment(
        &base,
        "bad-server.yaml",
        "name: bad-server\nquestion: does a failing cell stop the run cleanly?\nrepetitions: 1\nmatrix:\n  - servers: [epoll-et]\n    modes: [long]\n    conns: [1]\n    rounds: [1]\nserver:\n  read_buf: 1GiB\n",
    );
    let o = cmd.output().expect("echolab-up runs");
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let r = results(&out);
    assert_eq!(r.manifest.status, RunStatus::Failed);
    let error = r.manifest.error.clone().unwrap_or_default();
    assert!(
        error.contains("read") && error.contains("64 MiB"),
        "the error carries the server's reason: {error}"
    );
    assert_eq!(r.runs.len(), 1, "the failed run is recorded");
    assert!(r.runs[0].error.is_some());
    assert_nothing_left(&e, &r.manifest.run_id);
}

#[test]
fn a_failed_calibration_stops_the_run_before_any_cell() {
    let e = engine();
    let base = TempDir::new("calfail");
    // Loopback round trips take tens of microseconds; this profile expects 5 s +- 1 ms, which
    // no path on this machine gives, so calibration must fail and no cell may run.
    let profile = base.0.join("five-seconds.yaml");
    std::fs::write(
        &profile,
        "name: five-seconds\ndescription: a loopback that cannot pass calibration\nsource: test\ntopology: loopback\nexpected:\n  rtt: { value: 5s, minus: 1ms, plus: 1ms }\n",
    )
    .unwrap();
    let bins = snapshot_bins(&base);
    let out = base.0.join("results");
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
fn ctrl_c_interrupts_and_cleans_up() {
    let e = engine();
    let base = TempDir::new("sigint");
    let (cmd, out) = loopback_experiment(&base, "long.yaml", MANY_LONG_RUNS);
    let r = interrupted_after_first_run(cmd, &out);
    assert_nothing_left(&e, &r.manifest.run_id);
}

/// Many seconds of long-connection runs, so that a signal lands mid-run.
const MANY_LONG_RUNS: &str = "name: long\nquestion: is a run cut short by Ctrl-C cleaned up?\nrepetitions: 50\nmatrix:\n  - servers: [epoll-et]\n    modes: [long]\n    conns: [2]\n    rounds: [2000]\n";

/// Starts `cmd` (an echolab-up writing under `out`), sends it SIGINT once its first run
/// record exists, and checks that it ended as interrupted (exit 130, manifest status
/// interrupted, some but not all runs done); returns its results directory.
fn interrupted_after_first_run(mut cmd: Command, out: &Path) -> ResultsDir {
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
    let run_dir = wait_until(
        Duration::from_secs(180),
        "no run record within 180 s",
        || {
            let found = std::fs::read_dir(out)
                .ok()
                .and_then(|mut d| d.next())
                .and_then(|e| e.ok())
                .map(|e| e.path())
                .filter(|d| {
                    std::fs::read_dir(d.join("runs")).is_ok_and(|mut r| r.next().is_some())
                });
            if found.is_none() {
                assert!(
                    guard.0.try_wait().unwrap().is_none(),
                    "echolab-up exited before the first run"
                );
            }
            found
        },
    );
    // SAFETY: kill(2) on our own child's pid, which has not been reaped (we still own it).
    unsafe { libc::kill(guard.0.id() as i32, libc::SIGINT) };
    let status = wait_until(
        Duration::from_secs(120),
        "echolab-up did not exit within 120 s of SIGINT",
        || guard.0.try_wait().unwrap(),
    );
    let err = stderr_reader.join().unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    let r = ResultsDir::load(&run_dir).unwrap();
    assert_eq!(r.manifest.status, RunStatus::Interrupted, "{err}");
    assert!(r.manifest.runs_done >= 1 && r.manifest.runs_done < r.manifest.runs_planned);
    r
}

#[test]
fn bad_input_exits_2_and_creates_nothing() {
    let base = TempDir::new("badinput");
    let o = Command::new(BIN)
        .args(["--profile", "mars", "--out"])
        .arg(&base.0)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("unknown profile 'mars'") && err.contains("loopback"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    let bad = base.0.join("broken.yaml");
    std::fs::write(&bad, "name: x\nquestion: [\n").unwrap();
    let o = Command::new(BIN)
        .args(["--experiment", bad.to_str().unwrap(), "--out"])
        .arg(&base.0)
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
        .arg(base.0.join("no-binaries-here"))
        .arg("--out")
        .arg(&base.0)
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
    let mbps = base.0.join("mbps.yaml");
    std::fs::write(&mbps, shipped.replace("rate: 50mbit", "rate: 50mbps")).unwrap();
    let o = Command::new(BIN)
        .args(["--profile", mbps.to_str().unwrap(), "--bin-dir"])
        .arg(base.0.join("no-binaries-here"))
        .arg("--out")
        .arg(&base.0)
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(
        err.contains("warning: profile")
            && err.contains("mbps.yaml")
            && err.contains("rate 400mbit"),
        "{err}"
    );
    let leftovers: Vec<_> = std::fs::read_dir(&base.0)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .collect();
    assert!(
        leftovers.is_empty(),
        "no results directory for bad input: {leftovers:?}"
    );
}

#[test]
fn the_image_id_is_the_same_for_the_same_binaries() {
    let e = engine();
    let dir = TempDir::new("image");
    let bins = snapshot_bins(&dir);
    let rt = runtime();
    let first = rt
        .block_on(echolab_runtime::docker::image::ensure(
            &e.docker,
            &bins,
            &[],
            None,
        ))
        .unwrap();
    let archive = echolab_runtime::image_archive::build_archive(&bins, &[]).unwrap();
    assert_eq!(
        first.id, archive.id,
        "the engine's id is the archive's config digest"
    );
    let again = rt
        .block_on(echolab_runtime::docker::image::ensure(
            &e.docker,
            &bins,
            &[],
            None,
        ))
        .unwrap();
    assert_eq!(first.id, again.id);
    assert!(rt
        .block_on(echolab_runtime::docker::image::image_id(
            &e.docker,
            "echolab:latest"
        ))
        .unwrap()
        .is_some());
}

/// A child process stopped on drop (the test's launchers, whatever the test's outcome).
struct Child(std::process::Child);

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

/// The results directory under `out` once its manifest counts a first run (cells are running).
fn first_run_recorded(out: &Path, launcher: &mut Child) -> PathBuf {
    wait_until(
        Duration::from_secs(180),
        "no run record within 180 s",
        || {
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
        },
    )
}

#[test]
fn down_removes_only_runs_whose_launcher_is_gone() {
    let e = engine();
    // Planned far longer than the test (1000 cells of 40,000 echoes): still going when --down
    // runs, whenever each launcher got through its start; the test stops them with SIGINT.
    let yaml = "name: busy\nquestion: does --down leave a live run alone?\nrepetitions: 1000\nmatrix:\n  - servers: [epoll-et]\n    modes: [long]\n    conns: [2]\n    rounds: [20000]\n";
    let bases: Vec<TempDir> = ["live-a", "live-b", "killed"]
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
        .arg(bases[2].0.join("results"))
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
            Duration::from_secs(300),
            "a live run recorded no further runs after --down",
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
            Duration::from_secs(120),
            "a live run did not stop within 120 s of SIGINT",
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
fn a_server_killed_during_a_cell_fails_that_run_and_the_next_cell_gets_a_fresh_one() {
    let e = engine();
    let base = TempDir::new("server-dies");
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
    wait_until(Duration::from_secs(120), "no echo-server to kill", || {
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
    let status = wait_until(
        Duration::from_secs(300),
        "the run did not finish within 300 s",
        || launcher.0.try_wait().unwrap(),
    );
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
fn storm_and_sustain_cells_run_through_the_launcher() {
    let e = engine();
    let base = TempDir::new("storm-sustain");
    let (mut cmd, out) = loopback_experiment(
        &base,
        "s.yaml",
        "name: s\nquestion: do seed 004's two cell kinds run end to end?\nrepetitions: 1\nwarmup: 0s\nmatrix:\n  - servers: [epoll-lt]\n    modes: [connect-storm]\n    conns: [50]\n  - servers: [select]\n    modes: [sustain]\n    conns: [20]\n    duration: 2s\n    reply_bytes: 1024\n",
    );
    // Unpinned hosts: the launcher tells echo-bench that the server shares its CPUs.
    cmd.args(["--cpu-plan", "shared"]);
    let o = cmd.output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let r = results(&out);
    assert_eq!(r.runs.len(), 2);
    let cpus = r.manifest.environment.cpus;
    for run in &r.runs {
        let b = run.bench.as_ref().expect("a bench report");
        assert_eq!(run.error, None);
        assert!(run.server.is_some(), "final server stats");
        assert!(
            b.threads_reason.contains("(--server-cpus shared)"),
            "{}",
            b.threads_reason
        );
        match run.cell.mode {
            BenchMode::ConnectStorm => {
                // Every one of the 50 connections proven by an echo over it.
                assert_eq!((b.requests_ok, b.requests_failed), (50, 0));
                assert_eq!(b.extra["established"], serde_json::json!(50));
                assert!(b.extra.contains_key("time_to_establish_s"));
            }
            BenchMode::Sustain => {
                // Long connections on the server's CPUs: half of them for the client.
                assert_eq!(b.threads, (cpus / 2).max(1), "{}", b.threads_reason);
                assert_eq!((b.reply_bytes, b.requests_failed), (Some(1024), 0));
                // One interval record per second of the 2 s run.
                assert_eq!(b.intervals.len(), 2, "{:?}", b.intervals);
                assert!(!run.samples.is_empty(), "server CPU samples in the window");
            }
            other => panic!("unexpected mode {other:?}"),
        }
    }
    assert_nothing_left(&e, &r.manifest.run_id);
}

#[test]
fn keep_leaves_the_lab_up_and_down_removes_it_once_its_launcher_is_gone() {
    let e = engine();
    let base = TempDir::new("keep");
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

/// An empty image imported as `tag` (`docker import`, so each gets an id of its own).
fn import(tag: &str) {
    succeeds(Command::new("sh").args([
        "-c",
        &format!("tar cf - --files-from /dev/null | docker import - {tag}"),
    ]));
}

/// The tags of repository `repo` on the machine's engine, sorted.
fn tags_of(repo: &str) -> Vec<String> {
    let out = std::process::Command::new("docker")
        .args(["images", "--format", "{{.Repository}}:{{.Tag}}", repo])
        .output()
        .expect("docker runs");
    let mut tags: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    tags.sort();
    tags
}

/// `--down`'s stale-image rule (`cleanup::remove_stale_images`) on the machine's engine, in
/// a repository of this test's own (the lab's `echolab` is shared with other tests' runs): an
/// image with only content tags goes; one that also has a name tag, a name-tagged one and one
/// a container uses stay.
#[test]
fn stale_images_are_those_with_only_content_tags_and_in_use_ones_stay() {
    let docker = engine().docker;
    let repo = format!("echolabstaletest{}", std::process::id());
    import(&format!("{repo}:0a1b2c3d4e5f"));
    import(&format!("{repo}:0a1b2c3d4e60"));
    let tagged = std::process::Command::new("docker")
        .args([
            "tag",
            &format!("{repo}:0a1b2c3d4e60"),
            &format!("{repo}:latest"),
        ])
        .status()
        .unwrap();
    assert!(tagged.success());
    import(&format!("{repo}:nix"));
    import(&format!("{repo}:ffff00001111"));
    succeeds(Command::new("docker").args([
        "create",
        "--name",
        &repo,
        &format!("{repo}:ffff00001111"),
        "none",
    ]));
    let removed = runtime()
        .block_on(cleanup::remove_stale_images(&docker, &repo))
        .unwrap();
    let left = tags_of(&repo);
    let _ = std::process::Command::new("docker")
        .args(["rm", "-f", &repo])
        .output();
    for t in &left {
        let _ = std::process::Command::new("docker")
            .args(["rmi", "-f", t])
            .output();
    }
    assert_eq!(removed, [format!("{repo}:0a1b2c3d4e5f")]);
    let mut expected = vec![
        format!("{repo}:0a1b2c3d4e60"),
        format!("{repo}:ffff00001111"),
        format!("{repo}:latest"),
        format!("{repo}:nix"),
    ];
    expected.sort();
    assert_eq!(left, expected);
}
