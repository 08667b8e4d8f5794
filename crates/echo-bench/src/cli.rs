//! The command line: seed 000's form `echo-bench HOST PORT CONNS ROUNDS --mode short|long`,
//! plus the `connect-storm` (seed 004's deadlink) and `sustain` (seed 004's activelink)
//! subcommands.

use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use echolab_core::cmd::{ClientOpts, ServerCpus};
use echolab_core::limits::{self, Rate, MAX_CONNS, MAX_MESSAGE_BYTES, MAX_ROUNDS};

use crate::short_sockets::ShortSockets;
use crate::sources::SourceChoice;

const ABOUT: &str = "echolab's load generator for TCP echo servers (closed or open loop, \
                     event-driven or thread-per-connection)";

const LONG_ABOUT: &str = "\
echolab's load generator for TCP echo servers.

The main form mirrors seed 000's echo-kp-bench: CONNS connections start together (a barrier) and
each makes ROUNDS requests of a 12-byte \"hello echo\\r\\n\" payload, verifying every echo. Each
request carries its connection's id and sequence number in place of \"hello echo\", so an echo
of another connection's or an earlier request's bytes fails (foreign_echo) rather than passes.

  --mode short  every request is connect, send, receive, close. Latency is connect to close:
                it includes the TCP handshake and teardown (about 2 RTT) and the connect(2) and
                close(2) calls, which is what seed 000 set out to measure. The client closes
                first and keeps a TIME_WAIT per request (see --linger0).
  --mode long   each connection connects once (before the barrier), then makes ROUNDS
                send/receive round trips. Latency is send to receive: the application RTT.

Closed loop by default (a connection sends its next request when the previous reply is in);
--rate R makes it open loop at R requests/s in total, with latency measured from each request's
intended send time so that a stalled server is not hidden (coordinated omission, as in wrk2).

Output: QPS, P50/P90/P99 in µs and failures by kind; --hist adds a histogram, --syscalls the
client's system calls (count and time, seed 002's strace question without ptrace), --json the
full BenchReport with an HdrHistogram that repetitions can merge.

Exit status: 0 when requests succeeded; 1 on a failure, when no request succeeded (the report
still prints, with no latency: null in --json, — in the table), or with --fail-on-error when any
failed; 2 on bad input; 130 or 143 when SIGINT or SIGTERM cut the run short.";

const EXAMPLES: &str = "\
Examples:
  # seed 000 / exp 3.1: short vs long, 100 connections x 10 rounds
  echo-bench 127.0.0.1 9988 100 10 --mode short
  echo-bench 127.0.0.1 9988 100 10 --mode long --hist --syscalls
  # seed 003: a connection-count scan point, timed, with warm-up, as JSON
  echo-bench 127.0.0.1 9988 5000 --duration 10s --warmup 2s --mode long --json
  # open loop at 20k requests/s over 100 connections
  echo-bench 127.0.0.1 9988 100 --duration 10s --rate 20000
  # 50,000 long connections over 4 client processes (each within its descriptor limit)
  echo-bench 127.0.0.1 9988 50000 --duration 30s --processes 4
  # seed 004: deadlink (time to establish 1000 connections) and activelink (1 KiB replies)
  echo-bench connect-storm 127.0.0.1 9988 1000
  echo-bench sustain 127.0.0.1 9988 800 --reply-bytes 1024 --duration 60s --json";

/// The parsed command line.
#[derive(Debug, Parser)]
#[command(
    name = "echo-bench",
    version,
    about = ABOUT,
    long_about = LONG_ABOUT,
    after_help = EXAMPLES,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    // "-1" reaches the value parser (and its range message) instead of reading as a flag.
    allow_negative_numbers = true
)]
pub struct Cli {
    /// A seed-004 experiment instead of the short/long run.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// The short/long run (when no subcommand is given).
    #[command(flatten)]
    pub run: RunArgs,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Seed 004's "deadlink": open N connections as fast as the machine allows, prove each
    /// with a 1-byte echo, report the time until all are established, connect-latency
    /// percentiles and failures by kind. All N stay open until the last is established.
    ConnectStorm(StormArgs),
    /// Seed 004's "activelink": N long connections, each looping a small request and a
    /// --reply-bytes reply (from `echo-server --reply-bytes N`), for --duration, with one
    /// interval record per --interval in --json (to pair with server CPU and memory).
    Sustain(SustainArgs),
}

/// Connection usage of the main form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// connect, send, receive, close per request; latency connect to close.
    Short,
    /// connect once, ROUNDS send/receive round trips; latency send to receive.
    Long,
}

