//! Turning command-line arguments into a runnable [`Plan`]: resolving the target, choosing
//! worker threads, and making sure the process may open enough file descriptors.

use std::net::ToSocketAddrs;
use std::time::Duration;

use nix::sys::resource::{getrlimit, setrlimit, Resource};
use socket2::SockAddr;

use crate::cli::SocketArgs;
use crate::engine::{self, EngineKind, Pattern, Plan, RunOutcome, Stop};
use crate::syscalls::SocketOptions;

/// Descriptors needed besides the connections: stdio, epoll instances, the Rust runtime.
pub(crate) const FD_HEADROOM: u64 = 64;

/// A problem with the input or the environment, reported as one line.
#[derive(Debug)]
pub(crate) struct SetupError {
    /// The message.
    pub message: String,
    /// Exit status: `echolab_core::cli::EXIT_USAGE` (2) for bad input, 1 for an environment
    /// that cannot run the request.
    pub exit_code: i32,
}

impl SetupError {
    /// Bad input: `message` with exit status `echolab_core::cli::EXIT_USAGE`.
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        SetupError {
            message: message.into(),
            exit_code: echolab_core::cli::EXIT_USAGE.into(),
        }
    }
}

/// Resolves `host:port` to the first address it names.
///
/// # Errors
/// Exit code 2 naming the host when it does not resolve.
pub(crate) fn resolve(host: &str, port: u16) -> Result<SockAddr, SetupError> {
    let bad = |why: String| SetupError::usage(format!("cannot resolve HOST {host:?}: {why}"));
    let mut addrs = (host, port)
        .to_socket_addrs()
        .map_err(|e| bad(e.to_string()))?;
    addrs
        .next()
        .map(SockAddr::from)
        .ok_or_else(|| bad("no address".into()))
}

/// Raises RLIMIT_NOFILE's soft limit up to the hard limit when `conns` connections need more.
/// Returns the soft limit now in force.
///
/// # Errors
/// Exit code 1 when even the hard limit is too low, saying how many are needed and how to
/// raise it (getrlimit(2): an unprivileged process may not raise its hard limit).
pub(crate) fn ensure_fd_limit(conns: u64) -> Result<u64, SetupError> {
    let needed = conns + FD_HEADROOM;
    let env = |message: String| SetupError {
        message,
        exit_code: 1,
    };
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)
        .map_err(|e| env(format!("cannot read RLIMIT_NOFILE: {e}")))?;
    if soft >= needed {
        return Ok(soft);
    }
    if hard < needed {
        return Err(env(format!(
            "{conns} connections need about {needed} file descriptors, but RLIMIT_NOFILE's hard limit \
             is {hard}; raise it (ulimit -Hn {needed}, or LimitNOFILE= / --ulimit nofile= for \
             services and containers) or use fewer connections"
        )));
    }
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).map_err(|e| {
        env(format!(
            "cannot raise RLIMIT_NOFILE from {soft} to {hard}: {e}"
        ))
    })?;
    Ok(hard)
}

/// Event-engine workers: `--threads`, else the number of CPUs.
pub(crate) fn threads(sock: &SocketArgs) -> usize {
    sock.threads
        .map(|t| t as usize)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The parts of a [`Plan`] every command builds the same way.
pub(crate) struct PlanInputs {
    /// Server address.
    pub addr: SockAddr,
    /// Connection usage.
    pub pattern: Pattern,
    /// Concurrent connections.
    pub conns: u64,
    /// Stop condition.
    pub stop: Stop,
    /// Warm-up.
    pub warmup: Duration,
    /// Open-loop rate.
    pub rate: Option<f64>,
    /// Request bytes.
    pub request: Vec<u8>,
    /// Expected reply bytes.
    pub expected_reply: Vec<u8>,
    /// Per-interval records.
    pub interval: Option<Duration>,
}

/// Assembles a [`Plan`] after checking the descriptor limit.
///
/// # Errors
/// See [`ensure_fd_limit`].
pub(crate) fn plan(inputs: PlanInputs, sock: &SocketArgs) -> Result<Plan, SetupError> {
    ensure_fd_limit(inputs.conns)?;
    Ok(Plan {
        addr: inputs.addr,
        pattern: inputs.pattern,
        conns: inputs.conns as usize,
        stop: inputs.stop,
        warmup: inputs.warmup,
        rate: inputs.rate,
        request: inputs.request,
        expected_reply: inputs.expected_reply,
        timeout: sock.timeout,
        sock: SocketOptions {
            nodelay: sock.nodelay,
            linger0: sock.linger0,
            blocking_timeout: None,
        },
        threads: threads(sock),
        interval: inputs.interval,
    })
}

/// Runs `plan` on `engine`: the step every command takes after [`plan`].
///
/// # Errors
/// Exit code 1, `"<engine> engine failed: <why>"`, when the engine cannot start.
pub(crate) fn run_engine(plan: &Plan, engine: EngineKind) -> Result<RunOutcome, SetupError> {
    engine::run(plan, engine).map_err(|e| SetupError {
        message: format!("{} engine failed: {e}", engine.name()),
        exit_code: 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_names_the_bad_host() {
        assert!(resolve("127.0.0.1", 9).is_ok());
        let e = resolve("no such host.invalid", 9).unwrap_err();
        assert_eq!(e.exit_code, 2);
        assert!(e.message.contains("no such host.invalid"), "{}", e.message);
    }

    #[test]
    fn fd_limit_beyond_the_hard_limit_is_refused_with_advice() {
        let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        if hard >= u64::MAX - FD_HEADROOM - 1 {
            return; // unlimited: nothing can exceed it
        }
        let e = ensure_fd_limit(hard).unwrap_err();
        assert!(
            e.message.contains("hard limit") && e.message.contains(&hard.to_string()),
            "{}",
            e.message
        );
        assert!(ensure_fd_limit(10).is_ok());
    }
}
