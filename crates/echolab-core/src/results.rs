//! The results directory of one `echolab-up` run, and the records in it (docs/architecture.md,
//! "Data flow" and "Contracts"):
//!
//! ```text
//! results/<utc-stamp>-<experiment>-<profile>/
//!   manifest.yaml   Manifest: inputs, environment, link, calibration, status, timings
//!   runs/*.json     RunRecord: one per cell and repetition, written when it finishes
//!   summary.csv     one row per run (written by echolab-report)
//!   report.md       seed-style tables (echolab-report), with plots/*.svg
//! ```
//!
//! Every file is written to a temporary name and renamed into place ([`write_atomic`]), so a
//! reader never sees half a file; a run cut short leaves `status: interrupted` or `failed` in
//! its manifest, and the runs it finished stay readable.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::experiment::{Cell, Experiment};
use crate::stats::{BenchReport, ServerStats};

pub use crate::link_counters::{DirectionCounters, LinkCounters};

pub use crate::cmd::{CalibrationCheck, MissedAttempt};
pub use crate::quiet::Settle;

/// Schema tag written into every manifest; bumped on incompatible changes.
pub const MANIFEST_SCHEMA: &str = "echolab.manifest/1";
/// Manifest file name inside a results directory.
pub const MANIFEST_FILE: &str = "manifest.yaml";
/// Directory of run records inside a results directory.
pub const RUNS_DIR: &str = "runs";

/// Where a run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// Cells are still being run (or the launcher died without a word).
    Running,
    /// Every cell and repetition ran.
    Complete,
    /// Stopped by an error; `error` says which.
    Failed,
    /// Stopped by Ctrl-C or SIGTERM.
    Interrupted,
    /// Was `running` when its launcher was found gone (killed with SIGKILL, the machine
    /// rebooted): set by a later `echolab-up`; the runs it finished are kept.
    Abandoned,
}

impl RunStatus {
    /// The word the manifest writes (`running`, `complete`, `failed`, `interrupted`,
    /// `abandoned`), for messages that name the status.
    pub fn word(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Complete => "complete",
            RunStatus::Failed => "failed",
            RunStatus::Interrupted => "interrupted",
            RunStatus::Abandoned => "abandoned",
        }
    }
}

/// The machine and software a run happened on.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Environment {
    /// `uname -r` of the host kernel.
    pub kernel: String,
    /// CPU model name from /proc/cpuinfo.
    pub cpu_model: String,
    /// Logical CPUs.
    pub cpus: u64,
    /// Total memory, bytes.
    pub mem_bytes: u64,
    /// Docker engine version, or empty for the local backend.
    #[serde(default)]
    pub docker_version: String,
    /// `git rev-parse HEAD` of the echolab checkout (with `-dirty` when modified), if any.
    #[serde(default)]
    pub git_rev: String,
    /// echolab-up's version.
    pub echolab_version: String,
    /// The host's default TCP congestion control (`net.ipv4.tcp_congestion_control`), which
    /// every network namespace made on it inherits, so the hosts' connections use it unless a
    /// program picks its own (calibration's transfers use Reno); empty when unreadable or
    /// recorded before it existed. Hosts' defaults differ (bbr on this project's 2-core VMs,
    /// cubic in Linux's own default configuration).
    #[serde(default)]
    pub tcp_congestion_control: String,
}

/// The image the hosts ran.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ImageInfo {
    /// Image reference used (`echolab:<hash>` or `--image`).
    pub reference: String,
    /// Docker image id (`sha256:...`).
    pub id: String,
    /// SHA-256 of each binary in the image, by name.
    #[serde(default)]
    pub binaries: BTreeMap<String, String>,
}

