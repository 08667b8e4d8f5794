//! How long the launcher waits for a Docker engine, every value in one place, and the
//! watchdog that tells an engine that stopped answering from one that is busy.
//!
//! Why: an engine whose machine or link dies, or whose dockerd is stopped, neither answers
//! nor resets the connection, so a request or an output stream waits on it for ever (a lab
//! run whose client engine was frozen mid-cell was still running minutes later, and after
//! Ctrl-C as well). Every call to an engine therefore has a deadline ([`CALL`]); a stream that
//! is silent for [`IDLE`] has the engine pinged, and fails when the ping is not answered within
//! [`PING`] ([`within`]); a timed program's output may last its planned time plus
//! [`STREAM_GRACE`]; teardown gives an engine [`TEARDOWN`] in all.
//!
//! A busy engine is not a dead one: a slow request or a program that prints nothing until it
//! ends (echo-bench, echo-server) is waited for as long as the engine answers pings, up to the
//! call's own deadline. So an engine that stops answering fails what waits on it within
//! [`IDLE`] + [`PING`] whatever the call, and a live one is never cut short by the watchdog.

use std::future::Future;
use std::time::Duration;

use bollard::Docker;

/// The longest one engine call (a request and its answer, not what it starts) may take while
/// the engine still answers pings. Creating or removing a container on a loaded 2-core machine
/// takes well under a second; removing one whose process ignores SIGTERM takes the engine's
/// kill and cleanup, a few seconds.
pub const CALL: Duration = Duration::from_secs(60);

/// How long a request or stream may go without news before the engine is pinged
/// ([`within`]). Short, because the ping costs the engine nothing; long enough that a
/// stream that speaks every second (the engine's stats) is never pinged.
pub const IDLE: Duration = Duration::from_secs(5);

/// How long an engine may take to answer a ping before it counts as not answering. A ping
/// (`GET /_ping`) takes dockerd no lock and no work: it answers in milliseconds even on a
/// machine whose CPUs are taken by builds; 10 s of silence is a stopped daemon, a dead machine
/// or a cut link.
pub const PING: Duration = Duration::from_secs(10);

/// What a timed echo-bench run may take beyond its warm-up and window before it fails:
/// connecting up to a few thousand connections, the report, the exit, and a slow exec start.
pub const STREAM_GRACE: Duration = Duration::from_secs(60);

/// How long a lab engine may take to answer its first calls (ping, version, info) before it
/// counts as unreachable: a machine on the lab's network answers in milliseconds; an SSH
/// endpoint needs a login first.
pub const REACH: Duration = Duration::from_secs(15);

/// The most teardown spends on one engine (engines are torn down together): its ping, the
/// listing, and the forced removal of a run's few containers and networks, a few seconds on a
/// loaded machine. What is still there after it is named, for `echolab-up --down`.
pub const TEARDOWN: Duration = Duration::from_secs(30);

/// An engine that did not answer a ping within [`PING`] while a call waited on it.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the engine stopped answering (nothing for {idle:?}, then no answer to a ping within {ping:?})", idle = IDLE, ping = PING)]
pub struct NoAnswer;

/// Whether `e` or one of its causes is [`NoAnswer`]: the engine, not the call, failed.
pub fn is_no_answer(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.is::<NoAnswer>())
}

/// Whether the engine answers a ping within [`PING`] (an error answer, e.g. a refused
/// connection, counts as none).
pub async fn answers(docker: &Docker) -> bool {
    answers_within(docker, PING).await
}

/// Whether the engine answers a ping within `ping`.
async fn answers_within(docker: &Docker, ping: Duration) -> bool {
    matches!(tokio::time::timeout(ping, docker.ping()).await, Ok(Ok(_)))
}

/// Why [`within`] gave up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gave {
    /// The engine did not answer a ping ([`NoAnswer`]).
    NoAnswer,
    /// The limit passed while the engine still answered.
    Limit(Duration),
}

/// Awaits `fut` for at most `limit` (`Duration::MAX`: no limit), pinging `docker`'s engine each time [`IDLE`] passes
/// without `fut` being done; gives up at once when a ping is not answered within [`PING`].
///
/// # Errors
/// [`Gave`]: the engine stopped answering, or `limit` passed.
pub async fn within<T>(
    docker: &Docker,
    limit: Duration,
    fut: impl Future<Output = T>,
) -> Result<T, Gave> {
    watched(docker, limit, (IDLE, PING), fut).await
}

