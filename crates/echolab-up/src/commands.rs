//! The command lines of `echo-server` and `echo-bench` for one cell, and the parsing of what
//! they print back (readiness line, final ServerStats line, BenchReport JSON).
//!
//! The flags are those of `echo-server --help` and `echo-bench --help` (DESIGN.md "Contracts").

use std::net::{IpAddr, SocketAddr};

use echolab_core::experiment::{BenchMode, Cell, Experiment};
use echolab_core::stats::{BenchReport, ServerStats};

/// The stderr line prefix with which echo-server says it accepts connections; the rest of the
/// line is `IP:PORT model=M workers=N pid=P`.
pub const READY_PREFIX: &str = "echo-server listening on ";

/// What a readiness line says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readiness {
    /// The bound address (port 0 resolved).
    pub addr: SocketAddr,
    /// The server's pid in its own pid namespace.
    pub pid: u32,
}

/// Parses `echo-server listening on 127.0.0.1:41234 model=epoll-et workers=1 pid=7`; `None`
/// for any other line.
pub fn parse_readiness(line: &str) -> Option<Readiness> {
    let rest = line.trim().strip_prefix(READY_PREFIX)?;
    let mut words = rest.split_whitespace();
    let addr: SocketAddr = words.next()?.parse().ok()?;
    let pid = words.find_map(|w| w.strip_prefix("pid="))?.parse().ok()?;
    Some(Readiness { addr, pid })
}

/// echo-server's arguments for `cell`, listening on `bind` with a kernel-chosen port.
pub fn server_args(exp: &Experiment, cell: &Cell, bind: IpAddr) -> Vec<String> {
    let mut a = vec![
        "--model".into(),
        cell.server.clone(),
        "--bind".into(),
        bind.to_string(),
        "--port".into(),
        "0".into(),
    ];
    let opts = &exp.server;
    if let Some(b) = opts.read_buf {
        a.extend(["--read-buf".into(), b.0.to_string()]);
    }
    if let Some(w) = opts.workers {
        a.extend(["--workers".into(), w.to_string()]);
    }
    if let Some(b) = opts.backlog {
        a.extend(["--backlog".into(), b.to_string()]);
    }
    if let Some(r) = cell.reply_bytes {
        a.extend(["--reply-bytes".into(), r.to_string()]);
    }
    a
}

/// echo-bench's arguments for `cell` against `target`, always with `--json`.
///
/// short/long: `HOST PORT CONNS [ROUNDS] --mode M` (a timed cell passes `--duration`
/// instead of ROUNDS); connect-storm: `connect-storm HOST PORT N`; sustain:
/// `sustain HOST PORT N --reply-bytes B --duration D` (echo-bench --help).
pub fn bench_args(exp: &Experiment, cell: &Cell, target: SocketAddr) -> Vec<String> {
    let (host, port) = (target.ip().to_string(), target.port().to_string());
    let conns = cell.conns.to_string();
    let mut a: Vec<String> = match cell.mode {
        BenchMode::Short | BenchMode::Long => {
            let mut a = vec![host, port, conns];
            a.extend(cell.rounds.map(|r| r.to_string()));
            a.extend(["--mode".into(), cell.mode.name().into()]);
            a
        }
        BenchMode::ConnectStorm => vec!["connect-storm".into(), host, port, conns],
        BenchMode::Sustain => vec!["sustain".into(), host, port, conns],
    };
    if let Some(d) = cell.duration {
        a.extend(["--duration".into(), d.to_string()]);
    }
    if cell.mode == BenchMode::Sustain {
        if let Some(r) = cell.reply_bytes {
            a.extend(["--reply-bytes".into(), r.to_string()]);
        }
    }
    if cell.payload != 12 && cell.mode != BenchMode::ConnectStorm {
        a.extend(["--payload-size".into(), cell.payload.to_string()]);
    }
    if let Some(w) = exp.warmup {
        if cell.mode != BenchMode::ConnectStorm {
            a.extend(["--warmup".into(), w.to_string()]);
        }
    }
    let b = &exp.bench;
    if let Some(t) = b.threads {
        a.extend(["--threads".into(), t.to_string()]);
    }
    if let Some(t) = b.timeout {
        a.extend(["--timeout".into(), t.to_string()]);
    }
    if let Some(e) = b
        .engine
        .as_ref()
        .filter(|_| cell.mode != BenchMode::ConnectStorm)
    {
        a.extend(["--engine".into(), e.clone()]);
    }
    if b.linger0 {
        a.push("--linger0".into());
    }
    a.push("--json".into());
    a
}

