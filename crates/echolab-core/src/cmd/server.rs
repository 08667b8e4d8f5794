//! echo-server: its I/O models, its command line, its readiness line and its stats line.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::{tail, Argv, Options};
use crate::stats::ServerStats;
use crate::units::{ByteSize, Dur};

/// The I/O models echo-server implements (`--model`), the one list of them: experiments,
/// run records, the launcher and echo-server's own clap all use this enum. Each model serves
/// the same echo protocol (`echolab_core::protocol`) so that an experiment varies one thing
/// only. Serde and clap names are the kebab-case ones of [`ServerModel::name`].
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum ServerModel {
    /// select(2), one thread; descriptors >= FD_SETSIZE (1024) are closed and counted.
    Select,
    /// poll(2), one thread.
    Poll,
    /// epoll, level-triggered, one read per readiness event (the seeds' "LT server").
    EpollLt,
    /// epoll, edge-triggered, reads and accepts drained to EAGAIN (the seeds' "ET server").
    EpollEt,
    /// One thread per connection, blocking I/O.
    Thread,
    /// --workers processes sharing one listening socket, each with its own epoll (ET);
    /// --exclusive adds EPOLLEXCLUSIVE against the thundering herd.
    Prefork,
    /// --workers reactors, each with its own SO_REUSEPORT listener and epoll (ET).
    Reuseport,
    /// io_uring: multishot accept/recv with provided buffers where the kernel has them.
    Uring,
    /// The tokio runtime (multi-threaded, --workers threads), the baseline a user reaches for.
    Tokio,
}

impl ServerModel {
    /// Every model, in `--help` order.
    pub fn all() -> &'static [ServerModel] {
        <Self as clap::ValueEnum>::value_variants()
    }

    /// Every model's name, in declaration order (indexed by the discriminant): the one
    /// spelling of the names besides serde's and clap's kebab-case derivation, which a test
    /// holds to these.
    pub const NAMES: [&'static str; 9] = [
        "select",
        "poll",
        "epoll-lt",
        "epoll-et",
        "thread",
        "prefork",
        "reuseport",
        "uring",
        "tokio",
    ];

    /// The name as typed on the command line and in experiment files (`"epoll-et"`).
    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    /// Whether `--workers` applies (otherwise the model has exactly one reactor thread).
    pub fn uses_workers(self) -> bool {
        matches!(
            self,
            ServerModel::Prefork | ServerModel::Reuseport | ServerModel::Tokio
        )
    }
}

impl fmt::Display for ServerModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A model name echo-server does not have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownModel(
    /// The name as given.
    pub String,
);

impl fmt::Display for UnknownModel {
    /// `unknown server model "epol-et" (echo-server has select, poll, ...)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = ServerModel::all().iter().map(|m| m.name()).collect();
        write!(
            f,
            "unknown server model {:?} (echo-server has {})",
            self.0,
            names.join(", ")
        )
    }
}

impl std::error::Error for UnknownModel {}

impl FromStr for ServerModel {
    type Err = UnknownModel;

    /// Parses a model name.
    ///
    /// # Errors
    /// [`UnknownModel`], naming the value and every model there is.
    fn from_str(s: &str) -> Result<Self, UnknownModel> {
        Self::all()
            .iter()
            .copied()
            .find(|m| m.name() == s)
            .ok_or_else(|| UnknownModel(s.to_string()))
    }
}

/// echo-server's options that an experiment may set, defined once (the [`Options`] contract):
/// echo-server's clap flattens this struct (its `--help` is these docstrings), an experiment
/// file's `server:` block is this struct read from YAML, and the launcher's argv is produced
/// from it. A field added here is a flag of echo-server, a key of `server:` and a part of every
/// argv the launcher builds; `parse(argv(x)) == x` holds it (this module's tests).
#[derive(Debug, Clone, PartialEq, clap::Args, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerOpts {
    /// listen(2) backlog; the kernel caps it at net.core.somaxconn.
    #[arg(long, default_value_t = 4096,
          value_parser = clap::value_parser!(u64).range(1..=i32::MAX as u64))]
    pub backlog: u64,
    /// Per-connection read buffer, bytes (e.g. 4096, 16KiB; at most 64MiB).
    #[arg(long, default_value = "16KiB", value_parser = read_buffer_size)]
    pub read_buf: ByteSize,
    /// Workers (processes for prefork, reactors for reuseport, threads for tokio).
    /// Default: the number of CPUs; at most 1024. Ignored by single-reactor models.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=crate::limits::MAX_WORKERS))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workers: Option<u64>,
    /// prefork only: register the shared listener with EPOLLEXCLUSIVE (an experiment's
    /// `exclusive: true` applies to its prefork cells).
    #[arg(long)]
    pub exclusive: bool,
    /// TCP_NODELAY on accepted connections, as most servers set it; --nodelay=false leaves
    /// Nagle's algorithm on (a reply written while an earlier one is unacknowledged then waits
    /// for the client's delayed ACK, ~40 ms).
    #[arg(long, default_value_t = true, num_args = 0..=1, require_equals = true,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    pub nodelay: bool,
    /// Time each system call of the I/O path (clock_gettime(CLOCK_MONOTONIC) before and after
    /// it) and report the total per call in the stats line's `syscalls.*.total_ns`: what
    /// seed 000 §4 multiplies by calls per request for a request's kernel cost. Two clock
    /// reads per call (tens of ns each through the vDSO) add to what is measured, so a cell
    /// that times its calls is a low-load probe, never a saturated one. Models select, poll,
    /// epoll-lt, epoll-et, prefork and reuseport; off: the calls are counted only.
    #[arg(long)]
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub time_syscalls: bool,
}

