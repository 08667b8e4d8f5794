//! Running echolab-netem in the lab hosts: its command lines, finding the link host's
//! devices by address, and installing the link with the backend `echolab-netem probe` picks
//! (kernel netem where the kernel has sch_netem, else the userspace wire).

use std::net::IpAddr;

use anyhow::anyhow;
use bollard::Docker;
use echolab_core::cmd::{json_from_stdout, Masquerade, NetemCmd, ProbeResult, WIRE_READY_PREFIX};
use echolab_core::profile::Profile;
use serde_json::json;

use super::networks::ipv4;
use crate::docker::exec;
use crate::hosts::{READY_DEADLINE, STOP_DEADLINE};
use crate::image_archive::IMAGE_BIN_DIR;

/// A lab binary's path in the image.
pub(super) fn bin(name: &str) -> String {
    format!("{IMAGE_BIN_DIR}/{name}")
}

/// The exec command line of `cmd` in a lab host.
pub(super) fn netem(cmd: &NetemCmd) -> Vec<String> {
    let mut v = vec![bin(NetemCmd::PROGRAM)];
    v.extend(cmd.argv());
    v
}

/// The name of the device in `container` that holds `ip` (`echolab-netem ifname`).
///
/// # Errors
/// The exec failed, or no device holds `ip` (the output is quoted).
pub(super) async fn device_with(
    docker: &Docker,
    container: &str,
    ip: IpAddr,
) -> anyhow::Result<String> {
    let cmd = netem(&NetemCmd::Ifname {
        address: ipv4(ip, "the link host's address")?,
    });
    let out = exec::run(docker, container, &cmd, STOP_DEADLINE).await?;
    let dev = out.stdout.trim().to_string();
    if out.exit_code != Some(0) || dev.is_empty() {
        return Err(anyhow!(
            "finding the link host's device with {ip}: {}",
            out.describe()
        ));
    }
    Ok(dev)
}

/// The link as installed: the backend's name, what it reported, and the running wire.
pub(super) struct Installed {
    /// `kernel-netem` or `userspace-wire`.
    pub(super) backend: &'static str,
    /// The probe that chose the backend.
    pub(super) probe: ProbeResult,
    /// What the backend reported: kernel netem's read-back, or the wire's readiness line.
    pub(super) installed: serde_json::Value,
    /// The running wire, when it carries the link.
    pub(super) wire: Option<exec::Streaming>,
    /// A link across machines: the client's address is translated on the way out (by the
    /// kernel's masquerade with kernel netem, by the wire itself otherwise).
    pub(super) across: bool,
}

/// Installs (`Some((client, out_dev))`) or removes (`None`) the kernel's masquerade of the
/// client's address in the link host (`echolab-netem masquerade`).
///
/// # Errors
/// The exec failed or echolab-netem refused (its output is quoted).
pub(super) async fn kernel_masquerade(
    docker: &Docker,
    link: &str,
    install: Option<(std::net::Ipv4Addr, String)>,
) -> anyhow::Result<()> {
    let out = exec::run(
        docker,
        link,
        &netem(&NetemCmd::Masquerade { install }),
        STOP_DEADLINE,
    )
    .await?;
    if out.exit_code != Some(0) {
        return Err(anyhow!(
            "echolab-netem masquerade in the link host: {}",
            out.describe()
        ));
    }
    Ok(())
}

/// Probes the link host for sch_netem and installs `profile` with kernel netem or the
/// userspace wire; `client_side` and `server_side` are the link host's devices. With
/// `masquerade` (a link across machines, whose kernel masquerade [`kernel_masquerade`] is
/// already installed): kernel netem keeps that masquerade; the wire, which translates by
/// itself, has it removed first.
///
/// # Errors
/// The probe printed no result, `apply` failed, the masquerade could not be removed, or the
/// wire exited or was not ready in time.
pub(super) async fn install(
    docker: &Docker,
    link: &str,
    profile: &Profile,
    client_side: &str,
    server_side: &str,
    masquerade: Option<Masquerade>,
) -> anyhow::Result<Installed> {
    let probe_out = exec::run(docker, link, &netem(&NetemCmd::Probe), STOP_DEADLINE).await?;
    let probe: ProbeResult = json_from_stdout(&probe_out.stdout).map_err(|e| {
        anyhow!(
            "echolab-netem probe in the link host printed no probe result ({e}; {})",
            probe_out.describe()
        )
    })?;
    let (backend, installed, wire) = if probe.has_netem {
        let cmd = netem(&NetemCmd::Apply {
            profile: profile.clone(),
            uplink_dev: server_side.to_string(),
            downlink_dev: client_side.to_string(),
        });
        let out = exec::run(docker, link, &cmd, STOP_DEADLINE).await?;
        if out.exit_code != Some(0) {
            return Err(anyhow!(
                "echolab-netem apply in the link host: {}",
                out.describe()
            ));
        }
        // The read-back goes into the manifest as printed: free-form, not read by anything.
        let installed =
            serde_json::from_str(out.stdout.trim()).unwrap_or_else(|_| json!(out.stdout.trim()));
        ("kernel-netem", installed, None)
    } else {
        if masquerade.is_some() {
            kernel_masquerade(docker, link, None).await?;
        }
        let cmd = netem(&NetemCmd::Wire {
            profile: profile.clone(),
            client_side: client_side.to_string(),
            server_side: server_side.to_string(),
            stats_interval: None,
            masquerade,
        });
        let mut s = exec::start(docker, link, &cmd, WIRE_READY_PREFIX).await?;
        let line = match tokio::time::timeout(READY_DEADLINE, &mut s.ready).await {
            Ok(Ok(line)) => line,
            Ok(Err(_)) => {
                let out = exec::finish(docker, s, STOP_DEADLINE).await?;
                return Err(anyhow!(
                    "echolab-netem wire in the link host exited before it was ready ({})",
                    out.describe()
                ));
            }
            Err(_) => {
                return Err(anyhow!(
                    "echolab-netem wire in the link host was not ready within {READY_DEADLINE:?}"
                ))
            }
        };
        (
            "userspace-wire",
            json!({ "ready": line.trim_start_matches(WIRE_READY_PREFIX) }),
            Some(s),
        )
    };
    Ok(Installed {
        backend,
        probe,
        installed,
        wire,
        across: masquerade.is_some(),
    })
}
