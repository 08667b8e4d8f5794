//! echolab-report: a results directory (manifest.yaml and runs/*.json) becomes a report a reader
//! trusts at a glance.
//!
//! [`render`] reads `manifest.yaml` and `runs/*.json` and writes, in the same directory:
//!
//! - `report.md`: a header saying what the numbers are ([`header`]), the seed-style tables
//!   ([`tables`]) each with the seed's published figures and claims beside it ([`reference`],
//!   [`claims`]), the Little's-law consistency check ([`littles_law`]), links to the plots,
//!   and footnotes stating every method;
//! - `summary.csv`: one row per run ([`summary_csv`]);
//! - `plots/*.svg` ([`plots`]);
//! - `report.html`: the same report in one self-contained page, plots inlined ([`html`]).
//!
//! Statistics ([`inference`]): every figure is the median over repetitions with min–max and a 95%
//! confidence interval that stays inside the quantity's domain (exact, log-t or bootstrap); a
//! figure whose coefficient of variation is above 10% is flagged noisy. Ratios between cells
//! come with their own 95% interval, and the seeds' claims are judged against the band each
//! states ([`claims`]), with the differences between this run's setting and the seed's
//! ([`setting`]) beside every comparison. The "Repetitions" section ([`repetitions`]) says
//! which cells reached the target half-width; "Why results may differ" ([`differ`]) is
//! written from what was measured. Metric names are defined in one place, [`metrics`].
//!
//! A partial directory (run cut short, failed runs) is reported with the holes marked; a
//! directory without a manifest is an [`Error::NotResults`].

pub mod attribution;
pub mod bounds;
pub mod bundle;
pub mod claims;
pub mod compare;
pub mod costs;
pub mod counters;
pub mod dataset;
pub mod differ;
pub mod factorial;
pub mod fdist;
pub mod format;
pub mod gate;
pub mod header;
pub mod html;
pub mod inference;
pub mod littles_law;
pub mod mechanism_check;
pub mod mechanisms;
pub mod metrics;
pub mod plots;
pub mod readme;
pub mod reference;
pub mod repetitions;
pub mod replication;
pub mod sequential;
pub mod setting;
pub mod spread;
pub mod summary_csv;
pub mod syscall_cost;
pub mod tables;
pub mod verdicts;
pub mod walkthrough;
pub mod welch;

use std::path::{Path, PathBuf};

use echolab_core::results::{write_atomic, ResultsDir, ResultsError};

use crate::claims::Verdict;
use crate::dataset::{Counts, Dataset, RepOutcome};

/// File name of the report inside a results directory.
pub const REPORT_FILE: &str = "report.md";
/// File name of the per-run summary inside a results directory.
pub const SUMMARY_FILE: &str = "summary.csv";

/// Why a report could not be made.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The path is not a results directory (no directory, or no manifest.yaml).
    #[error("{0}")]
    NotResults(String),
    /// The manifest does not parse; the message names the file.
    #[error("{0}")]
    BadInput(String),
    /// Reading or writing a file failed; the message names the file.
    #[error("{0}")]
    Io(String),
}

impl Error {
    /// Process exit code for the command line: `echolab_core::cli::EXIT_USAGE` (2) for input
    /// that is not (or not a valid) results directory, 1 for I/O failures.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::NotResults(_) | Error::BadInput(_) => echolab_core::cli::EXIT_USAGE.into(),
            Error::Io(_) => 1,
        }
    }
}

impl From<ResultsError> for Error {
    fn from(e: ResultsError) -> Self {
        match e {
            ResultsError::NotResults(_) => Error::NotResults(e.to_string()),
            ResultsError::Parse { .. } => Error::BadInput(e.to_string()),
            ResultsError::Io { .. } => Error::Io(e.to_string()),
        }
    }
}

/// A report in memory: the files [`render`] writes.
#[derive(Debug, Clone)]
pub struct Report {
    /// `report.md`.
    pub markdown: String,
    /// `summary.csv`.
    pub csv: String,
    /// `plots/*.svg`.
    pub plots: Vec<plots::Plot>,
    /// What it found.
    pub summary: ReportSummary,
}

