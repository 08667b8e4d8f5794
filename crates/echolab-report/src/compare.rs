//! `echolab-report compare A B [C ...]`: runs of one experiment set side by side, each
//! against the first: for every cell they share, each headline metric's ratio (this run / the
//! first) with its 95% interval and an equivalence verdict within a stated margin, beside the
//! differences between their manifests (machine, kernel, CPU plan, link, binaries, inputs).
//!
//! The verdict is the claims' rule ([`crate::claims::judge`]) with the band [1/(1 + margin), 1 + margin] (`ClaimBand::relative`, the claims' own band):
//! **same** when the interval lies inside it, **different** when it lies wholly outside,
//! **inconclusive** otherwise. Two cells whose repetitions gave identical values (the same run
//! given twice) are the same measurement: exactly 1×, same.

use std::path::PathBuf;

use echolab_core::experiment::ClaimBand;
use echolab_core::results::{Manifest, ResultsDir};
use serde::Serialize;

use crate::claims::{judge, Verdict};
use crate::dataset::Dataset;
use crate::format::{self, Table};
use crate::gate::{GateDirection, GateReport};
use crate::inference::{ratio, Interval, Method, Ratio};
use crate::{metrics, Error};

/// The metrics compared, per cell that has them.
pub const METRICS: [&str; 4] = [
    metrics::QPS,
    metrics::P50_US,
    metrics::P99_US,
    metrics::CPU_PCT,
];

/// The default equivalence margin: ±5%, the experiments' own target half-width.
pub const DEFAULT_MARGIN: f64 = 0.05;

/// One metric of one shared cell, run B against run A.
#[derive(Debug, Clone, Serialize)]
pub struct MetricComparison {
    /// Cell id.
    pub cell: String,
    /// Metric name.
    pub metric: String,
    /// B / A, the ratio of geometric means (exact when both are).
    pub ratio: f64,
    /// Its 95% interval, when there is one.
    pub ci95: Option<(f64, f64)>,
    /// `same`, `different` or `inconclusive`.
    pub verdict: String,
}

/// A manifest field in which two runs differ.
#[derive(Debug, Clone, Serialize)]
pub struct ManifestDifference {
    /// What (`kernel`, `binary echo-server`, ...).
    pub field: String,
    /// In the first run.
    pub first: String,
    /// In this run.
    pub this: String,
}

/// One run against the first.
#[derive(Debug, Clone, Serialize)]
pub struct RunComparison {
    /// The run's directory.
    pub dir: PathBuf,
    /// Its run id.
    pub run_id: String,
    /// Per shared cell and metric.
    pub metrics: Vec<MetricComparison>,
    /// Cells only one of the two has.
    pub not_shared: Vec<String>,
    /// Manifest differences.
    pub differences: Vec<ManifestDifference>,
    /// Each claim's verdict in the first run and in this one.
    pub claims: Vec<ClaimComparison>,
    /// The regression gate, when asked for ([`crate::gate`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gate: Option<GateReport>,
}

/// One claim's verdict in two runs.
#[derive(Debug, Clone, Serialize)]
pub struct ClaimComparison {
    /// The claim's name.
    pub claim: String,
    /// Its verdict in the first run (`reproduced`, `refuted`, `inconclusive`, ...).
    pub first: String,
    /// Its verdict in this run.
    pub this: String,
    /// Whether the two are the same.
    pub same: bool,
}

/// The whole comparison.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// The first run (the reference).
    pub first: PathBuf,
    /// Its run id.
    pub first_run_id: String,
    /// The experiment they all ran.
    pub experiment: String,
    /// The margin, as a fraction.
    pub margin: f64,
    /// Each other run against the first.
    pub runs: Vec<RunComparison>,
}

/// The fields of a manifest that say where and how a run was made, by name.
fn fields(m: &Manifest) -> Vec<(String, String)> {
    let e = &m.environment;
    let mut v = vec![
        ("kernel".to_string(), e.kernel.clone()),
        ("CPU model".into(), e.cpu_model.clone()),
        ("logical CPUs".into(), e.cpus.to_string()),
        (
            "TCP congestion control".into(),
            e.tcp_congestion_control.clone(),
        ),
        ("Docker".into(), e.docker_version.clone()),
        ("backend".into(), m.backend.clone()),
        ("git revision".into(), e.git_rev.clone()),
        (
            "CPU plan".into(),
            m.cpu_plan
                .as_ref()
                .map(|p| p.note.clone())
                .unwrap_or_default(),
        ),
        ("link backend".into(), m.link.backend.clone()),
        (
            "calibrated RTT median (µs)".into(),
            crate::claims::measured_rtt_us(m)
                .map(format::num)
                .unwrap_or_default(),
        ),
        (
            "cell order".into(),
            m.order
                .as_ref()
                .map(|o| format!("{}, fresh hosts {}", o.kind, o.fresh_hosts_per_cell))
                .unwrap_or_default(),
        ),
    ];
    for key in ["experiment_digest", "profile_digest"] {
        v.push((
            key.replace('_', " "),
            m.inputs.get(key).cloned().unwrap_or_default(),
        ));
    }
    for (name, hash) in &m.image.binaries {
        v.push((format!("binary {name}"), hash.clone()));
    }
    for (role, host) in &m.hosts {
        if let Some(s) = host.get("sysctls") {
            v.push((format!("{role} sysctls"), s.to_string()));
        }
    }
    v
}

