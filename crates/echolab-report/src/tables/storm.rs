//! Table (f): select vs epoll under many connections (seed 004 §2): the time to establish N
//! connections (connect-storm, "deadlink", table 2-1) and the server's CPU% and memory while N
//! connections fetch 1 KiB replies (sustain, "activelink", table 2-2), one column per server.

use echolab_core::experiment::BenchMode;

use super::{failures_by_kind, figure, load_model, ratio_text, Section};
use crate::dataset::{CellData, Dataset};
use crate::format::Table;
use crate::metrics::{CONNECT_S, CPU_PCT, FAILURES, MEM_MIB, QPS};

/// A table of `mode` cells: one row per connection count, for each server one column per
/// metric and one of failures by kind, and `first/second` ratio columns of `ratio_metric`
/// when there are exactly two servers.
fn per_conns_table<'d, 'a>(
    ds: &'d Dataset<'a>,
    mode: BenchMode,
    columns: &[(&str, &str)],
    ratio_metric: &str,
) -> Option<(Table, Vec<&'d CellData<'a>>)> {
    let cells: Vec<&CellData<'_>> = ds.of_mode(mode).collect();
    if cells.is_empty() {
        return None;
    }
    let mut servers: Vec<&str> = Vec::new();
    let mut conns: Vec<u64> = Vec::new();
    for c in &cells {
        if !servers.contains(&c.cell.server.as_str()) {
            servers.push(&c.cell.server);
        }
        conns.push(c.cell.conns);
    }
    conns.sort_unstable();
    conns.dedup();
    let mut header = vec!["Connections".to_string()];
    for s in &servers {
        header.extend(columns.iter().map(|(_, title)| format!("{s} {title}")));
        header.push(format!("{s} failures by kind (all reps)"));
    }
    let pair = (servers.len() == 2).then(|| (servers[0], servers[1]));
    if let Some((a, b)) = pair {
        header.push(format!("{a}/{b}, {ratio_metric}"));
    }
    let mut t = Table::new(header);
    let find = |server: &str, n: u64| {
        cells
            .iter()
            .copied()
            .find(|c| c.cell.server == server && c.cell.conns == n)
    };
    for n in conns {
        let mut row = vec![n.to_string()];
        for s in &servers {
            for (metric, _) in columns {
                row.push(find(s, n).map_or_else(|| "not planned".into(), |c| figure(c, metric)));
            }
            row.push(find(s, n).map_or_else(|| "not planned".into(), failures_by_kind));
        }
        if let Some((a, b)) = pair {
            row.push(match (find(a, n), find(b, n)) {
                (Some(x), Some(y)) => ratio_text(x, y, ratio_metric),
                _ => "—".into(),
            });
        }
        t.row(row);
    }
    Some((t, cells))
}

/// Connect-storm: time to establish N connections per server (seed 004 table 2-1).
pub fn connect_storm(ds: &Dataset<'_>) -> Option<Section> {
    let columns = [
        (CONNECT_S, "time to establish (s)"),
        (FAILURES, "failed connections"),
    ];
    let (t, cells) = per_conns_table(ds, BenchMode::ConnectStorm, &columns, CONNECT_S)?;
    Some(
        Section::new(
            "Connect storm: time to establish N connections",
            "Seed 004 table 2-1: seconds from the first connect until all N connections were established, median [min–max] \
             (95% CI); the ratio with its 95% CI. Load: N connects issued at once, no requests (seed 004's deadlink).",
            t,
        )
        .covers(&[CONNECT_S, FAILURES], &cells),
    )
}

/// Sustain: server CPU% and memory (MiB) per N connections per server (seed 004 table 2-2).
pub fn sustain(ds: &Dataset<'_>) -> Option<Section> {
    let columns = [
        (CPU_PCT, "CPU (% of a core)"),
        (MEM_MIB, "memory (MiB)"),
        (QPS, "QPS"),
    ];
    let (t, cells) = per_conns_table(ds, BenchMode::Sustain, &columns, CPU_PCT)?;
    let load = load_model(&cells);
    Some(
        Section::new(
            "Sustain: server CPU and memory with N busy connections",
            format!(
                "Seed 004 table 2-2: mean of the server host's resource samples during each run (memory in MiB, the \
                 server's resident bytes, not a share of this host's memory), then median [min–max] (95% CI) over \
                 repetitions; QPS in req/s; failed requests by kind. {load}"
            ),
            t,
        )
        .covers(&[CPU_PCT, MEM_MIB, QPS, FAILURES], &cells),
    )
}
