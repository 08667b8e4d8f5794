//! `echolab-up --explain`: after the run, the cells of every refuted or inconclusive claim
//! run again, as here and under each of the seed's settings that this machine can run, one at
//! a time and all together, each as an ordinary results directory under `explain/` with an
//! index (`echolab_report::attribution`), so that the report can say which settings move each
//! claim toward the seed's figure. A setting of the seed's that cannot vary here (the kernel,
//! more CPUs than the machine has) is named once and left unexplained, never skipped silently.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use echolab_core::cmd::BenchEngine;
use echolab_core::experiment::Experiment;
use echolab_core::results::{ResultsDir, RunStatus};
use echolab_report::attribution::{ExplainIndex, Variant, ALL_SEED, EXPLAIN_DIR, HERE};
use echolab_report::claims::Verdict;
use echolab_report::setting::{Setting, SettingRow};

use crate::app::run_once;
use crate::cli::Args;

/// A setting's variant name, kebab case (`cpu-plan`).
fn variant_name(s: Setting) -> String {
    s.name().replace(' ', "-").to_lowercase()
}

/// Whether a run's directory holds a complete run without errors.
fn completed(dir: &Path) -> Result<ResultsDir, String> {
    let r = ResultsDir::load(dir).map_err(|e| e.to_string())?;
    match (&r.manifest.status, &r.manifest.error) {
        (RunStatus::Complete, None) => Ok(r),
        (status, error) => Err(format!(
            "{status:?}{}",
            error.as_ref().map(|e| format!(": {e}")).unwrap_or_default()
        )
        .to_lowercase()),
    }
}

/// The experiment the reruns use: the one the run ran (after `--reps`), with only the claims
/// to explain (and its mechanisms' references to those); its repetition rules are the run's
/// own (on a quiet 2-core VM the whole `--explain` of exp31 takes about ten minutes:
/// `time echolab-up --explain`).
fn rerun_experiment(exp: &Experiment, claims: &[String]) -> Experiment {
    let mut e = exp.clone();
    e.reference.claims.retain(|c| claims.contains(&c.name));
    for m in &mut e.reference.mechanisms {
        m.explains.retain(|n| claims.contains(n));
    }
    e
}

/// Writes `exp` to `path`, checked by the parser the rerun uses.
fn write_experiment(exp: &Experiment, path: &Path) -> Result<(), String> {
    let text = serde_yaml::to_string(exp).map_err(|e| e.to_string())?;
    Experiment::parse(&text, &path.display().to_string()).map_err(|e| e.to_string())?;
    echolab_core::results::write_atomic(path, text.as_bytes()).map_err(|e| e.to_string())
}

/// The flags of the user's call that every rerun keeps (where the binaries and the image
/// are, which backend, the profile).
fn kept_flags(args: &Args) -> Vec<String> {
    let mut v = vec!["--profile".to_string(), args.profile().to_string()];
    if let Some(d) = &args.bin_dir {
        v.extend(["--bin-dir".into(), d.display().to_string()]);
    }
    if let Some(i) = &args.image {
        v.extend(["--image".into(), i.clone()]);
    }
    let backend = clap::ValueEnum::to_possible_value(&args.backend)
        .map(|p| p.get_name().to_string())
        .unwrap_or_else(|| "auto".into());
    v.extend(["--backend".into(), backend]);
    if args.allow_uring_unconfined {
        v.push("--allow-uring-unconfined".into());
    }
    v
}

/// The variants to run: as here, each varying setting alone, all of them together.
fn plan(vary: &[Setting]) -> Vec<(String, Vec<Setting>)> {
    let mut v = vec![(HERE.to_string(), Vec::new())];
    v.extend(vary.iter().map(|s| (variant_name(*s), vec![*s])));
    if vary.len() > 1 {
        v.push((ALL_SEED.to_string(), vary.to_vec()));
    }
    v
}

/// The arguments of one variant's rerun (without argv[0]).
fn variant_args(
    kept: &[String],
    settings: &[Setting],
    experiments: (&Path, &Path),
    out: &Path,
) -> Vec<String> {
    let exp = if settings.contains(&Setting::Client) {
        experiments.1
    } else {
        experiments.0
    };
    let mut v = vec![
        "--experiment".to_string(),
        exp.display().to_string(),
        "--out".into(),
        out.display().to_string(),
    ];
    v.extend(kept.iter().cloned());
    for s in settings {
        match s {
            Setting::CpuPlan => v.extend(["--cpu-plan".into(), "shared".into()]),
            Setting::Measure => v.push("--as-published".into()),
            Setting::Hosts => v.push("--reuse-hosts".into()),
            // The client is the experiment file's `bench.engine`; the rest cannot vary.
            _ => {}
        }
    }
    v
}

