//! Every figure the report pools over repetitions, tested with repetitions that differ so
//! much that dropping, duplicating or mixing up one of them changes the figure: the merged
//! latency percentiles (table and plots share `CellData::merged_histogram`), the median over
//! repetitions of each repetition's percentile, and an empty repetition, which has no latency
//! to pool.

mod common;

use echolab_core::hist;
use echolab_core::results::{ResultsDir, RunStatus};
use echolab_report::dataset::Dataset;

use common::*;

/// Latencies (µs) and their counts for each of a cell's three repetitions: no two alike, and
/// the third holds as many requests as the first two together.
const REPS: [&[(u64, u64)]; 3] = [
    &[(100, 900), (150, 100)],
    &[(1_000, 900), (2_000, 100)],
    &[(5_000, 1_900), (9_000, 100)],
];

const CELL: &str = "epoll-et_long_c100_r10";

fn histogram(counts: &[(u64, u64)]) -> String {
    let mut h = hist::new_latency_histogram();
    for &(us, n) in counts {
        for _ in 0..n {
            assert!(!hist::record_ns(&mut h, us * 1000));
        }
    }
    hist::encode(&h)
}

/// `P50 / P90 / P99 / P99.9` of the merge of `reps` (indices into [`REPS`]), as the table
/// prints them.
fn merged_text(reps: &[usize]) -> String {
    let texts: Vec<String> = reps.iter().map(|&i| histogram(REPS[i])).collect();
    let m = hist::merge(texts.iter().map(String::as_str)).unwrap();
    let s = hist::LatencySummary::from_histogram(&m).unwrap();
    [s.p50, s.p90, s.p99, s.p999]
        .map(echolab_report::format::num)
        .join(" / ")
}

fn exp31_with_differing_repetitions() -> (echolab_testkit::TempDir, String) {
    let (e, mut runs) = steady_exp31();
    for r in runs.iter_mut().filter(|r| r.cell.id() == CELL) {
        let counts = REPS[(r.repetition - 1) as usize];
        let b = r.bench.as_mut().unwrap();
        b.histogram = histogram(counts);
        let h = hist::decode(&b.histogram).unwrap();
        b.latency_us = hist::LatencySummary::from_histogram(&h);
        b.requests_ok = h.len();
    }
    let m = manifest(e, RunStatus::Complete, runs.len() as u64);
    let (tmp, _, md) = rendered("pooled", &m, &runs);
    (tmp, md)
}

#[test]
fn merged_percentiles_add_every_repetition_once() {
    let all = merged_text(&[0, 1, 2]);
    // The data are such that any slip shows: each of these is another figure.
    for slip in [
        merged_text(&[0, 1]),
        merged_text(&[1, 2]),
        merged_text(&[0, 2]),
        merged_text(&[0, 0, 1, 2]),
        merged_text(&[0, 1, 2, 2]),
        merged_text(&[2, 2, 2]),
    ] {
        assert_ne!(slip, all, "the test data do not tell this slip apart");
    }
    let (dir, md) = exp31_with_differing_repetitions();
    let table = section(&md, "Latency percentiles per cell");
    let cells = row(table, CELL);
    assert_eq!(cells[5], all, "{table}");
    // The plots read the same merge: every request of every repetition, once.
    let results = ResultsDir::load(dir.path()).unwrap();
    let ds = Dataset::new(&results);
    let cell = ds.cells.iter().find(|c| c.id == CELL).unwrap();
    let merged = cell.merged_histogram().unwrap().unwrap();
    let total: u64 = REPS.iter().flat_map(|r| r.iter().map(|(_, n)| n)).sum();
    assert_eq!(merged.len(), total);
}

#[test]
fn per_repetition_percentiles_are_the_median_of_the_repetitions() {
    // Each repetition's own P50: 100, 1000 and 5000 µs; their median is the second's, and
    // the range spans the first and the third.
    let (_dir, md) = exp31_with_differing_repetitions();
    let table = section(&md, "Latency percentiles per cell");
    let p50 = &row(table, CELL)[2];
    // 5000 µs is kept to 3 significant digits: 5000 or 5001.
    assert!(p50.starts_with("1000 [100–500"), "{p50}\n{table}");
}

#[test]
fn latencies_outside_the_histograms_range_are_stated() {
    let (e, mut runs) = steady_exp31();
    for r in runs.iter_mut().filter(|r| r.cell.id() == CELL) {
        r.bench.as_mut().unwrap().latency_out_of_range = r.repetition;
    }
    let m = manifest(e, RunStatus::Complete, runs.len() as u64);
    let (_tmp, _, md) = rendered("out-of-range", &m, &runs);
    let table = section(&md, "Latency percentiles per cell");
    assert!(
        table.contains(&format!(
            "{CELL}: 6 latencies fell outside the histogram's range"
        )),
        "{table}"
    );
}
