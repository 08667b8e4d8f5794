//! The `syscall-cost` mechanism ([`MechanismKind::SyscallCost`]): a QPS ratio at saturation
//! predicted from the server's kernel cost per request, measured apart from that QPS in timed
//! open-loop probes below saturation. This is seed 000 §4's own method: a request's kernel
//! cost is the system calls it takes times each call's time ("每请求内核开销 = 系统调用数 ×
//! 单次耗时"), and a server whose one core is busy serves 1 / cost requests a second.
//!
//! **Cost per request** (one probe repetition): the sum over the server's system calls other
//! than the wait calls of `total_ns` (echo-server `--time-syscalls`, the calls timed around
//! themselves with CLOCK_MONOTONIC), over the requests the server read (`bytes_in` / payload,
//! warm-up included, as the counters are), in µs. The wait calls (`epoll_wait`, `select`,
//! `poll`) are left out: below saturation they block, so their time is idle time, not work.
//! What the sum leaves out is said in the report: the kernel work done outside the server's
//! calls (on loopback the handshake's softirq runs on the connecting client's CPU), and the
//! server's user-mode time.
//!
//! **Prediction**: QPS(numerator) / QPS(denominator) = cost(denominator probe) /
//! cost(numerator probe), the ratio of the probes' geometric means over repetitions, with its
//! 95% interval from the log-scale Welch standard error ([`crate::inference::ratio`], the
//! delta method on the logarithms: `Var(ln x̄_g) = s²_ln / n`).
//!
//! **Verdict** (the rule docs/methodology.md states, "Mechanisms"): let `A` = measured gain /
//! predicted gain. Its logarithm is a sum of four independent log-scale means (the two
//! saturated cells' QPS, the two probes' costs), so its 95% interval is `ln A ± t·se` with
//! `se² = Σ s²ᵢ/nᵢ` and Welch–Satterthwaite degrees of freedom ([`crate::welch::welch`]): it
//! carries the measurement's and the prediction's uncertainty both. The mechanism
//!
//! - **holds here** when that interval lies within the agreement band `[1/(1 + a), 1 + a]`
//!   (`ClaimBand::relative`, the claims' own band)
//!   (`a` the mechanism's tolerance, ±25% by default): measurement and prediction agree
//!   within the band even at the ends of both intervals;
//! - **does not hold here** when it lies wholly outside the band;
//! - is **inconclusive** when it straddles an edge, or a side has fewer than 2 repetitions;
//! - is **not testable here** when the server does not set the pace in both saturated cells
//!   (as [`crate::bounds`] labels them): a prediction of QPS at a saturated server then says
//!   nothing either way ([`crate::mechanisms::check`] applies this last).

use echolab_core::experiment::{Mechanism, MechanismKind};
use echolab_core::results::RunRecord;

use crate::dataset::{CellData, Dataset};
use crate::format;
use crate::inference::{ratio, Ratio, Summary};
use crate::mechanism_check::{agreement, MechanismCheck};
use crate::metrics;

/// The wait calls, whose time below saturation is spent blocked.
const WAIT_CALLS: [&str; 3] = ["epoll_wait", "select", "poll"];

/// The server's kernel cost per request in one run, µs: timed non-wait calls' total time over
/// the requests the server read. `None` when the run failed, has no server stats, read
/// nothing, or its calls were not timed.
pub fn cost_us(run: &RunRecord) -> Option<f64> {
    if run.error.is_some() {
        return None;
    }
    let server = run.server.as_ref()?;
    let requests = server.totals.bytes_in as f64 / run.cell.payload.max(1) as f64;
    if requests <= 0.0 {
        return None;
    }
    let mut ns = 0u64;
    let mut timed = false;
    for (name, stat) in &server.totals.syscalls {
        if WAIT_CALLS.contains(&name.as_str()) {
            continue;
        }
        if let Some(t) = stat.total_ns {
            ns += t;
            timed = true;
        }
    }
    timed.then(|| ns as f64 / requests / 1e3)
}

