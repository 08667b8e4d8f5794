//! The standard error and degrees of freedom of a sum or difference of sample means on the
//! log scale (Welch 1947), shared by a ratio's interval ([`crate::inference::ratio`]) and a
//! replication's ([`crate::replication`]).

/// `(mean, sample standard deviation)` of `v` (stdev 0 for fewer than 2 values).
pub(crate) fn mean_sd(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let sd = if v.len() < 2 {
        0.0
    } else {
        (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
    };
    (mean, sd)
}

/// One sample of positive values on the log scale: the mean of the logarithms, their sample
/// variance (divisor n − 1) and the sample size; one term of [`welch`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogSample {
    /// Mean of the logarithms.
    pub mean: f64,
    /// Sample variance of the logarithms; 0 for a single value.
    pub var: f64,
    /// Number of values.
    pub n: usize,
}

impl LogSample {
    /// The log-scale summary of `values`, which must all be positive (the caller checks).
    pub fn of(values: &[f64]) -> Self {
        let logs: Vec<f64> = values.iter().map(|v| v.ln()).collect();
        let (mean, sd) = mean_sd(&logs);
        Self {
            mean,
            var: sd * sd,
            n: values.len(),
        }
    }
}

/// The standard error of a sum or difference of the independent samples' means and its
/// Welch–Satterthwaite degrees of freedom, floored (Welch 1947): `se² = Σ varᵢ/nᵢ`,
/// `df = se⁴ / Σ (varᵢ/nᵢ)² / (nᵢ − 1)`, at least 1. A sample without spread, or of one value,
/// contributes no term to the df.
pub fn welch(samples: &[LogSample]) -> (f64, u64) {
    let terms: Vec<(f64, usize)> = samples
        .iter()
        .map(|s| (s.var / s.n.max(1) as f64, s.n))
        .collect();
    let se2: f64 = terms.iter().map(|(a, _)| a).sum();
    let denom: f64 = terms
        .iter()
        .filter(|(a, n)| *a > 0.0 && *n > 1)
        .map(|(a, n)| a * a / (*n as f64 - 1.0))
        .sum();
    let df = if denom > 0.0 {
        (se2 * se2 / denom).floor().max(1.0) as u64
    } else {
        1
    };
    (se2.sqrt(), df)
}