/// What a calibration measured and whether it met the profile.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CalibrationRecord {
    /// Passed all checks.
    pub passed: bool,
    /// Why it failed, or a note on what was checked.
    pub reason: String,
    /// Measured figures by name (`rtt_min_us`, `rtt_median_us`, `goodput_bps`, ...).
    pub measured: BTreeMap<String, f64>,
    /// Nominal expected figures by name, from the profile (same names as `measured`).
    pub expected: BTreeMap<String, f64>,
    /// Each comparison with its accepted range; the verdict is the conjunction.
    #[serde(default)]
    pub checks: Vec<CalibrationCheck>,
    /// What the link carried and dropped during calibration, when the profile has a link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_counters: Option<LinkCounters>,
    /// The wait for a quiet machine before each measurement, by name: `baseline` (the path's
    /// RTT before the link is installed) and `calibration`. Both follow the making of hosts
    /// and an exec of calib-server, whose engine work (runc, containerd) otherwise shares the
    /// CPUs with the probes: on a 2-core AMD EPYC VM an unwaited baseline
    /// ranged 160..3,803 us and the added RTT of a 3.088 ms profile 210..8,194 us over 5 runs,
    /// a waited one 117..201 us and 3,069..3,156 us over 6. The CPUs watched are those of the
    /// machine echolab-up runs on (with `--lab`, the hosts' engines may be elsewhere). Empty
    /// for a calibration that waited for nothing (records written before it existed, the
    /// loopback probe). `calibration_repeat`: the wait before the deciding attempt, when
    /// earlier ones missed (`missed_attempts`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub settle: BTreeMap<String, Settle>,
    /// Calibration attempts that missed before the one this record's verdict is from
    /// (`echolab-netem calibrate --attempts`), oldest first; empty when the first attempt
    /// decided.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missed_attempts: Vec<MissedAttempt>,
    /// How the goodput transfers ran: the senders' congestion control and the most each
    /// receiver offered. Absent where no goodput was measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bulk_transfer: Option<crate::cmd::BulkTransfer>,
}

impl CalibrationRecord {
    /// The key of the median RTT in `measured` and `expected`, µs: the figure every
    /// calibration has and the report's path share is computed from.
    pub const RTT_MEDIAN_US: &'static str = "rtt_median_us";

    /// The measured median RTT, µs, when there is one.
    pub fn rtt_median_us(&self) -> Option<f64> {
        self.measured.get(Self::RTT_MEDIAN_US).copied()
    }
}

/// The link as it was really installed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LinkRecord {
    /// `"none"` (loopback topology), `"kernel-netem"` or `"userspace-wire"`.
    pub backend: String,
    /// Why this backend (e.g. the probe's reason that netem is missing).
    #[serde(default)]
    pub reason: String,
    /// What was read back after installing (qdisc dump or wire settings), free-form.
    #[serde(default)]
    pub installed: serde_json::Value,
    /// Calibration before the first cell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<CalibrationRecord>,
}

/// Phase timings of the launcher, seconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Timings {
    /// Phase name → seconds (`image`, `topology_up`, `calibration`, `cells`, `teardown`).
    #[serde(flatten)]
    pub phases: BTreeMap<String, f64>,
}

/// `manifest.yaml`: everything needed to know what a results directory holds and how it was made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// [`MANIFEST_SCHEMA`].
    pub schema: String,
    /// Run id (also the `echolab.run` label on every Docker object).
    pub run_id: String,
    /// Where the run stands.
    pub status: RunStatus,
    /// The launcher process that made the run ([`crate::launcher`]), so that another process
    /// can tell a live run from an abandoned one; absent in records older than the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launcher: Option<crate::launcher::LauncherId>,
    /// The error that stopped it, when `status` is failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// RFC 3339 UTC start time.
    pub created_at: String,
    /// RFC 3339 UTC end time, once ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// The command line, argv[1..].
    pub args: Vec<String>,
    /// Backend that provided hosts: `"docker"` or `"local"`.
    pub backend: String,
    /// The experiment as run (after `--reps`).
    pub experiment: Experiment,
    /// The profile as run, with its file path.
    pub profile: crate::profile::RecordedProfile,
    /// Where they came from.
    pub inputs: BTreeMap<String, String>,
    /// Machine and versions.
    pub environment: Environment,
    /// Image.
    #[serde(default)]
    pub image: ImageInfo,
    /// Host settings by role (`server`, `client`, `link`): capabilities, sysctls, ulimits,
    /// seccomp, network, as applied.
    #[serde(default)]
    pub hosts: BTreeMap<String, serde_json::Value>,
    /// Link backend and calibration.
    #[serde(default)]
    pub link: LinkRecord,
    /// Cells × repetitions planned.
    pub runs_planned: u64,
    /// Run records written so far.
    pub runs_done: u64,
    /// Phase timings.
    #[serde(default)]
    pub timings: Timings,
    /// Which CPUs each role ran on; absent in records older than the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_plan: Option<CpuPlanRecord>,
    /// The order in which cells ran; absent in records older than the field (they ran in
    /// matrix order, each cell's repetitions back to back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<OrderRecord>,
    /// How each role's containers were confined (`server`, `client`, `link`,
    /// `route-helper`); empty for the local backend and in records older than the field.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub privileges: BTreeMap<String, HostPrivileges>,
    /// The Docker engines of a multi-machine run (echolab-up `--lab`), by the lab file's
    /// name; empty for a run on one engine and in records older than the field (then
    /// `environment` is the one machine).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub engines: BTreeMap<String, EngineRecord>,
    /// The hosts, networks and engines the run was planned with
    /// ([`crate::lab_plan::LabPlan`]); `hosts` holds a record for each planned host under the
    /// same name. Absent in records older than the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<crate::lab_plan::LabPlan>,
}

