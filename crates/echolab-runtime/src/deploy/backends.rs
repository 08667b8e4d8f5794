//! The deploys behind [`super::Runtime`]: processes on this machine, containers on one engine
//! (loopback and link shapes), and containers on a lab's engines. The container deploys share
//! their steps: the image (phase `image`), the confinement on the server's engine, the
//! topology and its records (phase `topology_up`), then the link tool's readings.

use std::time::Instant;

use anyhow::anyhow;
use echolab_core::lab_file::Lab;
use echolab_core::lab_plan::Shape;
use echolab_core::results::{CalibrationRecord, ImageInfo, LinkRecord};
use serde_json::json;

use super::{DeployLog, DeployRecord, Deployed, Gate, Readings, RunSpec};
use crate::docker::confinement::{Confinement, RunInputs};
use crate::docker::docker_hosts::DockerHosts;
use crate::docker::engine::Engine;
use crate::docker::lab::LabEngines;
use crate::docker::topology::LoopbackSpec;
use crate::docker::{image, lab as lab_topology, link, Docker};
use crate::local::LocalHosts;

/// The local backend: echo-server and echo-bench as processes on this machine, over its
/// loopback; recorded as such (the binaries' digests stand for the image's).
///
/// # Errors
/// A binary is missing from `run.bin_dir`, or the phase could not be recorded.
pub(super) async fn local(
    run: &RunSpec<'_>,
    log: &mut dyn DeployLog,
) -> anyhow::Result<Deployed<LocalHosts>> {
    let t = Instant::now();
    let hosts = LocalHosts::new(run.bin_dir)?;
    let process = |name: &str| run.bin_dir.join(name).display().to_string();
    let records = [
        (
            "server",
            json!({ "process": process("echo-server"), "network": "this machine's loopback", "sysctls": "this machine's", "ulimits": "inherited" }),
        ),
        (
            "client",
            json!({ "process": process("echo-bench"), "network": "this machine's loopback" }),
        ),
    ];
    log.record(DeployRecord::Hosts(
        records
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    ));
    log.record(DeployRecord::Link(Box::new(LinkRecord { backend: "none".into(), reason: "loopback profile on the local backend: client and server are processes on this machine, over 127.0.0.1".into(), ..Default::default() })));
    let mut image = ImageInfo {
        reference: "local processes".into(),
        ..Default::default()
    };
    for name in ["echo-server", "echo-bench"] {
        let digest = std::fs::read(run.bin_dir.join(name))
            .map(|b| crate::image_archive::sha256_hex(&b))
            .unwrap_or_default();
        image.binaries.insert(name.into(), digest);
    }
    log.record(DeployRecord::Image(image));
    log.phase("topology_up", t.elapsed().as_secs_f64())?;
    Ok(Deployed {
        hosts,
        readings: Readings::OnTheHosts,
        gate: Gate(None),
        guards: Vec::new(),
    })
}

/// Containers on one engine: the loopback topology (the client in the server's network
/// namespace), or the link topology, calibrated across the link.
///
/// # Errors
/// Any step; a shape other than loopback or link is an internal error.
pub(super) async fn one_engine(
    e: &Engine,
    run: &RunSpec<'_>,
    log: &mut dyn DeployLog,
) -> anyhow::Result<Deployed<DockerHosts>> {
    let d = &e.docker;
    let t = Instant::now();
    let image = image::ensure(d, run.bin_dir, run.programs, run.prebuilt).await?;
    let image_id = image.id.clone();
    log.record(DeployRecord::Image(image));
    log.phase("image", t.elapsed().as_secs_f64())?;
    let t = Instant::now();
    let confined = confine(d, run.machine_cpus, &image_id, run, log).await?;
    let (image, plan) = (image_id, &run.cpu_plan);
    match run.shape {
        Shape::Loopback => {
            let spec = LoopbackSpec {
                run_id: run.run_id.to_string(),
                image,
                privileges: confined.privileges.clone(),
                server_cpus: plan.server.clone(),
                client_cpus: plan.client.clone(),
            };
            let (hosts, records) = DockerHosts::loopback(d, &spec).await?;
            let link = LinkRecord {
                backend: "none".into(),
                reason: "loopback topology: the client shares the server's network namespace and targets 127.0.0.1".into(),
                ..Default::default()
            };
            record_topology(log, &confined, records, link);
            log.phase("topology_up", t.elapsed().as_secs_f64())?;
            Ok(Deployed {
                hosts,
                readings: Readings::OnTheHosts,
                gate: Gate(Some(confined)),
                guards: Vec::new(),
            })
        }
        Shape::Link => {
            let privileges = &confined.privileges;
            let mut up = link::up(d, run.run_id, &image, privileges, run.profile, plan).await?;
            record_topology(log, &confined, up.records.clone(), up.link.clone());
            log.phase("topology_up", t.elapsed().as_secs_f64())?;
            let t = Instant::now();
            let record = up.calibrate(d).await?;
            let readings = measured(vec![(String::new(), record)], t);
            let (hosts, wire) = up.into_parts();
            Ok(Deployed {
                hosts,
                readings,
                gate: Gate(Some(confined)),
                guards: wire.into_iter().collect(),
            })
        }
        other => Err(anyhow!(
            "internal: the Docker backend on one engine was handed a plan of shape {other:?}"
        )),
    }
}

