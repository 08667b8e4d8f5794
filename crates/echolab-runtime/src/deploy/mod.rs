//! The runtime's one interface to the launcher (docs/architecture.md, "Backends"), in the
//! manner of containerlab's runtime interface: a [`Runtime`] is reached once
//! ([`AnyRuntime::local`], [`AnyRuntime::engine`], [`AnyRuntime::lab`]), then
//! [`Runtime::deploy`] brings up a run's hosts for every backend and shape and
//! [`Runtime::teardown`] removes them on every engine.
//!
//! Deploy hands back the hosts ([`Hosts`]) and the path's raw calibration readings
//! ([`Readings`]); the host, link, image and engine records go into the manifest through
//! [`DeployLog`] as each is made, so that a teardown after a failure later in the run can
//! name what is left. The runtime measures; `echolab_core::calibration::verdict` judges.
//!
//! - `backends`: the local, one-engine (loopback and link shapes) and lab deploys, sharing
//!   the container steps (image, confinement, topology, readings).
//! - `any_hosts`: [`AnyHosts`], the hosts of whichever backend was chosen.
//! - `teardown`: every engine of a run at once, each bounded.

mod any_hosts;
mod backends;
mod teardown;

use std::collections::BTreeMap;
use std::path::Path;

use echolab_core::experiment::{Cell, Experiment};
use echolab_core::lab_file::Lab;
use echolab_core::lab_plan::Shape;
use echolab_core::profile::Profile;
use echolab_core::results::{
    CalibrationRecord, CpuPlanRecord, EngineRecord, HostPrivileges, ImageInfo, LinkRecord,
};

use crate::docker::confinement::Confinement;
use crate::docker::engine::Engine;
use crate::docker::lab::LabEngines;

pub use crate::docker::deadlines::is_no_answer;
pub use crate::docker::ownership::{down as down_on_engine, DownOutcome};
pub use crate::docker::Docker;
pub use crate::hosts::Hosts;
pub use any_hosts::{AnyHosts, AnyReading, AnyServer};

/// What a deploy needs to know of a run (all of it the launcher's resolved inputs).
pub struct RunSpec<'a> {
    /// Run id (labels and names of every object).
    pub run_id: &'a str,
    /// The plan's shape (which topology a one-engine deploy makes).
    pub shape: Shape,
    /// The planned runs, each a cell and its repetition (which models the confinement allows).
    pub runs: &'a [(Cell, u64)],
    /// The experiment.
    pub experiment: &'a Experiment,
    /// The profile, its link queues already sized for the experiment.
    pub profile: &'a Profile,
    /// Where echo-server, echo-bench and the other lab binaries are.
    pub bin_dir: &'a Path,
    /// The custom servers' programs the image also carries.
    pub programs: &'a [String],
    /// `--image`: a prebuilt image to use instead of building the archive.
    pub prebuilt: Option<&'a str>,
    /// `--allow-uring-unconfined`.
    pub allow_uring_unconfined: bool,
    /// CPUs of this machine (the server's on one engine).
    pub machine_cpus: u64,
    /// Which CPUs each role gets on one engine (its `cpuset`s).
    pub cpu_plan: CpuPlanRecord,
}

/// A record of what a deploy made, for the run's manifest, in the manifest's own types: the
/// launcher's results writer files each under its field (the runtime never writes the
/// manifest).
#[derive(Debug, Clone)]
pub enum DeployRecord {
    /// The image the hosts run (`image`).
    Image(ImageInfo),
    /// Each role's privileges (`privileges`).
    Privileges(BTreeMap<String, HostPrivileges>),
    /// The hosts made, by role, and the io_uring probe's record under `io_uring` where it ran
    /// (`hosts`).
    Hosts(BTreeMap<String, serde_json::Value>),
    /// The link, or why there is none (`link`).
    Link(Box<LinkRecord>),
    /// The engines of a lab run (`engines`).
    Engines(BTreeMap<String, EngineRecord>),
}

/// Where a deploy records what it makes, as it makes it: its records
/// ([`DeployRecord`]) and its phases' wall times in seconds (`image`, `topology_up`).
pub trait DeployLog {
    /// Files `record` in the run's manifest.
    fn record(&mut self, record: DeployRecord);
    /// Records that phase `name` took `seconds`.
    ///
    /// # Errors
    /// The record could not be written.
    fn phase(&mut self, name: &str, seconds: f64) -> anyhow::Result<()>;
}