/// Arguments of the main (short/long) form.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Server host name or IP address.
    #[arg(required = true)]
    pub host: Option<String>,
    /// Server TCP port.
    #[arg(required = true)]
    pub port: Option<u16>,
    /// Concurrent connections (seed 003 scans 100..5000), at most 1,000,000.
    #[arg(required = true, value_parser = clap::value_parser!(u64).range(1..=MAX_CONNS))]
    pub conns: Option<u64>,
    /// Requests per connection, at most 10^9; give this or --duration.
    #[arg(required_unless_present = "duration", conflicts_with = "duration",
          value_parser = clap::value_parser!(u64).range(1..=MAX_ROUNDS))]
    pub rounds: Option<u64>,
    /// short: connect/send/recv/close per request; long: one connection, ROUNDS round trips.
    #[arg(long, value_enum, default_value_t = Mode::Long)]
    pub mode: Mode,
    /// Request size in bytes (at most 64 MiB): the seed payload "hello echo\r\n" repeated and
    /// cut to length, each 12-byte block with room for it stamped with the connection and
    /// request (none under 10).
    #[arg(long, default_value_t = 12, value_parser = clap::value_parser!(u64).range(1..=MAX_MESSAGE_BYTES))]
    pub payload_size: u64,
    /// Run for this long instead of ROUNDS (e.g. "10s", at most 24h); adds per-second records
    /// to --json.
    /// Ctrl-C (SIGINT) or SIGTERM ends the window early: the report of what was measured is
    /// printed, marked interrupted, with rates over the shorter window, and the exit status
    /// is 130 (143 for SIGTERM); a second signal exits at once, without a report.
    #[arg(long, value_parser = limits::nonzero_duration)]
    pub duration: Option<Duration>,
    /// Open loop: send R requests/s in total (from one a day, 0.0000116, to 10,000,000),
    /// latency from each intended send time.
    #[arg(long, value_name = "R")]
    pub rate: Option<Rate>,
    /// Split the connections over N client processes started together, and merge their
    /// reports (histograms, counts, CPU, memory) into one: for more connections than one
    /// process may open (RLIMIT_NOFILE), as distributed load generators do.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u64).range(1..=256))]
    pub processes: u64,
    /// Internal: run as shard K of N (0-based) of a `--processes N` run.
    #[arg(long, hide = true, value_name = "K/N", value_parser = crate::shard::parse_shard)]
    pub shard: Option<crate::shard::Shard>,
    /// Warm-up.
    #[command(flatten)]
    pub load: LoadArgs,
    /// Engine, threads, deadlines and socket options (an experiment's `bench:`).
    #[command(flatten)]
    pub client: ClientOpts,
    /// Socket and thread choices of echo-bench's own.
    #[command(flatten)]
    pub sock: SocketArgs,
    /// Output options.
    #[command(flatten)]
    pub out: OutputArgs,
}

/// `connect-storm HOST PORT N`.
#[derive(Debug, Args)]
pub struct StormArgs {
    /// Server host name or IP address.
    pub host: String,
    /// Server TCP port.
    pub port: u16,
    /// Connections to establish (each needs a file descriptor and an ephemeral port), at most
    /// 1,000,000.
    #[arg(value_parser = clap::value_parser!(u64).range(1..=MAX_CONNS))]
    pub n: u64,
    /// Engine (event only), threads, deadlines and socket options (an experiment's `bench:`).
    #[command(flatten)]
    pub client: ClientOpts,
    /// Socket and thread choices of echo-bench's own.
    #[command(flatten)]
    pub sock: SocketArgs,
    /// Output options.
    #[command(flatten)]
    pub out: OutputArgs,
}

/// `sustain HOST PORT N`.
#[derive(Debug, Args)]
pub struct SustainArgs {
    /// Server host name or IP address.
    pub host: String,
    /// Server TCP port.
    pub port: u16,
    /// Concurrent long connections, at most 1,000,000.
    #[arg(value_parser = clap::value_parser!(u64).range(1..=MAX_CONNS))]
    pub n: u64,
    /// Bytes the server answers per request (start it with the same `--reply-bytes`), at
    /// most 64 MiB.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..=MAX_MESSAGE_BYTES))]
    pub reply_bytes: u64,
    /// How long to sustain the load. Ctrl-C (SIGINT) or SIGTERM ends it early: the report of
    /// what was measured is printed, marked interrupted, and the exit status is 130 (143 for
    /// SIGTERM); a second signal exits at once, without a report. At most 24h.
    #[arg(long, default_value = "60s", value_parser = limits::nonzero_duration)]
    pub duration: Duration,
    /// Length of one interval record (above 0s, at most 24h).
    #[arg(long, default_value = "1s", value_parser = limits::nonzero_duration)]
    pub interval: Duration,
    /// Open loop: send R requests/s in total (from one a day, 0.0000116, to 10,000,000),
    /// latency from each intended send time.
    #[arg(long, value_name = "R")]
    pub rate: Option<Rate>,
    /// Warm-up.
    #[command(flatten)]
    pub load: LoadArgs,
    /// Engine, threads, deadlines and socket options (an experiment's `bench:`).
    #[command(flatten)]
    pub client: ClientOpts,
    /// Socket and thread choices of echo-bench's own.
    #[command(flatten)]
    pub sock: SocketArgs,
    /// Output options.
    #[command(flatten)]
    pub out: OutputArgs,
}

