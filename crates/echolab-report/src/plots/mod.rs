//! The plots, SVG only, each drawn only when the data supports it:
//!
//! - `qps_vs_conns.svg`: QPS vs connection count, one line per server and mode (short/long);
//!   when some server has two or more connection counts (seed 003);
//! - `latency_<cell-id>.svg`: the latency percentile curve of a cell from its repetitions'
//!   merged HdrHistograms, x = 1/(1−q) on a log scale labelled as percentiles (the usual
//!   HdrHistogram plot), y = latency in µs on a log scale;
//! - `connect_storm.svg`: time to establish N connections vs N, one line per server (seed 004
//!   table 2-1);
//! - `sustain_cpu.svg`: server CPU% vs N, one line per server (seed 004 table 2-2);
//! - `qps_per_cell.svg`: every short/long cell's QPS with its 95% interval and the seed's
//!   figure ([`cells`]);
//! - `timeline_<cell-id>.svg`: QPS and P99 per interval and the server's CPU per sample, one
//!   line per repetition, for cells measured over several intervals ([`timeline`]).
//!
//! Every axis carries numbers and its unit: log axes are ticked at 1-2-5 values (1, 2, 5, 10,
//! 20, …; [`log_ticks`]) within a range snapped to such values, so a narrow range (a 20 ms
//! path's 20–50 ms latencies) still has labelled ticks, each labelled once. Medians are dots,
//! min–max over repetitions are error bars, and the seed's published figures for the same
//! cells are hollow squares joined by a dashed line; the legend, which says so, sits in its
//! own panel to the right of the chart, where it cannot hide data.

use std::ops::Range;

use echolab_core::experiment::{BenchMode, Reference};
use hdrhistogram::Histogram;
use plotters::prelude::*;

mod cells;
mod timeline;

use crate::dataset::{CellData, Dataset};
use crate::inference::Summary;
use crate::metrics::{CONNECT_S, CPU_PCT, P50_US, P90_US, P99_US, QPS};

/// Directory of the plots inside a results directory.
pub const PLOTS_DIR: &str = "plots";

const SIZE: (u32, u32) = (1000, 560);
/// Width of the legend panel on the right.
const LEGEND_W: u32 = 250;
const FONT: &str = "sans-serif";

/// What the plots section says once, above the plots; each plot has its own caption below it
/// ([`Plot::caption`]) saying exactly what it draws.
pub const CAPTION: &str =
    "Each plot's caption says what it draws. Log axes are ticked at 1-2-5 values.";

/// A rendered plot: its file name inside [`PLOTS_DIR`] and its SVG text.
#[derive(Debug, Clone)]
pub struct Plot {
    /// File name, e.g. `qps_vs_conns.svg`.
    pub file: String,
    /// What it shows, for the report's link text.
    pub title: String,
    /// SVG document.
    pub svg: String,
    /// What is drawn, exactly: marks, lines, what they summarise.
    pub caption: String,
}

/// The 1-2-5 values (…, 0.5, 1, 2, 5, 10, 20, …) in `low..=high`; when that gives fewer than
/// three, the finer 1-1.5-2-3-5-7 sequence, so that a range within one decade still shows
/// numbers. Empty for a range that is not positive.
pub fn log_ticks(low: f64, high: f64) -> Vec<f64> {
    if !(low > 0.0 && high >= low && high.is_finite()) {
        return Vec::new();
    }
    let within = |mantissas: &[f64]| {
        let mut out = Vec::new();
        for d in (low.log10().floor() as i32 - 1)..=(high.log10().ceil() as i32) {
            for m in mantissas {
                // Rounded to 12 significant digits so 3 × 10⁻¹ prints as 0.3, not 0.30000000000000004.
                let v = format!("{:.12e}", m * 10f64.powi(d))
                    .parse::<f64>()
                    .unwrap_or(0.0);
                if v >= low * (1.0 - 1e-9) && v <= high * (1.0 + 1e-9) {
                    out.push(v);
                }
            }
        }
        out
    };
    let ticks = within(&[1.0, 2.0, 5.0]);
    if ticks.len() >= 3 {
        ticks
    } else {
        within(&[1.0, 1.5, 2.0, 3.0, 5.0, 7.0])
    }
}

/// An axis tick's label: whole numbers without decimals (`50`, `1000`), others as the
/// report prints numbers (`0.5`, `2.50`).
pub fn tick_label(v: f64) -> String {
    if v.fract() == 0.0 && v.is_finite() {
        format!("{v:.0}")
    } else {
        crate::format::num(v)
    }
}

/// The largest 1-2-5 value at or below `v` (v > 0).
fn snap_down(v: f64) -> f64 {
    let d = 10f64.powi(v.log10().floor() as i32);
    [5.0, 2.0, 1.0]
        .into_iter()
        .map(|m| m * d)
        .find(|x| *x <= v * (1.0 + 1e-9))
        .unwrap_or(d)
}

