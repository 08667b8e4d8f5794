//! An experiment's `reference`: the figures and claims the seed document published, the
//! cells they are about ([`CellSelector`]), and the seed's setup, so the report can put ours
//! beside them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{BenchMode, Cell};

/// Selects cells by any of their coordinates; a missing coordinate matches all.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CellSelector {
    /// Server model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// Client mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<BenchMode>,
    /// Connections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conns: Option<u64>,
    /// Selects the open-loop probes ([`super::MatrixBlock::rate`]) instead of the closed-loop
    /// cells: without it a selector never matches a probe, so probes stay out of the claims.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub open_loop: bool,
}

impl std::fmt::Display for CellSelector {
    /// `server=epoll-et mode=long conns=100`, naming only the coordinates it has.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if let Some(s) = &self.server {
            parts.push(format!("server={s}"));
        }
        if let Some(m) = self.mode {
            parts.push(format!("mode={}", m.name()));
        }
        if let Some(c) = self.conns {
            parts.push(format!("conns={c}"));
        }
        if self.open_loop {
            parts.push("open-loop".into());
        }
        if parts.is_empty() {
            f.write_str("(every cell)")
        } else {
            f.write_str(&parts.join(" "))
        }
    }
}

impl CellSelector {
    /// Whether `cell` has every coordinate this selector names.
    pub fn matches(&self, cell: &Cell) -> bool {
        self.server.as_ref().is_none_or(|s| *s == cell.server)
            && self.mode.is_none_or(|m| m == cell.mode)
            && self.conns.is_none_or(|c| c == cell.conns)
            && self.open_loop == cell.rate.is_some()
    }
}

/// A figure the seed document published for one cell (means over its repetitions).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReferenceFigure {
    /// Which cell it is about.
    pub cell: CellSelector,
    /// Metrics by name: `qps`, `p50_us`, `p90_us`, `p99_us`, `failures`, `connect_s`
    /// (connect-storm time), `cpu_pct`, `mem_pct`, `mem_mib`, or a syscall metric such as
    /// `syscall.close.count`, `syscall.close.total_s`.
    pub values: BTreeMap<String, f64>,
    /// The seed's value in each of its rounds, by metric, where the seed publishes them
    /// (seed 000 §5 and seed 001 §3 do, three rounds a cell): what `values` is the mean of.
    /// With them on both cells of a magnitude claim, the claim is judged against the seed's
    /// own spread as well as ours (docs/methodology.md, "Claims against the seed's rounds").
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub rounds: BTreeMap<String, Vec<f64>>,
}

/// How far a figure may sit from the mean of its rounds and still be that mean: the seeds
/// print means rounded to whole units (26433 for rounds 20409, 29725, 29165), so 0.5% finds
/// a transcription error without refusing a rounding.
pub(super) const ROUNDS_MEAN_TOLERANCE: f64 = 0.005;

impl ReferenceFigure {
    /// Checks `rounds`: each metric's rounds are at least 2 positive, finite values whose mean
    /// is the figure's value for that metric, when it has one.
    ///
    /// # Errors
    /// The field and what is wrong, e.g. `rounds.qps: 1 value; a spread needs at least 2`.
    pub fn validate_rounds(&self) -> Result<(), String> {
        for (metric, rounds) in &self.rounds {
            if rounds.len() < 2 {
                return Err(format!(
                    "rounds.{metric}: {} value; a spread needs at least 2",
                    rounds.len()
                ));
            }
            if let Some(bad) = rounds.iter().find(|v| !(v.is_finite() && **v > 0.0)) {
                return Err(format!(
                    "rounds.{metric}: {bad} is not a positive number (the seed's rounds are \
                     judged on a log scale)"
                ));
            }
            let mean = rounds.iter().sum::<f64>() / rounds.len() as f64;
            if let Some(&v) = self.values.get(metric) {
                if ((mean - v) / v).abs() > ROUNDS_MEAN_TOLERANCE {
                    return Err(format!(
                        "rounds.{metric}: their mean {mean:.1} is not values.{metric} {v} \
                         (within {}%)",
                        ROUNDS_MEAN_TOLERANCE * 100.0
                    ));
                }
            }
        }
        Ok(())
    }
}

/// What a claim asserts about the ratio numerator / denominator (see [`ReferenceClaim`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClaimKind {
    /// A size: the ratio is `seed_ratio` give or take `tolerance` ("2.15×, ±15%").
    Magnitude,
    /// A direction: the numerator is higher (ratio above 1) or lower (below 1) than the
    /// denominator ("ET ahead of LT").
    Direction,
    /// A shape: the ratio lies beyond a bound ("QPS falls by more than half between 100 and
    /// 500 connections": ratio below 0.5).
    Shape,
    /// A spread: the numerator cell's values vary more across repetitions than the
    /// denominator cell's ("LT's long-connection QPS swings across rounds, ET's is stable").
    /// The ratio is of the two cells' standard deviations of the logarithms of the metric
    /// (log-SDs, so that spread is relative and scale-free); the band is above 1×, judged by a
    /// one-sided F-test on the variances of the logs (NIST/SEMATECH e-Handbook of Statistical
    /// Methods, §1.3.5.9, "F-Test for Equality of Two Variances").
    Spread,
}

