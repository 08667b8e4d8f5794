//! Command line of `echo-server`.

use std::net::IpAddr;
use std::time::Duration;

use clap::Parser;
use echolab_core::cmd::{ServerModel, ServerOpts};
use echolab_core::limits::{self, MAX_MESSAGE_BYTES};
use echolab_core::units;

/// `--reply-bytes`: a size from 1 byte to [`MAX_MESSAGE_BYTES`].
fn reply_size(s: &str) -> Result<usize, String> {
    let n = units::parse_size(s).map_err(|e| e.to_string())?;
    if !(1..=MAX_MESSAGE_BYTES).contains(&n) {
        return Err(format!(
            "invalid size {s:?}: must be from 1 byte to 64MiB ({MAX_MESSAGE_BYTES} bytes)"
        ));
    }
    usize::try_from(n).map_err(|_| format!("{s:?} is too large"))
}

const AFTER_HELP: &str = "\
Protocol: echo mode writes back exactly the bytes read. With --reply-bytes N, every request
ending in '\\n' is answered with N bytes (seed 004's \"activelink\" server, 1 KiB replies).

Output: on stderr, `echo-server listening on IP:PORT model=M workers=N pid=P` once the socket
accepts connections (for prefork and reuseport, once every worker has registered its
listener; launchers wait for this line); on stdout, one ServerStats JSON line every
--stats-interval and a final one (\"final\":true) on SIGTERM or SIGINT, after which it exits 0.

Exit: 0 after SIGTERM/SIGINT; 2 for bad input (one line), a port another process listens on
included, SO_REUSEPORT or not (a port is one server's); any other end prints one line
`echo-server: fatal: REASON` (an error, a panic, a signal) and exits 1, or 128+N for signal N.
prefork replaces a worker process that dies, says so on stderr, and counts it in
`worker_restarts`.

Examples:
  echo-server --model epoll-et                          # the seeds' ET server, port 9988
  echo-server --model epoll-lt --port 9988 --read-buf 4096
  echo-server --model reuseport --workers 2 --port 9988 --stats-interval 1s
  echo-server --model select --port 8000 --reply-bytes 1024   # seed 004 activelink server
  echo-server --model poll --port 9988 --nodelay=false  # Nagle's algorithm left on";

/// TCP echo server with selectable I/O model and per-model syscall counters.
#[derive(Debug, Parser)]
// allow_negative_numbers: "-5" reaches the value parser and its range message.
#[command(name = "echo-server", version, about, after_help = AFTER_HELP, allow_negative_numbers = true)]
pub struct Args {
    /// I/O model.
    #[arg(long, value_enum)]
    pub model: ServerModel,
    /// TCP port to listen on; 0 picks a free one (printed on the readiness line). The default
    /// is the seeds' port, which echo-bench's examples and the compose setup use too.
    #[arg(long, default_value_t = 9988)]
    pub port: u16,
    /// Address to bind.
    #[arg(long, default_value = "0.0.0.0")]
    pub bind: IpAddr,
    /// The options an experiment can set (one definition: `echolab_core::cmd::ServerOpts`).
    #[command(flatten)]
    pub opts: ServerOpts,
    /// Answer each '\n'-terminated request with N bytes instead of echoing (1 byte to 64MiB).
    #[arg(long, value_parser = reply_size)]
    pub reply_bytes: Option<usize>,
    /// Print a ServerStats JSON line this often (e.g. 1s, 500ms); absent or 0: only the final
    /// line at shutdown. At most 24h.
    #[arg(long, value_parser = limits::duration, allow_hyphen_values = true)]
    pub stats_interval: Option<Duration>,
}
