//! A multi-machine run (`--lab`): the server host on the server's engine and the
//! client host on the client's, each a container of the lab image, so that the client reaches
//! the server over the real network between the two machines: both with host networking for
//! profile `native`; for a link profile the client behind a link host on its machine
//! ([`across`]), the server still with host networking. With several client machines each
//! has a client host (and, on a link profile, its own link host: the profile applies to
//! each path), and every run is split between them ([`DockerHosts`]'s sharded `run_bench`).
//!
//! Host networking rather than a published port: a published port puts the engine's NAT
//! (iptables DNAT and a conntrack entry per connection) or its userland proxy on the path,
//! which are costs of Docker, not of the network under study, and a connection-rate cell
//! would measure them. The price is that the hosts share their machines' network
//! namespaces: sysctls are the machines' own, and a new container does not start a cell
//! without the TIME_WAIT sockets of the cells before it (the manifest says so).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;

use anyhow::anyhow;
use bollard::Docker;
use echolab_core::profile::{Profile, Topology};
use echolab_core::results::{CalibrationRecord, EngineRecord, ImageInfo, LinkRecord};
use serde_json::json;

use super::docker_hosts::DockerHosts;
use super::engine::{Engine, Machine};
use super::exec;
use super::link::across;
use super::link::calibration::MeasuredBaseline;
use super::privileges::RunPrivileges;
use super::topology::{create_host, HostSpec};
use super::{image, object_name};
use crate::hosts::STOP_DEADLINE;
use crate::image_archive::IMAGE_BIN_DIR;
use echolab_core::lab_file::Lab;
use echolab_core::lab_plan::host_name;

/// One engine of a lab run, reached.
pub struct LabEngine {
    /// The lab file's name for it.
    pub name: String,
    /// Its endpoint, as the lab file gives it (`tcp://10.0.0.2:2376`), for messages.
    pub endpoint: String,
    /// The connection.
    pub engine: Engine,
    /// What it said of its machine.
    pub machine: Machine,
}

/// The engines of a lab run, by role.
pub struct LabEngines {
    /// The server's.
    pub server: LabEngine,
    /// The clients', in the lab file's order (at least one).
    pub clients: Vec<LabEngine>,
}

impl LabEngines {
    /// Reaches every engine of `lab` ([`super::engine::connect_lab`]) before anything is
    /// created on any of them.
    ///
    /// # Errors
    /// The first engine that cannot be reached, in one line naming it.
    pub async fn connect(lab: &Lab) -> Result<Self, String> {
        let reach = |name: &str| {
            let name = name.to_string();
            let spec = lab.engines[&name].clone();
            async move {
                super::engine::connect_lab(&name, &spec)
                    .await
                    .map(|(engine, machine)| LabEngine {
                        name,
                        endpoint: spec.endpoint_text.clone(),
                        engine,
                        machine,
                    })
            }
        };
        let (server, clients) = tokio::join!(
            reach(&lab.server),
            futures_util::future::join_all(lab.clients.iter().map(|c| reach(c)))
        );
        Ok(Self {
            server: server?,
            clients: clients.into_iter().collect::<Result<_, _>>()?,
        })
    }

    /// The first client's engine.
    pub fn client(&self) -> &LabEngine {
        &self.clients[0]
    }

    /// Every engine, the server's first.
    pub fn all(&self) -> Vec<&LabEngine> {
        std::iter::once(&self.server).chain(&self.clients).collect()
    }
}