/// The side a [`ClaimKind::Direction`] claim puts the numerator on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Direction {
    /// Numerator above denominator (ratio above 1).
    Higher,
    /// Numerator below denominator (ratio below 1).
    Lower,
}

/// The tolerance of a magnitude claim: relative (`"15%"`, a fraction of `seed_ratio`) or
/// absolute (a bare number, `0.02`, in units of the ratio).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Tolerance {
    /// Fraction of the seed's ratio (0.15 for `"15%"`).
    Relative(f64),
    /// Absolute, in units of the ratio.
    Absolute(f64),
}

impl std::fmt::Display for Tolerance {
    /// `±15%` or `±0.02`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Tolerance::Relative(r) => write!(f, "±{}", crate::units::Percent(r * 100.0)),
            Tolerance::Absolute(a) => write!(f, "±{a}"),
        }
    }
}

impl Serialize for Tolerance {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Tolerance::Relative(r) => s.collect_str(&crate::units::Percent(r * 100.0)),
            Tolerance::Absolute(a) => s.serialize_f64(*a),
        }
    }
}

impl<'de> Deserialize<'de> for Tolerance {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Tolerance;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a relative tolerance such as \"15%\" or an absolute one such as 0.02")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Tolerance, E> {
                if v.trim_end().ends_with('%') {
                    crate::units::parse_percent(v)
                        .map(|p| Tolerance::Relative(p / 100.0))
                        .map_err(E::custom)
                } else {
                    v.trim().parse::<f64>().map(Tolerance::Absolute).map_err(|_| {
                        E::custom(format!(
                            "invalid tolerance {v:?}: expected \"15%\" (relative) or a number (absolute)"
                        ))
                    })
                }
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Tolerance, E> {
                Ok(Tolerance::Absolute(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Tolerance, E> {
                Ok(Tolerance::Absolute(v as f64))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Tolerance, E> {
                Ok(Tolerance::Absolute(v as f64))
            }
        }
        d.deserialize_any(V)
    }
}

/// The bound of a [`ClaimKind::Shape`] claim: the ratio lies strictly above `above` and/or
/// strictly below `below`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bound {
    /// The ratio is above this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub above: Option<f64>,
    /// The ratio is below this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub below: Option<f64>,
}

/// The values of the ratio a claim admits: `low..high` (either end may be 0 or infinite),
/// closed for a magnitude, open for a direction or a shape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClaimBand {
    /// Lower end.
    pub low: f64,
    /// Upper end (`f64::INFINITY` when unbounded).
    pub high: f64,
    /// Whether the ends themselves are outside (direction and shape claims are strict).
    pub open: bool,
}

impl ClaimBand {
    /// The closed band of ratios within a factor `1 + r` of `centre` either way,
    /// `[centre / (1 + r), centre · (1 + r)]`: symmetric on the log scale, where every ratio
    /// is judged (a halving and a doubling are the same distance from 1). The one band of a
    /// relative tolerance, for claims, mechanisms' predictions, `compare`'s equivalence margin
    /// and attribution's settle margin alike; `r` is a fraction (0.15 for ±15%).
    pub fn relative(centre: f64, r: f64) -> Self {
        Self {
            low: centre / (1.0 + r),
            high: centre * (1.0 + r),
            open: false,
        }
    }

    /// Whether `x` lies in the band.
    pub fn contains(&self, x: f64) -> bool {
        if self.open {
            self.low < x && x < self.high
        } else {
            self.low <= x && x <= self.high
        }
    }
}

impl std::fmt::Display for ClaimBand {
    /// `1.83–2.47×`, `above 1×`, `below 0.5×`, `between 0.1× and 0.5× (exclusive)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Three significant figures at most, as the report prints ratios.
        let n = |v: f64| {
            if v.fract() == 0.0 {
                format!("{v:.0}")
            } else if v >= 1.0 {
                format!("{v:.2}")
            } else {
                format!("{v:.3}").trim_end_matches('0').to_string()
            }
        };
        match (self.low > 0.0, self.high.is_finite()) {
            (true, false) => write!(f, "above {}×", n(self.low)),
            (false, true) => write!(f, "below {}×", n(self.high)),
            (false, false) => f.write_str("any positive ratio"),
            (true, true) if self.open => {
                write!(
                    f,
                    "between {}× and {}× (exclusive)",
                    n(self.low),
                    n(self.high)
                )
            }
            (true, true) => write!(f, "{}–{}×", n(self.low), n(self.high)),
        }
    }
}

