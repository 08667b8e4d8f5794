//! `echolab-report RESULTS_DIR [--stdout | --readme README | --walkthrough CLAIM]`: (re)writes report.md,
//! report.html, summary.csv and plots/*.svg of a results directory made by `echolab-up`, or splices its
//! excerpt into the README.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// Turn an echolab results directory into report.md, report.html, summary.csv and plots/*.svg.
#[derive(Debug, Parser)]
#[command(
    name = "echolab-report",
    version,
    after_help = "Example:\n  echolab-report results/20261130T015737Z-exp31-loopback\n  echolab-report --stdout results/20261130T015737Z-exp31-loopback | less\n  echolab-report compare RUN_A RUN_B    (runs of one experiment side by side; see `echolab-report compare --help`)\n  echolab-report bundle RUN --out F.tar.gz    (a run's replication bundle; see `echolab-report bundle --help`)\n\nExit status: 0 written, 2 not a (valid) results directory or bad usage, 1 I/O error."
)]
struct Args {
    /// A results directory (with manifest.yaml and runs/), as written by echolab-up.
    results_dir: PathBuf,
    /// Print report.md to standard output instead of writing files; nothing in RESULTS_DIR is
    /// touched.
    #[arg(long, conflicts_with = "readme")]
    stdout: bool,
    /// Splice this report's excerpt into README (between its results-excerpt marker comments)
    /// instead of writing files in RESULTS_DIR; what scripts/readme-results runs.
    #[arg(long, value_name = "README")]
    readme: Option<PathBuf>,
    /// Print one claim walked through, figure → what bounds its cells → the seed's mechanism
    /// → the attribution of `echolab-up --explain`, as Markdown on standard output; nothing is
    /// written (what scripts/reading-a-verdict runs).
    #[arg(long, value_name = "CLAIM", conflicts_with_all = ["readme", "stdout"])]
    walkthrough: Option<String>,
}

/// `echolab-report compare`: the output format.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Format {
    /// Markdown tables.
    Md,
    /// One HTML page.
    Html,
    /// JSON, for scripts.
    Json,
}

/// Compare runs of one experiment: for every cell they share, each headline metric's ratio to
/// the first run with its 95% CI and an equivalence verdict (same / different / inconclusive
/// within --margin), beside the differences between their manifests.
#[derive(Debug, Parser)]
#[command(
    name = "echolab-report compare",
    bin_name = "echolab-report compare",
    after_help = "Example:\n  echolab-report compare results/20261205T120147Z-exp31-loopback results/20261205T130000Z-exp31-loopback\n\nExit status: 0 compared (and the gate passed), 2 bad usage, not results directories, or different experiments, 1 I/O error, 3 --gate failed (the cells on standard error)."
)]
struct CompareArgs {
    /// Two or more results directories of one experiment; each is compared with the first.
    #[arg(required = true, num_args = 2..)]
    dirs: Vec<PathBuf>,
    /// The equivalence margin: a ratio within a factor 1 + margin of 1, either way, counts as the same (above 0%,
    /// below 100%).
    #[arg(long, default_value = "5%", value_parser = parse_margin)]
    margin: f64,
    /// Output format, on standard output.
    #[arg(long, value_enum, default_value = "md")]
    format: Format,
    /// The regression gate.
    #[command(flatten)]
    gate: echolab_report::gate::GateArgs,
}

/// Write a run's replication bundle: one .tar.gz with the results directory, the experiment
/// and profile as run (and the lab file of a --lab run), Cargo.lock, flake.lock,
/// rust-toolchain.toml and the git revision, optionally the lab image, and a SHA-256 list
/// (SHA256SUMS, its first member). `echolab-up --replay BUNDLE` verifies and reruns it.
#[derive(Debug, Parser)]
#[command(
    name = "echolab-report bundle",
    bin_name = "echolab-report bundle",
    after_help = "Example:\n  echolab-report bundle results/20261205T120147Z-exp31-loopback --out exp31.tar.gz\n  echolab-up --replay exp31.tar.gz --gate slower\n\nExit status: 0 written, 2 bad usage or not a finished results directory, 1 I/O error (a file, docker save)."
)]
struct BundleArgs {
    /// The results directory of one finished run.
    run_dir: PathBuf,
    /// The archive to write (default: <RUN_DIR>.tar.gz beside it).
    #[arg(long, value_name = "FILE.tar.gz")]
    out: Option<PathBuf>,
    /// Also put the lab image in (`docker save` of the manifest's image id; hundreds of MB).
    #[arg(long)]
    with_image: bool,
    /// The checkout whose Cargo.lock, flake.lock and rust-toolchain.toml go in (read with
    /// `git show` at the run's revision when it is clean) [default: the nearest ancestor of
    /// the current directory with a Cargo.lock and a flake.lock].
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
}

