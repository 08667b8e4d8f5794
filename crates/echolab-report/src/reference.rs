//! The seed's published figures and claims (the experiment's `reference:`), each put beside
//! the most specific table (fewest cells) that shows its metric for its cell, with ours as a
//! ratio to the seed's, and a line saying where the comparison stands ([`crate::setting`]):
//! on another topology the seed's figures are context, not like for like.

use echolab_core::experiment::{CellSelector, ReferenceFigure};
use echolab_core::results::Manifest;

use crate::claims::{self, ClaimCheck};
use crate::dataset::Dataset;
use crate::format::{self, Table};
use crate::metrics;
use crate::setting;
use crate::tables::Section;

/// One published figure: a metric of the cells a selector names.
#[derive(Debug, Clone)]
struct FigureItem<'r> {
    figure: &'r ReferenceFigure,
    metric: &'r str,
    seed: f64,
}

/// The result of placing a reference: Markdown beside each section (same order), Markdown
/// for what no section shows, and every claim checked.
#[derive(Debug, Default)]
pub struct Placed {
    /// Markdown to append under `sections[i]`.
    pub beside: Vec<String>,
    /// Figures and claims no table shows.
    pub unplaced: String,
    /// All claims, checked, in the experiment's order.
    pub checks: Vec<ClaimCheck>,
}

/// Whether `section` shows `metric` for a cell `selector` matches.
fn shows(ds: &Dataset<'_>, section: &Section, metric: &str, selector: &CellSelector) -> bool {
    section.metrics.iter().any(|m| m == metric)
        && ds
            .cells
            .iter()
            .any(|c| selector.matches(&c.cell) && section.cells.contains(&c.id))
}

/// Markdown for figures and claims: where the comparison stands, a table of figures (one row
/// per matching cell), then one line per claim.
fn render(
    ds: &Dataset<'_>,
    manifest: &Manifest,
    figures: &[FigureItem<'_>],
    checks: &[&ClaimCheck],
) -> String {
    let mut out = String::new();
    if !figures.is_empty() {
        let metrics: Vec<&str> = figures.iter().map(|f| f.metric).collect();
        let cmp = setting::compare(
            manifest,
            manifest.experiment.reference.setup.as_ref(),
            &metrics,
        );
        let context = cmp.as_ref().is_some_and(|c| !c.same_topology);
        match &cmp {
            Some(c) if context => out.push_str(&format!(
                "⚠ Context, not like for like: this run {}. Here/seed shows how far apart the two settings are, not \
                 whether the seed's figures hold.\n\n",
                c.sentence()
            )),
            Some(c) if c.differences.is_empty() => out.push_str(&format!("Setting: this run {}.\n\n", c.sentence())),
            Some(c) => out.push_str(&format!(
                "Setting: this run differs from the seed in {} setting(s), listed once under the verdicts (\"Setting: seed vs here\").\n\n",
                c.differences.len()
            )),
            None => out.push_str(&format!(
                "Setting: the experiment does not state the seed's setup in fields; the seed says: {}.\n\n",
                if manifest.experiment.reference.environment.is_empty() {
                    "nothing"
                } else {
                    manifest.experiment.reference.environment.as_str()
                }
            )),
        }
        let mut t = Table::new([
            "Seed figure",
            "Cell",
            "Seed",
            "Here (geometric mean; 95% CI)",
            if context {
                "Here/seed (context only)"
            } else {
                "Here/seed"
            },
        ]);
        for f in figures {
            let unit = metrics::unit(f.metric);
            let label = if unit.is_empty() {
                f.metric.to_string()
            } else {
                format!("{} ({unit})", f.metric)
            };
            let matching = ds.select(&f.figure.cell);
            if matching.is_empty() {
                t.row([
                    label.clone(),
                    "no cell matches".into(),
                    format::num(f.seed),
                    "—".into(),
                    "—".into(),
                ]);
            }
            for c in matching {
                let (here, ratio) = match c.summary(f.metric) {
                    Some(s) => {
                        let ci = match s.ci95 {
                            _ if s.n < 2 => " (1 rep, no CI)".to_string(),
                            Some(_) if s.is_exact() => " (exact)".to_string(),
                            Some(ci) => format!(" ({})", format::interval(ci)),
                            None => String::new(),
                        };
                        // The interval's own centre, so the figure always lies inside it.
                        let ratio = if f.seed != 0.0 {
                            format::times(s.centre / f.seed)
                        } else {
                            "—".into()
                        };
                        (format!("{}{ci}", format::num(s.centre)), ratio)
                    }
                    None if !metrics::is_known(f.metric) => ("unknown metric".into(), "—".into()),
                    None => (
                        c.absence()
                            .unwrap_or_else(|| format!("no {} values", f.metric)),
                        "—".into(),
                    ),
                };
                t.row([
                    label.clone(),
                    c.id.clone(),
                    format::num(f.seed),
                    here,
                    ratio,
                ]);
            }
        }
        out.push_str(&t.to_markdown());
        out.push_str(
            "\nHere: the centre of our 95% interval, the geometric mean over repetitions (the arithmetic mean where \
             a value is 0, the value itself where all agree); the seed published arithmetic means, which are never \
             below the geometric mean of the same values.\n",
        );
        out.push('\n');
    }
    for c in checks {
        out.push_str(&format!("- {}\n", c.line()));
    }
    out
}

/// Places the manifest's experiment's `reference` beside `sections`.
pub fn place(ds: &Dataset<'_>, manifest: &Manifest, sections: &[Section]) -> Placed {
    let reference = &manifest.experiment.reference;
    let items: Vec<FigureItem<'_>> = reference
        .figures
        .iter()
        .flat_map(|figure| {
            figure.values.iter().map(move |(metric, &seed)| FigureItem {
                figure,
                metric,
                seed,
            })
        })
        .collect();
    let checks: Vec<ClaimCheck> = reference
        .claims
        .iter()
        .map(|c| claims::check(ds, manifest, c))
        .collect();
    // The most specific table that shows it: fewest cells, the first of equals.
    let home = |metric: &str, selector: &CellSelector| {
        sections
            .iter()
            .enumerate()
            .filter(|(_, s)| shows(ds, s, metric, selector))
            .min_by_key(|(_, s)| s.cells.len())
            .map(|(i, _)| i)
    };
    let home_of_figure = |f: &FigureItem<'_>| home(f.metric, &f.figure.cell);
    let home_of_claim = |c: &ClaimCheck| home(&c.claim.metric, &c.claim.numerator);
    let mut placed = Placed {
        beside: Vec::with_capacity(sections.len()),
        ..Default::default()
    };
    for i in 0..=sections.len() {
        let here = |home: Option<usize>| {
            if i == sections.len() {
                home.is_none()
            } else {
                home == Some(i)
            }
        };
        let figures: Vec<FigureItem<'_>> = items
            .iter()
            .filter(|f| here(home_of_figure(f)))
            .cloned()
            .collect();
        let claims: Vec<&ClaimCheck> = checks.iter().filter(|c| here(home_of_claim(c))).collect();
        let md = render(ds, manifest, &figures, &claims);
        if i == sections.len() {
            placed.unplaced = md;
        } else {
            placed.beside.push(md);
        }
    }
    placed.checks = checks;
    placed
}
