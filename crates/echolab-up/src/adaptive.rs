//! Adaptive repetitions (netperf's `-i max,min -I level,width`): which cells get another
//! round after the minimum, decided from the run records written so far, at the design's
//! planned looks only ([`echolab_report::sequential`]): a cell that continued at one look runs
//! on to the next without being judged, so the error spent at each look is the one planned.

use echolab_core::experiment::{Cell, Experiment};
use echolab_core::results::RunRecord;
use echolab_report::sequential::Design;

/// Whether a cell that has made `attempts` repetitions is between two planned looks: it
/// continued at the last one and runs on, unjudged, to the next.
fn between_looks(design: &Design, attempts: u64) -> bool {
    attempts > design.looks[0] && attempts < design.max() && !design.is_look(attempts)
}

/// The cells of `exp` whose headline metric over the usable repetitions in `runs` has not yet
/// reached the experiment's target half-width and may still repeat
/// ([`echolab_report::inference::repetition_status`]), and the cells between two looks.
pub(crate) fn cells_short_of_target(exp: &Experiment, runs: &[RunRecord]) -> Vec<Cell> {
    let design = Design::of(exp);
    exp.cells()
        .into_iter()
        .filter(|cell| {
            let attempts = runs.iter().filter(|r| r.cell == *cell).count() as u64;
            if between_looks(&design, attempts) {
                return true;
            }
            let values: Vec<f64> = runs
                .iter()
                .filter(|r| r.cell == *cell && r.error.is_none())
                .filter_map(echolab_report::metrics::headline_value)
                .collect();
            // Failing repetitions count against the maximum, so a cell that keeps failing
            // cannot repeat forever.
            attempts < exp.max_repetitions()
                && matches!(
                    echolab_report::inference::repetition_status(
                        &values,
                        exp.repetitions,
                        exp.max_repetitions(),
                        exp.target_halfwidth(),
                    ),
                    echolab_report::inference::RepetitionStatus::Continue
                )
        })
        .collect()
}

