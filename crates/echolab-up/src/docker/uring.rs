//! io_uring under the containers' seccomp profile. Docker's default seccomp profile allows
//! io_uring_setup/enter/register on some engine versions and denies them on others (moby
//! removed them from the default profile in 25.0), so the launcher asks the engine it has:
//! it starts `echo-server --model uring` in a throwaway probe host with the default profile.
//!
//! If the server gets ready, io_uring is allowed and nothing changes. If not, the uring cells
//! are recorded as failed with the probe's reason, unless the user passed
//! `--allow-uring-unconfined`, in which case the server host runs with `seccomp=unconfined`
//! (and the manifest says so): a narrower profile would have to copy the engine's default
//! profile, which the API does not expose.

use std::time::Duration;

use bollard::query_parameters::RemoveContainerOptions;
use bollard::Docker;
use echolab_core::cmd::{Ready, ServerCmd, ServerModel};
use serde_json::json;

use super::exec;
use super::object_name;
use super::topology::{create_host, HostSpec};
use crate::hosts::READY_DEADLINE;
use crate::image_archive::IMAGE_BIN_DIR;

/// What the probe found and what the run does about it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct UringDecision {
    /// io_uring worked under Docker's default seccomp profile.
    pub allowed_by_default: bool,
    /// Security options for the server host (empty, or `seccomp=unconfined`).
    pub server_security: Vec<String>,
    /// Why uring cells cannot run, if they cannot.
    pub denied: Option<String>,
    /// The probe's output, for the manifest.
    pub probe: String,
}

impl UringDecision {
    /// For the manifest's `hosts.server.io_uring`.
    pub(crate) fn record(&self) -> serde_json::Value {
        json!({
            "allowed_by_default_seccomp": self.allowed_by_default,
            "server_security_opt": self.server_security,
            "denied": self.denied,
            "probe": self.probe,
        })
    }
}

/// Probes io_uring in a throwaway container of `run_id` and decides.
///
/// # Errors
/// The probe container could not be made.
pub(crate) async fn probe(
    docker: &Docker,
    run_id: &str,
    image: &str,
    allow_unconfined: bool,
) -> anyhow::Result<UringDecision> {
    let mut spec = HostSpec {
        role: "uring-probe".into(),
        network_mode: "none".into(),
        ..Default::default()
    };
    let id = create_host(docker, run_id, image, &mut spec).await?;
    let probe_cmd = ServerCmd::new(ServerModel::Uring, [127, 0, 0, 1].into(), 0);
    let mut cmd = vec![format!("{IMAGE_BIN_DIR}/{}", ServerCmd::PROGRAM)];
    cmd.extend(probe_cmd.argv());
    let mut s = exec::start(docker, &id, &cmd, Ready::PREFIX).await?;
    let ready = tokio::time::timeout(READY_DEADLINE, &mut s.ready).await;
    let (ok, probe) = match ready {
        Ok(Ok(line)) => (true, format!("echo-server --model uring got ready: {line}")),
        Ok(Err(_)) => {
            let out = exec::finish(docker, s, Duration::from_secs(10)).await?;
            (
                false,
                format!(
                    "echo-server --model uring failed under Docker's default seccomp profile ({})",
                    out.describe()
                ),
            )
        }
        Err(_) => (
            false,
            format!("echo-server --model uring was not ready within {READY_DEADLINE:?}"),
        ),
    };
    // Removing the probe host kills the probe server with it.
    let _ = docker
        .remove_container(
            &id,
            Some(RemoveContainerOptions {
                force: true,
                ..Default::default()
            }),
        )
        .await;
    let name = object_name(run_id, "uring-probe");
    Ok(if ok {
        UringDecision {
            allowed_by_default: true,
            server_security: vec![],
            denied: None,
            probe,
        }
    } else if allow_unconfined {
        UringDecision {
            allowed_by_default: false,
            server_security: vec!["seccomp=unconfined".into()],
            denied: None,
            probe,
        }
    } else {
        let denied = format!(
            "model uring cannot run here: {probe} (probe {name}); pass --allow-uring-unconfined to run the server host without seccomp"
        );
        UringDecision {
            allowed_by_default: false,
            server_security: vec![],
            denied: Some(denied),
            probe,
        }
    })
}
