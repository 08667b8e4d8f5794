//! The lab as data: which hosts, networks and engines a run needs, built from its inputs in
//! one place before anything is made ([`LabPlan::new`]), with every rule that joins two inputs
//! (profile and backend, profile and lab file, lab file and `--cpu-plan`, lab file and
//! experiment) settled there. A runtime (echolab-runtime: Docker engines or local processes)
//! deploys it; the names it gives hosts and networks come from here ([`host_name`], the
//! network constants), so the manifest's `hosts` keys are the plan's host names.
//!
//! The shapes (docs/architecture.md, "Topologies"):
//!
//! ```text
//! local     server process, client process, on this machine
//! loopback  server host; client host in the server's network namespace (127.0.0.1)
//! link      client host --[client-net]-- link host --[server-net]-- server host
//! across    server host on its machine (host networking); per client machine either
//!           a client host on its machine's network (native profile), or
//!           client host --[client-net]-- link host --[egress-net, masqueraded]-- the
//!           machine's network -- the server's machine (link profile)
//! ```

use serde::{Deserialize, Serialize};

use crate::experiment::Experiment;
use crate::lab_file::Lab;
use crate::link_queue::QueueSizing;
use crate::profile::{Profile, Topology};

/// The network between the client host and the link host.
pub const CLIENT_NET: &str = "client-net";
/// The network between the link host and the server host (one engine).
pub const SERVER_NET: &str = "server-net";
/// The link host's way out to the machine's network towards the server's machine (a lab run
/// on a link profile), masqueraded by the client machine's engine.
pub const EGRESS_NET: &str = "egress-net";

/// Where a run's hosts are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// Containers on Docker engines.
    Containers,
    /// Processes on this machine.
    Processes,
}

/// What a host does in the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Runs echo-server (or the experiment's own server).
    Server,
    /// Runs echo-bench.
    Client,
    /// Routes between the client's and the server's networks and impairs each direction.
    Link,
}

impl Role {
    /// The role's name in labels and the manifest (`server`, `client`, `link`).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Server => "server",
            Role::Client => "client",
            Role::Link => "link",
        }
    }
}

/// How a host is attached to the network.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Attachment {
    /// A process on this machine: the machine's own network.
    Process,
    /// A network namespace of its own with only a loopback device.
    Isolated,
    /// The network namespace of the named host.
    NamespaceOf(String),
    /// These networks of the plan, by name, on the host's engine.
    Networks(Vec<String>),
    /// Its machine's network (host networking).
    MachineNetwork,
}

/// One host of the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct PlannedHost {
    /// Its name in the manifest's `hosts` ([`host_name`]): `server`, `client`, `link`, then
    /// `client-2`, `link-2`, ... for further client machines.
    pub name: String,
    /// What it does.
    pub role: Role,
    /// The lab file's engine it is made on; `None` for this machine's engine (or process).
    pub engine: Option<String>,
    /// Its network.
    pub attachment: Attachment,
}

/// One network of the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct PlannedNetwork {
    /// [`CLIENT_NET`], [`SERVER_NET`] or [`EGRESS_NET`].
    pub name: String,
    /// The lab file's engine it is made on; `None` for this machine's engine.
    pub engine: Option<String>,
    /// Whether the engine masquerades what leaves it (the egress network only).
    pub masquerade: bool,
}

/// The shape of a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Shape {
    /// Local processes (loopback profile only).
    Local,
    /// One engine, loopback profile.
    Loopback,
    /// One engine, a link profile.
    Link,
    /// A lab file's engines: the server's machine and `clients` client machines; `link` when
    /// each client machine has a link host.
    Across {
        /// Client machines.
        clients: usize,
        /// Whether the profile adds a link on each path.
        link: bool,
    },
}

/// Why a run cannot be planned, in one line naming the flag or file and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanRefusal {
    /// The inputs contradict each other (exit status 2, as every usage error).
    Usage(String),
    /// The inputs are consistent but the chosen backend cannot run them (exit status 1, as
    /// when no engine is reachable).
    Unsupported(String),
}

impl std::fmt::Display for PlanRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PlanRefusal::Usage(m) | PlanRefusal::Unsupported(m) => f.write_str(m),
        }
    }
}

/// Which hosts, networks and engines a run needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct LabPlan {
    /// The shape.
    pub shape: Shape,
    /// Every host, the server first.
    pub hosts: Vec<PlannedHost>,
    /// Every network to be made (none for local and loopback runs, and native lab runs).
    pub networks: Vec<PlannedNetwork>,
    /// The link's queue limits, sized for the experiment (a link profile only; absent in
    /// records older than the field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueueSizing>,
}

/// The manifest's name of the `index`-th (0-based) host of `role`: the role for the first,
/// then `role-2`, `role-3`, ... (a lab run with several client machines).
pub fn host_name(role: &str, index: usize) -> String {
    match index {
        0 => role.into(),
        i => format!("{role}-{}", i + 1),
    }
}

