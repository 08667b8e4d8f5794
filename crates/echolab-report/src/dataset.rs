//! A results directory arranged by cell: the planned cells (the experiment's matrix ×
//! repetitions, from the manifest) with the run records found for each, so that a table can
//! ask for a cell's values of a metric and say "missing" or "failed: …" where there are none.

use echolab_core::experiment::{BenchMode, Cell, CellSelector};
use echolab_core::hist;
use echolab_core::results::{ResultsDir, RunRecord};
use hdrhistogram::Histogram;

use crate::inference::Summary;
use crate::metrics;

/// What happened to one planned repetition of a cell.
#[derive(Debug, Clone, Copy)]
pub enum RepOutcome<'a> {
    /// A record without error and with a bench report.
    Ok(&'a RunRecord),
    /// A record that says what went wrong.
    Failed(&'a RunRecord),
    /// No record (the run was cut short before it, or it is still running).
    Missing,
}

/// One cell with its run records.
#[derive(Debug, Clone)]
pub struct CellData<'a> {
    /// The cell.
    pub cell: Cell,
    /// `cell.id()`.
    pub id: String,
    /// Whether the manifest's experiment plans it (records of unplanned cells are still shown).
    pub planned: bool,
    /// Repetitions planned: the experiment's `repetitions` (the minimum), or the highest
    /// repetition found when adaptive repetitions went further; for an unplanned cell, the
    /// highest repetition found.
    pub reps_planned: u64,
    /// Its records, sorted by repetition.
    pub runs: Vec<&'a RunRecord>,
    /// The level its intervals are built at: the experiment's design
    /// ([`crate::sequential::Design`]).
    pub confidence: crate::sequential::Confidence,
}

/// Why a run is not usable, in one line: its `error`, or "no bench report".
pub fn failure_reason(run: &RunRecord) -> Option<String> {
    let reason = match (&run.error, &run.bench) {
        (Some(e), _) => e.lines().next().unwrap_or("").trim().to_string(),
        (None, None) => "no bench report".to_string(),
        (None, Some(_)) => return None,
    };
    Some(reason)
}

/// The processes that served a run, as a failed run's line names them: `"server pid 7"`, and
/// `", worker pids 8, 9"` for worker processes of another pid (prefork's). The pid is the
/// readiness line's (`RunRecord::server_pid`), else the final stats'; `None` when the record
/// has neither (an older record of a server that printed no stats).
pub fn server_processes(run: &RunRecord) -> Option<String> {
    let main = run.server_pid.or(run.server.as_ref().map(|s| s.pid))?;
    let mut workers: Vec<u32> = run
        .server
        .iter()
        .flat_map(|s| s.workers.iter().map(|w| w.pid))
        .filter(|&p| p != main && p != 0)
        .collect();
    workers.sort_unstable();
    workers.dedup();
    let mut out = format!("server pid {main}");
    if !workers.is_empty() {
        let list: Vec<String> = workers.iter().map(u32::to_string).collect();
        out.push_str(&format!(", worker pids {}", list.join(", ")));
    }
    Some(out)
}

