//! The plan of one `echolab-up` call: the experiment (after `--reps`), its runs in order,
//! the run id, and the manifest it starts from.
//!
//! Runs go in rounds: round r holds repetition r of every cell. Within a round the cells are
//! shuffled (seeded, recorded), so that whatever the machine carries from one cell to the
//! next (a warm cache, a CPU's frequency, kernel state a fresh host does not reset) falls on
//! every cell alike instead of always on the first one: an order effect can then widen an
//! interval but never pass for a difference between models.

use echolab_core::experiment::{Cell, Experiment};

/// One run: a cell and its 1-based repetition number.
pub(crate) type PlannedRun = (Cell, u64);

/// How the cells of a round are ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Order {
    /// Matrix order in every round.
    Listed,
    /// A fresh permutation per round from this seed (round r uses `seed + r`).
    Shuffled(u64),
}

impl Order {
    /// The manifest's `order.kind`.
    pub(crate) fn kind(self) -> &'static str {
        match self {
            Order::Listed => "listed",
            Order::Shuffled(_) => "shuffled",
        }
    }

    /// The seed (0 for listed).
    pub(crate) fn seed(self) -> u64 {
        match self {
            Order::Listed => 0,
            Order::Shuffled(s) => s,
        }
    }
}

/// A shuffle seed from the clock and the pid, for runs that were given none.
pub(crate) fn fresh_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ (u64::from(std::process::id()) << 32)
}

/// Round `round` (1-based): repetition `round` of each of `cells`, in `order`.
pub(crate) fn round(cells: &[Cell], round: u64, order: Order) -> Vec<PlannedRun> {
    let mut runs: Vec<PlannedRun> = cells.iter().map(|c| (c.clone(), round)).collect();
    if let Order::Shuffled(seed) = order {
        fastrand::Rng::with_seed(seed.wrapping_add(round)).shuffle(&mut runs);
    }
    runs
}

/// The runs of `exp`: rounds 1..=repetitions of every cell, each round in `order`.
pub(crate) fn runs(exp: &Experiment, order: Order) -> Vec<PlannedRun> {
    let cells = exp.cells();
    (1..=exp.repetitions)
        .flat_map(|r| round(&cells, r, order))
        .collect()
}

/// Applies `--reps N`: the experiment as run.
///
/// # Errors
/// `N` is 0.
pub(crate) fn with_repetitions(
    mut exp: Experiment,
    reps: Option<u64>,
) -> Result<Experiment, String> {
    match reps {
        Some(0) => Err("--reps: must be at least 1".into()),
        Some(n) => {
            // A fixed count: the experiment's adaptive maximum no longer applies.
            exp.repetitions = n;
            exp.max_repetitions = Some(n);
            Ok(exp)
        }
        None => Ok(exp),
    }
}

/// A run id unique on this machine: `<YYYYmmddTHHMMSSZ>-<6 hex>`, the stamp written as the
/// results directory's (`20261130T015737Z`), the hex from the clock's nanoseconds and the pid.
/// It is the `echolab.run` label of every Docker object of the run and part of their
/// container and network names, which allow upper case, so it uses only `[0-9A-Za-z-]`.
pub(crate) fn new_run_id(now_rfc3339: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mix = (u64::from(nanos) ^ (u64::from(std::process::id()) << 20)) & 0xff_ffff;
    format!("{}-{mix:06x}", compact_stamp(now_rfc3339))
}

/// `YYYYmmddTHHMMSSZ` from an RFC 3339 UTC time (`2026-11-30T01:57:37.123456Z`).
pub(crate) fn compact_stamp(rfc3339: &str) -> String {
    let secs: String = rfc3339
        .chars()
        .take(19)
        .filter(|c| *c != '-' && *c != ':')
        .collect();
    format!("{secs}Z")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn four_servers(reps: u64) -> Experiment {
        Experiment::parse(
            &format!("name: t\nquestion: q\nrepetitions: {reps}\nmatrix:\n  - servers: [select, poll, epoll-lt, epoll-et]\n    modes: [long]\n    conns: [1]\n    rounds: [1]\n"),
            "t.yaml",
        )
        .unwrap()
    }

    fn ids(r: &[PlannedRun]) -> Vec<String> {
        r.iter().map(|(c, n)| format!("{}#{n}", c.server)).collect()
    }

    #[test]
    fn listed_runs_go_round_by_round_in_matrix_order() {
        let e = four_servers(2);
        assert_eq!(
            ids(&runs(&e, Order::Listed)),
            [
                "select#1",
                "poll#1",
                "epoll-lt#1",
                "epoll-et#1",
                "select#2",
                "poll#2",
                "epoll-lt#2",
                "epoll-et#2"
            ]
        );
        let adaptive = Experiment {
            max_repetitions: Some(10),
            ..e.clone()
        };
        let e2 = with_repetitions(adaptive, Some(1)).unwrap();
        assert_eq!(runs(&e2, Order::Listed).len(), 4);
        assert_eq!(
            (e2.repetitions, e2.max_repetitions()),
            (1, 1),
            "--reps is a fixed count"
        );
        assert!(with_repetitions(e, Some(0)).unwrap_err().contains("--reps"));
    }

    #[test]
    fn shuffled_rounds_are_permutations_repeatable_from_the_seed() {
        let e = four_servers(30);
        let a = runs(&e, Order::Shuffled(42));
        assert_eq!(a, runs(&e, Order::Shuffled(42)), "same seed, same order");
        assert_ne!(a, runs(&e, Order::Shuffled(43)));
        let mut firsts = std::collections::BTreeSet::new();
        for (r, chunk) in a.chunks(4).enumerate() {
            // Each round holds every cell once, all of that round's repetition.
            let mut servers: Vec<&str> = chunk.iter().map(|(c, _)| c.server.as_str()).collect();
            servers.sort_unstable();
            assert_eq!(servers, ["epoll-et", "epoll-lt", "poll", "select"]);
            assert!(chunk.iter().all(|(_, n)| *n == r as u64 + 1));
            firsts.insert(chunk[0].0.server.clone());
        }
        // Over 30 rounds every cell goes first at least once (a fixed order would give 1;
        // the chance that a fair shuffle misses one of 4 is below 4 × 0.75^30 ≈ 0.07%).
        assert_eq!(firsts.len(), 4, "{firsts:?}");
    }

    #[test]
    fn run_ids_are_label_and_name_safe() {
        let id = new_run_id("2026-11-30T01:57:37.123456Z");
        assert!(
            id.starts_with("20261130T015737Z-") && id.len() == 23,
            "{id}"
        );
        assert!(
            id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'),
            "{id}"
        );
    }
}
