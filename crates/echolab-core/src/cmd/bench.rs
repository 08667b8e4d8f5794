//! echo-bench: its command line (the short/long form and the `connect-storm` and `sustain`
//! subcommands, mirroring its clap structure) and its JSON report.

use std::fmt;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::{tail, Argv};
use crate::stats::BenchReport;
use crate::units::Dur;

/// echo-bench's `--engine`, the one definition of the client engines: experiment files
/// (`bench.engine`), the launcher and echo-bench's own clap all use this enum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum BenchEngine {
    /// epoll workers (`--threads`), non-blocking sockets, each connection a state machine.
    Event,
    /// One blocking OS thread per connection, as seed 000's echo-kp-bench.
    Thread,
    /// io_uring workers (`--threads`), one io_uring_enter(2) per batch of sends and
    /// receives; long connections only (`--mode long`), Linux 5.11 or later.
    Uring,
}

impl BenchEngine {
    /// The `--engine` value and the `BenchReport.engine` name (`event`, `thread`, `uring`).
    pub fn name(self) -> &'static str {
        match self {
            BenchEngine::Event => "event",
            BenchEngine::Thread => "thread",
            BenchEngine::Uring => "uring",
        }
    }
}

impl fmt::Display for BenchEngine {
    /// [`BenchEngine::name`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// echo-bench's `--server-cpus`: whether the server under test runs on the client's CPUs,
/// which decides echo-bench's automatic `--threads` (on shared CPUs a long-connection client
/// takes half, since every request costs both ends alike).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum ServerCpus {
    /// Shared when the target is an address of the client's own host (echo-bench's default).
    Auto,
    /// The server runs on the client's CPUs (another namespace, same cores).
    Shared,
    /// The server has CPUs the client does not use.
    Separate,
}

impl fmt::Display for ServerCpus {
    /// The `--server-cpus` value (`auto`, `shared`, `separate`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ServerCpus::Auto => "auto",
            ServerCpus::Shared => "shared",
            ServerCpus::Separate => "separate",
        })
    }
}

/// `--mode` of the short/long form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunMode {
    /// connect, send, receive, close per request.
    Short,
    /// connect once, then round trips.
    Long,
}

impl fmt::Display for RunMode {
    /// The `--mode` value (`short`, `long`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RunMode::Short => "short",
            RunMode::Long => "long",
        })
    }
}

/// Engine and warm-up (echo-bench's `LoadArgs`, shared by the short/long form and sustain).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoadOpts {
    /// `--warmup`: the same load this long first, discarded.
    pub warmup: Option<Dur>,
    /// `--engine`.
    pub engine: Option<BenchEngine>,
}

impl LoadOpts {
    fn push(&self, a: &mut Argv) {
        a.opt("warmup", self.warmup).opt("engine", self.engine);
    }
}

/// Sockets, deadlines and worker threads (echo-bench's `SocketArgs`, shared by every form).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SocketOpts {
    /// `--threads`: event-engine worker threads.
    pub threads: Option<u64>,
    /// `--timeout`: deadline of one connect, and of one request's send plus receive.
    pub timeout: Option<Dur>,
    /// `--linger0`: close with RST, no TIME_WAIT on the client.
    pub linger0: bool,
    /// `--server-cpus`: whether the server runs on the client's CPUs.
    pub server_cpus: Option<ServerCpus>,
}

impl SocketOpts {
    fn push(&self, a: &mut Argv) {
        a.opt("threads", self.threads)
            .opt("timeout", self.timeout)
            .flag("linger0", self.linger0)
            .opt("server-cpus", self.server_cpus);
    }
}

/// `echo-bench HOST PORT CONNS [ROUNDS] --mode M`: seed 000's short/long run. echo-bench
/// takes exactly one of `rounds` and `duration`.
#[derive(Debug, Clone, PartialEq)]
pub struct RunCmd {
    /// The server.
    pub target: SocketAddr,
    /// CONNS: concurrent connections.
    pub conns: u64,
    /// ROUNDS: requests per connection.
    pub rounds: Option<u64>,
    /// `--mode`.
    pub mode: RunMode,
    /// `--duration`: run this long instead of ROUNDS.
    pub duration: Option<Dur>,
    /// `--payload-size`: request bytes (echo-bench's default is the seed's 12).
    pub payload_size: Option<u64>,
    /// `--rate`: open loop at this many requests/s in total.
    pub rate: Option<f64>,
    /// Engine and warm-up.
    pub load: LoadOpts,
    /// Sockets and deadlines.
    pub sock: SocketOpts,
    /// `--json`: print only the BenchReport.
    pub json: bool,
}

