//! echo-bench's whole command line, defined once: the clap structs echo-bench parses its
//! arguments with are the typed commands the launcher fills ([`super::BenchCmd`]) and turns
//! into an argv; `parse(argv(x)) == x` holds the two directions together (this module's
//! tests). The main form is seed 000's `echo-bench HOST PORT CONNS ROUNDS --mode short|long`;
//! `connect-storm` and `sustain` are seed 004's deadlink and activelink.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use super::{Argv, ClientOpts, ServerCpus};
use crate::limits::{self, Rate, MAX_CONNS, MAX_MESSAGE_BYTES, MAX_ROUNDS};
use crate::shard::{parse_shard, Shard};
use crate::units::{format_duration, Dur};

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

/// echo-bench's default request size, the seed's 12-byte `"hello echo\r\n"`.
pub const DEFAULT_PAYLOAD_BYTES: u64 = 12;

/// echo-bench's default `--processes`: one.
const DEFAULT_PROCESSES: u64 = 1;

/// At most this many addresses in a `--source-addrs` list (a range expands to its members).
pub const MAX_SOURCE_ADDRS: usize = 4096;

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
pub struct BenchCli {
    /// A seed-004 experiment instead of the short/long run.
    #[command(subcommand)]
    pub command: Option<BenchSubcommand>,
    /// The short/long run (when no subcommand is given).
    #[command(flatten)]
    pub run: RunArgs,
}

impl BenchCli {
    /// The command this line gives: the subcommand, or else the short/long form.
    pub fn into_cmd(self) -> BenchCmd {
        match self.command {
            None => BenchCmd::Run(self.run),
            Some(BenchSubcommand::ConnectStorm(a)) => BenchCmd::ConnectStorm(a),
            Some(BenchSubcommand::Sustain(a)) => BenchCmd::Sustain(a),
        }
    }
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum BenchSubcommand {
    /// Seed 004's "deadlink": open N connections as fast as the machine allows, prove each
    /// with a 1-byte echo, report the time until all are established, connect-latency
    /// percentiles and failures by kind. All N stay open until the last is established.
    ConnectStorm(StormArgs),
    /// Seed 004's "activelink": N long connections, each looping a small request and a
    /// --reply-bytes reply (from `echo-server --reply-bytes N`), for --duration, with one
    /// interval record per --interval in --json (to pair with server CPU and memory).
    Sustain(SustainArgs),
}

/// `--mode` of the main form: how it uses connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, ValueEnum)]
pub enum RunMode {
    /// connect, send, receive, close per request; latency connect to close.
    Short,
    /// connect once, ROUNDS send/receive round trips; latency send to receive.
    Long,
}

/// Arguments of the main (short/long) form.
#[derive(Debug, Clone, PartialEq, Args)]
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
    #[arg(long, value_enum, default_value_t = RunMode::Long)]
    pub mode: RunMode,
    /// Request size in bytes (at most 64 MiB): the seed payload "hello echo\r\n" repeated and
    /// cut to length, each 12-byte block with room for it stamped with the connection and
    /// request (none under 10).
    #[arg(long, default_value_t = DEFAULT_PAYLOAD_BYTES,
          value_parser = clap::value_parser!(u64).range(1..=MAX_MESSAGE_BYTES))]
    pub payload_size: u64,
    /// Run for this long instead of ROUNDS (e.g. "10s", at most 24h); adds per-second records
    /// to --json.
    /// Ctrl-C (SIGINT) or SIGTERM ends the window early: the report of what was measured is
    /// printed, marked interrupted, with rates over the shorter window, and the exit status
    /// is 130 (143 for SIGTERM); a second signal exits at once, without a report.
    #[arg(long, value_parser = limits::nonzero_duration)]
    pub duration: Option<Duration>,
    /// Split the connections over N client processes started together, and merge their
    /// reports (histograms, counts, CPU, memory) into one: for more connections than one
    /// process may open (RLIMIT_NOFILE), as distributed load generators do.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_PROCESSES,
          value_parser = clap::value_parser!(u64).range(1..=256))]
    pub processes: u64,
    /// Internal: run as shard K of N (0-based) of a `--processes N` run.
    #[arg(long, hide = true, value_name = "K/N", value_parser = parse_shard)]
    pub shard: Option<Shard>,
    /// Open loop and warm-up.
    #[command(flatten)]
    pub pacing: Pacing,
    /// What every form shares.
    #[command(flatten)]
    pub shared: SharedArgs,
}

