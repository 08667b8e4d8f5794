//! echo-bench: its engines, the options an experiment sets ([`ClientOpts`]) and its JSON
//! report; its whole command line is [`super::bench_cli`].

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{tail, Options};
use crate::stats::BenchReport;
use crate::units::Dur;

/// The program, as named in the image's bin directory and the workspace's target dir.
pub(super) const PROGRAM: &str = "echo-bench";

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

/// echo-bench's client options that an experiment may set, defined once: echo-bench's clap
/// flattens this struct into each of its forms (its `--help` is these docstrings), an
/// experiment file's `bench:` block is this struct read from YAML, and the launcher's argv is
/// produced from it ([`Options::argv`]). A field added here is a flag of echo-bench, a key
/// of `bench:` and a part of every argv the launcher builds, with nothing else to edit;
/// `parse(argv(x)) == x` holds it (this module's tests).
///
/// Defaults are clap's (`default_value`); [`Default`] and YAML's missing keys take the same
/// ones, and [`Options::argv`] leaves out what equals them.
#[derive(Debug, Clone, PartialEq, clap::Args, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClientOpts {
    /// event: epoll workers multiplexing all connections; thread: one blocking thread per
    /// connection, like seed 000's tool (for comparison); uring: io_uring workers, one
    /// io_uring_enter(2) per batch of sends and receives (long connections only, Linux 5.11+;
    /// fewer system calls per request; docs/measurements.md says what that saved where
    /// measured). connect-storm runs on the event engine only.
    #[arg(long, value_enum, default_value_t = BenchEngine::Event)]
    pub engine: BenchEngine,
    /// Event- and ring-engine worker threads [default: auto: the CPUs this process may use,
    /// halved for long connections when the server runs on the same CPUs (see
    /// --server-cpus), since it needs the other half; the choice is in --json's
    /// threads_reason].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=crate::limits::MAX_WORKERS))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threads: Option<u64>,
    /// Deadline of one connect, and of one request's send plus receive (above 0s, at most
    /// 24h).
    #[arg(long, default_value = "5s", value_parser = crate::limits::nonzero_dur)]
    pub timeout: Dur,
    /// TCP_NODELAY on every socket; --nodelay=false leaves Nagle's algorithm on.
    #[arg(long, default_value_t = true, num_args = 0..=1, require_equals = true,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    pub nodelay: bool,
    /// Close with SO_LINGER 0: the client sends RST and keeps no TIME_WAIT.
    #[arg(long)]
    pub linger0: bool,
    /// Not an echo-bench flag: the launcher also runs the client under
    /// `strace -f -c -e trace=connect,close` where the image has strace (seed 002's
    /// cross-check), recorded beside the run, never instead of it.
    #[arg(skip)]
    pub strace: bool,
}

impl Default for ClientOpts {
    /// clap's defaults, so that a YAML key left out and a flag left out mean the same.
    fn default() -> Self {
        <Self as Options>::parse(&[]).expect("echo-bench's client defaults parse")
    }
}

impl Options for ClientOpts {
    const PROGRAM: &'static str = PROGRAM;
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
pub(super) mod tests {
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

    /// Every field away from its default (a literal without `..`: a field added to
    /// [`ClientOpts`] does not compile until it is set here, so the round trip covers it).
    pub(in crate::cmd) fn every_option_set() -> ClientOpts {
        ClientOpts {
            engine: BenchEngine::Thread,
            threads: Some(3),
            timeout: "250ms".parse().unwrap(),
            nodelay: false,
            linger0: true,
            strace: false,
        }
    }

    #[test]
    fn client_options_survive_their_own_argv() {
        crate::cmd::assert_survives_its_own_argv(&every_option_set(), &["strace"]);
        assert_eq!(
            every_option_set().argv().join(" "),
            "--engine thread --threads 3 --timeout 250ms --nodelay=false --linger0"
        );
    }

    #[test]
    fn client_options_read_from_yaml_with_the_flags_defaults() {
        let o: ClientOpts = serde_yaml::from_str("{linger0: true}").unwrap();
        assert_eq!(
            o,
            ClientOpts {
                linger0: true,
                ..ClientOpts::default()
            }
        );
        assert_eq!(
            ClientOpts::default().timeout.0,
            std::time::Duration::from_secs(5)
        );
        assert!(ClientOpts::default().nodelay);
        let e = serde_yaml::from_str::<ClientOpts>("{threds: 2}")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `threds`"), "{e}");
        let zero: ClientOpts = serde_yaml::from_str("{threads: 0}").unwrap();
        let e = zero.check().unwrap_err();
        assert!(e.contains("--threads") && e.contains('0'), "{e}");
        let zero: ClientOpts = serde_yaml::from_str("{timeout: 0s}").unwrap();
        assert!(zero.check().unwrap_err().contains("--timeout"));
    }

    #[test]
    fn engines_read_from_yaml_by_their_flag_names() {
        for (text, e) in [
            ("event", BenchEngine::Event),
            ("thread", BenchEngine::Thread),
            ("uring", BenchEngine::Uring),
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
