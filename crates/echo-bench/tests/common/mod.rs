//! Shared helpers of echo-bench's integration tests: running the binary with a deadline, and
//! small misbehaving servers for fault injection (the real echo-server is used everywhere
//! else).
#![allow(dead_code)] // each test file uses a different subset

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use echolab_core::stats::BenchReport;

/// Upper bound for one echo-bench run in a test; generous for a loaded 2-core machine. A run
/// that exceeds it is killed and the test fails (echo-bench must never hang).
pub(crate) const RUN_DEADLINE: Duration = Duration::from_secs(120);

/// Runs echo-bench with `args` (and `prepare` applied to the command), killing it after
/// [`RUN_DEADLINE`].
pub(crate) fn run_with(args: &[&str], prepare: impl FnOnce(&mut Command)) -> (Output, Duration) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_echo-bench"));
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    prepare(&mut cmd);
    let t0 = Instant::now();
    let child = cmd.spawn().expect("echo-bench starts");
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(RUN_DEADLINE) {
        Ok(out) => (out.expect("wait for echo-bench"), t0.elapsed()),
        Err(_) => {
            // SAFETY: kill(2) on the pid of our own child, which has not been reaped yet
            // (the waiting thread has not returned), so the pid cannot have been reused.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            panic!("echo-bench {args:?} did not finish within {RUN_DEADLINE:?}");
        }
    }
}

/// User plus system CPU seconds of every child this test process has reaped so far
/// (getrusage(2), RUSAGE_CHILDREN): the difference around one [`run`] is that echo-bench's whole
/// CPU time, measured from outside it.
pub(crate) fn reaped_children_cpu_s() -> f64 {
    // SAFETY: getrusage(2) only writes the rusage struct it is given, which we own.
    let ru = unsafe {
        let mut ru = std::mem::zeroed::<libc::rusage>();
        assert_eq!(libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru), 0);
        ru
    };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    s(ru.ru_utime) + s(ru.ru_stime)
}

/// Runs echo-bench with `args`.
pub(crate) fn run(args: &[&str]) -> (Output, Duration) {
    run_with(args, |_| {})
}

/// Runs echo-bench with `args` plus `--json` and returns the parsed report, holding every run
/// to the contract of a report: exit 0 when a request succeeded; when none did, exit 1, no
/// latency (`null`, never 0 µs) and one line on stderr saying so.
pub(crate) fn report(args: &[&str]) -> BenchReport {
    let mut all = args.to_vec();
    all.push("--json");
    let (out, _) = run(&all);
    checked_report(&all, &out)
}

/// The report of a `--json` run `all` that gave `out`, held to the contract [`report`] states.
pub(crate) fn checked_report(all: &[&str], out: &Output) -> BenchReport {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let r: BenchReport = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("not a BenchReport ({e}):\n{stdout}\nstderr:\n{stderr}"));
    if r.requests_ok > 0 {
        assert!(
            out.status.success(),
            "echo-bench {all:?} exited {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
            out.status
        );
    } else {
        assert_eq!(
            out.status.code(),
            Some(1),
            "nothing succeeded: {all:?}\n{stderr}"
        );
        assert!(
            stdout.contains("\"latency_us\": null") && r.latency_us.is_none(),
            "nothing succeeded, so no latency: {stdout}"
        );
        assert!(stderr.contains("no request succeeded"), "{stderr}");
    }
    r
}

/// Count of `name` in a report's syscall table (0 when absent).
pub(crate) fn calls(r: &BenchReport, name: &str) -> u64 {
    r.syscalls.get(name).map_or(0, |s| s.count)
}

/// Failures of `kind` in a report (0 when absent).
pub(crate) fn failures(r: &BenchReport, kind: &str) -> u64 {
    r.failures.get(kind).copied().unwrap_or(0)
}

/// Gap between the bytes of [`FaultyServer::trickler`]'s replies.
pub(crate) const TRICKLE_GAP: Duration = Duration::from_millis(400);

/// Gap between the two writes of [`FaultyServer::overrunner`]'s replies: long enough for the
/// client to read the first one alone.
pub(crate) const SPLIT_GAP: Duration = Duration::from_millis(30);