/// [`within`] with the watchdog's (idle, ping) durations given.
async fn watched<T>(
    docker: &Docker,
    limit: Duration,
    (idle, ping): (Duration, Duration),
    fut: impl Future<Output = T>,
) -> Result<T, Gave> {
    // No limit beyond what an Instant can hold (`Duration::MAX`: the caller bounds it).
    let until = tokio::time::Instant::now().checked_add(limit);
    tokio::pin!(fut);
    loop {
        let next = tokio::time::Instant::now() + idle;
        let check = until.map_or(next, |u| next.min(u));
        if let Ok(v) = tokio::time::timeout_at(check, &mut fut).await {
            return Ok(v);
        }
        if until.is_some_and(|u| tokio::time::Instant::now() >= u) {
            return Err(Gave::Limit(limit));
        }
        // The call goes on while the engine is asked whether it is there.
        tokio::select! {
            v = &mut fut => return Ok(v),
            alive = answers_within(docker, ping) => if !alive {
                return Err(Gave::NoAnswer);
            },
        }
    }
}

/// Awaits the engine call `fut` for at most [`CALL`], under [`within`]'s watchdog; errors as
/// [`failed`], or say that the engine did not answer ([`NoAnswer`] in the
/// chain).
///
/// # Errors
/// The engine's error, or no answer in time, naming `op` and `object`.
pub async fn call<T>(
    docker: &Docker,
    op: &str,
    object: &str,
    fut: impl Future<Output = Result<T, bollard::errors::Error>>,
) -> anyhow::Result<T> {
    match within(docker, CALL, fut).await {
        Ok(r) => r.map_err(|e| failed(op, object, e)),
        Err(gave) => Err(gave_up(gave, op, object)),
    }
}

/// The error of a call `op` on `object` that [`within`] gave up on.
pub fn gave_up(gave: Gave, op: &str, object: &str) -> anyhow::Error {
    match gave {
        Gave::NoAnswer => anyhow::Error::new(NoAnswer).context(format!("docker: {op} {object}")),
        Gave::Limit(limit) => anyhow::anyhow!(
            "docker: {op} {object}: the engine answers pings but not this call within {limit:?}"
        ),
    }
}

/// `"<op> <object>: <engine's message>"`, the wording of every Docker error of the launcher.
pub fn failed(op: &str, object: &str, e: bollard::errors::Error) -> anyhow::Error {
    let message = match e {
        bollard::errors::Error::DockerResponseServerError {
            status_code,
            message,
        } => format!("{message} (HTTP {status_code})"),
        other => other.to_string(),
    };
    anyhow::anyhow!("docker: {op} {object}: {message}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An engine at a socket that accepts connections and never answers, as a stopped dockerd.
    fn silent_engine(tag: &str) -> (Docker, std::os::unix::net::UnixListener, std::path::PathBuf) {
        let dir =
            std::env::temp_dir().join(format!("echolab-deadlines-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("docker.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let docker =
            Docker::connect_with_unix(path.to_str().unwrap(), 120, bollard::API_DEFAULT_VERSION)
                .unwrap();
        (docker, listener, dir)
    }

    const QUICK: (Duration, Duration) = (Duration::from_millis(50), Duration::from_millis(100));

    #[tokio::test]
    async fn a_call_quicker_than_the_idle_gap_is_never_pinged_and_returns() {
        let (docker, _l, dir) = silent_engine("quick");
        let got = watched(&docker, CALL, QUICK, async {
            tokio::time::sleep(QUICK.0 / 2).await;
            7
        })
        .await;
        assert_eq!(got, Ok(7));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn an_engine_that_accepts_but_never_answers_fails_a_call_after_idle_and_ping() {
        let (docker, _l, dir) = silent_engine("silent");
        let t0 = std::time::Instant::now();
        let got = watched(&docker, CALL, QUICK, docker.inspect_container("c1", None)).await;
        let took = t0.elapsed();
        assert_eq!(got.unwrap_err(), Gave::NoAnswer);
        let (idle, ping) = QUICK;
        assert!(
            took >= idle + ping && took < idle + ping + Duration::from_secs(2),
            "{took:?}"
        );
        let e = gave_up(Gave::NoAnswer, "inspect container", "c1");
        assert!(is_no_answer(&e.context("engine b (tcp://10.0.0.2:2376)")));
        assert_eq!(
            format!("{:#}", gave_up(Gave::NoAnswer, "inspect container", "c1")),
            "docker: inspect container c1: the engine stopped answering (nothing for 5s, then no answer to a ping within 10s)"
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn a_limit_passes_only_when_nothing_is_watched_or_the_engine_answers() {
        // A limit shorter than the idle gap: the engine is never asked.
        let (docker, _l, dir) = silent_engine("limit");
        let got = watched(
            &docker,
            Duration::from_millis(20),
            QUICK,
            std::future::pending::<()>(),
        )
        .await;
        assert_eq!(got, Err(Gave::Limit(Duration::from_millis(20))));
        let text = format!("{:#}", gave_up(Gave::Limit(CALL), "remove container", "c1"));
        assert_eq!(
            text,
            "docker: remove container c1: the engine answers pings but not this call within 60s"
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}