impl RunArgs {
    /// `HOST PORT CONNS` against `target` in `mode`, every other argument at echo-bench's
    /// default; set `rounds` or `duration` before use (echo-bench takes exactly one).
    pub fn new(target: SocketAddr, conns: u64, mode: RunMode) -> RunArgs {
        RunArgs {
            host: Some(target.ip().to_string()),
            port: Some(target.port()),
            conns: Some(conns),
            rounds: None,
            mode,
            payload_size: DEFAULT_PAYLOAD_BYTES,
            duration: None,
            processes: DEFAULT_PROCESSES,
            shard: None,
            pacing: defaults(),
            shared: defaults(),
        }
    }
}

/// `connect-storm HOST PORT N`.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct StormArgs {
    /// Server host name or IP address.
    pub host: String,
    /// Server TCP port.
    pub port: u16,
    /// Connections to establish (each needs a file descriptor and an ephemeral port), at most
    /// 1,000,000.
    #[arg(value_parser = clap::value_parser!(u64).range(1..=MAX_CONNS))]
    pub n: u64,
    /// What every form shares (the engine must be `event`).
    #[command(flatten)]
    pub shared: SharedArgs,
}

impl StormArgs {
    /// `connect-storm HOST PORT N` against `target`, every other argument at echo-bench's
    /// default.
    pub fn new(target: SocketAddr, n: u64) -> StormArgs {
        match parse_defaults("connect-storm") {
            BenchCmd::ConnectStorm(a) => StormArgs {
                host: target.ip().to_string(),
                port: target.port(),
                n,
                ..a
            },
            other => unreachable!("connect-storm parsed as {other:?}"),
        }
    }
}

/// `sustain HOST PORT N`.
#[derive(Debug, Clone, PartialEq, Args)]
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
    /// Open loop and warm-up.
    #[command(flatten)]
    pub pacing: Pacing,
    /// What every form shares.
    #[command(flatten)]
    pub shared: SharedArgs,
}

impl SustainArgs {
    /// `sustain HOST PORT N` against `target`, every other argument at echo-bench's default.
    pub fn new(target: SocketAddr, n: u64) -> SustainArgs {
        match parse_defaults("sustain") {
            BenchCmd::Sustain(a) => SustainArgs {
                host: target.ip().to_string(),
                port: target.port(),
                n,
                ..a
            },
            other => unreachable!("sustain parsed as {other:?}"),
        }
    }
}

/// `SUBCOMMAND h 1 1` as echo-bench parses it: the subcommand's defaults, in one place (its
/// clap attributes).
fn parse_defaults(subcommand: &str) -> BenchCmd {
    BenchCli::try_parse_from(["echo-bench", subcommand, "h", "1", "1"])
        .expect("a subcommand with its positionals parses")
        .into_cmd()
}

/// Open loop and warm-up, of the forms that make requests for a while (the main form and
/// `sustain`). The warm-up is launcher-owned (an experiment's top-level `warmup`), so not in
/// [`ClientOpts`].
#[derive(Debug, Clone, PartialEq, Args)]
pub struct Pacing {
    /// Open loop: send R requests/s in total (from one a day, 0.0000116, to 10,000,000),
    /// latency from each intended send time.
    #[arg(long, value_name = "R")]
    pub rate: Option<Rate>,
    /// Run the same load this long first and discard its results (e.g. "2s", at most 24h).
    #[arg(long, default_value = "0s", value_parser = limits::duration)]
    pub warmup: Duration,
}

/// What every form takes: the options an experiment sets, echo-bench's own socket choices,
/// and output.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct SharedArgs {
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

/// Socket and thread choices that only echo-bench's own runs and the launcher's CPU plan set;
/// the options an experiment may set are [`ClientOpts`].
#[derive(Debug, Clone, PartialEq, Args)]
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
          value_parser = parse_source_choice)]
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
#[derive(Debug, Clone, PartialEq, Args)]
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

/// `--short-sockets`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ShortSockets {
    /// reuse with --linger0 on the event engine in closed loop, else fresh.
    Auto,
    /// socket(2) ... close(2) for every request.
    Fresh,
    /// One socket per connection, re-connected after connect(2) with AF_UNSPEC (needs
    /// --linger0 and the event engine).
    Reuse,
}

