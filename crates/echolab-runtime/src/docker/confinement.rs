//! What each role's containers may do in a run ([`Confinement`]): the privileges of
//! [`super::privileges`], after the io_uring probe ([`super::uring`]) on the server's engine
//! where a cell wants the uring model. Shared by the one-engine and the lab runs.

use std::collections::BTreeMap;

use echolab_core::cmd::{BenchEngine, ServerModel};
use echolab_core::experiment::{Cell, Experiment};
use echolab_core::profile::{Profile, Topology};
use echolab_core::results::HostPrivileges;

/// What [`Confinement::new`] needs to know of a run.
pub struct RunInputs<'a> {
    /// The planned runs, each a cell and its repetition number (which models they use).
    pub runs: &'a [(Cell, u64)],
    /// The experiment.
    pub experiment: &'a Experiment,
    /// The profile.
    pub profile: &'a Profile,
    /// `--allow-uring-unconfined`.
    pub allow_uring_unconfined: bool,
    /// Run id (labels of the probe's host).
    pub run_id: &'a str,
    /// Image id.
    pub image: &'a str,
    /// CPUs of the server's machine.
    pub cpus: u64,
}

/// What each role's containers may do in a run, after the io_uring probe on the server's
/// engine where a cell wants the uring model.
pub struct Confinement {
    /// Each role's privileges.
    pub privileges: super::privileges::RunPrivileges,
    /// Whether the run has a link host (whose privileges are recorded too).
    link: bool,
    /// Whether the client runs echo-bench's ring engine (`bench.engine: uring`).
    client_uring: bool,
    /// Why uring cells are skipped, if they are.
    uring_denied: Option<String>,
    /// The probe's record, for the manifest's `hosts.io_uring`.
    uring_record: Option<serde_json::Value>,
}

impl Confinement {
    /// Probes io_uring on `d` where needed and sets the privileges of the run `r`.
    ///
    /// # Errors
    /// The probe could not run.
    pub async fn new(d: &bollard::Docker, r: &RunInputs<'_>) -> anyhow::Result<Self> {
        let server_uring = r
            .runs
            .iter()
            .any(|(c, _)| c.model() == Ok(ServerModel::Uring));
        // echo-bench's ring engine needs io_uring in the client's container as the uring
        // model does in the server's: the same probe decides both.
        let client_uring = r.experiment.bench.engine == BenchEngine::Uring;
        let wants_uring = server_uring || client_uring;
        let uring = if wants_uring {
            Some(super::uring::probe(d, r.run_id, r.image, r.allow_uring_unconfined).await?)
        } else {
            None
        };
        let uring_seccomp = uring
            .as_ref()
            .map(|u| u.server_seccomp.clone())
            .unwrap_or_default();
        let privileges = super::privileges::RunPrivileges::new(
            r.experiment,
            r.profile,
            r.cpus,
            if server_uring {
                uring_seccomp.clone()
            } else {
                Default::default()
            },
            if client_uring {
                uring_seccomp
            } else {
                Default::default()
            },
        );
        Ok(Self {
            link: r.profile.topology == Topology::Link,
            privileges,
            client_uring,
            uring_denied: uring.as_ref().and_then(|u| u.denied.clone()),
            uring_record: uring.as_ref().map(|u| u.record()),
        })
    }

    /// Skips the uring cells when io_uring is denied (every cell, when the client's engine is
    /// the ring engine).
    pub fn skip(&self) -> impl Fn(&Cell) -> Result<(), String> + '_ {
        move |c: &Cell| match &self.uring_denied {
            Some(reason) if c.model() == Ok(ServerModel::Uring) => Err(reason.clone()),
            // With the ring engine every cell's client needs io_uring.
            Some(reason) if self.client_uring => Err(format!("bench.engine uring: {reason}")),
            _ => Ok(()),
        }
    }

    /// Each role's privileges, for the manifest's `privileges`.
    pub fn privileges_record(&self) -> BTreeMap<String, HostPrivileges> {
        self.privileges.record(self.link)
    }

    /// The hosts of the run, with the io_uring probe's record under `io_uring`, for the
    /// manifest's `hosts`.
    pub fn hosts_record(
        &self,
        mut hosts: BTreeMap<String, serde_json::Value>,
    ) -> BTreeMap<String, serde_json::Value> {
        if let Some(u) = &self.uring_record {
            hosts.insert("io_uring".into(), u.clone());
        }
        hosts
    }
}