/// The path's raw calibration readings, as the deploy measured them; not yet judged.
#[derive(Debug, Clone)]
pub enum Readings {
    /// No link tool calibrated the path: it is measured on the hosts themselves (the
    /// launcher's RTT probe with echo-server and echo-bench).
    OnTheHosts,
    /// `echolab-netem calibrate` across each client path, by client engine name (`""` for
    /// the one path of a one-engine run), with the seconds it took in all.
    Paths {
        /// Each path's record, in the lab file's order.
        paths: Vec<(String, CalibrationRecord)>,
        /// Wall time of the measurements, in seconds.
        seconds: f64,
    },
}

/// A run's hosts, up.
pub struct Deployed<H> {
    /// The hosts the launcher's stages run against.
    pub hosts: H,
    /// The path's calibration readings.
    pub readings: Readings,
    /// Which cells these hosts may run.
    pub gate: Gate,
    /// The running wires, kept so that their output is collected until teardown.
    guards: Vec<crate::docker::exec::Streaming>,
}

/// Which cells a deploy's hosts may run: the containers' confinement (none for processes).
pub struct Gate(Option<Confinement>);

impl Gate {
    /// Whether `cell` may run on these hosts; `Err(reason)` when the confinement denies what
    /// it needs (io_uring under the containers' seccomp profile).
    pub fn allows(&self, cell: &Cell) -> Result<(), String> {
        match &self.0 {
            Some(c) => c.skip()(cell),
            None => Ok(()),
        }
    }
}

/// One way of hosting a run: deploy its hosts, then remove them.
#[allow(async_fn_in_trait)]
pub trait Runtime {
    /// The hosts a deploy brings up.
    type Hosts: Hosts;

    /// Brings up run `run`'s hosts (image, confinement, topology, link) and measures their
    /// path where a link tool does; records go to `log` as they are made.
    ///
    /// # Errors
    /// Any step, naming the object and the engine; what was made carries the run's label,
    /// for [`Runtime::teardown`].
    async fn deploy(
        &self,
        run: &RunSpec<'_>,
        log: &mut dyn DeployLog,
    ) -> anyhow::Result<Deployed<Self::Hosts>>;

    /// Removes run `run_id`'s objects from every engine at once, each within
    /// `docker::deadlines::TEARDOWN`; returns one line per engine that kept something, naming
    /// what the manifest's `hosts` records say is there and the `--down` call (with `lab`, the
    /// lab file) that removes it. Nothing to do for processes.
    async fn teardown(
        &self,
        run_id: &str,
        hosts: &BTreeMap<String, serde_json::Value>,
        lab: Option<&Path>,
    ) -> Vec<String>;
}

/// Where a run's hosts are, as the CPU plan needs to know it.
pub enum Placement<'a> {
    /// Processes on this machine.
    ThisMachine,
    /// Containers on this machine's one engine.
    OneEngine,
    /// A lab's machines: the server's engine name and CPUs, then each client's.
    Machines {
        /// The server's engine and its machine's CPUs.
        server: (&'a str, u64),
        /// Each client's engine and its machine's CPUs, in the lab file's order.
        clients: Vec<(&'a str, u64)>,
    },
}

/// The runtime chosen for a run.
pub enum AnyRuntime {
    /// Processes on this machine.
    Local,
    /// Containers on one engine.
    Engine(Engine),
    /// Containers on the engines of a lab file, one machine per role.
    Lab(Box<(Lab, LabEngines)>),
}

impl AnyRuntime {
    /// Processes on this machine.
    pub fn local() -> Self {
        Self::Local
    }

    /// This machine's Docker engine (API version negotiated down to the engine's).
    ///
    /// # Errors
    /// No engine answers: one line saying why.
    pub async fn engine() -> Result<Self, String> {
        crate::docker::engine::connect().await.map(Self::Engine)
    }

    /// Every engine of `lab`, reached before anything is made on any of them.
    ///
    /// # Errors
    /// The first engine that cannot be reached, in one line naming it.
    pub async fn lab(lab: Lab) -> Result<Self, String> {
        let engines = LabEngines::connect(&lab).await?;
        Ok(Self::Lab(Box::new((lab, engines))))
    }

    /// The manifest's backend: `local` or `docker`.
    pub fn backend(&self) -> &'static str {
        match self {
            Self::Local => "local",
            _ => "docker",
        }
    }

    /// Whether each cell may get fresh hosts: only containers on one engine (a lab's hosts
    /// share their machines' network namespaces, processes this machine's).
    pub fn fresh_hosts_possible(&self) -> bool {
        matches!(self, Self::Engine(_))
    }

    /// The server's engine as the manifest records it (`20.10.24 (API 1.41)`); `None` for
    /// processes.
    pub fn engine_version(&self) -> Option<String> {
        let e = match self {
            Self::Local => return None,
            Self::Engine(e) => e,
            Self::Lab(l) => &l.1.server.engine,
        };
        Some(format!("{} (API {})", e.version, e.api_version))
    }

    /// Where the hosts are, for the CPU plan.
    pub fn placement(&self) -> Placement<'_> {
        match self {
            Self::Local => Placement::ThisMachine,
            Self::Engine(_) => Placement::OneEngine,
            Self::Lab(l) => Placement::Machines {
                server: (&l.1.server.name, l.1.server.machine.cpus),
                clients: l
                    .1
                    .clients
                    .iter()
                    .map(|c| (c.name.as_str(), c.machine.cpus))
                    .collect(),
            },
        }
    }
}

