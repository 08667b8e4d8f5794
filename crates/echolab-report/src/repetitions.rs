//! The "Repetitions" section: for each cell, how many repetitions it has, the relative 95% CI
//! half-width of its headline metric ([`crate::metrics::headline_metric`]), and whether that
//! reached the experiment's target ([`crate::inference::repetition_status`], the rule the launcher
//! stops by), and why not.

use echolab_core::results::Manifest;

use crate::dataset::{Dataset, RepOutcome};
use crate::format::{self, Table};
use crate::inference::{repetition_status, RepetitionStatus};
use crate::metrics;

/// One cell's line of the section.
#[derive(Debug, Clone, PartialEq)]
pub struct CellRepetitions {
    /// Cell id.
    pub cell: String,
    /// Headline metric name.
    pub metric: &'static str,
    /// Usable repetitions.
    pub n: usize,
    /// Relative half-width achieved (a fraction), when an interval exists.
    pub halfwidth: Option<f64>,
    /// Whether it is within the target.
    pub reached: bool,
    /// `reached`, or why not.
    pub why: String,
}

/// Every cell's repetitions against the target.
pub fn cells(ds: &Dataset<'_>, manifest: &Manifest) -> Vec<CellRepetitions> {
    let e = &manifest.experiment;
    let (min, max, target) = (e.repetitions, e.max_repetitions(), e.target_halfwidth());
    ds.cells
        .iter()
        .map(|c| {
            let metric = metrics::headline_metric(&c.cell);
            let values = c.values(metric);
            let halfwidth = c.summary(metric).and_then(|s| s.relative_halfwidth());
            let (failed, missing) = (1..=c.reps_planned).fold((0, 0), |(f, m), rep| match c.outcome(rep) {
                RepOutcome::Ok(_) => (f, m),
                RepOutcome::Failed(_) => (f + 1, m),
                RepOutcome::Missing => (f, m + 1),
            });
            let (reached, why) = match repetition_status(&values, min, max, target) {
                RepetitionStatus::Reached { .. } => (true, "reached".to_string()),
                RepetitionStatus::GaveUp { reason, .. } if !e.is_adaptive() => (
                    false,
                    format!("not reached: {reason} (a fixed count; max_repetitions above repetitions lets a cell repeat further)"),
                ),
                RepetitionStatus::GaveUp { reason, .. } => (false, format!("not reached: {reason}")),
                RepetitionStatus::Continue if (values.len() as u64) < min => (
                    false,
                    format!(
                        "not reached: {} usable of the minimum {min} ({failed} failed, {missing} missing)",
                        values.len()
                    ),
                ),
                RepetitionStatus::Continue => (
                    false,
                    format!(
                        "not reached: the run stopped after {} of up to {max} repetitions (run status {})",
                        values.len(),
                        format!("{:?}", manifest.status).to_lowercase()
                    ),
                ),
            };
            CellRepetitions {
                cell: c.id.clone(),
                metric,
                n: values.len(),
                halfwidth,
                reached,
                why,
            }
        })
        .collect()
}

/// The section in Markdown (heading included).
pub fn section(ds: &Dataset<'_>, manifest: &Manifest) -> String {
    let e = &manifest.experiment;
    let rows = cells(ds, manifest);
    let mut t = Table::new([
        "Cell",
        "Headline metric",
        "Usable repetitions",
        "95% CI half-width",
        "Target",
    ]);
    for r in &rows {
        t.row([
            r.cell.clone(),
            r.metric.to_string(),
            r.n.to_string(),
            r.halfwidth.map_or_else(|| "—".into(), format::pct),
            r.why.clone(),
        ]);
    }
    let plan = if e.is_adaptive() {
        format!(
            "each cell repeats {}–{} times, until the 95% CI half-width of its headline metric is within {} of its value",
            e.repetitions,
            e.max_repetitions(),
            format::pct(e.target_halfwidth())
        )
    } else {
        format!(
            "a fixed {} repetitions per cell; the target half-width ({}) is checked but does not add repetitions",
            e.repetitions,
            format::pct(e.target_halfwidth())
        )
    };
    let reached = rows.iter().filter(|r| r.reached).count();
    format!(
        "## Repetitions\n\nPlan: {plan} (netperf's `-i max,min -I level,width`). {reached} of {} cells reached the target. \
         Half-width: (high − low) / 2 of the headline metric's 95% CI, relative to its centre (the interval the tables \
         print).\n\n{}\n",
        rows.len(),
        t.to_markdown()
    )
}
