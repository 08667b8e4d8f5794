//! The seeds' mechanisms checked from this run's own costs: each mechanism an experiment
//! states ([`echolab_core::experiment::Mechanism`]) predicts a quantity from what this run
//! measured, and the report sets the prediction beside the measured effect with a verdict of
//! its own (docs/methodology.md, "Mechanisms"):
//!
//! - **holds here**: the measured effect's 95% interval lies within the mechanism's
//!   agreement band around the prediction (±25% unless the file says otherwise);
//! - **does not hold here**: it lies wholly outside;
//! - **inconclusive**: it straddles an edge, or an input is missing (said which);
//! - **not testable here**: the mechanism's premise is absent from this run, so its
//!   prediction says nothing either way: a server-cost mechanism (`cpu-per-request`) on
//!   cells not all of which the server paces (some path-, client-bound or unsaturated, as
//!   [`crate::bounds`] labels them), e.g. exp31 on crossnet, where round trips set QPS;
//! - **consistent** / **inconsistent** (an identity, not a test of the mechanism): the
//!   `cpu-per-request` prediction is built from the QPS it predicts. Server CPU per request
//!   is the server's utilisation over QPS, so the predicted gain is the measured gain times
//!   the ratio of the two cells' utilisations (the utilisation law, Denning & Buzen 1978,
//!   "The Operational Analysis of Queueing Network Models", Computing Surveys 10(3)): at two
//!   equally busy servers it agrees by construction. Its band then checks the measurement
//!   (equal utilisation in both cells), never that CPU per request causes the gain. The same
//!   holds for the Little's-law figure printed beside a round-trip mechanism: in a closed
//!   loop without think time, mean latency = connections / QPS by definition.
//!
//! A `syscall-cost` mechanism ([`MechanismKind::SyscallCost`]) predicts from quantities
//! measured apart from the QPS it predicts (timed system calls in open-loop probes below
//! saturation), and its verdict uses the prediction's interval as well as the measurement's:
//! see [`crate::syscall_cost`] for the rule. Every check names the independent source of its
//! prediction ([`MechanismCheck::source`]), or says that it has none.
//!
//! A `round-trips` mechanism predicts each repetition's P50 as round trips × the calibrated
//! RTT plus that repetition's server CPU per request, so its prediction has an interval too;
//! its verdict is the same agreement rule ([`agreement`]: measured P50 ratio over predicted,
//! with both samples' uncertainty). The server CPU term comes from the same repetitions as
//! the P50s; where the two move together the difference's true variance is below the
//! independent-samples (Welch) one the rule uses, so the interval errs wide, towards
//! "inconclusive".
//!
//! A knee mechanism ([`MechanismKind::Knee`]) is judged on a scan instead (see [`knee`]):
//! it holds here when the predicted and the measured knee are the same scan point or
//! adjacent ones, does not hold when they are further apart, and is inconclusive when either
//! is not found in the scan.
//!
//! This is the claims' band rule ([`crate::claims::judge`]) with the prediction in the
//! seed's place, so a mechanism verdict and a claim verdict read the same way.

use echolab_core::experiment::{ClaimBand, Mechanism, MechanismKind, DEFAULT_AGREEMENT};
use echolab_core::results::Manifest;

use crate::bounds::{self, Bound};
use crate::claims::{judge, measured_rtt_us, Verdict};
use crate::costs;
use crate::dataset::{CellData, Dataset};
use crate::format;
use crate::inference::{ratio, Ratio};
pub use crate::mechanism_check::{agreement, Agreement, MechanismCheck, MechanismVerdict};
use crate::metrics;
use crate::syscall_cost;

/// The agreement band around `predicted`: a factor `1 + a` either way
/// ([`ClaimBand::relative`], the claims' own band).
fn band(predicted: f64, a: f64) -> ClaimBand {
    ClaimBand::relative(predicted, a)
}

/// The measured ratio of `metric`, numerator over denominator.
fn measured(num: &CellData<'_>, den: &CellData<'_>, metric: &str) -> Option<Ratio> {
    ratio(&num.summary(metric)?, &den.summary(metric)?).ok()
}

/// The median of `metric` in `cell`.
fn median(cell: &CellData<'_>, metric: &str) -> Option<f64> {
    cell.summary(metric).map(|s| s.median)
}

