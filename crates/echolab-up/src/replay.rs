//! `echolab-up --replay BUNDLE|RUN_DIR`: run again exactly what a recorded run ran, from its
//! record alone, then judge whether the second run replicates the first.
//!
//! What is taken from the record (the bundle's `inputs/` or, for a results directory, its
//! manifest), never from this checkout: the experiment as run (repetitions rule included), the
//! profile as run (the link's limits in force), the lab file (bundles only), the CPU plan,
//! the backend, the cell order and its seed, and every other option of the original command
//! line. The image: the bundle's own (`docker load`, checked against the recorded id) when it
//! carries one, the original's `--image` when it named one, else built here from this
//! machine's binaries; when the binaries' hashes differ from the recorded ones the replay
//! says so and both stay recorded (each run's manifest, and the comparison's table).
//!
//! Where this machine differs from the original (CPU model and count, kernel, backend, the
//! link's backend, i.e. whether sch_netem was there) the replay runs anyway; each difference
//! is a row of "Setting: original vs replay" in the replay's `replay.md`. The replay's
//! manifest names its original (`inputs.replay_of`, `inputs.replay_of_source`). It ends with
//! the comparison of the two runs ([`echolab_report::compare`]) and, with `--gate`, the
//! regression gate ([`echolab_report::gate`]): exit [`EXIT_GATE_FAILED`] when it fails.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use echolab_core::cli::EXIT_USAGE;
use echolab_core::results::{Manifest, ResultsDir, MANIFEST_FILE};
use echolab_report::bundle;
use echolab_report::gate::EXIT_GATE_FAILED;

use crate::cli::{Args, OrderChoice};

/// The recorded run, made ready to rerun.
struct Original {
    /// Its results directory (inside the extracted bundle, or as given).
    results: PathBuf,
    manifest: Manifest,
    /// The experiment and profile files as run, and the lab file of a --lab run.
    experiment: PathBuf,
    profile: PathBuf,
    lab: Option<PathBuf>,
    /// The bundle's image archive, when it carries one.
    image: Option<PathBuf>,
    /// The SHA-256 of the bundle file (empty for a results directory).
    bundle_sha256: String,
}

fn stamp() -> String {
    crate::plan::compact_stamp(&echolab_core::utc_now_rfc3339())
}

/// Opens `source` (a bundle, verified and extracted under `out`; or a results directory,
/// whose experiment and profile are written from its manifest under `out`).
fn open(source: &Path, out: &Path) -> Result<Original, String> {
    if source.is_file() {
        let name = source
            .file_name()
            .map(|n| n.to_string_lossy().trim_end_matches(".tar.gz").to_string())
            .unwrap_or_default();
        let dir = out.join(format!(
            "original-{name}-{}-{}",
            stamp(),
            std::process::id()
        ));
        let opened = bundle::open(source, &dir).map_err(|e| e.to_string())?;
        let results = opened.results();
        let manifest = ResultsDir::load(&results)
            .map_err(|e| e.to_string())?
            .manifest;
        let lab = Some(opened.dir.join(bundle::LAB)).filter(|p| p.is_file());
        let image = Some(opened.dir.join(bundle::IMAGE)).filter(|p| p.is_file());
        let bytes = std::fs::read(source).map_err(|e| format!("{}: {e}", source.display()))?;
        return Ok(Original {
            results,
            manifest,
            experiment: opened.dir.join(bundle::EXPERIMENT),
            profile: opened.dir.join(bundle::PROFILE),
            lab,
            image,
            bundle_sha256: bundle::sha256_hex(&bytes),
        });
    }
    if !source.join(MANIFEST_FILE).is_file() {
        return Err(format!(
            "--replay {}: neither a bundle file nor a results directory (no {MANIFEST_FILE})",
            source.display()
        ));
    }
    let manifest = ResultsDir::load(source)
        .map_err(|e| e.to_string())?
        .manifest;
    if has_lab(&manifest.args) {
        return Err(format!(
            "--replay {}: a --lab run replays from its bundle (`echolab-report bundle`), which carries the lab file",
            source.display()
        ));
    }
    let inputs = out.join(format!(
        "replay-inputs-{}-{}",
        manifest.run_id,
        std::process::id()
    ));
    std::fs::create_dir_all(&inputs).map_err(|e| format!("{}: {e}", inputs.display()))?;
    let write = |name: &str, yaml: Result<String, serde_yaml::Error>| {
        let p = inputs.join(name);
        let text = yaml.map_err(|e| format!("{}: {e}", p.display()))?;
        std::fs::write(&p, text).map_err(|e| format!("{}: {e}", p.display()))?;
        Ok::<_, String>(p)
    };
    let experiment = write(
        "experiment.yaml",
        serde_yaml::to_string(&manifest.experiment),
    )?;
    let profile = write(
        "profile.yaml",
        serde_yaml::to_string(&manifest.profile.profile),
    )?;
    Ok(Original {
        results: source.to_path_buf(),
        manifest,
        experiment,
        profile,
        lab: None,
        image: None,
        bundle_sha256: String::new(),
    })
}

