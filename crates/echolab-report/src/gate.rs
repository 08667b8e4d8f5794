//! The regression gate of `echolab-report compare --gate` and `echolab-up --replay --gate`:
//! whether a run (the candidate) is slower than a baseline run of the same experiment, per
//! shared cell, by a rule that survives a host-level shift.
//!
//! Why a rule of its own: two exp31 runs made minutes apart on one noisy 2-core VM differed by
//! a shift of every cell's QPS of 0.83–0.87×, each with a 95% interval excluding 1, while the
//! gains between cells within each run agreed (CV 3.2%). The repetitions within a run do not
//! see such a shift (it is a run-level variance component), so the equivalence verdict at ±5%
//! calls those cells "different"; a gate on that verdict would stop every unchanged build.
//!
//! The rule: a cell's ratio (candidate / baseline, ratio of geometric means with its 95%
//! interval, [`crate::inference::ratio`]) is judged against the band widened by the host
//! allowance `h` on top of the equivalence margin `m`:
//!
//! ```text
//! [ (1 − m)·(1 − h) ,  (1 + m) / (1 − h) ]        m = 5%, h = 20%:  [0.76×, 1.31×]
//! ```
//!
//! **slower** when the interval lies wholly on the slow side of the band (QPS below it, or
//! the p50 latency above it), **faster** when wholly on the other side, **inconclusive** when
//! it crosses an edge, **within** when it lies inside. The gate fails on a slower cell
//! (`--gate slower`), or on a slower or faster one (`--gate either`); inconclusive cells are
//! listed and do not fail. The default `h` = 20% clears the largest shift measured between
//! unchanged runs (0.83×) with room; a server twice as slow (0.5×) is far outside it. A shift
//! of the whole run larger than `h` fails the gate: the gate cannot tell such a host from a
//! slower build, and the report prints the run-wide shift (the median over cells) so that a
//! reader can tell which it was.
//!
//! Metrics gated: QPS and p50 latency, the headline figures; p99 and CPU are compared and
//! shown but too noisy across runs on a shared machine to stop a build.

use serde::Serialize;

use crate::inference::{ratio, Summary};
use crate::metrics;

/// The rule in one line, for reports and `--help`.
pub const RULE: &str = "a cell fails when its QPS or p50 ratio's 95% CI lies wholly beyond [(1-m)(1-h), (1+m)/(1-h)] on the slow side; m the margin, h the host allowance";

/// The default host allowance `h`: 20%, above the 17% shift measured between unchanged runs.
pub const DEFAULT_HOST_SHIFT: f64 = 0.20;

/// Process exit status when the gate fails (0 passed, 1 I/O error, 2 bad usage or input).
pub const EXIT_GATE_FAILED: u8 = 3;

/// `--host-shift` (on `echolab-report compare` and `echolab-up --replay`): a percentage, at
/// least 0% and below 100%, as a fraction.
///
/// # Errors
/// One line naming the value and the range.
pub fn parse_host_shift(s: &str) -> Result<f64, String> {
    let p = echolab_core::units::parse_percent(s).map_err(|e| e.to_string())?;
    if !(0.0..100.0).contains(&p) {
        return Err(format!(
            "invalid percentage {s:?}: must be at least 0% and below 100%"
        ));
    }
    Ok(p / 100.0)
}

/// `--gate` and `--host-shift`, defined once for the two commands that flatten them
/// (`echolab-report compare` and `echolab-up --replay`).
#[derive(Debug, Clone, Copy, PartialEq, clap::Args)]
pub struct GateArgs {
    /// Regression gate: exit 3 when a shared cell of the later run is slower (or, with
    /// `either`, slower or faster) than the reference run's (compare's first run, a replay's
    /// original) beyond the band widened by --host-shift; the cells are listed on standard
    /// error. Inconclusive cells are listed and do not fail. Rule: a cell fails when its QPS
    /// ratio's 95% CI lies wholly below (1-m)(1-h), or its p50 latency ratio's wholly above
    /// (1+m)/(1-h), m the comparison's margin (compare's --margin; 5% on a replay)
    /// (docs/methodology.md, "Regression gate").
    #[arg(long, value_enum, value_name = "DIRECTION")]
    pub gate: Option<GateDirection>,
    /// The gate's host allowance h: how far a whole run may shift from the host alone (two
    /// unchanged exp31 runs minutes apart on a 2-core VM shifted every cell's QPS by
    /// 0.83-0.87x); at least 0%, below 100%.
    #[arg(long, default_value = "20%", value_name = "PCT", value_parser = parse_host_shift,
          requires = "gate")]
    pub host_shift: f64,
}

