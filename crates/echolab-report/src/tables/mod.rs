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
//! Ratios between cells come with their 95% interval ([`crate::inference::ratio`]); single-cell
//! figures are medians with the range and the 95% interval of [`crate::stats`]. Every table
//! that shows QPS shows failed requests by kind, and its caption states the load model.

pub mod closed_loop;
pub mod consistency;
pub mod storm;
pub mod syscalls;

use crate::dataset::{CellData, Dataset};
use crate::format::{self, Table};
use crate::inference::{ratio, Method, Summary};

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

/// Failed requests of a cell's usable repetitions by kind, summed: `0`, or
/// `timeout 3, reset 1` (echo-bench's kinds: timeout, refused, reset, mismatch, foreign_echo,
/// addr_not_avail, eof); a count without kinds (an older BenchReport) is `3 (kind not
/// recorded)`.
pub fn failures_by_kind(cell: &CellData<'_>) -> String {
    let mut kinds: std::collections::BTreeMap<&str, u64> = Default::default();
    let mut total = 0;
    for b in cell.ok_runs().filter_map(|r| r.bench.as_ref()) {
        total += b.requests_failed;
        for (k, n) in &b.failures {
            *kinds.entry(k.as_str()).or_default() += n;
        }
    }
    let listed: u64 = kinds.values().sum();
    let mut parts: Vec<String> = kinds
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    if total > listed {
        parts.push(format!("{} (kind not recorded)", total - listed));
    }
    if parts.is_empty() {
        "0".into()
    } else {
        parts.join(", ")
    }
}

/// The load model of `cells`, for a caption: closed loop (each connection sends its next
/// request when the reply arrives), open loop at the target rate(s) of
/// `BenchReport.target_rate`, or both when the cells differ.
pub fn load_model(cells: &[&CellData<'_>]) -> String {
    let mut rates: Vec<f64> = Vec::new();
    let mut closed = false;
    for c in cells {
        for b in c.ok_runs().filter_map(|r| r.bench.as_ref()) {
            match b.target_rate {
                Some(r) if !rates.contains(&r) => rates.push(r),
                Some(_) => {}
                None => closed = true,
            }
        }
    }
    rates.sort_by(f64::total_cmp);
    let open = (!rates.is_empty()).then(|| {
        format!(
            "open loop at {} req/s (requests sent on schedule, latency from the intended send time)",
            rates.iter().map(|r| format::num(*r)).collect::<Vec<_>>().join(", ")
        )
    });
    let closed_text =
        "closed loop (each connection sends its next request when the previous reply arrives)";
    match (closed, open) {
        (true, Some(o)) => format!("Load: {closed_text} in some runs, {o} in others."),
        (false, Some(o)) => format!("Load: {o}."),
        _ => format!("Load: {closed_text}."),
    }
}

/// A cell's figure of `metric`, or why there is none.
fn figure(cell: &CellData<'_>, metric: &str) -> String {
    format::figure_or(cell.summary(metric), || {
        cell.absence().unwrap_or_else(|| "—".into())
    })
}

/// `numerator / denominator` of `metric` with its interval (see [`crate::inference::ratio`]),
/// or why there is none.
fn ratio_text(numerator: &CellData<'_>, denominator: &CellData<'_>, metric: &str) -> String {
    match (numerator.summary(metric), denominator.summary(metric)) {
        (Some(n), Some(d)) => match ratio(&n, &d) {
            Ok(r) => format::ratio(&r),
            Err(why) => format!("— ({why})"),
        },
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

/// `(after − before) / before` in % from two summaries: the ratio − 1, with the ratio's 95%
/// interval ([`crate::inference::ratio`]) shifted the same way, so a change never goes below −100%.
fn change_of(after: Option<&Summary>, before: Option<&Summary>) -> String {
    let (Some(a), Some(b)) = (after, before) else {
        return "—".into();
    };
    match ratio(a, b) {
        Ok(r) => {
            let ci = match (r.ci95, r.method) {
                (Some(_), Method::Exact) => " (exact)".to_string(),
                (Some(ci), _) => format!(
                    " (95% CI {} – {})",
                    format::signed_pct(ci.low - 1.0),
                    format::signed_pct(ci.high - 1.0)
                ),
                (None, _) => format!(" (no CI: {})", r.no_ci.unwrap_or_default()),
            };
            format!("{}{ci}", format::signed_pct(r.value - 1.0))
        }
        Err(why) => format!("— ({why})"),
    }
}
