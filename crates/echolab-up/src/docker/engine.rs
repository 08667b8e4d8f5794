//! Connecting to the Docker engine, and wording its errors.

use bollard::Docker;

/// A reachable engine.
#[derive(Clone)]
pub struct Engine {
    /// The client, with the API version negotiated.
    pub docker: Docker,
    /// The engine's version (`20.10.24+dfsg1`).
    pub version: String,
    /// The engine's API version (`1.41`).
    pub api_version: String,
}

/// Connects to the local engine (`$DOCKER_HOST`, else /var/run/docker.sock), negotiates the
/// API version down to the engine's and checks it answers.
///
/// # Errors
/// One line saying why no engine is reachable.
pub async fn connect() -> Result<Engine, String> {
    let docker = Docker::connect_with_local_defaults()
        .map_err(|e| format!("no Docker engine reachable: {e}"))?;
    let docker = docker
        .negotiate_version()
        .await
        .map_err(|e| format!("no Docker engine reachable: {e}"))?;
    let v = docker
        .version()
        .await
        .map_err(|e| format!("no Docker engine reachable: {e}"))?;
    Ok(Engine {
        docker,
        version: v.version.unwrap_or_default(),
        api_version: v.api_version.unwrap_or_default(),
    })
}

/// The longest the launcher waits for one engine API call (not for what the call starts): an
/// engine that stops answering must fail the run with a message, not hang it. Container
/// creation on a loaded 2-core machine takes well under a second.
pub(crate) const CALL_DEADLINE: std::time::Duration = std::time::Duration::from_secs(60);

/// Awaits the engine call `fut` for at most [`CALL_DEADLINE`]; errors as [`failed`], or say
/// that the engine did not answer.
///
/// # Errors
/// The engine's error, or no answer in time, naming `op` and `object`.
pub(crate) async fn call<T>(
    op: &str,
    object: &str,
    fut: impl std::future::Future<Output = Result<T, bollard::errors::Error>>,
) -> anyhow::Result<T> {
    match tokio::time::timeout(CALL_DEADLINE, fut).await {
        Ok(r) => r.map_err(|e| failed(op, object, e)),
        Err(_) => Err(anyhow::anyhow!(
            "docker: {op} {object}: the engine did not answer within {CALL_DEADLINE:?}"
        )),
    }
}

/// `"<op> <object>: <engine's message>"`, the wording of every Docker error of the launcher.
pub(crate) fn failed(op: &str, object: &str, e: bollard::errors::Error) -> anyhow::Error {
    let message = match e {
        bollard::errors::Error::DockerResponseServerError {
            status_code,
            message,
        } => format!("{message} (HTTP {status_code})"),
        other => other.to_string(),
    };
    anyhow::anyhow!("docker: {op} {object}: {message}")
}
