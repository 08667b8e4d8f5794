//! Table (e): the client's system calls, short vs long, with the change in % (seed 002 §3:
//! close 1004 → 104 calls, −89.6%; connect 1000 → 100, −90.0%; total time −86.7%).
//!
//! Rows come from echo-bench's own accounting (`bench.syscalls`) and, where the run was also
//! traced, from `strace -f -c` (the seed's tool), marked "strace".

use echolab_core::experiment::BenchMode;

use super::{change_of, change_text, figure, Section};
use crate::dataset::{CellData, Dataset};
use crate::format::{self, Table};
use crate::inference::Summary;
use crate::metrics;

/// A function from a system call name to a metric name, e.g. [`metrics::syscall_count`].
type MetricName = fn(&str) -> String;

/// Names to list for a pair, `connect` and `close` (the seed's) first, then the rest by name.
fn names(cells: [&CellData<'_>; 2]) -> Vec<String> {
    let mut names: Vec<String> = cells
        .iter()
        .flat_map(|c| c.ok_runs().flat_map(metrics::syscall_names))
        .collect();
    names.sort_by_key(|n| {
        (
            !matches!(n.as_str(), "connect" | "close"),
            n.as_str() != "connect",
            n.clone(),
        )
    });
    names.dedup();
    names
}

/// Per-run sum of `metric_of(name)` over `names`, summarised; runs lacking all of them are
/// skipped.
fn total(cell: &CellData<'_>, names: &[String], metric_of: MetricName) -> Option<Summary> {
    let per_run: Vec<f64> = cell
        .ok_runs()
        .filter_map(|r| {
            let parts: Vec<f64> = names
                .iter()
                .filter_map(|n| metrics::value(r, &metric_of(n)))
                .collect();
            (!parts.is_empty()).then(|| parts.iter().sum())
        })
        .collect();
    Summary::of(&per_run)
}

/// One table per short/long pair of cells whose runs account for system calls.
pub fn sections(ds: &Dataset<'_>) -> Vec<Section> {
    let mut out = Vec::new();
    for short in ds.of_mode(BenchMode::Short) {
        let Some(long) = ds.twin(&short.cell, BenchMode::Long) else {
            continue;
        };
        let names = names([short, long]);
        if names.is_empty() {
            continue;
        }
        let mut t = Table::new([
            "System call (client)",
            "Short",
            "Long",
            "Change long vs short",
        ]);
        let mut shown: Vec<String> = Vec::new();
        let sources: [(&str, MetricName, MetricName); 2] = [
            ("", metrics::syscall_count, metrics::syscall_total_s),
            (", strace", metrics::strace_count, metrics::strace_total_s),
        ];
        for (label, count_of, total_of) in sources {
            let listed: Vec<String> = names
                .iter()
                .filter(|n| {
                    !short.values(&count_of(n)).is_empty() || !long.values(&count_of(n)).is_empty()
                })
                .cloned()
                .collect();
            for n in &listed {
                for (what, metric) in [("calls", count_of(n)), ("total time (s)", total_of(n))] {
                    if short.values(&metric).is_empty() && long.values(&metric).is_empty() {
                        continue;
                    }
                    t.row([
                        format!("{n}() {what}{label}"),
                        figure(short, &metric),
                        figure(long, &metric),
                        change_text(long, short, &metric),
                    ]);
                    shown.push(metric);
                }
            }
            let (ts, tl) = (
                total(short, &listed, total_of),
                total(long, &listed, total_of),
            );
            if listed.len() > 1 && (ts.is_some() || tl.is_some()) {
                let fig =
                    |s: &Option<Summary>| s.as_ref().map_or_else(|| "—".into(), format::figure);
                t.row([
                    format!("total time of the above{label} (s)"),
                    fig(&ts),
                    fig(&tl),
                    change_of(tl.as_ref(), ts.as_ref()),
                ]);
            }
        }
        let metrics: Vec<&str> = shown.iter().map(String::as_str).collect();
        out.push(
            Section::new(
                format!("Client system calls, short vs long ({}, {} connections)", short.cell.server, short.cell.conns),
                format!(
                    "Seed 002 §3: calls and total time in the call per run, median [min–max] (95% CI); a count that \
                     is the same in every repetition is exact; change = ratio − 1, with the ratio's 95% CI. {}",
                    super::load_model(&[short, long])
                ),
                t,
            )
            .covers(&metrics, &[short, long]),
        );
    }
    out
}