impl GateArgs {
    /// The gate asked for, with its host allowance; `None` without `--gate`.
    pub fn asked(&self) -> Option<(GateDirection, f64)> {
        self.gate.map(|d| (d, self.host_shift))
    }
}

/// Which direction fails the gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum GateDirection {
    /// Fail when a cell is slower (lower QPS or higher p50 latency) beyond the band.
    Slower,
    /// Fail when a cell is slower or faster beyond the band.
    Either,
}

/// A gated metric and which way is slow.
fn slow_is_higher(metric: &str) -> Option<bool> {
    match metric {
        metrics::QPS => Some(false),
        metrics::P50_US => Some(true),
        _ => None,
    }
}

/// The gate's verdict on one metric of one cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GateVerdict {
    /// The interval lies inside the widened band.
    Within,
    /// It lies wholly on the slow side.
    Slower,
    /// It lies wholly on the fast side.
    Faster,
    /// It crosses an edge of the band, or there is no interval.
    Inconclusive,
}

/// The widened band `[(1 − m)(1 − h), (1 + m)/(1 − h)]` for margin `m` and allowance `h`
/// (fractions in [0, 1)).
pub fn band(margin: f64, host_shift: f64) -> (f64, f64) {
    (
        (1.0 - margin) * (1.0 - host_shift),
        (1.0 + margin) / (1.0 - host_shift),
    )
}

/// One metric of one cell under the gate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GateCell {
    /// Cell id.
    pub cell: String,
    /// Metric name ([`metrics::QPS`] or [`metrics::P50_US`]).
    pub metric: String,
    /// Candidate / baseline.
    pub ratio: f64,
    /// Its 95% interval, when there is one.
    pub ci95: Option<(f64, f64)>,
    /// The verdict against the widened band.
    pub verdict: GateVerdict,
}

/// Judges `metric` of one cell, baseline values `a` and candidate values `b` (one per
/// repetition); `None` for a metric the gate does not judge or values without a summary.
pub fn judge_cell(
    cell: &str,
    metric: &str,
    a: &[f64],
    b: &[f64],
    margin: f64,
    host_shift: f64,
) -> Option<GateCell> {
    let slow_high = slow_is_higher(metric)?;
    let (sa, sb) = (Summary::of(a)?, Summary::of(b)?);
    let (value, ci) = if a == b {
        (1.0, Some((1.0, 1.0)))
    } else {
        let r = ratio(&sb, &sa).ok()?;
        (r.value, r.ci95.map(|i| (i.low, i.high)))
    };
    let (lo, hi) = band(margin, host_shift);
    let verdict = match ci {
        None => GateVerdict::Inconclusive,
        Some((l, h)) if l >= lo && h <= hi => GateVerdict::Within,
        Some((_, h)) if h < lo => {
            if slow_high {
                GateVerdict::Faster
            } else {
                GateVerdict::Slower
            }
        }
        Some((l, _)) if l > hi => {
            if slow_high {
                GateVerdict::Slower
            } else {
                GateVerdict::Faster
            }
        }
        Some(_) => GateVerdict::Inconclusive,
    };
    Some(GateCell {
        cell: cell.to_string(),
        metric: metric.to_string(),
        ratio: value,
        ci95: ci,
        verdict,
    })
}

/// The gate over every shared cell.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GateReport {
    /// The direction that fails.
    pub direction: GateDirection,
    /// The equivalence margin `m`, a fraction.
    pub margin: f64,
    /// The host allowance `h`, a fraction.
    pub host_shift: f64,
    /// The median over cells of the QPS ratio: the run-wide shift, for the reader.
    pub run_shift_qps: Option<f64>,
    /// Every judged metric of every shared cell.
    pub cells: Vec<GateCell>,
}