/// Per call name: calls per request and mean µs per call, pooled over `cell`'s runs, for the
/// report's account of where the cost goes (`read 1.0 × 2.1 µs`).
fn breakdown(cell: &CellData<'_>) -> String {
    let mut by: std::collections::BTreeMap<&str, (u64, u64)> = Default::default();
    let mut requests = 0.0;
    for run in cell.ok_runs() {
        let Some(s) = run.server.as_ref() else {
            continue;
        };
        requests += s.totals.bytes_in as f64 / run.cell.payload.max(1) as f64;
        for (name, stat) in &s.totals.syscalls {
            if let (false, Some(t)) = (WAIT_CALLS.contains(&name.as_str()), stat.total_ns) {
                let e = by.entry(name.as_str()).or_default();
                e.0 += stat.count;
                e.1 += t;
            }
        }
    }
    if requests <= 0.0 {
        return String::new();
    }
    by.iter()
        .filter(|(_, (n, _))| *n > 0)
        .map(|(name, (n, t))| {
            format!(
                "{name} {} × {} µs",
                format::num(*n as f64 / requests),
                format::num(*t as f64 / *n as f64 / 1e3)
            )
        })
        .collect::<Vec<_>>()
        .join(" + ")
}

/// The costs of `cell`'s runs that have one.
fn costs(cell: &CellData<'_>) -> Vec<f64> {
    cell.ok_runs().filter_map(cost_us).collect()
}

/// Checks a [`MechanismKind::SyscallCost`] mechanism on the run's data (see the module doc).
pub fn check(ds: &Dataset<'_>, m: &Mechanism, mut out: MechanismCheck) -> MechanismCheck {
    debug_assert_eq!(m.kind, MechanismKind::SyscallCost);
    let cells = (
        ds.one(&m.numerator),
        ds.one(&m.denominator),
        m.probe_numerator.as_ref().and_then(|s| ds.one(s)),
        m.probe_denominator.as_ref().and_then(|s| ds.one(s)),
    );
    let (Some(num), Some(den), Some(pn), Some(pd)) = cells else {
        out.how = "a cell of the mechanism (saturated or probe) has no data".into();
        return out;
    };
    out.source = format!(
        "the server's own timing of its system calls (echo-server --time-syscalls) in the open-loop probes {} and {}, \
         measured apart from the saturated cells' QPS",
        pd.id, pn.id
    );
    let qps = |c: &CellData<'_>| c.values(metrics::QPS);
    let (mn, md) = (qps(num), qps(den));
    let (cn, cd) = (costs(pn), costs(pd));
    let confidence = num.confidence;
    out.measured = match (Summary::at(&mn, confidence), Summary::at(&md, confidence)) {
        (Some(a), Some(b)) => ratio(&a, &b).ok(),
        _ => None,
    };
    let prediction: Option<Ratio> =
        match (Summary::at(&cd, confidence), Summary::at(&cn, confidence)) {
            (Some(a), Some(b)) => ratio(&a, &b).ok(),
            _ => None,
        };
    let Some(prediction) = prediction else {
        out.how = format!(
            "no timed system calls in {} or {} (their servers need --time-syscalls)",
            pn.id, pd.id
        );
        return out;
    };
    let per = |c: &CellData<'_>, v: &[f64]| {
        let g = Summary::of(v).map_or(f64::NAN, |s| s.centre);
        format!(
            "{} µs per request in {} ({}; {} repetition(s))",
            format::num(g),
            c.id,
            breakdown(c),
            v.len()
        )
    };
    out.how = format!(
        "kernel cost from timed system calls (wait calls left out: below saturation they block): {} against {}; \
         QPS at a saturated server goes as 1 / cost. Left out: kernel work outside the server's calls (softirq, \
         on loopback partly on the client's CPU) and the server's user time",
        per(pd, &cd),
        per(pn, &cn)
    );
    out.predicted = Some(prediction.value);
    out.prediction = Some(prediction);
    if let Some(ag) = agreement(&mn, &md, &cd, &cn, m.agreement(), confidence) {
        out.verdict = ag.verdict;
        out.agreement = Some(ag);
    }
    out
}

#[cfg(test)]
mod tests;