fn differences(a: &Manifest, b: &Manifest) -> Vec<ManifestDifference> {
    let (fa, fb) = (fields(a), fields(b));
    let mut out: Vec<ManifestDifference> = Vec::new();
    for (k, va) in &fa {
        let vb = fb
            .iter()
            .find(|(kb, _)| kb == k)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| "(absent)".into());
        if *va != vb {
            out.push(ManifestDifference {
                field: k.clone(),
                first: va.clone(),
                this: vb,
            });
        }
    }
    for (k, vb) in fb.iter().filter(|(k, _)| !fa.iter().any(|(ka, _)| ka == k)) {
        out.push(ManifestDifference {
            field: k.clone(),
            first: "(absent)".into(),
            this: vb.clone(),
        });
    }
    out
}

/// B / A of one metric with its verdict within `margin`.
fn metric(a: &[f64], b: &[f64], margin: f64) -> Option<(Ratio, Verdict)> {
    let (sa, sb) = (
        crate::inference::Summary::of(a)?,
        crate::inference::Summary::of(b)?,
    );
    if a == b {
        let exact = Ratio {
            value: 1.0,
            method: Method::Exact,
            ci95: Some(Interval {
                low: 1.0,
                high: 1.0,
            }),
            no_ci: None,
        };
        return Some((exact, Verdict::Reproduced));
    }
    let r = ratio(&sb, &sa).ok()?;
    let band = ClaimBand::relative(1.0, margin);
    let (v, _) = judge(&band, &r);
    Some((r, v))
}

fn verdict_word(v: Verdict) -> &'static str {
    match v {
        Verdict::Reproduced => "same",
        Verdict::Refuted => "different",
        _ => "inconclusive",
    }
}

/// The verdict of each claim of the run in `dir`, by name; empty when its report cannot be
/// built (the comparison of cells stands without it).
fn claim_verdicts(dir: &std::path::Path) -> Vec<(String, String)> {
    crate::build(dir)
        .map(|r| {
            r.summary
                .verdicts
                .iter()
                .map(|v| (v.claim.clone(), v.verdict.word().to_string()))
                .collect()
        })
        .unwrap_or_default()
}

fn claims(a: &[(String, String)], b: &[(String, String)]) -> Vec<ClaimComparison> {
    a.iter()
        .map(|(claim, va)| {
            let vb = b
                .iter()
                .find(|(c, _)| c == claim)
                .map_or_else(|| "(absent)".to_string(), |(_, v)| v.clone());
            ClaimComparison {
                claim: claim.clone(),
                same: *va == vb,
                first: va.clone(),
                this: vb,
            }
        })
        .collect()
}

/// Compares the runs in `dirs` (at least two) with the first, within `margin` (a fraction).
///
/// # Errors
/// [`Error::BadInput`] for fewer than two directories, a margin outside (0, 1), or runs of
/// different experiments (named); as [`ResultsDir::load`] for a directory that is not one.
pub fn compare(dirs: &[PathBuf], margin: f64) -> Result<Comparison, Error> {
    compare_gated(dirs, margin, None)
}

