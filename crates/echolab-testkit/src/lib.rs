//! Test support shared by echolab's crates (a dev-dependency only).
//!
//! Integration tests of one crate often need another crate's binary (echo-bench's tests run
//! `echo-server`). Cargo only exposes `CARGO_BIN_EXE_*` for the crate's own binaries, so
//! [`workspace_bin`] finds the others in the same target directory. `cargo nextest run
//! --workspace` (the README's test command) builds every workspace binary before any test runs;
//! `cargo nextest run -p CRATE` builds only CRATE's, so [`workspace_bin`] refuses a sibling
//! binary that is older than its sources, with the command that rebuilds it, rather than let a
//! test pass or fail against code that is no longer there.
//!
//! [`fixtures`] holds what many tests repeat: a scratch directory removed on drop
//! ([`TempDir`]) and a bounded wait ([`wait_until`]).

pub mod fixtures;
pub mod second_engine;

pub use fixtures::{wait_until, TempDir};

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use echolab_core::cmd::Ready;
use echolab_core::stats::ServerStats;

/// Makes the child that `cmd` starts receive SIGKILL when the thread that starts it ends
/// (prctl(2) `PR_SET_PDEATHSIG`): a test process killed by a runner's timeout (cargo-mutants,
/// nextest) must not leave its server running, busy or holding ports, beside later tests.
pub fn dies_with_parent(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: the closure runs between fork and exec and only calls prctl(2), which is
    // async-signal-safe; it touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// How long a spawned server may take to say it is listening. Generous: the machine has two
/// cores and other tests compile or run beside this one.
pub const READY_DEADLINE: Duration = Duration::from_secs(30);

/// Path of the workspace binary `name` built in the same profile as the running test, checked
/// to be current (see [`stale_binary`]).
///
/// # Panics
/// When the binary is not there or is older than its sources, with the command that builds it;
/// a test cannot go on without a current binary.
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
    let build = build_command(name, profile_dir);
    assert!(
        path.is_file(),
        "{} not found: build it first with `{build}` (or run the README's test command, \
         `cargo nextest run --workspace`, which builds it)",
        path.display()
    );
    if let Some(newer) = stale_binary(&path, &workspace_root().join("crates").join(name)) {
        panic!(
            "{} is older than {}, which changed after it was built: rebuild it with `{build}` \
             (the README's `cargo nextest run --workspace` builds every binary first)",
            path.display(),
            newer.display()
        );
    }
    path
}

/// The checkout this crate was compiled in.
pub(crate) fn workspace_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

/// The cargo command that builds binary `name` of package `name` into `profile_dir`
/// (target/debug, target/release or target/PROFILE).
fn build_command(name: &str, profile_dir: &Path) -> String {
    let profile = match profile_dir.file_name().and_then(|p| p.to_str()) {
        Some("debug") | None => String::new(),
        Some("release") => " --release".to_string(),
        Some(other) => format!(" --profile {other}"),
    };
    format!("cargo build -p {name} --bin {name}{profile}")
}

