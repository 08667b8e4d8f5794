//! neper (google/neper), the public tool echo-bench is judged against, as a third client
//! of the reference benchmark, when `ECHO_BENCH_NEPER` names a directory holding its `tcp_rr`
//! and `tcp_crr` binaries (a clone of github.com/google/neper built there with
//! `make tcp_rr tcp_crr`). neper is not a dependency: nothing of it is in this repository.
//!
//! neper's client needs a neper server for its control connection (port 12866, where the two
//! agree on the test and the server reports back); its data flows go to `-P PORT`, here the
//! echo-server's, which answers a 12-byte request with the 12 bytes neper expects
//! (`-Q 12 -R 12`). tcp_crr closes with SO_LINGER 0 unless `--time-wait`. Its figures are the
//! client's own: `throughput` (transactions per second over the test) and the CPU time it
//! spent (`utime_*`, `stime_*`, getrusage(2)).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::{printed_number, share, stdout_of, Run};

/// neper's default control port (its `--control-port`).
const CONTROL_PORT: u16 = 12866;

/// The neper binaries to run.
pub(crate) struct Neper {
    dir: PathBuf,
}

impl Neper {
    /// neper from `ECHO_BENCH_NEPER`, or `None` when it is not set.
    ///
    /// # Panics
    /// When the directory lacks `tcp_rr` or `tcp_crr`, naming the one missing.
    pub(crate) fn from_env() -> Option<Self> {
        let dir = PathBuf::from(std::env::var_os("ECHO_BENCH_NEPER")?);
        for bin in ["tcp_rr", "tcp_crr"] {
            assert!(
                dir.join(bin).is_file(),
                "ECHO_BENCH_NEPER={}: no {bin} there (build neper with `make tcp_rr tcp_crr`)",
                dir.display()
            );
        }
        Some(Self { dir })
    }

    /// One run of `secs` seconds: neper's server for the control connection, then its client
    /// with `flows` flows on `threads` threads against the echo-server on `port`; `mode` is
    /// the reference client's (`rr` or `crr`) and `linger0` its `"1"` (neper's default close)
    /// or `"0"` (`--time-wait`).
    ///
    /// # Panics
    /// When neper's server does not listen within 10 s or its client fails; the message
    /// carries what neper printed.
    pub(crate) fn run(
        &self,
        port: u16,
        (flows, mode, linger0): (&str, &str, &str),
        threads: u32,
        secs: u64,
    ) -> Run {
        let bin = self
            .dir
            .join(if mode == "crr" { "tcp_crr" } else { "tcp_rr" });
        let mut server = Command::new(&bin)
            .args(["-l", &(secs + 30).to_string(), "--nolog"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        let deadline = Instant::now() + Duration::from_secs(10);
        while !listening(CONTROL_PORT) {
            if Instant::now() > deadline || server.try_wait().ok().flatten().is_some() {
                let _ = server.kill();
                let out = server.wait_with_output().expect("neper server output");
                panic!(
                    "neper's server did not listen on {CONTROL_PORT} within 10 s: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut args = vec![
            "-c".to_string(),
            "-H".into(),
            "127.0.0.1".into(),
            "-P".into(),
            port.to_string(),
            "-Q".into(),
            "12".into(),
            "-R".into(),
            "12".into(),
            "-F".into(),
            flows.into(),
            "-T".into(),
            threads.to_string(),
            "-l".into(),
            secs.to_string(),
            "--nolog".into(),
        ];
        if mode == "crr" && linger0 == "0" {
            args.push("--time-wait".into());
        }
        // neper's server goes whether its client succeeded or not (stdout_of panics on a
        // failure, and a panic would otherwise leave the server running).
        let client =
            std::panic::catch_unwind(|| stdout_of(Command::new(&bin).args(&args), "neper"));
        let _ = server.kill();
        let _ = server.wait();
        let text = client.unwrap_or_else(|p| std::panic::resume_unwind(p));
        let field = |name: &str| printed_number(&text, name, "neper");
        let n = field("num_transactions");
        let user = field("utime_end") - field("utime_start");
        let sys = field("stime_end") - field("stime_start");
        Run {
            qps: field("throughput"),
            cpu_us_per_request: (user + sys) * 1e6 / n.max(1.0),
            kernel_share: share(sys, user),
            // neper does not count failed transactions (it logs a failed send or read and drops
            // a flow that hangs up), so the table gives no failures column for it.
            failures: 0,
            server_busy: 0.0,
        }
    }
}

/// Whether a TCP socket of this thread's network namespace listens on `port` (proc(5):
/// /proc/thread-self/net/tcp and tcp6, state 0A is LISTEN, ports in hex).
fn listening(port: u16) -> bool {
    let local = format!(":{port:04X} ");
    ["tcp", "tcp6"].iter().any(|f| {
        std::fs::read_to_string(format!("/proc/thread-self/net/{f}")).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                let mut cols = l.split_whitespace().skip(1);
                let addr = cols.next().unwrap_or("");
                let state = cols.nth(1).unwrap_or("");
                format!("{addr} ").ends_with(&local) && state == "0A"
            })
        })
    })
}