impl Manifest {
    /// The manifest at the start of a run (status running, nothing done).
    pub fn running(
        run_id: &str,
        args: Vec<String>,
        backend: &str,
        experiment: Experiment,
        profile: crate::profile::RecordedProfile,
        inputs: BTreeMap<String, String>,
        runs_planned: u64,
    ) -> Self {
        Self {
            schema: MANIFEST_SCHEMA.to_string(),
            run_id: run_id.to_string(),
            status: RunStatus::Running,
            launcher: crate::launcher::LauncherId::current(),
            error: None,
            created_at: crate::utc_now_rfc3339(),
            finished_at: None,
            args,
            backend: backend.to_string(),
            experiment,
            profile,
            inputs,
            environment: Environment::default(),
            image: Default::default(),
            hosts: BTreeMap::new(),
            link: Default::default(),
            runs_planned,
            runs_done: 0,
            timings: Default::default(),
            cpu_plan: None,
            order: None,
            privileges: BTreeMap::new(),
            engines: BTreeMap::new(),
            plan: None,
        }
    }
}

/// One Docker engine of a multi-machine run and the machine it runs on, as read through
/// its API and from a host container on it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EngineRecord {
    /// The lab file's endpoint (`unix:///var/run/docker.sock`, `tcp://10.0.0.2:2376`,
    /// `ssh://lab@10.0.0.3`).
    pub endpoint: String,
    /// The roles it ran (`server`, `client`).
    pub roles: Vec<String>,
    /// Where the other machines reach this one's host-network containers.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub address: String,
    /// Engine version and API version (`20.10.24+dfsg1 (API 1.41)`).
    pub docker_version: String,
    /// The engine's name for its machine (`docker info`'s Name).
    #[serde(default)]
    pub hostname: String,
    /// The machine's kernel release, as its engine reports it.
    pub kernel: String,
    /// The machine's CPU model, read from /proc/cpuinfo in a host container on it.
    #[serde(default)]
    pub cpu_model: String,
    /// Logical CPUs of the machine (`docker info`'s NCPU).
    pub cpus: u64,
    /// Memory of the machine, bytes (`docker info`'s MemTotal).
    pub mem_bytes: u64,
    /// The lab image's id on this engine (`sha256:...`), the same on every engine when the
    /// deterministic archive was loaded.
    pub image_id: String,
    /// Whether the image was loaded this run (false: that id was already present).
    pub image_loaded: bool,
}

/// How the containers of one role were confined, as echolab-up asked the engine (`docker
/// inspect` shows the same in Config.User and HostConfig).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostPrivileges {
    /// `uid:gid` its processes run as (`65534:65534` nobody, `0:0` root).
    pub user: String,
    /// Capabilities dropped: `ALL`, so that only `cap_add` remains.
    pub cap_drop: Vec<String>,
    /// Capabilities added back (`NET_ADMIN`), each with why.
    pub cap_add: BTreeMap<String, String>,
    /// Devices mapped in, by path, each with why.
    pub devices: BTreeMap<String, String>,
    /// The root filesystem is read-only.
    pub read_only_rootfs: bool,
    /// Writable paths on the read-only root, each with why.
    pub writable: BTreeMap<String, String>,
    /// `no-new-privileges`: no setuid binary or file capability can raise privileges.
    pub no_new_privileges: bool,
    /// The seccomp profile.
    pub seccomp: String,
    /// Most tasks (processes and threads) at once.
    pub pids_limit: i64,
    /// Memory limit, bytes (memory+swap is the same: no swap).
    pub memory_bytes: i64,
    /// How the two limits were sized.
    pub limits_basis: String,
}