/// A source file of the package in `package_dir` (its `src/` and `build.rs`) or of a workspace
/// package it depends on, transitively, that was modified after `bin`: a file cargo would
/// rebuild `bin` for. `None` when `bin` is newer than all of them, or when its time or the
/// package cannot be read (nothing to compare with: the caller's own checks decide).
///
/// Modification times, not contents, as cargo's own freshness check uses them: a file that
/// was only touched makes cargo rebuild too. Manifests are left out: cargo compares their
/// contents, not their times, so a touched `Cargo.toml` would be refused here and never rebuilt.
/// Cheap: a few hundred `stat` calls.
///
/// Where cargo left the binary's dep-info file (`bin` with `.d`, the source files rustc read
/// to build it), only those files count: a file that only a test build reads (a
/// `#[cfg(test)] #[path = ...] mod tests;`) never makes the binary stale, since cargo would
/// not rebuild it for that.
pub fn stale_binary(bin: &Path, package_dir: &Path) -> Option<PathBuf> {
    let built = std::fs::metadata(bin).and_then(|m| m.modified()).ok()?;
    let newer_than_built = |f: &PathBuf| {
        std::fs::metadata(f)
            .and_then(|m| m.modified())
            .is_ok_and(|t| t > built)
    };
    if let Ok(dep_info) = std::fs::read_to_string(bin.with_extension("d")) {
        return dep_info_sources(&dep_info)
            .into_iter()
            .find(newer_than_built);
    }
    let crates = package_dir.parent()?;
    let mut seen = Vec::new();
    let mut todo = vec![package_dir.to_path_buf()];
    while let Some(dir) = todo.pop() {
        if seen.contains(&dir) {
            continue;
        }
        let Ok(manifest) = std::fs::read_to_string(dir.join("Cargo.toml")) else {
            continue;
        };
        todo.extend(
            workspace_dependencies(&manifest)
                .into_iter()
                .map(|d| crates.join(d))
                .filter(|d| d.join("Cargo.toml").is_file()),
        );
        let mut files = vec![dir.join("build.rs")];
        collect_files(&dir.join("src"), &mut files);
        let newer = files.into_iter().find(newer_than_built);
        if newer.is_some() {
            return newer;
        }
        seen.push(dir);
    }
    None
}

/// The files a cargo dep-info file (`target: a.rs b\\ c.rs ...`, one line per target, Make's
/// syntax with spaces escaped) names as the first target's inputs.
fn dep_info_sources(dep_info: &str) -> Vec<PathBuf> {
    let Some(line) = dep_info.lines().next() else {
        return Vec::new();
    };
    // The target ends at the first unescaped ": ".
    let Some(colon) = line.find(": ") else {
        return Vec::new();
    };
    let mut files = Vec::new();
    let mut current = String::new();
    let mut chars = line[colon + 2..].chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => current.extend(chars.next()),
            ' ' => {
                if !current.is_empty() {
                    files.push(PathBuf::from(std::mem::take(&mut current)));
                }
            }
            c => current.push(c),
        }
    }
    if !current.is_empty() {
        files.push(PathBuf::from(current));
    }
    files
}

/// The names in a manifest's `[dependencies]` and `[build-dependencies]` tables (what the
/// binary is built from; dev-dependencies are not), as written: `echolab-core.workspace =
/// true` and `echolab-core = { path = ... }` both give `echolab-core`.
fn workspace_dependencies(manifest: &str) -> Vec<String> {
    let mut in_deps = false;
    let mut names = Vec::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_deps = line == "[dependencies]" || line == "[build-dependencies]";
        } else if in_deps {
            if let Some(name) = line.split(['.', '=', ' ']).next().filter(|n| !n.is_empty()) {
                names.push(name.to_string());
            }
        }
    }
    names
}

