//! The plots, SVG only, each drawn only when the data supports it:
//!
//! - `qps_vs_conns.svg`: QPS vs connection count, one line per server and mode (short/long),
//!   median with min–max bars; when some server has two or more connection counts (seed 003);
//! - `latency_<cell-id>.svg`: the latency percentile curve of a cell from its repetitions'
//!   merged HdrHistograms, x = 1/(1−q) on a log scale labelled as percentiles (the usual
//!   HdrHistogram plot), y = latency in µs on a log scale;
//! - `connect_storm.svg`: time to establish N connections vs N, one line per server (seed 004
//!   table 2-1);
//! - `sustain_cpu.svg`: server CPU% vs N, one line per server (seed 004 table 2-2).

use std::ops::Range;

use echolab_core::experiment::BenchMode;
use hdrhistogram::Histogram;
use plotters::prelude::*;

use crate::dataset::{CellData, Dataset};
use crate::metrics::{CONNECT_S, CPU_PCT, QPS};
use crate::stats::Summary;

/// Directory of the plots inside a results directory.
pub const PLOTS_DIR: &str = "plots";

const SIZE: (u32, u32) = (900, 560);
const FONT: &str = "sans-serif";

/// A rendered plot: its file name inside [`PLOTS_DIR`] and its SVG text.
#[derive(Debug, Clone)]
pub struct Plot {
    /// File name, e.g. `qps_vs_conns.svg`.
    pub file: String,
    /// What it shows, for the report's link text.
    pub title: String,
    /// SVG document.
    pub svg: String,
}

/// One line of a metric-vs-connections plot: (connections, summary over repetitions).
struct Series {
    label: String,
    points: Vec<(f64, Summary)>,
}

/// Lines of `metric` vs connections for cells of `modes`, one per server and mode.
fn series(ds: &Dataset<'_>, modes: &[BenchMode], metric: &str) -> Vec<Series> {
    let mut out: Vec<Series> = Vec::new();
    for mode in modes {
        for server in ds.servers() {
            let cells: Vec<&CellData<'_>> = ds
                .of_mode(*mode)
                .filter(|c| c.cell.server == server)
                .collect();
            let mut points: Vec<(f64, Summary)> = cells
                .iter()
                .filter_map(|c| c.summary(metric).map(|s| (c.cell.conns as f64, s)))
                .collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            if !points.is_empty() {
                let label = if modes.len() > 1 {
                    format!("{server} {}", mode.name())
                } else {
                    server.clone()
                };
                out.push(Series { label, points });
            }
        }
    }
    out
}

/// Draws `series` with a log x axis (connections) and a linear y axis from 0; `None` when
/// fewer than two distinct connection counts have data.
fn draw_vs_conns(title: &str, y_desc: &str, series: &[Series]) -> Option<Result<String, String>> {
    let mut xs: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    if xs.len() < 2 {
        return None;
    }
    let y_max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1.max))
        .fold(0.0, f64::max);
    let x_range = (xs[0] / 1.25)..(xs[xs.len() - 1] * 1.25);
    let y_range = 0.0..if y_max > 0.0 { y_max * 1.1 } else { 1.0 };
    Some(
        render_vs_conns(title, y_desc, series, x_range, y_range)
            .map_err(|e| format!("{title}: {e}")),
    )
}

fn render_vs_conns(
    title: &str,
    y_desc: &str,
    series: &[Series],
    x: Range<f64>,
    y: Range<f64>,
) -> Result<String, Box<dyn std::error::Error>> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, (FONT, 22))
            .margin(16)
            .x_label_area_size(50)
            .y_label_area_size(80)
            .build_cartesian_2d(x.log_scale(), y)?;
        chart
            .configure_mesh()
            .x_desc("connections (log scale)")
            .y_desc(y_desc)
            .x_label_formatter(&|v| format!("{v:.0}"))
            .y_label_formatter(&|v| crate::format::num(*v))
            .draw()?;
        for (i, s) in series.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            let medians: Vec<(f64, f64)> = s.points.iter().map(|(x, s)| (*x, s.median)).collect();
            chart
                .draw_series(LineSeries::new(medians.clone(), color.stroke_width(2)))?
                .label(s.label.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
            chart.draw_series(medians.iter().map(|p| Circle::new(*p, 4, color.filled())))?;
            chart.draw_series(
                s.points
                    .iter()
                    .map(|(x, s)| ErrorBar::new_vertical(*x, s.min, s.median, s.max, color, 8)),
            )?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
    }
    Ok(svg)
}