fn bundle(argv: impl Iterator<Item = String>) -> ExitCode {
    let args = match echolab_core::cli::parsed_or_exit(
        "echolab-report bundle",
        BundleArgs::try_parse_from(argv),
    ) {
        Ok(a) => a,
        Err(code) => return ExitCode::from(code),
    };
    let root = args.root.clone().or_else(|| {
        let cwd = std::env::current_dir().ok()?;
        cwd.ancestors()
            .find(|d| d.join("Cargo.lock").is_file() && d.join("flake.lock").is_file())
            .map(std::path::Path::to_path_buf)
    });
    let Some(root) = root else {
        eprintln!("echolab-report bundle: no checkout with Cargo.lock and flake.lock above the current directory; give --root");
        return ExitCode::from(echolab_core::cli::EXIT_USAGE);
    };
    let out = args.out.clone().unwrap_or_else(|| {
        let mut name = args.run_dir.clone().into_os_string();
        name.push(".tar.gz");
        PathBuf::from(name)
    });
    let opts = echolab_report::bundle::BundleOptions {
        root,
        with_image: args.with_image,
    };
    match echolab_report::bundle::write(&args.run_dir, &out, &opts) {
        Ok(info) => {
            eprintln!(
                "echolab-report bundle: wrote {} (run {}, {}{})",
                out.display(),
                info.run_id,
                info.experiment,
                if info.image {
                    ", with the lab image"
                } else {
                    ""
                }
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("echolab-report bundle: {e}");
            ExitCode::from(e.exit_code() as u8)
        }
    }
}

/// `--margin`: above 0% (a margin of nothing calls every pair different) and below 100% (a
/// ratio's band 1 ± margin must stay above 0).
fn parse_margin(s: &str) -> Result<f64, String> {
    let p = echolab_core::units::parse_percent(s).map_err(|e| e.to_string())?;
    if !(p > 0.0 && p < 100.0) {
        return Err(format!(
            "invalid percentage {s:?}: must be above 0% and below 100%"
        ));
    }
    Ok(p / 100.0)
}

fn compare(argv: impl Iterator<Item = String>) -> ExitCode {
    let args = match echolab_core::cli::parsed_or_exit(
        "echolab-report compare",
        CompareArgs::try_parse_from(argv),
    ) {
        Ok(a) => a,
        Err(code) => return ExitCode::from(code),
    };
    let gate = args.gate.asked();
    match echolab_report::compare::compare_gated(&args.dirs, args.margin, gate) {
        Ok(c) => {
            print!(
                "{}",
                match args.format {
                    Format::Md => echolab_report::compare::markdown(&c),
                    Format::Html => echolab_report::compare::html(&c),
                    Format::Json => echolab_report::compare::json(&c),
                }
            );
            let mut failed = false;
            for g in c.runs.iter().filter_map(|r| r.gate.as_ref()) {
                eprint!("{}", g.text());
                failed |= !g.passed();
            }
            if failed {
                ExitCode::from(echolab_report::gate::EXIT_GATE_FAILED)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            eprintln!("echolab-report compare: {e}");
            ExitCode::from(e.exit_code() as u8)
        }
    }
}

fn main() -> ExitCode {
    let mut argv = std::env::args();
    if std::env::args().nth(1).as_deref() == Some("compare") {
        let program = argv.next().unwrap_or_default();
        return compare(std::iter::once(program).chain(argv.skip(1)));
    }
    if std::env::args().nth(1).as_deref() == Some("bundle") {
        let program = argv.next().unwrap_or_default();
        return bundle(std::iter::once(program).chain(argv.skip(1)));
    }
    let args = match echolab_core::cli::parsed_or_exit("echolab-report", Args::try_parse()) {
        Ok(a) => a,
        Err(code) => return ExitCode::from(code),
    };
    if let Some(claim) = &args.walkthrough {
        return match echolab_report::walkthrough::render(&args.results_dir, claim) {
            Ok(md) => {
                print!("{md}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("echolab-report: {e}");
                ExitCode::from(e.exit_code() as u8)
            }
        };
    }
    if let Some(readme) = &args.readme {
        return match echolab_report::update_readme(&args.results_dir, readme) {
            Ok(()) => {
                eprintln!(
                    "echolab-report: spliced the excerpt of {} into {}",
                    args.results_dir.display(),
                    readme.display()
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("echolab-report: {e}");
                ExitCode::from(e.exit_code() as u8)
            }
        };
    }
    let result = if args.stdout {
        echolab_report::build(&args.results_dir).map(|r| {
            print!("{}", r.markdown);
            r.summary
        })
    } else {
        echolab_report::render(&args.results_dir)
    };
    match result {
        Ok(s) => {
            if !args.stdout {
                let c = s.counts;
                eprintln!(
                    "echolab-report: wrote {} files in {} ({}; {} of {} runs usable, {} failed, {} missing)",
                    s.written.len(),
                    s.dir.display(),
                    if s.complete { "complete" } else { "partial" },
                    c.ok,
                    c.planned,
                    c.failed,
                    c.missing
                );
                eprint!("{}", echolab_report::verdicts::text(&s.verdicts));
                if !s.littles_law_flagged.is_empty() {
                    eprintln!("  Little's law flags: {}", s.littles_law_flagged.join(", "));
                }
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("echolab-report: {e}");
            ExitCode::from(e.exit_code() as u8)
        }
    }
}