/// Warm-up: launcher-owned (an experiment's top-level `warmup`), so not in [`ClientOpts`].
#[derive(Debug, Args)]
pub struct LoadArgs {
    /// Run the same load this long first and discard its results (e.g. "2s", at most 24h).
    #[arg(long, default_value = "0s", value_parser = limits::duration)]
    pub warmup: Duration,
}

/// Socket and thread choices that only echo-bench's own runs and the launcher's CPU plan set;
/// the options an experiment may set are [`ClientOpts`].
#[derive(Debug, Args)]
pub struct SocketArgs {
    /// Whether the server under test runs on this client's CPUs, for the automatic --threads:
    /// auto (yes when the target is an address of this host), shared (e.g. another namespace
    /// on the same cores) or separate (CPUs of its own). echolab-up passes it from its CPU plan.
    #[arg(long, value_enum, default_value_t = ServerCpus::Auto)]
    pub server_cpus: ServerCpus,
    /// Local addresses to connect from: auto (16 loopback addresses, 127.0.0.1-16, to an IPv4
    /// loopback target for short connections and connect-storm without --linger0, so that
    /// TIME_WAIT ports do not make every connect(2) search the port range, and for more
    /// connections than 80% of the ephemeral ports; else the kernel's), kernel (one, the
    /// route's), or a list of local addresses and IPv4 ranges (10.0.0.2,10.0.0.5-10.0.0.9).
    /// Connection i uses address i mod N; --json lists them in source_addrs.
    #[arg(long, value_name = "auto|kernel|LIST", default_value = "auto",
          value_parser = crate::sources::parse_choice)]
    pub source_addrs: SourceChoice,
    /// Short connections' sockets: fresh (socket(2) ... close(2) per request, as neper's
    /// tcp_crr) or reuse (each connection re-connects its one socket after connect(2) with
    /// AF_UNSPEC, which sends the RST that close(2) with --linger0 would: the server sees the
    /// same packets, the client skips a socket's creation and teardown per request). auto:
    /// reuse with --linger0 on the event engine in closed loop (no --rate), else fresh; --json
    /// says which in short_sockets and short_sockets_reason. Short connections only.
    #[arg(long, value_enum, default_value_t = ShortSockets::Auto)]
    pub short_sockets: ShortSockets,
}

/// What to print and how to exit.
#[derive(Debug, Args)]
pub struct OutputArgs {
    /// Print the BenchReport as JSON (only that) on stdout.
    #[arg(long)]
    pub json: bool,
    /// Add a latency histogram (text bars) to the human output.
    #[arg(long)]
    pub hist: bool,
    /// Add the client's system calls (count, total time) to the human output.
    #[arg(long)]
    pub syscalls: bool,
    /// Exit with status 1 when any request failed (default: failures only show in the report).
    #[arg(long)]
    pub fail_on_error: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use echolab_core::cli::one_line_error;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("echo-bench").chain(args.iter().copied()))
    }

    #[test]
    fn seed_form_and_subcommands_parse() {
        let c = parse(&["127.0.0.1", "9988", "100", "10", "--mode", "short"]).unwrap();
        assert!(c.command.is_none());
        assert_eq!(
            (c.run.conns, c.run.rounds, c.run.mode),
            (Some(100), Some(10), Mode::Short)
        );
        assert!(c.run.client.nodelay);
        let c = parse(&["connect-storm", "127.0.0.1", "9988", "200"]).unwrap();
        assert!(matches!(
            c.command,
            Some(Command::ConnectStorm(StormArgs { n: 200, .. }))
        ));
        let c = parse(&[
            "sustain",
            "h",
            "1",
            "5",
            "--duration",
            "2s",
            "--nodelay=false",
        ])
        .unwrap();
        match c.command {
            Some(Command::Sustain(s)) => {
                assert_eq!(
                    (s.reply_bytes, s.duration, s.client.nodelay),
                    (1024, Duration::from_secs(2), false)
                )
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn rounds_or_duration_but_not_both() {
        assert!(parse(&["h", "1", "10", "--duration", "1s"]).is_ok());
        assert!(parse(&["h", "1", "10"]).is_err());
        assert!(parse(&["h", "1", "10", "5", "--duration", "1s"]).is_err());
    }

    #[test]
    fn bad_values_give_one_line_naming_flag_and_value() {
        let e = parse(&["h", "1", "10", "--duration", "10x"]).unwrap_err();
        let line = one_line_error(&e.render().to_string());
        assert!(
            line.contains("--duration") && line.contains("10x"),
            "{line}"
        );
        assert!(!line.contains('\n'));
        let line = one_line_error(&parse(&["h", "1"]).unwrap_err().render().to_string());
        assert!(line.contains("<CONNS>"), "{line}");
    }
}
