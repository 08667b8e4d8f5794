//! The report at the end of a run: echolab-report's `render` writes report.md, summary.csv
//! (replacing the launcher's per-run one) and plots into the results directory, and the
//! verdict table is printed.

use std::path::Path;

/// Renders the report of `dir` and, with `print_verdicts`, prints its verdict table; a
/// failure is printed, not fatal (the runs are on disk and `echolab-report DIR` can be run
/// again).
pub(crate) fn render(dir: &Path, print_verdicts: bool) {
    match echolab_report::render(dir) {
        Ok(s) if print_verdicts && !s.verdicts.is_empty() => {
            eprintln!("echolab-up: verdicts (report.md opens with them):");
            eprint!("{}", echolab_report::verdicts::text(&s.verdicts));
        }
        Ok(_) => {}
        Err(e) => eprintln!("echolab-up: report for {}: {e}", dir.display()),
    }
}
