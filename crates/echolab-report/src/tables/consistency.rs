//! The Little's-law check of every closed-loop cell as a table (see [`crate::littles_law`]).

use super::Section;
use crate::dataset::Dataset;
use crate::format::{self, Table};
use crate::inference::Summary;
use crate::littles_law::{self, TOLERANCE};

/// One row per closed-loop cell: measured QPS, `conns / mean latency`, their ratio over the
/// repetitions, and the repetitions that disagree by more than 10%.
pub fn section(ds: &Dataset<'_>) -> Option<Section> {
    let mut t = Table::new([
        "Cell",
        "Reps",
        "Measured QPS",
        "Connections / mean latency (req/s)",
        "Measured / expected",
        "Check",
        "Failures (all reps)",
    ]);
    let mut flagged = Vec::new();
    let mut cells = Vec::new();
    for c in &ds.cells {
        let Some(runs) = littles_law::check_cell(c) else {
            continue;
        };
        let Some(ratios) = Summary::of(&runs.iter().map(|r| r.ratio()).collect::<Vec<_>>()) else {
            continue;
        };
        cells.push(c);
        let med =
            |v: Vec<f64>| Summary::of(&v).map_or_else(|| "—".into(), |s| format::num(s.median));
        let bad: Vec<String> = runs
            .iter()
            .filter(|r| r.flagged())
            .map(|r| format!("R{} {}", r.repetition, format::signed_pct(r.ratio() - 1.0)))
            .collect();
        let check = if bad.is_empty() {
            "ok".to_string()
        } else {
            flagged.push(c.id.clone());
            format!(
                "⚠ off by more than {}: {}",
                format::pct(TOLERANCE),
                bad.join(", ")
            )
        };
        t.row([
            c.id.clone(),
            c.reps_text(),
            med(runs.iter().map(|r| r.measured_qps).collect()),
            med(runs.iter().map(|r| r.expected_qps).collect()),
            format!("{:.3} [{:.3}–{:.3}]", ratios.median, ratios.min, ratios.max),
            check,
            super::failures_by_kind(c),
        ]);
    }
    if t.is_empty() {
        return None;
    }
    let mut s = Section::new(
        "Consistency: Little's law",
        "Closed loop: each connection has one request outstanding, so QPS ≈ connections / mean latency (Little 1961). \
         Medians over repetitions; the ratio column is median [min–max] of measured/expected per repetition; failed \
         requests by kind. Load: closed loop (only closed-loop cells are checked).",
        t,
    );
    s.cells = cells.iter().map(|c| c.id.clone()).collect();
    if !flagged.is_empty() {
        s.notes.push(format!(
            "⚠ {} disagree(s) with Little's law by more than {}: the connections spent time outside the measured latency \
             (client threads not scheduled, stragglers at the end of a rounds-bounded run), so the client, not the server, \
             was likely the bottleneck there.",
            flagged.join(", "),
            format::pct(TOLERANCE)
        ));
    }
    Some(s)
}