/// Every file under `dir`, recursively, appended to `out`; nothing when `dir` is missing.
fn collect_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let path = entry.path();
        if path.is_dir() {
            collect_files(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// A running `echo-server` child process; killed (SIGKILL) and reaped on drop.
pub struct ServerProcess {
    /// The address it listens on (from its readiness line).
    pub addr: SocketAddr,
    child: Option<Child>,
    /// Stdout lines as the reader thread gets them; `None` once stdout reached EOF.
    stdout_lines: mpsc::Receiver<Option<String>>,
    /// The stdout lines taken from `stdout_lines` so far.
    stdout_seen: Vec<String>,
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

    /// User plus system CPU time the server has used so far, seconds (proc(5): fields 14 and
    /// 15 of /proc/PID/stat, in clock ticks); `None` once stopped or where /proc cannot be
    /// read.
    pub fn cpu_seconds(&self) -> Option<f64> {
        process_cpu_seconds(self.child.as_ref()?.id())
    }

    /// Like [`ServerProcess::spawn`] for a prepared command (environment, pre_exec, ...).
    /// The server dies with the thread that started it ([`dies_with_parent`]).
    pub fn spawn_with(cmd: &mut Command) -> Self {
        let mut child = dies_with_parent(cmd)
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
        let stdout = child.stdout.take().expect("stdout is piped");
        let (line_tx, stdout_lines) = mpsc::channel();
        // Stdout too is drained all along, so --stats-interval lines never fill the pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = line_tx.send(Some(line));
            }
            let _ = line_tx.send(None);
        });
        let mut me = Self {
            addr: ([0, 0, 0, 0], 0).into(),
            child: Some(child),
            stdout_lines,
            stdout_seen: Vec::new(),
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

    /// The next line the server prints on stdout, waiting up to `limit`; `None` when none came
    /// in time or stdout is closed.
    pub fn next_stdout_line(&mut self, limit: Duration) -> Option<String> {
        let line = self.stdout_lines.recv_timeout(limit).ok().flatten()?;
        self.stdout_seen.push(line.clone());
        Some(line)
    }

    /// Sends SIGTERM, waits for exit, and returns the exit code with the final [`ServerStats`]
    /// line the server printed on stdout (and every line before it, raw).
    ///
    /// # Panics
    /// If the server does not exit within [`READY_DEADLINE`] or prints no final stats line.
    pub fn stop(self) -> (i32, ServerStats, String) {
        self.stop_with(libc::SIGTERM)
    }

    /// Like [`ServerProcess::stop`] with `signal` (e.g. `libc::SIGINT`) instead of SIGTERM.
    pub fn stop_with(mut self, signal: libc::c_int) -> (i32, ServerStats, String) {
        let mut child = self.child.take().expect("not stopped twice");
        // SAFETY: kill(2) with a pid we own and a valid signal number has no memory effects.
        unsafe { libc::kill(child.id() as libc::pid_t, signal) };
        // stdout reaches EOF when the server exits; a server that hangs fails this wait.
        let deadline = std::time::Instant::now() + READY_DEADLINE;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.stdout_lines.recv_timeout(left) {
                Ok(Some(line)) => self.stdout_seen.push(line),
                Ok(None) | Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("server did not exit within {READY_DEADLINE:?} of signal {signal}");
                }
            }
        }
        let status = child.wait().expect("wait for server");
        let mut out = self.stdout_seen.join("\n");
        out.push('\n');
        let last = self
            .stdout_seen
            .iter()
            .rev()
            .find_map(|l| {
                serde_json::from_str::<ServerStats>(l)
                    .ok()
                    .filter(|s| s.is_final)
            })
            .unwrap_or_else(|| {
                panic!(
                    "no final stats line on stdout:\n{out}\nstderr:\n{}",
                    self.stderr()
                )
            });
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

/// User plus system CPU time process `pid` has used so far, seconds (proc(5): fields 14 and
/// 15 of /proc/PID/stat, in clock ticks); `None` once it is gone or where /proc cannot be
/// read.
pub fn process_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; the fields after its ')' are fixed.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // SAFETY: sysconf(3) with a constant name has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some((f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?) / ticks)
}

