//! The seed-style tables, each chosen by what the experiment contains:
//!
//! - [`closed_loop`]: (a) the four-quadrant QPS matrix, server × mode, with the long/short
//!   gain and the gap between servers (seeds 000 §5–6, 001 §3.1), with the P50/P90/P99
//!   ratios beside it (000 §5, 001 §3.3); (b) QPS per repetition with
//!   the range (001 §3.2); (c) P50/P90/P99 per cell (000 §5, 001 §3.3); (d) the connection
//!   scan with the long/short ratio and P50/P99 of long (003 §3);
//! - [`syscalls`]: (e) client syscall counts and total time, short vs long, with the change in
//!   % (002 §3);
//! - [`storm`]: (f) connect-storm time and sustain CPU%/memory per connection count, per
//!   server (004 §2);
//! - [`consistency`]: the Little's-law check of every closed-loop cell.
//!
//! Ratios between cells are ratios of means with Fieller's 95% interval, as the seeds divide
//! means; single-cell figures are medians with the range and the 95% interval of the mean.

pub mod closed_loop;
pub mod consistency;
pub mod storm;
pub mod syscalls;

use crate::dataset::{CellData, Dataset};
use crate::format::{self, Table};
use crate::stats::{ratio_of_means, Summary};

/// One table of the report with what it covers, so the seed's figures and claims about the
/// same metrics and cells can be put beside it.
#[derive(Debug, Clone)]
pub struct Section {
    /// Heading.
    pub title: String,
    /// One line: what the table shows and which seed table it mirrors.
    pub intro: String,
    /// The table.
    pub table: Table,
    /// Lines under the table (flags, notes).
    pub notes: Vec<String>,
    /// Metrics it shows (names of [`crate::metrics`]).
    pub metrics: Vec<String>,
    /// Ids of the cells it shows.
    pub cells: Vec<String>,
}

impl Section {
    fn new(title: impl Into<String>, intro: impl Into<String>, table: Table) -> Self {
        Self {
            title: title.into(),
            intro: intro.into(),
            table,
            notes: Vec::new(),
            metrics: Vec::new(),
            cells: Vec::new(),
        }
    }

    fn covers(mut self, metrics: &[&str], cells: &[&CellData<'_>]) -> Self {
        self.metrics.extend(metrics.iter().map(|m| m.to_string()));
        self.cells.extend(cells.iter().map(|c| c.id.clone()));
        self
    }
}

/// Every table the data supports, in report order.
pub fn all(ds: &Dataset<'_>, syscall_table_wanted: bool) -> Vec<Section> {
    let mut out = Vec::new();
    out.extend(closed_loop::quadrants(ds));
    out.extend(closed_loop::latency_ratios(ds));
    out.extend(closed_loop::per_repetition(ds));
    out.extend(closed_loop::percentiles(ds));
    out.extend(closed_loop::scans(ds));
    if syscall_table_wanted {
        out.extend(syscalls::sections(ds));
    }
    out.extend(storm::connect_storm(ds));
    out.extend(storm::sustain(ds));
    out.extend(consistency::section(ds));
    out
}

/// A cell's figure of `metric`, or why there is none.
fn figure(cell: &CellData<'_>, metric: &str) -> String {
    format::figure_or(cell.summary(metric), || {
        cell.absence().unwrap_or_else(|| "—".into())
    })
}

/// `numerator / denominator` of `metric` as a ratio of means with its interval, or why not.
fn ratio_text(numerator: &CellData<'_>, denominator: &CellData<'_>, metric: &str) -> String {
    match (numerator.summary(metric), denominator.summary(metric)) {
        (Some(n), Some(d)) => ratio_of_means(&n, &d)
            .map(|r| format::ratio(&r))
            .unwrap_or_else(|| "— (zero denominator)".into()),
        (None, _) => format!(
            "— ({})",
            numerator.absence().unwrap_or_else(|| "no data".into())
        ),
        (_, None) => format!(
            "— ({})",
            denominator.absence().unwrap_or_else(|| "no data".into())
        ),
    }
}

/// `(after − before) / before` of `metric` in % with its interval, e.g.
/// `-89.6% (95% CI -90.1% – -89.0%)`, or why not.
fn change_text(after: &CellData<'_>, before: &CellData<'_>, metric: &str) -> String {
    change_of(
        after.summary(metric).as_ref(),
        before.summary(metric).as_ref(),
    )
}

/// `(after − before) / before` in % from two summaries (ratio of means − 1, Fieller's 95% CI).
fn change_of(after: Option<&Summary>, before: Option<&Summary>) -> String {
    let (Some(a), Some(b)) = (after, before) else {
        return "—".into();
    };
    match ratio_of_means(a, b) {
        Some(r) => {
            let ci = r
                .ci95
                .map(|ci| {
                    format!(
                        " (95% CI {} – {})",
                        format::signed_pct(ci.low - 1.0),
                        format::signed_pct(ci.high - 1.0)
                    )
                })
                .unwrap_or_default();
            format!("{}{ci}", format::signed_pct(r.value - 1.0))
        }
        None => "— (zero before)".into(),
    }
}