/// What [`FaultyServer::overrunner`] sends after each reply.
pub(crate) const OVERRUN: &[u8] = b"XXXXX";

/// A misbehaving TCP server on 127.0.0.1: every connection gets its own thread running
/// `serve`. Stopped (listener closed, threads joined) on drop.
pub(crate) struct FaultyServer {
    /// The port it listens on.
    pub port: u16,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl FaultyServer {
    /// Starts a server whose connections run `serve` (a function, or a closure over what the
    /// test observes or controls).
    pub(crate) fn start(serve: impl Fn(TcpStream) + Send + Clone + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let acceptor = std::thread::spawn(move || {
            let mut conns = Vec::new();
            for stream in listener.incoming() {
                if flag.load(Ordering::SeqCst) {
                    break;
                }
                if let Ok(s) = stream {
                    let serve = serve.clone();
                    conns.push(std::thread::spawn(move || serve(s)));
                }
            }
            // Connection threads end when their client closes; echo-bench closes everything.
            for c in conns {
                let _ = c.join();
            }
        });
        Self {
            port,
            stop,
            acceptor: Some(acceptor),
        }
    }

    /// An echo server that flips one bit of the first byte of every chunk it echoes.
    pub(crate) fn bit_flipper() -> Self {
        Self::start(|mut s| {
            let mut buf = [0u8; 4096];
            while let Ok(n) = s.read(&mut buf) {
                if n == 0 {
                    break;
                }
                buf[0] ^= 0x20;
                if s.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        })
    }

    /// An echo server that answers each chunk one byte at a time, [`TRICKLE_GAP`] apart: a
    /// reply that keeps coming, but slower than any request timeout of a test.
    pub(crate) fn trickler() -> Self {
        Self::start(|mut s| {
            let mut buf = [0u8; 4096];
            while let Ok(n) = s.read(&mut buf) {
                if n == 0 {
                    break;
                }
                for b in &buf[..n] {
                    std::thread::sleep(TRICKLE_GAP);
                    if s.write_all(std::slice::from_ref(b)).is_err() {
                        return;
                    }
                }
            }
        })
    }

    /// An echo server that answers each chunk in two writes, [`SPLIT_GAP`] apart, the second
    /// followed by [`OVERRUN`]: the client reads the first half on its own, and the bytes
    /// after the reply are in its socket before it asks for the rest.
    pub(crate) fn overrunner() -> Self {
        Self::start(|mut s| {
            let mut buf = [0u8; 4096];
            while let Ok(n) = s.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let half = n / 2;
                if s.write_all(&buf[..half]).is_err() {
                    break;
                }
                std::thread::sleep(SPLIT_GAP);
                let rest = [&buf[half..n], OVERRUN].concat();
                if s.write_all(&rest).is_err() {
                    break;
                }
            }
        })
    }

    /// A server that reads the first request and closes without answering: the client sees
    /// end of stream (FIN), not a reset, because nothing it sent is left unread.
    pub(crate) fn closer() -> Self {
        Self::start(|mut s| {
            let mut buf = [0u8; 12];
            let _ = s.read_exact(&mut buf);
        })
    }

    /// An echo server that pairs its connections in the order it accepts them and answers
    /// each 12-byte request of a pair with the other one's: every byte comes back, to the
    /// wrong connection, as from a server that mixes up its connections' buffers. A pair ends
    /// when either of its connections does; the next two connections make the next pair.
    pub(crate) fn swapper() -> Self {
        let waiting: Arc<Mutex<Option<TcpStream>>> = Arc::default();
        Self::start(move |s| {
            let mut a = {
                let mut slot = waiting.lock().unwrap();
                match slot.take() {
                    Some(first) => first,
                    None => {
                        *slot = Some(s);
                        return;
                    }
                }
            };
            let mut b = s;
            let (mut from_a, mut from_b) = ([0u8; 12], [0u8; 12]);
            while a.read_exact(&mut from_a).is_ok() && b.read_exact(&mut from_b).is_ok() {
                if a.write_all(&from_b).is_err() || b.write_all(&from_a).is_err() {
                    break;
                }
            }
        })
    }

    /// An echo server that answers each 12-byte request of a connection with that
    /// connection's previous one (the first with itself): a stale echo.
    pub(crate) fn replayer() -> Self {
        Self::start(|mut s| {
            let mut previous = None;
            let mut request = [0u8; 12];
            while s.read_exact(&mut request).is_ok() {
                let reply = previous.unwrap_or(request);
                previous = Some(request);
                if s.write_all(&reply).is_err() {
                    break;
                }
            }
        })
    }

    /// A server that reads everything and never answers.
    pub(crate) fn mute() -> Self {
        Self::start(|mut s| {
            let mut buf = [0u8; 4096];
            while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
        })
    }
}

impl Drop for FaultyServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept so the acceptor sees the flag.
        if let Ok(s) = TcpStream::connect(("127.0.0.1", self.port)) {
            let _ = s.shutdown(Shutdown::Both);
        }
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
    }
}

