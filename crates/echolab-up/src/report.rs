//! The report at the end of a run: echolab-report's `render` writes report.md, summary.csv
//! (replacing the launcher's per-run one) and plots into the results directory.

use std::path::Path;

/// Renders the report of `dir`; a failure is printed, not fatal (the runs are on disk and
/// `echolab-report DIR` can be run again).
pub(crate) fn render(dir: &Path) {
    if let Err(e) = echolab_report::render(dir) {
        eprintln!("echolab-up: report for {}: {e}", dir.display());
    }
}
