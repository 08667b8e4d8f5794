//! The command line of `echolab-up`.

use std::path::PathBuf;

use clap::{CommandFactory as _, FromArgMatches as _, Parser};

use crate::catalog::{available, find_root, EXPERIMENTS_DIR, PROFILES_DIR};

/// Default profile.
pub(crate) const DEFAULT_PROFILE: &str = "loopback";
/// Default profile of a lab run (`--lab`).
pub(crate) const DEFAULT_LAB_PROFILE: &str = "native";
/// Default experiment.
pub(crate) const DEFAULT_EXPERIMENT: &str = "exp31";

/// Which hosts to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum BackendChoice {
    /// Docker when an engine is reachable, else local processes (loopback only).
    Auto,
    /// Docker only; fail when no engine is reachable.
    Docker,
    /// Local processes only (loopback profile).
    Local,
}

/// Run a seed experiment in containers under a network profile, verify the link, collect
/// everything, clean up.
#[derive(Debug, Clone, Parser)]
// allow_negative_numbers: "--reps -1" reaches the value parser instead of reading as a flag.
// mut_arg: the gate (a flattened `GateArgs`, shared with `echolab-report compare`) compares a
// replay with its original, so it needs --replay here.
#[command(name = "echolab-up", version, allow_negative_numbers = true,
          mut_arg("gate", |a| a.requires("replay")))]
pub struct Args {
    /// Link profile: a name from netem/ or a path to a profile file [default: loopback; with
    /// --lab, native (the real path between the machines, nothing added); a link profile
    /// such as lan100 adds its impairment on top, on the client's machine].
    #[arg(long, value_name = "NAME|PATH")]
    pub(crate) profile: Option<String>,
    /// Experiment: a name from experiments/ or a path to an experiment file.
    #[arg(long, default_value = DEFAULT_EXPERIMENT, value_name = "NAME|PATH")]
    pub(crate) experiment: String,
    /// Directory under which the run's results directory (<UTC stamp>-<experiment>-<profile>,
    /// e.g. 20261203T180420Z-exp31-loopback) is made, with any missing parents
    /// (default: <root>/results).
    #[arg(long, value_name = "DIR")]
    pub(crate) out: Option<PathBuf>,
    /// Repetitions of every cell, a fixed count instead of the experiment's (which may be
    /// adaptive: `repetitions` to `max_repetitions`, judged at three planned looks, every
    /// interval then a repeated 95% CI; docs/methodology.md); 1 to 1000.
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..=echolab_core::limits::MAX_REPETITIONS))]
    pub(crate) reps: Option<u64>,
    /// A prebuilt lab image (e.g. the Nix-built one after `docker load`) instead of building
    /// one from the workspace binaries.
    #[arg(long, value_name = "REF")]
    pub(crate) image: Option<String>,
    /// Leave the run's containers and networks up afterwards (remove them with --down).
    #[arg(long)]
    pub(crate) keep: bool,
    /// Remove the containers and networks of runs whose launcher is gone (killed, crashed,
    /// or ended with --keep) and lab images that no tag but their content hash points to;
    /// mark their results directories under --out abandoned; then exit. Runs still going
    /// (in another shell), runs started from another host and compose's objects are kept,
    /// each named with the reason.
    #[arg(long, conflicts_with = "keep")]
    pub(crate) down: bool,
    /// With --down: remove every echolab container and network, live runs' and compose's too.
    #[arg(long, requires = "down")]
    pub(crate) all: bool,
    /// Build the lab image from --bin-dir (or check --image), tag it echolab:latest for
    /// compose/docker-compose.yml, print its reference and id, then exit.
    #[arg(long, conflicts_with = "down")]
    pub(crate) build_image: bool,
    /// Where the echo-server, echo-bench, echolab-netem and echolab-up binaries are
    /// (default: <root>/target/release).
    #[arg(long, value_name = "DIR")]
    pub(crate) bin_dir: Option<PathBuf>,
    /// Which hosts to use.
    #[arg(long, value_enum, default_value = "auto")]
    pub(crate) backend: BackendChoice,
    /// A lab file naming Docker engines on other machines and the role each runs
    /// (`roles: { server: a, client: b }`; docs/guide.md, "Two or more machines"): the server and
    /// the client then run on their own machines over the real network between them, on
    /// profile `native` or with a link profile's impairment added on the client's machine.
    /// `client: [b, c]` splits every run's connections over several client machines (short
    /// and long cells; on a link profile, a link on each client's path). With --down: clean
    /// up on every engine of the file.
    #[arg(long, value_name = "LAB.yaml", conflicts_with = "build_image")]
    pub(crate) lab: Option<PathBuf>,
    /// If io_uring is denied by Docker's default seccomp profile and also by that profile
    /// with the three io_uring calls added (which the server host otherwise gets), run the
    /// server host with seccomp=unconfined instead of skipping the uring cells. Recorded.
    #[arg(long)]
    pub(crate) allow_uring_unconfined: bool,
    /// Which CPUs each host runs on: `auto` gives server and client disjoint CPUs (on 2 CPUs:
    /// server on 0, client and link on 1), `shared` pins nothing, or
    /// `server=LIST,client=LIST[,link=LIST]` with LIST like `0`, `1-3` or `0+2`. Recorded in
    /// the manifest; echo-bench's thread count follows the client's CPUs. With --lab each role
    /// has a machine of its own and nothing is pinned; a LIST plan is refused there.
    #[arg(long, default_value = "auto", value_name = "PLAN", value_parser = crate::cpuplan::parse_choice)]
    pub(crate) cpu_plan: crate::cpuplan::CpuPlanChoice,
    /// Order of the cells within each repetition round: `shuffled` (a new permutation per
    /// round, so that an order effect cannot pass for a difference between cells) or `listed`
    /// (matrix order).
    #[arg(long, value_enum, default_value = "shuffled")]
    pub(crate) order: OrderChoice,
    /// Seed of the shuffle (default: from the clock); recorded in the manifest, so that a
    /// run's order can be repeated.
    #[arg(long, value_name = "N")]
    pub(crate) order_seed: Option<u64>,
    /// Keep one client and one server host for all cells instead of fresh ones per cell:
    /// faster, but each cell then inherits the TIME_WAIT sockets and route metrics of the
    /// cells before it.
    #[arg(long)]
    pub(crate) reuse_hosts: bool,
    /// Run every short/long cell as the seed published it (CONNS × ROUNDS requests, often a
    /// few milliseconds) instead of for the experiment's `window`.
    #[arg(long)]
    pub(crate) as_published: bool,
    /// After the run, explain the gap to the seed: rerun the cells of every refuted or
    /// inconclusive claim as a two-level factorial over the seed's settings this machine can
    /// run (CPU plan shared, the thread-per-connection client, CONNS × ROUNDS as published,
    /// hosts reused; every combination of up to three, the half fraction of four), and report
    /// each setting's main effect, each pair's interaction and the share of the gap to the
    /// seed's figure each closes, with intervals (report.md, "Attribution"). Every run of the
    /// design goes in every round; rounds stop at the experiment's planned looks once every
    /// effect has settled, and before a round would take the whole call past 15 minutes.
    #[arg(long, conflicts_with_all = ["down", "build_image", "lab", "keep"])]
    pub(crate) explain: bool,
    /// Rerun a recorded run exactly, from its record alone (a bundle of `echolab-report
    /// bundle`, verified and extracted under --out, or a results directory): its experiment,
    /// profile, lab file, CPU plan, repetitions, cell order and seed and options; then compare
    /// the two runs (replay.md in the new results directory). The checkout's files are not
    /// read. Exit 2 when the bundle is refused (one line: what is wrong).
    #[arg(long, value_name = "BUNDLE|RUN_DIR",
          conflicts_with_all = ["down", "build_image", "explain", "experiment", "profile", "lab", "reps"])]
    pub(crate) replay: Option<PathBuf>,
    /// With --replay: the regression gate against the original run.
    #[command(flatten)]
    pub(crate) gate: echolab_report::gate::GateArgs,
    /// Set by `--explain` on its reruns, never from the command line: a rerun's verdicts go to
    /// its own report.md instead of the terminal, which keeps one line per rerun.
    #[arg(skip)]
    pub(crate) quiet_verdicts: bool,
}