/// Runs `f` on a thread of its own inside a fresh network namespace with `lo` up. Processes
/// that thread spawns are born in that namespace (namespaces belong to the thread, and a
/// child inherits its creator's).
pub(crate) fn in_fresh_netns<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(move || {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET)
            .expect("unshare(CLONE_NEWNET): these tests run as root, as the README says");
        let up = Command::new("ip")
            .args(["link", "set", "lo", "up"])
            .status()
            .expect("run `ip` (iproute2)");
        assert!(up.success(), "ip link set lo up: {up}");
        f()
    })
    .join()
    .expect("namespace thread")
}

/// A loopback port on which nothing listens (bound once, then released).
pub(crate) fn closed_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    l.local_addr().unwrap().port()
}

/// Local address and port of each client-side TIME_WAIT socket towards 127.0.0.1:`port` in
/// the calling thread's network namespace, from /proc/thread-self/net/tcp (proc(5): state 06
/// is TIME_WAIT; addresses are hex, IPv4 in host byte order). /proc/net would be the main
/// thread's namespace.
///
/// A client socket enters TIME_WAIT only when the server's FIN arrives, which can be after
/// echo-bench has exited if the server has not yet been scheduled to close its side (seen in
/// CI: 99 of 100). So this first waits, up to 10 s, until no client-side socket towards
/// `port` is still closing (FIN_WAIT1 04, FIN_WAIT2 05, CLOSING 0B), and panics with the
/// states it saw if that never happens.
pub(crate) fn time_wait_sockets(port: u16) -> std::collections::BTreeSet<(std::net::IpAddr, u16)> {
    const TIME_WAIT: &str = "06";
    const CLOSING: [&str; 3] = ["04", "05", "0B"];
    let remote = format!("0100007F:{port:04X}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let table = std::fs::read_to_string("/proc/thread-self/net/tcp")
            .expect("read /proc/thread-self/net/tcp");
        // (local address, state) of each client-side socket towards the port.
        let towards: Vec<(String, String)> = table
            .lines()
            .skip(1)
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() > 3 && f[2] == remote).then(|| (f[1].to_string(), f[3].to_string()))
            })
            .collect();
        let closing: Vec<&(String, String)> = towards
            .iter()
            .filter(|(_, st)| CLOSING.contains(&st.as_str()))
            .collect();
        if !closing.is_empty() {
            assert!(
                Instant::now() < deadline,
                "client sockets towards port {port} still closing after 10 s: {closing:?}"
            );
            std::thread::sleep(Duration::from_millis(5));
            continue;
        }
        return towards
            .iter()
            .filter(|(_, st)| st == TIME_WAIT)
            .map(|(local, _)| {
                let (ip, local_port) = local.split_once(':').expect("ADDR:PORT");
                let ip = u32::from_str_radix(ip, 16).expect("hex address");
                (
                    std::net::IpAddr::V4(std::net::Ipv4Addr::from(ip.swap_bytes())),
                    u16::from_str_radix(local_port, 16).expect("hex port"),
                )
            })
            .collect();
    }
}

/// How many [`time_wait_sockets`] there are towards `port`.
pub(crate) fn time_wait_towards(port: u16) -> usize {
    time_wait_sockets(port).len()
}