/// Checks `m` on the run's data.
pub fn check(ds: &Dataset<'_>, manifest: &Manifest, m: &Mechanism) -> MechanismCheck {
    let mut out = MechanismCheck {
        mechanism: m.clone(),
        predicted: None,
        prediction: None,
        source: String::new(),
        agreement: None,
        measured: None,
        verdict: MechanismVerdict::Inconclusive,
        how: String::new(),
        leaves_out: String::new(),
        alternative: String::new(),
    };
    match m.kind {
        MechanismKind::Knee => return knee(ds, manifest, m, out),
        MechanismKind::SyscallCost => {
            let mut out = syscall_cost::check(ds, m, out);
            // A prediction of QPS at a saturated server says nothing where the server does
            // not set the pace in every compared cell.
            let paced = [&m.numerator, &m.denominator]
                .iter()
                .filter_map(|sel| ds.one(sel))
                .collect::<Vec<_>>();
            if out.prediction.is_some() && !server_paces_all(manifest, &paced) {
                out.verdict = MechanismVerdict::NotTestable;
            }
            return out;
        }
        _ => {}
    }
    let (Some(num), Some(den)) = (ds.one(&m.numerator), ds.one(&m.denominator)) else {
        out.how = "a cell of the mechanism has no data".into();
        return out;
    };
    let a = m.agreement();
    let (predicted, measured, how) = match m.kind {
        MechanismKind::CpuPerRequest => cpu_per_request(manifest, num, den, &mut out),
        MechanismKind::RoundTrips => round_trips(manifest, num, den, &mut out),
        MechanismKind::Wakeups => return wakeups(num, den, out),
        MechanismKind::SyscallTime => syscall_time(m, num, den),
        // Judged on their own above.
        MechanismKind::Knee | MechanismKind::SyscallCost => return out,
    };
    out.how = how;
    out.measured = measured.clone();
    out.predicted = predicted;
    let (Some(p), Some(meas)) = (predicted, measured) else {
        return out;
    };
    let (v, _) = judge(&band(p, a), &meas);
    out.verdict = match (&out.agreement, v) {
        // Both uncertainties, where the prediction has its own (round trips).
        (Some(ag), _) => ag.verdict,
        (None, Verdict::Reproduced) => MechanismVerdict::Holds,
        (None, Verdict::Refuted) => MechanismVerdict::DoesNotHold,
        _ => MechanismVerdict::Inconclusive,
    };
    if m.kind == MechanismKind::CpuPerRequest {
        out.verdict = if !server_paces_all(manifest, &[num, den]) {
            // The band would still sort the figures, but by where the prediction happens to
            // fall, not by anything the server did.
            MechanismVerdict::NotTestable
        } else {
            match out.verdict {
                MechanismVerdict::Holds => MechanismVerdict::Consistent,
                MechanismVerdict::DoesNotHold => MechanismVerdict::Inconsistent,
                v => v,
            }
        };
    }
    out
}