impl LabPlan {
    /// The plan of a run of `experiment` on `profile`, on `backend`, across the machines of
    /// `lab` if given; `explicit_cpu_plan` is whether `--cpu-plan` named CPUs.
    ///
    /// # Errors
    /// [`PlanRefusal::Usage`]: `--cpu-plan` with `--lab`; a native profile without `--lab`;
    /// an experiment the lab file cannot run ([`Lab::check_experiment`]); a profile whose
    /// queue `limit` is below the packets the experiment puts in flight ([`QueueSizing::new`]).
    /// [`PlanRefusal::Unsupported`]: a link profile on local processes.
    pub fn new(
        profile: &Profile,
        experiment: &Experiment,
        lab: Option<&Lab>,
        backend: Backend,
        explicit_cpu_plan: bool,
    ) -> Result<LabPlan, PlanRefusal> {
        let mut plan =
            Self::hosts_and_networks(profile, experiment, lab, backend, explicit_cpu_plan)?;
        plan.queue = QueueSizing::new(profile, experiment).map_err(PlanRefusal::Usage)?;
        Ok(plan)
    }

    /// [`LabPlan::new`] without the queue's sizing.
    fn hosts_and_networks(
        profile: &Profile,
        experiment: &Experiment,
        lab: Option<&Lab>,
        backend: Backend,
        explicit_cpu_plan: bool,
    ) -> Result<LabPlan, PlanRefusal> {
        if let Some(lab) = lab {
            if explicit_cpu_plan {
                // Each role has a machine of its own there, so a plan of this machine's CPUs
                // means nothing; refused rather than ignored.
                return Err(PlanRefusal::Usage("--cpu-plan: with --lab the server and the client run on machines of their own, unpinned; drop --cpu-plan".into()));
            }
            lab.check_experiment(experiment)
                .map_err(PlanRefusal::Usage)?;
            return Ok(Self::across(profile, lab));
        }
        match (profile.topology, backend) {
            (Topology::Native, _) => Err(PlanRefusal::Usage(format!(
                "profile {} is the real path between two machines, which needs --lab LAB.yaml naming their engines (docs/guide.md, \"Two or more machines\")",
                profile.name
            ))),
            (Topology::Link, Backend::Processes) => Err(PlanRefusal::Unsupported(format!(
                "profile {} needs a link between separate hosts, which only the Docker backend provides; start a Docker engine or use --profile loopback",
                profile.name
            ))),
            (Topology::Loopback, Backend::Processes) => Ok(LabPlan {
                shape: Shape::Local,
                hosts: vec![
                    host(Role::Server, 0, None, Attachment::Process),
                    host(Role::Client, 0, None, Attachment::Process),
                ],
                networks: vec![],
                queue: None,
            }),
            (Topology::Loopback, Backend::Containers) => Ok(LabPlan {
                shape: Shape::Loopback,
                hosts: vec![
                    host(Role::Server, 0, None, Attachment::Isolated),
                    host(
                        Role::Client,
                        0,
                        None,
                        Attachment::NamespaceOf(Role::Server.as_str().into()),
                    ),
                ],
                networks: vec![],
                queue: None,
            }),
            (Topology::Link, Backend::Containers) => Ok(LabPlan {
                shape: Shape::Link,
                hosts: vec![
                    host(Role::Server, 0, None, networks(&[SERVER_NET])),
                    host(Role::Client, 0, None, networks(&[CLIENT_NET])),
                    host(Role::Link, 0, None, networks(&[CLIENT_NET, SERVER_NET])),
                ],
                networks: vec![network(CLIENT_NET, None), network(SERVER_NET, None)],
                queue: None,
            }),
        }
    }

    /// A lab run: the server on its machine's network, each client machine's hosts on it.
    fn across(profile: &Profile, lab: &Lab) -> LabPlan {
        let link = profile.topology == Topology::Link;
        let mut hosts = vec![host(
            Role::Server,
            0,
            Some(lab.server.clone()),
            Attachment::MachineNetwork,
        )];
        let mut nets = Vec::new();
        for (i, engine) in lab.clients.iter().enumerate() {
            let on = Some(engine.clone());
            if link {
                hosts.push(host(Role::Client, i, on.clone(), networks(&[CLIENT_NET])));
                hosts.push(host(
                    Role::Link,
                    i,
                    on.clone(),
                    networks(&[CLIENT_NET, EGRESS_NET]),
                ));
                nets.push(network(CLIENT_NET, on.clone()));
                nets.push(PlannedNetwork {
                    masquerade: true,
                    ..network(EGRESS_NET, on)
                });
            } else {
                hosts.push(host(Role::Client, i, on, Attachment::MachineNetwork));
            }
        }
        LabPlan {
            shape: Shape::Across {
                clients: lab.clients.len(),
                link,
            },
            hosts,
            networks: nets,
            queue: None,
        }
    }

    /// The names of the plan's hosts, sorted (the manifest's `hosts` keys for them).
    pub fn host_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.hosts.iter().map(|h| h.name.clone()).collect();
        names.sort();
        names
    }

    /// The hosts of `role`.
    pub fn hosts_of(&self, role: Role) -> impl Iterator<Item = &PlannedHost> {
        self.hosts.iter().filter(move |h| h.role == role)
    }
}

fn host(role: Role, index: usize, engine: Option<String>, attachment: Attachment) -> PlannedHost {
    PlannedHost {
        name: host_name(role.as_str(), index),
        role,
        engine,
        attachment,
    }
}

fn networks(names: &[&str]) -> Attachment {
    Attachment::Networks(names.iter().map(|n| n.to_string()).collect())
}

fn network(name: &str, engine: Option<String>) -> PlannedNetwork {
    PlannedNetwork {
        name: name.into(),
        engine,
        masquerade: false,
    }
}