fn has_lab(args: &[String]) -> bool {
    args.iter().any(|a| a == "--lab" || a.starts_with("--lab="))
}

/// `docker load` of the bundle's image, checked against the recorded id; its reference.
fn load_image(archive: &Path, m: &Manifest) -> Result<String, String> {
    let out = std::process::Command::new("docker")
        .arg("load")
        .arg("-i")
        .arg(archive)
        .output()
        .map_err(|e| format!("docker load -i {}: {e}", archive.display()))?;
    if !out.status.success() {
        return Err(format!(
            "docker load -i {}: {}",
            archive.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let inspect = std::process::Command::new("docker")
        .args([
            "image",
            "inspect",
            "--format",
            "{{.Id}}",
            &m.image.reference,
        ])
        .output()
        .map_err(|e| format!("docker image inspect {}: {e}", m.image.reference))?;
    let id = String::from_utf8_lossy(&inspect.stdout).trim().to_string();
    if id != m.image.id {
        return Err(format!(
            "the bundle's image loaded as {} with id {id:?}, but the run recorded {}",
            m.image.reference, m.image.id
        ));
    }
    Ok(m.image.reference.clone())
}

/// The original's command line with its inputs replaced by the recorded ones.
fn replay_args(o: &Original, user: &Args, out: &Path) -> Result<Args, String> {
    let m = &o.manifest;
    let argv = std::iter::once("echolab-up".to_string()).chain(m.args.iter().cloned());
    let mut a = crate::cli::parse(argv).map_err(|e| {
        format!(
            "the original's command line {:?} does not parse here: {}",
            m.args.join(" "),
            e.to_string().lines().next().unwrap_or("")
        )
    })?;
    a.experiment = o.experiment.display().to_string();
    a.profile = Some(o.profile.display().to_string());
    a.lab.clone_from(&o.lab);
    a.out = Some(out.to_path_buf());
    // The experiment as run already holds the repetitions rule and the as-published choice.
    a.reps = None;
    if let Some(order) = &m.order {
        a.order = if order.kind == "listed" {
            OrderChoice::Listed
        } else {
            OrderChoice::Shuffled
        };
        a.order_seed = Some(order.seed);
        a.reuse_hosts = !order.fresh_hosts_per_cell;
    }
    // The original's bin_dir is a path on the machine it ran on; the image is made here.
    a.bin_dir.clone_from(&user.bin_dir);
    if let Some(image) = &o.image {
        a.image = Some(load_image(image, m)?);
    } else if user.image.is_some() {
        a.image.clone_from(&user.image);
    }
    a.keep = false;
    a.down = false;
    a.all = false;
    a.build_image = false;
    a.explain = false;
    a.quiet_verdicts = false;
    a.replay = None;
    a.gate.gate = None;
    Ok(a)
}

/// The rows "Setting: original vs replay": the machine's and the run's settings that differ.
const SETTINGS: [&str; 8] = [
    "CPU model",
    "logical CPUs",
    "kernel",
    "backend",
    "link backend",
    "TCP congestion control",
    "Docker",
    "CPU plan",
];

fn settings_table(c: &echolab_report::compare::RunComparison) -> String {
    let rows: Vec<_> = c
        .differences
        .iter()
        .filter(|d| SETTINGS.contains(&d.field.as_str()))
        .collect();
    if rows.is_empty() {
        return "### Setting: original vs replay\n\nThe same in every setting compared (CPU model and count, kernel, backend, link backend, congestion control, Docker, CPU plan).\n\n".into();
    }
    let mut t = echolab_report::format::Table::new(["Setting", "Original", "Replay"]);
    for d in rows {
        t.row([d.field.clone(), d.first.clone(), d.this.clone()]);
    }
    format!(
        "### Setting: original vs replay\n\nThe replay ran anyway; each row is a difference a reader must weigh.\n\n{}\n",
        t.to_markdown()
    )
}

/// Names the original in the replay's manifest, and records the binaries when they differ.
fn record_origin(dir: &Path, o: &Original, source: &Path) -> Result<Manifest, String> {
    let path = dir.join(MANIFEST_FILE);
    let mut m = ResultsDir::load(dir).map_err(|e| e.to_string())?.manifest;
    m.inputs
        .insert("replay_of".into(), o.manifest.run_id.clone());
    m.inputs
        .insert("replay_of_source".into(), source.display().to_string());
    if !o.bundle_sha256.is_empty() {
        m.inputs.insert(
            "replay_of_bundle".into(),
            format!("sha256:{}", o.bundle_sha256),
        );
    }
    if m.image.binaries != o.manifest.image.binaries {
        let text = |b: &std::collections::BTreeMap<String, String>| {
            b.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        m.inputs.insert(
            "replay_original_binaries".into(),
            text(&o.manifest.image.binaries),
        );
        eprintln!(
            "echolab-up: replay: the image's binaries differ from the original's (original: {}; here: {})",
            text(&o.manifest.image.binaries),
            text(&m.image.binaries)
        );
    }
    let yaml = serde_yaml::to_string(&m).map_err(|e| format!("{}: {e}", path.display()))?;
    echolab_core::results::write_atomic(&path, yaml.as_bytes())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(m)
}

/// `echolab-up --replay`: the whole call; returns the exit status (0 replicated or not
/// gated, 2 a refused bundle or bad input, 3 the gate failed, else the run's own).
pub async fn run(user: Args, argv: Vec<String>) -> ExitCode {
    let Some(source) = user.replay.clone() else {
        return ExitCode::from(EXIT_USAGE);
    };
    let out = user
        .out
        .clone()
        .unwrap_or_else(|| crate::catalog::find_root().join("results"));
    let original = match open(&source, &out) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("echolab-up: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let args = match replay_args(&original, &user, &out) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("echolab-up: --replay {}: {e}", source.display());
            return ExitCode::from(EXIT_USAGE);
        }
    };
    eprintln!(
        "echolab-up: replaying {} ({}, profile {}, order seed {}) from {}",
        original.manifest.run_id,
        original.manifest.experiment.name,
        original.manifest.profile.profile.name,
        original
            .manifest
            .order
            .as_ref()
            .map_or("none".into(), |o| o.seed.to_string()),
        source.display()
    );
    let mut made = None;
    let code = crate::app::run_once(args, argv, &mut made).await;
    let Some(dir) = made else { return code };
    if let Err(e) = record_origin(&dir, &original, &source) {
        eprintln!("echolab-up: replay: {e}");
        return ExitCode::FAILURE;
    }
    match judge(&user, &original, &dir) {
        Ok(true) => code,
        Ok(false) => ExitCode::from(EXIT_GATE_FAILED),
        Err(e) => {
            eprintln!("echolab-up: replay: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The replay's verdict on the replication: compares the original with the replay in `dir`
/// (and gates it when asked), writes `replay.md` and prints the summary. `Ok(false)` when the
/// gate failed.
fn judge(user: &Args, original: &Original, dir: &Path) -> Result<bool, String> {
    let gate = user.gate.asked();
    let dirs = [original.results.clone(), dir.to_path_buf()];
    let c = echolab_report::compare::compare_gated(
        &dirs,
        echolab_report::compare::DEFAULT_MARGIN,
        gate,
    )
    .map_err(|e| e.to_string())?;
    let r = c.runs.first().ok_or("the comparison has no run")?;
    let md = format!(
        "# Replay of {}\n\n{}{}",
        original.manifest.run_id,
        settings_table(r),
        echolab_report::compare::markdown(&c)
    );
    let page = dir.join("replay.md");
    echolab_core::results::write_atomic(&page, md.as_bytes())
        .map_err(|e| format!("{}: {e}", page.display()))?;
    let count = |w: &str| r.metrics.iter().filter(|m| m.verdict == w).count();
    let claims_same = r.claims.iter().filter(|c| c.same).count();
    eprintln!(
        "echolab-up: replay of {}: {} cell metrics same, {} inconclusive, {} different (±5%); claims' verdicts the same {claims_same} of {}; {}",
        original.manifest.run_id,
        count("same"),
        count("inconclusive"),
        count("different"),
        r.claims.len(),
        page.display()
    );
    for c in r.claims.iter().filter(|c| !c.same) {
        eprintln!(
            "  claim {}: {} in the original, {} in the replay",
            c.claim, c.first, c.this
        );
    }
    match &r.gate {
        Some(g) => {
            eprint!("{}", g.text());
            Ok(g.passed())
        }
        None => Ok(true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use echolab_core::experiment::Experiment;
    use echolab_testkit::fixtures::TempDir;

    /// A finished run in `dir`, made with `args`, its cells in a shuffle seeded 42.
    fn recorded(dir: &Path, args: &[&str]) -> Manifest {
        let exp = Experiment::parse(
            "name: t\nquestion: q\nrepetitions: 2\nmatrix:\n  - servers: [epoll-et]\n    modes: [long]\n    conns: [2]\n    rounds: [3]\n",
            "t.yaml",
        )
        .unwrap();
        let mut m = Manifest::running(
            "run-1",
            args.iter().map(|a| a.to_string()).collect(),
            "docker",
            exp,
            echolab_testkit::fixtures::recorded_loopback_profile(),
            Default::default(),
            2,
        );
        m.status = echolab_core::results::RunStatus::Complete;
        m.order = Some(echolab_core::results::OrderRecord {
            kind: "shuffled".into(),
            seed: 42,
            fresh_hosts_per_cell: false,
        });
        std::fs::create_dir_all(dir.join("runs")).unwrap();
        let yaml = serde_yaml::to_string(&m).unwrap();
        std::fs::write(dir.join(MANIFEST_FILE), yaml).unwrap();
        m
    }

    fn user(argv: &[&str]) -> Args {
        crate::cli::parse(
            std::iter::once("echolab-up")
                .chain(argv.iter().copied())
                .map(String::from),
        )
        .unwrap()
    }

    #[test]
    fn a_replay_takes_every_input_from_the_record_and_none_from_the_checkout() {
        let tmp = TempDir::new("echolab-up-replay");
        let run = tmp.path().join("run");
        let m = recorded(
            &run,
            &[
                "--experiment",
                "/nowhere/t.yaml",
                "--reps",
                "2",
                "--cpu-plan",
                "shared",
                "--reuse-hosts",
                "--bin-dir",
                "/elsewhere",
            ],
        );
        let out = tmp.path().join("out");
        let o = open(&run, &out).unwrap();
        // The experiment and profile written from the manifest load back as the ones run.
        assert_eq!(Experiment::load(&o.experiment).unwrap(), m.experiment);
        assert_eq!(
            echolab_core::profile::Profile::load(&o.profile).unwrap(),
            m.profile.profile
        );
        assert!(o.experiment.starts_with(&out) && o.profile.starts_with(&out));
        let u = user(&["--replay", &run.display().to_string(), "--gate", "slower"]);
        let a = replay_args(&o, &u, &out).unwrap();
        assert_eq!(a.experiment, o.experiment.display().to_string());
        assert_eq!(
            a.profile.as_deref(),
            Some(o.profile.display().to_string().as_str())
        );
        assert_eq!((a.order, a.order_seed), (OrderChoice::Shuffled, Some(42)));
        assert!(a.reuse_hosts, "the original reused hosts");
        assert_eq!(a.cpu_plan, crate::cpuplan::CpuPlanChoice::Shared);
        assert_eq!(a.reps, None, "the experiment as run holds the repetitions");
        assert_eq!(
            a.bin_dir, None,
            "the original machine's binaries are not looked for here"
        );
        assert_eq!(a.out.as_deref(), Some(out.as_path()));
        assert!(a.replay.is_none() && a.gate.gate.is_none());
    }

    #[test]
    fn a_lab_run_needs_its_bundle_and_a_non_run_is_named() {
        let tmp = TempDir::new("echolab-up-replay-lab");
        let run = tmp.path().join("run");
        recorded(&run, &["--lab", "/somewhere/lab.yaml"]);
        let e = open(&run, &tmp.path().join("out")).err().unwrap();
        assert!(e.contains("replays from its bundle"), "{e}");
        let e = open(tmp.path(), &tmp.path().join("out")).err().unwrap();
        assert!(
            e.contains("neither a bundle file nor a results directory"),
            "{e}"
        );
    }
}
