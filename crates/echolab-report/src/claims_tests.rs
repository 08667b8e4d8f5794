//! The band rule, the path rule and exact ratios on synthetic figures.

use super::*;

fn ratio_ci(value: f64, low: f64, high: f64) -> Ratio {
    Ratio {
        value,
        method: Method::LogT,
        ci95: Some(Interval { low, high }),
        no_ci: None,
    }
}

fn closed(low: f64, high: f64) -> ClaimBand {
    ClaimBand {
        low,
        high,
        open: false,
    }
}

/// Golden: inside, outside on either side, straddling either edge.
#[test]
fn band_rule_inside_outside_straddling() {
    // 2.15 ± 15%: 1.8275–2.4725.
    let band = closed(1.8275, 2.4725);
    let (v, why) = judge(&band, &ratio_ci(2.1, 1.9, 2.3));
    assert_eq!(v, Verdict::Reproduced);
    assert_eq!(why, "our 95% CI 1.90–2.30× lies inside the band");
    let (v, why) = judge(&band, &ratio_ci(1.4, 1.3, 1.5));
    assert_eq!(
        (v, why.as_str()),
        (
            Verdict::Refuted,
            "our 95% CI 1.30–1.50× lies wholly below the band"
        )
    );
    let (v, why) = judge(&band, &ratio_ci(4.0, 3.0, 5.0));
    assert_eq!(
        (v, why.as_str()),
        (
            Verdict::Refuted,
            "our 95% CI 3.00–5.00× lies wholly above the band"
        )
    );
    let (v, why) = judge(&band, &ratio_ci(2.0, 1.5, 2.3));
    assert_eq!(
        (v, why.as_str()),
        (
            Verdict::Inconclusive,
            "our 95% CI 1.50–2.30× straddles the band's lower edge"
        )
    );
    let (v, why) = judge(&band, &ratio_ci(2.3, 2.0, 2.9));
    assert_eq!(
        (v, why.as_str()),
        (
            Verdict::Inconclusive,
            "our 95% CI 2.00–2.90× straddles the band's upper edge"
        )
    );
    // Wider than the whole band: inconclusive, never reproduced.
    let (v, why) = judge(&band, &ratio_ci(2.1, 1.0, 4.0));
    assert_eq!(
        (v, why.as_str()),
        (
            Verdict::Inconclusive,
            "our 95% CI 1.00–4.00× is wider than the band (it crosses both edges)"
        )
    );
    // Closed band: an end on the edge counts as inside.
    assert_eq!(
        judge(&band, &ratio_ci(2.0, 1.8275, 2.4725)).0,
        Verdict::Reproduced
    );
}

#[test]
fn one_sided_bands_are_strict() {
    let above_one = ClaimBand {
        low: 1.0,
        high: f64::INFINITY,
        open: true,
    };
    assert_eq!(
        judge(&above_one, &ratio_ci(1.2, 1.05, 1.4)).0,
        Verdict::Reproduced
    );
    assert_eq!(
        judge(&above_one, &ratio_ci(1.0, 0.9, 1.1)).0,
        Verdict::Inconclusive
    );
    assert_eq!(
        judge(&above_one, &ratio_ci(0.9, 0.8, 1.0)).0,
        Verdict::Refuted
    );
    let below_half = ClaimBand {
        low: 0.0,
        high: 0.5,
        open: true,
    };
    assert_eq!(
        judge(&below_half, &ratio_ci(0.14, 0.1, 0.2)).0,
        Verdict::Reproduced
    );
    assert_eq!(
        judge(&below_half, &ratio_ci(0.6, 0.55, 0.7)).0,
        Verdict::Refuted
    );
}

/// Golden: exp34's count claim, 100 vs 1000 connects in every repetition.
#[test]
fn exact_counts_are_judged_by_their_value() {
    let exact = |v: f64| Ratio {
        value: v,
        method: Method::Exact,
        ci95: Some(Interval { low: v, high: v }),
        no_ci: None,
    };
    // 0.1036 ± 0.02 = 0.0836–0.1236.
    let band = closed(0.0836, 0.1236);
    let (v, why) = judge(&band, &exact(0.1));
    assert_eq!(
        (v, why.as_str()),
        (
            Verdict::Reproduced,
            "our exact ratio 0.100× lies inside the band; it is the same in every repetition, set by the \
             experiment's parameters, so this checks the counting, not a measured effect"
        )
    );
    assert_eq!(judge(&band, &exact(0.2)).0, Verdict::Refuted);
}

#[test]
fn no_interval_is_inconclusive_with_its_reason() {
    let r = Ratio {
        value: 2.0,
        method: Method::LogT,
        ci95: None,
        no_ci: Some("the numerator has 1 repetition (fewer than 2)".into()),
    };
    let (v, why) = judge(&closed(1.0, 3.0), &r);
    assert_eq!(v, Verdict::Inconclusive);
    assert_eq!(
        why,
        "no interval: the numerator has 1 repetition (fewer than 2)"
    );
}

