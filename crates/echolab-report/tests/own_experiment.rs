//! An experiment of the user's own, with no `reference:`: its report says nothing of a seed,
//! and cells too short to be stable are named with the `window:` key that fixes them.

mod common;

use common::{closed_loop_runs, manifest, rendered};
use echolab_core::experiment::Experiment;
use echolab_core::results::RunStatus;

const OWN: &str = "name: mine\nquestion: does my change help?\nrepetitions: 3\nmatrix:\n  - servers: [epoll-et]\n    modes: [short, long]\n    conns: [50]\n    rounds: [10]\n";

#[test]
fn a_report_without_a_seed_speaks_of_no_seed_and_names_the_window_key() {
    let e = Experiment::parse(OWN, "mine.yaml").unwrap();
    // 500 requests at 20000-22000 req/s: 23-25 ms per cell, far under 0.1 s.
    let mut runs = closed_loop_runs(
        &e,
        |_| vec![20_000.0, 21_000.0, 22_000.0],
        |c, q| c.conns as f64 / q * 1e6,
    );
    for r in &mut runs {
        let b = r.bench.as_mut().unwrap();
        b.duration_s = 500.0 / b.qps;
    }
    let (_tmp, summary, md) = rendered("own", &manifest(e, RunStatus::Complete, 6), &runs);
    assert!(summary.verdicts.is_empty());
    assert!(!md.to_lowercase().contains("seed"), "{md}");
    assert!(
        md.contains("## Why results may differ from another run"),
        "{md}"
    );
    let warning = md
        .lines()
        .find(|l| l.contains("Cells too short to be stable"))
        .unwrap_or_else(|| panic!("{md}"));
    assert!(
        warning.contains("epoll-et_long_c50_r10 (0.0238 s)"),
        "{warning}"
    );
    assert!(warning.contains("`window:`"), "{warning}");
    assert!(
        !warning.contains("  "),
        "one sentence, not a broken line: {warning}"
    );
}

const OWN_SERVER: &str = "name: mine\nquestion: q\nrepetitions: 3\nwindow: 1s\nmatrix:\n  - servers:\n      - epoll-et\n      - {name: socat-pipe, command: [socat, \"TCP-LISTEN:7000,fork\", PIPE], port: 7000}\n    modes: [short, long]\n    conns: [50]\n    rounds: [10]\n";

#[test]
fn a_server_of_your_own_is_reported_with_what_is_not_measured_of_it() {
    let e = Experiment::parse(OWN_SERVER, "mine.yaml").unwrap();
    let mut runs = closed_loop_runs(
        &e,
        |c| {
            if c.server == "socat-pipe" {
                vec![3_000.0, 3_100.0, 3_200.0]
            } else {
                vec![30_000.0, 31_000.0, 32_000.0]
            }
        },
        |c, q| c.conns as f64 / q * 1e6,
    );
    for r in &mut runs {
        r.samples = (1..=3)
            .map(|k| echolab_core::results::ResourceSample {
                t_s: k as f64 * 0.5,
                cpu_pct: 90.0,
                ..Default::default()
            })
            .collect();
    }
    let (_tmp, _summary, md) = rendered("own-server", &manifest(e, RunStatus::Complete, 12), &runs);
    assert!(
        md.contains("**socat-pipe** is not an echo-server model but the experiment's own server (`socat TCP-LISTEN:7000,fork PIPE`, port 7000)"),
        "{md}"
    );
    assert!(
        md.contains("system calls, epoll waits and events are not counted"),
        "{md}"
    );
    // Its cells are measured and compared like any other.
    assert!(md.contains("| socat-pipe_short_c50_d1s |"), "{md}");
    assert!(md.contains("Gap socat-pipe/epoll-et"), "{md}");
}