/// The lab image on every engine: the deterministic archive built from `bin_dir` and
/// loaded through each engine's API where that id is not there yet, or the prebuilt
/// `--image`, which every engine must have. Returns the image and, by engine name, its id
/// there and whether it was loaded now.
///
/// # Errors
/// A missing binary or prebuilt image (naming the engine), or an engine error.
pub async fn ensure_image(
    engines: &LabEngines,
    bin_dir: &Path,
    programs: &[String],
    prebuilt: Option<&str>,
) -> anyhow::Result<(ImageInfo, BTreeMap<String, (String, bool)>)> {
    let mut per_engine = BTreeMap::new();
    if let Some(reference) = prebuilt {
        // From an engine that has it to those that do not, through the engines' APIs (`docker
        // save | docker load`), as there is no registry.
        let mut source = None;
        for e in engines.all() {
            if image::image_id(&e.engine.docker, reference)
                .await?
                .is_some()
            {
                source = Some(e);
                break;
            }
        }
        let Some(source) = source else {
            return Err(anyhow!(
                "docker: image {reference} is on none of the lab's engines; load it into one first (e.g. `docker load < result`)"
            ));
        };
        let mut info = None;
        for e in engines.all() {
            let docker = &e.engine.docker;
            let copied = image::image_id(docker, reference).await?.is_none();
            if copied {
                copy_image(&source.engine.docker, docker, reference)
                    .await
                    .map_err(|err| anyhow!("engine {}: {err:#}", e.name))?;
            }
            let got = image::ensure(docker, bin_dir, programs, Some(reference))
                .await
                .map_err(|err| anyhow!("engine {}: {err:#}", e.name))?;
            per_engine.insert(e.name.clone(), (got.id.clone(), copied));
            info.get_or_insert(got);
        }
        let info = info.expect("a lab has two engines");
        if let Some((name, (id, _))) = per_engine.iter().find(|(_, (id, _))| *id != info.id) {
            return Err(anyhow!(
                "docker: image {reference} is {id} on engine {name} but {} on engine {}; remove one",
                info.id,
                source.name
            ));
        }
        return Ok((info, per_engine));
    }
    let archive =
        tokio::task::block_in_place(|| crate::image_archive::build_archive(bin_dir, programs))?;
    for e in engines.all() {
        let loaded = image::load(&e.engine.docker, &archive)
            .await
            .map_err(|err| anyhow!("engine {}: {err:#}", e.name))?;
        per_engine.insert(e.name.clone(), (archive.id.clone(), loaded));
    }
    let info = ImageInfo {
        reference: archive.tag.clone(),
        id: archive.id.clone(),
        binaries: archive.contents.clone(),
    };
    Ok((info, per_engine))
}

/// Copies image `reference` from engine `from` to engine `to` (the engine API's image
/// export, then its import).
///
/// # Errors
/// Either engine failed.
async fn copy_image(from: &Docker, to: &Docker, reference: &str) -> anyhow::Result<()> {
    use futures_util::TryStreamExt as _;
    let export = from
        .export_image(reference)
        .try_collect::<Vec<bytes::Bytes>>();
    let chunks = super::deadlines::within(from, std::time::Duration::MAX, export)
        .await
        .map_err(|gave| super::deadlines::gave_up(gave, "export image", reference))?
        .map_err(|e| super::engine::failed("export image", reference, e))?;
    let archive: Vec<u8> = chunks.concat();
    image::import(to, archive, reference).await
}

/// The hosts of a lab run, up, with what the manifest records of them.
pub struct LabUp {
    /// The hosts for the runner.
    pub hosts: DockerHosts,
    /// `hosts` of the manifest, by role.
    pub records: BTreeMap<String, serde_json::Value>,
    /// The manifest's link record: the real path alone (`native`), or the link added on each
    /// client's machine ([`across`]).
    pub link: LinkRecord,
    server: (Docker, String),
    /// Each client machine's engine and host, in the lab file's order.
    clients: Vec<(Docker, String)>,
    server_addr: IpAddr,
    /// The profile calibration judges the path against.
    profile: Profile,
    /// With a link profile: each client machine's RTT to the server before its link was
    /// installed, which calibration of that path adds to what the profile adds; empty on
    /// profile `native`.
    baselines: Vec<MeasuredBaseline>,
    /// The running wires (one per client machine), kept so that their output is collected
    /// until teardown.
    _wires: Vec<exec::Streaming>,
}