/// [`compare`], and with `gate` = (direction, host allowance `h` as a fraction in [0, 1)) the
/// regression gate of each run against the first ([`crate::gate`]).
///
/// # Errors
/// As [`compare`]; [`Error::BadInput`] for an allowance outside [0, 1).
pub fn compare_gated(
    dirs: &[PathBuf],
    margin: f64,
    gate: Option<(GateDirection, f64)>,
) -> Result<Comparison, Error> {
    if let Some((_, h)) = gate {
        if !(0.0..1.0).contains(&h) {
            return Err(Error::BadInput(format!(
                "--host-shift: {} must be at least 0% and below 100%",
                format::pct(h)
            )));
        }
    }
    if dirs.len() < 2 {
        return Err(Error::BadInput(
            "compare needs at least two results directories".into(),
        ));
    }
    if !(margin > 0.0 && margin < 1.0) {
        return Err(Error::BadInput(format!(
            "--margin: {} must be above 0% and below 100%",
            format::pct(margin)
        )));
    }
    let loaded: Vec<ResultsDir> = dirs
        .iter()
        .map(|d| ResultsDir::load(d).map_err(Error::from))
        .collect::<Result<_, _>>()?;
    let first = &loaded[0];
    let name = &first.manifest.experiment.name;
    for (d, r) in dirs.iter().zip(&loaded).skip(1) {
        if r.manifest.experiment.name != *name {
            return Err(Error::BadInput(format!(
                "different experiments: {} ran {name}, {} ran {}; compare runs of one experiment",
                dirs[0].display(),
                d.display(),
                r.manifest.experiment.name
            )));
        }
    }
    let ds_a = Dataset::new(first);
    let claims_a = claim_verdicts(&dirs[0]);
    let mut runs = Vec::new();
    for (d, r) in dirs.iter().zip(&loaded).skip(1) {
        let ds_b = Dataset::new(r);
        let mut out = Vec::new();
        let mut not_shared = Vec::new();
        let mut gated = Vec::new();
        for ca in &ds_a.cells {
            let Some(cb) = ds_b.cells.iter().find(|c| c.id == ca.id) else {
                not_shared.push(format!("{} (only in the first)", ca.id));
                continue;
            };
            for m in METRICS {
                if let Some((_, h)) = gate {
                    gated.extend(crate::gate::judge_cell(
                        &ca.id,
                        m,
                        &ca.values(m),
                        &cb.values(m),
                        margin,
                        h,
                    ));
                }
                if let Some((ratio, v)) = metric(&ca.values(m), &cb.values(m), margin) {
                    out.push(MetricComparison {
                        cell: ca.id.clone(),
                        metric: m.to_string(),
                        ratio: ratio.value,
                        ci95: ratio.ci95.map(|i| (i.low, i.high)),
                        verdict: verdict_word(v).into(),
                    });
                }
            }
        }
        for cb in ds_b
            .cells
            .iter()
            .filter(|c| !ds_a.cells.iter().any(|a| a.id == c.id))
        {
            not_shared.push(format!("{} (only in this run)", cb.id));
        }
        runs.push(RunComparison {
            dir: d.clone(),
            run_id: r.manifest.run_id.clone(),
            metrics: out,
            not_shared,
            differences: differences(&first.manifest, &r.manifest),
            claims: claims(&claims_a, &claim_verdicts(d)),
            gate: gate.map(|(dir, h)| GateReport::new(dir, margin, h, gated)),
        });
    }
    Ok(Comparison {
        first: dirs[0].clone(),
        first_run_id: first.manifest.run_id.clone(),
        experiment: name.clone(),
        margin,
        runs,
    })
}

/// The comparison as Markdown.
pub fn markdown(c: &Comparison) -> String {
    let mut md = format!(
        "# Runs of {} compared\n\nEach run against the first, `{}` ({}). Ratio: this run / the first, ratio of geometric \
         means over repetitions with its 95% interval; **same** when the interval lies within a factor 1 + {} of 1× either way, **different** \
         when it lies wholly outside, **inconclusive** otherwise (the claims' rule; identical repetitions are exactly 1×).\n\n",
        c.experiment,
        c.first_run_id,
        c.first.display(),
        format::pct(c.margin)
    );
    for r in &c.runs {
        md.push_str(&format!("## `{}` ({})\n\n", r.run_id, r.dir.display()));
        let mut t = Table::new(["Cell", "Metric", "Ratio (95% CI)", "Verdict"]);
        for m in &r.metrics {
            let ci = match m.ci95 {
                Some((lo, hi)) if lo == hi => " (exact)".to_string(),
                Some((lo, hi)) => format!(
                    " (95% CI {})",
                    format::ratio_interval(Interval { low: lo, high: hi })
                ),
                None => " (no CI)".into(),
            };
            t.row([
                m.cell.clone(),
                m.metric.clone(),
                format!("{}{ci}", format::times(m.ratio)),
                format!("**{}**", m.verdict),
            ]);
        }
        md.push_str(&t.to_markdown());
        md.push('\n');
        if !r.not_shared.is_empty() {
            md.push_str(&format!(
                "Not shared, not compared: {}.\n\n",
                r.not_shared.join(", ")
            ));
        }
        if !r.claims.is_empty() {
            let mut t = Table::new(["Claim", "First run", "This run", "Same verdict"]);
            for c in &r.claims {
                t.row([
                    c.claim.clone(),
                    c.first.clone(),
                    c.this.clone(),
                    if c.same { "yes" } else { "**no**" }.to_string(),
                ]);
            }
            md.push_str(&format!("Claims' verdicts:\n\n{}\n", t.to_markdown()));
        }
        if let Some(g) = &r.gate {
            md.push_str(&format!(
                "Regression gate ({}): `{}`\n\n",
                crate::gate::RULE,
                g.text().trim_end().replace('\n', "` `")
            ));
        }
        if r.differences.is_empty() {
            md.push_str("Manifests: no difference in the fields compared.\n\n");
        } else {
            let mut t = Table::new(["Manifest field", "First run", "This run"]);
            for d in &r.differences {
                t.row([d.field.clone(), d.first.clone(), d.this.clone()]);
            }
            md.push_str(&format!("Manifests differ in:\n\n{}\n", t.to_markdown()));
        }
    }
    md
}

/// The comparison as JSON.
pub fn json(c: &Comparison) -> String {
    serde_json::to_string_pretty(c).unwrap_or_default()
}

/// The comparison as one HTML page.
pub fn html(c: &Comparison) -> String {
    crate::html::render(
        &format!("Runs of {} compared", c.experiment),
        &markdown(c),
        &[],
    )
}
