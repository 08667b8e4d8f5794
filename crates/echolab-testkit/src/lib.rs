//! Test support shared by echolab's crates (a dev-dependency only).
//!
//! Integration tests of one crate often need another crate's binary (echo-bench's tests run
//! `echo-server`). Cargo only exposes `CARGO_BIN_EXE_*` for the crate's own binaries, so
//! [`workspace_bin`] finds the others in the same target directory. `cargo nextest run
//! --workspace` (the README's test command) builds every workspace binary before any test runs.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use echolab_core::cmd::{final_stats, Ready};
use echolab_core::stats::ServerStats;

/// How long a spawned server may take to say it is listening. Generous: the machine has two
/// cores and other tests compile or run beside this one.
pub const READY_DEADLINE: Duration = Duration::from_secs(30);

/// Path of the workspace binary `name` built in the same profile as the running test.
///
/// # Panics
/// When the binary is not there, with the command that builds it; a test cannot go on without it.
pub fn workspace_bin(name: &str) -> PathBuf {
    // A test executable lives in target/<profile>/deps/; binaries live in target/<profile>/.
    let exe = std::env::current_exe().expect("current_exe is readable");
    let profile_dir = exe
        .parent()
        .and_then(|deps| {
            if deps.ends_with("deps") {
                deps.parent()
            } else {
                Some(deps)
            }
        })
        .expect("test executable has a parent directory");
    let path = profile_dir.join(name);
    assert!(
        path.is_file(),
        "{} not found: build it first with `cargo build --workspace --bins` (or run the README's \
         test command, `cargo nextest run --workspace`, which builds it)",
        path.display()
    );
    path
}

/// A running `echo-server` child process; killed (SIGKILL) and reaped on drop.
pub struct ServerProcess {
    /// The address it listens on (from its readiness line).
    pub addr: SocketAddr,
    child: Option<Child>,
    stdout: Option<std::process::ChildStdout>,
    stderr_log: Arc<Mutex<String>>,
}

impl ServerProcess {
    /// Starts `bin` with `args` and waits (up to [`READY_DEADLINE`]) for its readiness line.
    /// Add `--port 0 --bind 127.0.0.1` to `args` to get an ephemeral loopback port.
    ///
    /// # Panics
    /// If the process cannot start, exits, or does not announce readiness in time; the panic
    /// message carries the server's stderr.
    pub fn spawn(bin: &Path, args: &[&str]) -> Self {
        Self::spawn_with(Command::new(bin).args(args))
    }

    /// Like [`ServerProcess::spawn`] for a prepared command (environment, pre_exec, ...).
    pub fn spawn_with(cmd: &mut Command) -> Self {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        let stderr = child.stderr.take().expect("stderr is piped");
        let stderr_log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel();
        let log = Arc::clone(&stderr_log);
        // Drain stderr for the whole life of the child so it can never block on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.starts_with(Ready::PREFIX) {
                    let _ = tx.send(
                        Ready::parse(&line)
                            .map(|r| r.addr)
                            .ok_or_else(|| line.clone()),
                    );
                }
                let mut l = log.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        let stdout = child.stdout.take();
        let mut me = Self {
            addr: ([0, 0, 0, 0], 0).into(),
            child: Some(child),
            stdout,
            stderr_log,
        };
        match rx.recv_timeout(READY_DEADLINE) {
            Ok(Ok(addr)) => me.addr = addr,
            Ok(Err(line)) => panic!(
                "unparsable readiness line {line:?}; stderr:\n{}",
                me.stderr()
            ),
            Err(_) => panic!(
                "server not ready within {READY_DEADLINE:?}; stderr:\n{}",
                me.stderr()
            ),
        }
        me
    }

    /// Everything the server wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr_log.lock().unwrap().clone()
    }

    /// Process id of the server.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// `true` while the process has not exited.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// Sends SIGTERM, waits for exit, and returns the exit code with the final [`ServerStats`]
    /// line the server printed on stdout (and every line before it, raw).
    ///
    /// # Panics
    /// If the server does not exit within [`READY_DEADLINE`] or prints no final stats line.
    pub fn stop(mut self) -> (i32, ServerStats, String) {
        let mut child = self.child.take().expect("not stopped twice");
        // SAFETY: kill(2) with a pid we own and a valid signal number has no memory effects.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        let mut out = String::new();
        if let Some(mut s) = self.stdout.take() {
            // stdout reaches EOF when the server exits; a server that hangs fails the wait below.
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                let mut buf = String::new();
                let _ = s.read_to_string(&mut buf);
                let _ = tx.send(buf);
            });
            out = rx.recv_timeout(READY_DEADLINE).unwrap_or_else(|_| {
                let _ = child.kill();
                let _ = child.wait();
                panic!("server did not exit within {READY_DEADLINE:?} of SIGTERM");
            });
        }
        let status = child.wait().expect("wait for server");
        let last = final_stats(&out)
            .unwrap_or_else(|e| panic!("{e}; stdout:\n{out}\nstderr:\n{}", self.stderr()));
        (status.code().unwrap_or(-1), last, out)
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Starts the workspace's `echo-server` on an ephemeral loopback port with `--model model` and
/// the extra `args`, and waits until it is listening.
pub fn spawn_echo_server(model: &str, args: &[&str]) -> ServerProcess {
    let bin = workspace_bin("echo-server");
    let mut all = vec!["--model", model, "--port", "0", "--bind", "127.0.0.1"];
    all.extend_from_slice(args);
    ServerProcess::spawn(&bin, &all)
}
