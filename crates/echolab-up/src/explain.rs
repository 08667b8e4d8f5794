//! `echolab-up --explain`: after the run, the cells of every refuted or inconclusive claim run
//! again as a two-level factorial over the seed's settings that this machine can run (every
//! combination for up to three, the resolution IV half fraction for four;
//! `echolab_report::factorial`), every run of the design in every round (blocked by round,
//! the order alternating, ABBA), rounds stopping at the design's planned looks
//! (`echolab_report::sequential`) once every effect has settled, each batch an ordinary results
//! directory under `explain/<variant>/` with an index (`echolab_report::attribution`), so that
//! the report can give each setting's main effect, each pair's interaction and the share of the
//! gap to the seed each closes, with intervals (docs/methodology.md, "Attribution"). A setting
//! of the seed's that cannot vary here (the kernel, more CPUs than the machine has) is named
//! once and left unexplained, never skipped silently.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use echolab_core::cmd::BenchEngine;
use echolab_core::experiment::Experiment;
use echolab_core::results::{ResultsDir, RunStatus};
use echolab_report::attribution::{Batch, ExplainIndex, Variant, ALL_SEED, EXPLAIN_DIR, HERE};
use echolab_report::claims::Verdict;
use echolab_report::factorial::Plan;
use echolab_report::sequential::Design;
use echolab_report::setting::Setting;

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