/// The smallest 1-2-5 value at or above `v` (v > 0).
fn snap_up(v: f64) -> f64 {
    let d = 10f64.powi(v.log10().floor() as i32);
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * d)
        .find(|x| *x >= v * (1.0 - 1e-9))
        .unwrap_or(10.0 * d)
}

/// A log-axis range around `low..high` with 1-2-5 ends and some room for markers.
fn log_range(low: f64, high: f64) -> Range<f64> {
    snap_down(low / 1.1)..snap_up(high * 1.1)
}

/// One line of a metric-vs-connections plot: (connections, summary over repetitions), and
/// the seed's figures for the same server and mode.
struct Series {
    label: String,
    points: Vec<(f64, Summary)>,
    seed: Vec<(f64, f64)>,
}

/// The seed's figures of `metric` for `server` and `mode` by connection count.
fn seed_points(
    reference: &Reference,
    server: &str,
    mode: BenchMode,
    metric: &str,
) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = reference
        .figures
        .iter()
        .filter(|f| {
            f.cell.server.as_deref().is_none_or(|s| s == server)
                && f.cell.mode.is_none_or(|m| m == mode)
        })
        .filter_map(|f| Some((f.cell.conns? as f64, *f.values.get(metric)?)))
        .collect();
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    out.dedup_by(|a, b| a.0 == b.0);
    out
}

/// Lines of `metric` vs connections for cells of `modes`, one per server and mode.
fn series(
    ds: &Dataset<'_>,
    reference: &Reference,
    modes: &[BenchMode],
    metric: &str,
) -> Vec<Series> {
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
                out.push(Series {
                    label,
                    seed: seed_points(reference, &server, *mode, metric),
                    points,
                });
            }
        }
    }
    out
}

/// One legend entry: a colour, a label, and whether it is drawn as a line with dots (ours) or
/// a dashed line with hollow squares (the seed's).
struct LegendEntry {
    color: RGBAColor,
    label: String,
    seed: bool,
}

/// Draws the legend panel: the entries, then what the marks mean.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    entries: &[LegendEntry],
    notes: &[&str],
) -> Result<(), Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    let text = (FONT, 14).into_font().color(&BLACK);
    let mut y = 60;
    for e in entries {
        let style = e.color.stroke_width(2);
        if e.seed {
            area.draw(&PathElement::new(vec![(10, y), (16, y)], style))?;
            area.draw(&PathElement::new(vec![(22, y), (28, y)], style))?;
            area.draw(&Rectangle::new([(15, y - 4), (23, y + 4)], style))?;
        } else {
            area.draw(&PathElement::new(vec![(10, y), (30, y)], style))?;
            area.draw(&Circle::new((20, y), 4, e.color.filled()))?;
        }
        area.draw_text(&e.label, &text, (38, y - 7))?;
        y += 22;
    }
    y += 10;
    let small = (FONT, 12).into_font().color(&BLACK.mix(0.8));
    for n in notes {
        area.draw_text(n, &small, (10, y))?;
        y += 17;
    }
    Ok(())
}

/// The notes under the legend of a metric-vs-connections plot.
const VS_CONNS_NOTES: [&str; 3] = [
    "dot: median over repetitions",
    "bar: min–max over repetitions",
    "hollow square: seed's figure",
];

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
        .flat_map(|s| {
            s.points
                .iter()
                .map(|p| p.1.max)
                .chain(s.seed.iter().map(|p| p.1))
        })
        .fold(0.0, f64::max);
    let x_range = log_range(xs[0], xs[xs.len() - 1]);
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
        let (plot_area, legend_area) = root.split_horizontally(SIZE.0 - LEGEND_W);
        let x_ticks = log_ticks(x.start, x.end);
        let mut chart = ChartBuilder::on(&plot_area)
            .caption(title, (FONT, 22))
            .margin(16)
            .x_label_area_size(50)
            .y_label_area_size(80)
            .build_cartesian_2d(x.log_scale().with_key_points(x_ticks), y)?;
        chart
            .configure_mesh()
            .x_desc("connections (log scale)")
            .y_desc(y_desc)
            .x_label_formatter(&|v| tick_label(*v))
            .y_label_formatter(&|v| tick_label(*v))
            .draw()?;
        let mut legend = Vec::new();
        for (i, s) in series.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            let medians: Vec<(f64, f64)> = s.points.iter().map(|(x, s)| (*x, s.median)).collect();
            chart.draw_series(LineSeries::new(medians.clone(), color.stroke_width(2)))?;
            chart.draw_series(medians.iter().map(|p| Circle::new(*p, 4, color.filled())))?;
            chart.draw_series(
                s.points
                    .iter()
                    .map(|(x, s)| ErrorBar::new_vertical(*x, s.min, s.median, s.max, color, 8)),
            )?;
            legend.push(LegendEntry {
                color,
                label: s.label.clone(),
                seed: false,
            });
            if !s.seed.is_empty() {
                draw_seed(&mut chart, &s.seed, color)?;
                legend.push(LegendEntry {
                    color,
                    label: format!("{} (seed)", s.label),
                    seed: true,
                });
            }
        }
        draw_legend(&legend_area, &legend, &VS_CONNS_NOTES)?;
        root.present()?;
    }
    Ok(svg)
}

