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
}

impl MechanismKind {
    /// The kind as the experiment file spells it.
    pub fn name(self) -> &'static str {
        match self {
            MechanismKind::CpuPerRequest => "cpu-per-request",
            MechanismKind::RoundTrips => "round-trips",
            MechanismKind::Wakeups => "wakeups",
            MechanismKind::SyscallTime => "syscall-time",
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
    /// The numerator's cell, as for claims.
    pub numerator: CellSelector,
    /// The denominator's cell.
    pub denominator: CellSelector,
    /// [`MechanismKind::SyscallTime`]: the system call (`connect`, `close`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syscall: Option<String>,
    /// How far the prediction may be from the measured effect and still hold: default
    /// [`DEFAULT_AGREEMENT`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerance: Option<Percent>,
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
