//! Attribution as a designed experiment: the seed's settings that this machine can vary are
//! the factors of a two-level factorial (each at here's level or the seed's), and a claim's
//! log ratio under every run of the design gives each setting's main effect and each pair's
//! interaction, with intervals (Montgomery, *Design and Analysis of Experiments*, 9th ed.,
//! ch. 6 and 8).
//!
//! - **The design** ([`Plan`]): every combination for up to three factors (2^k runs); for four
//!   or more, the half fraction whose last factor is set by the product of the others
//!   (`I = AB…K`, resolution k: IV for four factors, 8 runs instead of 16). In a resolution IV
//!   design a main effect is aliased with three-factor interactions only (taken as
//!   negligible), and the two-factor interactions are aliased in pairs (`AB = CD`), reported
//!   as one term that names both.
//! - **The response**: the claim's ratio on the log scale, `y = mean(ln num) − mean(ln den)`
//!   over the run's repetitions ([`Response`]), with its variance from the two cells'
//!   repetitions.
//! - **Effects** ([`estimate`]): `E_S = (2/N) Σ_i s_i(S) y_i`, `s_i(S)` the product of the
//!   run's ±1 levels of the factors in `S`; `exp(E_S)` is the factor by which the ratio changes
//!   when the setting goes from here's level to the seed's, averaged over the other settings'
//!   levels (for an interaction: how much the pair's joint change differs from the product of
//!   their separate ones). Its variance is `Σ c_i² var(y_i)` (the runs are independent) with
//!   Welch–Satterthwaite degrees of freedom over every cell's repetitions, so the interval
//!   needs no replicate of the whole design.
//! - **Blocked by round**: `--explain` runs every run of the design in every round, so a shift
//!   of the machine between rounds adds the same to every `y_i` and cancels in every contrast
//!   (whose coefficients sum to zero); its variance stays in the pooled repetitions, which
//!   errs wide.
//! - **The share of the gap** a main effect closes: `E_j / (ln seed − y_here)`, `y_here` the
//!   run with every setting at here's level, with a delta-method interval that counts
//!   `y_here`'s variance in both terms (the seed's figure is taken as exact). The main
//!   effects (and odd-order interactions) add up to the change from here to all the seed's
//!   settings together; two-factor interactions cancel between those two corners, so they
//!   get no share.

use crate::inference::{Interval, Method, Ratio};
use crate::sequential::Confidence;

/// A two-level design over named factors.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The factors, in order (setting names).
    pub factors: Vec<String>,
    /// The runs: for each, which factors are at the seed's level.
    pub runs: Vec<Vec<bool>>,
    /// Whether the design is the half fraction (`I` = the product of every factor).
    pub half_fraction: bool,
}

/// One term of the model: a main effect (one factor) or a two-factor interaction, with the
/// other term it is aliased with in a half fraction of four factors.
#[derive(Debug, Clone, PartialEq)]
pub struct Term {
    /// The factors' indices.
    pub factors: Vec<usize>,
    /// The aliased two-factor term, when the design confounds them.
    pub alias: Option<Vec<usize>>,
}

impl Plan {
    /// The design for `factors`: full for up to three, the half fraction for more.
    pub fn new(factors: Vec<String>) -> Self {
        let k = factors.len();
        let half = k >= 4;
        let free = if half { k - 1 } else { k };
        let runs = (0..1usize << free)
            .map(|bits| {
                let mut high: Vec<bool> = (0..free).map(|j| bits >> j & 1 == 1).collect();
                if half {
                    // The last factor's sign is the product of the others' (I = AB…K).
                    let minus = high.iter().filter(|h| !**h).count();
                    high.push(minus % 2 == 0);
                }
                high
            })
            .collect();
        Self {
            factors,
            runs,
            half_fraction: half,
        }
    }

    /// The model's terms: every main effect, then every two-factor interaction (once per
    /// aliased pair in a half fraction of four).
    pub fn terms(&self) -> Vec<Term> {
        let k = self.factors.len();
        let mut terms: Vec<Term> = (0..k)
            .map(|j| Term {
                factors: vec![j],
                alias: None,
            })
            .collect();
        for a in 0..k {
            for b in a + 1..k {
                let alias = (self.half_fraction && k == 4)
                    .then(|| (0..k).filter(|j| *j != a && *j != b).collect::<Vec<_>>());
                // The pair containing factor 0 stands for its alias.
                if alias.as_ref().is_some_and(|al| al[0] == 0) {
                    continue;
                }
                terms.push(Term {
                    factors: vec![a, b],
                    alias,
                });
            }
        }
        terms
    }

    /// The index of the run with every factor at here's level (present in every design).
    pub fn here_run(&self) -> Option<usize> {
        self.runs.iter().position(|r| r.iter().all(|h| !h))
    }

