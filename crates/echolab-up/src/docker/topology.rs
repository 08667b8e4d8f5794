//! The hosts and networks of a profile (DESIGN.md "Topologies"), and the [`Hosts`]
//! implementation on them.
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
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use anyhow::anyhow;
use bollard::models::{
    ContainerCreateBody, EndpointSettings, HostConfig, NetworkingConfig, ResourcesUlimits,
};
use bollard::query_parameters::CreateContainerOptionsBuilder;
use bollard::Docker;
use echolab_core::cmd::{BenchCmd, Ready, ServerCmd};
use echolab_core::results::ResourceSample;
use serde_json::json;

use super::engine::{call, failed};
use super::exec;
use super::privileges::{Privileges, RunPrivileges};
use super::stats::Sampler;
use super::{labels, object_name};
use crate::hosts::{Hosts, ProcOutput, BENCH_DEADLINE, READY_DEADLINE, STOP_DEADLINE};
use crate::image::IMAGE_BIN_DIR;

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
            "cpuset": self.cpuset.clone().unwrap_or_else(|| "all CPUs".into()),
            "seccomp": p.seccomp.describe(),
            "command": self.cmd.clone().unwrap_or_else(|| vec![format!("{IMAGE_BIN_DIR}/echolab-up"), "__hold".into()]),
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

