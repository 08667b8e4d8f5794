//! Tables (a)–(d): closed-loop short and long connections (seeds 000, 001, 003).

use echolab_core::experiment::{BenchMode, Cell};
use echolab_core::hist::LatencySummary;

use super::{failures_by_kind, figure, load_model, ratio_text, Section};
use crate::dataset::{CellData, Dataset, RepOutcome};
use crate::format::{self, Table};
use crate::metrics::{FAILURES, P50_US, P90_US, P99_US, QPS};

/// Cells compared against each other share everything but the coordinates the table varies;
/// this is the cell with `server` and `mode` blanked (and `conns` too, when `with_conns` is
/// false), as a key.
fn shape(cell: &Cell, with_conns: bool) -> Cell {
    Cell {
        server: String::new(),
        mode: BenchMode::Short,
        conns: if with_conns { cell.conns } else { 0 },
        ..cell.clone()
    }
}

/// `conns 100, rounds 10`: the shape's coordinates for a heading.
fn describe(cell: &Cell, with_conns: bool) -> String {
    let mut parts = Vec::new();
    if with_conns {
        parts.push(format!("{} connections", cell.conns));
    }
    if let Some(r) = cell.rounds {
        parts.push(format!("{r} rounds"));
    }
    if let Some(d) = cell.duration {
        parts.push(format!("{d}"));
    }
    if cell.payload != 12 {
        parts.push(format!("{}-byte payload", cell.payload));
    }
    parts.join(", ")
}

/// Groups `items` by `key`, keeping first-appearance order.
fn group_by<T, K: PartialEq>(
    items: impl IntoIterator<Item = T>,
    key: impl Fn(&T) -> K,
) -> Vec<(K, Vec<T>)> {
    let mut groups: Vec<(K, Vec<T>)> = Vec::new();
    for item in items {
        let k = key(&item);
        match groups.iter_mut().find(|(g, _)| *g == k) {
            Some((_, v)) => v.push(item),
            None => groups.push((k, vec![item])),
        }
    }
    groups
}

/// Short/long pairs of cells grouped by shape (connections, rounds): the groups that have at
/// least two servers, or the only group; a scan of one server is left to [`scans`].
type Pair<'d, 'a> = (&'d CellData<'a>, &'d CellData<'a>);

fn quadrant_groups<'d, 'a>(ds: &'d Dataset<'a>) -> Vec<(Cell, Vec<Pair<'d, 'a>>)> {
    let pairs: Vec<Pair<'d, 'a>> = ds
        .of_mode(BenchMode::Short)
        .filter_map(|s| ds.twin(&s.cell, BenchMode::Long).map(|l| (s, l)))
        .collect();
    let groups = group_by(pairs, |(s, _)| shape(&s.cell, true));
    let single = groups.len() == 1;
    groups
        .into_iter()
        .filter(|(_, pairs)| single || pairs.len() >= 2)
        .collect()
}

/// (a) The four-quadrant QPS matrix: one row per server with short QPS, long QPS and the
/// long/short gain, then the gap of each further server to the first (seed 001 §3.1), for
/// each of [`quadrant_groups`].
pub fn quadrants(ds: &Dataset<'_>) -> Vec<Section> {
    quadrant_groups(ds)
        .into_iter()
        .map(|(shape, pairs)| {
            let mut t = Table::new(["Server", "Short QPS", "Long QPS", "Long/short gain", "Failures short / long"]);
            for (s, l) in &pairs {
                t.row([
                    s.cell.server.clone(),
                    figure(s, QPS),
                    figure(l, QPS),
                    ratio_text(l, s, QPS),
                    format!("{} / {}", failures_by_kind(s), failures_by_kind(l)),
                ]);
            }
            let (first_s, first_l) = pairs[0];
            for (s, l) in &pairs[1..] {
                t.row([
                    format!("Gap {}/{}", s.cell.server, first_s.cell.server),
                    ratio_text(s, first_s, QPS),
                    ratio_text(l, first_l, QPS),
                    String::new(),
                    String::new(),
                ]);
            }
            let cells: Vec<&CellData<'_>> = pairs.iter().flat_map(|(s, l)| [*s, *l]).collect();
            Section::new(
                format!("QPS matrix, server × mode ({})", describe(&shape, true)),
                format!(
                    "Seed 000 §6.1 / seed 001 §3.1: QPS (req/s) median [min–max] (95% CI) over repetitions; gain and gap \
                     are ratios with their 95% CI; failed requests by kind, summed over repetitions. {}",
                    load_model(&cells)
                ),
                t,
            )
            .covers(&[QPS], &cells)
        })
        .collect()
}