/// The variants to run: the runs of the two-level factorial over the varying settings
/// ([`echolab_report::factorial::Plan`]: every combination for up to three settings, the
/// resolution IV half fraction for four), named `here`, a setting's name, names joined by `+`,
/// or [`ALL_SEED`].
fn plan(vary: &[Setting]) -> Vec<(String, Vec<Setting>)> {
    let design = Plan::new(vary.iter().map(|s| s.name().to_string()).collect());
    design
        .runs
        .iter()
        .map(|run| {
            let settings: Vec<Setting> = vary
                .iter()
                .zip(run)
                .filter(|(_, high)| **high)
                .map(|(s, _)| *s)
                .collect();
            let name = match settings.len() {
                0 => HERE.to_string(),
                n if n == vary.len() && n > 1 => ALL_SEED.to_string(),
                _ => settings
                    .iter()
                    .map(|s| variant_name(*s))
                    .collect::<Vec<_>>()
                    .join("+"),
            };
            (name, settings)
        })
        .collect()
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

/// How many repetitions per run the next round gives, every run of the design alike (blocked
/// by round), given what is still unsettled and the repetitions each run has had (`done`):
/// up to the design's next look; or why the rounds end.
fn next_round(unsettled: &[String], done: u64, design: &Design) -> Result<u64, String> {
    if unsettled.is_empty() {
        return Err("Every effect settled.".into());
    }
    match design.looks.iter().find(|l| **l > done) {
        Some(next) => Ok(next - done),
        None => Err(format!(
            "The reruns reached the experiment's maximum of {} repetitions with {} unsettled.",
            design.max(),
            unsettled.join(", ")
        )),
    }
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

/// The claims to explain: those the main run's report calls refuted or inconclusive.
fn claims_to_explain(dir: &Path) -> Result<Vec<String>, String> {
    let report = echolab_report::build(dir).map_err(|e| e.to_string())?;
    Ok(report
        .summary
        .claims
        .iter()
        .filter(|(_, v)| matches!(v, Verdict::Refuted | Verdict::Inconclusive))
        .map(|(n, _)| n.clone())
        .collect())
}

/// The settings that differ from the seed's, split into those this machine can vary and a
/// line for each that it cannot.
fn varying_settings(main: &ResultsDir) -> (Vec<Setting>, Vec<String>) {
    let mut vary = Vec::new();
    let mut cannot_vary = Vec::new();
    for r in echolab_report::setting::rows(&main.manifest)
        .into_iter()
        .filter(|r| r.differs)
    {
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
    (vary, cannot_vary)
}

/// Writes the reruns' experiment files under `root`: as the main run's (its claims to
/// explain only) and the same with the seed's thread-per-connection client.
fn write_experiments(exp: &Experiment, root: &Path) -> Result<(PathBuf, PathBuf), String> {
    let here_exp = root.join("experiment.yaml");
    write_experiment(exp, &here_exp)?;
    let mut thread_exp = exp.clone();
    thread_exp.bench.engine = BenchEngine::Thread;
    let client_exp = root.join("experiment-client-thread.yaml");
    write_experiment(&thread_exp, &client_exp)?;
    Ok((here_exp, client_exp))
}

/// What the rounds share: the variants, the flags every rerun keeps, the experiment files and
/// the directories.
struct Rounds<'a> {
    planned: Vec<(String, Vec<Setting>)>,
    kept: Vec<String>,
    files: (PathBuf, PathBuf),
    dir: &'a Path,
    root: PathBuf,
}

impl Rounds<'_> {
    /// Runs one round: every variant once, `reps` repetitions each, in the round's order.
    /// Returns the seconds per repetition of the round.
    async fn run(&self, round: u64, reps: u64, index: &mut ExplainIndex) -> Result<f64, String> {
        let t = Instant::now();
        let all: Vec<usize> = (0..self.planned.len()).collect();
        let order = round_order(&all, round);
        for (k, &i) in order.iter().enumerate() {
            let (name, settings) = &self.planned[i];
            let files = (self.files.0.as_path(), self.files.1.as_path());
            let mut vargs = variant_args(&self.kept, settings, files, &self.root.join(name));
            vargs.extend(["--reps".into(), reps.to_string()]);
            eprintln!(
                "echolab-up: --explain: round {round}, {} of {}: {} ({})",
                k + 1,
                order.len(),
                label(settings),
                vargs.join(" ")
            );
            let batch = run_batch(name, vargs, &self.root).await?;
            let interrupted = batch.outcome.starts_with("interrupted");
            index.variants[i].batches.push(batch);
            index.save(self.dir)?;
            if interrupted {
                return Err("interrupted; the reruns so far are in explain/index.yaml".into());
            }
        }
        Ok(t.elapsed().as_secs_f64() / reps as f64)
    }
}

/// Whether another round of `reps` repetitions per run, at `per_rep` seconds per repetition
/// of a round, would end past [`BUDGET`]: the sentence that says so, or `None`.
fn past_budget(started: Instant, per_rep: f64, reps: u64, unsettled: &[String]) -> Option<String> {
    let estimate = per_rep * reps as f64;
    let elapsed = started.elapsed().as_secs_f64();
    (elapsed + estimate > BUDGET.as_secs_f64()).then(|| {
        format!(
            "Another round ({} unsettled) would have ended past --explain's budget of {} min \
             ({:.0} s run, about {:.0} s more), so the reruns stopped there.",
            unsettled.join(", "),
            BUDGET.as_secs() / 60,
            elapsed,
            estimate
        )
    })
}

async fn explain(
    args: &Args,
    dir: &Path,
    main: &ResultsDir,
    started: Instant,
) -> Result<(), String> {
    let claims = claims_to_explain(dir)?;
    if claims.is_empty() {
        eprintln!("echolab-up: --explain: no claim is refuted or inconclusive; nothing to explain");
        return Ok(());
    }
    let (vary, cannot_vary) = varying_settings(main);
    let root = dir.join(EXPLAIN_DIR);
    std::fs::create_dir_all(&root).map_err(|e| format!("cannot create {}: {e}", root.display()))?;
    let exp = rerun_experiment(&main.manifest.experiment, &claims);
    let files = write_experiments(&exp, &root)?;
    let planned = plan(&vary);
    let design = Design::new(exp.repetitions, exp.max_repetitions());
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
        factors: vary.iter().map(|s| s.name().to_string()).collect(),
        looks: design.looks.clone(),
    };
    let rounds = Rounds {
        planned,
        kept: kept_flags(args),
        files,
        dir,
        root,
    };
    let (mut done, mut reps) = (0, design.looks[0]);
    for round in 1.. {
        let per_rep = rounds.run(round, reps, &mut index).await?;
        done += reps;
        let attributions = echolab_report::attribution::load(dir)?.unwrap_or_default();
        let unsettled = echolab_report::attribution::unsettled_variants(&attributions);
        let ended = match next_round(&unsettled, done, &design) {
            Err(why) => Some(why),
            Ok(next) => past_budget(started, per_rep, next, &unsettled).or_else(|| {
                reps = next;
                None
            }),
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
    fn the_variants_are_the_runs_of_a_two_level_factorial() {
        let p = plan(&[Setting::CpuPlan, Setting::Measure]);
        let names: Vec<&str> = p.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, [HERE, "cpu-plan", "cell-measures", ALL_SEED]);
        assert_eq!(p[3].1, vec![Setting::CpuPlan, Setting::Measure]);
        // One setting: here and the seed's, no "all together" twice.
        assert_eq!(plan(&[Setting::Hosts]).len(), 2);
        // Three: every combination, pairs named by their settings.
        let three = plan(&[Setting::CpuPlan, Setting::Measure, Setting::Hosts]);
        assert_eq!(three.len(), 8);
        assert!(three.iter().any(|(n, _)| n == "cpu-plan+hosts"));
        // Four: the half fraction, 8 runs, here and all four among them, no single setting.
        let four = plan(&[
            Setting::CpuPlan,
            Setting::Client,
            Setting::Measure,
            Setting::Hosts,
        ]);
        assert_eq!(four.len(), 8);
        assert!(four.iter().any(|(n, _)| n == HERE) && four.iter().any(|(n, _)| n == ALL_SEED));
        assert!(four.iter().all(|(_, s)| s.len() % 2 == 0));
    }

    #[test]
    fn rounds_alternate_their_order_so_drift_weighs_on_every_variant_alike() {
        assert_eq!(round_order(&[0, 1, 2], 1), [0, 1, 2]);
        assert_eq!(round_order(&[0, 1, 2], 2), [2, 1, 0]);
        assert_eq!(round_order(&[0, 2], 3), [0, 2]);
    }

    #[test]
    fn rounds_run_to_the_designs_looks_while_an_effect_is_unsettled() {
        let design = Design::new(3, 10);
        let unsettled = vec!["hosts".to_string(), "cell measures".to_string()];
        // After the first look (3), the next is 7: 4 more for every run; then 3 to 10.
        assert_eq!(next_round(&unsettled, 3, &design), Ok(4));
        assert_eq!(next_round(&unsettled, 7, &design), Ok(3));
        let at_max = next_round(&unsettled, 10, &design).unwrap_err();
        assert!(
            at_max.contains("maximum of 10") && at_max.contains("hosts, cell measures"),
            "{at_max}"
        );
        assert_eq!(
            next_round(&[], 3, &design),
            Err("Every effect settled.".to_string())
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