/// The CPUs of each role, as cpuset lists (cpuset(7) "List format", e.g. `"0"`, `"1-3"`);
/// `None` for a role that is not pinned.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuPlanRecord {
    /// `auto`, `shared`, or the plan given on the command line.
    pub mode: String,
    /// The server host's CPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// The client host's CPUs (echo-bench's default thread count follows them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// The link host's CPUs (link topologies only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
    /// CPUs of the machine the plan was made for.
    pub machine_cpus: u64,
    /// What the plan shares and why, in a sentence.
    pub note: String,
}

impl CpuPlanRecord {
    /// The [`mode`](Self::mode) of a multi-machine run: server and client on machines of
    /// their own, nothing pinned.
    pub const MACHINES: &'static str = "machines";

    /// What echo-bench's `--server-cpus` is under this plan: separate on separate machines
    /// ([`Self::MACHINES`]) or when both are pinned to disjoint CPUs; shared when server and
    /// client may run on a common CPU (one CPU, an unpinned plan, or overlapping lists).
    pub fn server_cpus(&self) -> crate::cmd::ServerCpus {
        use crate::cmd::ServerCpus;
        if self.mode == Self::MACHINES {
            return ServerCpus::Separate;
        }
        let pinned_apart = self.server.is_some()
            && self.client.is_some()
            && self.shared_by_server_and_client().is_empty();
        if self.machine_cpus >= 2 && pinned_apart {
            ServerCpus::Separate
        } else {
            ServerCpus::Shared
        }
    }

    /// The CPUs server and client both may run on (empty: disjoint, or not both pinned).
    pub fn shared_by_server_and_client(&self) -> Vec<u32> {
        match (&self.server, &self.client) {
            (Some(s), Some(c)) => {
                let client = cpuset_list(c);
                cpuset_list(s)
                    .into_iter()
                    .filter(|cpu| client.contains(cpu))
                    .collect()
            }
            _ => Vec::new(),
        }
    }
}

/// The CPUs of a cpuset list (`"0,2-3"` → 0, 2, 3; cpuset(7) "List format"); items that are
/// not numbers or ranges are skipped.
pub fn cpuset_list(list: &str) -> BTreeSet<u32> {
    let mut out = BTreeSet::new();
    for item in list.split(',').map(str::trim) {
        match item.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>()) {
                    out.extend(a..=b);
                }
            }
            None => {
                if let Ok(c) = item.parse() {
                    out.insert(c);
                }
            }
        }
    }
    out
}

/// How the runs were ordered.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OrderRecord {
    /// `shuffled` (each repetition round in its own random order) or `listed` (matrix order).
    pub kind: String,
    /// Seed of the shuffle (`echolab-up --order-seed` repeats the order).
    pub seed: u64,
    /// Whether each cell started from fresh client and server hosts (new network namespaces:
    /// no TIME_WAIT, no cached route metrics from an earlier cell).
    pub fresh_hosts_per_cell: bool,
}

/// A sample of the server host's resource use (from the container's stats, or /proc locally).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ResourceSample {
    /// Seconds since the client started.
    pub t_s: f64,
    /// CPU use over the last interval, percent of one core (100 = one core busy, as top(1)).
    pub cpu_pct: f64,
    /// Resident memory, bytes.
    pub mem_bytes: u64,
    /// Memory as percent of the host's total (seed 004 reports mem%).
    pub mem_pct: f64,
    /// The user-mode part of `cpu_pct` (cgroup v2 `cpu.stat` `user_usec`, v1
    /// `cpuacct.usage_user`; /proc/PID/stat `utime` locally), percent of one core; absent
    /// where the source does not split user from kernel time (the engine's stats API) and in
    /// records older than the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_user_pct: Option<f64>,
    /// The kernel-mode part of `cpu_pct` (`system_usec`, `cpuacct.usage_sys`, `stime`), as
    /// `cpu_user_pct`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_sys_pct: Option<f64>,
}

