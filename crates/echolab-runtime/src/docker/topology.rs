//! Host containers (how one is made: [`HostSpec`], [`create_host`]) and the loopback topology
//! (docs/architecture.md, "Topologies"); the link topology is [`super::link`]'s, the
//! [`Hosts`](crate::hosts::Hosts) implementation on either is [`super::docker_hosts`]'s.
//!
//! Hosts are long-lived containers of the lab image running its hold process (the launcher's
//! `__hold`, which only waits and reaps); every program of a cell is a `docker exec` in them.
//! Exec rather than a container per cell: a cell then costs two execs instead of creating,
//! starting and removing containers (and, behind a link, re-routing their namespaces), and
//! the namespaces, sysctls and routes are set up once and recorded once.
//!
//! - loopback: the server host has its own network namespace with only `lo` (network mode
//!   `none`); the client host joins it (`container:<server>`) and targets 127.0.0.1.
//!
//! Every host gets only what it needs ([`super::privileges`]: no capability, a non-root user,
//! a read-only root and limits on client and server, never `--privileged`); a nofile ulimit of
//! 65536; and per-namespace sysctls on the namespace owners (a container that joins another's
//! namespace cannot set them).

use std::collections::{BTreeMap, HashMap};

use bollard::models::{
    ContainerCreateBody, EndpointSettings, HostConfig, NetworkingConfig, ResourcesUlimits,
};
use bollard::query_parameters::CreateContainerOptionsBuilder;
use bollard::Docker;
use echolab_core::cmd::Job;
use serde_json::json;

use super::deadlines::call;
use super::engine::failed;
use super::privileges::{Privileges, RunPrivileges};
use super::{labels, object_name};
use crate::image_archive::IMAGE_BIN_DIR;

/// Open files per process in every host: the seeds raise it to 65535 before their scans
/// (seed 003, "ulimit -n 65535") so that descriptors are never the bottleneck.
pub const NOFILE: i64 = 65536;

