//! Spread claims: one cell's repetitions vary more than another's (seed 001 §3.2: LT's
//! long-connection QPS swings across rounds, ET's does not), judged with a one-sided F-test on
//! the variances of the log values (NIST/SEMATECH e-Handbook §1.3.5.9), so that spread is
//! relative and scale-free.

use crate::inference::{Interval, Method, Ratio};

/// What the F-test found of the numerator's spread against the denominator's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpreadOutcome {
    /// Wider, significant at [`SPREAD_CONFIDENCE`] (the claim holds).
    NumeratorWider,
    /// Narrower, significant the other way (the claim is refuted).
    NumeratorNarrower,
    /// Neither: the repetitions cannot tell the spreads apart (the reason says why).
    Undecided,
}

/// The confidence of the spread test: one-sided, 95%.
pub const SPREAD_CONFIDENCE: f64 = 0.95;

/// The sample standard deviation of the natural logarithms of `values` (divisor `n − 1`).
///
/// # Errors
/// A sentence when a value is not positive (no logarithm) or there are fewer than 2.
pub fn log_sd(values: &[f64]) -> Result<f64, String> {
    if values.len() < 2 {
        return Err(format!(
            "{} repetition(s): a spread needs at least 2",
            values.len()
        ));
    }
    if let Some(v) = values.iter().find(|v| !(v.is_finite() && **v > 0.0)) {
        return Err(format!("{v} is not positive, so it has no logarithm"));
    }
    let logs: Vec<f64> = values.iter().map(|v| v.ln()).collect();
    let n = logs.len() as f64;
    let mean = logs.iter().sum::<f64>() / n;
    Ok((logs.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt())
}

/// The ratio of the log-SDs of two independent samples, `s_num / s_den = sqrt(F)` with
/// `F = s_num² / s_den²` on `(n_num − 1, n_den − 1)` degrees of freedom, and its two one-sided
/// 95% confidence bounds `sqrt(F / F(0.95; d1, d2))` and `sqrt(F · F(0.95; d2, d1))` (the
/// F-test's interval for a ratio of variances, NIST/SEMATECH e-Handbook §1.3.5.9, in units
/// of SDs). Logarithms make the spread relative: a cell ten times faster with the same
/// relative swings has the same log-SD. `ci95` is `None`, with the reason, when the
/// denominator does not vary (F undefined).
///
/// # Errors
/// A sentence when a side has fewer than 2 values or a value that is not positive.
pub fn spread_ratio(numerator: &[f64], denominator: &[f64]) -> Result<Ratio, String> {
    let sn = log_sd(numerator).map_err(|e| format!("numerator: {e}"))?;
    let sd = log_sd(denominator).map_err(|e| format!("denominator: {e}"))?;
    let (d1, d2) = (numerator.len() as u64 - 1, denominator.len() as u64 - 1);
    if sd == 0.0 {
        return Ok(Ratio {
            value: if sn == 0.0 { 1.0 } else { f64::INFINITY },
            method: Method::LogT,
            ci95: None,
            no_ci: Some(
                "the denominator gave the same value in every repetition, so F is undefined".into(),
            ),
        });
    }
    let f = (sn / sd).powi(2);
    // d1, d2 ≥ 1 here, so both quantiles exist.
    let up = crate::fdist::f_quantile(SPREAD_CONFIDENCE, d1, d2).unwrap_or(f64::INFINITY);
    let down = crate::fdist::f_quantile(SPREAD_CONFIDENCE, d2, d1).unwrap_or(f64::INFINITY);
    Ok(Ratio {
        value: f.sqrt(),
        method: Method::LogT,
        ci95: Some(Interval {
            low: (f / up).sqrt(),
            high: (f * down).sqrt(),
        }),
        no_ci: None,
    })
}

/// Applies the spread rule to the values of the two cells (see the module doc):
/// `F = s²(ln num) / s²(ln den)` on `(d1, d2) = (n_num − 1, n_den − 1)` degrees of freedom;
/// reproduced when `F > F(0.95; d1, d2)`, refuted when `F < 1 / F(0.95; d2, d1)`, inconclusive
/// otherwise, with the fold the test would have needed. Returns our log-SD ratio, the verdict
/// and why (one sentence, no final full stop).
///
/// # Errors
/// A sentence when no spread can be computed (see [`spread_ratio`]).
pub fn test_spread(
    numerator: &[f64],
    denominator: &[f64],
) -> Result<(Ratio, SpreadOutcome, String), String> {
    let ours = spread_ratio(numerator, denominator)?;
    let (n1, n2) = (numerator.len() as u64, denominator.len() as u64);
    let (d1, d2) = (n1 - 1, n2 - 1);
    if ours.ci95.is_none() {
        let why = format!(
            "no test: {}",
            ours.no_ci.as_deref().unwrap_or("no interval")
        );
        return Ok((ours, SpreadOutcome::Undecided, why));
    }
    let f = ours.value.powi(2);
    let up = crate::fdist::f_quantile(SPREAD_CONFIDENCE, d1, d2).unwrap_or(f64::INFINITY);
    let down = crate::fdist::f_quantile(SPREAD_CONFIDENCE, d2, d1).unwrap_or(f64::INFINITY);
    let fs = |v: f64| {
        format!("{v:.3}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    };
    let stat = format!("F = {} on ({d1}, {d2}) df", fs(f));
    if f > up {
        Ok((
            ours,
            SpreadOutcome::NumeratorWider,
            format!(
                "{stat} exceeds F(0.95; {d1}, {d2}) = {}: the numerator's spread is larger at 95% (one-sided)",
                fs(up)
            ),
        ))
    } else if f * down < 1.0 {
        Ok((
            ours,
            SpreadOutcome::NumeratorNarrower,
            format!(
                "{stat} is below 1/F(0.95; {d2}, {d1}) = {}: the numerator's spread is smaller at 95% (one-sided)",
                fs(1.0 / down)
            ),
        ))
    } else {
        let counts = if n1 == n2 {
            format!("{n1} repetitions each")
        } else {
            format!("{n1} and {n2} repetitions")
        };
        Ok((
            ours,
            SpreadOutcome::Undecided,
            format!(
                "{stat}: {counts} cannot tell spreads apart unless their variances differ by more than F(0.95; {d1}, {d2}) = {}× ({}× in log-SD)",
                fs(up),
                fs(up.sqrt())
            ),
        ))
    }
}