/// `--order`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum OrderChoice {
    /// A new seeded permutation of the cells in every repetition round.
    Shuffled,
    /// Matrix order in every round.
    Listed,
}

fn listing() -> String {
    let root = find_root();
    let list = |dir: &str| {
        let names = available(&root.join(dir));
        if names.is_empty() {
            "(none found)".to_string()
        } else {
            names.join(", ")
        }
    };
    format!(
        // Each list on a line of its own, so that how it wraps does not depend on the length
        // of the checkout's path.
        "Profiles in {}:\n  {}\nExperiments in {}:\n  {}\n\nExample:\n  echolab-up --profile crossnet --experiment exp31\n  echolab-up --replay run.tar.gz --gate slower    (rerun a bundle; exit 3 when a cell is slower)",
        root.join(PROFILES_DIR).display(),
        list(PROFILES_DIR),
        root.join(EXPERIMENTS_DIR).display(),
        list(EXPERIMENTS_DIR)
    )
}

/// Parses `argv`, with the available profiles and experiments in `--help`.
///
/// # Errors
/// clap's error (usage, or `--help`/`--version`, which are "errors" that print to stdout).
pub fn parse<I: IntoIterator<Item = String>>(argv: I) -> Result<Args, clap::Error> {
    let matches = Args::command()
        .after_help(listing())
        .try_get_matches_from(argv)?;
    Args::from_arg_matches(&matches)
}

impl Args {
    /// `--explain`: the run, then its reruns under the seed's settings
    /// ([`crate::explain::run`]).
    pub fn explain(&self) -> bool {
        self.explain
    }

    /// `--replay`: rerun a recorded run ([`crate::replay::run`]).
    pub fn replay(&self) -> bool {
        self.replay.is_some()
    }

    /// `--profile`, or its default: [`DEFAULT_LAB_PROFILE`] with `--lab`, else
    /// [`DEFAULT_PROFILE`].
    pub(crate) fn profile(&self) -> &str {
        match (&self.profile, &self.lab) {
            (Some(p), _) => p,
            (None, Some(_)) => DEFAULT_LAB_PROFILE,
            (None, None) => DEFAULT_PROFILE,
        }
    }
}
