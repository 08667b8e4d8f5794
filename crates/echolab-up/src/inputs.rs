//! Everything a run needs, resolved before any host exists: the profile and experiment files,
//! the planned runs and their order, where the binaries are and where results go; and the
//! checks that can fail before anything is created.

use std::path::{Path, PathBuf};

use echolab_core::experiment::Experiment;
use echolab_core::profile::Profile;
use echolab_runtime::image_archive::sha256_hex;

use crate::catalog::{find_root, load_experiment, load_profile};
use crate::cli::Args;
use crate::plan::{self, PlannedRun};

/// Everything resolved before any host exists.
pub(crate) struct Inputs {
    pub(crate) root: PathBuf,
    pub(crate) profile_path: PathBuf,
    pub(crate) profile: Profile,
    pub(crate) experiment_path: PathBuf,
    pub(crate) experiment: Experiment,
    pub(crate) runs: Vec<PlannedRun>,
    pub(crate) order: plan::Order,
    pub(crate) bin_dir: PathBuf,
    pub(crate) out: PathBuf,
}

impl Inputs {
    /// The plan announced at the start: `N runs`, or with adaptive repetitions how many
    /// cells, repetitions and the most each may get until its CI is within the target.
    pub(crate) fn describe_plan(&self) -> String {
        let e = &self.experiment;
        if e.max_repetitions() > e.repetitions {
            format!(
                "{} runs ({} cells × {} repetitions, up to {} each until the CI is within {:.0}%)",
                self.runs.len(),
                e.cells().len(),
                e.repetitions,
                e.max_repetitions(),
                e.target_halfwidth() * 100.0
            )
        } else {
            format!("{} runs", self.runs.len())
        }
    }

    /// The manifest's `inputs`: the profile and experiment files with their digests, and the
    /// binaries' directory.
    pub(crate) fn recorded(&self) -> std::collections::BTreeMap<String, String> {
        [
            ("profile", self.profile_path.display().to_string()),
            ("profile_digest", file_digest(&self.profile_path)),
            ("experiment", self.experiment_path.display().to_string()),
            ("experiment_digest", file_digest(&self.experiment_path)),
            ("bin_dir", self.bin_dir.display().to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// The custom servers' programs, which the lab image must hold besides echolab's own.
    pub(crate) fn image_programs(&self) -> Vec<String> {
        self.experiment
            .custom_servers()
            .iter()
            .filter_map(|c| c.command.first().cloned())
            .collect()
    }
}

pub(crate) fn resolve(args: &Args) -> Result<Inputs, String> {
    let root = find_root();
    let (profile_path, profile) = load_profile(&root, args.profile()).map_err(|e| e.to_string())?;
    let (experiment_path, experiment) =
        load_experiment(&root, &args.experiment).map_err(|e| e.to_string())?;
    let experiment = plan::with_repetitions(experiment, args.reps)?;
    let experiment = if args.as_published {
        experiment.as_published()
    } else {
        experiment
    };
    let order = match args.order {
        crate::cli::OrderChoice::Listed => plan::Order::Listed,
        crate::cli::OrderChoice::Shuffled => {
            plan::Order::Shuffled(args.order_seed.unwrap_or_else(plan::fresh_seed))
        }
    };
    let runs = plan::runs(&experiment, order);
    let bin_dir = args
        .bin_dir
        .clone()
        .unwrap_or_else(|| default_bin_dir(&root));
    let out = args.out.clone().unwrap_or_else(|| root.join("results"));
    Ok(Inputs {
        root,
        profile_path,
        profile,
        experiment_path,
        experiment,
        runs,
        order,
        bin_dir,
        out,
    })
}

/// The lab binaries this launcher was built with: its own directory when echo-server is beside
/// it (any target directory, an installed copy), else `$CARGO_TARGET_DIR/release` or
/// `<root>/target/release`.
fn default_bin_dir(root: &Path) -> PathBuf {
    let own = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf));
    if let Some(dir) = own.filter(|d| d.join("echo-server").is_file()) {
        return dir;
    }
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    target.join("release")
}

/// Checks, before anything is created, that the binaries an image is built from are there.
pub(crate) fn preflight(inputs: &Inputs, prebuilt_image: Option<&str>) -> Result<(), String> {
    if inputs.experiment.bench.strace && echolab_runtime::image_archive::on_path("strace").is_none()
    {
        return Err(format!(
            "{}: bench.strace asks for seed 002's strace cross-check, but strace is not on this machine's PATH (it goes into the lab image from there); install it (apt-get install strace) or set bench.strace: false",
            inputs.experiment_path.display()
        ));
    }
    if prebuilt_image.is_some() {
        return Ok(());
    }
    for custom in inputs.experiment.custom_servers() {
        let program = custom.command.first().map_or("", String::as_str);
        if let Err(e) = echolab_runtime::image_archive::find_program(program) {
            return Err(format!(
                "{}: server {:?}: {e}",
                inputs.experiment_path.display(),
                custom.name
            ));
        }
    }
    let missing: Vec<&str> = echolab_runtime::image_archive::REQUIRED_BINARIES
        .iter()
        .copied()
        .filter(|b| !inputs.bin_dir.join(b).is_file())
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{} missing in {}; build them with `cargo build --release --workspace --bins`, or point --bin-dir at where they are",
        missing.join(", "),
        inputs.bin_dir.display()
    ))
}

pub(crate) fn file_digest(path: &Path) -> String {
    std::fs::read(path)
        .map(|b| format!("sha256:{}", sha256_hex(&b)))
        .unwrap_or_default()
}