/// What a report found, for the launcher to print at the end of a run.
#[derive(Debug, Clone)]
pub struct ReportSummary {
    /// The results directory.
    pub dir: PathBuf,
    /// Files written (empty for [`build`], which writes nothing).
    pub written: Vec<PathBuf>,
    /// Every planned run was there and usable, and the manifest says complete.
    pub complete: bool,
    /// Planned runs by outcome.
    pub counts: Counts,
    /// Each claim of the seed with its verdict.
    pub claims: Vec<(String, Verdict)>,
    /// The verdict table, one row per claim ([`verdicts`]).
    pub verdicts: Vec<verdicts::VerdictRow>,
    /// Cells with a noisy figure, e.g. `epoll-lt_long_c100_r10 (qps CV 23.4%)`.
    pub noisy: Vec<String>,
    /// Closed-loop cells that disagree with Little's law by more than 10%.
    pub littles_law_flagged: Vec<String>,
    /// Problems met on the way (undecodable histograms, plots not drawn).
    pub notes: Vec<String>,
}

/// Metrics checked for noise in the summary.
const NOISE_METRICS: [&str; 5] = [
    metrics::QPS,
    metrics::P50_US,
    metrics::P99_US,
    metrics::CONNECT_S,
    metrics::CPU_PCT,
];

/// How figures are computed, stated under the report.
const STATISTICS_NOTE: &str = "Figures: median over repetitions [min–max] (95% CI). Every quantity here is positive or \
zero, and so is every interval: when all repetitions agree the figure is **exact** (zero-width interval; system-call \
counts usually are); when all values are positive the interval is that of the geometric mean, exp(mean(ln x) ± t·sd(ln \
x)/√n) (**log-t**, Student's t with n−1 degrees of freedom, critical values from the NIST/SEMATECH e-Handbook \
§1.3.6.7.2); when a value is 0, a percentile **bootstrap** of the mean (4000 resamples from a fixed generator state). Ratios and changes \
between cells: exact when both cells are; otherwise the ratio of geometric means with exp(d ± t·se), Welch's standard \
error and degrees of freedom (log-t), or a bootstrap of the ratio of means when a value is 0. \"No CI\" appears only with \
fewer than 2 repetitions or a denominator that is 0 in every repetition, and says which. ⚠ noisy: coefficient of \
variation (sample stdev / mean) above 10%. Failed runs (a record with an error) are excluded from figures and shown in \
the per-repetition table.";

