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

/// How long a lab engine may take to answer its first calls (ping, version, info) before it
/// counts as unreachable: a machine on the lab's network answers in milliseconds; an SSH
/// endpoint needs a login first.
pub const REACH_DEADLINE: std::time::Duration = std::time::Duration::from_secs(15);

/// What a lab engine says about itself and its machine (`docker info`).
#[derive(Debug, Clone, Default)]
pub struct Machine {
    /// The engine's name for the machine.
    pub hostname: String,
    /// Kernel release.
    pub kernel: String,
    /// Logical CPUs.
    pub cpus: u64,
    /// Memory, bytes.
    pub mem_bytes: u64,
}

/// Connects to the engine `name` of a lab file at `spec`'s endpoint (unix socket, TCP with
/// mutual TLS, or SSH), negotiates the API version and reads what it says of its machine,
/// within [`REACH_DEADLINE`].
///
/// # Errors
/// One line naming the engine and its endpoint: a bad TLS file, a refused or failed
/// handshake, no answer in time.
pub async fn connect_lab(
    name: &str,
    spec: &echolab_core::lab_file::EngineSpec,
) -> Result<(Engine, Machine), String> {
    use echolab_core::lab_file::Endpoint;
    let fail = |e: String| format!("engine {name} ({}): {e}", spec.endpoint_text);
    let timeout = 120;
    let docker = match &spec.endpoint {
        Endpoint::Unix(path) => Docker::connect_with_unix(
            &path.display().to_string(),
            timeout,
            bollard::API_DEFAULT_VERSION,
        ),
        Endpoint::Tls {
            addr,
            ca,
            cert,
            key,
        } => Docker::connect_with_ssl(addr, key, cert, ca, timeout, bollard::API_DEFAULT_VERSION),
        Endpoint::Ssh { url, identity } => Docker::connect_with_ssh(
            url,
            timeout,
            bollard::API_DEFAULT_VERSION,
            identity.as_ref().map(|p| p.display().to_string()),
        ),
    }
    .map_err(|e| fail(e.to_string()))?;
    let reach = async {
        let docker = docker.negotiate_version().await?;
        let v = docker.version().await?;
        let info = docker.info().await?;
        Ok::<_, bollard::errors::Error>((docker, v, info))
    };
    let (docker, v, info) = tokio::time::timeout(REACH_DEADLINE, reach)
        .await
        .map_err(|_| fail(format!("no answer within {REACH_DEADLINE:?}")))?
        .map_err(|e| fail(with_tls_hint(error_chain(&e))))?;
    let machine = Machine {
        hostname: info.name.unwrap_or_default(),
        kernel: info.kernel_version.unwrap_or_default(),
        cpus: info.ncpu.map_or(0, |n| n.max(0) as u64),
        mem_bytes: info.mem_total.map_or(0, |m| m.max(0) as u64),
    };
    let engine = Engine {
        docker,
        version: v.version.unwrap_or_default(),
        api_version: v.api_version.unwrap_or_default(),
    };
    Ok((engine, machine))
}

/// `text` with what a TLS alert means for a lab file, where it names one: the engine
/// rejecting the client's certificate, or the client rejecting the engine's.
fn with_tls_hint(text: String) -> String {
    let hint = if text.contains("BadCertificate") || text.contains("UnknownCA") {
        "; the engine does not accept this client certificate (is tls.cert signed by the CA its dockerd --tlscacert names?)"
    } else if text.contains("invalid peer certificate") {
        "; the engine's certificate does not check against tls.ca (another CA, or not issued for this address)"
    } else {
        ""
    };
    format!("{text}{hint}")
}

/// An error with its sources, `outer: inner: innermost`: a TLS failure's reason (unknown CA,
/// bad certificate) is only in the innermost.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        source = s.source();
    }
    text
}

/// The longest the launcher waits for one engine API call (not for what the call starts): an
/// engine that stops answering must fail the run with a message, not hang it. Container
/// creation on a loaded 2-core machine takes well under a second.
pub const CALL_DEADLINE: std::time::Duration = std::time::Duration::from_secs(60);

/// Awaits the engine call `fut` for at most [`CALL_DEADLINE`]; errors as [`failed`], or say
/// that the engine did not answer.
///
/// # Errors
/// The engine's error, or no answer in time, naming `op` and `object`.
pub async fn call<T>(
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

    #[derive(Debug)]
    struct Layer(&'static str, Option<Box<Layer>>);

    impl std::fmt::Display for Layer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|l| l as _)
        }
    }

    #[test]
    fn an_error_reads_down_to_its_innermost_cause_once() {
        let inner = Layer("received fatal alert: BadCertificate", None);
        let mid = Layer("connection error", Some(Box::new(inner)));
        let outer = Layer("client error (SendRequest)", Some(Box::new(mid)));
        assert_eq!(
            error_chain(&outer),
            "client error (SendRequest): connection error: received fatal alert: BadCertificate"
        );
        // A cause already quoted by its wrapper is not repeated.
        let quoted = Layer(
            "connect: Connection refused",
            Some(Box::new(Layer("Connection refused", None))),
        );
        assert_eq!(error_chain(&quoted), "connect: Connection refused");
    }

    #[test]
    fn tls_alerts_say_which_side_refused() {
        for alert in ["fatal alert: BadCertificate", "fatal alert: UnknownCA"] {
            let t = with_tls_hint(alert.into());
            assert!(
                t.starts_with(alert) && t.contains("does not accept this client certificate"),
                "{t}"
            );
        }
        let t = with_tls_hint("invalid peer certificate: UnknownIssuer".into());
        assert!(t.contains("does not check against tls.ca"), "{t}");
        assert_eq!(
            with_tls_hint("Connection refused".into()),
            "Connection refused"
        );
    }
}