/// A claim of the seed about the ratio of one metric between two cells, with what it asserts
/// (its kind) and how close counts as agreeing (its band), so that the report can check it by
/// equivalence: reproduced when our interval lies inside the band, refuted when it lies wholly
/// outside, inconclusive otherwise.
///
/// ```yaml
/// - name: "long/short QPS gain, ET server"
///   metric: qps
///   numerator: {server: epoll-et, mode: long}
///   denominator: {server: epoll-et, mode: short}
///   seed_ratio: 2.15
///   kind: magnitude          # or direction (with direction: higher|lower),
///   tolerance: 15%           #    or shape (with bound: {below: 0.5} / {above: 2})
///   # expect: 0.5            # a magnitude whose words mean another figure ("about halved")
/// ```
///
/// Experiment files must state `kind`; manifests written before kinds existed have none and
/// are read as a magnitude of `seed_ratio` with [`LEGACY_TOLERANCE`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReferenceClaim {
    /// What the claim says, e.g. "long/short QPS gain, ET server".
    pub name: String,
    /// Metric name as in [`ReferenceFigure::values`].
    pub metric: String,
    /// Cell(s) of the numerator.
    pub numerator: CellSelector,
    /// Cell(s) of the denominator.
    pub denominator: CellSelector,
    /// The ratio the seed published (required for a magnitude; shown beside ours otherwise;
    /// for a spread claim, the ratio of the two cells' log-SDs over the seed's repetitions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed_ratio: Option<f64>,
    /// Magnitude claims whose words mean a round figure other than the published ratio: the
    /// centre of the band ("about halved": 0.5, where the seed measured 0.44). Default:
    /// `seed_ratio`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<f64>,
    /// What the claim asserts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<ClaimKind>,
    /// Magnitude claims: how far from `seed_ratio` still agrees.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerance: Option<Tolerance>,
    /// Direction claims: which side the numerator is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<Direction>,
    /// Shape claims: the bound the ratio lies beyond.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound: Option<Bound>,
}

/// The tolerance assumed for a claim without a kind (from a manifest written before claims
/// stated one): ±15%, the band the seeds' own repetitions support (seed 000's ET long QPS
/// spans 49337–56094 around 53528, ±7%, and a ratio carries two such spreads).
pub const LEGACY_TOLERANCE: Tolerance = Tolerance::Relative(0.15);

impl ReferenceClaim {
    /// The kind, taking a claim without one as a magnitude (see [`LEGACY_TOLERANCE`]).
    pub fn effective_kind(&self) -> ClaimKind {
        self.kind.unwrap_or(ClaimKind::Magnitude)
    }

    /// The band of ratios that agree with the claim.
    ///
    /// # Errors
    /// The field that is missing or wrong for the claim's kind, e.g. `tolerance: a magnitude
    /// claim needs one`.
    pub fn band(&self) -> Result<ClaimBand, String> {
        match self.effective_kind() {
            ClaimKind::Magnitude => {
                let (field, centre) = match (self.expect, self.seed_ratio) {
                    (Some(e), _) => ("expect", e),
                    (None, Some(r)) => ("seed_ratio", r),
                    (None, None) => {
                        return Err("seed_ratio: a magnitude claim needs the seed's ratio".into())
                    }
                };
                if !(centre.is_finite() && centre > 0.0) {
                    return Err(format!("{field}: {centre} is not a positive ratio"));
                }
                let tol =
                    match (self.kind, self.tolerance) {
                        (_, Some(t)) => t,
                        (None, None) => LEGACY_TOLERANCE,
                        (Some(_), None) => return Err(
                            "tolerance: a magnitude claim needs one (\"15%\" or an absolute 0.02)"
                                .into(),
                        ),
                    };
                match tol {
                    Tolerance::Relative(r) if r > 0.0 && r < 1.0 => {
                        Ok(ClaimBand::relative(centre, r))
                    }
                    Tolerance::Absolute(a) if a > 0.0 && a < centre => Ok(ClaimBand {
                        low: centre - a,
                        high: centre + a,
                        open: false,
                    }),
                    Tolerance::Relative(_) => {
                        Err(format!("tolerance: {tol} must be above 0% and below 100%"))
                    }
                    Tolerance::Absolute(_) => Err(format!(
                        "tolerance: {tol} must be above 0 and below the seed ratio {centre}"
                    )),
                }
            }
            ClaimKind::Direction => match self.direction {
                Some(Direction::Higher) => Ok(ClaimBand {
                    low: 1.0,
                    high: f64::INFINITY,
                    open: true,
                }),
                Some(Direction::Lower) => Ok(ClaimBand {
                    low: 0.0,
                    high: 1.0,
                    open: true,
                }),
                None => Err("direction: a direction claim needs higher or lower".into()),
            },
            // The numerator's log-SD above the denominator's: ratio above 1.
            ClaimKind::Spread => Ok(ClaimBand {
                low: 1.0,
                high: f64::INFINITY,
                open: true,
            }),
            ClaimKind::Shape => {
                let b = self.bound.unwrap_or_default();
                let low = b.above.unwrap_or(0.0);
                let high = b.below.unwrap_or(f64::INFINITY);
                if b.above.is_none() && b.below.is_none() {
                    return Err("bound: a shape claim needs above and/or below".into());
                }
                if !(low >= 0.0 && low < high) {
                    return Err(format!(
                        "bound: above ({low}) must be at least 0 and below below ({high})"
                    ));
                }
                Ok(ClaimBand {
                    low,
                    high,
                    open: true,
                })
            }
        }
    }