/// Reads `dir` and builds the report in memory, writing nothing.
///
/// # Errors
/// [`Error::NotResults`] when `dir` is not a results directory, [`Error::BadInput`] when its
/// manifest does not parse, [`Error::Io`] when it cannot be read; run files that do not parse
/// are left out and named in the report.
pub fn build(dir: &Path) -> Result<Report, Error> {
    if !dir.exists() {
        return Err(Error::NotResults(format!(
            "{} does not exist",
            dir.display()
        )));
    }
    if !dir.is_dir() {
        return Err(Error::NotResults(format!(
            "{} is not an echolab results directory (not a directory)",
            dir.display()
        )));
    }
    let results = ResultsDir::load(dir)?;
    let ds = Dataset::new(&results);
    let manifest = &results.manifest;
    let counts = ds.counts();
    let experiment = &manifest.experiment;

    let wants_syscalls = experiment.bench.strace
        || experiment
            .reference
            .claims
            .iter()
            .any(|c| c.metric.starts_with("syscall.") || c.metric.starts_with("strace."))
        || experiment.reference.figures.iter().any(|f| {
            f.values
                .keys()
                .any(|m| m.starts_with("syscall.") || m.starts_with("strace."))
        });
    let mut sections = tables::all(&ds, wants_syscalls);
    if experiment.reference.source.is_empty() {
        // An experiment of the user's own, with no seed: the tables' introductions do not
        // cite the seed sections their layout comes from.
        for s in &mut sections {
            s.intro = without_seed_citation(&s.intro);
        }
    }
    let placed = reference::place(&ds, manifest, &sections);
    let (plots, plot_notes) = plots::all(&ds, &experiment.reference);

    let mut notes: Vec<String> = sections
        .iter()
        .flat_map(|s| {
            s.notes
                .iter()
                .filter(|n| n.starts_with("Histogram"))
                .cloned()
        })
        .collect();
    notes.extend(plot_notes);

    let mechanism_checks = mechanisms::all(&ds, manifest);
    let verdict_rows = verdicts::rows(&ds, manifest, &placed.checks, &mechanism_checks);
    let mut md = header::opening(manifest, &counts);
    if let Some(busy) = differ::busy_machine(&ds) {
        md.push_str(&format!("{busy}\n\n"));
    }
    if !results.unreadable.is_empty() {
        md.push_str(
            "⚠ Unreadable run files, left out of every figure (their cells count as missing):\n\n",
        );
        for (path, why) in &results.unreadable {
            let name = path.file_name().map_or_else(
                || path.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            );
            md.push_str(&format!("- `{name}`: {why}\n"));
        }
        md.push('\n');
    }
    md.push_str(&verdicts::section(&verdict_rows, manifest));
    md.push_str(&header::render(manifest, &counts));
    for (section, beside) in sections.iter().zip(&placed.beside) {
        md.push_str(&format!(
            "## {}\n\n{}\n\n{}\n",
            section.title,
            section.intro,
            section.table.to_markdown()
        ));
        for n in &section.notes {
            md.push_str(&format!("{n}\n\n"));
        }
        if !beside.is_empty() {
            md.push_str(&format!(
                "Seed vs here ({}):\n\n{beside}\n",
                experiment.reference.source
            ));
        }
    }
    if !placed.unplaced.is_empty() {
        md.push_str(&format!(
            "## Seed figures and claims without a table here\n\n{}\n",
            placed.unplaced
        ));
    }
    let noisy = noisy_figures(&ds);
    let littles_law_flagged: Vec<String> = ds
        .cells
        .iter()
        .filter(|c| littles_law::check_cell(c).is_some_and(|runs| runs.iter().any(|r| r.flagged())))
        .map(|c| c.id.clone())
        .collect();
    md.push_str(&bounds::section(&ds, manifest));
    md.push_str(&mechanisms::section(&mechanism_checks));
    md.push_str(&attribution::section(dir));
    md.push_str(&repetitions::section(&ds, manifest));
    md.push_str(&counters::section(&ds, manifest));
    md.push_str(&differ::section(
        &ds,
        manifest,
        &noisy,
        &littles_law_flagged,
    ));
    md.push_str(&holes(&ds));
    if !plots.is_empty() {
        md.push_str(&format!("## Plots\n\n{}\n\n", plots::CAPTION));
        for p in &plots {
            md.push_str(&format!(
                "![{}]({}/{})\n\n{}\n\n",
                p.title,
                plots::PLOTS_DIR,
                p.file,
                p.caption
            ));
        }
    }
    if !notes.is_empty() {
        md.push_str("## Notes\n\n");
        for n in &notes {
            md.push_str(&format!("- {n}\n"));
        }
        md.push('\n');
    }
    md.push_str(&format!(
        "---\n\n{STATISTICS_NOTE}\n\n{}\n\nLittle's law: for closed-loop cells, expected QPS = connections / mean latency; a \
         repetition off by more than 10% is flagged.\n",
        claims::RULE
    ));

    let csv = summary_csv::render(&ds)
        .map_err(|e| Error::Io(format!("cannot write {SUMMARY_FILE}: {e}")))?;
    let summary = ReportSummary {
        dir: dir.to_path_buf(),
        written: Vec::new(),
        complete: header::is_complete(manifest, &counts),
        counts,
        claims: placed
            .checks
            .iter()
            .map(|c| (c.claim.name.clone(), c.verdict))
            .collect(),
        verdicts: verdict_rows,
        noisy,
        littles_law_flagged,
        notes,
    };
    Ok(Report {
        markdown: md,
        csv,
        plots,
        summary,
    })
}

/// `Seed 000 §6.1 / seed 001 §3.1: QPS (req/s) …` → `QPS (req/s) …`; `Seed 004 table 2-1: …`
/// likewise; an introduction that cites no seed is returned as it is.
fn without_seed_citation(intro: &str) -> String {
    match intro.split_once(": ") {
        Some((cite, rest)) if cite.starts_with("Seed ") => rest.to_string(),
        _ => match intro.split_once(". ") {
            Some((cite, rest)) if cite.starts_with("Seed ") => rest.to_string(),
            _ => intro.to_string(),
        },
    }
}

/// Cells with a noisy figure, e.g. `epoll-lt_long_c100_r10 (qps CV 23.4%)`.
fn noisy_figures(ds: &Dataset<'_>) -> Vec<String> {
    ds.cells
        .iter()
        .flat_map(|c| {
            NOISE_METRICS.iter().filter_map(move |m| {
                let s = c.summary(m)?;
                s.is_noisy()
                    .then(|| format!("{} ({m} CV {})", c.id, format::pct(s.cv().unwrap_or(0.0))))
            })
        })
        .collect()
}