impl Default for ServerOpts {
    /// clap's defaults, so that a YAML key left out and a flag left out mean the same.
    fn default() -> Self {
        <Self as Options>::parse(&[]).expect("echo-server's option defaults parse")
    }
}

impl Options for ServerOpts {
    const PROGRAM: &'static str = ServerCmd::PROGRAM;
}

/// The largest `--read-buf` echo-server takes: [`crate::limits::MAX_MESSAGE_BYTES`].
const MAX_READ_BUF: u64 = crate::limits::MAX_MESSAGE_BYTES;

fn read_buffer_size(s: &str) -> Result<ByteSize, String> {
    let b: ByteSize = s
        .parse()
        .map_err(|e: crate::units::UnitError| e.to_string())?;
    match b.0 {
        0 => Err("the read buffer must be at least 1 byte".into()),
        n if n > MAX_READ_BUF => Err(format!("{s:?} is larger than the 64 MiB limit")),
        _ => Ok(b),
    }
}

/// `echo-server --model M --bind ADDR --port PORT [options]`: the flags only the launcher
/// sets, one field each (`None` leaves echo-server's default), and the experiment's
/// [`ServerOpts`].
#[derive(Debug, Clone, PartialEq)]
pub struct ServerCmd {
    /// `--model`.
    pub model: ServerModel,
    /// `--bind`: the address to listen on.
    pub bind: IpAddr,
    /// `--port`: 0 lets the kernel choose (the readiness line names it).
    pub port: u16,
    /// `--reply-bytes`: answer each `\n`-terminated request with this many bytes.
    pub reply_bytes: Option<u64>,
    /// `--stats-interval`: print a ServerStats line this often.
    pub stats_interval: Option<Dur>,
    /// The options an experiment sets.
    pub opts: ServerOpts,
}

impl ServerCmd {
    /// The program, as named in the image's bin directory and the workspace's target dir.
    pub const PROGRAM: &'static str = "echo-server";

    /// `model` listening on `bind:port`, every other option at echo-server's default.
    pub fn new(model: ServerModel, bind: IpAddr, port: u16) -> Self {
        ServerCmd {
            model,
            bind,
            port,
            reply_bytes: None,
            stats_interval: None,
            opts: ServerOpts::default(),
        }
    }

    /// The arguments, without the program name.
    pub fn argv(&self) -> Vec<String> {
        Argv::default()
            .val("model", self.model)
            .val("bind", self.bind)
            .val("port", self.port)
            .opt("reply-bytes", self.reply_bytes)
            .opt("stats-interval", self.stats_interval)
            .options(&self.opts)
            .done()
    }
}

/// echo-server's readiness line on stderr, printed once the socket accepts connections:
/// `echo-server listening on 127.0.0.1:41234 model=epoll-et workers=1 pid=7`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ready {
    /// The bound address (port 0 resolved).
    pub addr: SocketAddr,
    /// The model serving (a [`ServerModel`]'s name), or a custom server's name
    /// ([`super::CustomServerCmd`]).
    pub model: String,
    /// Workers (1 for the single-reactor models).
    pub workers: usize,
    /// The server's pid in its own pid namespace.
    pub pid: u32,
}

impl Ready {
    /// How the line starts: what a launcher waits for on echo-server's stderr.
    pub const PREFIX: &'static str = "echo-server listening on ";

    /// Parses a readiness line (surrounding whitespace ignored); `None` for any other line,
    /// including one with the prefix whose fields are missing or malformed.
    pub fn parse(line: &str) -> Option<Ready> {
        let rest = line.trim().strip_prefix(Self::PREFIX)?;
        let mut words = rest.split_whitespace();
        let mut field = |key: &str| words.next()?.strip_prefix(key);
        let addr = field("")?.parse().ok()?;
        let model = field("model=")?.to_string();
        if model.is_empty() {
            return None;
        }
        let workers = field("workers=")?.parse().ok()?;
        let pid = field("pid=")?.parse().ok()?;
        if words.next().is_some() {
            return None;
        }
        Some(Ready {
            addr,
            model,
            workers,
            pid,
        })
    }
}

