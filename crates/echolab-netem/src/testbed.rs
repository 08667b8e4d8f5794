//! Throwaway network namespaces for tests and measurements: client, link and server joined by
//! veth pairs, the link topology (docs/architecture.md, "Topologies") on one machine. Needs
//! root and iproute2's `ip`.
//!
//! ```text
//!  <tag>-cli: eth0 10.201.1.2/24 ── cs 10.201.1.1/24 :<tag>-lnk: ss 10.201.2.1/24 ── eth0 10.201.2.2/24 :<tag>-srv
//! ```
//! The addresses exist only inside these namespaces. [`Testbed`]'s `Drop` kills what still runs
//! in them and deletes them, also when a test panics.

use std::io::{self, BufRead, BufReader};
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::process::{Child, ChildStderr, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Client address.
pub const CLIENT_ADDR: Ipv4Addr = Ipv4Addr::new(10, 201, 1, 2);
/// Server address.
pub const SERVER_ADDR: Ipv4Addr = Ipv4Addr::new(10, 201, 2, 2);
/// Link host's device facing the client.
pub const LINK_CLIENT_SIDE: &str = "cs";
/// Link host's device facing the server.
pub const LINK_SERVER_SIDE: &str = "ss";

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// Three namespaces joined by two veth pairs, deleted on drop.
pub struct Testbed {
    /// Client namespace name.
    pub cli: String,
    /// Link namespace name.
    pub lnk: String,
    /// Server namespace name.
    pub srv: String,
    created: Vec<String>,
}

fn run(args: &[&str]) -> io::Result<()> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

impl Testbed {
    /// Creates the namespaces, named `elab-<pid>-<n>-{cli,lnk,srv}`, with addresses, default
    /// routes via the link, and `ip_forward` on in the link namespace (as the launcher sets it
    /// when it creates the link container). The wire sets rp_filter itself.
    ///
    /// First deletes the namespaces of testbeds whose process is gone
    /// ([`orphaned_namespaces`]), so a killed test leaks them only until the next testbed.
    ///
    /// # Errors
    /// Any `ip` command failed (not root, no iproute2); what was created is deleted.
    pub fn new() -> io::Result<Self> {
        for ns in orphaned_namespaces(std::path::Path::new("/run/netns")) {
            delete_namespace(&ns);
        }
        let tag = format!(
            "elab-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        );
        let mut tb = Self {
            cli: format!("{tag}-cli"),
            lnk: format!("{tag}-lnk"),
            srv: format!("{tag}-srv"),
            created: Vec::new(),
        };
        for ns in [tb.cli.clone(), tb.lnk.clone(), tb.srv.clone()] {
            run(&["netns", "add", &ns])?;
            tb.created.push(ns.clone());
            run(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        let (cli, lnk, srv) = (tb.cli.as_str(), tb.lnk.as_str(), tb.srv.as_str());
        run(&[
            "link",
            "add",
            "eth0",
            "netns",
            cli,
            "type",
            "veth",
            "peer",
            "name",
            LINK_CLIENT_SIDE,
            "netns",
            lnk,
        ])?;
        run(&[
            "link",
            "add",
            "eth0",
            "netns",
            srv,
            "type",
            "veth",
            "peer",
            "name",
            LINK_SERVER_SIDE,
            "netns",
            lnk,
        ])?;
        let cfg: [(&str, &str, &str); 4] = [
            (cli, "eth0", "10.201.1.2/24"),
            (lnk, LINK_CLIENT_SIDE, "10.201.1.1/24"),
            (lnk, LINK_SERVER_SIDE, "10.201.2.1/24"),
            (srv, "eth0", "10.201.2.2/24"),
        ];
        for (ns, dev, addr) in cfg {
            run(&["-n", ns, "addr", "add", addr, "dev", dev])?;
            run(&["-n", ns, "link", "set", dev, "up"])?;
        }
        run(&["-n", cli, "route", "add", "default", "via", "10.201.1.1"])?;
        run(&["-n", srv, "route", "add", "default", "via", "10.201.2.1"])?;
        tb.sysctl(lnk, "net.ipv4.ip_forward", "1")?;
        Ok(tb)
    }

    /// Sets a sysctl inside namespace `ns`.
    ///
    /// # Errors
    /// The write failed.
    pub fn sysctl(&self, ns: &str, name: &str, value: &str) -> io::Result<()> {
        let path = format!("/proc/sys/{}", name.replace('.', "/"));
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                ns,
                "sh",
                "-c",
                &format!("echo {value} > {path}"),
            ])
            .stdin(Stdio::null())
            .output()?;
        if !out.status.success() {
            return Err(io::Error::other(format!(
                "sysctl {name}={value} in {ns}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(())
    }

    /// A command that runs `program` inside namespace `ns`.
    pub fn command(&self, ns: &str, program: &std::path::Path) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns])
            .arg(program)
            .stdin(Stdio::null());
        c
    }

    /// Starts `echolab-netem wire` (binary `bin`) in the link namespace between the two sides,
    /// with `profile` looked up in `profile_dir` and a fixed loss/jitter `seed`, and waits up to
    /// `deadline` for its readiness line.
    ///
    /// # Errors
    /// The wire cannot start, exits, or does not say it is ready in time.
    pub fn start_wire(
        &self,
        bin: &std::path::Path,
        profile_dir: &std::path::Path,
        profile: &str,
        seed: u64,
        deadline: Duration,
    ) -> io::Result<ChildGuard> {
        let mut cmd = self.command(&self.lnk, bin);
        cmd.arg("--profile-dir").arg(profile_dir).args([
            "wire",
            "--profile",
            profile,
            "--client-side",
            LINK_CLIENT_SIDE,
            "--server-side",
            LINK_SERVER_SIDE,
            "--seed",
            &seed.to_string(),
        ]);
        let mut wire = ChildGuard::spawn(cmd)?;
        wire.wait_for_stderr("echolab-netem wire ready", deadline)?;
        Ok(wire)
    }

    /// Runs `f` on a thread that has entered namespace `ns`; sockets it creates stay in `ns`
    /// wherever they are used afterwards.
    ///
    /// # Errors
    /// The namespace cannot be entered.
    pub fn in_netns<T: Send + 'static>(
        &self,
        ns: &str,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> io::Result<T> {
        let file = std::fs::File::open(format!("/var/run/netns/{ns}"))?;
        std::thread::spawn(move || {
            // SAFETY: setns(2) on a namespace file we hold open; it changes only this thread,
            // which ends when `f` returns.
            if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(f())
        })
        .join()
        .map_err(|_| io::Error::other("closure panicked inside the namespace"))?
    }

    /// Runs a command to completion with a deadline.
    ///
    /// # Errors
    /// It did not finish in time (it is killed) or could not start.
    pub fn output_within(mut cmd: Command, deadline: Duration) -> io::Result<Output> {
        let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
        let pid = child.id();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
        match rx.recv_timeout(deadline) {
            Ok(r) => r,
            Err(_) => {
                // SAFETY: kill(2) on the pid of our own child, which has not been reaped (the
                // waiting thread still holds it).
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("command did not finish within {deadline:?}"),
                ))
            }
        }
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        for ns in &self.created {
            delete_namespace(ns);
        }
    }
}

/// Kills what runs in testbed namespace `ns` and deletes it; errors are ignored (it may be
/// gone already).
fn delete_namespace(ns: &str) {
    if let Ok(out) = Command::new("ip").args(["netns", "pids", ns]).output() {
        for pid in String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
        {
            // SAFETY: kill(2) on a process inside a testbed namespace; only the processes of
            // the test or measurement that made it live there.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
    let _ = run(&["netns", "del", ns]);
}

/// The testbed namespaces (`elab-<pid>-<n>-<role>`, named in /run/netns) whose creating
/// process is gone: left behind when a test was killed (SIGKILL, a harness timeout) before
/// its `Drop` ran. A pid that is in use again keeps its namespaces, on the safe side.
fn orphaned_namespaces(netns_dir: &std::path::Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(netns_dir) else {
        return Vec::new();
    };
    let mut orphans: Vec<String> = entries
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| {
            let mut parts = name.splitn(4, '-');
            let (Some("elab"), Some(pid), Some(n), Some(_role)) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                return false;
            };
            let (Ok(pid), Ok(_)) = (pid.parse::<u32>(), n.parse::<u32>()) else {
                return false;
            };
            !std::path::Path::new(&format!("/proc/{pid}")).exists()
        })
        .collect();
    orphans.sort();
    orphans
}

/// Reads `r` line by line on a thread, into a channel.
fn line_reader(r: impl io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// A child process, killed and reaped on drop.
pub struct ChildGuard {
    /// The child; `None` once waited for.
    pub child: Option<Child>,
    lines: Option<mpsc::Receiver<String>>,
    stdout_lines: Option<mpsc::Receiver<String>>,
    /// Every stderr line seen so far, for failure messages.
    pub stderr_seen: Vec<String>,
}

impl ChildGuard {
    /// Spawns `cmd` with piped stdout and stderr; stderr is read line by line on a thread.
    ///
    /// # Errors
    /// The process could not start.
    pub fn spawn(mut cmd: Command) -> io::Result<Self> {
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
        let stderr: ChildStderr = child.stderr.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        Ok(Self {
            child: Some(child),
            lines: Some(line_reader(stderr)),
            stdout_lines: Some(line_reader(stdout)),
            stderr_seen: Vec::new(),
        })
    }

    /// The next stdout line, waiting up to `deadline`.
    ///
    /// # Errors
    /// No line in time, or stdout closed.
    pub fn next_stdout_line(&mut self, deadline: Duration) -> io::Result<String> {
        let rx = self.stdout_lines.as_ref().expect("stdout reader");
        rx.recv_timeout(deadline).map_err(|e| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no stdout line within {deadline:?}: {e}"),
            )
        })
    }

    /// Waits up to `deadline` for a stderr line containing `needle`; returns it.
    ///
    /// # Errors
    /// The deadline passed or the process closed stderr first; the message quotes its stderr.
    pub fn wait_for_stderr(&mut self, needle: &str, deadline: Duration) -> io::Result<String> {
        let end = Instant::now() + deadline;
        let rx = self.lines.as_ref().expect("stderr reader");
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    self.stderr_seen.push(line.clone());
                    if line.contains(needle) {
                        return Ok(line);
                    }
                }
                Err(_) => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                        "no stderr line with {needle:?} within {deadline:?}; stderr so far: {:?}",
                        self.stderr_seen
                    ),
                    ))
                }
            }
        }
    }

    /// Sends `signal` to the child.
    pub fn signal(&self, signal: i32) {
        if let Some(c) = &self.child {
            // SAFETY: kill(2) on our own child's pid; it is not reaped while `child` is Some.
            unsafe { libc::kill(c.id() as i32, signal) };
        }
    }

    /// Sends SIGTERM and collects stdout and exit status, killing the child after `deadline`.
    ///
    /// # Errors
    /// The child did not exit in time.
    pub fn terminate(&mut self, deadline: Duration) -> io::Result<Output> {
        self.signal(libc::SIGTERM);
        let mut child = self.child.take().expect("not yet waited");
        let pid = child.id();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait());
        });
        match rx.recv_timeout(deadline) {
            Ok(status) => {
                // Whatever stdout printed before exit (the final stats) is in the channel.
                let mut stdout = Vec::new();
                if let Some(lines) = self.stdout_lines.take() {
                    while let Ok(line) = lines.recv_timeout(deadline) {
                        stdout.extend_from_slice(line.as_bytes());
                        stdout.push(b'\n');
                    }
                }
                Ok(Output {
                    status: status?,
                    stdout,
                    stderr: self.stderr_seen.join("\n").into_bytes(),
                })
            }
            Err(_) => {
                // SAFETY: kill(2) on our unreaped child (the waiting thread holds it).
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("child {pid} ignored SIGTERM for {deadline:?}"),
                ))
            }
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pid no process has: that of a child that has exited and been reaped.
    fn dead_pid() -> u32 {
        let mut child = Command::new("true").spawn().expect("spawn true");
        let pid = child.id();
        child.wait().expect("wait");
        pid
    }

    #[test]
    fn only_testbed_namespaces_of_gone_processes_are_orphans() {
        let dir = std::env::temp_dir().join(format!("elab-orphans-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (dead, alive) = (dead_pid(), std::process::id());
        let names = [
            format!("elab-{dead}-0-cli"),
            format!("elab-{dead}-12-srv"),
            format!("elab-{alive}-3-lnk"),
            format!("elab-{dead}-0"),
            format!("elab-x{dead}-0-cli"),
            format!("other-{dead}-0-cli"),
        ];
        for n in &names {
            std::fs::write(dir.join(n), "").unwrap();
        }
        let found = orphaned_namespaces(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(found, vec![names[0].clone(), names[1].clone()]);
        assert!(
            orphaned_namespaces(&dir).is_empty(),
            "no directory, no orphans"
        );
    }
}
