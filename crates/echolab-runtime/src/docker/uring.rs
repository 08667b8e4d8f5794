//! io_uring under the containers' seccomp profile. Docker's default seccomp profile allows
//! io_uring_setup/enter/register up to engine 24.0 and denies them from 25.0 (moby commit
//! 891241e7e7), so the launcher asks the engine it has: it starts `echo-server --model uring`
//! in a throwaway probe host with the server's privileges and the default profile.
//!
//! If the server gets ready, io_uring is allowed and nothing changes. If not, it probes again
//! under [`DEFAULT_WITH_URING`](super::privileges::DEFAULT_WITH_URING), moby's default profile
//! plus only the three io_uring calls, and the server host runs under that when it works.
//! Only when that fails too does `--allow-uring-unconfined` run the server host with
//! `seccomp=unconfined`; without it, the uring cells are recorded as failed with the probes'
//! reasons. The manifest records which.

use std::time::Duration;

use bollard::query_parameters::RemoveContainerOptions;
use bollard::Docker;
use echolab_core::cmd::{Ready, ServerCmd, ServerModel};
use serde_json::json;

use super::exec;
use super::object_name;
use super::privileges::{Privileges, Seccomp};
use super::topology::{create_host, HostSpec};
use crate::hosts::READY_DEADLINE;
use crate::image_archive::IMAGE_BIN_DIR;

/// What the probe found and what the run does about it.
#[derive(Debug, Clone, PartialEq)]
pub struct UringDecision {
    /// io_uring worked under Docker's default seccomp profile.
    pub allowed_by_default: bool,
    /// The server host's seccomp profile.
    pub server_seccomp: Seccomp,
    /// Why uring cells cannot run, if they cannot.
    pub denied: Option<String>,
    /// What the probes found, for the manifest.
    pub probe: String,
}

impl UringDecision {
    /// For the manifest's `hosts.server.io_uring`.
    pub fn record(&self) -> serde_json::Value {
        json!({
            "allowed_by_default_seccomp": self.allowed_by_default,
            "server_seccomp": self.server_seccomp.describe(),
            "denied": self.denied,
            "probe": self.probe,
        })
    }
}

/// Whether `echo-server --model uring` gets ready in a throwaway host of `run_id` with the
/// server's privileges under `seccomp`; with what it printed or why not.
///
/// # Errors
/// The probe container could not be made.
pub async fn probe_under(
    docker: &Docker,
    run_id: &str,
    image: &str,
    seccomp: Seccomp,
) -> anyhow::Result<(bool, String)> {
    let under = seccomp.describe();
    // A role (and so a container name) per profile: a probe host whose removal failed does
    // not block the next probe.
    let role = match seccomp {
        Seccomp::EngineDefault => "uring-probe",
        Seccomp::DefaultWithUring => "uring-probe-with-uring",
        Seccomp::Unconfined => "uring-probe-unconfined",
    };
    let mut spec = HostSpec {
        role: role.into(),
        network_mode: "none".into(),
        privileges: Privileges {
            seccomp,
            ..Privileges::default()
        },
        ..Default::default()
    };
    let id = create_host(docker, run_id, image, &mut spec).await?;
    let probe_cmd = ServerCmd::new(ServerModel::Uring, [127, 0, 0, 1].into(), 0);
    let mut cmd = vec![format!("{IMAGE_BIN_DIR}/{}", ServerCmd::PROGRAM)];
    cmd.extend(probe_cmd.argv());
    let started = exec::start(docker, &id, &cmd, Ready::PREFIX).await;
    let outcome = match started {
        Err(e) => Err(e),
        Ok(mut s) => match tokio::time::timeout(READY_DEADLINE, &mut s.ready).await {
            Ok(Ok(line)) => Ok((true, format!("echo-server --model uring got ready under seccomp {under}: {line}"))),
            Ok(Err(_)) => exec::finish(docker, s, Duration::from_secs(10)).await.map(|out| {
                (
                    false,
                    format!(
                        "echo-server --model uring failed under seccomp {under} ({})",
                        out.describe()
                    ),
                )
            }),
            Err(_) => Ok((
                false,
                format!("echo-server --model uring was not ready within {READY_DEADLINE:?} under seccomp {under}"),
            )),
        },
    };
    // Removing the probe host kills the probe server with it.
    let _ = super::deadlines::call(
        docker,
        "remove container",
        &id,
        docker.remove_container(
            &id,
            Some(RemoveContainerOptions {
                force: true,
                ..Default::default()
            }),
        ),
    )
    .await;
    outcome
}

/// Probes io_uring in throwaway containers of `run_id` and decides: the engine's default
/// profile, else [`Seccomp::DefaultWithUring`], else unconfined when `allow_unconfined`.
///
/// # Errors
/// A probe container could not be made.
pub async fn probe(
    docker: &Docker,
    run_id: &str,
    image: &str,
    allow_unconfined: bool,
) -> anyhow::Result<UringDecision> {
    let (by_default, first) = probe_under(docker, run_id, image, Seccomp::EngineDefault).await?;
    if by_default {
        return Ok(UringDecision {
            allowed_by_default: true,
            server_seccomp: Seccomp::EngineDefault,
            denied: None,
            probe: first,
        });
    }
    let (narrow_ok, second) = probe_under(docker, run_id, image, Seccomp::DefaultWithUring).await?;
    let probe = format!("{first}; {second}");
    let (server_seccomp, denied) = if narrow_ok {
        (Seccomp::DefaultWithUring, None)
    } else if allow_unconfined {
        (Seccomp::Unconfined, None)
    } else {
        let name = object_name(run_id, "uring-probe");
        (
            Seccomp::EngineDefault,
            Some(format!(
                "model uring cannot run here: {probe} (probe {name}); pass --allow-uring-unconfined to run the server host without seccomp"
            )),
        )
    };
    Ok(UringDecision {
        allowed_by_default: false,
        server_seccomp,
        denied,
        probe,
    })
}
