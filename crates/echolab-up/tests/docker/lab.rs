//! Two machines (`--lab`): this machine's engine runs the server and a second
//! engine, started by the testkit in a network namespace of its own behind a veth pair and
//! reached over TCP with mutual TLS ([`echolab_testkit::second_engine`]), runs the client.
//! The last test reaches the second engine through ssh instead (its sshd, `up --ssh`).
//! A submodule of tests/docker.rs, for its helpers.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use echolab_core::experiment::BenchMode;
use echolab_core::results::RunStatus;
use echolab_runtime::docker::{cleanup, engine};
use echolab_testkit::second_engine::SecondEngine;
use echolab_testkit::{wait_until, TempDir};

use super::common::*;

/// The second engine, or the test fails with why it could not start (CI must be able to).
pub(super) fn second_engine() -> SecondEngine {
    SecondEngine::start().unwrap_or_else(|e| panic!("the second engine did not start: {e}"))
}

/// A lab file in `base`: the server on this machine's engine (reached by the second
/// engine's machine at the veth's near end), the client on the second engine, with the
/// given TLS files.
fn lab_file(
    base: &TempDir,
    second: &SecondEngine,
    endpoint: &str,
    cert: &Path,
    key: &Path,
) -> PathBuf {
    let path = write_input(base, "lab.yaml", format!(
            "engines:\n  a: {{ endpoint: \"unix:///var/run/docker.sock\", address: {} }}\n  b: {{ endpoint: \"{endpoint}\", tls: {{ ca: {}, cert: {}, key: {} }} }}\nroles: {{ server: a, client: b }}\n",
            second.peer_addr,
            second.ca.display(),
            cert.display(),
            key.display()
        ));
    path
}

/// The second engine as an [`engine::Engine`], through the same connection code as a run.
pub(super) fn connect_second(lab: &Path) -> engine::Engine {
    let lab = echolab_core::lab_file::Lab::load(lab).unwrap();
    runtime()
        .block_on(engine::connect_lab("b", &lab.engines["b"]))
        .unwrap()
        .0
}

