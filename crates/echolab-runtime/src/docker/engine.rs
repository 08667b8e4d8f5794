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
/// API version down to the engine's and checks it answers, within
/// [`super::deadlines::REACH`].
///
/// # Errors
/// One line saying why no engine is reachable.
pub async fn connect() -> Result<Engine, String> {
    let docker = Docker::connect_with_local_defaults()
        .map_err(|e| format!("no Docker engine reachable: {e}"))?;
    let reach = async {
        let docker = docker.negotiate_version().await?;
        let v = docker.version().await?;
        Ok::<_, bollard::errors::Error>((docker, v))
    };
    let reach_deadline = super::deadlines::REACH;
    let (docker, v) = tokio::time::timeout(reach_deadline, reach)
        .await
        .map_err(|_| format!("no Docker engine reachable: no answer within {reach_deadline:?}"))?
        .map_err(|e| format!("no Docker engine reachable: {e}"))?;
    Ok(Engine {
        docker,
        version: v.version.unwrap_or_default(),
        api_version: v.api_version.unwrap_or_default(),
    })
}

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
/// within [`super::deadlines::REACH`].
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
    let reach_deadline = super::deadlines::REACH;
    let (docker, v, info) = tokio::time::timeout(reach_deadline, reach)
        .await
        .map_err(|_| fail(format!("no answer within {reach_deadline:?}")))?
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

/// `e` said of the lab engine `name` at `endpoint` (`engine b (tcp://10.0.0.2:2376): ...`),
/// as context, so that its causes stay readable by type ([`super::deadlines::is_no_answer`]);
/// `e` itself outside a lab (`name` empty: the one engine).
pub fn on_engine(name: &str, endpoint: &str, e: anyhow::Error) -> anyhow::Error {
    if name.is_empty() {
        e
    } else {
        e.context(format!("engine {name} ({endpoint})"))
    }
}

/// The wording of every Docker error of the launcher, kept beside the deadlines that use it.
pub use super::deadlines::failed;

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
