//! A multi-machine run (issue 12, `--lab`): the server host on the server's engine and the
//! client host on the client's, each a container of the lab image with host networking, so
//! that the client reaches the server over the real network between the two machines.
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
use echolab_core::profile::Profile;
use echolab_core::results::{CalibrationRecord, EngineRecord, ImageInfo};
use serde_json::json;

use super::docker_hosts::DockerHosts;
use super::engine::{Engine, Machine};
use super::exec;
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
    server: (Docker, String),
    client: (Docker, String),
    server_addr: IpAddr,
}

/// Makes the server host on the server's engine and the client host on the client's, both
/// with host networking, and returns them with their records; the server is reached at the
/// lab file's address of its engine.
///
/// # Errors
/// A container could not be made; what is made carries the run's label, for teardown on
/// each engine.
pub(crate) async fn up(
    engines: &LabEngines,
    lab: &Lab,
    run_id: &str,
    image: &str,
    privileges: &RunPrivileges,
) -> anyhow::Result<LabUp> {
    let mut records = BTreeMap::new();
    let mut made = Vec::new();
    for (role, e, p) in [
        ("server", &engines.server, &privileges.server),
        ("client", &engines.client, &privileges.client),
    ] {
        let mut spec = HostSpec {
            role: role.into(),
            network_mode: "host".into(),
            privileges: p.clone(),
            ..Default::default()
        };
        let id = create_host(&e.engine.docker, run_id, image, &mut spec)
            .await
            .map_err(|err| anyhow!("engine {}: {err:#}", e.name))?;
        let mut record = spec.record(&object_name(run_id, role), &id);
        record["engine"] = json!(e.name);
        record["sysctls"] =
            json!("the machine's own (host networking shares its network namespace)");
        records.insert(role.to_string(), record);
        made.push((e.engine.docker.clone(), id));
    }
    let client = made.pop().expect("two hosts made");
    let server = made.pop().expect("two hosts made");
    let server_addr = lab.server_address();
    Ok(LabUp {
        hosts: DockerHosts::on_machines(
            (&server.0, server.1.clone()),
            (&client.0, client.1.clone()),
            server_addr,
        ),
        records,
        server,
        client,
        server_addr,
    })
}

impl LabUp {
    /// Calibrates the real path: calib-server in the server host, `echolab-netem calibrate`
    /// in the client host; for profile `native` it measures RTT and goodput each way, and
    /// judges the RTT against the profile's sanity bound.
    ///
    /// # Errors
    /// The tools could not run or printed no report (a miss is `passed: false`).
    pub(crate) async fn calibrate(&self, profile: &Profile) -> anyhow::Result<CalibrationRecord> {
        super::link::calibration::calibrate(
            &self.server.0,
            &self.server.1,
            &self.client.0,
            &self.client.1,
            self.server_addr,
            profile,
            None,
        )
        .await
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
