//! A seed's stated mechanism, as data: what the seed says causes its figures, in a form the
//! report can compute from this run's own costs and set beside the measured effect
//! (docs/methodology.md, "Mechanisms").
//!
//! ```yaml
//! mechanisms:
//!   - name: "the gain is the server's CPU per request"
//!     kind: cpu-per-request
//!     source: "seed 000 section 4: short ≈ 45-70 µs of server kernel time per request, long ≈ 7 µs"
//!     explains: ["long/short QPS gain, ET server"]
//!     numerator: {server: epoll-et, mode: long}
//!     denominator: {server: epoll-et, mode: short}
//! ```

use serde::{Deserialize, Serialize};

use super::reference::CellSelector;
use crate::units::Percent;

/// Which prediction a mechanism makes; each kind names the quantity the report computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MechanismKind {
    /// QPS is set by the server's CPU per request: the numerator/denominator QPS ratio is
    /// predicted as the denominator's CPU per request over the numerator's (seed 000 §4).
    CpuPerRequest,
    /// Latency is set by round trips on the path: the P50 ratio is predicted as (round trips
    /// × calibrated RTT + the server's CPU per request), numerator over denominator (seed 000
    /// §6.2: a short connection pays 2 RTT, a long one 1).
    RoundTrips,
    /// Level-triggered epoll wakes the server more often per request than edge-triggered
    /// (seed 001 §4, "event storm"): the server's wait calls and events per request,
    /// numerator over denominator, above 1.
    Wakeups,
    /// A system call costs the same per call in both cells, so its total time follows its
    /// count (seed 002): the `syscall` total-time ratio is predicted as the count ratio.
    SyscallTime,
    /// The knee of a connection-count scan is where the server's CPU reaches its core (seed
    /// 003 §3-4: a single-threaded server's QPS stops rising once its one core is busy): over
    /// the cells of `series` (one server and mode, varying conns), the predicted knee is the
    /// smallest conns at which the server's CPU load (its CPU as a share of the CPUs it can
    /// use) reaches the saturation threshold of the report's bounds (85%); the measured knee is
    /// the first conns after which QPS does not rise beyond its 95% interval. It holds when
    /// the two are the same scan point or adjacent ones.
    Knee,
    /// QPS at saturation goes as 1 / the server's kernel cost per request, that cost measured
    /// apart from the QPS it predicts (seed 000 §4's own method: system calls per request ×
    /// each call's time). The cost comes from the timed open-loop probes `probe_numerator`
    /// and `probe_denominator` (echo-server `--time-syscalls`, a rate below saturation); the
    /// QPS ratio of the saturated cells `numerator` / `denominator` is predicted as the
    /// denominator probe's cost per request over the numerator probe's.
    SyscallCost,
}

impl MechanismKind {
    /// The kind as the experiment file spells it.
    pub fn name(self) -> &'static str {
        match self {
            MechanismKind::CpuPerRequest => "cpu-per-request",
            MechanismKind::RoundTrips => "round-trips",
            MechanismKind::Wakeups => "wakeups",
            MechanismKind::SyscallTime => "syscall-time",
            MechanismKind::Knee => "knee",
            MechanismKind::SyscallCost => "syscall-cost",
        }
    }
}

/// A mechanism the seed gives for one or more of its claims (see the module doc).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mechanism {
    /// What the mechanism says, e.g. "the gain is the server's CPU per request".
    pub name: String,
    /// The prediction it makes.
    pub kind: MechanismKind,
    /// Where the seed states it (section and its figures).
    pub source: String,
    /// The claims (by `name`) whose figure it explains.
    #[serde(default)]
    pub explains: Vec<String>,
    /// The numerator's cell, as for claims (every kind but [`MechanismKind::Knee`]).
    #[serde(default, skip_serializing_if = "is_unset")]
    pub numerator: CellSelector,
    /// The denominator's cell (every kind but [`MechanismKind::Knee`]).
    #[serde(default, skip_serializing_if = "is_unset")]
    pub denominator: CellSelector,
    /// [`MechanismKind::Knee`]: the scan, a selector naming server and mode and matching
    /// several cells that differ in conns (`{server: epoll-et, mode: long}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub series: Option<CellSelector>,
    /// [`MechanismKind::SyscallCost`]: the timed open-loop probe whose cost per request
    /// predicts the numerator's QPS (`{server: epoll-et, mode: long, open_loop: true}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_numerator: Option<CellSelector>,
    /// [`MechanismKind::SyscallCost`]: the probe of the denominator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_denominator: Option<CellSelector>,
    /// [`MechanismKind::SyscallTime`]: the system call (`connect`, `close`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syscall: Option<String>,
    /// How far the prediction may be from the measured effect and still hold: default
    /// [`DEFAULT_AGREEMENT`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerance: Option<Percent>,
}

