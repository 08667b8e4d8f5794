//! SIGINT (Ctrl-C) and SIGTERM during a run: the first signal ends the measurement window,
//! echo-bench prints the report of what it measured, marked interrupted, and exits with
//! 128 + the signal's number; a second signal exits at once. Each test starts a run of 30 s,
//! waits until the server has echoed requests of it (the window is open), and signals it.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use common::FaultyServer;
use echolab_core::protocol;
use echolab_core::stats::BenchReport;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// How long an interrupted run may take to report: a worker notices the signal within one
/// deadline sweep (at most 100 ms) and drains within the replies of an echo server; the rest
/// is slack for a loaded 2-core machine. Far below the 30 s the runs ask for.
const REPORT_WITHIN: Duration = Duration::from_secs(10);

/// How long the server may take to echo the first requests of a run.
const READY_WITHIN: Duration = Duration::from_secs(60);

/// An echo server on 127.0.0.1 that counts the chunks it answered and, once `stall` is set,
/// reads without answering, counting the chunks it holds.
struct CountingEcho {
    server: FaultyServer,
    echoed: Arc<AtomicU64>,
    stall: Arc<AtomicBool>,
    held: Arc<AtomicU64>,
}

impl CountingEcho {
    /// Echoes what it reads.
    fn start() -> Self {
        Self::answering(None)
    }

    /// With `reply`, answers each request (up to its [`protocol::REQUEST_END`]) with it, as
    /// `echo-server --reply-bytes` does; else echoes.
    fn answering(reply: Option<Vec<u8>>) -> Self {
        let echoed = Arc::new(AtomicU64::new(0));
        let stall = Arc::new(AtomicBool::new(false));
        let held = Arc::new(AtomicU64::new(0));
        let (count, hold, holding) = (Arc::clone(&echoed), Arc::clone(&stall), Arc::clone(&held));
        let server = FaultyServer::start(move |mut s: TcpStream| {
            let mut buf = [0u8; 4096];
            while let Ok(n) = s.read(&mut buf) {
                if n == 0 {
                    break;
                }
                if hold.load(Ordering::SeqCst) {
                    holding.fetch_add(1, Ordering::SeqCst);
                    continue;
                }
                let answer = match &reply {
                    None => buf[..n].to_vec(),
                    Some(body) => {
                        let requests = buf[..n].iter().filter(|&&b| b == protocol::REQUEST_END);
                        requests.flat_map(|_| body.iter().copied()).collect()
                    }
                };
                if s.write_all(&answer).is_err() {
                    break;
                }
                count.fetch_add(1, Ordering::SeqCst);
            }
        });
        Self {
            server,
            echoed,
            stall,
            held,
        }
    }

    fn port(&self) -> String {
        self.server.port.to_string()
    }

    /// Waits until `n` requests were echoed: the run's window is open and requests flow.
    fn await_echoed(&self, n: u64) {
        await_count(&self.echoed, n);
    }

    /// Stops answering and waits until `n` requests are held unanswered.
    fn stall_until_held(&self, n: u64) {
        self.stall.store(true, Ordering::SeqCst);
        await_count(&self.held, n);
    }
}