/// The cells at a look of the claims whose interval still straddles an edge of their band
/// ([`echolab_report::claims::straddling`]) and that may still repeat: another round may settle
/// the verdict. Judged on the records in `dir` as written so far. (Cells between looks are
/// [`cells_short_of_target`]'s.)
pub(crate) fn cells_of_unsettled_claims(
    manifest: &echolab_core::results::Manifest,
    runs: &[RunRecord],
) -> Vec<Cell> {
    let exp = &manifest.experiment;
    let results = echolab_core::results::ResultsDir {
        path: std::path::PathBuf::new(),
        manifest: manifest.clone(),
        runs: runs.to_vec(),
        unreadable: Vec::new(),
    };
    let unsettled = echolab_report::claims::straddling(&results);
    let design = Design::of(exp);
    exp.cells()
        .into_iter()
        .filter(|cell| {
            let attempts = runs.iter().filter(|r| r.cell == *cell).count() as u64;
            attempts < exp.max_repetitions()
                && !between_looks(&design, attempts)
                && unsettled
                    .iter()
                    .any(|c| c.claim.numerator.matches(cell) || c.claim.denominator.matches(cell))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use echolab_core::stats::BenchReport;

    /// exp31's two long/short cells of one server, 3 to 5 repetitions, a 5% target.
    fn experiment() -> Experiment {
        Experiment::parse(
            "name: t\nquestion: q\nrepetitions: 3\nmax_repetitions: 5\ntarget_halfwidth: 5%\n\
             matrix:\n  - servers: [epoll-et]\n    modes: [short, long]\n    conns: [100]\n    rounds: [10]\n",
            "test",
        )
        .unwrap()
    }

    fn run(cell: &Cell, repetition: u64, qps: Option<f64>) -> RunRecord {
        RunRecord {
            cell: cell.clone(),
            repetition,
            started_at: "2026-12-02T00:00:00Z".into(),
            wall_s: 1.0,
            bench: qps.map(|qps| BenchReport {
                qps,
                requests_ok: qps as u64,
                ..Default::default()
            }),
            server: None,
            server_pid: None,
            samples: Vec::new(),
            settle: None,
            link: None,
            strace: None,
            error: qps.is_none().then(|| "the client exited 1".into()),
        }
    }

    fn runs(cell: &Cell, qps: &[Option<f64>]) -> Vec<RunRecord> {
        qps.iter()
            .enumerate()
            .map(|(i, q)| run(cell, i as u64 + 1, *q))
            .collect()
    }

    fn cell(exp: &Experiment, mode: &str) -> Cell {
        exp.cells()
            .into_iter()
            .find(|c| c.mode.name() == mode)
            .unwrap()
    }

    // Half-widths by hand: 999/1000/1001 has s = 1, so t(0.975, 2) * 1 / sqrt(3) = 2.5 req/s,
    // 0.25% of the mean; 600/1000/1500 has s = 451, a half-width of 1120 req/s, above 100%.
    const TIGHT: [Option<f64>; 3] = [Some(999.0), Some(1000.0), Some(1001.0)];
    const WIDE: [Option<f64>; 3] = [Some(600.0), Some(1000.0), Some(1500.0)];

    #[test]
    fn a_cell_whose_interval_reached_the_target_stops_and_a_wide_one_repeats() {
        let exp = experiment();
        let (short, long) = (cell(&exp, "short"), cell(&exp, "long"));
        let mut all = runs(&long, &TIGHT);
        all.extend(runs(&short, &WIDE));
        assert_eq!(cells_short_of_target(&exp, &all), vec![short]);
    }

    #[test]
    fn a_cell_below_the_minimum_repeats_whatever_its_spread() {
        let exp = experiment();
        let (short, long) = (cell(&exp, "short"), cell(&exp, "long"));
        // Two identical values would be "reached" if the minimum of 3 were not applied; a
        // failed third attempt leaves two usable values.
        let mut all = runs(&long, &[Some(1000.0), Some(1000.0), None]);
        all.extend(runs(&short, &TIGHT));
        assert_eq!(cells_short_of_target(&exp, &all), vec![long]);
        // A cell with no runs at all is short of the target too.
        assert_eq!(cells_short_of_target(&exp, &[]).len(), 2);
    }

    #[test]
    fn a_cell_is_judged_only_at_the_designs_looks() {
        // 3 to 5: looks after 3, 4 and 5. A design of 3 to 10 looks after 3, 7 and 10: a
        // tight cell that continued at 3 (here it has 4 attempts) runs on, unjudged.
        let exp = Experiment::parse(
            "name: t\nquestion: q\nrepetitions: 3\nmax_repetitions: 10\ntarget_halfwidth: 5%\n\
             matrix:\n  - servers: [epoll-et]\n    modes: [short, long]\n    conns: [100]\n    rounds: [10]\n",
            "test",
        )
        .unwrap();
        let (short, long) = (cell(&exp, "short"), cell(&exp, "long"));
        let tight4 = [TIGHT[0], TIGHT[1], TIGHT[2], Some(1000.0)];
        let mut all = runs(&long, &tight4);
        all.extend(runs(&short, &TIGHT));
        assert_eq!(cells_short_of_target(&exp, &all), vec![long.clone()]);
        // At the look after 7 the same tight cell stops.
        let tight7 = [tight4.as_slice(), &TIGHT].concat();
        let mut all = runs(&long, &tight7);
        all.extend(runs(&short, &TIGHT));
        assert_eq!(cells_short_of_target(&exp, &all), Vec::<Cell>::new());
    }

    #[test]
    fn failed_attempts_count_against_the_maximum() {
        let exp = experiment();
        let (short, long) = (cell(&exp, "short"), cell(&exp, "long"));
        // 3 wide values and 2 failures: 5 attempts, the maximum, so no sixth.
        let mut all = runs(&short, &[WIDE[0], None, WIDE[1], None, WIDE[2]]);
        all.extend(runs(&long, &TIGHT));
        assert_eq!(cells_short_of_target(&exp, &all), Vec::<Cell>::new());
        // 4 attempts with the same values: one more may still run.
        let four = runs(&short, &[WIDE[0], None, WIDE[1], WIDE[2]]);
        let mut all = four;
        all.extend(runs(&long, &TIGHT));
        assert_eq!(cells_short_of_target(&exp, &all), vec![short]);
    }
}