/// The seed's points: hollow squares joined by a dashed line.
fn draw_seed<DB: DrawingBackend, X, Y>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<X, Y>>,
    points: &[(f64, f64)],
    color: RGBAColor,
) -> Result<(), Box<dyn std::error::Error>>
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
    DB::ErrorType: 'static,
{
    chart.draw_series(DashedLineSeries::new(
        points.to_vec(),
        6,
        4,
        color.stroke_width(1),
    ))?;
    chart.draw_series(points.iter().map(|p| {
        EmptyElement::at(*p) + Rectangle::new([(-5, -5), (5, 5)], color.stroke_width(2))
    }))?;
    Ok(())
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

/// The seed's P50/P90/P99 for `cell` at their x positions.
fn seed_percentiles(reference: &Reference, cell: &CellData<'_>) -> Vec<(f64, f64)> {
    let Some(f) = reference
        .figures
        .iter()
        .find(|f| f.cell.matches(&cell.cell))
    else {
        return Vec::new();
    };
    [(50.0, P50_US), (90.0, P90_US), (99.0, P99_US)]
        .into_iter()
        .filter_map(|(p, m)| Some((inverse_tail(p), *f.values.get(m)?)))
        .collect()
}

/// The latency percentile curve of one cell's merged histogram (ns), in µs, with the seed's
/// percentiles for the same cell.
fn latency_plot(
    cell: &CellData<'_>,
    h: &Histogram<u64>,
    seed: &[(f64, f64)],
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
    let ys = points.iter().map(|p| p.1).chain(seed.iter().map(|p| p.1));
    let y_min = ys.clone().fold(f64::INFINITY, f64::min);
    let y_max = ys.fold(0.0, f64::max);
    let y_range = log_range(y_min, y_max);
    let y_ticks = log_ticks(y_range.start, y_range.end);
    let keys: Vec<f64> = [0.0, 50.0, 90.0, 99.0, 99.9, 99.99, 99.999, 99.9999]
        .into_iter()
        .map(inverse_tail)
        .filter(|x| *x <= x_max * 1.0001)
        .collect();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let (plot_area, legend_area) = root.split_horizontally(SIZE.0 - LEGEND_W);
        let reps = cell.ok_runs().count();
        let mut chart = ChartBuilder::on(&plot_area)
            .caption(
                format!(
                    "Latency percentiles, {} ({reps} repetitions merged, {} requests)",
                    cell.id,
                    h.len()
                ),
                (FONT, 16),
            )
            .margin(16)
            .x_label_area_size(50)
            .y_label_area_size(80)
            .build_cartesian_2d(
                (1.0..x_max).log_scale().with_key_points(keys),
                y_range.log_scale().with_key_points(y_ticks),
            )?;
        chart
            .configure_mesh()
            .x_desc("percentile (log scale of 1/(1−q))")
            .y_desc("latency (µs, log scale)")
            .x_label_formatter(&percentile_label)
            .y_label_formatter(&|v| tick_label(*v))
            .draw()?;
        let blue = BLUE.to_rgba();
        chart.draw_series(LineSeries::new(points, blue.stroke_width(2)))?;
        // P50, P90 and P99 of the merged histogram, marked and labelled on the curve.
        for p in [50.0, 90.0, 99.0] {
            let x = inverse_tail(p);
            if x > x_max {
                continue;
            }
            let y = (h.value_at_quantile(p / 100.0) as f64 / 1000.0).max(0.001);
            chart.draw_series(std::iter::once(
                EmptyElement::at((x, y))
                    + Circle::new((0, 0), 5, blue.filled())
                    + Text::new(
                        format!("p{p:.0} {} µs", crate::format::num(y)),
                        (-10, -22),
                        (FONT, 13).into_font(),
                    ),
            ))?;
        }
        let mut legend = vec![LegendEntry {
            color: blue,
            label: "this run, all repetitions".into(),
            seed: false,
        }];
        if !seed.is_empty() {
            let red = RED.to_rgba();
            draw_seed(&mut chart, seed, red)?;
            legend.push(LegendEntry {
                color: red,
                label: "seed P50 / P90 / P99".into(),
                seed: true,
            });
        }
        draw_legend(
            &legend_area,
            &legend,
            &[
                "line: merged histogram of all",
                "usable repetitions",
                "dot: its P50, P90, P99",
                "hollow square: seed's mean",
                "percentile over its repetitions",
            ],
        )?;
        root.present()?;
    }
    Ok(svg)
}