/// Waits until `counter` reaches `n`.
fn await_count(counter: &AtomicU64, n: u64) {
    let t0 = Instant::now();
    while counter.load(Ordering::SeqCst) < n {
        assert!(
            t0.elapsed() < READY_WITHIN,
            "the server saw fewer than {n} requests in {READY_WITHIN:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A running echo-bench: its stdout and exit status come on `done`, its stderr line by line
/// on `stderr`.
struct Running {
    pid: Pid,
    done: mpsc::Receiver<Output>,
    stderr: mpsc::Receiver<String>,
}

impl Running {
    fn spawn(args: &[&str]) -> Self {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_echo-bench"));
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        echolab_testkit::dies_with_parent(&mut cmd);
        let mut child = cmd.spawn().expect("echo-bench starts");
        let pid = Pid::from_raw(child.id() as i32);
        let err = child.stderr.take().expect("piped");
        let (line_tx, stderr) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let _ = line_tx.send(line);
            }
        });
        let (tx, done) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait_with_output().expect("wait for echo-bench"));
        });
        Self { pid, done, stderr }
    }

    fn signal(&self, s: Signal) {
        kill(self.pid, s).expect("kill(2) our own child");
    }

    /// Waits for a stderr line containing `text`; returns the lines read until then.
    fn await_stderr(&self, text: &str) -> Vec<String> {
        let mut seen = Vec::new();
        loop {
            match self.stderr.recv_timeout(REPORT_WITHIN) {
                Ok(line) if line.contains(text) => return seen,
                Ok(line) => seen.push(line),
                Err(e) => panic!("no stderr line with {text:?} ({e}); saw {seen:?}"),
            }
        }
    }

    /// The exit, at most [`REPORT_WITHIN`] away (killed otherwise), with the stderr lines not
    /// yet read.
    fn finish(&self) -> Output {
        let mut out = self.done.recv_timeout(REPORT_WITHIN).unwrap_or_else(|_| {
            let _ = kill(self.pid, Signal::SIGKILL);
            panic!("echo-bench did not exit within {REPORT_WITHIN:?} of the signal")
        });
        // The reader ends at end of file, which the exit brought.
        for line in self.stderr.iter() {
            out.stderr.extend_from_slice(line.as_bytes());
            out.stderr.push(b'\n');
        }
        out
    }
}

/// Starts `args` (a 30 s run) against a fresh counting server, signals it once requests flow,
/// and returns its exit status, stdout and the server (still up).
fn interrupt(args: &[&str], signal: Signal) -> (Output, CountingEcho) {
    let server = CountingEcho::start();
    let port = server.port();
    let mut all = vec!["127.0.0.1", &port];
    all.extend_from_slice(args);
    let run = Running::spawn(&all);
    server.await_echoed(200);
    run.signal(signal);
    let out = run.finish();
    (out, server)
}

/// The report printed on stdout, also as raw JSON (to see which keys are present).
fn parse(out: &Output) -> (BenchReport, serde_json::Value) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let r = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("not a BenchReport ({e}):\n{stdout}"));
    (r, serde_json::from_str(&stdout).unwrap())
}

/// What every interrupted report holds: the mark, the signal, requests, a window cut short
/// and rates over that window rather than over the 30 s asked.
fn assert_partial(r: &BenchReport, signal: &str) {
    assert!(r.interrupted, "{r:?}");
    assert_eq!(r.interrupted_by.as_deref(), Some(signal));
    assert!(r.requests_ok > 0, "{r:?}");
    assert!(
        r.duration_s > 0.0 && r.duration_s < 30.0,
        "measured {} s",
        r.duration_s
    );
    let qps = r.requests_ok as f64 / r.duration_s;
    assert!((r.qps - qps).abs() <= qps * 1e-9, "{} vs {qps}", r.qps);
    if let Some(last) = r.intervals.last() {
        assert!(
            (last.t_s - r.duration_s).abs() < 1e-6,
            "the last interval ends with the window: {} vs {}",
            last.t_s,
            r.duration_s
        );
    }
}

#[test]
fn sigint_ends_a_timed_run_with_the_report_of_what_was_measured() {
    let (out, _server) = interrupt(&["4", "--duration", "30s", "--json"], Signal::SIGINT);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{}\n{stderr}", out.status);
    let (r, raw) = parse(&out);
    assert_partial(&r, "SIGINT");
    assert_eq!(raw["interrupted"], true);
    assert_eq!(raw["extra"]["requested_duration_s"], 30.0);
    assert!(
        !r.intervals.is_empty(),
        "a timed run has per-second records"
    );
    assert!(
        stderr.contains("interrupted by SIGINT"),
        "stderr says why the status is not 0: {stderr}"
    );
}

