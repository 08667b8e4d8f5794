//! `echolab-up --explain`: after the run, the cells of every refuted or inconclusive claim
//! run again, as here and under each of the seed's settings that this machine can run, one at
//! a time and all together, in rounds (a batch of repetitions per variant, ABBA order) that go
//! on while a variant's change from here is unsettled, each batch an ordinary results
//! directory under `explain/<variant>/` with an index (`echolab_report::attribution`), so that
//! the report can say which settings move each claim toward the seed's figure
//! (docs/methodology.md, "Attribution"). A setting of the seed's that cannot vary here (the kernel,
//! more CPUs than the machine has) is named once and left unexplained, never skipped silently.

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use echolab_core::cmd::BenchEngine;
use echolab_core::experiment::Experiment;
use echolab_core::results::{ResultsDir, RunStatus};
use echolab_report::attribution::{Batch, ExplainIndex, Variant, ALL_SEED, EXPLAIN_DIR, HERE};
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
/// to explain (and its mechanisms' references to those). Its minimum repetitions are the size
/// of a round's batch and its maximum the most repetitions a variant gets over the rounds.
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

/// The most time `--explain` may take, main run included, on the machine it runs on: a round
/// of reruns whose estimate (each variant's last batch, per repetition) would end past it is
/// not started, and the report says so.
pub(crate) const BUDGET: Duration = Duration::from_secs(15 * 60);

