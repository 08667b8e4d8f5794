//! Consistency of closed-loop cells by Little's law.
//!
//! In a closed loop each of the `conns` connections has exactly one request outstanding, so
//! the mean number in the system is `conns` and Little's law (L = λ·W; Little 1961, "A proof
//! for the queuing formula L = λW", Operations Research 9(3):383–387) gives
//! `QPS = conns / mean latency`. In short mode the latency covers connect → close, i.e. the
//! whole occupancy of a connection slot, so the same law holds per slot.
//!
//! When the measured QPS is well below that, the connections spent time outside the measured
//! latency window (client threads not scheduled, stragglers at the end of a rounds-bounded
//! run, the client's own CPU), so the client, not the server, was likely the bottleneck.

use crate::dataset::CellData;

/// A run is flagged when `|measured / expected − 1|` exceeds this (10%, the noise threshold
/// the report uses for a coefficient of variation, [`crate::inference::NOISY_CV`]).
pub const TOLERANCE: f64 = 0.10;

/// The law applied to one run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunCheck {
    /// Repetition.
    pub repetition: u64,
    /// Connections (`bench.conns`).
    pub conns: u64,
    /// Mean latency, µs.
    pub mean_us: f64,
    /// `conns / mean latency`, requests/s.
    pub expected_qps: f64,
    /// `bench.qps`, requests/s.
    pub measured_qps: f64,
}

impl RunCheck {
    /// `measured / expected`.
    pub fn ratio(&self) -> f64 {
        self.measured_qps / self.expected_qps
    }

    /// Whether the run disagrees by more than [`TOLERANCE`].
    pub fn flagged(&self) -> bool {
        (self.ratio() - 1.0).abs() > TOLERANCE
    }
}

/// `conns / mean latency` in requests/s, for a mean latency in µs; `None` for a zero mean.
pub fn expected_qps(conns: u64, mean_us: f64) -> Option<f64> {
    (mean_us > 0.0).then(|| conns as f64 / (mean_us / 1e6))
}

/// The law applied to every usable run of a closed-loop cell; `None` for other cells or
/// when no run has a mean latency.
pub fn check_cell(cell: &CellData<'_>) -> Option<Vec<RunCheck>> {
    if !cell.is_closed_loop() {
        return None;
    }
    let runs: Vec<RunCheck> = cell
        .ok_runs()
        .filter_map(|r| {
            let b = r.bench.as_ref()?;
            let conns = if b.conns > 0 {
                b.conns
            } else {
                cell.cell.conns
            };
            Some(RunCheck {
                repetition: r.repetition,
                conns,
                mean_us: b.latency_us?.mean,
                expected_qps: expected_qps(conns, b.latency_us?.mean)?,
                measured_qps: b.qps,
            })
        })
        .collect();
    (!runs.is_empty()).then_some(runs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_law_and_its_tolerance() {
        // 100 connections at 2 ms mean → 50 000 requests/s.
        assert_eq!(expected_qps(100, 2000.0), Some(50_000.0));
        assert_eq!(expected_qps(100, 0.0), None);
        let at = |measured| RunCheck {
            repetition: 1,
            conns: 100,
            mean_us: 2000.0,
            expected_qps: 50_000.0,
            measured_qps: measured,
        };
        assert!(!at(46_000.0).flagged());
        assert!(at(44_000.0).flagged());
        assert!(at(56_000.0).flagged());
    }
}