/// `echo-bench connect-storm HOST PORT N`: seed 004's "deadlink".
#[derive(Debug, Clone, PartialEq)]
pub struct StormCmd {
    /// The server.
    pub target: SocketAddr,
    /// N: connections to establish.
    pub n: u64,
    /// Sockets and deadlines.
    pub sock: SocketOpts,
    /// `--json`.
    pub json: bool,
}

/// `echo-bench sustain HOST PORT N`: seed 004's "activelink".
#[derive(Debug, Clone, PartialEq)]
pub struct SustainCmd {
    /// The server.
    pub target: SocketAddr,
    /// N: concurrent long connections.
    pub n: u64,
    /// `--duration`: how long to sustain the load (echo-bench's default 60 s).
    pub duration: Option<Dur>,
    /// `--reply-bytes`: bytes the server answers per request (echo-bench's default 1024).
    pub reply_bytes: Option<u64>,
    /// `--rate`: open loop at this many requests/s in total.
    pub rate: Option<f64>,
    /// Engine and warm-up.
    pub load: LoadOpts,
    /// Sockets and deadlines.
    pub sock: SocketOpts,
    /// `--json`.
    pub json: bool,
}

/// One echo-bench command line.
#[derive(Debug, Clone, PartialEq)]
pub enum BenchCmd {
    /// The short/long form.
    Run(RunCmd),
    /// `connect-storm`.
    ConnectStorm(StormCmd),
    /// `sustain`.
    Sustain(SustainCmd),
}

impl BenchCmd {
    /// The program, as named in the image's bin directory and the workspace's target dir.
    pub const PROGRAM: &'static str = "echo-bench";

    /// The arguments, without the program name.
    pub fn argv(&self) -> Vec<String> {
        let mut a = Argv::default();
        match self {
            BenchCmd::Run(c) => {
                a.arg(c.target.ip()).arg(c.target.port()).arg(c.conns);
                if let Some(r) = c.rounds {
                    a.arg(r);
                }
                a.val("mode", c.mode)
                    .opt("duration", c.duration)
                    .opt("payload-size", c.payload_size)
                    .opt("rate", c.rate);
                c.load.push(&mut a);
                c.sock.push(&mut a);
                a.flag("json", c.json);
            }
            BenchCmd::ConnectStorm(c) => {
                a.arg("connect-storm")
                    .arg(c.target.ip())
                    .arg(c.target.port())
                    .arg(c.n);
                c.sock.push(&mut a);
                a.flag("json", c.json);
            }
            BenchCmd::Sustain(c) => {
                a.arg("sustain")
                    .arg(c.target.ip())
                    .arg(c.target.port())
                    .arg(c.n)
                    .opt("duration", c.duration)
                    .opt("reply-bytes", c.reply_bytes)
                    .opt("rate", c.rate);
                c.load.push(&mut a);
                c.sock.push(&mut a);
                a.flag("json", c.json);
            }
        }
        a.done()
    }
}

impl BenchCmd {
    /// The arguments of shard `shard` of this run ([`crate::shard`]): [`BenchCmd::argv`] with
    /// `--json --shard K/N`. The shard prints [`crate::shard::READY_LINE`] once connected,
    /// waits for a line on stdin, and prints its report.
    ///
    /// # Errors
    /// A `connect-storm` or `sustain` command: echo-bench splits only the short/long form.
    pub fn shard_argv(&self, shard: crate::shard::Shard) -> Result<Vec<String>, String> {
        let BenchCmd::Run(run) = self else {
            return Err(format!(
                "echo-bench splits only the short/long form over shards, not {}",
                self.argv().first().map_or("", String::as_str)
            ));
        };
        let mut run = run.clone();
        run.json = true;
        let mut a = Argv::default();
        a.val("shard", shard);
        let mut out = BenchCmd::Run(run).argv();
        out.extend(a.done());
        Ok(out)
    }
}