/// Latency ratios beside (a): per server P50/P90/P99 long/short (seed 000 §5, the 提升倍数
/// row; §6.2), then long-mode P50/P90/P99 of each further server to the first (seed 001
/// §3.3, the 差距 row).
pub fn latency_ratios(ds: &Dataset<'_>) -> Vec<Section> {
    let metrics = [P50_US, P90_US, P99_US];
    quadrant_groups(ds)
        .into_iter()
        .map(|(shape, pairs)| {
            let mut t = Table::new(["Ratio", "P50", "P90", "P99"]);
            for (s, l) in &pairs {
                let mut row = vec![format!("{} long/short", s.cell.server)];
                row.extend(metrics.iter().map(|m| ratio_text(l, s, m)));
                t.row(row);
            }
            let (_, first_l) = pairs[0];
            for (_, l) in &pairs[1..] {
                let mut row = vec![format!("Long {}/{}", l.cell.server, first_l.cell.server)];
                row.extend(metrics.iter().map(|m| ratio_text(l, first_l, m)));
                t.row(row);
            }
            let cells: Vec<&CellData<'_>> = pairs.iter().flat_map(|(s, l)| [*s, *l]).collect();
            Section::new(
                format!("Latency ratios, server × mode ({})", describe(&shape, true)),
                format!(
                    "Seed 000 §5–6.2 / seed 001 §3.3: ratios of each percentile over repetitions, with their 95% CI \
                     (below 1: the numerator is faster). {}",
                    load_model(&cells)
                ),
                t,
            )
            .covers(&metrics, &cells)
        })
        .collect()
}

/// (b) QPS of every repetition, with the median, the range (max − min, the seeds' 极差) and
/// the coefficient of variation (seed 001 §3.2), for short, long and sustain cells.
pub fn per_repetition(ds: &Dataset<'_>) -> Option<Section> {
    let cells: Vec<&CellData<'_>> = ds.cells.iter().filter(|c| c.sends_requests()).collect();
    let reps = cells.iter().map(|c| c.reps_planned).max()?;
    let mut header = vec!["Cell".to_string()];
    header.extend((1..=reps).map(|r| format!("R{r}")));
    header.extend([
        "Median".into(),
        "Range".into(),
        "CV".into(),
        "Failures (all reps)".into(),
    ]);
    let mut t = Table::new(header);
    for c in &cells {
        let mut row = vec![c.id.clone()];
        for rep in 1..=reps {
            row.push(match c.outcome(rep) {
                RepOutcome::Ok(r) => r
                    .bench
                    .as_ref()
                    .map_or_else(|| "—".into(), |b| format::num(b.qps)),
                RepOutcome::Failed(r) => format!(
                    "failed: {}",
                    crate::dataset::failure_reason(r).unwrap_or_default()
                ),
                RepOutcome::Missing if rep <= c.reps_planned => "missing".into(),
                RepOutcome::Missing => String::new(),
            });
        }
        match c.summary(QPS) {
            Some(s) => row.extend([
                format::num(s.median),
                format::num(s.range()),
                s.cv().map_or_else(
                    || "—".into(),
                    |cv| {
                        format!(
                            "{}{}",
                            format::pct(cv),
                            if s.is_noisy() { " ⚠ noisy" } else { "" }
                        )
                    },
                ),
            ]),
            None => row.extend(["—".into(), "—".into(), "—".into()]),
        }
        row.push(failures_by_kind(c));
        t.row(row);
    }
    Some(
        Section::new(
            "QPS per repetition",
            format!(
                "Seed 001 §3.2: QPS (req/s) of each repetition; range = max − min; CV > 10% is flagged noisy; failed \
                 requests by kind. {}",
                load_model(&cells)
            ),
            t,
        )
        .covers(&[QPS], &cells),
    )
}

/// `P50 / P90 / P99 / P99.9` of a merged histogram, µs.
fn merged_text(c: &CellData<'_>, notes: &mut Vec<String>) -> String {
    match c.merged_histogram() {
        Ok(Some(h)) => {
            let Some(s) = LatencySummary::from_histogram(&h) else {
                return "—".into();
            };
            format!(
                "{} / {} / {} / {}",
                format::num(s.p50),
                format::num(s.p90),
                format::num(s.p99),
                format::num(s.p999)
            )
        }
        Ok(None) => "—".into(),
        Err(e) => {
            notes.push(format!("Histogram not usable: {e}."));
            "— (bad histogram)".into()
        }
    }
}

