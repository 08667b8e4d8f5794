//! The plan of one `echolab-up` call: the experiment (after `--reps`), its runs in order
//! (every cell, then every repetition of it), the run id, and the manifest it starts from.

use std::collections::BTreeMap;

use echolab_core::experiment::{Cell, Experiment};
use echolab_core::results::{Environment, Manifest, RunStatus, MANIFEST_SCHEMA};

/// One run: a cell and its 1-based repetition number.
pub type PlannedRun = (Cell, u64);

/// The runs of `exp`: for each cell in matrix order, repetitions 1..=N back to back, so a
/// cell's repetitions share the machine state of one moment.
pub fn runs(exp: &Experiment) -> Vec<PlannedRun> {
    exp.cells()
        .into_iter()
        .flat_map(|c| (1..=exp.repetitions).map(move |r| (c.clone(), r)))
        .collect()
}

/// Applies `--reps N`: the experiment as run.
///
/// # Errors
/// `N` is 0.
pub fn with_repetitions(mut exp: Experiment, reps: Option<u64>) -> Result<Experiment, String> {
    match reps {
        Some(0) => Err("--reps: must be at least 1".into()),
        Some(n) => {
            exp.repetitions = n;
            Ok(exp)
        }
        None => Ok(exp),
    }
}

/// A run id unique on this machine: `<YYYYmmddTHHMMSSZ>-<6 hex>`, the hex from the clock's
/// nanoseconds and the pid. It is the `echolab.run` label of every Docker object of the run
/// and part of their names, so it uses only `[0-9A-Za-z-]`.
pub fn new_run_id(now_rfc3339: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mix = (u64::from(nanos) ^ (u64::from(std::process::id()) << 20)) & 0xff_ffff;
    format!(
        "{}-{mix:06x}",
        crate::results_dir::compact_stamp(now_rfc3339).to_lowercase()
    )
}

/// The manifest at the start of a run (status running, nothing done).
pub fn new_manifest(
    run_id: &str,
    args: Vec<String>,
    backend: &str,
    experiment: Experiment,
    profile: serde_json::Value,
    inputs: BTreeMap<String, String>,
    runs_planned: u64,
) -> Manifest {
    Manifest {
        schema: MANIFEST_SCHEMA.to_string(),
        run_id: run_id.to_string(),
        status: RunStatus::Running,
        error: None,
        created_at: echolab_core::utc_now_rfc3339(),
        finished_at: None,
        args,
        backend: backend.to_string(),
        experiment,
        profile,
        inputs,
        environment: Environment::default(),
        image: Default::default(),
        hosts: BTreeMap::new(),
        link: Default::default(),
        runs_planned,
        runs_done: 0,
        timings: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_repeat_each_cell_back_to_back() {
        let e = Experiment::parse(
            "name: t\nquestion: q\nrepetitions: 3\nmatrix:\n  - servers: [select, poll]\n    modes: [long]\n    conns: [1]\n    rounds: [1]\n",
            "t.yaml",
        )
        .unwrap();
        let r = runs(&e);
        let ids: Vec<String> = r.iter().map(|(c, n)| format!("{}#{n}", c.server)).collect();
        assert_eq!(
            ids,
            ["select#1", "select#2", "select#3", "poll#1", "poll#2", "poll#3"]
        );
        let e2 = with_repetitions(e.clone(), Some(1)).unwrap();
        assert_eq!(runs(&e2).len(), 2);
        assert!(with_repetitions(e, Some(0)).unwrap_err().contains("--reps"));
    }

    #[test]
    fn run_ids_are_label_and_name_safe() {
        let id = new_run_id("2026-11-30T01:57:37.123456Z");
        assert!(
            id.starts_with("20261130t015737z-") && id.len() == 23,
            "{id}"
        );
        assert!(
            id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'),
            "{id}"
        );
    }
}
