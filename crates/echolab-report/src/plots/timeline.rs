//! `timeline_<cell-id>.svg`: what happened over time within a cell, one line per repetition:
//! QPS and P99 of each interval echo-bench recorded (`--duration` cells record one per
//! second, `sustain` too) and the server host's CPU at each sample. Drawn only for cells
//! whose repetitions recorded at least two intervals.

use plotters::prelude::*;

use super::{tick_label, FONT, SIZE};
use crate::dataset::CellData;

/// One panel: a title, its unit, and one line per repetition.
struct Panel {
    title: &'static str,
    lines: Vec<(u64, Vec<(f64, f64)>)>,
}

/// The plot, `None` for a cell with fewer than two intervals in every repetition.
pub(super) fn timeline(cell: &CellData<'_>) -> Option<Result<String, String>> {
    let runs: Vec<_> = cell
        .ok_runs()
        .filter(|r| r.bench.as_ref().is_some_and(|b| b.intervals.len() >= 2))
        .collect();
    if runs.is_empty() {
        return None;
    }
    // An interval without a figure (no request completed in it: no latency) has no point.
    let per_interval = |f: fn(&echolab_core::stats::IntervalRecord) -> Option<f64>| {
        runs.iter()
            .map(|r| {
                let b = r.bench.as_ref().expect("filtered above");
                (
                    r.repetition,
                    b.intervals
                        .iter()
                        .filter_map(|i| Some((i.t_s, f(i)?)))
                        .collect::<Vec<_>>(),
                )
            })
            .collect::<Vec<_>>()
    };
    let panels = [
        Panel {
            title: "QPS per interval (requests/s)",
            lines: per_interval(|i| Some(i.qps)),
        },
        Panel {
            title: "P99 per interval (µs)",
            lines: per_interval(|i| i.latency_us.map(|l| l.p99)),
        },
        Panel {
            title: "server CPU per sample (% of one core)",
            lines: runs
                .iter()
                .map(|r| {
                    (
                        r.repetition,
                        r.samples.iter().map(|s| (s.t_s, s.cpu_pct)).collect(),
                    )
                })
                .collect(),
        },
    ];
    Some(draw(&cell.id, &panels).map_err(|e| format!("timeline of {}: {e}", cell.id)))
}

fn draw(id: &str, panels: &[Panel]) -> Result<String, Box<dyn std::error::Error>> {
    let x_max = panels
        .iter()
        .flat_map(|p| p.lines.iter().flat_map(|(_, l)| l.iter().map(|q| q.0)))
        .fold(0.0, f64::max)
        .max(1.0);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (SIZE.0, SIZE.1 * 3 / 2)).into_drawing_area();
        root.fill(&WHITE)?;
        let root = root.titled(&format!("Over time, {id}"), (FONT, 20))?;
        for (area, panel) in root.split_evenly((3, 1)).iter().zip(panels) {
            let y_max = panel
                .lines
                .iter()
                .flat_map(|(_, l)| l.iter().map(|q| q.1))
                .fold(0.0, f64::max)
                * 1.1;
            let mut chart = ChartBuilder::on(area)
                .caption(panel.title, (FONT, 15))
                .margin(10)
                .x_label_area_size(35)
                .y_label_area_size(80)
                .build_cartesian_2d(0.0..x_max * 1.02, 0.0..y_max.max(1.0))?;
            chart
                .configure_mesh()
                .x_desc("seconds")
                .x_label_formatter(&|v| tick_label(*v))
                .y_label_formatter(&|v| tick_label(*v))
                .draw()?;
            for (k, (rep, line)) in panel.lines.iter().enumerate() {
                let color = Palette99::pick(k).to_rgba();
                chart
                    .draw_series(LineSeries::new(line.clone(), color.stroke_width(2)))?
                    .label(format!("R{rep}"))
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
                chart.draw_series(line.iter().map(|p| Circle::new(*p, 3, color.filled())))?;
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()?;
        }
        root.present()?;
    }
    Ok(svg)
}