/// Runs the main run, then the reruns; returns the exit code of the first that failed, or
/// the main run's.
pub async fn run(args: Args, argv: Vec<String>) -> ExitCode {
    let mut made = None;
    let code = run_once(args.clone(), argv, &mut made).await;
    let Some(dir) = made else { return code };
    let main = match completed(&dir) {
        Ok(r) => r,
        Err(why) => {
            eprintln!(
                "echolab-up: --explain: the run did not complete ({why}); nothing to explain"
            );
            return code;
        }
    };
    match explain(&args, &dir, &main).await {
        Ok(()) => code,
        Err(e) => {
            eprintln!("echolab-up: --explain: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn explain(args: &Args, dir: &Path, main: &ResultsDir) -> Result<(), String> {
    let report = echolab_report::build(dir).map_err(|e| e.to_string())?;
    let claims: Vec<String> = report
        .summary
        .claims
        .iter()
        .filter(|(_, v)| matches!(v, Verdict::Refuted | Verdict::Inconclusive))
        .map(|(n, _)| n.clone())
        .collect();
    if claims.is_empty() {
        eprintln!("echolab-up: --explain: no claim is refuted or inconclusive; nothing to explain");
        return Ok(());
    }
    let rows: Vec<SettingRow> = echolab_report::setting::rows(&main.manifest)
        .into_iter()
        .filter(|r| r.differs)
        .collect();
    let mut vary = Vec::new();
    let mut cannot_vary = Vec::new();
    for r in &rows {
        match r.setting.as_seed() {
            Ok(_) => vary.push(r.setting),
            Err(needs) => {
                let line = format!(
                    "{}: {} in the seed, {} here (needs {needs})",
                    r.setting.name(),
                    r.seed,
                    r.here
                );
                eprintln!("echolab-up: --explain: cannot vary {line}");
                cannot_vary.push(line);
            }
        }
    }
    let root = dir.join(EXPLAIN_DIR);
    std::fs::create_dir_all(&root).map_err(|e| format!("cannot create {}: {e}", root.display()))?;
    let exp = rerun_experiment(&main.manifest.experiment, &claims);
    let here_exp = root.join("experiment.yaml");
    write_experiment(&exp, &here_exp)?;
    let mut thread_exp = exp.clone();
    thread_exp.bench.engine = BenchEngine::Thread;
    let client_exp = root.join("experiment-client-thread.yaml");
    write_experiment(&thread_exp, &client_exp)?;
    let mut index = ExplainIndex {
        claims,
        variants: Vec::new(),
        cannot_vary,
    };
    let kept = kept_flags(args);
    let variants = plan(&vary);
    for (i, (name, settings)) in variants.iter().enumerate() {
        let out: PathBuf = root.join(name);
        let vargs = variant_args(&kept, settings, (&here_exp, &client_exp), &out);
        eprintln!(
            "echolab-up: --explain: {} of {}: {} ({})",
            i + 1,
            variants.len(),
            if settings.is_empty() {
                "the claims' cells as here".to_string()
            } else {
                format!(
                    "as the seed's: {}",
                    settings
                        .iter()
                        .map(|s| s.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            },
            vargs.join(" ")
        );
        let parsed =
            crate::cli::parse(std::iter::once("echolab-up".to_string()).chain(vargs.clone()))
                .map_err(|e| format!("variant {name}: {e}"))?;
        let mut made = None;
        let _ = run_once(parsed, vargs.clone(), &mut made).await;
        let outcome = match &made {
            Some(d) => completed(d)
                .map(|_| "complete".to_string())
                .unwrap_or_else(|e| e),
            None => "made no results directory".into(),
        };
        let interrupted = outcome.starts_with("interrupted");
        index.variants.push(Variant {
            name: name.clone(),
            settings: settings.iter().map(|s| s.name().to_string()).collect(),
            args: vargs,
            dir: made.and_then(|d| d.strip_prefix(&root).ok().map(|p| p.display().to_string())),
            outcome,
        });
        index.save(dir)?;
        if interrupted {
            return Err("interrupted; the reruns so far are in explain/index.yaml".into());
        }
    }
    crate::report::render(dir);
    eprintln!("echolab-up: --explain: which settings move each claim toward the seed (report.md, \"Attribution\"):");
    eprint!("{}", echolab_report::attribution::text(dir));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_varying_setting_alone_then_all_together_after_a_rerun_as_here() {
        let p = plan(&[Setting::CpuPlan, Setting::Measure]);
        let names: Vec<&str> = p.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, [HERE, "cpu-plan", "cell-measures", ALL_SEED]);
        assert_eq!(p[3].1, vec![Setting::CpuPlan, Setting::Measure]);
        // One setting: no "all together", which would be the same run twice.
        assert_eq!(plan(&[Setting::Hosts]).len(), 2);
    }

    #[test]
    fn each_setting_becomes_its_flag_and_the_client_its_experiment_file() {
        let kept = vec!["--profile".to_string(), "loopback".into()];
        let files = (
            Path::new("/x/experiment.yaml"),
            Path::new("/x/experiment-client-thread.yaml"),
        );
        let all = variant_args(
            &kept,
            &[
                Setting::CpuPlan,
                Setting::Client,
                Setting::Measure,
                Setting::Hosts,
            ],
            files,
            Path::new("/x/all"),
        );
        assert_eq!(
            all.join(" "),
            "--experiment /x/experiment-client-thread.yaml --out /x/all --profile loopback --cpu-plan shared --as-published --reuse-hosts"
        );
        let here = variant_args(&kept, &[], files, Path::new("/x/here"));
        assert_eq!(
            here.join(" "),
            "--experiment /x/experiment.yaml --out /x/here --profile loopback"
        );
        // Each parses as echolab-up's own command line.
        for v in [all, here] {
            let args =
                crate::cli::parse(std::iter::once("echolab-up".to_string()).chain(v)).unwrap();
            assert!(!args.explain);
        }
    }

    #[test]
    fn the_rerun_experiment_keeps_only_the_claims_to_explain() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../experiments/exp31.yaml");
        let exp = Experiment::load(Path::new(path)).unwrap();
        let keep = vec!["long/short QPS gain, LT server".to_string()];
        let e = rerun_experiment(&exp, &keep);
        assert_eq!(e.reference.claims.len(), 1);
        assert!(e
            .reference
            .mechanisms
            .iter()
            .all(|m| m.explains.iter().all(|n| keep.contains(n))));
        assert_eq!(e.cells(), exp.cells());
        assert_eq!(e.max_repetitions(), exp.max_repetitions());
        let dir = std::env::temp_dir().join(format!("echolab-explain-exp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        write_experiment(&e, &dir.join("e.yaml")).unwrap();
        assert_eq!(Experiment::load(&dir.join("e.yaml")).unwrap(), e);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