impl fmt::Display for Ready {
    /// The line without a newline.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}{} model={} workers={} pid={}",
            Self::PREFIX,
            self.addr,
            self.model,
            self.workers,
            self.pid
        )
    }
}

/// echo-server's last words on stderr: `echo-server: fatal: <reason>`, one line printed before
/// every exit other than by SIGTERM or SIGINT once it is listening (an error, a panic, a worker
/// that could not be replaced, a fatal signal it can catch), with exit status 1, or 128 + the
/// signal's number for a signal. Only SIGKILL (and a fault signal that recurs while the reason
/// is printed) ends it without this line. Bad input before listening is reported as a usage
/// error instead (`echo-server: <message>`, exit status 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fatal {
    /// What ended the server, on one line.
    pub reason: String,
}

impl Fatal {
    /// How the line starts.
    pub const PREFIX: &'static str = "echo-server: fatal: ";

    /// The line for `reason`, its line breaks folded into `"; "` so that it stays one line.
    pub fn new(reason: &str) -> Fatal {
        let reason = reason
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join("; ");
        Fatal { reason }
    }

    /// Parses one line (surrounding whitespace ignored); `None` for any other line.
    pub fn parse(line: &str) -> Option<Fatal> {
        let reason = line.trim().strip_prefix(Self::PREFIX)?;
        Some(Fatal {
            reason: reason.to_string(),
        })
    }

    /// The last fatal line in `stderr`, the reason the server ended, if it said one.
    pub fn last_in(stderr: &str) -> Option<Fatal> {
        stderr.lines().rev().find_map(Self::parse)
    }
}

impl fmt::Display for Fatal {
    /// The line without a newline.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", Self::PREFIX, self.reason)
    }
}