/// `runs/<cell-id>_rep<N>.json`: one cell, one repetition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The cell.
    pub cell: Cell,
    /// Repetition number, 1-based.
    pub repetition: u64,
    /// RFC 3339 UTC start.
    pub started_at: String,
    /// Wall time of the whole cell (server start to stats read), seconds.
    pub wall_s: f64,
    /// echo-bench's report, if it produced one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bench: Option<BenchReport>,
    /// echo-server's final stats, if it produced them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerStats>,
    /// The server's process id from its readiness line ([`crate::cmd::Ready`]'s `pid`, in the
    /// server host's pid namespace), kept as soon as the server is ready, so that a run whose
    /// server printed no stats still names its process; a prefork server's worker processes
    /// are `server.workers[].pid`. Absent in older records and for a run whose server never
    /// became ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_pid: Option<u32>,
    /// Server host CPU and memory during the client run.
    #[serde(default)]
    pub samples: Vec<ResourceSample>,
    /// How long the cell waited for a quiet machine after its fresh hosts were made, when
    /// they were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settle: Option<Settle>,
    /// What the link carried and dropped during this run (userspace wire), when the profile
    /// has a link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<LinkCounters>,
    /// strace -c summary of the client, when the experiment asked for it (seed 002).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strace: Option<String>,
    /// What went wrong in this run, if anything (the run is kept, marked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl RunRecord {
    /// File name of this record inside `runs/`.
    pub fn file_name(&self) -> String {
        run_file_name(&self.cell, self.repetition)
    }
}

/// `<cell-id>_rep<N>.json`.
pub fn run_file_name(cell: &Cell, repetition: u64) -> String {
    format!("{}_rep{repetition}.json", cell.id())
}

/// Writes `bytes` to `path` through a temporary file in the same directory and a rename, so
/// readers see the old file or the new one, never a torn one. The data is fsynced first.
///
/// # Errors
/// Any I/O error, with the path in the message.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let tmp: PathBuf = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let ctx = |e: std::io::Error, what: &str, p: &Path| {
        std::io::Error::new(e.kind(), format!("{what} {}: {e}", p.display()))
    };
    let mut f = std::fs::File::create(&tmp).map_err(|e| ctx(e, "cannot create", &tmp))?;
    f.write_all(bytes)
        .map_err(|e| ctx(e, "cannot write", &tmp))?;
    f.sync_all().map_err(|e| ctx(e, "cannot sync", &tmp))?;
    std::fs::rename(&tmp, path).map_err(|e| ctx(e, "cannot rename into place", path))
}

/// Errors reading a results directory.
#[derive(Debug, thiserror::Error)]
pub enum ResultsError {
    /// The directory has no manifest.yaml: not a results directory.
    #[error("{0} is not an echolab results directory (no manifest.yaml)")]
    NotResults(String),
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why it could not be read.
        source: std::io::Error,
    },
    /// A file did not parse.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// What is wrong, naming the field.
        message: String,
    },
}

/// A results directory read back: the manifest and every run record, sorted by file name.
#[derive(Debug, Clone)]
pub struct ResultsDir {
    /// The directory.
    pub path: PathBuf,
    /// Its manifest.
    pub manifest: Manifest,
    /// Its run records.
    pub runs: Vec<RunRecord>,
    /// Run files that could not be read or parsed, with the reason: left out, not fatal, so
    /// one damaged file does not hide every other run.
    pub unreadable: Vec<(PathBuf, String)>,
}

