//! "Reading a verdict": one claim of a run walked through from its figure to its mechanism
//! to its attribution, in Markdown, from the results directory alone
//! (`echolab-report DIR --walkthrough CLAIM`; `scripts/reading-a-verdict` makes
//! docs/reading-a-verdict.md with it from a real `echolab-up --explain` run).

use std::path::Path;

use echolab_core::results::ResultsDir;

use crate::attribution;
use crate::bounds;
use crate::dataset::Dataset;
use crate::format;
use crate::mechanisms;
use crate::reference;
use crate::tables;
use crate::verdicts;
use crate::Error;

/// The walk-through of `claim` in the run at `dir`.
///
/// # Errors
/// As [`crate::build`], and [`Error::BadInput`] when the experiment has no claim of that
/// name (the message lists the names it has).
pub fn render(dir: &Path, claim: &str) -> Result<String, Error> {
    let results = ResultsDir::load(dir)?;
    let manifest = &results.manifest;
    let ds = Dataset::new(&results);
    let names: Vec<&str> = manifest
        .experiment
        .reference
        .claims
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    if !names.contains(&claim) {
        return Err(Error::BadInput(format!(
            "--walkthrough: {claim:?} is not a claim of {}; its claims: {}",
            dir.display(),
            names.join("; ")
        )));
    }
    let sections = tables::all(&ds, false);
    let placed = reference::place(&ds, manifest, &sections);
    let checks = mechanisms::all(&ds, manifest);
    let rows = verdicts::rows(&ds, manifest, &placed.checks, &checks);
    let row = rows.iter().find(|r| r.claim == claim).expect("named above");
    let check = placed
        .checks
        .iter()
        .find(|c| c.claim.name == claim)
        .expect("every claim is checked");
    let env = &manifest.environment;
    let mut md = format!(
        "Run `{}` of experiment {} on profile {}, {} ({} logical CPUs, kernel {}), {}.\n\n",
        manifest.run_id,
        manifest.experiment.name,
        manifest.profile.profile.name.as_str(),
        env.cpu_model,
        env.cpus,
        env.kernel,
        manifest.created_at
    );
    md.push_str(&format!(
        "### 1. The figure\n\nThe claim **{claim}**: the seed measured {}; this run measured {}. {}\n\n\
         Verdict: **{}**, because {}.\n\n",
        row.seed,
        row.here,
        check
            .band
            .map(|b| format!("The band of ratios that agree with the claim is {b}."))
            .unwrap_or_default(),
        row.verdict.word(),
        check.why
    ));
    md.push_str("### 2. What bounds its cells\n\n");
    for sel in [&check.claim.numerator, &check.claim.denominator] {
        for cell in ds.select(sel) {
            if let Some(b) = bounds::of_cell(cell, manifest) {
                let cost = |m: &str| {
                    cell.summary(m)
                        .map_or("—".into(), |s| format::num(s.median))
                };
                md.push_str(&format!(
                    "- `{}` is **{}**: {}; CPU per request {} µs on the server and {} µs on the client; {} and {} system calls per request.\n",
                    cell.id,
                    b.bound.word(),
                    bounds::figures_text(&b),
                    cost(crate::costs::SERVER_CPU_US),
                    cost(crate::costs::CLIENT_CPU_US),
                    cost(crate::costs::SERVER_SYSCALLS),
                    cost(crate::costs::CLIENT_SYSCALLS)
                ));
            }
        }
    }
    md.push_str("\n### 3. The seed's mechanism, from this run's costs\n\n");
    let mine: Vec<_> = checks
        .iter()
        .filter(|m| m.mechanism.explains.iter().any(|n| n == claim))
        .collect();
    if mine.is_empty() {
        md.push_str("The experiment states no mechanism for this claim.\n");
    }
    for m in mine {
        md.push_str(&format!(
            "**{}** ({}): {}. {}.{}\n\n",
            m.mechanism.name,
            m.mechanism.source,
            m.short(),
            m.how,
            if m.leaves_out.is_empty() {
                String::new()
            } else {
                format!(" What the prediction leaves out here: {}.", m.leaves_out)
            }
        ));
    }
    md.push_str("\n### 4. Attribution: which of the seed's settings move it\n\n");
    let attributed = attribution::load(dir)
        .map_err(Error::BadInput)?
        .and_then(|all| all.into_iter().find(|a| a.claim == claim));
    match attributed {
        None => md.push_str(
            "No `echolab-up --explain` reruns for this claim in this directory (it ran without `--explain`, or the \
             claim was reproduced).\n",
        ),
        Some(a) => {
            for r in &a.results {
                let label = if r.variant.settings.is_empty() {
                    "rerun as here".to_string()
                } else {
                    format!("as the seed's {}", r.variant.settings.join(" + "))
                };
                let ratio = r
                    .check
                    .as_ref()
                    .and_then(|c| c.ours.as_ref())
                    .map_or("—".into(), format::ratio);
                let change = r
                    .change
                    .as_ref()
                    .map(|c| format!("; change from here {}", format::ratio(c)))
                    .unwrap_or_default();
                let moved = r
                    .movement
                    .map(|m| format!("{change}: {}", m.text(a.margin)))
                    .unwrap_or_default();
                md.push_str(&format!(
                    "- {label}, {} repetitions: {ratio}{moved}\n",
                    r.repetitions
                ));
            }
            if !a.effects.is_empty() {
                md.push_str(
                    "\nThe runs form a two-level factorial. Its effects, each the change of the ratio when a setting goes from \
                     here's level to the seed's, averaged over the others (a pair's: how far their joint change differs from \
                     the product of their separate ones):\n\n",
                );
                for e in &a.effects {
                    md.push_str(&format!(
                        "- {}: {}, share of the gap {}: {}\n",
                        e.name,
                        format::ratio(&e.estimate.change),
                        e.share_text(),
                        e.reading(a.margin)
                    ));
                }
            }
            md.push_str(&format!("\n{}\n", a.summary()));
            if let Ok(Some(index)) = attribution::ExplainIndex::load(dir) {
                if !index.ended.is_empty() {
                    md.push_str(&format!("{}\n", index.ended));
                }
                if !index.cannot_vary.is_empty() {
                    md.push_str(&format!(
                        "Left unexplained, because this machine cannot vary them: {}.\n",
                        index.cannot_vary.join("; ")
                    ));
                }
            }
        }
    }
    Ok(md)
}