/// A closed band's edges belong to it: an interval that only touches an edge is not
/// disjoint from the band, and which edge it straddles is named right.
#[test]
fn touching_or_starting_on_an_edge_is_straddling_not_refuting() {
    let band = closed(1.0, 2.0);
    let (v, why) = judge(&band, &ratio_ci(0.8, 0.5, 1.0));
    assert_eq!(
        (v, why.as_str()),
        (
            Verdict::Inconclusive,
            "our 95% CI 0.500–1.00× straddles the band's lower edge"
        )
    );
    let (v, why) = judge(&band, &ratio_ci(2.5, 2.0, 3.0));
    assert_eq!(
        (v, why.as_str()),
        (
            Verdict::Inconclusive,
            "our 95% CI 2.00–3.00× straddles the band's upper edge"
        )
    );
    // Starting on the closed lower edge and leaving through the upper one: the upper edge.
    let (_, why) = judge(&band, &ratio_ci(1.5, 1.0, 2.5));
    assert_eq!(why, "our 95% CI 1.00–2.50× straddles the band's upper edge");
    // An open band's lower edge is outside it: starting there straddles the lower edge.
    let open = ClaimBand {
        low: 1.0,
        high: f64::INFINITY,
        open: true,
    };
    let (v, why) = judge(&open, &ratio_ci(1.05, 1.0, 1.1));
    assert_eq!(
        (v, why.as_str()),
        (
            Verdict::Inconclusive,
            "our 95% CI 1.00–1.10× straddles the band's lower edge"
        )
    );
}

use echolab_core::results::RunRecord;

fn claim(yaml: &str) -> ReferenceClaim {
    serde_yaml::from_str(yaml).unwrap()
}

#[test]
fn the_kind_says_which_way_a_direction_claim_points() {
    let base =
        "name: c\nmetric: qps\nnumerator: {server: epoll-et}\ndenominator: {server: select}\n";
    let lower = claim(&format!("{base}kind: direction\ndirection: lower\n"));
    assert_eq!(kind_text(&lower), "direction: numerator lower");
    let higher = claim(&format!("{base}kind: direction\ndirection: higher\n"));
    assert_eq!(kind_text(&higher), "direction: numerator higher");
}

fn manifest_with_rtt(rtt_median_us: f64) -> Manifest {
    let mut measured = std::collections::BTreeMap::new();
    measured.insert("rtt_median_us".to_string(), rtt_median_us);
    let mut m: Manifest = serde_yaml::from_str(
        "schema: x\nrun_id: r\nstatus: complete\ncreated_at: t\nargs: []\nbackend: docker\nexperiment: {name: t, question: q, repetitions: 1, matrix: [{servers: [epoll-et], modes: [long], conns: [2], rounds: [3]}]}\nprofile: {name: loopback, description: d, source: s, topology: loopback, expected: {rtt: {value: 0s, minus: 0s, plus: 1ms}}}\ninputs: {}\nenvironment: {kernel: k, cpu_model: c, cpus: 2, mem_bytes: 1, git_rev: g, echolab_version: v}\nruns_planned: 1\nruns_done: 1\n",
    )
    .unwrap();
    m.link.calibration = Some(echolab_core::results::CalibrationRecord {
        measured,
        ..Default::default()
    });
    m
}

#[test]
fn a_zero_rtt_is_no_measurement() {
    assert_eq!(measured_rtt_us(&manifest_with_rtt(250.0)), Some(250.0));
    assert_eq!(measured_rtt_us(&manifest_with_rtt(0.0)), None);
}

/// A run record of `mode` whose bench report has mean latency `mean_us`.
fn record(mode: BenchMode, mean_us: f64) -> RunRecord {
    let cell: echolab_core::experiment::Cell = serde_yaml::from_str(&format!(
        "{{server: epoll-et, mode: {}, conns: 1, rounds: 1, payload: 12}}",
        match mode {
            BenchMode::Short => "short",
            _ => "long",
        }
    ))
    .unwrap();
    RunRecord {
        cell,
        repetition: 1,
        started_at: "t".into(),
        wall_s: 1.0,
        bench: Some(echolab_core::stats::BenchReport {
            requests_ok: 1,
            latency_us: Some(echolab_core::hist::LatencySummary {
                mean: mean_us,
                ..Default::default()
            }),
            ..Default::default()
        }),
        server: None,
        server_pid: None,
        samples: vec![],
        settle: None,
        link: None,
        strace: None,
        error: None,
    }
}

#[test]
fn a_ratio_is_path_bound_from_half_of_the_latency_on() {
    // RTT 100 µs; a long cell is one round trip, a short one two (handshake and echo).
    let (long, short) = (
        record(BenchMode::Long, 200.0),
        record(BenchMode::Short, 400.0),
    );
    let data = |r: &RunRecord| CellData {
        cell: r.cell.clone(),
        id: r.cell.id(),
        planned: true,
        reps_planned: 1,
        runs: vec![],
        confidence: crate::sequential::Confidence::FIXED_95,
    };
    let (mut l, mut s) = (data(&long), data(&short));
    l.runs.push(&long);
    s.runs.push(&short);
    // Exactly half of each cell's mean latency is the path: path-bound.
    let why = path_bound(metrics::P50_US, [&l, &s], Some(100.0)).expect("path-bound at 50%");
    assert!(
        why.contains("2 × RTT 100 µs = 50% of its mean latency 400 µs"),
        "{why}"
    );
    // Just under half: not.
    assert_eq!(path_bound(metrics::P50_US, [&l, &s], Some(99.9)), None);
    // Counts are not latency-like; no RTT measured means nothing to compare.
    assert_eq!(
        path_bound("syscall.connect.count", [&l, &s], Some(100.0)),
        None
    );
    assert_eq!(path_bound(metrics::P50_US, [&l, &s], None), None);
}