/// The last `"final": true` ServerStats line of echo-server's stdout.
///
/// # Errors
/// No such line (the server died or was killed before printing it), naming what stdout held.
pub fn parse_final_stats(stdout: &str) -> Result<ServerStats, String> {
    stdout
        .lines()
        .rev()
        .filter(|l| l.trim_start().starts_with('{'))
        .find_map(|l| {
            serde_json::from_str::<ServerStats>(l)
                .ok()
                .filter(|s| s.is_final)
        })
        .ok_or_else(|| {
            format!(
                "echo-server printed no final stats line (stdout: {:?})",
                tail(stdout, 300)
            )
        })
}

/// echo-bench's JSON report.
///
/// # Errors
/// stdout is not a BenchReport; the message carries the serde error and stdout's tail.
pub fn parse_bench_report(stdout: &str) -> Result<BenchReport, String> {
    serde_json::from_str(stdout.trim()).map_err(|e| {
        format!(
            "echo-bench printed no valid report ({e}; stdout: {:?})",
            tail(stdout, 300)
        )
    })
}

/// The last `n` characters of `s`, for error messages.
pub fn tail(s: &str, n: usize) -> &str {
    let s = s.trim();
    let mut start = s.len().saturating_sub(n);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exp() -> Experiment {
        Experiment::parse(
            "name: t\nquestion: q\nrepetitions: 1\nwarmup: 1s\nmatrix:\n  - servers: [epoll-et]\n    modes: [long, connect-storm]\n    conns: [100]\n    rounds: [10]\nserver: {workers: 2}\nbench: {timeout: 5s}\n",
            "t.yaml",
        )
        .unwrap()
    }

    #[test]
    fn readiness_lines_give_address_and_pid() {
        let r = parse_readiness(
            "echo-server listening on 127.0.0.1:41234 model=epoll-et workers=1 pid=7\n",
        )
        .unwrap();
        assert_eq!(
            r,
            Readiness {
                addr: "127.0.0.1:41234".parse().unwrap(),
                pid: 7
            }
        );
        assert_eq!(parse_readiness("echo-server: cannot listen"), None);
        assert_eq!(
            parse_readiness("echo-server listening on 127.0.0.1:1 model=x"),
            None
        );
    }

    #[test]
    fn cells_become_command_lines() {
        let e = exp();
        let cells = e.cells();
        let s = server_args(&e, &cells[0], "127.0.0.1".parse().unwrap());
        assert_eq!(
            s.join(" "),
            "--model epoll-et --bind 127.0.0.1 --port 0 --workers 2"
        );
        let t: SocketAddr = "10.0.0.2:9988".parse().unwrap();
        assert_eq!(
            bench_args(&e, &cells[0], t).join(" "),
            "10.0.0.2 9988 100 10 --mode long --warmup 1s --timeout 5s --json"
        );
        assert_eq!(
            bench_args(&e, &cells[1], t).join(" "),
            "connect-storm 10.0.0.2 9988 100 --timeout 5s --json"
        );
    }

    #[test]
    fn the_final_stats_line_is_found() {
        let line = |f: bool| {
            format!("{{\"model\":\"epoll-et\",\"pid\":7,\"uptime_s\":1.0,\"final\":{f},\"accepted\":3,\"closed\":3,\"bytes_in\":0,\"bytes_out\":0,\"syscalls\":{{}},\"events_returned\":0,\"empty_wakeups\":0,\"eagain_read\":0,\"eagain_write\":0,\"errors\":{{}},\"workers\":[]}}")
        };
        let out = format!("{}\n{}\n", line(false), line(true));
        let s = parse_final_stats(&out).unwrap();
        assert!(s.is_final && s.totals.accepted == 3);
        assert!(parse_final_stats(&line(false))
            .unwrap_err()
            .contains("no final stats"));
        assert!(parse_bench_report("oops").unwrap_err().contains("oops"));
    }
}