#[test]
fn sigterm_ends_a_thread_engine_run_with_status_143() {
    let args = ["4", "--duration", "30s", "--engine", "thread", "--json"];
    let (out, _server) = interrupt(&args, Signal::SIGTERM);
    assert_eq!(
        out.status.code(),
        Some(143),
        "{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let (r, _) = parse(&out);
    assert_partial(&r, "SIGTERM");
}

#[test]
fn sigint_ends_a_rounds_run_and_the_summary_says_it_was_cut_short() {
    // Far more rounds than 30 s allow: only the signal ends this run.
    let (out, _server) = interrupt(&["2", "1000000000"], Signal::SIGINT);
    assert_eq!(out.status.code(), Some(130), "{}", out.status);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("INTERRUPTED by SIGINT: the window was cut short after"),
        "{stdout}"
    );
    assert!(stdout.contains("partial results"), "{stdout}");
}

#[test]
fn sigint_ends_a_sustain_run() {
    let server = CountingEcho::answering(Some(protocol::reply_body(256)));
    let port = server.port();
    let run = Running::spawn(&[
        "sustain",
        "127.0.0.1",
        &port,
        "4",
        "--reply-bytes",
        "256",
        "--duration",
        "30s",
        "--json",
    ]);
    server.await_echoed(200);
    run.signal(Signal::SIGINT);
    let out = run.finish();
    assert_eq!(out.status.code(), Some(130), "{}", out.status);
    let (r, _) = parse(&out);
    assert_partial(&r, "SIGINT");
    assert_eq!((r.mode.as_str(), r.requests_failed), ("sustain", 0));
}

#[test]
fn a_second_signal_exits_at_once_without_a_report() {
    let server = CountingEcho::start();
    let port = server.port();
    // --timeout 30s: once the server stops answering, the drain after the first signal waits
    // up to 30 s for the requests in flight.
    let run = Running::spawn(&[
        "127.0.0.1",
        &port,
        "2",
        "--duration",
        "30s",
        "--timeout",
        "30s",
        "--json",
    ]);
    server.await_echoed(100);
    // Each of the 2 closed-loop connections has its request in flight, held by the server.
    server.stall_until_held(2);
    run.signal(Signal::SIGINT);
    // Two signals sent before the first is taken would arrive as one (they do not queue).
    run.await_stderr("ending the measurement window now");
    if let Ok(out) = run.done.recv_timeout(Duration::from_millis(500)) {
        panic!(
            "the drain waits for the requests the stalled server holds, but echo-bench \
             exited {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stdout)
        );
    }
    run.signal(Signal::SIGINT);
    let out = run.finish();
    assert_eq!(out.status.code(), Some(130), "{}", out.status);
    assert!(out.stdout.is_empty(), "no report after a second signal");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("a second signal (SIGINT): exiting at once"),
        "{stderr}"
    );
}

#[test]
fn sigint_to_the_parent_of_processes_reports_every_shard_interrupted() {
    let args = ["4", "--duration", "30s", "--processes", "2", "--json"];
    let (out, _server) = interrupt(&args, Signal::SIGINT);
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let (r, _) = parse(&out);
    assert_partial(&r, "SIGINT");
    assert_eq!(r.extra.processes, Some(2));
    assert_eq!(r.conns, 4);
}

#[test]
fn an_uninterrupted_report_has_no_interrupted_key() {
    let server = CountingEcho::start();
    let port = server.port();
    let (out, _) = common::run(&["127.0.0.1", &port, "2", "5", "--json"]);
    assert!(out.status.success(), "{}", out.status);
    let (r, raw) = parse(&out);
    assert_eq!(r.requests_ok, 10);
    assert!(raw.get("interrupted").is_none(), "{raw}");
    assert!(raw.get("interrupted_by").is_none(), "{raw}");
    assert!(!r.interrupted);
}

#[test]
fn the_duration_help_says_what_ctrl_c_does() {
    let (out, _) = common::run(&["--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("Ctrl-C (SIGINT) or SIGTERM ends the window early"),
        "{help}"
    );
}