/// What `--source-addrs` asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceChoice {
    /// Loopback addresses of their own when the target is IPv4 loopback and either the load
    /// connects per request (short, connect-storm) with closes that keep TIME_WAIT (no
    /// `--linger0`), or the run has more connections than one address's ephemeral ports can
    /// hold; otherwise the kernel's choice (echo-bench's `sources` module has the rule, its
    /// figures and why).
    Auto,
    /// The kernel's choice: one source address, the route's.
    Kernel,
    /// These addresses, connection i using address i mod N.
    List(Vec<IpAddr>),
}

/// Parses `--source-addrs`: `auto`, `kernel`, or a comma-separated list of addresses and
/// IPv4 ranges `A-B` (inclusive), e.g. `127.0.0.1-127.0.0.8` or `10.0.0.2,10.0.0.3`.
///
/// # Errors
/// An item that is not an address or range, a range that runs backwards or mixes families,
/// or more than [`MAX_SOURCE_ADDRS`] addresses; the message names the item.
pub fn parse_source_choice(text: &str) -> Result<SourceChoice, String> {
    match text {
        "auto" => return Ok(SourceChoice::Auto),
        "kernel" => return Ok(SourceChoice::Kernel),
        _ => {}
    }
    let mut addrs = Vec::new();
    for item in text.split(',') {
        let item = item.trim();
        let bad = |why: &str| format!("{item:?} in --source-addrs: {why}");
        match item.split_once('-') {
            Some((a, b)) => {
                let (a, b) = match (a.parse::<Ipv4Addr>(), b.parse::<Ipv4Addr>()) {
                    (Ok(a), Ok(b)) => (u32::from(a), u32::from(b)),
                    _ => return Err(bad("a range is two IPv4 addresses, FIRST-LAST")),
                };
                if a > b {
                    return Err(bad("the range runs backwards"));
                }
                if (b - a) as usize >= MAX_SOURCE_ADDRS {
                    return Err(bad(&format!("more than {MAX_SOURCE_ADDRS} addresses")));
                }
                addrs.extend((a..=b).map(|n| IpAddr::V4(Ipv4Addr::from(n))));
            }
            None => addrs.push(item.parse::<IpAddr>().map_err(|_| {
                bad("expected auto, kernel, or IP addresses and IPv4 ranges FIRST-LAST")
            })?),
        }
        if addrs.len() > MAX_SOURCE_ADDRS {
            return Err(format!(
                "--source-addrs names more than {MAX_SOURCE_ADDRS} addresses"
            ));
        }
    }
    Ok(SourceChoice::List(addrs))
}

impl fmt::Display for SourceChoice {
    /// The `--source-addrs` value [`parse_source_choice`] reads back: `auto`, `kernel`, or
    /// the addresses comma-separated.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SourceChoice::Auto => f.write_str("auto"),
            SourceChoice::Kernel => f.write_str("kernel"),
            SourceChoice::List(addrs) => {
                let text: Vec<String> = addrs.iter().map(IpAddr::to_string).collect();
                f.write_str(&text.join(","))
            }
        }
    }
}

/// A flattened group's values when none of its flags is given (clap's defaults).
fn defaults<T: Args + clap::FromArgMatches>() -> T {
    let command = T::augment_args(clap::Command::new("defaults").no_binary_name(true));
    let matches = command
        .try_get_matches_from(std::iter::empty::<String>())
        .expect("a flattened group parses with none of its flags");
    T::from_arg_matches(&matches).expect("a flattened group's defaults")
}

impl Default for Pacing {
    /// Closed loop, no warm-up.
    fn default() -> Self {
        defaults()
    }
}

impl Default for SharedArgs {
    /// echo-bench's defaults.
    fn default() -> Self {
        defaults()
    }
}

/// A `ValueEnum`'s name on the command line (`short`, `reuse`).
fn value_name(v: &impl ValueEnum) -> String {
    v.to_possible_value()
        .expect("no variant is skipped")
        .get_name()
        .to_string()
}

impl fmt::Display for RunMode {
    /// The `--mode` value (`short`, `long`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&value_name(self))
    }
}

impl fmt::Display for ShortSockets {
    /// The `--short-sockets` value (`auto`, `fresh`, `reuse`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&value_name(self))
    }
}