/// (c) P50/P90/P99 per cell: median over repetitions of each repetition's percentile, and the
/// percentiles of the merged histogram (which keeps the tail that averaging percentiles
/// loses).
pub fn percentiles(ds: &Dataset<'_>) -> Option<Section> {
    // A sustain run that measured no latency (all zeros) has nothing to show; a cell without
    // usable runs stays, marked missing or failed.
    let measured = |c: &CellData<'_>| {
        c.ok_runs().next().is_none()
            || c.ok_runs()
                .any(|r| r.bench.as_ref().is_some_and(|b| b.latency_us.is_some()))
    };
    let cells: Vec<&CellData<'_>> = ds
        .cells
        .iter()
        .filter(|c| c.sends_requests() && measured(c))
        .collect();
    if cells.is_empty() {
        return None;
    }
    let mut notes = Vec::new();
    let mut t = Table::new([
        "Cell",
        "Reps",
        "P50 (µs)",
        "P90 (µs)",
        "P99 (µs)",
        "Merged P50 / P90 / P99 / P99.9 (µs)",
    ]);
    for c in &cells {
        let clamped: u64 = c
            .ok_runs()
            .filter_map(|r| r.bench.as_ref())
            .map(|b| b.latency_out_of_range)
            .sum();
        if clamped > 0 {
            notes.push(format!(
                "{}: {clamped} latencies fell outside the histogram's range (1 ns to 1 h) and \
                 count at its nearest bound, so its extreme percentiles are bounds, not \
                 measurements.",
                c.id
            ));
        }
        t.row([
            c.id.clone(),
            c.reps_text(),
            figure(c, P50_US),
            figure(c, P90_US),
            figure(c, P99_US),
            merged_text(c, &mut notes),
        ]);
    }
    let mut s = Section::new(
        "Latency percentiles per cell",
        format!(
            "Seed 000 §5 / seed 001 §3.3. Short: connect → close; long: send → receive. Per-repetition percentiles: \
             median [min–max] (95% CI); merged: all repetitions' histograms added. {}",
            load_model(&cells)
        ),
        t,
    )
    .covers(&[P50_US, P90_US, P99_US], &cells);
    s.notes = notes;
    Some(s)
}

/// (d) The connection scan (seed 003 §3): per server and shape with at least two connection
/// counts, one row per count with short and long QPS, long/short, long P50/P99 and short
/// failures.
pub fn scans(ds: &Dataset<'_>) -> Vec<Section> {
    let cells = ds
        .cells
        .iter()
        .filter(|c| matches!(c.cell.mode, BenchMode::Short | BenchMode::Long));
    let groups = group_by(cells, |c| (c.cell.server.clone(), shape(&c.cell, false)));
    groups
        .into_iter()
        .filter_map(|((server, shape), cells)| {
            let mut conns: Vec<u64> = cells.iter().map(|c| c.cell.conns).collect();
            conns.sort_unstable();
            conns.dedup();
            if conns.len() < 2 {
                return None;
            }
            let find = |n: u64, mode: BenchMode| cells.iter().copied().find(|c| c.cell.conns == n && c.cell.mode == mode);
            let mut t = Table::new([
                "Connections",
                "Short QPS",
                "Long QPS",
                "Long/short",
                "Long P50 (µs)",
                "Long P99 (µs)",
                "Short failures",
                "Failures by kind, short / long",
            ]);
            let text = |c: Option<&CellData<'_>>, metric: &str| c.map_or_else(|| "not planned".into(), |c| figure(c, metric));
            for n in conns {
                let (s, l) = (find(n, BenchMode::Short), find(n, BenchMode::Long));
                let ratio = match (s, l) {
                    (Some(s), Some(l)) => ratio_text(l, s, QPS),
                    _ => "—".into(),
                };
                let kinds = |c: Option<&CellData<'_>>| c.map_or_else(|| "—".into(), failures_by_kind);
                t.row([
                    n.to_string(),
                    text(s, QPS),
                    text(l, QPS),
                    ratio,
                    text(l, P50_US),
                    text(l, P99_US),
                    text(s, FAILURES),
                    format!("{} / {}", kinds(s), kinds(l)),
                ]);
            }
            Some(
                Section::new(
                    format!("Connection scan, {server} ({})", describe(&shape, false)),
                    format!(
                        "Seed 003 §3: QPS (req/s) and long-connection latency by connection count; long/short is a ratio \
                         with its 95% CI; failures per run and by kind over all repetitions. {}",
                        load_model(&cells)
                    ),
                    t,
                )
                .covers(&[QPS, P50_US, P99_US, FAILURES], &cells),
            )
        })
        .collect()
}
