//! `echolab-up --down`: remove the objects of runs whose launcher is gone, on this machine's
//! engine or on every engine of a lab file (`--down --lab LAB.yaml`).

use std::process::ExitCode;

use echolab_core::cli::EXIT_USAGE;
use echolab_runtime::deploy::{self, Docker};

use crate::catalog::find_root;
use crate::cli::Args;

/// Runs `--down`; returns the exit code (1 when an engine could not be cleaned up).
pub(crate) async fn down(args: &Args) -> ExitCode {
    let results = args
        .out
        .clone()
        .unwrap_or_else(|| find_root().join("results"));
    for dir in crate::results_dir::mark_abandoned(&results) {
        eprintln!(
            "echolab-up: {} was still 'running' but its launcher is gone: marked abandoned",
            dir.display()
        );
    }
    let Some(lab_path) = &args.lab else {
        let Some((_, reached)) = deploy::down_engines(None).await.pop() else {
            return ExitCode::SUCCESS;
        };
        return match reached {
            Ok(docker) => {
                let (code, removed) = down_on("", &docker, args.all).await;
                for hint in lab_runs_elsewhere(&results, &removed) {
                    eprintln!("echolab-up: {hint}");
                }
                code
            }
            Err(reason) => {
                eprintln!("echolab-up: {reason}; nothing to remove");
                ExitCode::SUCCESS
            }
        };
    };
    let lab = match echolab_core::lab_file::Lab::load(lab_path) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("echolab-up: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    // Every engine of the file, whichever role it had: one that cannot be reached fails the
    // call but does not stop the others' cleanup.
    let mut code = ExitCode::SUCCESS;
    for (name, reached) in deploy::down_engines(Some(&lab)).await {
        match reached {
            Ok(docker) => {
                if down_on(&name, &docker, args.all).await.0 != ExitCode::SUCCESS {
                    code = ExitCode::FAILURE;
                }
            }
            Err(e) => {
                eprintln!("echolab-up: {e}; nothing removed there");
                code = ExitCode::FAILURE;
            }
        }
    }
    code
}

/// For the runs `removed` here whose results under `results` say they spanned a lab's
/// engines: that their hosts on the other engines are still there, and how to remove them.
fn lab_runs_elsewhere(results: &std::path::Path, removed: &[String]) -> Vec<String> {
    let Ok(dirs) = std::fs::read_dir(results) else {
        return Vec::new();
    };
    dirs.filter_map(|d| echolab_core::results::ResultsDir::load(&d.ok()?.path()).ok())
        .filter(|r| removed.contains(&r.manifest.run_id) && !r.manifest.engines.is_empty())
        .map(|r| {
            format!(
                "run {} also has hosts on the engines of its lab file ({}); `echolab-up --down --lab LAB.yaml` removes them",
                r.manifest.run_id,
                r.manifest.engines.keys().cloned().collect::<Vec<_>>().join(", ")
            )
        })
        .collect()
}

/// `--down` on one engine (`name` empty: the only one); returns the exit code and the runs
/// whose objects it removed.
async fn down_on(name: &str, docker: &Docker, all: bool) -> (ExitCode, Vec<String>) {
    let on = if name.is_empty() {
        String::new()
    } else {
        format!("engine {name}: ")
    };
    let outcome = match deploy::down_on_engine(docker, all).await {
        Ok(o) => o,
        Err(e) => {
            eprintln!("echolab-up: {on}{e:#}");
            return (ExitCode::FAILURE, Vec::new());
        }
    };
    for (run, why) in &outcome.kept {
        eprintln!("echolab-up: {on}kept run {run}: {why}");
    }
    // A live run between two cells may have no container using its image for a moment, so
    // the engine's own refusal does not protect it: while any run is kept, images are too.
    let images = if outcome.kept.is_empty() {
        match deploy::remove_stale_images(docker).await {
            Ok(removed) => removed.len(),
            Err(e) => {
                eprintln!("echolab-up: {on}{e:#}");
                return (ExitCode::FAILURE, outcome.abandoned);
            }
        }
    } else {
        eprintln!("echolab-up: {on}kept stale lab images while runs are kept");
        0
    };
    eprintln!(
        "echolab-up: {on}removed {} containers and {} networks of {} runs whose launcher is gone{}, and {images} stale lab images",
        outcome.removed.containers.len(),
        outcome.removed.networks.len(),
        outcome.abandoned.len(),
        if all { " or that --all named" } else { "" },
    );
    (ExitCode::SUCCESS, outcome.abandoned)
}