/// Whether a selector names no coordinate (absent from the file).
fn is_unset(sel: &CellSelector) -> bool {
    *sel == CellSelector::default()
}

/// How close a prediction must come to the measured effect to hold: ±25%, the band the
/// methodology uses for a prediction from costs (a ratio of two CPU figures, each sampled
/// with a few percent of error, against a ratio of two QPS figures).
pub const DEFAULT_AGREEMENT: f64 = 0.25;

impl Mechanism {
    /// The agreement band's half-width as a fraction (0.25 for ±25%).
    pub fn agreement(&self) -> f64 {
        self.tolerance.map_or(DEFAULT_AGREEMENT, |p| p.0 / 100.0)
    }

    /// Checks an experiment file's mechanism: the fields its kind needs, and a tolerance
    /// within (0%, 100%).
    pub(super) fn validate(&self, claim_names: &[&str]) -> Result<(), String> {
        match (self.kind, &self.syscall) {
            (MechanismKind::SyscallTime, None) => {
                return Err("syscall: a syscall-time mechanism names its call".into())
            }
            (MechanismKind::SyscallTime, Some(_)) | (_, None) => {}
            (kind, Some(_)) => {
                return Err(format!("syscall: not used by a {} mechanism", kind.name()))
            }
        }
        let probes = [
            ("probe_numerator", &self.probe_numerator),
            ("probe_denominator", &self.probe_denominator),
        ];
        for (field, probe) in probes {
            match (self.kind, probe) {
                (MechanismKind::SyscallCost, None) => {
                    return Err(format!(
                        "{field}: a syscall-cost mechanism names the timed open-loop probe its cost comes from"
                    ))
                }
                (MechanismKind::SyscallCost, Some(sel)) if !sel.open_loop => {
                    return Err(format!(
                        "{field}: {sel} must select an open-loop probe (open_loop: true)"
                    ))
                }
                (MechanismKind::SyscallCost, Some(_)) | (_, None) => {}
                (kind, Some(_)) => {
                    return Err(format!("{field}: not used by a {} mechanism", kind.name()))
                }
            }
        }
        match (self.kind, &self.series) {
            (MechanismKind::Knee, None) => {
                return Err("series: a knee mechanism names its scan ({server, mode})".into())
            }
            (MechanismKind::Knee, Some(sel)) => {
                if sel.server.is_none() || sel.mode.is_none() || sel.conns.is_some() {
                    return Err(format!(
                        "series: {sel} must name server and mode and leave conns to vary"
                    ));
                }
                for (field, sel) in [
                    ("numerator", &self.numerator),
                    ("denominator", &self.denominator),
                ] {
                    if !is_unset(sel) {
                        return Err(format!(
                            "{field}: not used by a knee mechanism (it has a series)"
                        ));
                    }
                }
                if self.tolerance.is_some() {
                    return Err(
                        "tolerance: not used by a knee mechanism (it holds within one scan step)"
                            .into(),
                    );
                }
            }
            (kind, Some(_)) => {
                return Err(format!("series: not used by a {} mechanism", kind.name()))
            }
            (_, None) => {}
        }
        let a = self.agreement();
        if !(a > 0.0 && a < 1.0) {
            return Err(format!(
                "tolerance: {} must be above 0% and below 100%",
                a * 100.0
            ));
        }
        if let Some(unknown) = self
            .explains
            .iter()
            .find(|n| !claim_names.contains(&n.as_str()))
        {
            return Err(format!(
                "explains: {unknown:?} is not the name of a claim of this experiment"
            ));
        }
        Ok(())
    }
}
