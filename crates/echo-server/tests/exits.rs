//! How echo-server ends: by SIGTERM/SIGINT with status 0 and no
//! fatal line; any other way with one `echo-server: fatal: REASON` line ([`Fatal`]) on stderr
//! and a non-zero status; and prefork's workers that die are replaced and counted, or the
//! server ends saying why.

mod common;

use std::io::{BufRead as _, BufReader};
use std::os::unix::process::ExitStatusExt as _;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{connect, process_tree, round_trip, stop_ok, DEADLINE};
use echolab_core::cmd::{Fatal, Ready};
use echolab_testkit::{spawn_echo_server, wait_until, workspace_bin};

/// An echo-server started here rather than by the testkit, to see how it exits.
struct Server {
    child: Child,
    stderr: Arc<Mutex<String>>,
}

impl Server {
    /// Starts echo-server `model` on a loopback port with `env` set, waits for its readiness
    /// line.
    fn start(model: &str, args: &[&str], env: &[(&str, &str)]) -> Server {
        let mut child =
            echolab_testkit::dies_with_parent(&mut Command::new(workspace_bin("echo-server")))
                .args(["--model", model, "--port", "0", "--bind", "127.0.0.1"])
                .args(args)
                .envs(env.iter().copied())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start echo-server");
        let stderr = Arc::new(Mutex::new(String::new()));
        let log = Arc::clone(&stderr);
        let (tx, rx) = std::sync::mpsc::channel();
        let pipe = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                if let Some(r) = Ready::parse(&line) {
                    let _ = tx.send(r);
                }
                let mut l = log.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        let ready = rx
            .recv_timeout(DEADLINE)
            .unwrap_or_else(|_| panic!("not ready; stderr:\n{}", stderr.lock().unwrap()));
        assert_eq!(ready.pid, child.id(), "the readiness line names the server");
        Server { child, stderr }
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Waits (up to [`DEADLINE`]) for the server to exit; returns its status and stderr.
    fn exit(mut self) -> (ExitStatus, String) {
        let end = Instant::now() + DEADLINE;
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            assert!(Instant::now() < end, "the server did not exit");
            std::thread::sleep(Duration::from_millis(10));
        };
        // The stderr reader ends at EOF, shortly after the exit.
        wait_until("stderr to close", DEADLINE, || {
            (Arc::strong_count(&self.stderr) == 1).then_some(())
        });
        let err = self.stderr.lock().unwrap().clone();
        (status, err)
    }
}

fn signal(pid: i32, sig: libc::c_int) {
    // SAFETY: kill(2) has no memory effects.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0, "kill {pid} {sig}");
}

/// The fatal lines of `stderr`, parsed.
fn fatal_lines(stderr: &str) -> Vec<Fatal> {
    stderr.lines().filter_map(Fatal::parse).collect()
}

#[test]
fn sigterm_and_sigint_end_it_with_status_0_and_no_fatal_line() {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let s = Server::start("epoll-et", &[], &[]);
        signal(s.pid(), sig);
        let (status, stderr) = s.exit();
        assert_eq!(status.code(), Some(0), "{stderr}");
        assert_eq!(fatal_lines(&stderr), [], "{stderr}");
    }
}

#[test]
fn a_signal_that_ends_it_is_named_and_the_status_is_128_plus_its_number() {
    for (sig, name) in [(libc::SIGHUP, "SIGHUP"), (libc::SIGUSR1, "SIGUSR1")] {
        for model in ["epoll-et", "prefork", "uring", "tokio"] {
            let s = Server::start(model, &["--workers", "2"], &[]);
            signal(s.pid(), sig);
            let (status, stderr) = s.exit();
            assert_eq!(status.code(), Some(128 + sig), "{model} {name}: {stderr}");
            assert_eq!(
                fatal_lines(&stderr),
                [Fatal::new(&format!("ended by signal {name}"))],
                "{model}: {stderr}"
            );
        }
    }
}

#[test]
fn a_fault_signal_is_named_before_it_ends_the_server_as_it_would_have() {
    for (sig, reason) in [
        (
            libc::SIGSEGV,
            "killed by signal SIGSEGV (invalid memory reference)",
        ),
        (libc::SIGABRT, "killed by signal SIGABRT (abort)"),
    ] {
        let s = Server::start("poll", &[], &[]);
        signal(s.pid(), sig);
        let (status, stderr) = s.exit();
        assert_eq!(status.signal(), Some(sig), "{reason}: {stderr}");
        assert_eq!(fatal_lines(&stderr), [Fatal::new(reason)], "{stderr}");
    }
}

