//! A multi-machine run (issue 12, `--lab`): the server host on the server's engine and the
//! client host on the client's, each a container of the lab image, so that the client reaches
//! the server over the real network between the two machines: both with host networking for
//! profile `native`; for a link profile the client behind a link host on its machine
//! ([`across`]), the server still with host networking.
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
use super::privileges::RunPrivileges;
use super::topology::{create_host, HostSpec};
use super::{image, object_name};
use crate::hosts::STOP_DEADLINE;
use crate::image_archive::IMAGE_BIN_DIR;
use crate::lab::Lab;

/// One engine of a lab run, reached.
pub(crate) struct LabEngine {
    /// The lab file's name for it.
    pub name: String,
    /// The connection.
    pub engine: Engine,
    /// What it said of its machine.
    pub machine: Machine,
}

/// The engines of a lab run, by role.
pub(crate) struct LabEngines {
    /// The server's.
    pub server: LabEngine,
    /// The client's.
    pub client: LabEngine,
}

impl LabEngines {
    /// Reaches every engine of `lab` ([`super::engine::connect_lab`]) before anything is
    /// created on any of them.
    ///
    /// # Errors
    /// The first engine that cannot be reached, in one line naming it.
    pub(crate) async fn connect(lab: &Lab) -> Result<Self, String> {
        let reach = |name: &str| {
            let name = name.to_string();
            let spec = lab.engines[&name].clone();
            async move {
                super::engine::connect_lab(&name, &spec)
                    .await
                    .map(|(engine, machine)| LabEngine {
                        name,
                        engine,
                        machine,
                    })
            }
        };
        let (server, client) = tokio::join!(reach(&lab.server), reach(&lab.client));
        Ok(Self {
            server: server?,
            client: client?,
        })
    }

    /// Both engines, server's first.
    pub(crate) fn all(&self) -> [&LabEngine; 2] {
        [&self.server, &self.client]
    }
}

/// The lab image on every engine: the deterministic archive built from `bin_dir` and
/// loaded through each engine's API where that id is not there yet, or the prebuilt
/// `--image`, which every engine must have. Returns the image and, by engine name, its id
/// there and whether it was loaded now.
///
/// # Errors
/// A missing binary or prebuilt image (naming the engine), or an engine error.
pub(crate) async fn ensure_image(
    engines: &LabEngines,
    bin_dir: &Path,
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
            let got = image::ensure(docker, bin_dir, Some(reference))
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
    let archive = tokio::task::block_in_place(|| crate::image_archive::build_archive(bin_dir))?;
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
    let chunks: Vec<bytes::Bytes> = from
        .export_image(reference)
        .try_collect()
        .await
        .map_err(|e| super::engine::failed("export image", reference, e))?;
    let archive: Vec<u8> = chunks.concat();
    image::import(to, archive, reference).await
}

/// The hosts of a lab run, up, with what the manifest records of them.
pub(crate) struct LabUp {
    /// The hosts for the runner.
    pub hosts: DockerHosts,
    /// `hosts` of the manifest, by role.
    pub records: BTreeMap<String, serde_json::Value>,
    /// The manifest's link record: the real path alone (`native`), or the link added on the
    /// client's machine ([`across`]).
    pub link: LinkRecord,
    server: (Docker, String),
    client: (Docker, String),
    server_addr: IpAddr,
    /// The profile calibration judges the path against.
    profile: Profile,
    /// With a link profile: the RTT before the link was installed, which calibration adds
    /// to what the profile adds.
    baseline_rtt: Option<std::time::Duration>,
    /// The running wire, kept so that its output is collected until teardown.
    _wire: Option<exec::Streaming>,
}

/// Makes the server host on the server's engine with host networking, reached at the lab
/// file's address of its machine, and the client host on the client's: with host networking
/// for profile `native`, behind a link host on its machine for a link profile ([`across`]).
///
/// # Errors
/// A container, network or the link could not be made, or the profile is loopback; what is
/// made carries the run's label, for teardown on each engine.
pub(crate) async fn up(
    engines: &LabEngines,
    lab: &Lab,
    run_id: &str,
    image: &str,
    privileges: &RunPrivileges,
    profile: &Profile,
) -> anyhow::Result<LabUp> {
    let on = |e: &LabEngine, err: anyhow::Error| anyhow!("engine {}: {err:#}", e.name);
    let mut records = BTreeMap::new();
    let (sd, cd) = (&engines.server.engine.docker, &engines.client.engine.docker);
    let (server, record) = host_networked(sd, run_id, image, "server", &privileges.server)
        .await
        .map_err(|err| on(&engines.server, err))?;
    records.insert("server".to_string(), with_engine(record, &engines.server));
    let server_addr = lab.server_address();
    let (client, link, tap, wire, baseline_rtt) = match profile.topology {
        Topology::Native => {
            let (client, record) = host_networked(cd, run_id, image, "client", &privileges.client)
                .await
                .map_err(|err| on(&engines.client, err))?;
            records.insert("client".to_string(), with_engine(record, &engines.client));
            let link = LinkRecord {
                backend: "none".into(),
                reason: format!(
                    "native: the real network between engine {}'s machine (server, reached at {server_addr}) and engine {}'s (client); both hosts use their machine's network (host networking), nothing added",
                    engines.server.name, engines.client.name
                ),
                ..Default::default()
            };
            (client, link, None, None, None)
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
            let a = across::up(&server, cd, run_id, image, privileges, profile)
                .await
                .map_err(|err| on(&engines.client, err))?;
            for (role, record) in a.records {
                let record = match role.as_str() {
                    "networks" => record,
                    _ => with_engine(record, &engines.client),
                };
                records.insert(role, record);
            }
            (a.client, a.link, a.tap, a.wire, Some(a.baseline_rtt))
        }
        Topology::Loopback => {
            return Err(anyhow!(
                "profile {} is loopback: one machine's, not a lab's",
                profile.name
            ))
        }
    };
    Ok(LabUp {
        hosts: DockerHosts::on_machines(
            (sd, server.clone()),
            (cd, client.clone()),
            server_addr,
            tap,
        ),
        records,
        link,
        server: (sd.clone(), server),
        client: (cd.clone(), client),
        server_addr,
        profile: profile.clone(),
        baseline_rtt,
        _wire: wire,
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
    ///
    /// # Errors
    /// The tools could not run or printed no report (a miss is `passed: false`).
    pub(crate) async fn calibrate(&mut self) -> anyhow::Result<CalibrationRecord> {
        use super::link::calibration::{calibrate, Baseline};
        let baseline = self
            .baseline_rtt
            .map_or(Baseline::None, Baseline::AcrossMachines);
        let run = calibrate(
            &self.server.0,
            &self.server.1,
            &self.client.0,
            &self.client.1,
            self.server_addr,
            &self.profile,
            baseline,
        );
        self.hosts.count_link(run).await
    }

    /// The manifest's record of each engine: endpoint, roles, versions, the machine (CPU
    /// model read in the role's host there), and the image.
    pub(crate) async fn engine_records(
        &self,
        engines: &LabEngines,
        lab: &Lab,
        images: &BTreeMap<String, (String, bool)>,
    ) -> BTreeMap<String, EngineRecord> {
        let mut out = BTreeMap::new();
        for ((role, (docker, host)), e) in [("server", &self.server), ("client", &self.client)]
            .into_iter()
            .zip(engines.all())
        {
            let cmd = vec![format!("{IMAGE_BIN_DIR}/echolab-up"), "__cpu-model".into()];
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