    /// The term's name: `cpu plan`, `cpu plan × client`, `cpu plan × client (= hosts ×
    /// measure)`.
    pub fn name(&self, term: &Term) -> String {
        let join = |f: &[usize]| {
            f.iter()
                .map(|j| self.factors[*j].as_str())
                .collect::<Vec<_>>()
                .join(" × ")
        };
        match &term.alias {
            Some(a) => format!("{} (= {}, aliased)", join(&term.factors), join(a)),
            None => join(&term.factors),
        }
    }

    /// The ±1 sign of `term` in run `i`.
    fn sign(&self, i: usize, term: &Term) -> f64 {
        term.factors
            .iter()
            .map(|j| if self.runs[i][*j] { 1.0 } else { -1.0 })
            .product()
    }
}

/// A run's response: the claim's log ratio and its variance pieces.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    /// `mean(ln numerator) − mean(ln denominator)`.
    pub y: f64,
    /// Each cell's variance of its mean log, `s² / n`, with its degrees of freedom `n − 1`.
    pub pieces: [(f64, f64); 2],
}

impl Response {
    /// From the two cells' repetitions; `None` unless both have 2 or more positive values.
    pub fn of(numerator: &[f64], denominator: &[f64]) -> Option<Self> {
        let piece = |v: &[f64]| -> Option<(f64, (f64, f64))> {
            if v.len() < 2 || v.iter().any(|x| !(x.is_finite() && *x > 0.0)) {
                return None;
            }
            let logs: Vec<f64> = v.iter().map(|x| x.ln()).collect();
            let (m, sd) = crate::welch::mean_sd(&logs);
            Some((m, (sd * sd / v.len() as f64, v.len() as f64 - 1.0)))
        };
        let (mn, pn) = piece(numerator)?;
        let (md, pd) = piece(denominator)?;
        Some(Self {
            y: mn - md,
            pieces: [pn, pd],
        })
    }

    /// The variance of `y`.
    pub fn var(&self) -> f64 {
        self.pieces[0].0 + self.pieces[1].0
    }
}

/// One term's estimate.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    /// The term.
    pub term: Term,
    /// The change as a factor on the claim's ratio, `exp(E)`, with its interval (a
    /// [`Ratio`], so it is judged by the claims' band rule).
    pub change: Ratio,
    /// For a main effect, the share of the gap between here and the seed's figure it closes
    /// (a fraction; above 1 past the seed's figure, negative away from it), with its interval;
    /// `None` for an interaction, without a seed figure, or when here is at the seed's figure.
    pub share: Option<(f64, Interval)>,
}

/// The estimate of `term` from the design's `responses` (one per run, in the plan's order),
/// at `confidence`, with the share of the gap to `seed` (the claim's figure, a ratio) for a
/// main effect. `None` when a run has no response.
pub fn estimate(
    plan: &Plan,
    responses: &[Option<Response>],
    term: &Term,
    confidence: Confidence,
    seed: Option<f64>,
) -> Option<Estimate> {
    let r: Vec<&Response> = responses
        .iter()
        .map(Option::as_ref)
        .collect::<Option<_>>()?;
    if r.len() != plan.runs.len() {
        return None;
    }
    let scale = 2.0 / r.len() as f64;
    let c: Vec<f64> = (0..r.len()).map(|i| scale * plan.sign(i, term)).collect();
    let e: f64 = c.iter().zip(&r).map(|(c, r)| c * r.y).sum();
    let var: f64 = c.iter().zip(&r).map(|(c, r)| c * c * r.var()).sum();
    let df_terms: f64 = c
        .iter()
        .zip(&r)
        .flat_map(|(c, r)| r.pieces.map(|(v, nu)| (c * c * v).powi(2) / nu))
        .sum();
    let df = if df_terms > 0.0 {
        (var * var / df_terms).floor().max(1.0) as u64
    } else {
        1
    };
    let t = confidence.t(df).unwrap_or(1.960);
    let se = var.sqrt();
    let change = Ratio {
        value: e.exp(),
        method: if var == 0.0 {
            Method::Exact
        } else {
            Method::LogT
        },
        ci95: Some(Interval {
            low: (e - t * se).exp(),
            high: (e + t * se).exp(),
        }),
        no_ci: None,
    };
    let share = (term.factors.len() == 1)
        .then_some(())
        .and(seed)
        .zip(plan.here_run())
        .and_then(|(seed, h)| {
            let gap = seed.ln() - r[h].y;
            if gap == 0.0 {
                return None;
            }
            let s = e / gap;
            // Delta method: var(E/g) with cov(E, g) = −c_h · var(y_h).
            let (var_g, cov) = (r[h].var(), -c[h] * r[h].var());
            let v = (var - 2.0 * s * cov + s * s * var_g) / (gap * gap);
            let h = t * v.max(0.0).sqrt();
            Some((
                s,
                Interval {
                    low: s - h,
                    high: s + h,
                },
            ))
        });
    Some(Estimate {
        term: term.clone(),
        change,
        share,
    })
}

#[cfg(test)]
#[path = "factorial_tests.rs"]
mod tests;