/// Makes the server host on the server's engine with host networking, reached at the lab
/// file's address of its machine, and the client host on the client's: with host networking
/// for profile `native`, behind a link host on its machine for a link profile ([`across`]).
///
/// # Errors
/// A container, network or the link could not be made, or the profile is loopback; what is
/// made carries the run's label, for teardown on each engine.
pub async fn up(
    engines: &LabEngines,
    lab: &Lab,
    run_id: &str,
    image: &str,
    privileges: &RunPrivileges,
    profile: &Profile,
) -> anyhow::Result<LabUp> {
    let on = |e: &LabEngine, err: anyhow::Error| anyhow!("engine {}: {err:#}", e.name);
    let mut records = BTreeMap::new();
    let sd = &engines.server.engine.docker;
    let (server, record) = host_networked(sd, run_id, image, "server", &privileges.server)
        .await
        .map_err(|err| on(&engines.server, err))?;
    records.insert("server".to_string(), with_engine(record, &engines.server));
    let server_addr = lab.server_address();
    let mut clients = Vec::new();
    let (link, (taps, qdiscs), wires, baselines) = match profile.topology {
        Topology::Native => {
            for (i, e) in engines.clients.iter().enumerate() {
                let docker = &e.engine.docker;
                let (client, record) =
                    host_networked(docker, run_id, image, "client", &privileges.client)
                        .await
                        .map_err(|err| on(e, err))?;
                records.insert(client_role(i), with_engine(record, e));
                clients.push((docker.clone(), client));
            }
            let names: Vec<&str> = engines.clients.iter().map(|e| e.name.as_str()).collect();
            let link = LinkRecord {
                backend: "none".into(),
                reason: format!(
                    "native: the real network between engine {}'s machine (server, reached at {server_addr}) and engine {}'s (client{}); every host uses its machine's network (host networking), nothing added",
                    engines.server.name,
                    names.join("'s, engine "),
                    if names.len() > 1 { "s, each running its share of every run's connections" } else { "" }
                ),
                ..Default::default()
            };
            (link, (Vec::new(), Vec::new()), Vec::new(), Vec::new())
        }
        Topology::Link => {
            let server = across::RemoteServer {
                docker: sd,
                host: &server,
                addr: server_addr,
                addr_from: format!(
                    "engines.{}.address in {}",
                    engines.server.name,
                    lab.path.display()
                ),
            };
            let (mut taps, mut wires, mut baselines) = (Vec::new(), Vec::new(), Vec::new());
            let mut qdiscs = Vec::new();
            let mut link = None;
            for (i, e) in engines.clients.iter().enumerate() {
                let docker = &e.engine.docker;
                let a = across::up(&server, docker, run_id, image, privileges, profile)
                    .await
                    .map_err(|err| on(e, err))?;
                for (role, record) in a.records {
                    let record = match role.as_str() {
                        "networks" => record,
                        _ => with_engine(record, e),
                    };
                    records.insert(host_name(&role, i), record);
                }
                clients.push((docker.clone(), a.client));
                taps.extend(a.tap);
                qdiscs.extend(a.qdiscs);
                wires.extend(a.wire);
                baselines.push(a.baseline);
                link.get_or_insert(a.link);
            }
            let mut link = link.expect("a lab run has a client machine");
            if engines.clients.len() > 1 {
                link.reason = format!(
                    "{}; {} client machines, each with its own link host: the profile applies to each path to the server (its delay, jitter and loss as on separate real paths; its rate is each path's own, so the server may receive up to {} times it)",
                    link.reason,
                    engines.clients.len(),
                    engines.clients.len()
                );
            }
            (link, (taps, qdiscs), wires, baselines)
        }
        Topology::Loopback => {
            return Err(anyhow!(
                "profile {} is loopback: one machine's, not a lab's",
                profile.name
            ))
        }
    };
    let names = engines
        .clients
        .iter()
        .map(|e| (e.name.clone(), e.endpoint.clone()));
    let server_engine = (engines.server.name.clone(), engines.server.endpoint.clone());
    Ok(LabUp {
        hosts: DockerHosts::on_machines(
            (sd, server.clone(), server_engine),
            clients.iter().cloned().zip(names).collect(),
            server_addr,
            taps,
            qdiscs,
        ),
        records,
        link,
        server: (sd.clone(), server),
        clients,
        server_addr,
        profile: profile.clone(),
        baselines,
        _wires: wires,
    })
}

/// A host of `role` with host networking on `docker`; its container id and record.
async fn host_networked(
    docker: &Docker,
    run_id: &str,
    image: &str,
    role: &str,
    privileges: &super::privileges::Privileges,
) -> anyhow::Result<(String, serde_json::Value)> {
    let mut spec = HostSpec {
        role: role.into(),
        network_mode: "host".into(),
        privileges: privileges.clone(),
        ..Default::default()
    };
    let id = create_host(docker, run_id, image, &mut spec).await?;
    let mut record = spec.record(&object_name(run_id, role), &id);
    record["sysctls"] = json!("the machine's own (host networking shares its network namespace)");
    Ok((id, record))
}