/// Runs the main run, then the reruns; returns the exit code of the first that failed, or
/// the main run's.
pub async fn run(args: Args, argv: Vec<String>) -> ExitCode {
    let started = Instant::now();
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
    match explain(&args, &dir, &main, started).await {
        Ok(()) => code,
        Err(e) => {
            eprintln!("echolab-up: --explain: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The order of a round's variants: as planned in odd rounds, reversed in even ones (ABBA), so
/// that a drift of the machine over the rounds weighs on every variant alike.
fn round_order<T: Clone>(chosen: &[T], round: u64) -> Vec<T> {
    let mut v = chosen.to_vec();
    if round % 2 == 0 {
        v.reverse();
    }
    v
}

/// What the next round reruns, given the variants still unsettled and the repetitions each
/// variant has had (`done`, in plan order, `here` first): `here` (the reference of every
/// change) while it is below the maximum, and each unsettled variant below it, each with the
/// repetitions its batch gets (the experiment's minimum, less near the maximum); or why the
/// rounds end.
fn next_round(
    names: &[&str],
    unsettled: &[String],
    done: &[u64],
    batch: u64,
    max: u64,
) -> Result<Vec<(usize, u64)>, String> {
    if unsettled.is_empty() {
        return Err("Every change settled.".into());
    }
    let is_unsettled = |i: usize| unsettled.iter().any(|u| u == names[i]);
    let below = |i: &usize| done[*i] < max;
    if !(1..names.len()).filter(below).any(is_unsettled) {
        return Err(format!(
            "The reruns reached the experiment's maximum of {max} repetitions with {} unsettled.",
            unsettled.join(", ")
        ));
    }
    Ok((0..names.len())
        .filter(below)
        .filter(|&i| i == 0 || is_unsettled(i))
        .map(|i| (i, batch.min(max - done[i])))
        .collect())
}

/// How the progress line names a variant's settings.
fn label(settings: &[Setting]) -> String {
    if settings.is_empty() {
        return "the claims' cells as here".into();
    }
    let names: Vec<&str> = settings.iter().map(|s| s.name()).collect();
    format!("as the seed's: {}", names.join(", "))
}

/// One batch of a variant: echolab-up run with `vargs` (its verdicts kept to its own report),
/// and how it ended, its directory relative to `root` (`explain/`).
async fn run_batch(name: &str, vargs: Vec<String>, root: &Path) -> Result<Batch, String> {
    let mut parsed =
        crate::cli::parse(std::iter::once("echolab-up".to_string()).chain(vargs.clone()))
            .map_err(|e| format!("variant {name}: {e}"))?;
    parsed.quiet_verdicts = true;
    let mut made = None;
    let _ = run_once(parsed, vargs.clone(), &mut made).await;
    let outcome = match &made {
        Some(d) => completed(d)
            .map(|_| "complete".to_string())
            .unwrap_or_else(|e| e),
        None => "made no results directory".into(),
    };
    Ok(Batch {
        args: vargs,
        dir: made.and_then(|d| d.strip_prefix(root).ok().map(|p| p.display().to_string())),
        outcome,
    })
}

async fn explain(
    args: &Args,
    dir: &Path,
    main: &ResultsDir,
    started: Instant,
) -> Result<(), String> {
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
    let planned = plan(&vary);
    let mut index = ExplainIndex {
        claims,
        variants: planned
            .iter()
            .map(|(name, settings)| Variant {
                name: name.clone(),
                settings: settings.iter().map(|s| s.name().to_string()).collect(),
                batches: Vec::new(),
            })
            .collect(),
        margin: exp.target_halfwidth(),
        ended: String::new(),
        cannot_vary,
    };
    let kept = kept_flags(args);
    let names: Vec<&str> = planned.iter().map(|(n, _)| n.as_str()).collect();
    // Seconds per repetition of each variant's last batch, for the budget's estimate.
    let mut per_rep = vec![0.0f64; planned.len()];
    let (batch_reps, max) = (exp.repetitions, exp.max_repetitions());
    let mut done = vec![0u64; planned.len()];
    let mut chosen: Vec<(usize, u64)> = (0..planned.len())
        .map(|i| (i, batch_reps.min(max)))
        .collect();
    for round in 1.. {
        let order = round_order(&chosen, round);
        for (k, &(i, reps)) in order.iter().enumerate() {
            let (name, settings) = &planned[i];
            let mut vargs =
                variant_args(&kept, settings, (&here_exp, &client_exp), &root.join(name));
            vargs.extend(["--reps".into(), reps.to_string()]);
            eprintln!(
                "echolab-up: --explain: round {round}, {} of {}: {} ({})",
                k + 1,
                order.len(),
                label(settings),
                vargs.join(" ")
            );
            let t = Instant::now();
            let batch = run_batch(name, vargs, &root).await?;
            per_rep[i] = t.elapsed().as_secs_f64() / reps as f64;
            done[i] += reps;
            let interrupted = batch.outcome.starts_with("interrupted");
            index.variants[i].batches.push(batch);
            index.save(dir)?;
            if interrupted {
                return Err("interrupted; the reruns so far are in explain/index.yaml".into());
            }
        }
        let attributions = echolab_report::attribution::load(dir)?.unwrap_or_default();
        let unsettled = echolab_report::attribution::unsettled_variants(&attributions);
        let ended = match next_round(&names, &unsettled, &done, batch_reps, max) {
            Err(why) => Some(why),
            Ok(next) => {
                let estimate: f64 = next.iter().map(|&(i, r)| per_rep[i] * r as f64).sum();
                let elapsed = started.elapsed().as_secs_f64();
                if elapsed + estimate > BUDGET.as_secs_f64() {
                    Some(format!(
                        "Another round ({} unsettled) would have ended past --explain's budget of {} min \
                         ({:.0} s run, about {:.0} s more), so the reruns stopped there.",
                        unsettled.join(", "),
                        BUDGET.as_secs() / 60,
                        elapsed,
                        estimate
                    ))
                } else {
                    chosen = next;
                    None
                }
            }
        };
        if let Some(why) = ended {
            index.ended = format!("{why} Rounds run: {round}.");
            index.save(dir)?;
            break;
        }
    }
    crate::report::render(dir, true);
    eprintln!("echolab-up: --explain: {}", index.ended);
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
    fn rounds_alternate_their_order_so_drift_weighs_on_every_variant_alike() {
        assert_eq!(round_order(&[0, 1, 2], 1), [0, 1, 2]);
        assert_eq!(round_order(&[0, 1, 2], 2), [2, 1, 0]);
        assert_eq!(round_order(&[0, 2], 3), [0, 2]);
    }

    #[test]
    fn a_round_reruns_here_and_the_unsettled_until_the_maximum() {
        let names = [HERE, "cpu-plan", "cell-measures", "hosts"];
        let unsettled = vec!["hosts".to_string(), "cell-measures".to_string()];
        // After one batch of 3 of at most 10: here and both unsettled, in plan order, 3 more.
        assert_eq!(
            next_round(&names, &unsettled, &[3, 3, 3, 3], 3, 10),
            Ok(vec![(0, 3), (2, 3), (3, 3)])
        );
        // Near the maximum a batch has what is left of it.
        assert_eq!(
            next_round(&names, &unsettled, &[9, 9, 9, 9], 3, 10),
            Ok(vec![(0, 1), (2, 1), (3, 1)])
        );
        // A variant that settled and then, against a larger here, did not: it goes on to the
        // maximum alone once here has reached it.
        assert_eq!(
            next_round(&names, &unsettled, &[10, 10, 10, 6], 3, 10),
            Ok(vec![(3, 3)])
        );
        let at_max = next_round(&names, &unsettled, &[10, 10, 10, 10], 3, 10).unwrap_err();
        assert!(
            at_max.contains("maximum of 10") && at_max.contains("hosts, cell-measures"),
            "{at_max}"
        );
        assert_eq!(
            next_round(&names, &[], &[3, 3, 3, 3], 3, 10),
            Err("Every change settled.".to_string())
        );
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
