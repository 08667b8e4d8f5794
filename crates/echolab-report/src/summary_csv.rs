//! `summary.csv`: one row per planned run (and per record of an unplanned cell), for
//! spreadsheets and scripts. Missing runs have a row too, with status `missing`, so the holes
//! of a partial directory are visible there as well.
//!
//! Columns: [`COLUMNS`]. Numbers are written in full precision; empty means "not measured".

use echolab_core::results::run_file_name;

use crate::dataset::{failure_reason, Dataset, RepOutcome};
use crate::metrics;

/// The header row.
pub const COLUMNS: [&str; 23] = [
    "run_file",
    "status",
    "cell_id",
    "server",
    "mode",
    "conns",
    "rounds",
    "duration",
    "payload_bytes",
    "reply_bytes",
    "repetition",
    "started_at",
    "qps",
    "p50_us",
    "p90_us",
    "p99_us",
    "mean_us",
    "requests_ok",
    "requests_failed",
    "connect_s",
    "server_cpu_pct",
    "server_mem_pct",
    "error",
];

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

/// The CSV text.
///
/// # Errors
/// Only what the `csv` writer reports (it writes into memory, so in practice none).
pub fn render(ds: &Dataset<'_>) -> Result<String, csv::Error> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(COLUMNS)?;
    for c in &ds.cells {
        let reps = c
            .reps_planned
            .max(c.runs.iter().map(|r| r.repetition).max().unwrap_or(0));
        for rep in 1..=reps {
            let outcome = c.outcome(rep);
            let run = match outcome {
                RepOutcome::Ok(r) | RepOutcome::Failed(r) => Some(r),
                RepOutcome::Missing => None,
            };
            let status = match outcome {
                RepOutcome::Ok(_) => "ok",
                RepOutcome::Failed(_) => "failed",
                RepOutcome::Missing => "missing",
            };
            let metric = |m: &str| opt(run.and_then(|r| metrics::value(r, m)));
            let bench = run.and_then(|r| r.bench.as_ref());
            let cell = &c.cell;
            w.write_record([
                run_file_name(cell, rep),
                status.to_string(),
                c.id.clone(),
                cell.server.clone(),
                cell.mode.name().to_string(),
                cell.conns.to_string(),
                opt(cell.rounds),
                opt(cell.duration),
                cell.payload.to_string(),
                opt(cell.reply_bytes),
                rep.to_string(),
                run.map(|r| r.started_at.clone()).unwrap_or_default(),
                metric(metrics::QPS),
                metric(metrics::P50_US),
                metric(metrics::P90_US),
                metric(metrics::P99_US),
                metric(metrics::MEAN_US),
                opt(bench.map(|b| b.requests_ok)),
                opt(bench.map(|b| b.requests_failed)),
                metric(metrics::CONNECT_S),
                metric(metrics::CPU_PCT),
                metric(metrics::MEM_PCT),
                run.and_then(failure_reason).unwrap_or_default(),
            ])?;
        }
    }
    let bytes = w.into_inner().map_err(|e| e.into_error())?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}