impl<'a> CellData<'a> {
    /// The outcome of repetition `rep` (1-based).
    pub fn outcome(&self, rep: u64) -> RepOutcome<'a> {
        match self.runs.iter().find(|r| r.repetition == rep) {
            None => RepOutcome::Missing,
            Some(r) if failure_reason(r).is_some() => RepOutcome::Failed(r),
            Some(r) => RepOutcome::Ok(r),
        }
    }

    /// Records usable for figures (no error, bench report present).
    pub fn ok_runs(&self) -> impl Iterator<Item = &'a RunRecord> + '_ {
        self.runs
            .iter()
            .copied()
            .filter(|r| failure_reason(r).is_none())
    }

    /// Values of `metric` over the usable repetitions (see [`metrics::value`]).
    pub fn values(&self, metric: &str) -> Vec<f64> {
        self.ok_runs()
            .filter_map(|r| metrics::value(r, metric))
            .collect()
    }

    /// Summary of `metric` over the usable repetitions; `None` when no repetition has it.
    pub fn summary(&self, metric: &str) -> Option<Summary> {
        Summary::at(&self.values(metric), self.confidence)
    }

    /// Why this cell has no figures: `"missing"` when no repetition has a record, otherwise
    /// `"failed: <first reason>"`. `None` when some repetition is usable.
    pub fn absence(&self) -> Option<String> {
        if self.ok_runs().next().is_some() {
            return None;
        }
        Some(match self.runs.iter().find_map(|r| failure_reason(r)) {
            Some(reason) => format!("failed: {reason}"),
            None => "missing".to_string(),
        })
    }

    /// Usable repetitions over planned, e.g. `"2/3"`.
    pub fn reps_text(&self) -> String {
        format!("{}/{}", self.ok_runs().count(), self.reps_planned)
    }

    /// The latency histograms (ns) of the usable repetitions merged into one; `Ok(None)` when
    /// no repetition carries a histogram.
    ///
    /// # Errors
    /// A histogram that does not decode, with the run it came from.
    pub fn merged_histogram(&self) -> Result<Option<Histogram<u64>>, String> {
        let mut merged: Option<Histogram<u64>> = None;
        for r in self.ok_runs() {
            let Some(text) = r
                .bench
                .as_ref()
                .map(|b| b.histogram.as_str())
                .filter(|t| !t.trim().is_empty())
            else {
                continue;
            };
            let h = hist::merge([text])
                .map_err(|e| format!("{} repetition {}: {e}", self.id, r.repetition))?;
            match merged.as_mut() {
                None => merged = Some(h),
                Some(m) => m.add(&h).map_err(|e| {
                    format!(
                        "{} repetition {}: cannot merge: {e:?}",
                        self.id, r.repetition
                    )
                })?,
            }
        }
        Ok(merged)
    }

    /// Short, long or sustain mode: the cells that send requests and measure each one's latency
    /// (connect-storm measures connections instead).
    pub fn sends_requests(&self) -> bool {
        matches!(
            self.cell.mode,
            BenchMode::Short | BenchMode::Long | BenchMode::Sustain
        )
    }

    /// Closed loop: short or long mode, and no usable run set an open-loop target rate.
    pub fn is_closed_loop(&self) -> bool {
        matches!(self.cell.mode, BenchMode::Short | BenchMode::Long)
            && self
                .ok_runs()
                .all(|r| r.bench.as_ref().is_none_or(|b| b.target_rate.is_none()))
    }
}

/// Counts of planned repetitions by outcome.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Cells × repetitions planned.
    pub planned: u64,
    /// Usable.
    pub ok: u64,
    /// With a record that says it failed.
    pub failed: u64,
    /// Without a record.
    pub missing: u64,
}

/// Every cell of a results directory.
#[derive(Debug, Clone)]
pub struct Dataset<'a> {
    /// Planned cells in the experiment's order, then unplanned cells that have records.
    pub cells: Vec<CellData<'a>>,
}

impl<'a> Dataset<'a> {
    /// Arranges `results` by cell.
    pub fn new(results: &'a ResultsDir) -> Self {
        let reps = results.manifest.experiment.repetitions;
        let confidence = crate::sequential::Design::of(&results.manifest.experiment).confidence();
        let mut cells: Vec<CellData<'a>> = results
            .manifest
            .experiment
            .cells()
            .into_iter()
            .map(|cell| CellData {
                id: cell.id(),
                cell,
                planned: true,
                reps_planned: reps,
                runs: Vec::new(),
                confidence,
            })
            .collect();
        for run in &results.runs {
            let id = run.cell.id();
            let i = match cells.iter().position(|c| c.id == id) {
                Some(i) => i,
                None => {
                    cells.push(CellData {
                        id,
                        cell: run.cell.clone(),
                        planned: false,
                        reps_planned: 0,
                        runs: Vec::new(),
                        confidence,
                    });
                    cells.len() - 1
                }
            };
            cells[i].runs.push(run);
        }
        for c in &mut cells {
            c.runs.sort_by_key(|r| r.repetition);
            let highest = c.runs.iter().map(|r| r.repetition).max().unwrap_or(0);
            c.reps_planned = if c.planned {
                // Adaptive repetitions stop between the minimum and the maximum: repetitions
                // beyond the last one run were never planned, so they are not missing.
                c.reps_planned
                    .max(highest.min(results.manifest.experiment.max_repetitions()))
            } else {
                highest
            };
        }
        Self { cells }
    }