/// Whether every one of `cells` has a bound label that involves the server: a server-cost
/// prediction compares the server's work in each, so each must be paced by it.
fn server_paces_all(manifest: &Manifest, cells: &[&CellData<'_>]) -> bool {
    cells
        .iter()
        .all(|c| bounds::of_cell(c, manifest).is_some_and(|b| b.bound.involves_server()))
}

type Prediction = (Option<f64>, Option<Ratio>, String);

/// One point of a knee scan: conns, the server's CPU load (share of the CPUs it can use,
/// median over repetitions, [`bounds::of_cell`]) and QPS (its summary over repetitions).
#[derive(Debug, Clone)]
pub struct ScanPoint {
    /// Connections.
    pub conns: u64,
    /// Server CPU as a share of the CPUs it can use (1.0 = all of them), when sampled.
    pub server_load: Option<f64>,
    /// Mean QPS over repetitions.
    pub qps: f64,
    /// Upper end of the 95% interval of QPS (the value itself when exact; the mean when
    /// there is a single repetition).
    pub qps_high: f64,
}

/// The predicted knee: the index of the first point (in increasing conns) whose server load
/// reaches [`bounds::SATURATED`]; `None` when the server never does within the scan.
pub fn predicted_knee(points: &[ScanPoint]) -> Option<usize> {
    points
        .iter()
        .position(|p| p.server_load.is_some_and(|l| l >= bounds::SATURATED))
}

/// The measured knee: the index of the first point after which QPS does not rise beyond the
/// point's own 95% interval (the next point's mean QPS is at most the upper end of this
/// point's interval); `None` when QPS rises significantly at every step (the knee is beyond
/// the scan).
pub fn measured_knee(points: &[ScanPoint]) -> Option<usize> {
    points.windows(2).position(|w| w[1].qps <= w[0].qps_high)
}

/// Judges a predicted against a measured knee, as indices into the same scan: holds when
/// they are at most one scan step apart, does not hold otherwise, inconclusive when either
/// is missing; not testable when the server is saturated at the first point and QPS is
/// flat from the first or second (a censored knee).
pub fn judge_knee(predicted: Option<usize>, measured: Option<usize>) -> MechanismVerdict {
    match (predicted, measured) {
        // Saturated at the scan's first point: the true knee lies at or below it (censored),
        // so a measured knee there or next to it agrees with any knee below the scan and
        // tests nothing; the scan needs points below saturation.
        (Some(0), Some(m)) if m <= 1 => MechanismVerdict::NotTestable,
        (Some(p), Some(m)) if p.abs_diff(m) <= 1 => MechanismVerdict::Holds,
        (Some(_), Some(_)) => MechanismVerdict::DoesNotHold,
        _ => MechanismVerdict::Inconclusive,
    }
}

/// Checks a [`MechanismKind::Knee`] mechanism on its series (see [`predicted_knee`],
/// [`measured_knee`], [`judge_knee`]). `predicted` is the predicted knee's conns.
fn knee(
    ds: &Dataset<'_>,
    manifest: &Manifest,
    m: &Mechanism,
    mut out: MechanismCheck,
) -> MechanismCheck {
    let Some(series) = &m.series else {
        out.how = "the knee mechanism names no series".into();
        return out;
    };
    let mut cells = ds.select(series);
    cells.sort_by_key(|c| c.cell.conns);
    let points: Vec<ScanPoint> = cells
        .iter()
        .filter_map(|c| {
            let q = c.summary(metrics::QPS)?;
            Some(ScanPoint {
                conns: c.cell.conns,
                server_load: bounds::of_cell(c, manifest).and_then(|b| b.server_load),
                qps: q.mean,
                qps_high: q.ci95.map_or(q.mean, |ci| ci.high),
            })
        })
        .collect();
    if points.len() < 2 {
        out.how = format!(
            "{} scan point(s) with QPS in {series}; a knee needs 2",
            points.len()
        );
        return out;
    }
    let (p, k) = (predicted_knee(&points), measured_knee(&points));
    out.predicted = p.map(|i| points[i].conns as f64);
    let at = |i: Option<usize>, none: &str| {
        i.map_or(none.to_string(), |i| format!("{} conns", points[i].conns))
    };
    let loads: Vec<String> = points
        .iter()
        .map(|p| match p.server_load {
            Some(l) => format!("{} {}", p.conns, format::pct(l)),
            None => format!("{} —", p.conns),
        })
        .collect();
    out.how = format!(
        "server CPU reaches {} of its core(s) at {}, QPS stops rising beyond its 95% CI at {} (server load by conns: {})",
        format::pct(bounds::SATURATED),
        at(p, "no point of the scan"),
        at(k, "no point of the scan (it rises throughout)"),
        loads.join(", ")
    );
    out.verdict = judge_knee(p, k);
    if out.verdict == MechanismVerdict::NotTestable {
        out.how.push_str(&format!(
            "; the server is saturated at the scan's first point ({} conns), so the knee is censored there: \
             the scan needs points below saturation for the mechanism to be testable",
            points[0].conns
        ));
    }
    out
}

/// QPS ratio predicted as the denominator's server CPU per request over the numerator's.
fn cpu_per_request(
    manifest: &Manifest,
    num: &CellData<'_>,
    den: &CellData<'_>,
    out: &mut MechanismCheck,
) -> Prediction {
    let (Some(cn), Some(cd)) = (
        num.summary(costs::SERVER_CPU_US),
        den.summary(costs::SERVER_CPU_US),
    ) else {
        return (
            None,
            measured(num, den, metrics::QPS),
            "no server CPU samples in one of the cells".into(),
        );
    };
    let prediction = ratio(&cd, &cn).ok();
    let predicted = prediction.as_ref().map(|r| r.value);
    out.prediction = prediction;
    out.source =
        "none independent: server CPU per request is the cgroup's CPU over the same cells' QPS"
            .into();
    let split = |c: &CellData<'_>| match (
        median(c, costs::SERVER_USER_US),
        median(c, costs::SERVER_SYS_US),
    ) {
        (Some(u), Some(s)) => format!(" ({} user + {} kernel)", format::num(u), format::num(s)),
        _ => String::new(),
    };
    let how = format!(
        "server CPU per request {} µs{} in {} against {} µs{} in {}: QPS at a saturated server goes as 1 / CPU per request; \
         CPU per request is utilisation / QPS, so this prediction is the measured gain times the cells' utilisation ratio \
         (the utilisation law): it checks the measurement, not the mechanism",
        format::num(cd.median),
        split(den),
        den.id,
        format::num(cn.median),
        split(num),
        num.id
    );
    // The prediction counts the server alone: say so when the cells are bound elsewhere.
    let labels: Vec<(String, Bound, String)> = [den, num]
        .iter()
        .filter_map(|c| {
            bounds::of_cell(c, manifest).map(|b| (c.id.clone(), b.bound, bounds::figures_text(&b)))
        })
        .collect();
    let elsewhere: Vec<String> = labels
        .iter()
        .filter(|(_, b, _)| !b.involves_server())
        .map(|(id, b, f)| format!("{id} is {} ({f})", b.word()))
        .collect();
    if !elsewhere.is_empty() {
        let client = match (
            median(den, costs::CLIENT_CPU_US),
            median(num, costs::CLIENT_CPU_US),
        ) {
            (Some(d), Some(n)) if n > 0.0 => format!(
                "; the client's CPU per request ({} against {} µs) predicts {}",
                format::num(d),
                format::num(n),
                format::times(d / n)
            ),
            _ => String::new(),
        };
        out.leaves_out = format!(
            "the server's cost sets QPS only where the server sets the pace: {}{client}",
            elsewhere.join("; ")
        );
    }
    (predicted, measured(num, den, metrics::QPS), how)
}