/// A lab run (`--lab`): the image on every engine, the server host on the server's machine
/// and each client host on its own ([`crate::docker::lab`]), then the real path of each
/// client measured.
///
/// # Errors
/// Any step, naming the engine; a measurement that could not run names the path and where
/// the lab file gives the server's address.
pub(super) async fn lab(
    lab: &Lab,
    engines: &LabEngines,
    run: &RunSpec<'_>,
    log: &mut dyn DeployLog,
) -> anyhow::Result<Deployed<DockerHosts>> {
    let t = Instant::now();
    let (image, per_engine) =
        lab_topology::ensure_image(engines, run.bin_dir, run.programs, run.prebuilt).await?;
    let image_id = image.id.clone();
    log.record(DeployRecord::Image(image));
    log.phase("image", t.elapsed().as_secs_f64())?;
    let t = Instant::now();
    let server = &engines.server;
    let confined = confine(
        &server.engine.docker,
        server.machine.cpus,
        &image_id,
        run,
        log,
    )
    .await?;
    let image = image_id;
    let privileges = &confined.privileges;
    let mut up =
        lab_topology::up(engines, lab, run.run_id, &image, privileges, run.profile).await?;
    record_topology(log, &confined, up.records.clone(), up.link.clone());
    log.record(DeployRecord::Engines(
        up.engine_records(engines, lab, &per_engine).await,
    ));
    log.phase("topology_up", t.elapsed().as_secs_f64())?;
    let t = Instant::now();
    let paths = up.calibrate(engines).await.map_err(|e| {
        anyhow!(
            "calibration from {} to the server at {} (engines.{}.address in {}): {e:#}",
            if engines.clients.len() > 1 {
                "the client machines"
            } else {
                "the client's machine"
            },
            lab.server_address(),
            server.name,
            lab.path.display()
        )
    })?;
    let readings = measured(paths, t);
    let (hosts, wires) = up.into_parts();
    Ok(Deployed {
        hosts,
        readings,
        gate: Gate(Some(confined)),
        guards: wires,
    })
}

/// The confinement of run `run` (io_uring probed on `server`'s engine where a cell wants it,
/// in `image`; `cpus` of the server's machine); its privileges are recorded.
async fn confine(
    server: &Docker,
    cpus: u64,
    image: &str,
    run: &RunSpec<'_>,
    log: &mut dyn DeployLog,
) -> anyhow::Result<Confinement> {
    let what = RunInputs {
        runs: run.runs,
        experiment: run.experiment,
        profile: run.profile,
        allow_uring_unconfined: run.allow_uring_unconfined,
        run_id: run.run_id,
        image,
        cpus,
    };
    let confined = Confinement::new(server, &what).await?;
    log.record(DeployRecord::Privileges(confined.privileges_record()));
    Ok(confined)
}

/// Records the hosts made (with the io_uring probe's record) and the link.
fn record_topology(
    log: &mut dyn DeployLog,
    confined: &Confinement,
    records: std::collections::BTreeMap<String, serde_json::Value>,
    link: LinkRecord,
) {
    log.record(DeployRecord::Hosts(confined.hosts_record(records)));
    log.record(DeployRecord::Link(Box::new(link)));
}

/// The link tool's readings of `paths`, measured since `t`.
fn measured(paths: Vec<(String, CalibrationRecord)>, t: Instant) -> Readings {
    Readings::Paths {
        paths,
        seconds: t.elapsed().as_secs_f64(),
    }
}