/// 1/(1−q) for a percentile in [0, 100).
fn inverse_tail(percentile: f64) -> f64 {
    1.0 / (1.0 - percentile / 100.0)
}

/// A percentile label for x = 1/(1−q): `50%`, `99%`, `99.9%`.
fn percentile_label(x: &f64) -> String {
    let p = 100.0 * (1.0 - 1.0 / x);
    let s = format!("{p:.4}");
    format!("{}%", s.trim_end_matches('0').trim_end_matches('.'))
}

/// The latency percentile curve of one cell's merged histogram (ns), in µs.
fn latency_plot(
    cell: &CellData<'_>,
    h: &Histogram<u64>,
) -> Result<String, Box<dyn std::error::Error>> {
    // Resolve the tail down to one sample: beyond q = 1 − 1/count every quantile is the max.
    let x_max = (h.len() as f64).clamp(10.0, 1e6);
    let steps = 200;
    let points: Vec<(f64, f64)> = (0..=steps)
        .map(|k| {
            let x = x_max.powf(k as f64 / steps as f64);
            let q = 1.0 - 1.0 / x;
            (x, (h.value_at_quantile(q) as f64 / 1000.0).max(0.001))
        })
        .collect();
    let y_min = points.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
    let y_max = points.iter().map(|p| p.1).fold(0.0, f64::max);
    let keys: Vec<f64> = [0.0, 50.0, 90.0, 99.0, 99.9, 99.99, 99.999, 99.9999]
        .into_iter()
        .map(inverse_tail)
        .filter(|x| *x <= x_max * 1.0001)
        .collect();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let reps = cell.ok_runs().count();
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!(
                    "Latency percentiles, {} ({reps} repetitions merged, {} requests)",
                    cell.id,
                    h.len()
                ),
                (FONT, 18),
            )
            .margin(16)
            .x_label_area_size(50)
            .y_label_area_size(80)
            .build_cartesian_2d(
                (1.0..x_max).log_scale().with_key_points(keys),
                ((y_min / 1.5)..(y_max * 1.5)).log_scale(),
            )?;
        chart
            .configure_mesh()
            .x_desc("percentile (log scale of 1/(1−q))")
            .y_desc("latency (µs, log scale)")
            .x_label_formatter(&percentile_label)
            .y_label_formatter(&|v| crate::format::num(*v))
            .draw()?;
        chart.draw_series(LineSeries::new(points, BLUE.stroke_width(2)))?;
        root.present()?;
    }
    Ok(svg)
}

/// Every plot the data supports, and a note for each that could not be drawn.
pub fn all(ds: &Dataset<'_>) -> (Vec<Plot>, Vec<String>) {
    let mut plots = Vec::new();
    let mut notes = Vec::new();
    let mut keep =
        |file: String, title: String, result: Option<Result<String, String>>| match result {
            Some(Ok(svg)) => plots.push(Plot { file, title, svg }),
            Some(Err(e)) => notes.push(format!("Plot {file} not drawn: {e}")),
            None => {}
        };
    let qps = series(ds, &[BenchMode::Short, BenchMode::Long], QPS);
    keep(
        "qps_vs_conns.svg".into(),
        "QPS vs connections".into(),
        draw_vs_conns("QPS vs connections", "QPS (requests/s)", &qps),
    );
    for c in ds.cells.iter().filter(|c| c.sends_requests()) {
        let result = match c.merged_histogram() {
            Ok(Some(h)) if !h.is_empty() => Some(latency_plot(c, &h).map_err(|e| e.to_string())),
            Ok(_) => None,
            Err(e) => Some(Err(e)),
        };
        keep(
            format!("latency_{}.svg", c.id),
            format!("Latency percentiles, {}", c.id),
            result,
        );
    }
    let storm = series(ds, &[BenchMode::ConnectStorm], CONNECT_S);
    keep(
        "connect_storm.svg".into(),
        "Connect storm: time to establish N connections".into(),
        draw_vs_conns(
            "Time to establish N connections",
            "time to establish all (s)",
            &storm,
        ),
    );
    let cpu = series(ds, &[BenchMode::Sustain], CPU_PCT);
    keep(
        "sustain_cpu.svg".into(),
        "Sustain: server CPU vs connections".into(),
        draw_vs_conns(
            "Server CPU with N busy connections",
            "server CPU (% of one core)",
            &cpu,
        ),
    );
    (plots, notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_axis_labels() {
        assert_eq!(percentile_label(&1.0), "0%");
        assert_eq!(percentile_label(&inverse_tail(99.0)), "99%");
        assert_eq!(percentile_label(&inverse_tail(99.9)), "99.9%");
    }
}