/// One echo-bench command line: the clap structs echo-bench parses (above), so that a field
/// of them is a flag of echo-bench and a part of the launcher's argv at once.
#[derive(Debug, Clone, PartialEq)]
pub enum BenchCmd {
    /// The short/long form.
    Run(RunArgs),
    /// `connect-storm`.
    ConnectStorm(StormArgs),
    /// `sustain`.
    Sustain(SustainArgs),
}

impl BenchCmd {
    /// The program, as named in the image's bin directory and the workspace's target dir.
    pub const PROGRAM: &'static str = super::bench::PROGRAM;

    /// The arguments, without the program name: the positionals, the main form's `--mode` and
    /// sustain's `--duration` always (what a reader of the line looks for first), then each
    /// flag whose value differs from echo-bench's default, so that echo-bench parses back this
    /// very command.
    pub fn argv(&self) -> Vec<String> {
        let mut a = Argv::default();
        match self {
            BenchCmd::Run(c) => {
                a.opt_arg(c.host.as_deref())
                    .opt_arg(c.port)
                    .opt_arg(c.conns)
                    .opt_arg(c.rounds)
                    .val("mode", c.mode)
                    .opt("duration", c.duration.map(format_duration))
                    .changed("payload-size", c.payload_size, DEFAULT_PAYLOAD_BYTES)
                    .changed("processes", c.processes, DEFAULT_PROCESSES)
                    .opt("shard", c.shard);
                pacing(&mut a, &c.pacing);
                shared(&mut a, &c.shared);
            }
            BenchCmd::ConnectStorm(c) => {
                a.arg("connect-storm").arg(&c.host).arg(c.port).arg(c.n);
                shared(&mut a, &c.shared);
            }
            BenchCmd::Sustain(c) => {
                let defaults = SustainArgs::new(SocketAddr::from(([127, 0, 0, 1], 1)), 1);
                a.arg("sustain").arg(&c.host).arg(c.port).arg(c.n);
                a.val("duration", Dur(c.duration))
                    .changed("reply-bytes", c.reply_bytes, defaults.reply_bytes)
                    .changed("interval", Dur(c.interval), Dur(defaults.interval));
                pacing(&mut a, &c.pacing);
                shared(&mut a, &c.shared);
            }
        }
        a.done()
    }

    /// What every form shares, for the launcher's setters (`--json`, the CPU plan's
    /// `--server-cpus`, an experiment's `bench:`).
    pub fn shared_mut(&mut self) -> &mut SharedArgs {
        match self {
            BenchCmd::Run(c) => &mut c.shared,
            BenchCmd::ConnectStorm(c) => &mut c.shared,
            BenchCmd::Sustain(c) => &mut c.shared,
        }
    }
}

/// The flags of [`Pacing`] away from their defaults.
fn pacing(a: &mut Argv, p: &Pacing) {
    a.opt("rate", p.rate)
        .changed("warmup", Dur(p.warmup), Dur(Duration::ZERO));
}

/// The flags of [`SharedArgs`] away from their defaults.
fn shared(a: &mut Argv, s: &SharedArgs) {
    let d = SharedArgs::default();
    a.changed("server-cpus", s.sock.server_cpus, d.sock.server_cpus)
        .changed("source-addrs", &s.sock.source_addrs, &d.sock.source_addrs)
        .changed("short-sockets", s.sock.short_sockets, d.sock.short_sockets)
        .options(&s.client)
        .flag("json", s.out.json)
        .flag("hist", s.out.hist)
        .flag("syscalls", s.out.syscalls)
        .flag("fail-on-error", s.out.fail_on_error);
}

impl BenchCmd {
    /// How long the run is planned to take, warm-up and window (`--warmup` + `--duration`),
    /// when it is timed; `None` when it runs until a count is reached (ROUNDS, a connect
    /// storm).
    pub fn planned(&self) -> Option<std::time::Duration> {
        match self {
            BenchCmd::Run(c) => Some(c.duration? + c.pacing.warmup),
            BenchCmd::Sustain(c) => Some(c.duration + c.pacing.warmup),
            BenchCmd::ConnectStorm(_) => None,
        }
    }

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
        run.shared.out.json = true;
        run.shard = Some(shard);
        Ok(BenchCmd::Run(run).argv())
    }
}

#[cfg(test)]
#[path = "bench_cli_tests.rs"]
mod tests;