    /// Checks an experiment file's claim: the kind is stated, the band is well formed, and no
    /// field is given that the kind does not use.
    pub(super) fn validate(&self) -> Result<(), String> {
        let Some(kind) = self.kind else {
            return Err("kind: missing; say magnitude, direction, shape or spread".into());
        };
        self.band()?;
        let unused: &[(&str, bool)] = match kind {
            ClaimKind::Magnitude => &[
                ("direction", self.direction.is_some()),
                ("bound", self.bound.is_some()),
            ],
            ClaimKind::Direction => &[
                ("tolerance", self.tolerance.is_some()),
                ("bound", self.bound.is_some()),
                ("expect", self.expect.is_some()),
            ],
            ClaimKind::Shape => &[
                ("tolerance", self.tolerance.is_some()),
                ("direction", self.direction.is_some()),
                ("expect", self.expect.is_some()),
            ],
            // The direction is fixed (numerator more spread) and the test sets the threshold.
            ClaimKind::Spread => &[
                ("tolerance", self.tolerance.is_some()),
                ("direction", self.direction.is_some()),
                ("bound", self.bound.is_some()),
                ("expect", self.expect.is_some()),
            ],
        };
        if let Some((field, _)) = unused.iter().find(|(_, set)| *set) {
            return Err(format!(
                "{field}: not used by a {} claim",
                serde_yaml::to_string(&kind).unwrap_or_default().trim()
            ));
        }
        Ok(())
    }
}

/// How a seed timed what it measured, as far as it matters for comparing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TimingMethod {
    /// The benchmark's own clock around each request (connect→close or send→receive), as
    /// echo-bench times latency.
    BenchClock,
    /// System calls timed under ptrace (`strace -c`), which serialises traced threads.
    Ptrace,
    /// Readings of `top` (CPU%, MEM%) once the load is stable.
    Top,
}

impl TimingMethod {
    /// How the report names it.
    pub fn describe(self) -> &'static str {
        match self {
            TimingMethod::BenchClock => "the benchmark's own clock per request",
            TimingMethod::Ptrace => "strace -c (ptrace)",
            TimingMethod::Top => "top(1) readings",
        }
    }
}

/// The seed's setup, in the fields a reader compares with this run's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeedSetup {
    /// `loopback` (one machine, 127.0.0.1) or `link` (two machines).
    pub topology: String,
    /// The closest echolab profile, e.g. `loopback` or `lan100`.
    pub profile: String,
    /// Logical CPUs of the machine the server ran on.
    pub cores: u64,
    /// Kernel version, e.g. `3.10`.
    pub kernel: String,
    /// How the seed timed its figures.
    pub timing: TimingMethod,
    /// The seed's client, as the echo-bench engine closest to it (seed 000's echo-kp-bench:
    /// one blocking thread per connection, `thread`); absent where the seed does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<crate::cmd::BenchEngine>,
}

/// The seed's published results that an experiment reproduces.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reference {
    /// The seed study (by number, title and date; docs/architecture.md, "Source studies") and
    /// the section, e.g. `seed 000, "实验 3.1：…" (updated 2026-08-20), section 5`.
    pub source: String,
    /// The seed's title in English, shown beside `source` (whose title is the seed's own,
    /// often Chinese, which a machine without CJK fonts draws as boxes); empty where not given.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub title: String,
    /// The environment the seed measured on (machine, kernel, network), as the seed states it.
    #[serde(default)]
    pub environment: String,
    /// Published per-cell figures.
    #[serde(default)]
    pub figures: Vec<ReferenceFigure>,
    /// Published ratios.
    #[serde(default)]
    pub claims: Vec<ReferenceClaim>,
    /// The seed's setup, so every comparison can say where it stands; optional (older files
    /// and manifests have only `environment`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup: Option<SeedSetup>,
    /// The mechanisms the seed gives for its claims, each checked from this run's own costs
    /// ([`super::Mechanism`]); empty where the experiment states none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mechanisms: Vec<super::Mechanism>,
}