/// P50 ratio predicted from round trips × RTT plus the server's CPU per request.
fn round_trips(
    manifest: &Manifest,
    num: &CellData<'_>,
    den: &CellData<'_>,
    out: &mut MechanismCheck,
) -> Prediction {
    let measured_p50 = measured(num, den, metrics::P50_US);
    let Some(rtt) = measured_rtt_us(manifest) else {
        return (
            None,
            measured_p50,
            "no calibrated RTT in the manifest".into(),
        );
    };
    let parts = |c: &CellData<'_>| {
        Some((
            bounds::round_trips(c.cell.mode)?,
            median(c, costs::SERVER_CPU_US).unwrap_or(0.0),
        ))
    };
    let (Some((tn, sn)), Some((td, sd))) = (parts(num), parts(den)) else {
        return (
            None,
            measured_p50,
            "round trips are counted for short and long connections only".into(),
        );
    };
    let (pn, pd) = (tn * rtt + sn, td * rtt + sd);
    // The prediction's interval over the repetitions: each one's path time plus its own server
    // CPU per request, numerator over denominator (the RTT is the calibration's, one figure).
    let per_rep = |c: &CellData<'_>, trips: f64| -> Vec<f64> {
        c.values(costs::SERVER_CPU_US)
            .iter()
            .map(|s| trips * rtt + s)
            .collect()
    };
    let (pred_num, pred_den) = (per_rep(num, tn), per_rep(den, td));
    let summary = |v: &[f64], c: &CellData<'_>| crate::inference::Summary::at(v, c.confidence);
    if let (Some(a), Some(b)) = (summary(&pred_num, num), summary(&pred_den, den)) {
        out.prediction = ratio(&a, &b).ok();
    }
    out.agreement = agreement(
        &num.values(metrics::P50_US),
        &den.values(metrics::P50_US),
        &pred_num,
        &pred_den,
        out.mechanism.agreement(),
        num.confidence,
    );
    out.source = "the lab's calibrated RTT (measured before the cells, apart from them) and round trips per request; \
                  the server CPU term is from the same cells"
        .into();
    let how = format!(
        "{} × RTT {} µs + server {} µs = {} µs for {}, {} × {} µs + {} µs = {} µs for {}",
        tn,
        format::num(rtt),
        format::num(sn),
        format::num(pn),
        num.id,
        td,
        format::num(rtt),
        format::num(sd),
        format::num(pd),
        den.id
    );
    // Little's law for a closed loop with the same connection count on both sides: latency
    // = connections / QPS, so the latency ratio is the inverse QPS ratio.
    if num.is_closed_loop() && den.is_closed_loop() && num.cell.conns == den.cell.conns {
        if let Some(q) = measured(den, num, metrics::QPS) {
            let queueing = measured_p50
                .as_ref()
                .map(|m| judge(&band(q.value, DEFAULT_AGREEMENT), m).0);
            out.alternative = format!(
                "Little's-law check ({} connections in a closed loop: mean latency = connections / QPS by definition, \
                 an identity, not a mechanism): inverse QPS ratio {} against the P50 ratio, {}",
                num.cell.conns,
                format::times(q.value),
                match queueing {
                    Some(Verdict::Reproduced) => "consistent (P50 moves as the mean)",
                    Some(Verdict::Refuted) => "inconsistent (P50 and the mean move apart)",
                    _ => "inconclusive",
                }
            );
        }
    }
    (Some(pn / pd), measured_p50, how)
}

