//! A results directory made by the test itself, rendered, and checked against numbers computed
//! here by hand: the tables' figures, the claims' verdicts, the Little's-law flag, and a
//! partial directory.

mod common;

use echolab_core::results::RunStatus;
use echolab_report::claims::Verdict;

use common::*;

#[test]
fn a_complete_directory_gives_golden_tables_verdicts_and_flags() {
    let tmp = temp_dir("complete");
    results_dir(tmp.path(), RunStatus::Complete, |_, _| true, |_, _| None);
    let summary = echolab_report::render(tmp.path()).unwrap();
    let md = std::fs::read_to_string(tmp.path().join("report.md")).unwrap();

    // Header: what the numbers are.
    for needle in [
        "complete (run status: complete)",
        "42 usable of 42 planned",
        "loopback (loopback topology)",
        "Calibration passed",
        "| rtt_median | 45.0 us | 40.0–140 us | pass |",
        "Measured: rtt_median_us 45.0 (nominal 50.0).",
        "6.1.0-test-amd64",
        "sha256:feedface00",
        "0123abcd-dirty",
        "Test CPU @ 2.40GHz",
        "27.0.3",
        "| TCP congestion control | cubic |",
        "2026-11-30T01:57:37.000000Z",
        "| Link backend | none (loopback topology) |",
    ] {
        assert!(md.contains(needle), "header lacks {needle:?}:\n{md}");
    }
    assert!(summary.complete);
    assert_eq!(summary.counts.planned, 42);

    // (a) Four-quadrant matrix: medians with range, gain as a ratio of means.
    let quad = section(
        &md,
        "QPS matrix, server × mode (100 connections, 10 rounds)",
    );
    let et = row(quad, "epoll-et");
    assert!(
        // exp(mean ln ± 4.303 · sd ln / √3) of 24000, 25000, 26000.
        et[1].starts_with("25000 [24000–26000] (95% CI 22622–27599)"),
        "{et:?}"
    );
    assert!(et[2].starts_with("54000 [53000–55000]"), "{et:?}");
    assert!(et[3].starts_with("2.16× (95% CI 1.94–2.41×)"), "{et:?}");
    assert_eq!(et[4], "0 / 0", "failures by kind, short / long");
    let lt = row(quad, "epoll-lt");
    assert!(lt[3].starts_with("1.00×"), "{lt:?}");
    let gap = row(quad, "Gap epoll-et/epoll-lt");
    // Geometric means: 24987 / 26497 = 0.943; 53994 / 26500 = 2.038.
    assert!(
        gap[1].starts_with("0.943× (95% CI 0.845–1.05×)")
            && gap[2].starts_with("2.04× (95% CI 1.94–2.14×)"),
        "{gap:?}"
    );
    // The seed's figure beside it: our geometric mean, (53000 × 54000 × 55000)^(1/3) =
    // 53993.8, inside its own interval; 53993.8 / 53528 = 1.01.
    assert!(
        quad.contains(
            "| qps (req/s) | epoll-et_long_c100_r10 | 53528 | 53994 (51566–56536) | 1.01× |"
        ),
        "{quad}"
    );

    // Latency ratios beside (a): P50 = 0.9 × conns / QPS per repetition, so ET long/short is
    // the inverse of the QPS ratio of geometric means, 1 / 2.161 = 0.463 (interval
    // 0.415–0.516), and ET/LT long 1 / 2.038 = 0.491 (HdrHistogram buckets move the third
    // digit by at most 0.1%).
    let lat = section(
        &md,
        "Latency ratios, server × mode (100 connections, 10 rounds)",
    );
    assert!(
        row(lat, "epoll-et long/short")[1].starts_with("0.463× (95% CI 0.41"),
        "{lat}"
    );
    assert!(
        row(lat, "Long epoll-et/epoll-lt")[1].starts_with("0.491× (95% CI"),
        "{lat}"
    );

    // (3) Verdicts, one of each, beside the table.
    assert!(
        quad.contains(
            "long/short gain, ET: seed 2.15×, here 2.16× (95% CI 1.94–2.41×); band 1.87–2.47× (magnitude ±15%): \
             **reproduced**: our 95% CI 1.94–2.41× lies inside the band."
        ),
        "{quad}"
    );
    assert!(
        quad.contains("long/short gain, LT: seed 1.48×, here 1.00×"),
        "{quad}"
    );
    assert!(quad.contains("band 1.29–1.70× (magnitude ±15%): **refuted**: our 95% CI 0.953–1.05× lies wholly below the band."), "{quad}");
    let verdicts: Vec<(&str, Verdict)> = summary
        .claims
        .iter()
        .map(|(n, v)| (n.as_str(), *v))
        .collect();
    assert_eq!(
        verdicts,
        vec![
            ("long/short gain, ET", Verdict::Reproduced),
            ("long/short gain, LT", Verdict::Refuted),
            ("long/short at 500 connections, ET", Verdict::Inconclusive),
        ]
    );

    // (b) Per repetition, with the range and the noisy flag.
    let reps = section(&md, "QPS per repetition");
    assert_eq!(
        row(reps, "epoll-et_long_c500_r10"),
        [
            "epoll-et_long_c500_r10",
            "20000",
            "40000",
            "60000",
            "40000",
            "40000",
            "50.0% ⚠ noisy",
            "0"
        ]
    );
    assert_eq!(
        row(reps, "epoll-lt_long_c100_r10")[4..],
        ["26500", "200", "0.4%", "0"]
    );
    assert!(
        summary
            .noisy
            .iter()
            .any(|n| n.starts_with("epoll-et_long_c500_r10 (qps CV 50.0%")),
        "{:?}",
        summary.noisy
    );

    // (c) Percentiles: 90% of requests at 0.9 × mean, so the median P50 of the LT short cell
    // (26500 QPS) is 0.9 × 100 / 26500 s = 3396.2 µs; HdrHistogram reports the highest value
    // of its bucket (3 significant digits), 3398 µs, within 0.1%.
    let pct = section(&md, "Latency percentiles per cell");
    let lt_short = row(pct, "epoll-lt_short_c100_r10");
    assert!(lt_short[2].starts_with("3398 [3334–3463]"), "{lt_short:?}");
    let p50: f64 = lt_short[2].split(' ').next().unwrap().parse().unwrap();
    assert!((p50 / 3396.2 - 1.0).abs() < 0.001, "{p50}");
    // P99 is in the 10% at 1.9 × mean: 7170 µs; merged P99.9 is the slowest repetition's.
    assert!(lt_short[4].starts_with("7172 ["), "{lt_short:?}");
    assert!(lt_short[5].ends_with("/ 7311"), "{lt_short:?}");

    // (d) The scan of epoll-et over 100 and 500 connections, inconclusive claim beside it.
    let scan = section(&md, "Connection scan, epoll-et (10 rounds)");
    let at500 = row(scan, "500");
    assert!(
        at500[1].starts_with("31000 [30000–32000]") && at500[2].starts_with("40000 [20000–60000]"),
        "{at500:?}"
    );
    // Ratio of geometric means 36342 / 30989 = 1.17 (by hand, see qps_of), interval
    // 0.294–4.67×: positive however noisy the cell, and wider than the whole band.
    assert!(
        at500[3].starts_with("1.17× (95% CI 0.294–4.67×)"),
        "{at500:?}"
    );
    assert_eq!(at500[7], "0 / 0", "failures by kind");
    assert!(scan.contains("long/short at 500 connections, ET: seed 1.86×, here 1.17× (95% CI 0.294–4.67×); band 1.62–2.14× \
         (magnitude ±15%): **inconclusive**: our 95% CI 0.294–4.67× is wider than the band"), "{scan}");

    // (e) Syscalls: echo-bench's counts and the strace cross-check, seed 002's figures.
    let sys = section(
        &md,
        "Client system calls, short vs long (epoll-lt, 100 connections)",
    );
    let close = row(sys, "close() calls");
    assert!(
        close[1].starts_with("1004")
            && close[2].starts_with("104")
            && close[3].starts_with("-89.6%"),
        "{close:?}"
    );
    let strace_close_time = row(sys, "close() total time (s), strace");
    assert!(
        strace_close_time[1].starts_with("1.47") && strace_close_time[3].starts_with("-84.1%"),
        "{strace_close_time:?}"
    );
    let strace_total = row(sys, "total time of the above, strace (s)");
    assert!(
        strace_total[1].starts_with("3.23")
            && strace_total[2].starts_with("0.431")
            && strace_total[3].starts_with("-86.7%"),
        "{strace_total:?}"
    );

    // (f) Connect storm and sustain, per connection count, select vs epoll.
    let storm = section(&md, "Connect storm");
    let at300 = row(storm, "300");
    assert!(
        at300[1].starts_with("6.10 [6.00–6.20]") && at300[4].starts_with("0.0203 [0.0200–0.0207]"),
        "{at300:?}"
    );
    // Every repetition of select is 300× epoll's (6.0 vs 0.02, same spread): a ratio of means.
    assert!(at300[7].starts_with("300.00× (95% CI"), "{at300:?}");
    assert_eq!(
        (at300[3].as_str(), at300[6].as_str()),
        ("0", "0"),
        "failures by kind"
    );
    let sustain = section(&md, "Sustain");
    let at200 = row(sustain, "200");
    // select: 56 + rep − 1 → 56, 57, 58; epoll: 42, 43, 44.
    assert!(
        at200[1].starts_with("57.0 [56.0–58.0]") && at200[5].starts_with("43.0 [42.0–44.0]"),
        "{at200:?}"
    );

    // (4) Little's law: only the client-bound cell is flagged, by −50%.
    let ll = section(&md, "Consistency: Little's law");
    let bad = row(ll, CLIENT_BOUND);
    assert!(
        bad[4].starts_with("0.500 [0.500–0.500]") && bad[5].contains("R1 -50.0%"),
        "{bad:?}"
    );
    assert_eq!(row(ll, "epoll-et_long_c100_r10")[5], "ok");
    assert_eq!(summary.littles_law_flagged, vec![CLIENT_BOUND.to_string()]);

    // (5) Plots with labelled axes: 1-2-5 ticks on the log axes, each labelled once.
    let plots = tmp.path().join("plots");
    let qps_texts = svg_texts(&std::fs::read_to_string(plots.join("qps_vs_conns.svg")).unwrap());
    // Connections 100 and 500: the axis runs from 50 to 1000 (1-2-5 ends around 100/1.1 and
    // 500 × 1.1).
    assert_ticks_once(&qps_texts, &["50", "100", "200", "500", "1000"]);
    assert!(
        qps_texts.iter().any(|t| t == "epoll-et long (seed)"),
        "seed drawn: {qps_texts:?}"
    );
    assert!(
        qps_texts
            .iter()
            .any(|t| t == "bar: min–max over repetitions"),
        "{qps_texts:?}"
    );
    // Latency of ET long (mean 1852 µs: 1667 and 3519 µs): y from 1000 to 5000 µs.
    let lat_texts = svg_texts(
        &std::fs::read_to_string(plots.join("latency_epoll-et_long_c100_r10.svg")).unwrap(),
    );
    assert_ticks_once(&lat_texts, &["1000", "2000", "5000", "50%", "90%", "99%"]);
    assert!(
        lat_texts.iter().any(|t| t == "seed P50 / P90 / P99"),
        "{lat_texts:?}"
    );
    assert!(
        md.contains(echolab_report::plots::CAPTION),
        "plots are explained"
    );
    let qps_svg = std::fs::read_to_string(plots.join("qps_vs_conns.svg")).unwrap();
    assert!(
        qps_svg.contains("connections (log scale)") && qps_svg.contains("QPS (requests/s)"),
        "axis labels missing"
    );
    assert!(
        qps_svg.contains("epoll-et short") && qps_svg.contains("epoll-et long"),
        "legend missing"
    );
    let lat = std::fs::read_to_string(plots.join("latency_epoll-et_long_c100_r10.svg")).unwrap();
    assert!(
        lat.contains("percentile (log scale of 1/(1−q))")
            && lat.contains("latency (µs, log scale)")
            && lat.contains("99%")
    );
    let storm_svg = std::fs::read_to_string(plots.join("connect_storm.svg")).unwrap();
    assert!(
        storm_svg.contains("time to establish all (s)")
            && storm_svg.contains("connections (log scale)")
    );
    assert!(plots.join("sustain_cpu.svg").is_file());
    assert!(md.contains("![QPS vs connections](plots/qps_vs_conns.svg)"));
    // report.html: the same tables and the plots inlined, one file.
    let html = std::fs::read_to_string(tmp.path().join("report.html")).unwrap();
    assert!(html.contains("<h2>QPS matrix, server × mode (100 connections, 10 rounds)</h2>"));
    assert!(
        html.contains("<td>epoll-et</td><td>25000 [24000–26000] (95% CI 22622–27599)</td>"),
        "{html}"
    );
    assert_eq!(
        html.matches("<svg").count(),
        summary
            .written
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == "svg"))
            .count()
    );

    // summary.csv: a header and one row per run, numbers in full.
    let csv = std::fs::read_to_string(tmp.path().join("summary.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 1 + 42);
    assert!(lines[0].starts_with("run_file,status,cell_id,server,mode,conns"));
    assert!(csv.contains("epoll-et_long_c100_r10_rep2.json,ok,epoll-et_long_c100_r10,epoll-et,long,100,10,,12,,2,"), "{csv}");
}

#[test]
fn a_partial_directory_marks_missing_and_failed_cells() {
    let tmp = temp_dir("partial");
    // LT long: repetition 1 failed, 2 and 3 never ran; ET short: repetition 3 never ran;
    // select storm at 300: nothing at all.
    results_dir(
        tmp.path(),
        RunStatus::Interrupted,
        |id, rep| {
            let gone = (id == "epoll-lt_long_c100_r10" && rep > 1)
                || (id == "epoll-et_short_c100_r10" && rep == 3)
                || id == "select_connect-storm_c300";
            !gone
        },
        |id, _| (id == "epoll-lt_long_c100_r10").then_some("server did not start: address in use"),
    );
    let summary = echolab_report::render(tmp.path()).unwrap();
    let md = std::fs::read_to_string(tmp.path().join("report.md")).unwrap();
    assert!(!summary.complete);
    assert_eq!(
        (
            summary.counts.planned,
            summary.counts.ok,
            summary.counts.failed,
            summary.counts.missing
        ),
        (42, 35, 1, 6)
    );
    let percentiles = section(&md, "Latency percentiles per cell");
    assert_eq!(row(percentiles, "epoll-et_short_c100_r10")[1], "2/3");
    assert_eq!(row(percentiles, "epoll-et_long_c100_r10")[1], "3/3");
    let repetitions = section(&md, "Repetitions");
    assert_eq!(
        row(repetitions, "epoll-lt_long_c100_r10")[4],
        "not reached: 0 usable of the minimum 3 (1 failed, 2 missing)"
    );
    assert_eq!(
        row(repetitions, "epoll-et_short_c100_r10")[4],
        "not reached: 2 usable of the minimum 3 (0 failed, 1 missing)"
    );
    let noisy = &row(repetitions, "epoll-et_long_c500_r10")[4];
    assert!(
        noisy.starts_with("not reached: 3 repetitions (the maximum) left the half-width at")
            && noisy.ends_with(
                " (a fixed count; max_repetitions above repetitions lets a cell repeat further)"
            ),
        "{repetitions}"
    );
    let qps = section(&md, "QPS per repetition");
    assert!(
        qps.contains("_sustain_") && !qps.contains("connect-storm"),
        "connect-storm cells measure connections, not requests: {qps}"
    );
    assert!(md.contains("**partial** (run status: interrupted)"), "{md}");

    let quad = section(&md, "QPS matrix");
    let lt = row(quad, "epoll-lt");
    assert_eq!(lt[2], "failed: server did not start: address in use");
    assert!(
        lt[3].starts_with("— (failed: server did not start"),
        "{lt:?}"
    );
    assert!(quad.contains("long/short gain, LT: seed 1.48×, here —; band 1.29–1.70× (magnitude ±15%): **not checked**: epoll-lt_long_c100_r10: failed: server did not start"), "{quad}");

    let reps = section(&md, "QPS per repetition");
    assert_eq!(
        row(reps, "epoll-lt_long_c100_r10")[1..4],
        [
            "failed: server did not start: address in use",
            "missing",
            "missing"
        ]
    );

    let storm = row(section(&md, "Connect storm"), "300");
    assert_eq!(storm[1], "missing");

    let holes = section(&md, "Missing and failed runs");
    assert!(
        holes.contains("- select_connect-storm_c300 R2: missing")
            && holes.contains("- epoll-lt_long_c100_r10 R1: failed"),
        "{holes}"
    );

    let csv = std::fs::read_to_string(tmp.path().join("summary.csv")).unwrap();
    assert!(
        csv.contains("select_connect-storm_c300_rep1.json,missing,"),
        "{csv}"
    );
    assert!(
        csv.contains("epoll-lt_long_c100_r10_rep1.json,failed,"),
        "{csv}"
    );
}