#[test]
fn a_panic_in_any_thread_ends_the_server_with_its_message_and_status_1() {
    for model in ["select", "thread", "reuseport"] {
        let s = Server::start(model, &[], &[("ECHO_SERVER_FAULT", "panic")]);
        let (status, stderr) = s.exit();
        assert_eq!(status.code(), Some(1), "{model}: {stderr}");
        let lines = fatal_lines(&stderr);
        assert_eq!(lines.len(), 1, "one fatal line: {stderr}");
        let reason = &lines[0].reason;
        assert!(
            reason.starts_with("panic in thread 'fault-injection' at ")
                && reason.ends_with(": injected by ECHO_SERVER_FAULT=panic"),
            "{reason}"
        );
        assert!(!stderr.contains("RUST_BACKTRACE"), "{stderr}");
    }
}

#[test]
fn an_error_after_start_is_named_with_status_1() {
    let s = Server::start("epoll-lt", &[], &[("ECHO_SERVER_FAULT", "error")]);
    let (status, stderr) = s.exit();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert_eq!(
        fatal_lines(&stderr),
        [Fatal::new("injected by ECHO_SERVER_FAULT=error")]
    );
}

/// The worker processes of prefork server `pid`, in no particular order.
fn workers_of(pid: u32) -> Vec<u32> {
    process_tree(pid)
        .into_iter()
        .filter(|&p| p != pid)
        .collect()
}

/// Lines on which the server reports a replaced worker.
fn restart_lines(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter(|l| l.starts_with("echo-server: prefork worker ") && l.contains("restarted"))
        .map(str::to_owned)
        .collect()
}

/// Kills `victims` (SIGKILL) of prefork `server` at once; then the server must say so, replace
/// each, serve every request, and count exactly that many restarts.
fn killed_workers_are_replaced(victims: usize) {
    const WORKERS: usize = 2;
    let server = spawn_echo_server("prefork", &["--workers", "2"]);
    let pid = server.pid();
    wait_until("both workers to run", DEADLINE, || {
        (workers_of(pid).len() == WORKERS).then_some(())
    });
    let before = workers_of(pid);
    for &w in &before[..victims] {
        signal(w as i32, libc::SIGKILL);
    }
    wait_until("a line per replaced worker", DEADLINE, || {
        (restart_lines(&server.stderr()).len() == victims).then_some(())
    });
    let lines = restart_lines(&server.stderr());
    for &w in &before[..victims] {
        assert!(
            lines
                .iter()
                .any(|l| l.contains(&format!("(pid {w}) was killed by signal SIGKILL"))),
            "no line names the killed worker {w}: {lines:?}"
        );
    }
    let after = workers_of(pid);
    assert_eq!(after.len(), WORKERS, "{after:?}");
    // Every request of 20 connections is served, by whichever worker takes it.
    for i in 0..20 {
        let msg = format!("request {i} after the kill\n").into_bytes();
        assert_eq!(round_trip(&mut connect(server.addr), &msg).unwrap(), msg);
    }
    let st = stop_ok(server);
    assert_eq!(st.worker_restarts, victims as u64, "{st:?}");
    assert_eq!(st.totals.accepted, 20, "{st:?}");
    let mut pids: Vec<u32> = st.workers.iter().map(|w| w.pid).collect();
    let mut alive = after;
    pids.sort_unstable();
    alive.sort_unstable();
    assert_eq!(pids, alive, "the stats name the workers that run");
}

#[test]
fn prefork_replaces_a_killed_worker_and_counts_it() {
    killed_workers_are_replaced(1);
}

#[test]
fn prefork_replaces_both_workers_killed_at_once() {
    killed_workers_are_replaced(2);
}

#[test]
fn prefork_gives_up_on_workers_that_keep_dying_and_says_why() {
    let s = Server::start("prefork", &["--workers", "1"], &[]);
    let pid = s.pid() as u32;
    // The 11th death within 10 s is one restart too many (RESTART_LIMIT = 10).
    for kill in 1..=11 {
        wait_until("the worker to run", DEADLINE, || {
            (workers_of(pid).len() == 1).then_some(())
        });
        let w = workers_of(pid)[0];
        signal(w as i32, libc::SIGKILL);
        if kill <= 10 {
            wait_until("the replacement", DEADLINE, || {
                (restart_lines(&s.stderr.lock().unwrap()).len() == kill).then_some(())
            });
        }
    }
    let (status, stderr) = s.exit();
    assert_eq!(status.code(), Some(1), "{stderr}");
    let lines = fatal_lines(&stderr);
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].reason.starts_with("prefork worker 0 (pid ")
            && lines[0].reason.ends_with(
                "was killed by signal SIGKILL; 10 workers were restarted within 10s, giving up"
            ),
        "{}",
        lines[0].reason
    );
    assert_eq!(
        workers_of(pid),
        Vec::<u32>::new(),
        "no worker outlives the server"
    );
}

#[test]
fn an_unknown_fault_to_inject_is_a_usage_error() {
    let out = Command::new(workspace_bin("echo-server"))
        .args(["--model", "poll", "--port", "0"])
        .env("ECHO_SERVER_FAULT", "segfault")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("ECHO_SERVER_FAULT=\"segfault\""),
        "{stderr}"
    );
}
