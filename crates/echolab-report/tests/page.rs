//! The plots a reader sees and the page they open: the SVGs parsed back (their texts are the
//! figures and labels the report claims), and report.html rendered by a real headless browser
//! (Debian's chromium, which scripts/test installs) and its screenshot checked for content.

mod common;

use std::path::Path;
use std::process::Command;

use common::{closed_loop_runs, manifest, rendered, shipped, svg_texts};
use echolab_core::experiment::BenchMode;
use echolab_core::results::RunStatus;
use echolab_core::stats::IntervalRecord;
use echolab_testkit::TempDir;

/// exp31 with three repetitions per cell at differing QPS, each long-cell run recorded over
/// three 1 s intervals.
fn exp31() -> (TempDir, String) {
    let e = shipped("exp31");
    let mut runs = closed_loop_runs(
        &e,
        |c| match c.mode {
            BenchMode::Long => vec![50_000.0, 52_000.0, 54_000.0],
            _ => vec![20_000.0, 21_000.0, 22_000.0],
        },
        |c, q| c.conns as f64 / q * 1e6,
    );
    for r in &mut runs {
        let rep = r.repetition as f64;
        if r.cell.mode == BenchMode::Long {
            let b = r.bench.as_mut().unwrap();
            b.intervals = (1..=3)
                .map(|k| IntervalRecord {
                    t_s: k as f64,
                    qps: 49_000.0 + 1000.0 * rep + 100.0 * k as f64,
                    requests_ok: 50_000,
                    latency_us: Some(echolab_core::hist::LatencySummary {
                        p99: 900.0 + 10.0 * rep,
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .collect();
        }
    }
    let (tmp, _, md) = rendered("page", &manifest(e, RunStatus::Complete, 12), &runs);
    (tmp, md)
}

#[test]
fn the_plots_draw_what_their_captions_say() {
    let (dir, md) = exp31();
    let plots = dir.path().join("plots");
    let cells = svg_texts(&std::fs::read_to_string(plots.join("qps_per_cell.svg")).unwrap());
    for id in [
        "epoll-lt_short_c100_d1s",
        "epoll-lt_long_c100_d1s",
        "epoll-et_short_c100_d1s",
        "epoll-et_long_c100_d1s",
    ] {
        assert!(
            cells.iter().any(|t| t == id),
            "{id} not labelled: {cells:?}"
        );
    }
    assert!(cells.iter().any(|t| t == "QPS (requests/s)"), "{cells:?}");
    assert!(
        cells.iter().any(|t| t == "seed"),
        "the seed's marks are in the legend: {cells:?}"
    );
    // The latency curve marks its P50, P90 and P99 with their values.
    let lat = svg_texts(
        &std::fs::read_to_string(plots.join("latency_epoll-et_long_c100_d1s.svg")).unwrap(),
    );
    for p in ["p50 ", "p90 ", "p99 "] {
        assert!(
            lat.iter().any(|t| t.starts_with(p) && t.ends_with(" µs")),
            "{p}: {lat:?}"
        );
    }
    // Long cells recorded 3 intervals per run: a timeline with one line per repetition; short
    // cells recorded none and get no timeline.
    let tl = svg_texts(
        &std::fs::read_to_string(plots.join("timeline_epoll-et_long_c100_d1s.svg")).unwrap(),
    );
    for t in [
        "R1",
        "R2",
        "R3",
        "QPS per interval (requests/s)",
        "P99 per interval (µs)",
    ] {
        assert!(tl.iter().any(|x| x == t), "{t}: {tl:?}");
    }
    assert!(!plots.join("timeline_epoll-et_short_c100_d1s.svg").exists());
    // Each plot has its caption under it, and the old "dots are medians" sentence is gone
    // from plots that draw lines.
    assert!(
        md.contains(
            "from the merged histograms of all its usable repetitions; dots mark P50, P90 and P99"
        ),
        "{md}"
    );
    assert!(md.contains("Dots: each cell's QPS, the geometric mean over its repetitions; bars: its 95% confidence interval."));
}

/// The share of pixels of a PNG that are not (near) white.
fn inked_share(path: &Path) -> f64 {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let channels = info.color_type.samples();
    let pixels = buf[..info.buffer_size()].chunks(channels);
    let (mut inked, mut all) = (0usize, 0usize);
    for p in pixels {
        all += 1;
        if p.iter().take(3).any(|v| *v < 200) {
            inked += 1;
        }
    }
    inked as f64 / all as f64
}

/// Debian's chromium binary.
fn chromium() -> String {
    for c in ["chromium", "chromium-browser"] {
        if Command::new(c)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return c.into();
        }
    }
    panic!(
        "this test needs a headless browser: apt-get install chromium (scripts/test installs it)"
    );
}

#[test]
fn a_headless_browser_renders_report_html() {
    let (dir, _) = exp31();
    let page = dir.path().join("report.html");
    let shot = dir.path().join("report.png");
    let out = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1280,2400",
        ])
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("file://{}", page.display()))
        .output()
        .unwrap();
    assert!(
        shot.exists(),
        "no screenshot: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A blank page is all white; a rendered report has headings, tables and plots.
    let inked = inked_share(&shot);
    assert!(
        inked > 0.02,
        "only {:.2}% of the page is drawn",
        inked * 100.0
    );
}