impl ResultsDir {
    /// Reads `dir`. Temporary files (`.*.tmp-*`) of a run cut short are ignored; a run file
    /// that cannot be read or parsed goes to [`ResultsDir::unreadable`].
    ///
    /// # Errors
    /// [`ResultsError::NotResults`] without a manifest; a manifest or `runs/` listing that
    /// cannot be read or parsed.
    pub fn load(dir: &Path) -> Result<Self, ResultsError> {
        let mpath = dir.join(MANIFEST_FILE);
        if !mpath.is_file() {
            return Err(ResultsError::NotResults(dir.display().to_string()));
        }
        let io = |path: &Path| {
            let p = path.display().to_string();
            move |source| ResultsError::Io { path: p, source }
        };
        let text = std::fs::read_to_string(&mpath).map_err(io(&mpath))?;
        let manifest: Manifest = serde_yaml::from_str(&text).map_err(|e| ResultsError::Parse {
            path: mpath.display().to_string(),
            message: e.to_string(),
        })?;
        let mut runs = Vec::new();
        let mut unreadable = Vec::new();
        let rdir = dir.join(RUNS_DIR);
        if rdir.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(&rdir)
                .map_err(io(&rdir))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.extension().is_some_and(|x| x == "json")
                        && !p
                            .file_name()
                            .is_some_and(|n| n.to_string_lossy().starts_with('.'))
                })
                .collect();
            files.sort();
            for f in files {
                let parsed = std::fs::read_to_string(&f)
                    .map_err(|e| e.to_string())
                    .and_then(|text| {
                        serde_json::from_str::<RunRecord>(&text).map_err(|e| e.to_string())
                    });
                match parsed {
                    Ok(rec) => runs.push(rec),
                    Err(why) => unreadable.push((f, why)),
                }
            }
        }
        Ok(Self {
            path: dir.to_path_buf(),
            manifest,
            runs,
            unreadable,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_record_keeps_the_server_pid_and_reads_older_records_without_it() {
        let old = r#"{"cell":{"server":"epoll-et","mode":"long","conns":1,"rounds":1,"payload":12},
            "repetition":1,"started_at":"t","wall_s":1.0}"#;
        let mut rec: RunRecord = serde_json::from_str(old).unwrap();
        assert_eq!(rec.server_pid, None);
        rec.server_pid = Some(4242);
        let text = serde_json::to_string(&rec).unwrap();
        assert!(text.contains(r#""server_pid":4242"#), "{text}");
        let back: RunRecord = serde_json::from_str(&text).unwrap();
        assert_eq!(back.server_pid, Some(4242));
    }

    #[test]
    fn a_status_word_is_the_one_the_manifest_writes() {
        use RunStatus::*;
        for s in [Running, Complete, Failed, Interrupted, Abandoned] {
            assert_eq!(serde_yaml::to_string(&s).unwrap().trim(), s.word());
        }
    }

    #[test]
    fn server_cpus_are_separate_only_when_both_are_pinned_apart() {
        use crate::cmd::ServerCpus::{Separate, Shared};
        let plan = |server: Option<&str>, client: Option<&str>, cpus| CpuPlanRecord {
            server: server.map(str::to_string),
            client: client.map(str::to_string),
            machine_cpus: cpus,
            ..Default::default()
        };
        assert_eq!(plan(Some("0"), Some("1"), 2).server_cpus(), Separate);
        assert_eq!(plan(Some("0-1"), Some("2-3"), 4).server_cpus(), Separate);
        assert_eq!(plan(Some("0-1"), Some("1-2"), 4).server_cpus(), Shared);
        assert_eq!(plan(None, None, 2).server_cpus(), Shared, "unpinned");
        assert_eq!(plan(Some("0"), None, 2).server_cpus(), Shared);
        assert_eq!(plan(None, None, 1).server_cpus(), Shared, "one CPU");
        let machines = CpuPlanRecord {
            mode: CpuPlanRecord::MACHINES.into(),
            ..plan(None, None, 1)
        };
        assert_eq!(
            machines.server_cpus(),
            Separate,
            "each on a machine of its own"
        );
    }

    #[test]
    fn write_atomic_replaces_whole_files() {
        let dir = std::env::temp_dir().join(format!("echolab-core-atomic-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("a.json");
        write_atomic(&p, b"first").unwrap();
        write_atomic(&p, b"second").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "second");
        let leftovers: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .collect();
        assert_eq!(leftovers.len(), 1, "no temporary file left behind");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_directory_without_manifest_is_named_in_the_error() {
        let dir = std::env::temp_dir();
        let e = ResultsDir::load(&dir).unwrap_err().to_string();
        assert!(e.contains("is not an echolab results directory"), "{e}");
    }
}