/// Starts the workspace's `echo-server` on an ephemeral loopback port with `--model model` and
/// the extra `args`, and waits until it is listening.
pub fn spawn_echo_server(model: &str, args: &[&str]) -> ServerProcess {
    let bin = workspace_bin("echo-server");
    let mut all = vec!["--model", model, "--port", "0", "--bind", "127.0.0.1"];
    all.extend_from_slice(args);
    ServerProcess::spawn(&bin, &all)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    #[test]
    fn a_child_dies_with_the_thread_that_started_it() {
        use std::os::unix::process::ExitStatusExt as _;
        let mut child = std::thread::spawn(|| {
            dies_with_parent(Command::new("sleep").arg("30"))
                .spawn()
                .unwrap()
        })
        .join()
        .unwrap();
        // The starting thread has ended, so the kernel has sent (or is sending) SIGKILL;
        // without it, wait() would return after 30 s with exit 0.
        let t = std::time::Instant::now();
        let status = child.wait().unwrap();
        assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
        assert!(t.elapsed() < Duration::from_secs(25), "{:?}", t.elapsed());
    }

    fn write_at(path: &Path, text: &str, at: SystemTime) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
        std::fs::File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_modified(at)
            .unwrap();
    }

    #[test]
    fn a_binary_older_than_a_dependency_source_is_stale() {
        let root =
            std::env::temp_dir().join(format!("echolab-testkit-stale-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let t0 = SystemTime::now() - Duration::from_secs(3600);
        let (before, built, after) = (
            t0,
            t0 + Duration::from_secs(60),
            t0 + Duration::from_secs(120),
        );
        let crates = root.join("crates");
        let app_manifest = "[package]\nname = \"app\"\n\n[dependencies]\nlib.workspace = true\nserde = \"1\"\n\n[dev-dependencies]\ntestonly = { path = \"../testonly\" }\n";
        for (file, text, at) in [
            ("app/Cargo.toml", app_manifest, before),
            ("app/src/main.rs", "fn main() {}", before),
            ("lib/Cargo.toml", "[package]\nname = \"lib\"\n", before),
            ("lib/src/deep/mod.rs", "", before),
            (
                "testonly/Cargo.toml",
                "[package]\nname = \"testonly\"\n",
                before,
            ),
            ("testonly/src/lib.rs", "", after),
        ] {
            write_at(&crates.join(file), text, at);
        }
        // A touched manifest: cargo compares manifests by content, so it would not rebuild.
        write_at(&crates.join("app/Cargo.toml"), app_manifest, after);
        let bin = root.join("target/debug/app");
        write_at(&bin, "binary", built);
        // Only a dev-dependency and a manifest's time changed since the build.
        assert_eq!(stale_binary(&bin, &crates.join("app")), None);
        // A source of a dependency, deep in its tree, changed since.
        write_at(&crates.join("lib/src/deep/mod.rs"), "pub fn f() {}", after);
        assert_eq!(
            stale_binary(&bin, &crates.join("app")),
            Some(crates.join("lib/src/deep/mod.rs"))
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_dep_info_file_decides_which_sources_count() {
        let root =
            std::env::temp_dir().join(format!("echolab-testkit-depinfo-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let t0 = SystemTime::now() - Duration::from_secs(3600);
        let (built, after) = (t0 + Duration::from_secs(60), t0 + Duration::from_secs(120));
        let read = root.join("src/main.rs");
        let spaced = root.join("src/with space.rs");
        let test_only = root.join("src/main_tests.rs");
        for f in [&read, &spaced] {
            write_at(f, "", t0);
        }
        // Only a test build reads this one; it changed after the binary was built.
        write_at(&test_only, "", after);
        let bin = root.join("target/debug/app");
        write_at(&bin, "binary", built);
        let dep_info = format!(
            "{}: {} {}\n",
            bin.display(),
            read.display(),
            spaced.display().to_string().replace(' ', "\\ ")
        );
        write_at(&bin.with_extension("d"), &dep_info, built);
        assert_eq!(
            dep_info_sources(&dep_info),
            vec![read.clone(), spaced.clone()]
        );
        assert_eq!(stale_binary(&bin, &root), None);
        write_at(&spaced, "fn f() {}", after);
        assert_eq!(stale_binary(&bin, &root), Some(spaced));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_rebuild_command_names_the_profile() {
        assert_eq!(
            build_command("echo-server", Path::new("/t/debug")),
            "cargo build -p echo-server --bin echo-server"
        );
        assert_eq!(
            build_command("echo-bench", Path::new("/t/release")),
            "cargo build -p echo-bench --bin echo-bench --release"
        );
        assert_eq!(
            build_command("echo-bench", Path::new("/t/bench")),
            "cargo build -p echo-bench --bin echo-bench --profile bench"
        );
    }
}
