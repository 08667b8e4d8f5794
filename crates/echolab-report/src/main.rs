//! `echolab-report RESULTS_DIR [--stdout | --readme README]`: (re)writes report.md,
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
    after_help = "Example:\n  echolab-report results/20261130T015737Z-exp31-loopback\n  echolab-report --stdout results/20261130T015737Z-exp31-loopback | less\n\nExit status: 0 written, 2 not a (valid) results directory or bad usage, 1 I/O error."
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
}

fn main() -> ExitCode {
    let args = match echolab_core::cli::parsed_or_exit("echolab-report", Args::try_parse()) {
        Ok(a) => a,
        Err(code) => return ExitCode::from(code),
    };
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
