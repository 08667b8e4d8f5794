//! Turning command-line arguments into a runnable [`Plan`]: resolving the target, choosing
//! worker threads, and making sure the process may open enough file descriptors.

use std::net::ToSocketAddrs;
use std::time::Duration;

use echolab_core::cmd::ServerCpus;
use nix::sys::resource::{getrlimit, setrlimit, Resource};
use socket2::SockAddr;

use crate::engine::{self, EngineKind, Pattern, Plan, RunOutcome, Stop};
use crate::syscalls::SocketOptions;
use echolab_core::cmd::ClientOpts;
use echolab_core::cmd::SocketArgs;

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

/// Event-engine workers and why: `--threads` when given, else the automatic rule.
///
/// The rule starts from the CPUs this process may use (`available_parallelism`: the affinity
/// mask and the cgroup quota, so a container's `--cpuset-cpus` from the launcher's CPU plan
/// counts). When the target is an address of this host, the server runs on the same CPUs.
/// Long connections then get half of them: on loopback each write(2) also runs the
/// receiver's TCP input, so client and server do about the same work per request, and a
/// second client thread only takes CPU from the server (measured on a 2-core machine at
/// 100 connections: 1 thread 246k requests/s, 2 threads 178k). Short connections and
/// connect-storm keep them all: the client's connect(2) runs both ends of the handshake, so
/// most of the work is the client's (2 threads 58k/s, 1 thread 40k/s with `--linger0`).
/// Never more workers than connections.
pub(crate) fn threads(
    client: &ClientOpts,
    sock: &SocketArgs,
    target: &SockAddr,
    pattern: Pattern,
    conns: u64,
) -> (usize, String) {
    if let Some(t) = client.threads {
        return (t as usize, format!("--threads {t}"));
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (shared, because) = match sock.server_cpus {
        ServerCpus::Shared => (true, "the server shares these CPUs (--server-cpus shared)"),
        ServerCpus::Separate => (
            false,
            "the server has CPUs of its own (--server-cpus separate)",
        ),
        ServerCpus::Auto if is_local(target) => (true, "the server is on this machine"),
        ServerCpus::Auto => (false, "the server is elsewhere"),
    };
    auto_threads(cpus, shared, because, pattern, conns)
}

/// The automatic rule of [`threads`] for `cpus` usable CPUs, `shared` with the server or not
/// (`because` says how that is known).
fn auto_threads(
    cpus: usize,
    shared: bool,
    because: &str,
    pattern: Pattern,
    conns: u64,
) -> (usize, String) {
    let (n, why) = match (shared, pattern) {
        (true, Pattern::Long) => (
            (cpus / 2).max(1),
            format!("{because} and long connections load both ends alike, so half"),
        ),
        (true, _) => (
            cpus,
            format!("{because}, but connect(2) makes the client the busier end, so all"),
        ),
        (false, _) => (cpus, format!("{because}, so all")),
    };
    let n = n.min(usize::try_from(conns).unwrap_or(usize::MAX)).max(1);
    (n, format!("auto: {n} of {cpus} CPU(s): {why}"))
}

/// Whether `target` is an address of this host (this network namespace): loopback, or one a
/// socket can bind to (bind(2) fails with EADDRNOTAVAIL for an address that is not local).
pub(crate) fn is_local(target: &SockAddr) -> bool {
    let Some(ip) = target.as_socket().map(|s| s.ip()) else {
        return false;
    };
    ip.is_loopback() || crate::sources::bind_test(ip).is_ok()
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
    /// Request bytes, unstamped.
    pub request: Vec<u8>,
    /// What a request must get back.
    pub reply: crate::engine::Reply,
    /// Per-interval records.
    pub interval: Option<Duration>,
    /// This process's share of a `--processes` run (`None`: all connections).
    pub shard: Option<crate::shard::Shard>,
    /// The engine that will run the plan (for `--short-sockets`).
    pub engine: EngineKind,
}

/// Assembles a [`Plan`] after checking the descriptor limit, choosing the worker threads
/// ([`threads`]) and resolving `--source-addrs` ([`crate::sources::resolve`]) and
/// `--short-sockets` ([`crate::short_sockets::resolve`]).
///
/// # Errors
/// See [`ensure_fd_limit`]; a `--source-addrs` address that is not local or not of the
/// target's family, or `--short-sockets reuse` where it cannot run (exit code 2).
pub(crate) fn plan(
    inputs: PlanInputs,
    client: &ClientOpts,
    sock: &SocketArgs,
) -> Result<Plan, SetupError> {
    let total = inputs.conns as usize;
    let ids = match inputs.shard {
        Some(s) => crate::engine::window::share(total, s.count as usize, s.index as usize),
        None => 0..total,
    };
    ensure_fd_limit(ids.len() as u64)?;
    let sources = crate::sources::resolve(
        &sock.source_addrs,
        &inputs.addr,
        inputs.pattern,
        client.linger0,
        inputs.conns,
    )
    .map_err(SetupError::usage)?;
    let socket_reuse = crate::short_sockets::resolve(
        sock.short_sockets,
        inputs.pattern,
        client.linger0,
        inputs.engine == EngineKind::Event,
        inputs.rate.is_some(),
    )
    .map_err(SetupError::usage)?;
    let (threads, threads_reason) =
        threads(client, sock, &inputs.addr, inputs.pattern, ids.len() as u64);
    Ok(Plan {
        addr: inputs.addr,
        pattern: inputs.pattern,
        conns: ids.len(),
        first_id: ids.start,
        conns_total: total,
        start_signal: inputs.shard.map(|_| crate::shard::wait_for_go as fn()),
        stop: inputs.stop,
        warmup: inputs.warmup,
        rate: inputs.rate,
        request: inputs.request,
        reply: inputs.reply,
        timeout: client.timeout.0,
        sock: SocketOptions {
            nodelay: client.nodelay,
            linger0: client.linger0,
            blocking_timeout: None,
            source: None,
        },
        threads,
        threads_reason,
        sources,
        socket_reuse,
        interval: inputs.interval,
    })
}

/// Runs `plan` on `engine`: the step every command takes after [`plan`].
///
/// # Errors
/// Exit code 1, `"<engine> engine failed: <why>"`, when the engine cannot start.
/// Refuses an engine that cannot run `pattern`: the ring engine runs long connections only.
///
/// # Errors
/// A usage error naming the flags.
pub(crate) fn engine_runs(engine: EngineKind, pattern: Pattern) -> Result<(), SetupError> {
    if engine == EngineKind::Uring && pattern != Pattern::Long {
        return Err(SetupError::usage(
            "--engine uring runs long connections only (--mode long, sustain); \
             short connections need --engine event or thread",
        ));
    }
    Ok(())
}

pub(crate) fn run_engine(plan: &Plan, engine: EngineKind) -> Result<RunOutcome, SetupError> {
    engine_runs(engine, plan.pattern)?;
    engine::run(plan, engine).map_err(|e| SetupError {
        message: format!("{} engine failed: {e}", engine.name()),
        exit_code: 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_threads_halves_only_for_long_connections_to_a_local_server() {
        let t = |cpus, local, pattern, conns| auto_threads(cpus, local, "", pattern, conns).0;
        assert_eq!(t(2, true, Pattern::Long, 100), 1);
        assert_eq!(t(8, true, Pattern::Long, 100), 4);
        assert_eq!(t(1, true, Pattern::Long, 100), 1);
        assert_eq!(t(2, true, Pattern::Short, 100), 2);
        assert_eq!(t(2, true, Pattern::Storm, 100), 2);
        assert_eq!(t(2, false, Pattern::Long, 100), 2);
        assert_eq!(t(8, false, Pattern::Short, 3), 3);
        let (_, why) = auto_threads(2, true, "the server is on this machine", Pattern::Long, 100);
        assert_eq!(
            why,
            "auto: 1 of 2 CPU(s): the server is on this machine and long connections load both \
             ends alike, so half"
        );
    }

    #[test]
    fn loopback_and_own_addresses_are_local_others_not() {
        let at = |ip: &str| SockAddr::from(std::net::SocketAddr::new(ip.parse().unwrap(), 9));
        assert!(is_local(&at("127.0.0.1")));
        assert!(is_local(&at("127.9.9.9")));
        assert!(is_local(&at("::1")));
        // 192.0.2.0/24 is TEST-NET-1 (RFC 5737).
        assert!(!is_local(&at("192.0.2.1")));
    }

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