impl GateReport {
    /// Gathers `cells` into a report.
    pub fn new(
        direction: GateDirection,
        margin: f64,
        host_shift: f64,
        cells: Vec<GateCell>,
    ) -> Self {
        let mut qps: Vec<f64> = cells
            .iter()
            .filter(|c| c.metric == metrics::QPS)
            .map(|c| c.ratio)
            .collect();
        qps.sort_by(f64::total_cmp);
        let run_shift_qps = (!qps.is_empty()).then(|| {
            let n = qps.len();
            if n % 2 == 1 {
                qps[n / 2]
            } else {
                (qps[n / 2 - 1] * qps[n / 2]).sqrt()
            }
        });
        Self {
            direction,
            margin,
            host_shift,
            run_shift_qps,
            cells,
        }
    }

    /// The cells that fail the gate in its direction.
    pub fn failing(&self) -> Vec<&GateCell> {
        self.cells
            .iter()
            .filter(|c| match self.direction {
                GateDirection::Slower => c.verdict == GateVerdict::Slower,
                GateDirection::Either => {
                    matches!(c.verdict, GateVerdict::Slower | GateVerdict::Faster)
                }
            })
            .collect()
    }

    /// The cells that are inconclusive (listed, never failing).
    pub fn inconclusive(&self) -> Vec<&GateCell> {
        self.cells
            .iter()
            .filter(|c| c.verdict == GateVerdict::Inconclusive)
            .collect()
    }

    /// Whether the gate passed.
    pub fn passed(&self) -> bool {
        self.failing().is_empty()
    }

