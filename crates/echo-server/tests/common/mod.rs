//! Helpers shared by echo-server's integration tests: spawning with a descriptor limit, reading
//! a server's CPU time, descriptors, memory and TCP states from /proc. A condition is waited for
//! with the testkit's `wait_until` (never a bare sleep where a readiness check belongs).
#![allow(dead_code)] // each test binary uses a different subset

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt as _;
use std::process::Command;
use std::time::Duration;

use echolab_testkit::{workspace_bin, ServerProcess};

/// Every model `--model` accepts, as typed on the command line: the names of
/// `echolab_core::cmd::ServerModel`, which experiments are checked against too.
pub(crate) const ALL_MODELS: &[&str] = &echolab_core::cmd::ServerModel::NAMES;

/// The readiness models (built on `readiness::`): for these the tests also check the syscall and
/// error counters in detail, because their counting rules are known exactly.
pub(crate) const READINESS_MODELS: &[&str] = &[
    "select",
    "poll",
    "epoll-lt",
    "epoll-et",
    "prefork",
    "reuseport",
];

/// Generous deadline for anything a healthy server does in milliseconds: the machine has two
/// cores shared with other engineers' builds and tests.
pub(crate) const DEADLINE: Duration = Duration::from_secs(30);

/// Whether `model` is one of [`READINESS_MODELS`].
pub(crate) fn is_readiness(model: &str) -> bool {
    READINESS_MODELS.contains(&model)
}

/// Starts echo-server `model` with `args` on an ephemeral loopback port, its RLIMIT_NOFILE set
/// to `nofile` (soft and hard) before exec; the server inherits nothing else from the test.
pub(crate) fn spawn_with_nofile(model: &str, args: &[&str], nofile: u64) -> ServerProcess {
    let mut cmd = Command::new(workspace_bin("echo-server"));
    cmd.args(["--model", model, "--port", "0", "--bind", "127.0.0.1"])
        .args(args);
    let limit = libc::rlimit {
        rlim_cur: nofile as libc::rlim_t,
        rlim_max: nofile as libc::rlim_t,
    };
    // SAFETY: the closure runs in the forked child before exec and only calls setrlimit(2), a
    // plain system call (async-signal-safe, no allocation, no lock) on a struct it owns.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    ServerProcess::spawn_with(&mut cmd)
}

/// Raises this test process's RLIMIT_NOFILE soft limit to its hard limit (20000 here) so that a
/// test can hold more than 1024 client sockets.
pub(crate) fn raise_own_nofile() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write only the struct passed by pointer.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        lim.rlim_cur = lim.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
    }
}

/// `pid` and all its descendants (prefork's children), from /proc/PID/task/*/children.
pub(crate) fn process_tree(pid: u32) -> Vec<u32> {
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        if let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) {
            for t in tasks.flatten() {
                let kids = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
                out.extend(
                    kids.split_whitespace()
                        .filter_map(|k| k.parse::<u32>().ok()),
                );
            }
        }
        i += 1;
    }
    out
}

/// CPU seconds (user + system, all threads) used so far by `pid` and its descendants, from
/// fields 14 and 15 of /proc/PID/stat (proc(5)), in clock ticks of sysconf(_SC_CLK_TCK).
pub(crate) fn tree_cpu_seconds(pid: u32) -> f64 {
    // SAFETY: sysconf only reads a configuration value.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    process_tree(pid)
        .into_iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/stat")).ok())
        .map(|stat| {
            // The command name may contain spaces; fields are counted after its closing ')'.
            let rest = &stat[stat.rfind(')').map_or(0, |i| i + 2)..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            let utime: f64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0);
            let stime: f64 = f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
            (utime + stime) / ticks
        })
        .sum()
}

/// CPU seconds the server tree uses during `window` (a measurement interval, not a wait).
pub(crate) fn cpu_during(pid: u32, window: Duration) -> f64 {
    let before = tree_cpu_seconds(pid);
    std::thread::sleep(window);
    tree_cpu_seconds(pid) - before
}

/// Open descriptors of each process in `pid`'s tree.
pub(crate) fn tree_fd_counts(pid: u32) -> Vec<usize> {
    process_tree(pid)
        .into_iter()
        .map(|p| std::fs::read_dir(format!("/proc/{p}/fd")).map_or(0, |d| d.count()))
        .collect()
}

/// Sum of RssAnon (resident anonymous memory, KiB: heap and stacks, not the binary's pages that
/// a process faults in as it runs more code) over `pid`'s tree, from /proc/PID/status.
pub(crate) fn tree_rss_anon_kib(pid: u32) -> u64 {
    process_tree(pid)
        .into_iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/status")).ok())
        .filter_map(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("RssAnon:"))
                .and_then(|v| {
                    v.split_whitespace()
                        .next()
                        .and_then(|n| n.parse::<u64>().ok())
                })
        })
        .sum()
}

/// TCP sockets in CLOSE_WAIT (state 08, include/net/tcp_states.h) whose local port is `port`,
/// from /proc/net/tcp and /proc/net/tcp6.
pub(crate) fn close_wait_count(port: u16) -> usize {
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|t| t.lines().skip(1).map(str::to_owned).collect::<Vec<_>>())
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let local_port = f
                .get(1)
                .and_then(|a| a.rsplit(':').next())
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            local_port == Some(port) && f.get(3) == Some(&"08")
        })
        .count()
}

/// Connects to `addr` with read and write timeouts of [`DEADLINE`] (a hung server fails the
/// test instead of hanging it).
pub(crate) fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    s.set_write_timeout(Some(DEADLINE)).unwrap();
    s
}

/// Sends `msg` and reads back exactly as many bytes; returns them.
pub(crate) fn round_trip(s: &mut TcpStream, msg: &[u8]) -> std::io::Result<Vec<u8>> {
    s.write_all(msg)?;
    let mut back = vec![0; msg.len()];
    s.read_exact(&mut back)?;
    Ok(back)
}

/// A byte pattern with period 251 (prime), so that a lost, repeated or reordered block of any
/// power-of-two size changes the bytes at its position.
pub(crate) fn pattern(offset: usize, len: usize) -> Vec<u8> {
    (offset..offset + len).map(|i| (i % 251) as u8).collect()
}

/// Count of error kind `kind` in a stats line (0 when absent).
pub(crate) fn errors(stats: &echolab_core::stats::ServerStats, kind: &str) -> u64 {
    stats.totals.errors.get(kind).copied().unwrap_or(0)
}

/// Count of system call `name` in a stats line (0 when absent).
pub(crate) fn syscalls(stats: &echolab_core::stats::ServerStats, name: &str) -> u64 {
    stats.totals.syscalls.get(name).map_or(0, |s| s.count)
}

/// Stops `server` (SIGTERM) and returns its final stats, asserting the clean exit status 0.
pub(crate) fn stop_ok(server: ServerProcess) -> echolab_core::stats::ServerStats {
    let (code, stats, _) = server.stop();
    assert_eq!(code, 0, "server exit status after SIGTERM");
    stats
}