/// echo-bench's `--json` report of a whole run.
///
/// # Errors
/// stdout is not a BenchReport (the message carries the serde error and stdout's tail), or
/// the report is marked [`BenchReport::interrupted`]: it covers only part of the window, and a
/// launcher that took it would pass a partial result off as a whole one.
pub fn bench_report(stdout: &str) -> Result<BenchReport, String> {
    let report: BenchReport = serde_json::from_str(stdout.trim()).map_err(|e| {
        format!(
            "echo-bench printed no valid report ({e}; stdout: {:?})",
            tail(stdout, 300)
        )
    })?;
    if report.interrupted {
        return Err(format!(
            "echo-bench was interrupted by {}; its report covers only part of the window \
             ({:.3} s measured)",
            report.interrupted_by.as_deref().unwrap_or("a signal"),
            report.duration_s
        ));
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interrupted_report_is_refused() {
        let mut r = BenchReport {
            tool: "echo-bench".into(),
            duration_s: 2.5,
            requests_ok: 10,
            ..Default::default()
        };
        let whole = serde_json::to_string(&r).unwrap();
        assert!(!whole.contains("interrupted"), "{whole}");
        assert_eq!(bench_report(&whole), Ok(r.clone()));
        r.interrupted = true;
        r.interrupted_by = Some("SIGINT".into());
        let err = bench_report(&serde_json::to_string(&r).unwrap()).unwrap_err();
        assert!(
            err.contains(
                "echo-bench was interrupted by SIGINT; its report covers only part of the window"
            ),
            "{err}"
        );
    }

    fn target() -> SocketAddr {
        "10.0.0.2:9988".parse().unwrap()
    }

    #[test]
    fn each_form_spells_its_positionals_and_flags() {
        let run = BenchCmd::Run(RunCmd {
            target: target(),
            conns: 100,
            rounds: Some(10),
            mode: RunMode::Short,
            duration: None,
            payload_size: Some(64),
            rate: Some(2500.5),
            load: LoadOpts {
                warmup: Some("1s".parse().unwrap()),
                engine: Some(BenchEngine::Thread),
            },
            sock: SocketOpts {
                threads: Some(1),
                timeout: Some("5s".parse().unwrap()),
                linger0: true,
                server_cpus: Some(ServerCpus::Shared),
            },
            json: true,
        });
        assert_eq!(
            run.argv().join(" "),
            "10.0.0.2 9988 100 10 --mode short --payload-size 64 --rate 2500.5 --warmup 1s \
             --engine thread --threads 1 --timeout 5s --linger0 --server-cpus shared --json"
        );
        let storm = BenchCmd::ConnectStorm(StormCmd {
            target: target(),
            n: 300,
            sock: SocketOpts::default(),
            json: false,
        });
        assert_eq!(storm.argv().join(" "), "connect-storm 10.0.0.2 9988 300");
        let sustain = BenchCmd::Sustain(SustainCmd {
            target: target(),
            n: 800,
            duration: Some("60s".parse().unwrap()),
            reply_bytes: Some(1024),
            rate: None,
            load: LoadOpts::default(),
            sock: SocketOpts::default(),
            json: true,
        });
        assert_eq!(
            sustain.argv().join(" "),
            "sustain 10.0.0.2 9988 800 --duration 60s --reply-bytes 1024 --json"
        );
    }

    #[test]
    fn engines_read_from_yaml_by_their_flag_names() {
        for (text, e) in [
            ("event", BenchEngine::Event),
            ("thread", BenchEngine::Thread),
        ] {
            assert_eq!(serde_yaml::from_str::<BenchEngine>(text).unwrap(), e);
            assert_eq!(e.to_string(), text);
        }
        assert!(serde_yaml::from_str::<BenchEngine>("threads").is_err());
    }

    #[test]
    fn a_report_that_is_not_json_is_quoted() {
        assert!(bench_report("oops").unwrap_err().contains("oops"));
    }
}