    /// The one cell `sel` names; `None` when it names none or several (an experiment's
    /// selectors are validated to name one when it is loaded).
    pub fn one(&self, sel: &echolab_core::experiment::CellSelector) -> Option<&CellData<'a>> {
        match self.select(sel).as_slice() {
            [one] => Some(*one),
            _ => None,
        }
    }

    /// Cells of `mode`.
    pub fn of_mode(&self, mode: BenchMode) -> impl Iterator<Item = &CellData<'a>> {
        self.cells.iter().filter(move |c| c.cell.mode == mode)
    }

    /// Cells the selector matches.
    pub fn select(&self, selector: &CellSelector) -> Vec<&CellData<'a>> {
        self.cells
            .iter()
            .filter(|c| selector.matches(&c.cell))
            .collect()
    }

    /// The cell equal to `cell` except for its mode (e.g. the long twin of a short cell).
    /// Rounds are compared too: a short and a long cell pair up only when they did the same
    /// number of round trips per connection.
    pub fn twin(&self, cell: &Cell, mode: BenchMode) -> Option<&CellData<'a>> {
        let want = Cell {
            mode,
            ..cell.clone()
        };
        self.cells.iter().find(|c| c.cell == want)
    }

    /// Distinct server names in order of first appearance.
    pub fn servers(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for c in &self.cells {
            if !out.contains(&c.cell.server) {
                out.push(c.cell.server.clone());
            }
        }
        out
    }

    /// Planned repetitions by outcome.
    pub fn counts(&self) -> Counts {
        let mut n = Counts::default();
        for c in self.cells.iter().filter(|c| c.planned) {
            for rep in 1..=c.reps_planned {
                n.planned += 1;
                match c.outcome(rep) {
                    RepOutcome::Ok(_) => n.ok += 1,
                    RepOutcome::Failed(_) => n.failed += 1,
                    RepOutcome::Missing => n.missing += 1,
                }
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use echolab_core::stats::{ServerStats, WorkerStats};

    #[test]
    fn a_runs_server_processes_are_named_from_its_ready_line_and_its_stats() {
        let old = r#"{"cell":{"server":"prefork","mode":"long","conns":1,"rounds":1,"payload":12},
            "repetition":1,"started_at":"t","wall_s":1.0}"#;
        let mut run: RunRecord = serde_json::from_str(old).unwrap();
        assert_eq!(
            server_processes(&run),
            None,
            "an older record without stats"
        );
        run.server_pid = Some(7);
        assert_eq!(server_processes(&run).as_deref(), Some("server pid 7"));
        let worker = |pid| WorkerStats {
            pid,
            ..Default::default()
        };
        run.server = Some(ServerStats {
            pid: 7,
            workers: vec![worker(9), worker(8)],
            ..Default::default()
        });
        assert_eq!(
            server_processes(&run).as_deref(),
            Some("server pid 7, worker pids 8, 9")
        );
        // Threads of one process share its pid: nothing more to name.
        run.server_pid = None;
        run.server.as_mut().unwrap().workers = vec![worker(7), worker(7)];
        assert_eq!(server_processes(&run).as_deref(), Some("server pid 7"));
    }
}