/// The last `"final": true` ServerStats line of echo-server's stdout.
///
/// # Errors
/// No such line (the server died or was killed before printing it), naming what stdout held.
pub fn final_stats(stdout: &str) -> Result<ServerStats, String> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum as _;

    /// The names experiment files, run records and `--model` have always used.
    const NAMES: [&str; 9] = [
        "select",
        "poll",
        "epoll-lt",
        "epoll-et",
        "thread",
        "prefork",
        "reuseport",
        "uring",
        "tokio",
    ];

    #[test]
    fn server_options_survive_their_own_argv() {
        // A literal without `..`: a field added to ServerOpts does not compile until it is
        // set here, so the round trip covers it.
        let all = ServerOpts {
            backlog: 64,
            read_buf: ByteSize(4096),
            workers: Some(3),
            exclusive: true,
            nodelay: false,
            time_syscalls: true,
        };
        crate::cmd::assert_survives_its_own_argv(&all, &[]);
        assert_eq!(
            all.argv().join(" "),
            "--backlog 64 --read-buf 4096 --workers 3 --exclusive --nodelay=false --time-syscalls"
        );
    }

    #[test]
    fn server_options_read_from_yaml_with_the_flags_defaults_and_rules() {
        let o: ServerOpts = serde_yaml::from_str("{read_buf: 4KiB}").unwrap();
        assert_eq!(o.read_buf, ByteSize(4096));
        assert_eq!((o.backlog, o.workers, o.nodelay), (4096, None, true));
        assert_eq!(ServerOpts::default().read_buf, ByteSize(16 << 10));
        let e = serde_yaml::from_str::<ServerOpts>("{backlg: 2}").unwrap_err();
        assert!(e.to_string().contains("backlg"), "{e}");
        let zero: ServerOpts = serde_yaml::from_str("{read_buf: 0}").unwrap();
        let e = zero.check().unwrap_err();
        assert!(
            e.contains("--read-buf") && e.contains("at least 1 byte"),
            "{e}"
        );
        let huge: ServerOpts = serde_yaml::from_str("{read_buf: 1GiB}").unwrap();
        assert!(huge.check().unwrap_err().contains("64 MiB"));
        let none: ServerOpts = serde_yaml::from_str("{workers: 0}").unwrap();
        assert!(none.check().unwrap_err().contains("--workers"));
    }

    #[test]
    fn serde_clap_and_display_use_the_documented_names() {
        let models = ServerModel::all();
        assert_eq!(models.len(), NAMES.len());
        for (m, want) in models.iter().zip(NAMES) {
            assert_eq!(m.name(), want);
            assert_eq!(m.to_string(), want);
            assert_eq!(serde_json::to_string(m).unwrap(), format!("\"{want}\""));
            let back: ServerModel = serde_yaml::from_str(want).unwrap();
            assert_eq!(back, *m);
            let typed = m.to_possible_value().expect("every model has a name");
            assert_eq!(typed.get_name(), want);
            assert_eq!(want.parse::<ServerModel>(), Ok(*m));
        }
    }

    #[test]
    fn unknown_models_are_named_with_the_possible_ones() {
        let e = "epol-et".parse::<ServerModel>().unwrap_err().to_string();
        assert_eq!(
            e,
            "unknown server model \"epol-et\" (echo-server has select, poll, epoll-lt, epoll-et, \
             thread, prefork, reuseport, uring, tokio)"
        );
    }

    #[test]
    fn server_commands_spell_each_flag() {
        let mut c = ServerCmd::new(ServerModel::EpollEt, "127.0.0.1".parse().unwrap(), 0);
        assert_eq!(
            c.argv().join(" "),
            "--model epoll-et --bind 127.0.0.1 --port 0"
        );
        c.opts.read_buf = ByteSize(4096);
        c.opts.workers = Some(2);
        c.opts.backlog = 128;
        c.reply_bytes = Some(1024);
        c.stats_interval = Some("500ms".parse().unwrap());
        c.opts.exclusive = true;
        c.opts.nodelay = false;
        c.model = ServerModel::Prefork;
        assert_eq!(
            c.argv().join(" "),
            "--model prefork --bind 127.0.0.1 --port 0 --reply-bytes 1024 --stats-interval 500ms \
             --backlog 128 --read-buf 4096 --workers 2 --exclusive --nodelay=false"
        );
    }

    #[test]
    fn readiness_lines_give_address_model_workers_and_pid() {
        let r = Ready::parse(
            "echo-server listening on 127.0.0.1:41234 model=epoll-et workers=1 pid=7\n",
        )
        .unwrap();
        assert_eq!(
            r,
            Ready {
                addr: "127.0.0.1:41234".parse().unwrap(),
                model: "epoll-et".into(),
                workers: 1,
                pid: 7
            }
        );
        assert_eq!(
            r.to_string(),
            "echo-server listening on 127.0.0.1:41234 model=epoll-et workers=1 pid=7"
        );
        assert_eq!(Ready::parse("echo-server: cannot listen"), None);
        assert_eq!(
            Ready::parse("echo-server listening on 127.0.0.1:1 model=x"),
            None
        );
        assert_eq!(
            Ready::parse("echo-server listening on 127.0.0.1:1 model=poll workers=1"),
            None,
            "no pid"
        );
        let v6 = Ready {
            addr: "[::1]:9988".parse().unwrap(),
            model: "reuseport".into(),
            workers: 4,
            pid: 1,
        };
        assert_eq!(Ready::parse(&v6.to_string()), Some(v6.clone()));
        // A custom server's line names it instead of a model.
        let custom = "echo-server listening on 0.0.0.0:7000 model=socat-pipe workers=1 pid=9";
        assert_eq!(
            Ready::parse(custom).map(|r| r.model),
            Some("socat-pipe".into())
        );
    }

    #[test]
    fn fatal_lines_are_one_line_and_parse_back() {
        let f = Fatal::new("panic in thread 'uring-reactor' at src/x.rs:3:5:\nboom\n");
        assert_eq!(
            f.to_string(),
            "echo-server: fatal: panic in thread 'uring-reactor' at src/x.rs:3:5:; boom"
        );
        assert_eq!(Fatal::parse(&format!("{f}\n")), Some(f.clone()));
        assert_eq!(Fatal::parse("echo-server: uring: accept=multishot"), None);
        let stderr = "echo-server listening on 127.0.0.1:1 model=poll workers=1 pid=3\n\
                      echo-server: fatal: first\n\
                      echo-server: fatal: killed by signal SIGHUP\n";
        assert_eq!(
            Fatal::last_in(stderr).map(|f| f.reason),
            Some("killed by signal SIGHUP".to_string())
        );
        assert_eq!(Fatal::last_in("echo-server listening on ..."), None);
    }

    #[test]
    fn the_final_stats_line_is_found() {
        let line = |f: bool| {
            format!("{{\"model\":\"epoll-et\",\"pid\":7,\"uptime_s\":1.0,\"final\":{f},\"accepted\":3,\"closed\":3,\"bytes_in\":0,\"bytes_out\":0,\"syscalls\":{{}},\"events_returned\":0,\"empty_wakeups\":0,\"eagain_read\":0,\"eagain_write\":0,\"errors\":{{}},\"workers\":[]}}")
        };
        let out = format!("{}\n{}\n", line(false), line(true));
        let s = final_stats(&out).unwrap();
        assert!(s.is_final && s.totals.accepted == 3);
        assert!(final_stats(&line(false))
            .unwrap_err()
            .contains("no final stats"));
    }
}