    /// `cell metric ratio (95% CI lo–hi)` per cell.
    fn list(cells: &[&GateCell]) -> String {
        cells
            .iter()
            .map(|c| {
                let ci = c.ci95.map_or(" (no CI)".to_string(), |(l, h)| {
                    format!(" (95% CI {l:.3}–{h:.3})")
                });
                format!("{} {} {:.3}×{ci}", c.cell, c.metric, c.ratio)
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// The outcome in a few lines: passed or failed, the band, the run-wide shift, the
    /// failing and the inconclusive cells.
    pub fn text(&self) -> String {
        let (lo, hi) = band(self.margin, self.host_shift);
        let dir = match self.direction {
            GateDirection::Slower => "slower",
            GateDirection::Either => "slower or faster",
        };
        let mut s = format!(
            "gate ({dir}): {} — band {lo:.3}×–{hi:.3}× (margin {:.0}%, host allowance {:.0}%){}\n",
            if self.passed() { "passed" } else { "FAILED" },
            self.margin * 100.0,
            self.host_shift * 100.0,
            self.run_shift_qps
                .map(|r| format!("; run-wide QPS shift {r:.3}×"))
                .unwrap_or_default()
        );
        let failing = self.failing();
        if !failing.is_empty() {
            s.push_str(&format!("  {dir}: {}\n", Self::list(&failing)));
        }
        let inc = self.inconclusive();
        if !inc.is_empty() {
            s.push_str(&format!(
                "  inconclusive (do not fail): {}\n",
                Self::list(&inc)
            ));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A seeded xorshift generator, so that the simulated runs are the same every time.
    struct Rng(u64);

    impl Rng {
        fn uniform(&mut self) -> f64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 >> 11) as f64 / (1u64 << 53) as f64
        }

        /// A standard normal draw (Box–Muller).
        fn normal(&mut self) -> f64 {
            let u = self.uniform().max(1e-12);
            let v = self.uniform();
            (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
        }
    }

    /// `reps` QPS values around `mean` with coefficient of variation `cv` (log-normal).
    fn sample(rng: &mut Rng, mean: f64, cv: f64, reps: usize) -> Vec<f64> {
        (0..reps)
            .map(|_| mean * (cv * rng.normal()).exp())
            .collect()
    }

    /// exp31-like cells: eight servers at different QPS, three repetitions each, within-run
    /// CV 3.2%; the candidate is the baseline shifted by `shift` (the host) and each cell
    /// further by its own factor (the build).
    fn simulate(seed: u64, shift: f64, build: &[f64]) -> GateReport {
        let mut rng = Rng(seed);
        let means = [
            41_000.0, 38_500.0, 52_000.0, 47_000.0, 12_000.0, 11_500.0, 30_000.0, 29_000.0,
        ];
        let cells = means
            .iter()
            .zip(build)
            .enumerate()
            .filter_map(|(i, (&m, &f))| {
                let a = sample(&mut rng, m, 0.032, 3);
                let b = sample(&mut rng, m * shift * f, 0.032, 3);
                judge_cell(
                    &format!("cell{i}"),
                    metrics::QPS,
                    &a,
                    &b,
                    0.05,
                    DEFAULT_HOST_SHIFT,
                )
            })
            .collect();
        GateReport::new(GateDirection::Slower, 0.05, DEFAULT_HOST_SHIFT, cells)
    }

    #[test]
    fn an_unchanged_build_under_a_host_shift_passes_and_a_twice_slower_server_fails() {
        let same = [1.0; 8];
        for seed in 1..=40u64 {
            for shift in [0.83, 0.85, 0.87, 1.0] {
                let r = simulate(seed * 7919, shift, &same);
                assert!(r.passed(), "seed {seed} shift {shift}: {}", r.text());
                // The run-wide shift is seen for what it is.
                let seen = r.run_shift_qps.unwrap();
                assert!((seen / shift - 1.0).abs() < 0.06, "{seen} vs {shift}");
            }
        }
        let mut slow = [1.0; 8];
        slow[2] = 0.5;
        slow[5] = 0.5;
        for seed in 1..=40u64 {
            // Worst case for the build: the host shifted the other way too (faster machine).
            for shift in [0.83, 1.0, 1.15] {
                let r = simulate(seed * 7919, shift, &slow);
                let failing: Vec<&str> = r.failing().iter().map(|c| c.cell.as_str()).collect();
                assert_eq!(failing, ["cell2", "cell5"], "seed {seed} shift {shift}");
                assert!(r.text().contains("FAILED"), "{}", r.text());
            }
        }
    }

    #[test]
    fn a_whole_server_twice_slower_fails_even_though_every_cell_shifts_alike() {
        for seed in 1..=20u64 {
            let r = simulate(seed, 0.5, &[1.0; 8]);
            assert_eq!(r.failing().len(), 8, "{}", r.text());
        }
    }

    #[test]
    fn latency_is_slow_when_higher_and_either_fails_both_ways() {
        let a = [100.0, 102.0, 98.0];
        let b = [200.0, 204.0, 196.0];
        let c = judge_cell("x", metrics::P50_US, &a, &b, 0.05, 0.2).unwrap();
        assert_eq!(c.verdict, GateVerdict::Slower);
        let c = judge_cell("x", metrics::P50_US, &b, &a, 0.05, 0.2).unwrap();
        assert_eq!(c.verdict, GateVerdict::Faster);
        let r = GateReport::new(GateDirection::Slower, 0.05, 0.2, vec![c.clone()]);
        assert!(r.passed());
        let r = GateReport::new(GateDirection::Either, 0.05, 0.2, vec![c]);
        assert!(!r.passed());
        assert!(judge_cell("x", metrics::P99_US, &a, &b, 0.05, 0.2).is_none());
        let same = judge_cell("x", metrics::QPS, &a, &a, 0.05, 0.2).unwrap();
        assert_eq!(same.verdict, GateVerdict::Within);
    }

    #[test]
    fn a_wide_interval_is_inconclusive_and_listed_without_failing() {
        let a = [100.0, 160.0, 60.0];
        let b = [70.0, 110.0, 45.0];
        let c = judge_cell("noisy", metrics::QPS, &a, &b, 0.05, 0.2).unwrap();
        assert_eq!(c.verdict, GateVerdict::Inconclusive);
        let r = GateReport::new(GateDirection::Slower, 0.05, 0.2, vec![c]);
        assert!(r.passed());
        assert!(
            r.text().contains("inconclusive (do not fail): noisy qps"),
            "{}",
            r.text()
        );
    }
}
