//! summary.csv: one row per run, written by the launcher after each run so a run cut short
//! still has one. (echolab-report rewrites it with its own columns when it renders a report.)

use echolab_core::results::RunRecord;

/// File name inside the results directory.
pub const SUMMARY_FILE: &str = "summary.csv";

/// Column names, in order.
pub const COLUMNS: &[&str] = &[
    "cell",
    "server",
    "mode",
    "conns",
    "rounds",
    "repetition",
    "wall_s",
    "qps",
    "p50_us",
    "p90_us",
    "p99_us",
    "requests_ok",
    "requests_failed",
    "server_cpu_pct_mean",
    "server_mem_bytes_max",
    "error",
];

fn field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\"").replace('\n', " "))
    } else {
        s.to_string()
    }
}

/// The CSV text for `runs` (header line, then one line per run). Figures a run lacks are empty.
pub fn csv(runs: &[RunRecord]) -> String {
    let mut out = COLUMNS.join(",");
    out.push('\n');
    for r in runs {
        let b = r.bench.as_ref();
        let opt = |v: Option<f64>| v.map_or(String::new(), |x| format!("{x}"));
        let cpu_mean = if r.samples.is_empty() {
            None
        } else {
            Some(r.samples.iter().map(|s| s.cpu_pct).sum::<f64>() / r.samples.len() as f64)
        };
        let mem_max = r.samples.iter().map(|s| s.mem_bytes).max();
        let row = [
            r.cell.id(),
            r.cell.server.clone(),
            r.cell.mode.name().to_string(),
            r.cell.conns.to_string(),
            r.cell.rounds.map_or(String::new(), |x| x.to_string()),
            r.repetition.to_string(),
            format!("{:.3}", r.wall_s),
            opt(b.map(|b| b.qps)),
            opt(b.map(|b| b.latency_us.p50)),
            opt(b.map(|b| b.latency_us.p90)),
            opt(b.map(|b| b.latency_us.p99)),
            b.map_or(String::new(), |b| b.requests_ok.to_string()),
            b.map_or(String::new(), |b| b.requests_failed.to_string()),
            opt(cpu_mean),
            mem_max.map_or(String::new(), |m| m.to_string()),
            r.error.clone().unwrap_or_default(),
        ];
        out.push_str(&row.iter().map(|f| field(f)).collect::<Vec<_>>().join(","));
        out.push('\n');
    }
    out
}