/// Creates and starts a host container of `run_id`; returns its id and records the nofile
/// limit it got in `spec`. When the engine cannot set [`NOFILE`] ("error setting rlimit"),
/// the container is made again with this process's hard limit, and `spec.nofile_note` says
/// so. A container that was created but failed to start keeps its label, so teardown
/// removes it.
///
/// # Errors
/// The create or start call failed, naming the container.
pub async fn create_host(
    docker: &Docker,
    run_id: &str,
    image: &str,
    spec: &mut HostSpec,
) -> anyhow::Result<String> {
    // Once the engine refused NOFILE in this process, later hosts start at the cap directly
    // instead of failing and being made twice.
    if let Some((cap, note)) = NOFILE_CAP.lock().ok().and_then(|c| c.clone()) {
        spec.nofile = Some(cap);
        spec.nofile_note = Some(note);
        return create_host_once(docker, run_id, image, spec).await;
    }
    spec.nofile = Some(NOFILE);
    match create_host_once(docker, run_id, image, spec).await {
        Err(e) if e.to_string().contains("rlimit") => {
            let Some(cap) = own_hard_nofile().filter(|c| *c < NOFILE) else {
                return Err(e);
            };
            let name = object_name(run_id, &spec.role);
            docker
                .remove_container(
                    &name,
                    Some(bollard::query_parameters::RemoveContainerOptions {
                        force: true,
                        v: true,
                        ..Default::default()
                    }),
                )
                .await
                .map_err(|e| failed("remove container", &name, e))?;
            let note = format!("the engine could not set nofile {NOFILE} ({e}); using this machine's hard limit {cap}");
            if let Ok(mut c) = NOFILE_CAP.lock() {
                *c = Some((cap, note.clone()));
            }
            spec.nofile = Some(cap);
            spec.nofile_note = Some(note);
            create_host_once(docker, run_id, image, spec).await
        }
        other => other,
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
    let created = call(
        "create container",
        &name,
        docker.create_container(Some(options), body),
    )
    .await?;
    for (net, ip) in spec.extra_networks.iter().skip(1) {
        let req = bollard::models::NetworkConnectRequest {
            container: created.id.clone(),
            endpoint_config: Some(endpoint(ip)),
        };
        let what = format!("{net} to {name}");
        call("connect network", &what, docker.connect_network(net, req)).await?;
    }
    call(
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

/// The hosts of a run on Docker.
pub struct DockerHosts {
    docker: Docker,
    server: String,
    client: String,
    /// Where the client reaches the server (127.0.0.1 for loopback, the server's address on
    /// its network behind a link).
    server_addr: IpAddr,
    bind: IpAddr,
    /// How to make client and server again for a cell of their own.
    remake: Remake,
    /// The userspace wire's counters, when it carries the link.
    wire: Option<super::wiretap::WireTap>,
}

/// What it takes to make a run's client and server hosts again.
#[derive(Debug, Clone)]
pub enum Remake {
    /// Loopback: the server in a namespace with only `lo`, the client in the server's.
    Loopback(LoopbackSpec),
    /// Behind a link: each on its own network, routed through the link host.
    Link(super::link::Endpoints),
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
        "remove container",
        id,
        docker.remove_container(id, Some(options)),
    )
    .await
}

/// A running echo-server exec.
pub struct DockerServer {
    stream: exec::Streaming,
    pid: u32,
}

/// The output of a server whose process ended before it was stopped.
///
/// # Errors
/// The engine could not say how it ended.
async fn exited_before_stop(docker: &Docker, server: DockerServer) -> anyhow::Result<ProcOutput> {
    let mut out = exec::finish(docker, server.stream, STOP_DEADLINE).await?;
    out.exited_before_stop = true;
    Ok(out)
}

/// Brings up the loopback topology; returns the hosts and their recorded settings.
///
/// # Errors
/// A container could not be made; what is made carries the run's label for teardown.
pub async fn up_loopback(
    docker: &Docker,
    spec: &LoopbackSpec,
) -> anyhow::Result<(DockerHosts, BTreeMap<String, serde_json::Value>)> {
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
    let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
    Ok((
        DockerHosts {
            docker: docker.clone(),
            server,
            client,
            server_addr: loopback,
            bind: loopback,
            remake: Remake::Loopback(spec.clone()),
            wire: None,
        },
        record,
    ))
}

impl DockerHosts {
    /// Hosts behind a link: the server listens on all addresses and is reached at `server_addr`.
    pub fn behind_link(
        docker: &Docker,
        made: super::link::MadeEndpoints,
        endpoints: super::link::Endpoints,
        wire: Option<super::wiretap::WireTap>,
    ) -> Self {
        Self {
            docker: docker.clone(),
            server: made.server,
            client: made.client,
            server_addr: made.server_ip,
            bind: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            remake: Remake::Link(endpoints),
            wire,
        }
    }

    /// The server host's container id.
    pub fn server_container(&self) -> &str {
        &self.server
    }

    /// The client host's container id.
    pub fn client_container(&self) -> &str {
        &self.client
    }

    /// Runs a program in the client host (calibration tools).
    ///
    /// # Errors
    /// As [`exec::run`].
    pub async fn run_in_client(&self, cmd: &[String]) -> anyhow::Result<ProcOutput> {
        exec::run(&self.docker, &self.client, cmd, BENCH_DEADLINE).await
    }

    async fn signal(
        &self,
        container: &str,
        target: &str,
        signal: &str,
    ) -> anyhow::Result<ProcOutput> {
        let cmd = vec![
            format!("{IMAGE_BIN_DIR}/echolab-up"),
            "__signal".into(),
            target.into(),
            signal.into(),
        ];
        exec::run(&self.docker, container, &cmd, STOP_DEADLINE).await
    }
}

impl Hosts for DockerHosts {
    type Server = DockerServer;

    async fn link_snapshot(
        &mut self,
    ) -> Option<anyhow::Result<echolab_netem::wire::stats::WireStats>> {
        match self.wire.as_mut() {
            Some(tap) => Some(tap.snapshot().await),
            None => None,
        }
    }

    async fn fresh_hosts(&mut self) -> anyhow::Result<bool> {
        // The client first: in loopback it lives in the server's namespace.
        remove_host(&self.docker, &self.client).await?;
        remove_host(&self.docker, &self.server).await?;
        match self.remake.clone() {
            Remake::Loopback(spec) => {
                let (fresh, _) = up_loopback(&self.docker, &spec).await?;
                self.server = fresh.server;
                self.client = fresh.client;
            }
            Remake::Link(endpoints) => {
                let made = endpoints.make(&self.docker).await?;
                self.server = made.server;
                self.client = made.client;
                self.server_addr = made.server_ip;
            }
        }
        Ok(true)
    }

    fn server_bind(&self) -> IpAddr {
        self.bind
    }

    fn target(&self, ready: &Ready) -> SocketAddr {
        SocketAddr::new(self.server_addr, ready.addr.port())
    }

    async fn start_server(&mut self, server: &ServerCmd) -> anyhow::Result<(DockerServer, Ready)> {
        let args = server.argv();
        let mut cmd = vec![format!("{IMAGE_BIN_DIR}/{}", ServerCmd::PROGRAM)];
        cmd.extend_from_slice(&args);
        let mut stream = exec::start(&self.docker, &self.server, &cmd, Ready::PREFIX).await?;
        let ready = tokio::time::timeout(READY_DEADLINE, &mut stream.ready).await;
        match ready {
            Ok(Ok(line)) => {
                let r = Ready::parse(&line).ok_or_else(|| {
                    anyhow!("echo-server's readiness line is not of the expected form ({}ADDR model=M workers=N pid=P): {line}", Ready::PREFIX)
                })?;
                let pid = r.pid;
                Ok((DockerServer { stream, pid }, r))
            }
            Ok(Err(_)) => {
                // The output closed without a readiness line: the server exited.
                let out = exec::finish(&self.docker, stream, STOP_DEADLINE).await?;
                Err(anyhow!(
                    "echo-server {} exited before it was ready ({})",
                    args.join(" "),
                    out.describe()
                ))
            }
            Err(_) => {
                let _ = self.signal(&self.server, "echo-server", "KILL").await;
                Err(anyhow!(
                    "echo-server {} printed no readiness line within {READY_DEADLINE:?}; killed",
                    args.join(" ")
                ))
            }
        }
    }

    async fn run_bench(
        &mut self,
        bench: &BenchCmd,
        _server: &DockerServer,
        window_start: std::time::Duration,
    ) -> anyhow::Result<(ProcOutput, Vec<ResourceSample>)> {
        let sampler = Sampler::start(&self.docker, &self.server, window_start).await;
        let mut cmd = vec![format!("{IMAGE_BIN_DIR}/{}", BenchCmd::PROGRAM)];
        cmd.extend(bench.argv());
        let result = exec::run(&self.docker, &self.client, &cmd, BENCH_DEADLINE).await;
        let samples = sampler.stop().await;
        match result {
            Ok(out) => Ok((out, samples)),
            Err(e) => {
                let _ = self.signal(&self.client, "echo-bench", "KILL").await;
                Err(e)
            }
        }
    }

    async fn trace_bench(&mut self, bench: &BenchCmd) -> anyhow::Result<ProcOutput> {
        let mut cmd = vec![format!("{IMAGE_BIN_DIR}/strace")];
        cmd.extend(crate::hosts::STRACE_ARGS.iter().map(|a| a.to_string()));
        cmd.push(format!("{IMAGE_BIN_DIR}/{}", BenchCmd::PROGRAM));
        cmd.extend(bench.argv());
        exec::run(&self.docker, &self.client, &cmd, BENCH_DEADLINE).await
    }

    async fn stop_server(&mut self, server: DockerServer) -> anyhow::Result<ProcOutput> {
        // Its output closes when the process (or its container) is gone.
        if server.stream.output.is_finished() {
            return exited_before_stop(&self.docker, server).await;
        }
        let sent = self
            .signal(&self.server, &server.pid.to_string(), "TERM")
            .await;
        if sent.as_ref().map_or(true, |s| s.exit_code != Some(0)) {
            // It may have died between the check and the signal.
            if server.stream.output.is_finished() {
                return exited_before_stop(&self.docker, server).await;
            }
            let why = match sent {
                Ok(s) => s.describe(),
                Err(e) => format!("{e:#}"),
            };
            return Err(anyhow!("SIGTERM to echo-server pid {}: {why}", server.pid));
        }
        match exec::finish(&self.docker, server.stream, STOP_DEADLINE).await {
            Ok(out) => Ok(out),
            Err(e) => {
                let _ = self
                    .signal(&self.server, &server.pid.to_string(), "KILL")
                    .await;
                Err(anyhow!(
                    "echo-server pid {} after SIGTERM: {e:#}; killed",
                    server.pid
                ))
            }
        }
    }
}