/// Every plot the data supports, and a note for each that could not be drawn.
pub fn all(ds: &Dataset<'_>, reference: &Reference) -> (Vec<Plot>, Vec<String>) {
    let mut plots = Vec::new();
    let mut notes = Vec::new();
    let mut keep = |file: String,
                    title: String,
                    caption: String,
                    result: Option<Result<String, String>>| match result {
        Some(Ok(svg)) => plots.push(Plot {
            file,
            title,
            svg,
            caption,
        }),
        Some(Err(e)) => notes.push(format!("Plot {file} not drawn: {e}")),
        None => {}
    };
    let has_seed = !reference.figures.is_empty();
    let seed_marks = if has_seed {
        " Hollow squares joined by a dashed line: the seed's published figures for the same cells."
    } else {
        ""
    };
    let vs_conns = format!(
        "Dots: medians over repetitions, joined by a line per server and mode; bars: min–max over repetitions.{seed_marks}"
    );
    keep(
        "qps_per_cell.svg".into(),
        "QPS per cell".into(),
        format!(
            "Dots: each cell's QPS, the geometric mean over its repetitions; bars: its 95% confidence interval.{}",
            if has_seed {
                " Hollow squares: the seed's published mean for the same cell."
            } else {
                ""
            }
        ),
        cells::qps_per_cell(ds, reference),
    );
    let qps = series(ds, reference, &[BenchMode::Short, BenchMode::Long], QPS);
    keep(
        "qps_vs_conns.svg".into(),
        "QPS vs connections".into(),
        vs_conns.clone(),
        draw_vs_conns("QPS vs connections", "QPS (requests/s)", &qps),
    );
    for c in ds.cells.iter().filter(|c| c.sends_requests()) {
        let result = match c.merged_histogram() {
            Ok(Some(h)) if !h.is_empty() => Some(
                latency_plot(c, &h, &seed_percentiles(reference, c)).map_err(|e| e.to_string()),
            ),
            Ok(_) => None,
            Err(e) => Some(Err(e)),
        };
        keep(
            format!("latency_{}.svg", c.id),
            format!("Latency percentiles, {}", c.id),
            format!(
                "The latency at each percentile of {} (the inverse of its CDF), from the merged histograms of all its \
                 usable repetitions; dots mark P50, P90 and P99.{}",
                c.id,
                if has_seed {
                    " Hollow squares: the seed's P50/P90/P99 for the cell (means over its repetitions)."
                } else {
                    ""
                }
            ),
            result,
        );
        keep(
            format!("timeline_{}.svg", c.id),
            format!("Over time, {}", c.id),
            "One line per repetition: QPS and P99 of each interval echo-bench recorded (top, middle) and the server \
             host's CPU at each sample (bottom), against seconds into the measured window."
                .into(),
            timeline::timeline(c),
        );
    }
    let storm = series(ds, reference, &[BenchMode::ConnectStorm], CONNECT_S);
    keep(
        "connect_storm.svg".into(),
        "Connect storm: time to establish N connections".into(),
        vs_conns.clone(),
        draw_vs_conns(
            "Time to establish N connections",
            "time to establish all (s)",
            &storm,
        ),
    );
    let cpu = series(ds, reference, &[BenchMode::Sustain], CPU_PCT);
    keep(
        "sustain_cpu.svg".into(),
        "Sustain: server CPU vs connections".into(),
        vs_conns,
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

    #[test]
    fn log_ticks_are_1_2_5_and_fall_back_to_finer_within_a_decade() {
        assert_eq!(
            log_ticks(50.0, 2000.0),
            vec![50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0]
        );
        assert_eq!(log_ticks(0.1, 1.0), vec![0.1, 0.2, 0.5, 1.0]);
        // A 20 ms path: 20–50 ms has only two 1-2-5 values, so the finer sequence.
        assert_eq!(
            log_ticks(20_000.0, 50_000.0),
            vec![20_000.0, 30_000.0, 50_000.0]
        );
        assert!(log_ticks(0.0, 1.0).is_empty());
        assert_eq!((snap_down(47.4), snap_up(47.4)), (20.0, 50.0));
        assert_eq!((snap_down(100.0), snap_up(100.0)), (100.0, 100.0));
        assert_eq!(log_range(100.0, 1000.0), 50.0..2000.0);
    }
}