/// Bytes received and sent by the interface of this namespace that holds `addr` (the veth
/// end towards the second engine), from its kernel counters.
pub(super) fn interface_bytes(addr: std::net::Ipv4Addr) -> (u64, u64) {
    let out = Command::new("ip")
        .args(["-o", "-4", "addr", "show"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let name = text
        .lines()
        .find(|l| l.contains(&format!(" {addr}/")))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or_else(|| panic!("no interface holds {addr}: {text}"));
    let read = |what: &str| -> u64 {
        std::fs::read_to_string(format!("/sys/class/net/{name}/statistics/{what}"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    (read("rx_bytes"), read("tx_bytes"))
}

/// One lab test's pieces: this machine's engine (a), a second engine (b), a lab file naming
/// both over TLS, an experiment file, a results directory and a snapshot of the binaries.
pub(super) struct LabRun {
    pub(super) a: engine::Engine,
    pub(super) second: SecondEngine,
    pub(super) base: TempDir,
    pub(super) lab: PathBuf,
    pub(super) exp: PathBuf,
    pub(super) out: PathBuf,
    pub(super) bins: PathBuf,
}

impl LabRun {
    pub(super) fn new(tag: &str, second: SecondEngine, experiment: &str) -> Self {
        let a = engine();
        let base = TempDir::new(&format!("up-docker-{tag}"));
        let lab = lab_file(&base, &second, &second.endpoint, &second.cert, &second.key);
        let exp = write_input(&base, "experiment.yaml", experiment);
        let out = base.path().join("results");
        let bins = snapshot_bins(&base);
        Self {
            a,
            second,
            base,
            lab,
            exp,
            out,
            bins,
        }
    }

    /// echolab-up's arguments: profile native, the experiment, the lab file, then `extra`.
    pub(super) fn args<'a>(&'a self, extra: &[&'a str]) -> Vec<&'a str> {
        self.args_on("native", extra)
    }

    /// As [`LabRun::args`] on `profile` (a name or a file).
    fn args_on<'a>(&'a self, profile: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
        let mut v = profile_experiment(profile, self.exp.to_str().unwrap()).to_vec();
        v.extend(["--lab", self.lab.to_str().unwrap()]);
        v.extend_from_slice(extra);
        v
    }
}

/// What the server of a [`TWO_CELLS`] run counted: 10 connections, 20 requests of 12 bytes
/// each; short mode connects once per request.
pub(super) fn assert_server_saw_a_two_cells_run(rec: &echolab_core::results::RunRecord) {
    let t = &rec.server.as_ref().unwrap().totals;
    let connections = if rec.cell.mode == BenchMode::Short {
        200
    } else {
        10
    };
    assert_eq!(
        (t.accepted, t.bytes_in),
        (connections, 200 * 12),
        "{}",
        rec.file_name()
    );
}

pub(super) const TWO_CELLS: &str = "name: two-cells\nquestion: q\nrepetitions: 1\nmatrix:\n  - servers: [epoll-et]\n    modes: [short, long]\n    conns: [10]\n    rounds: [20]\nbench:\n  timeout: 5s\n";

#[test]
fn native_across_two_engines_runs_and_leaves_nothing_on_either() {
    let r = LabRun::new("lab", second_engine(), TWO_CELLS);
    let (a, second, lab, out, bins) = (&r.a, &r.second, &r.lab, &r.out, &r.bins);
    let args = r.args(&[]);
    let (rx0, tx0) = interface_bytes(second.peer_addr);
    let o = run(out, bins, &args);
    let (rx1, tx1) = interface_bytes(second.peer_addr);
    // The kernel's witness that the client ran on the other side of the veth pair: a
    // client in this namespace would reach 10.213.x.1 over `lo`. Calibration's bulk
    // transfers alone move far more than 10 MB each way in about a second each.
    assert!(
        rx1 - rx0 > 10_000_000 && tx1 - tx0 > 10_000_000,
        "veth carried {} B in, {} B out",
        rx1 - rx0,
        tx1 - tx0
    );
    assert!(
        o.status.success(),
        "echolab-up --lab failed: {}",
        stderr(&o)
    );
    let r = results(out);
    let m = &r.manifest;
    assert_eq!(m.status, RunStatus::Complete, "{:?}", m.error);
    assert_eq!((m.runs_done, r.runs.len()), (2, 2));
    // Both engines recorded, with their roles and the same deterministic image.
    let (ea, eb) = (&m.engines["a"], &m.engines["b"]);
    assert_eq!(
        (ea.roles.as_slice(), eb.roles.as_slice()),
        (&["server".to_string()][..], &["client".to_string()][..])
    );
    assert_eq!(eb.endpoint, second.endpoint);
    assert_eq!(ea.image_id, m.image.id);
    assert_eq!(eb.image_id, m.image.id);
    assert!(eb.image_loaded, "the second engine starts with no image");
    assert!(
        !eb.cpu_model.is_empty() && eb.cpus > 0 && eb.mem_bytes > 0,
        "{eb:?}"
    );
    assert_hosts_as_planned(m);
    assert_eq!(m.hosts["server"]["network_mode"], "host");
    assert_eq!(m.hosts["client"]["engine"], "b");
    assert_eq!(m.cpu_plan.as_ref().unwrap().mode, "machines");
    assert!(
        !m.order.as_ref().unwrap().fresh_hosts_per_cell,
        "host networking cannot give fresh namespaces"
    );
    // The real path measured: the veth pair between the namespaces adds nothing, so its
    // RTT is well under the profile's 5 ms bound, and both directions carried a transfer.
    let cal = m.link.calibration.as_ref().expect("calibration recorded");
    assert!(cal.passed, "{cal:?}");
    for k in [
        "rtt_median_us",
        "goodput_uplink_mbit",
        "goodput_downlink_mbit",
    ] {
        assert!(
            cal.measured.get(k).is_some_and(|v| *v > 0.0),
            "{k}: {cal:?}"
        );
    }
    for rec in &r.runs {
        assert!(rec.error.is_none(), "{}: {:?}", rec.file_name(), rec.error);
        let bench = rec.bench.as_ref().unwrap();
        assert_eq!(bench.requests_ok, 10 * 20, "{}", rec.file_name());
        assert!(
            bench.target.starts_with(&format!("{}:", second.peer_addr)),
            "the client went to engine a's machine: {}",
            bench.target
        );
        assert!(
            bench.threads_reason.contains("(--server-cpus separate)"),
            "{}",
            bench.threads_reason
        );
        assert_server_saw_a_two_cells_run(rec);
    }
    assert_nothing_left(a, &m.run_id);
    assert_nothing_left(&connect_second(lab), &m.run_id);
}

/// lan100's added RTT by hand (the profile's source text): 2 x (100 us + (68-byte probe + 38
/// bytes overhead) x 8 bits / 100 Mbit/s) = 216.96 us.
pub(super) const LAN100_ADDED_US: f64 = 2.0 * (100.0 + (68.0 + 38.0) * 8.0 / 100.0);

/// lan100 as shipped, written into `base`, but with +-150 us on what the link adds: the
/// tests that use it check that a link across machines is in effect and summed with the real
/// path; how exactly the wire keeps a 100 us delay on a loaded 2-core machine is wire_perf's
/// to measure.
pub(super) fn lan100_wide(base: &TempDir) -> PathBuf {
    let shipped = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../netem/lan100.yaml"),
    )
    .unwrap();

    write_input(
        base,
        "lan100-wide.yaml",
        shipped.replace(
            "added_rtt: { relative: 10%, at_least: 50us }",
            "added_rtt: { relative: 10%, at_least: 150us }",
        ),
    )
}

#[test]
fn lan100_across_two_engines_adds_its_delay_and_rate_on_the_real_path() {
    let r = LabRun::new("lab-lan100", second_engine(), TWO_CELLS);
    let profile = lan100_wide(&r.base);
    let o = run(&r.out, &r.bins, &r.args_on(profile.to_str().unwrap(), &[]));
    assert!(
        o.status.success(),
        "echolab-up --lab lan100 failed: {}",
        stderr(&o)
    );
    let res = results(&r.out);
    let m = &res.manifest;
    assert_eq!(m.status, RunStatus::Complete, "{:?}", m.error);
    // Kernel netem where this kernel has sch_netem, with the kernel's masquerade; else the
    // wire, which translates by itself.
    let backend = expected_link_backend();
    assert_eq!(m.link.backend, backend, "{:?}", m.link);
    let translator = if backend == "kernel-netem" {
        "the kernel's source NAT (an nftables masquerade in the link host) translates the client's address"
    } else {
        "the wire translates the client's address"
    };
    assert!(
        m.link.reason.contains("across machines")
            && m.link.reason.contains(translator)
            && m.link.reason.contains("from the client host"),
        "who translates, and where the baseline was measured: {}",
        m.link.reason
    );
    // The client is behind the link host on its own machine; the server is on the other.
    assert_hosts_as_planned(m);
    assert_eq!(m.hosts["server"]["network_mode"], "host");
    assert_eq!(m.hosts["client"]["engine"], "b");
    assert_eq!(m.hosts["link"]["engine"], "b");
    let cal = m.link.calibration.as_ref().expect("calibration recorded");
    assert!(cal.passed, "{cal:?}");
    let base = cal.measured["rtt_baseline_median_us"];
    let total = cal.measured["rtt_median_us"];
    let rtt = cal.checks.iter().find(|c| c.name == "rtt_median").unwrap();
    // The total is judged as the real path plus lan100's added RTT, not lan100's
    // one-machine band (220..550 us).
    assert!(
        (rtt.low - (base + LAN100_ADDED_US - 150.0)).abs() < 0.01
            && (rtt.high - (base + LAN100_ADDED_US + 150.0)).abs() < 0.01,
        "{rtt:?} with baseline {base}"
    );
    assert!(
        total - base > LAN100_ADDED_US - 150.0,
        "the link's delay is in effect: {total} - {base}"
    );
    // 100 Mbit/s each way: 100 x 1448 / 1538 = 94.15 Mbit/s of goodput, +-3%.
    for k in ["goodput_uplink_mbit", "goodput_downlink_mbit"] {
        let g = cal.measured[k];
        assert!((91.3..=97.0).contains(&g), "{k}: {g}");
    }
    if backend == "userspace-wire" {
        let counters = cal.link_counters.as_ref().expect("the wire's counters");
        assert!(
            counters.uplink.counts.packets > 1000 && counters.downlink.counts.packets > 1000,
            "calibration's transfers went through the wire: {counters:?}"
        );
    }
    for rec in &res.runs {
        assert!(rec.error.is_none(), "{}: {:?}", rec.file_name(), rec.error);
        let bench = rec.bench.as_ref().unwrap();
        assert_eq!(bench.requests_ok, 10 * 20, "{}", rec.file_name());
        assert!(bench
            .target
            .starts_with(&format!("{}:", r.second.peer_addr)));
        // Every request crossed both 100 us delays.
        assert!(
            bench.latency_us.unwrap().p50 >= 200.0,
            "{}: p50 {} us",
            rec.file_name(),
            bench.latency_us.unwrap().p50
        );
    }
    assert_nothing_left(&r.a, &m.run_id);
    assert_nothing_left(&connect_second(&r.lab), &m.run_id);
    // A server address the client's machine cannot reach: the baseline fails, naming the
    // lab file's key, and nothing is left.
    let text = std::fs::read_to_string(&r.lab).unwrap();
    std::fs::write(
        &r.lab,
        text.replace(&r.second.peer_addr.to_string(), "10.213.250.9"),
    )
    .unwrap();
    let o = run(&r.out, &r.bins, &r.args_on(profile.to_str().unwrap(), &[]));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("to the server at 10.213.250.9 (engines.a.address in")
            && !err.contains("EOF while parsing"),
        "{err}"
    );
    let on_b = runtime()
        .block_on(cleanup::list_labelled(&connect_second(&r.lab).docker, None))
        .unwrap();
    assert!(
        on_b.containers.is_empty() && on_b.networks.is_empty(),
        "{on_b:?}"
    );
}

#[test]
fn an_unreachable_or_untrusted_engine_is_one_line_and_nothing_is_created() {
    let a = engine();
    let second = second_engine();
    let base = TempDir::new("up-docker-lab-bad");
    let bins = snapshot_bins(&base);
    let out = base.path().join("results");
    let before = runtime()
        .block_on(cleanup::list_labelled(&a.docker, None))
        .unwrap();
    // A certificate from a CA the engine does not trust.
    let rogue = base.path().join("rogue");
    std::fs::create_dir_all(&rogue).unwrap();
    let sh = |cmd: &str| {
        let s = Command::new("sh")
            .arg("-c")
            .arg(cmd)
            .current_dir(&rogue)
            .status()
            .unwrap();
        assert!(s.success(), "{cmd}");
    };
    sh("openssl req -x509 -newkey rsa:2048 -nodes -keyout key.pem -out cert.pem -days 1 -subj /CN=rogue 2>/dev/null");
    // A listener that accepts and never answers: an engine that hangs.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_endpoint = format!("tcp://{}", silent.local_addr().unwrap());
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let refused_endpoint = format!("tcp://{}", closed.local_addr().unwrap());
    drop(closed);
    let cases = [
        (
            second.endpoint.clone(),
            rogue.join("cert.pem"),
            rogue.join("key.pem"),
            "does not accept this client certificate",
        ),
        (
            refused_endpoint,
            second.cert.clone(),
            second.key.clone(),
            "refused",
        ),
        (
            silent_endpoint,
            second.cert.clone(),
            second.key.clone(),
            "no answer within",
        ),
    ];
    for (endpoint, cert, key, says) in cases {
        let lab = lab_file(&base, &second, &endpoint, &cert, &key);
        let mut args = profile_experiment("native", "smoke").to_vec();
        args.extend(["--lab", lab.to_str().unwrap()]);
        let o = run(&out, &bins, &args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{endpoint}: {err}");
        assert!(
            err.contains(says) && err.contains(&endpoint),
            "{endpoint}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(
            !out.exists(),
            "no results directory for a run that never started"
        );
    }
    drop(silent);
    let after = runtime()
        .block_on(cleanup::list_labelled(&a.docker, None))
        .unwrap();
    assert_eq!(
        before.containers.len(),
        after.containers.len(),
        "nothing created on engine a"
    );
    let b = connect_second(&lab_file(
        &base,
        &second,
        &second.endpoint,
        &second.cert,
        &second.key,
    ));
    let on_b = runtime()
        .block_on(cleanup::list_labelled(&b.docker, None))
        .unwrap();
    assert!(
        on_b.containers.is_empty() && on_b.networks.is_empty(),
        "{on_b:?}"
    );
    // A CPU plan of this machine means nothing across machines: refused, not ignored.
    let good = lab_file(&base, &second, &second.endpoint, &second.cert, &second.key);
    let mut args = profile_experiment("native", "smoke").to_vec();
    args.extend([
        "--lab",
        good.to_str().unwrap(),
        "--cpu-plan",
        "server=0,client=1",
    ]);
    let o = run(&out, &bins, &args);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--cpu-plan"), "{}", stderr(&o));
    // A server address the client's machine cannot reach fails calibration, naming the key.
    let wrong = lab_file(&base, &second, &second.endpoint, &second.cert, &second.key);
    let text = std::fs::read_to_string(&wrong).unwrap();
    std::fs::write(
        &wrong,
        text.replace(&second.peer_addr.to_string(), "10.213.250.9"),
    )
    .unwrap();
    let mut args = profile_experiment("native", "smoke").to_vec();
    args.extend(["--lab", wrong.to_str().unwrap()]);
    let o = run(&out, &bins, &args);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("to the server at 10.213.250.9 (engines.a.address in"),
        "{}",
        stderr(&o)
    );
    let on_a = runtime()
        .block_on(cleanup::list_labelled(&a.docker, None))
        .unwrap();
    let on_b = runtime()
        .block_on(cleanup::list_labelled(&b.docker, None))
        .unwrap();
    assert_eq!(
        before.containers.len(),
        on_a.containers.len(),
        "torn down on engine a"
    );
    assert!(
        on_b.containers.is_empty(),
        "torn down on engine b: {on_b:?}"
    );
    // Without --lab, the native profile is refused before any engine is contacted.
    let o = run(&out, &bins, &profile_experiment("native", "smoke"));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--lab"), "{}", stderr(&o));
}

#[test]
fn keep_then_down_with_the_lab_file_removes_the_run_on_both_engines() {
    let r = LabRun::new(
        "lab-keep",
        second_engine(),
        &TWO_CELLS.replace("[short, long]", "[long]"),
    );
    let (a, lab, out, bins) = (&r.a, &r.lab, &r.out, &r.bins);
    // A prebuilt image (--image) on engine a only: the run copies it to engine b.
    let built = Command::new(BIN)
        .arg("--build-image")
        .arg("--bin-dir")
        .arg(bins)
        .output()
        .unwrap();
    assert!(built.status.success(), "{}", stderr(&built));
    let stdout = String::from_utf8_lossy(&built.stdout).into_owned();
    let (reference, id) = stdout.trim().split_once(' ').expect("REF ID");
    let args = r.args(&["--keep", "--image", reference]);
    let o = run(out, bins, &args);
    assert!(o.status.success(), "{}", stderr(&o));
    let m = results(out).manifest;
    assert_eq!(m.engines["b"].image_id, id, "{:?}", m.engines);
    assert!(m.engines["b"].image_loaded && !m.engines["a"].image_loaded);
    let run_id = m.run_id;
    let b = connect_second(lab);
    let on = |e: &engine::Engine| {
        runtime()
            .block_on(cleanup::list_labelled(&e.docker, Some(&run_id)))
            .unwrap()
            .containers
            .len()
    };
    assert_eq!(
        (on(a), on(&b)),
        (1, 1),
        "--keep: the server host on a, the client host on b"
    );
    // Without the lab file, --down reaches this machine's engine only, and says what is left.
    let said = down(None, out);
    assert!(
        said.contains(&format!(
            "run {run_id} also has hosts on the engines of its lab file (a, b)"
        )),
        "{said}"
    );
    assert_eq!((on(a), on(&b)), (0, 1), "{said}");
    let said = down(Some(lab.as_path()), out);
    assert!(
        said.contains("engine a: removed 0 containers")
            && said.contains("engine b: removed 1 containers"),
        "{said}"
    );
    assert_nothing_left(a, &run_id);
    assert_nothing_left(&b, &run_id);
}

/// `echolab-up --down --out OUT`, with `--lab LAB` when given (every engine of the lab file,
/// else this machine's only); asserts it succeeded and returns its stderr (what it removed and
/// what it left).
pub(super) fn down(lab: Option<&Path>, out: &Path) -> String {
    let mut c = Command::new(BIN);
    c.arg("--down");
    if let Some(lab) = lab {
        c.arg("--lab").arg(lab);
    }
    let o = c
        .arg("--out")
        .arg(out)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    stderr(&o)
}

/// The processes whose command line mentions `path` (ssh masters name their control socket).
fn processes_mentioning(path: &Path) -> Vec<String> {
    let needle = path.to_string_lossy().into_owned();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| {
            let pid = e.ok()?.file_name().into_string().ok()?;
            pid.parse::<u32>().ok()?;
            let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&raw).replace('\0', " ");
            cmdline
                .contains(&needle)
                .then(|| format!("{pid}: {cmdline}"))
        })
        .collect()
}

#[test]
fn an_ssh_engine_runs_the_client_and_leaves_nothing_behind() {
    let second = SecondEngine::start_with_ssh()
        .unwrap_or_else(|e| panic!("the second engine did not start with its sshd: {e}"));
    let ssh = second.ssh.clone().expect("start_with_ssh gives a login");
    let r = LabRun::new(
        "lab-ssh",
        second,
        &TWO_CELLS.replace("[short, long]", "[long]"),
    );
    let (a, second, base, out, bins) = (&r.a, &r.second, &r.base, &r.out, &r.bins);
    // The lab file names engine b by its SSH login instead of its TLS endpoint.
    std::fs::write(
        &r.lab,
        format!(
            "engines:\n  a: {{ endpoint: \"unix:///var/run/docker.sock\", address: {} }}\n  b: {{ endpoint: \"{}\", identity: {} }}\nroles: {{ server: a, client: b }}\n",
            second.peer_addr,
            ssh.endpoint,
            ssh.identity.display()
        ),
    )
    .unwrap();
    assert_eq!(ssh.endpoint, format!("ssh://root@{}", second.engine_addr));
    let args = r.args(&[]);
    // bollard logs in with the machine's `ssh` (the openssh crate: a master with its control
    // socket in a directory of $XDG_STATE_HOME, else ~/.local/state, and known hosts checked
    // in accept-new mode). The engine's `ssh` first in PATH checks its sshd's host key against
    // its own known_hosts, not ~/.ssh's (an earlier engine's key for the same address there
    // would fail the login); a state directory of the test's own shows every master closed.
    let state = base.path().join("xdg");
    let o = launch(out, bins, &args)
        .env("PATH", ssh.path_env())
        .env("XDG_STATE_HOME", &state)
        .output()
        .expect("echolab-up runs");
    assert!(
        o.status.success(),
        "echolab-up --lab (ssh) failed: {}",
        stderr(&o)
    );
    let r = results(out);
    let m = &r.manifest;
    assert_eq!(m.status, RunStatus::Complete, "{:?}", m.error);
    assert_eq!((m.runs_done, r.runs.len()), (1, 1));
    let eb = &m.engines["b"];
    assert_eq!(eb.endpoint, ssh.endpoint);
    assert_eq!(eb.roles, ["client".to_string()]);
    assert!(eb.image_loaded && eb.image_id == m.image.id, "{eb:?}");
    let rec = &r.runs[0];
    assert!(rec.error.is_none(), "{:?}", rec.error);
    let bench = rec.bench.as_ref().unwrap();
    assert_eq!(bench.requests_ok, 10 * 20);
    assert!(
        bench.target.starts_with(&format!("{}:", second.peer_addr)),
        "the client went to engine a's machine: {}",
        bench.target
    );
    // Every ssh master echolab-up started (there, the state directory shows) has exited and
    // removed its control directory.
    assert!(
        state.is_dir(),
        "no ssh master ever ran under {}",
        state.display()
    );
    wait_until(
        "the ssh masters to exit after echolab-up",
        Duration::from_secs(5),
        || {
            let dirs = std::fs::read_dir(&state).unwrap().count();
            (dirs == 0 && processes_mentioning(&state).is_empty()).then_some(())
        },
    );
    assert_nothing_left(a, &m.run_id);
    // Engine b checked over TLS: the test's own process has no ssh setup of its own.
    let b = connect_second(&lab_file(
        base,
        second,
        &second.endpoint,
        &second.cert,
        &second.key,
    ));
    assert_nothing_left(&b, &m.run_id);
}

#[test]
fn ctrl_c_during_a_lab_run_cleans_up_both_engines() {
    let lab = LabRun::new("lab-sigint", second_engine(), MANY_LONG_RUNS);
    let cmd = launch(&lab.out, &lab.bins, &lab.args(&[]));
    let r = interrupted_after_first_run(cmd, &lab.out);
    assert_nothing_left(&lab.a, &r.manifest.run_id);
    assert_nothing_left(&connect_second(&lab.lab), &r.manifest.run_id);
}