/// The manifest's name for client host `index` (0-based) of a lab run: `client`, then
/// `client-2`, `client-3`, ...
fn client_role(index: usize) -> String {
    host_name("client", index)
}

/// `record` with the name of the engine it is on.
fn with_engine(mut record: serde_json::Value, e: &LabEngine) -> serde_json::Value {
    record["engine"] = json!(e.name);
    record
}

impl LabUp {
    /// Calibrates the path: calib-server in the server host, `echolab-netem calibrate` in the
    /// client host. For profile `native` it measures RTT and goodput each way and judges the
    /// RTT against the profile's sanity bound; for a link profile it also checks what the
    /// link adds over the baseline, and the total as baseline plus that
    /// (`echolab_core::calibration::sum_rtt_check`), with the wire's counters across it.
    /// With several client machines each path is calibrated in turn; returns each path's
    /// record by client engine name, in the lab file's order, for core's verdict
    /// (`echolab_core::calibration::judge_paths`) to join.
    ///
    /// # Errors
    /// The tools could not run or printed no report (a miss is `passed: false`), naming the
    /// client engine.
    pub async fn calibrate(
        &mut self,
        engines: &LabEngines,
    ) -> anyhow::Result<Vec<(String, CalibrationRecord)>> {
        use super::link::calibration::{calibrate, Baseline};
        let mut paths = Vec::new();
        for (i, ((docker, host), e)) in self.clients.iter().zip(&engines.clients).enumerate() {
            let baseline = self
                .baselines
                .get(i)
                .map_or(Baseline::None, |&b| Baseline::AcrossMachines(b));
            let run = calibrate(
                &self.server.0,
                &self.server.1,
                docker,
                host,
                self.server_addr,
                &self.profile,
                baseline,
            );
            let record = self
                .hosts
                .count_link(run)
                .await
                .map_err(|err| anyhow!("engine {}: {err:#}", e.name))?;
            paths.push((e.name.clone(), record));
        }
        Ok(paths)
    }

    /// The hosts, and the running wires whose output must be collected until teardown.
    pub fn into_parts(self) -> (DockerHosts, Vec<exec::Streaming>) {
        (self.hosts, self._wires)
    }

    /// The manifest's record of each engine: endpoint, roles, versions, the machine (CPU
    /// model read in the role's host there), and the image.
    pub async fn engine_records(
        &self,
        engines: &LabEngines,
        lab: &Lab,
        images: &BTreeMap<String, (String, bool)>,
    ) -> BTreeMap<String, EngineRecord> {
        let mut out = BTreeMap::new();
        let roles = std::iter::once(("server", &self.server))
            .chain(self.clients.iter().map(|c| ("client", c)));
        for ((role, (docker, host)), e) in roles.zip(engines.all()) {
            let cmd = echolab_core::cmd::Job::CpuModel.command(IMAGE_BIN_DIR);
            let cpu_model = match exec::run(docker, host, &cmd, STOP_DEADLINE).await {
                Ok(o) if o.exit_code == Some(0) => o.stdout.trim().to_string(),
                _ => String::new(),
            };
            let (image_id, image_loaded) = images.get(&e.name).cloned().unwrap_or_default();
            let spec = &lab.engines[&e.name];
            out.insert(
                e.name.clone(),
                EngineRecord {
                    endpoint: spec.endpoint_text.clone(),
                    roles: vec![role.to_string()],
                    address: spec.address.map(|a| a.to_string()).unwrap_or_default(),
                    docker_version: format!("{} (API {})", e.engine.version, e.engine.api_version),
                    hostname: e.machine.hostname.clone(),
                    kernel: e.machine.kernel.clone(),
                    cpu_model,
                    cpus: e.machine.cpus,
                    mem_bytes: e.machine.mem_bytes,
                    image_id,
                    image_loaded,
                },
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_hosts_are_named_in_order() {
        let names: Vec<String> = (0..3).map(client_role).collect();
        assert_eq!(names, ["client", "client-2", "client-3"]);
        let links: Vec<String> = (0..2).map(|i| host_name("link", i)).collect();
        assert_eq!(links, ["link", "link-2"]);
    }
}