/// Wake-ups per request, numerator over denominator; the mechanism holds where the
/// numerator wakes more per request.
fn wakeups(num: &CellData<'_>, den: &CellData<'_>, mut out: MechanismCheck) -> MechanismCheck {
    let events = measured(num, den, costs::SERVER_EVENTS);
    let waits = measured(num, den, costs::SERVER_WAITS);
    let (Some(e), Some(w)) = (events.clone(), waits) else {
        out.how = "no server counters in one of the cells".into();
        return out;
    };
    let more = ClaimBand {
        low: 1.0,
        high: f64::INFINITY,
        open: true,
    };
    let (ve, _) = judge(&more, &e);
    let (vw, _) = judge(&more, &w);
    out.verdict = match (ve, vw) {
        (Verdict::Reproduced, _) | (_, Verdict::Reproduced) => MechanismVerdict::Holds,
        (Verdict::Refuted, Verdict::Refuted) => MechanismVerdict::DoesNotHold,
        _ => MechanismVerdict::Inconclusive,
    };
    let per = |c: &CellData<'_>| {
        format!(
            "{}: {} events and {} wait calls per request",
            c.id,
            median(c, costs::SERVER_EVENTS).map_or("—".into(), format::num),
            median(c, costs::SERVER_WAITS).map_or("—".into(), format::num)
        )
    };
    out.how = format!(
        "{}; {}; events {}, wait calls {}; beside QPS {} and P99 {}",
        per(num),
        per(den),
        format::ratio(&e),
        format::ratio(&w),
        measured(num, den, metrics::QPS).map_or("—".into(), |r| format::ratio(&r)),
        measured(num, den, metrics::P99_US).map_or("—".into(), |r| format::ratio(&r)),
    );
    out.predicted = Some(1.0);
    out.measured = events;
    out
}

/// Total time in `syscall` predicted to follow its count (a constant cost per call).
fn syscall_time(m: &Mechanism, num: &CellData<'_>, den: &CellData<'_>) -> Prediction {
    let name = m.syscall.as_deref().unwrap_or_default();
    let (count, total) = (metrics::syscall_count(name), metrics::syscall_total_s(name));
    let counts = measured(num, den, &count);
    let totals = measured(num, den, &total);
    let per_call = |c: &CellData<'_>| Some(median(c, &total)? / median(c, &count)?.max(1.0) * 1e6);
    let how = match (per_call(num), per_call(den)) {
        (Some(pn), Some(pd)) => format!(
            "{name}() takes {} µs per call in {} and {} µs in {} (the client's own timing of each call): a constant cost per call makes the time ratio the count ratio",
            format::num(pn),
            num.id,
            format::num(pd),
            den.id
        ),
        _ => format!("no timed {name}() calls in one of the cells (echo-bench --syscalls)"),
    };
    (counts.map(|c| c.value), totals, how)
}

/// The mechanisms of the experiment, checked.
pub fn all(ds: &Dataset<'_>, manifest: &Manifest) -> Vec<MechanismCheck> {
    manifest
        .experiment
        .reference
        .mechanisms
        .iter()
        .map(|m| check(ds, manifest, m))
        .collect()
}

/// The section "The seeds' mechanisms, checked from this run's costs".
pub fn section(checks: &[MechanismCheck]) -> String {
    if checks.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "## Mechanisms, checked from this run's costs\n\nEach mechanism the experiment states predicts a quantity from what \
         this run measured; the prediction holds when the measured effect's 95% interval lies within the mechanism's \
         agreement band around it (±25% unless stated), the claims' rule with the prediction in the seed's place; a \
         prediction from measurements apart from the effect (syscall-cost) holds when the interval of measured over \
         predicted, which carries both uncertainties, lies within that band.\n\n",
    );
    for c in checks {
        out.push_str(&format!(
            "- **{}** ({}; {}): {}.",
            c.mechanism.name,
            c.mechanism.kind.name(),
            c.mechanism.source,
            c.short(),
        ));
        if !c.short_says_how() {
            out.push_str(&format!(" {}.", c.how));
        }
        if !c.source.is_empty() {
            out.push_str(&format!(" Source of the prediction: {}.", c.source));
        }
        if !c.leaves_out.is_empty() {
            out.push_str(&format!(
                " What the prediction leaves out here: {}.",
                c.leaves_out
            ));
        }
        out.push('\n');
    }
    out.push('\n');
    out
}
