//! Short-lived helper containers: one-shot jobs that need a capability the hosts they serve
//! do not hold, run to completion and removed. The route helper joins a client or server
//! host's network namespace with NET_ADMIN and runs `echolab-netem route`, so those hosts
//! never hold NET_ADMIN themselves.

use std::net::IpAddr;

use anyhow::anyhow;
use bollard::query_parameters::{LogsOptions, RemoveContainerOptions, WaitContainerOptions};
use bollard::Docker;
use echolab_core::cmd::{Ipv4Net, NetemCmd};
use futures_util::StreamExt as _;
use serde_json::json;

use super::netem::netem;
use super::networks::ipv4;
use crate::docker::deadlines::{call, gave_up, within};
use crate::docker::engine::failed;
use crate::docker::object_name;
use crate::docker::privileges::Privileges;
use crate::docker::topology::{create_host, HostSpec};
use crate::hosts::{ProcOutput, STOP_DEADLINE};

/// Runs a one-shot helper container to completion and removes it.
pub(super) async fn run_helper(
    docker: &Docker,
    run_id: &str,
    image: &str,
    spec: &mut HostSpec,
) -> anyhow::Result<ProcOutput> {
    let id = create_host(docker, run_id, image, spec).await?;
    let name = object_name(run_id, &spec.role);
    let mut wait = docker.wait_container(&id, None::<WaitContainerOptions>);
    let waited = within(docker, STOP_DEADLINE, wait.next()).await;
    let exit_code = match waited {
        Ok(Some(Ok(r))) => Some(r.status_code),
        Ok(Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. }))) => Some(code),
        Ok(Some(Err(e))) => return Err(failed("wait for container", &name, e)),
        Ok(None) => None,
        Err(crate::docker::deadlines::Gave::Limit(_)) => {
            return Err(anyhow!(
                "docker: container {name} did not finish within {STOP_DEADLINE:?}"
            ))
        }
        Err(gave) => return Err(gave_up(gave, "wait for container", &name)),
    };
    let mut logs = docker.logs(
        &id,
        Some(LogsOptions {
            stdout: true,
            stderr: true,
            ..Default::default()
        }),
    );
    let (mut stdout, mut stderr) = (String::new(), String::new());
    loop {
        let chunk = match within(docker, STOP_DEADLINE, logs.next()).await {
            Ok(Some(Ok(chunk))) => chunk,
            Ok(_) => break,
            Err(gave) => return Err(gave_up(gave, "read the logs of", &name)),
        };
        match chunk {
            bollard::container::LogOutput::StdOut { message } => {
                stdout.push_str(&String::from_utf8_lossy(&message))
            }
            bollard::container::LogOutput::StdErr { message } => {
                stderr.push_str(&String::from_utf8_lossy(&message))
            }
            _ => {}
        }
    }
    call(
        docker,
        "remove container",
        &name,
        docker.remove_container(
            &id,
            Some(RemoveContainerOptions {
                force: true,
                ..Default::default()
            }),
        ),
    )
    .await?;
    Ok(ProcOutput {
        exit_code,
        stdout,
        stderr,
        exited_before_stop: false,
    })
}

/// Routes `dst` via `via` in `target`'s network namespace with a route helper; returns the
/// route's manifest record (with the helper's settings).
///
/// # Errors
/// The helper could not run, or `echolab-netem route` failed (its output is quoted).
pub(super) async fn add_route(
    docker: &Docker,
    run_id: &str,
    image: &str,
    role: &str,
    target: &str,
    dst: &str,
    via: IpAddr,
) -> anyhow::Result<serde_json::Value> {
    let route = NetemCmd::Route {
        dst: dst
            .parse::<Ipv4Net>()
            .map_err(|e| anyhow!("docker: network subnet: {e}"))?,
        via: ipv4(via, "the link host's address")?,
    };
    let mut spec = HostSpec {
        role: format!("route-{role}"),
        network_mode: format!("container:{target}"),
        privileges: Privileges::route_helper(),
        cmd: Some(netem(&route)),
        ..Default::default()
    };
    let out = run_helper(docker, run_id, image, &mut spec).await?;
    if out.exit_code != Some(0) {
        return Err(anyhow!(
            "route {dst} via {via} in the {role} host: {}",
            out.describe()
        ));
    }
    Ok(
        json!({ "route": format!("{dst} via {via}"), "set_by": spec.record(&object_name(run_id, &spec.role), "removed after use") }),
    )
}