impl Runtime for AnyRuntime {
    type Hosts = AnyHosts;

    async fn deploy(
        &self,
        run: &RunSpec<'_>,
        log: &mut dyn DeployLog,
    ) -> anyhow::Result<Deployed<AnyHosts>> {
        match self {
            Self::Local => backends::local(run, log)
                .await
                .map(|d| d.map(AnyHosts::Local)),
            Self::Engine(e) => backends::one_engine(e, run, log)
                .await
                .map(|d| d.map(|h| AnyHosts::Docker(Box::new(h)))),
            Self::Lab(l) => backends::lab(&l.0, &l.1, run, log)
                .await
                .map(|d| d.map(|h| AnyHosts::Docker(Box::new(h)))),
        }
    }

    async fn teardown(
        &self,
        run_id: &str,
        hosts: &BTreeMap<String, serde_json::Value>,
        lab: Option<&Path>,
    ) -> Vec<String> {
        let engines = match self {
            Self::Local => return Vec::new(),
            Self::Engine(e) => teardown::one_engine(e, hosts),
            Self::Lab(l) => teardown::lab_engines(&l.1, hosts),
        };
        teardown::tear_down(engines, run_id, hosts, lab).await
    }
}

impl<H> Deployed<H> {
    fn map<G>(self, f: impl FnOnce(H) -> G) -> Deployed<G> {
        Deployed {
            hosts: f(self.hosts),
            readings: self.readings,
            gate: self.gate,
            guards: self.guards,
        }
    }
}

/// Builds the lab image on this machine's engine (or takes the prebuilt `prebuilt`) from the
/// binaries in `bin_dir` and the custom servers' `programs`, tagged `echolab:latest` too.
///
/// # Errors
/// No engine answers, a binary is missing, or the engine refused the image.
pub async fn build_image(
    bin_dir: &Path,
    programs: &[String],
    prebuilt: Option<&str>,
) -> anyhow::Result<ImageInfo> {
    let engine = crate::docker::engine::connect()
        .await
        .map_err(|reason| anyhow::anyhow!("{reason}"))?;
    crate::docker::image::ensure(&engine.docker, bin_dir, programs, prebuilt).await
}

/// `--down`'s engines: this machine's (named `""`), or every engine of a lab file by its
/// name; each with its connection or why it could not be reached.
pub async fn down_engines(lab: Option<&Lab>) -> Vec<(String, Result<Docker, String>)> {
    let Some(lab) = lab else {
        let e = crate::docker::engine::connect().await.map(|e| e.docker);
        return vec![(String::new(), e)];
    };
    let mut out = Vec::new();
    for (name, spec) in &lab.engines {
        let e = crate::docker::engine::connect_lab(name, spec).await;
        out.push((name.clone(), e.map(|(e, _)| e.docker)));
    }
    out
}

/// Removes the lab images other than the current one from `docker`; returns their ids.
///
/// # Errors
/// The engine failed.
pub async fn remove_stale_images(docker: &Docker) -> anyhow::Result<Vec<String>> {
    crate::docker::cleanup::remove_stale_images(docker, crate::image_archive::IMAGE_REPO).await
}