/// The "Missing and failed runs" section, empty when there are none; a failed run names the
/// server processes its record knows ([`dataset::server_processes`]).
fn holes(ds: &Dataset<'_>) -> String {
    let mut lines = Vec::new();
    for c in &ds.cells {
        for rep in 1..=c.reps_planned {
            match c.outcome(rep) {
                RepOutcome::Ok(_) => {}
                RepOutcome::Failed(r) => lines.push(format!(
                    "- {} R{rep}: failed: {}{}",
                    c.id,
                    dataset::failure_reason(r).unwrap_or_default(),
                    // Which processes served it, to tell a stray server from the run's own.
                    dataset::server_processes(r).map_or(String::new(), |p| format!(" ({p})"))
                )),
                RepOutcome::Missing => lines.push(format!("- {} R{rep}: missing", c.id)),
            }
        }
        if !c.planned {
            lines.push(format!(
                "- {}: has records but is not in the experiment's matrix (shown anyway)",
                c.id
            ));
        }
    }
    if lines.is_empty() {
        return String::new();
    }
    format!("## Missing and failed runs\n\n{}\n\n", lines.join("\n"))
}

/// Splices the excerpt of the report of `dir` ([`readme::excerpt`]) into the README at
/// `readme_path`, between its marker comments; writes nothing in `dir`.
///
/// # Errors
/// As [`build`]; [`Error::BadInput`] when the run is partial or the README lacks the markers,
/// [`Error::Io`] when it cannot be read or written.
pub fn update_readme(dir: &Path, readme_path: &Path) -> Result<(), Error> {
    let report = build(dir)?;
    if !report.summary.complete {
        return Err(Error::BadInput(format!(
            "{} is a partial run ({} of {} runs usable): the README excerpt comes from complete runs only",
            dir.display(),
            report.summary.counts.ok,
            report.summary.counts.planned
        )));
    }
    let results = ResultsDir::load(dir)?;
    let text = std::fs::read_to_string(readme_path)
        .map_err(|e| Error::Io(format!("cannot read {}: {e}", readme_path.display())))?;
    let excerpt = readme::excerpt(&report.markdown, &results.manifest);
    let out = readme::splice(&text, &excerpt)
        .map_err(|e| Error::BadInput(format!("{}: {e}", readme_path.display())))?;
    write_atomic(readme_path, out.as_bytes()).map_err(|e| Error::Io(e.to_string()))
}

/// Builds the report of `dir` and writes `report.md`, `report.html`, `summary.csv` and
/// `plots/*.svg` there
/// (each atomically, see [`write_atomic`]). This is what `echolab-up` calls at the end of a
/// run and what `echolab-report RESULTS_DIR` does.
///
/// # Errors
/// As [`build`], and [`Error::Io`] when a file cannot be written.
pub fn render(dir: &Path) -> Result<ReportSummary, Error> {
    let report = build(dir)?;
    let mut summary = report.summary;
    let write = |path: PathBuf, bytes: &[u8], written: &mut Vec<PathBuf>| {
        write_atomic(&path, bytes).map_err(|e| Error::Io(e.to_string()))?;
        written.push(path);
        Ok::<(), Error>(())
    };
    let plot_dir = dir.join(plots::PLOTS_DIR);
    if !report.plots.is_empty() {
        std::fs::create_dir_all(&plot_dir)
            .map_err(|e| Error::Io(format!("cannot create {}: {e}", plot_dir.display())))?;
    }
    for p in &report.plots {
        write(
            plot_dir.join(&p.file),
            p.svg.as_bytes(),
            &mut summary.written,
        )?;
    }
    write(
        dir.join(SUMMARY_FILE),
        report.csv.as_bytes(),
        &mut summary.written,
    )?;
    write(
        dir.join(REPORT_FILE),
        report.markdown.as_bytes(),
        &mut summary.written,
    )?;
    let title = report
        .markdown
        .lines()
        .next()
        .unwrap_or("")
        .trim_start_matches("# ");
    write(
        dir.join(html::HTML_FILE),
        html::render(title, &report.markdown, &report.plots).as_bytes(),
        &mut summary.written,
    )?;
    Ok(summary)
}