/// Per-namespace sysctls of client and server namespaces: a listen backlog cap that does not
/// cut echo-server's `--backlog 4096`, the widest usual ephemeral port range for connection
/// scans, and reuse of TIME_WAIT ports for new outgoing connections (short-connection
/// cells open tens of thousands of them); ip-sysctl.txt in the kernel documentation.
pub fn endpoint_sysctls() -> HashMap<String, String> {
    [
        ("net.core.somaxconn", "4096"),
        ("net.ipv4.ip_local_port_range", "1024 65000"),
        ("net.ipv4.tcp_tw_reuse", "1"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// How one host container is made.
#[derive(Debug, Clone, Default)]
pub struct HostSpec {
    /// `server`, `client`, `link`, ...
    pub role: String,
    /// Docker network mode (`none`, `container:<id>`, a network name).
    pub network_mode: String,
    /// Extra networks to attach before start, with fixed addresses where given.
    pub extra_networks: Vec<(String, Option<String>)>,
    /// User, capabilities, devices, seccomp, read-only root and limits.
    pub privileges: Privileges,
    /// Namespaced sysctls.
    pub sysctls: HashMap<String, String>,
    /// Command (None: the image's hold process).
    pub cmd: Option<Vec<String>>,
    /// The nofile limit applied; [`create_host`] sets it ([`NOFILE`], or lower when the
    /// engine cannot grant that, with `nofile_note` saying why).
    pub nofile: Option<i64>,
    /// Why `nofile` is below [`NOFILE`], if it is.
    pub nofile_note: Option<String>,
    /// CPUs the host may run on (cpuset list; `None`: all), from the run's CPU plan.
    pub cpuset: Option<String>,
}

impl HostSpec {
    /// The settings as recorded in the manifest's `hosts`.
    pub fn record(&self, name: &str, id: &str) -> serde_json::Value {
        let sysctls: BTreeMap<_, _> = self.sysctls.iter().collect();
        let p = &self.privileges;
        json!({
            "container": name,
            "id": id,
            "network_mode": self.network_mode,
            "networks": self.extra_networks.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            "user": p.user,
            "cap_drop": ["ALL"],
            "cap_add": p.cap_add.iter().map(|g| g.name).collect::<Vec<_>>(),
            "devices": p.devices.iter().map(|g| g.name).collect::<Vec<_>>(),
            "privileged": false,
            "read_only_rootfs": true,
            "no_new_privileges": true,
            "pids_limit": p.limits.pids,
            "memory_bytes": p.limits.memory_bytes,
            "sysctls": sysctls,
            "ulimits": { "nofile": self.nofile.unwrap_or(NOFILE), "requested_nofile": NOFILE, "note": self.nofile_note },
            "cpu_realtime_runtime_us": p.realtime_runtime_us,
            "realtime_note": p.realtime_note,
            "cpuset": self.cpuset.clone().unwrap_or_else(|| "all CPUs".into()),
            "seccomp": p.seccomp.describe(),
            "command": self.cmd.clone().unwrap_or_else(|| Job::Hold.command(IMAGE_BIN_DIR)),
        })
    }
}

/// The nofile limit this engine could grant, with the note why, once it refused [`NOFILE`].
static NOFILE_CAP: std::sync::Mutex<Option<(i64, String)>> = std::sync::Mutex::new(None);

/// The launcher's own hard RLIMIT_NOFILE (getrlimit(2)): on a machine whose engine runs under
/// the same cap (a container runtime cannot raise a limit above its own hard limit without
/// CAP_SYS_RESOURCE), the most a host container can get.
fn own_hard_nofile() -> Option<i64> {
    nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .ok()
        .map(|(_, hard)| hard.min(i64::MAX as u64) as i64)
}

/// Whether an engine refused a real-time budget in this process, and why: later hosts are
/// then made without asking again. One per process, like [`NOFILE_CAP`]: in a lab run across
/// engines, the first refusal stands for all of them (the note names the engine's words).
static REALTIME_REFUSED: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// Creates and starts a host container of `run_id`; returns its id and records the nofile
/// limit it got in `spec`. When the engine cannot set [`NOFILE`] ("error setting rlimit"),
/// the container is made again with this process's hard limit, and `spec.nofile_note` says
/// so. When it refuses the host's real-time budget (`cpu.rt_runtime_us`: an engine whose
/// own cgroup has none, i.e. dockerd without `--cpu-rt-runtime`; or a kernel without
/// real-time group scheduling), the container is made again without one and
/// `spec.privileges.realtime_note` says so; the wire then runs fair-scheduled and says that
/// in its ready line. A container that was created but failed to start keeps its label, so
/// teardown removes it.
///
/// # Errors
/// The create or start call failed, naming the container.
pub async fn create_host(
    docker: &Docker,
    run_id: &str,
    image: &str,
    spec: &mut HostSpec,
) -> anyhow::Result<String> {
    // Once the engine refused NOFILE or a real-time budget in this process, later hosts
    // start without it directly instead of failing and being made twice.
    if let Some((cap, note)) = NOFILE_CAP.lock().ok().and_then(|c| c.clone()) {
        spec.nofile = Some(cap);
        spec.nofile_note = Some(note);
    } else {
        spec.nofile = Some(NOFILE);
    }
    if spec.privileges.realtime_runtime_us.is_some() {
        if let Some(note) = REALTIME_REFUSED.lock().ok().and_then(|c| c.clone()) {
            spec.privileges.realtime_runtime_us = None;
            spec.privileges.realtime_note = Some(note);
        }
    }
    loop {
        let e = match create_host_once(docker, run_id, image, spec).await {
            Err(e) => e,
            ok => return ok,
        };
        let text = e.to_string();
        if let Some(budget) = spec
            .privileges
            .realtime_runtime_us
            .filter(|_| text.contains("rt_runtime") || text.contains("real-time"))
        {
            let note = format!("the engine refused a real-time budget of {budget} us per second ({text}); the link's wire runs fair-scheduled. On cgroup v1, start dockerd with --cpu-rt-runtime=950000");
            eprintln!("echolab-up: {note}");
            if let Ok(mut c) = REALTIME_REFUSED.lock() {
                *c = Some(note.clone());
            }
            spec.privileges.realtime_runtime_us = None;
            spec.privileges.realtime_note = Some(note);
        } else if text.contains("rlimit") && spec.nofile == Some(NOFILE) {
            let Some(cap) = own_hard_nofile().filter(|c| *c < NOFILE) else {
                return Err(e);
            };
            let note = format!("the engine could not set nofile {NOFILE} ({e}); using this machine's hard limit {cap}");
            if let Ok(mut c) = NOFILE_CAP.lock() {
                *c = Some((cap, note.clone()));
            }
            spec.nofile = Some(cap);
            spec.nofile_note = Some(note);
        } else {
            return Err(e);
        }
        // A refusal at start leaves the created container; one at create (a kernel without
        // real-time group scheduling, a cgroup v2 engine) leaves none, which is no error.
        let name = object_name(run_id, &spec.role);
        match docker
            .remove_container(
                &name,
                Some(bollard::query_parameters::RemoveContainerOptions {
                    force: true,
                    v: true,
                    ..Default::default()
                }),
            )
            .await
        {
            Ok(())
            | Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => {}
            Err(e) => return Err(failed("remove container", &name, e)),
        }
    }
}

async fn create_host_once(
    docker: &Docker,
    run_id: &str,
    image: &str,
    spec: &HostSpec,
) -> anyhow::Result<String> {
    let name = object_name(run_id, &spec.role);
    let nofile = spec.nofile.unwrap_or(NOFILE);
    let host_config = HostConfig {
        network_mode: Some(spec.network_mode.clone()),
        sysctls: (!spec.sysctls.is_empty()).then(|| spec.sysctls.clone()),
        ulimits: Some(vec![ResourcesUlimits {
            name: Some("nofile".into()),
            soft: Some(nofile),
            hard: Some(nofile),
        }]),
        cpuset_cpus: spec.cpuset.clone(),
        ..Default::default()
    };
    let mut body = ContainerCreateBody {
        image: Some(image.to_string()),
        cmd: spec.cmd.clone(),
        labels: Some(labels(run_id, &spec.role)),
        host_config: Some(host_config),
        networking_config: spec
            .extra_networks
            .first()
            .filter(|_| !spec.network_mode.starts_with("container:"))
            .map(|(net, ip)| NetworkingConfig {
                endpoints_config: Some([(net.clone(), endpoint(ip))].into_iter().collect()),
            }),
        ..Default::default()
    };
    spec.privileges.apply(&mut body);
    let options = CreateContainerOptionsBuilder::default().name(&name).build();
    let d = docker.clone();
    let created = super::creations::create(docker, "create container", &name, async move {
        d.create_container(Some(options), body).await
    })
    .await?;
    for (net, ip) in spec.extra_networks.iter().skip(1) {
        let req = bollard::models::NetworkConnectRequest {
            container: created.id.clone(),
            endpoint_config: Some(endpoint(ip)),
        };
        let what = format!("{net} to {name}");
        call(
            docker,
            "connect network",
            &what,
            docker.connect_network(net, req),
        )
        .await?;
    }
    call(
        docker,
        "start container",
        &name,
        docker.start_container(&created.id, None),
    )
    .await?;
    Ok(created.id)
}

fn endpoint(ip: &Option<String>) -> EndpointSettings {
    EndpointSettings {
        ipam_config: ip.as_ref().map(|a| bollard::models::EndpointIpamConfig {
            ipv4_address: Some(a.clone()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The inputs of [`up_loopback`].
#[derive(Debug, Clone)]
pub struct LoopbackSpec {
    /// Run id (labels, names).
    pub run_id: String,
    /// Image id.
    pub image: String,
    /// What server and client may do.
    pub privileges: RunPrivileges,
    /// The server's CPUs.
    pub server_cpus: Option<String>,
    /// The client's CPUs.
    pub client_cpus: Option<String>,
}

/// Removes a host container (force) with its anonymous volumes, for hosts that are made again.
///
/// # Errors
/// The engine refused, naming the container.
pub async fn remove_host(docker: &Docker, id: &str) -> anyhow::Result<()> {
    let options = bollard::query_parameters::RemoveContainerOptions {
        force: true,
        v: true,
        ..Default::default()
    };
    call(
        docker,
        "remove container",
        id,
        docker.remove_container(id, Some(options)),
    )
    .await
}

/// The server and client containers of the loopback topology, as made by [`up_loopback`].
pub struct MadeLoopback {
    /// Server container id.
    pub server: String,
    /// Client container id (in the server's network namespace).
    pub client: String,
}

/// Brings up the loopback topology; returns its containers and their recorded settings.
///
/// # Errors
/// A container could not be made; what is made carries the run's label for teardown.
pub async fn up_loopback(
    docker: &Docker,
    spec: &LoopbackSpec,
) -> anyhow::Result<(MadeLoopback, BTreeMap<String, serde_json::Value>)> {
    let (run_id, image) = (spec.run_id.as_str(), spec.image.as_str());
    let mut server_spec = HostSpec {
        role: "server".into(),
        network_mode: "none".into(),
        sysctls: endpoint_sysctls(),
        privileges: spec.privileges.server.clone(),
        cpuset: spec.server_cpus.clone(),
        ..Default::default()
    };
    let server = create_host(docker, run_id, image, &mut server_spec).await?;
    let mut client_spec = HostSpec {
        role: "client".into(),
        network_mode: format!("container:{server}"),
        privileges: spec.privileges.client.clone(),
        cpuset: spec.client_cpus.clone(),
        ..Default::default()
    };
    let client = create_host(docker, run_id, image, &mut client_spec).await?;
    let mut record = BTreeMap::new();
    record.insert(
        "server".into(),
        server_spec.record(&object_name(run_id, "server"), &server),
    );
    let mut client_rec = client_spec.record(&object_name(run_id, "client"), &client);
    client_rec["sysctls"] = json!("shared with the server's network namespace");
    record.insert("client".into(), client_rec);
    Ok((MadeLoopback { server, client }, record))
}
