//! `qps_per_cell.svg`: the headline figure of every short/long cell side by side, the
//! geometric mean over repetitions with its 95% interval (the figure the tables and the
//! claims use), and the seed's published mean where it gave one.

use echolab_core::experiment::{BenchMode, Reference};
use plotters::prelude::*;

use super::{draw_legend, tick_label, LegendEntry, FONT, LEGEND_W, SIZE};
use crate::dataset::Dataset;
use crate::metrics::QPS;

/// One cell's column: its id, our centre and interval, the seed's figure.
struct Column {
    id: String,
    centre: f64,
    low: f64,
    high: f64,
    seed: Option<f64>,
}

/// The plot, `None` when no short/long cell has QPS.
pub(super) fn qps_per_cell(
    ds: &Dataset<'_>,
    reference: &Reference,
) -> Option<Result<String, String>> {
    let columns: Vec<Column> = ds
        .cells
        .iter()
        .filter(|c| matches!(c.cell.mode, BenchMode::Short | BenchMode::Long))
        .filter_map(|c| {
            let s = c.summary(QPS)?;
            let (low, high) = s.ci95.map_or((s.centre, s.centre), |i| (i.low, i.high));
            let seed = reference
                .figures
                .iter()
                .find(|f| f.cell.matches(&c.cell))
                .and_then(|f| f.values.get(QPS).copied());
            Some(Column {
                id: c.id.clone(),
                centre: s.centre,
                low,
                high,
                seed,
            })
        })
        .collect();
    if columns.is_empty() {
        return None;
    }
    Some(draw(&columns).map_err(|e| format!("QPS per cell: {e}")))
}

fn draw(columns: &[Column]) -> Result<String, Box<dyn std::error::Error>> {
    let y_max = columns
        .iter()
        .map(|c| c.high.max(c.seed.unwrap_or(0.0)))
        .fold(0.0, f64::max)
        * 1.15;
    let n = columns.len();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let (plot_area, legend_area) = root.split_horizontally(SIZE.0 - LEGEND_W);
        let mut chart = ChartBuilder::on(&plot_area)
            .caption("QPS per cell", (FONT, 22))
            .margin(16)
            .x_label_area_size(90)
            .y_label_area_size(80)
            .build_cartesian_2d(-0.5..(n as f64 - 0.5), 0.0..y_max.max(1.0))?;
        let label = |x: &f64| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < n {
                columns[i as usize].id.clone()
            } else {
                String::new()
            }
        };
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n)
            .x_label_formatter(&label)
            .x_label_style((FONT, 12).into_font().transform(FontTransform::Rotate90))
            .y_desc("QPS (requests/s)")
            .y_label_formatter(&|v| tick_label(*v))
            .draw()?;
        let blue = BLUE.to_rgba();
        let red = RED.to_rgba();
        for (i, c) in columns.iter().enumerate() {
            let x = i as f64;
            chart.draw_series(std::iter::once(ErrorBar::new_vertical(
                x, c.low, c.centre, c.high, blue, 12,
            )))?;
            chart.draw_series(std::iter::once(Circle::new(
                (x, c.centre),
                5,
                blue.filled(),
            )))?;
            if let Some(seed) = c.seed {
                chart.draw_series(std::iter::once(
                    EmptyElement::at((x + 0.15, seed))
                        + Rectangle::new([(-5, -5), (5, 5)], red.stroke_width(2)),
                ))?;
            }
        }
        let mut legend = vec![LegendEntry {
            color: blue,
            label: "this run".into(),
            seed: false,
        }];
        if columns.iter().any(|c| c.seed.is_some()) {
            legend.push(LegendEntry {
                color: red,
                label: "seed".into(),
                seed: true,
            });
        }
        draw_legend(
            &legend_area,
            &legend,
            &[
                "dot: geometric mean over",
                "repetitions; bar: its 95% CI",
                "hollow square: seed's mean",
            ],
        )?;
        root.present()?;
    }
    Ok(svg)
}
