//! The verdicts first: one table that opens the report (and that `echolab-up` and
//! `echolab-report DIR` print when they end): each claim of the seed, the seed's figure,
//! ours with its 95% interval, the verdict, and one line of why: where our interval lies
//! against the band, what bounds the claim's cells, and what the claim's mechanism predicts
//! from this run's costs. The settings in which this run differs from the seed's follow once,
//! as a table ([`crate::setting::table`]).

use echolab_core::results::Manifest;

use crate::bounds;
use crate::claims::{ClaimCheck, Verdict};
use crate::dataset::Dataset;
use crate::format::Table;
use crate::mechanisms::MechanismCheck;

/// One row of the verdict table.
#[derive(Debug, Clone, PartialEq)]
pub struct VerdictRow {
    /// The claim's name.
    pub claim: String,
    /// The seed's figure (`2.15×`), or `—`.
    pub seed: String,
    /// Ours with its interval, or `—`.
    pub here: String,
    /// The verdict.
    pub verdict: Verdict,
    /// One line: why.
    pub why: String,
}

/// The bounds of a claim's two cells, `epoll-et_long…: client-bound; …`, when some cell is
/// not bound by the server (a claim about servers then says so).
fn cells_note(ds: &Dataset<'_>, manifest: &Manifest, check: &ClaimCheck) -> Option<String> {
    let mut labels = Vec::new();
    let mut off_server = false;
    for sel in [&check.claim.numerator, &check.claim.denominator] {
        for cell in ds.select(sel) {
            if let Some(b) = bounds::of_cell(cell, manifest) {
                off_server |= !b.bound.involves_server();
                labels.push(format!("{} {}", cell.cell.mode.name(), b.bound.word()));
            }
        }
    }
    (off_server && !labels.is_empty()).then(|| format!("cells {}", labels.join(", ")))
}

/// The rows, one per claim, in the experiment's order.
pub fn rows(
    ds: &Dataset<'_>,
    manifest: &Manifest,
    checks: &[ClaimCheck],
    mechanisms: &[MechanismCheck],
) -> Vec<VerdictRow> {
    checks
        .iter()
        .map(|c| {
            let mut why = vec![c.why.clone()];
            if let Some(edge) = crate::claims::edge_distance(c) {
                why.push(edge);
            }
            if let Some(note) = cells_note(ds, manifest, c) {
                why.push(note);
            }
            for m in mechanisms
                .iter()
                .filter(|m| m.mechanism.explains.contains(&c.claim.name))
            {
                why.push(format!("{}: {}", m.mechanism.name, m.short()));
            }
            VerdictRow {
                claim: c.claim.name.clone(),
                seed: c.seed(),
                here: c.here(),
                verdict: c.verdict,
                why: why.join("; "),
            }
        })
        .collect()
}

/// The Markdown section that opens the report; empty when the experiment states no claim.
pub fn section(rows: &[VerdictRow], manifest: &Manifest) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let mut t = Table::new(["Claim", "Seed", "Here (95% CI)", "Verdict", "Why"]);
    for r in rows {
        t.row([
            r.claim.clone(),
            r.seed.clone(),
            r.here.clone(),
            format!("**{}**", r.verdict.word()),
            r.why.clone(),
        ]);
    }
    format!(
        "## Verdicts\n\n{}\n{}\nThe rule behind each verdict is under the report; what bounds each cell and what the seed's \
         mechanisms predict from this run's own costs follow the tables.\n\n",
        t.to_markdown(),
        crate::setting::table(manifest)
    )
}

/// The same table for a terminal: one block per claim, the verdict first.
pub fn text(rows: &[VerdictRow]) -> String {
    let mut out = String::new();
    for r in rows {
        out.push_str(&format!(
            "  {}: {} (seed {}, here {})\n      why: {}\n",
            r.verdict.word(),
            r.claim,
            r.seed,
            r.here,
            r.why.replace("**", "")
        ));
    }
    out
}
