//! Experiment files (`experiments/*.yaml`): the seed experiments as data.
//!
//! An experiment answers one question. Its `matrix` is a list of blocks; each block is expanded
//! as the cartesian product of its lists into cells (server × mode × conns × rounds), and every
//! cell runs `repetitions` times. `reference` holds the figures the seed document published, so
//! the report can put ours beside them as ratios.
//!
//! Unknown keys are errors, so a typo cannot silently fall back to a default.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::cmd::{BenchEngine, ServerModel, UnknownModel};
use crate::units::{ByteSize, Dur, Percent};

/// What a cell's client does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BenchMode {
    /// connect, send, recv, close per request (seed 000 `--mode short`).
    Short,
    /// connect once, ROUNDS round trips (seed 000 `--mode long`).
    Long,
    /// Time to establish N connections (seed 004 "deadlink").
    ConnectStorm,
    /// N connections fetching `reply_bytes` replies for a duration (seed 004 "activelink").
    Sustain,
}

impl BenchMode {
    /// The name used in cell ids and on echo-bench's command line.
    pub fn name(self) -> &'static str {
        match self {
            BenchMode::Short => "short",
            BenchMode::Long => "long",
            BenchMode::ConnectStorm => "connect-storm",
            BenchMode::Sustain => "sustain",
        }
    }
}

/// One block of the matrix; lists multiply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatrixBlock {
    /// echo-server models (`--model` names). Names, not [`ServerModel`]s, so that loading
    /// names the block of an unknown one; [`Experiment::parse`] checks each.
    pub servers: Vec<String>,
    /// Client modes.
    pub modes: Vec<BenchMode>,
    /// Concurrent connections.
    pub conns: Vec<u64>,
    /// Rounds per connection (short/long); ignored by connect-storm and sustain.
    #[serde(default)]
    pub rounds: Vec<u64>,
    /// Measured duration (sustain, or timed short/long runs instead of rounds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<Dur>,
    /// Request payload size in bytes (default 12, the seeds' "hello echo\r\n").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<ByteSize>,
    /// Server reply size in bytes (`echo-server --reply-bytes`, sustain).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_bytes: Option<ByteSize>,
    /// echo-bench `--hist` (keep histograms for the report; they are always in the JSON).
    #[serde(default)]
    pub hist: bool,
}

/// Server options applied to every cell.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerOptions {
    /// `--read-buf`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_buf: Option<ByteSize>,
    /// `--workers` for multi-worker models.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<u64>,
    /// `--backlog`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backlog: Option<u64>,
}

/// Client options applied to every cell.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BenchOptions {
    /// `--threads` (default: echo-bench's, the number of cores).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<u64>,
    /// `--timeout` per request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Dur>,
    /// `--engine` (`event` or `thread`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<BenchEngine>,
    /// `--linger0`: close with RST, no TIME_WAIT on the client.
    #[serde(default)]
    pub linger0: bool,
    /// Also run the client under `strace -f -c -e trace=connect,close` where the image has
    /// strace (seed 002's cross-check); recorded beside the run, never instead of it.
    #[serde(default)]
    pub strace: bool,
}

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
    /// The ratio the seed published (required for a magnitude; shown beside ours otherwise).
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
                let half = match tol {
                    Tolerance::Relative(r) if r > 0.0 && r < 1.0 => centre * r,
                    Tolerance::Absolute(a) if a > 0.0 && a < centre => a,
                    Tolerance::Relative(_) => {
                        return Err(format!("tolerance: {tol} must be above 0% and below 100%"))
                    }
                    Tolerance::Absolute(_) => {
                        return Err(format!(
                            "tolerance: {tol} must be above 0 and below the seed ratio {centre}"
                        ))
                    }
                };
                Ok(ClaimBand {
                    low: centre - half,
                    high: centre + half,
                    open: false,
                })
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
    fn validate(&self) -> Result<(), String> {
        let Some(kind) = self.kind else {
            return Err("kind: missing; say magnitude, direction or shape".into());
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
}

/// The seed's published results that an experiment reproduces.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reference {
    /// Seed file and section, e.g. "000_196414d553250b9f.txt §5".
    pub source: String,
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
}

/// An experiment file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    /// Short name, the file stem (`exp31`).
    pub name: String,
    /// The one question it answers.
    pub question: String,
    /// Cells to run.
    pub matrix: Vec<MatrixBlock>,
    /// Repetitions of every cell (the seeds use 3); with `max_repetitions` above it, the
    /// minimum.
    pub repetitions: u64,
    /// Adaptive repetitions: the most repetitions of a cell, which repeats until the relative
    /// 95% CI half-width of its headline metric is within `target_halfwidth` (as netperf's
    /// `-i max,min -I level,width`). Default: `repetitions`, i.e. a fixed count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_repetitions: Option<u64>,
    /// The relative 95% CI half-width at which adaptive repetitions stop, e.g. `"5%"`
    /// (default [`DEFAULT_TARGET_HALFWIDTH`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_halfwidth: Option<Percent>,
    /// Client-side warm-up before each measured run (echo-bench `--warmup`), excluded from
    /// results.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup: Option<Dur>,
    /// The measurement window of every short/long cell that the matrix bounds by rounds: the
    /// cell runs for this long after warm-up instead of CONNS × ROUNDS requests, so that it
    /// measures enough work to be stable (the seeds' 100 × 10 long cells last a few
    /// milliseconds). `echolab-up --as-published` removes it and runs the rounds as the seed
    /// did. Absent: the rounds, as published.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<Dur>,
    /// Server options.
    #[serde(default)]
    pub server: ServerOptions,
    /// Client options.
    #[serde(default)]
    pub bench: BenchOptions,
    /// The seed's published figures.
    #[serde(default)]
    pub reference: Reference,
}

/// The default `target_halfwidth`: 5%, netperf's `-I 99,5` width at the 95% level used
/// throughout echolab.
pub const DEFAULT_TARGET_HALFWIDTH: f64 = 0.05;

impl Experiment {
    /// The most repetitions of a cell: `max_repetitions`, or `repetitions` when not set.
    pub fn max_repetitions(&self) -> u64 {
        self.max_repetitions.unwrap_or(self.repetitions)
    }

    /// The target relative half-width as a fraction (0.05 for `"5%"`).
    pub fn target_halfwidth(&self) -> f64 {
        self.target_halfwidth
            .map_or(DEFAULT_TARGET_HALFWIDTH, |p| p.0 / 100.0)
    }

    /// Whether cells repeat adaptively (`max_repetitions` above `repetitions`).
    pub fn is_adaptive(&self) -> bool {
        self.max_repetitions() > self.repetitions
    }
}

/// One point of the matrix.
#[derive(Debug, Clone, PartialEq, PartialOrd, Serialize, Deserialize)]
pub struct Cell {
    /// echo-server model, its `--model` name as run records and the report key on it;
    /// [`Cell::model`] gives the typed one.
    pub server: String,
    /// Client mode.
    pub mode: BenchMode,
    /// Connections.
    pub conns: u64,
    /// Rounds (short/long without duration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rounds: Option<u64>,
    /// Duration in seconds (timed runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<Dur>,
    /// Payload bytes.
    pub payload: u64,
    /// Reply bytes (sustain).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_bytes: Option<u64>,
}

impl Cell {
    /// The cell's echo-server model.
    ///
    /// # Errors
    /// A name echo-server does not have (a cell of a loaded experiment always has a known one;
    /// a hand-edited run record may not).
    pub fn model(&self) -> Result<ServerModel, UnknownModel> {
        self.server.parse()
    }

    /// A file-name-safe id, e.g. `epoll-et_long_c100_r10`.
    pub fn id(&self) -> String {
        let mut id = format!("{}_{}_c{}", self.server, self.mode.name(), self.conns);
        if let Some(r) = self.rounds {
            id.push_str(&format!("_r{r}"));
        }
        if let Some(d) = self.duration {
            id.push_str(&format!("_d{d}"));
        }
        if self.payload != 12 {
            id.push_str(&format!("_p{}", self.payload));
        }
        if let Some(b) = self.reply_bytes {
            id.push_str(&format!("_reply{b}"));
        }
        id
    }
}

/// Errors reading an experiment.
#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    /// YAML syntax or schema error; serde_yaml's message carries field, line and column.
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    /// The file parsed but makes no sense.
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
}

impl Experiment {
    /// Reads and validates an experiment file.
    ///
    /// # Errors
    /// [`ExperimentError`] naming the file, and for parse errors the field, line and column.
    pub fn load(path: &Path) -> Result<Self, ExperimentError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ExperimentError::Io {
            path: p.clone(),
            source,
        })?;
        Self::parse(&text, &p)
    }

    /// Parses and validates experiment YAML; `origin` names the source in errors.
    ///
    /// # Errors
    /// As [`Experiment::load`].
    pub fn parse(text: &str, origin: &str) -> Result<Self, ExperimentError> {
        let e: Experiment = serde_yaml::from_str(text).map_err(|err| ExperimentError::Parse {
            path: origin.to_string(),
            message: err.to_string(),
        })?;
        e.validate().map_err(|message| ExperimentError::Invalid {
            path: origin.to_string(),
            message,
        })?;
        Ok(e)
    }

    /// The experiment as the seed published it: without [`Experiment::window`], so every
    /// short/long cell the matrix bounds by rounds runs CONNS × ROUNDS requests.
    pub fn as_published(mut self) -> Self {
        self.window = None;
        self
    }

    fn validate(&self) -> Result<(), String> {
        if self.repetitions == 0 {
            return Err("repetitions: must be at least 1".into());
        }
        if self.window.is_some_and(|w| w.0.is_zero()) {
            return Err("window: must be longer than 0s".into());
        }
        if let Some(max) = self.max_repetitions {
            if max < self.repetitions {
                return Err(format!(
                    "max_repetitions: {max} is below repetitions ({}), the minimum",
                    self.repetitions
                ));
            }
        }
        if let Some(t) = self.target_halfwidth {
            if !(t.0 > 0.0 && t.0 < 100.0) {
                return Err(format!(
                    "target_halfwidth: {t} must be above 0% and below 100%"
                ));
            }
        }
        if self.matrix.is_empty() {
            return Err("matrix: needs at least one block".into());
        }
        for (i, b) in self.matrix.iter().enumerate() {
            let at = |field: &str| format!("matrix[{i}].{field}");
            if b.servers.is_empty() {
                return Err(format!("{}: needs at least one server", at("servers")));
            }
            if let Some(e) = b
                .servers
                .iter()
                .find_map(|s| s.parse::<ServerModel>().err())
            {
                return Err(format!("{}: {e}", at("servers")));
            }
            if b.modes.is_empty() {
                return Err(format!("{}: needs at least one mode", at("modes")));
            }
            if b.conns.is_empty() || b.conns.contains(&0) {
                return Err(format!(
                    "{}: needs connection counts of at least 1",
                    at("conns")
                ));
            }
            for m in &b.modes {
                let needs_bound = matches!(m, BenchMode::Short | BenchMode::Long);
                if needs_bound && b.rounds.is_empty() && b.duration.is_none() {
                    return Err(format!(
                        "{}: mode {} needs rounds or duration",
                        at("rounds"),
                        m.name()
                    ));
                }
                if *m == BenchMode::Sustain && b.duration.is_none() {
                    return Err(format!("{}: mode sustain needs a duration", at("duration")));
                }
                // echo-bench sustain has no --payload-size: its request is the seed payload.
                if *m == BenchMode::Sustain && b.payload.is_some_and(|p| p.0 != 12) {
                    return Err(format!(
                        "{}: mode sustain always sends the seed's 12-byte request; \
                         payload applies to short and long only",
                        at("payload")
                    ));
                }
            }
            if b.rounds.contains(&0) {
                return Err(format!("{}: rounds must be at least 1", at("rounds")));
            }
        }
        // A reference that matches no cell could never be compared: catch the typo here.
        let cells = self.cells();
        let unmatched = |sel: &CellSelector| !cells.iter().any(|c| sel.matches(c));
        for (i, f) in self.reference.figures.iter().enumerate() {
            if unmatched(&f.cell) {
                return Err(format!(
                    "reference.figures[{i}].cell: {} matches no cell of the matrix",
                    f.cell
                ));
            }
        }
        for (i, c) in self.reference.claims.iter().enumerate() {
            c.validate()
                .map_err(|m| format!("reference.claims[{i}].{m}"))?;
            for (side, sel) in [("numerator", &c.numerator), ("denominator", &c.denominator)] {
                if unmatched(sel) {
                    return Err(format!(
                        "reference.claims[{i}].{side}: {sel} matches no cell of the matrix"
                    ));
                }
            }
        }
        Ok(())
    }

    /// Expands the matrix into cells, in file order, without duplicates.
    pub fn cells(&self) -> Vec<Cell> {
        let mut out: Vec<Cell> = Vec::new();
        for b in &self.matrix {
            let payload = b.payload.map_or(12, |p| p.0);
            for server in &b.servers {
                for &mode in &b.modes {
                    for &conns in &b.conns {
                        let timed = b.duration.or(self.window);
                        let bounded_by_rounds =
                            matches!(mode, BenchMode::Short | BenchMode::Long) && timed.is_none();
                        let rounds: Vec<Option<u64>> = if bounded_by_rounds {
                            b.rounds.iter().map(|&r| Some(r)).collect()
                        } else {
                            vec![None]
                        };
                        for rounds in rounds {
                            let cell = Cell {
                                server: server.clone(),
                                mode,
                                conns,
                                rounds,
                                duration: match mode {
                                    BenchMode::ConnectStorm => None,
                                    BenchMode::Short | BenchMode::Long => timed,
                                    BenchMode::Sustain => b.duration,
                                },
                                payload,
                                reply_bytes: b.reply_bytes.map(|r| r.0),
                            };
                            if !out.contains(&cell) {
                                out.push(cell);
                            }
                        }
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXP31: &str = r#"
name: exp31
question: How much QPS do long connections gain over short ones?
repetitions: 3
matrix:
  - servers: [epoll-lt, epoll-et]
    modes: [short, long]
    conns: [100]
    rounds: [10]
reference:
  source: seed 000 §5
  claims:
    - name: long/short gain, ET
      metric: qps
      numerator: {server: epoll-et, mode: long}
      denominator: {server: epoll-et, mode: short}
      seed_ratio: 2.15
      kind: magnitude
      tolerance: 15%
"#;

    #[test]
    fn matrix_expands_to_cells() {
        let e = Experiment::parse(EXP31, "exp31.yaml").unwrap();
        let cells = e.cells();
        assert_eq!(cells.len(), 4);
        assert_eq!(cells[0].id(), "epoll-lt_short_c100_r10");
        assert_eq!(cells[3].id(), "epoll-et_long_c100_r10");
        let claim = &e.reference.claims[0];
        assert!(claim.numerator.matches(&cells[3]) && !claim.numerator.matches(&cells[2]));
    }

    #[test]
    fn errors_name_file_field_and_position() {
        let bad = EXP31.replace("repetitions: 3", "repetitions: 3\nrepetitons: 4");
        let msg = Experiment::parse(&bad, "exp31.yaml")
            .unwrap_err()
            .to_string();
        assert!(
            msg.starts_with("exp31.yaml:") && msg.contains("repetitons") && msg.contains("line"),
            "{msg}"
        );
        let bad = EXP31.replace("rounds: [10]", "rounds: []");
        let msg = Experiment::parse(&bad, "x.yaml").unwrap_err().to_string();
        assert!(
            msg.contains("matrix[0].rounds") && msg.contains("short"),
            "{msg}"
        );
        let bad = EXP31.replace(
            "server: epoll-et, mode: long}",
            "server: epoll-ett, mode: long}",
        );
        let msg = Experiment::parse(&bad, "x.yaml").unwrap_err().to_string();
        assert!(
            msg.contains(
                "reference.claims[0].numerator: server=epoll-ett mode=long matches no cell"
            ),
            "{msg}"
        );
        let bad = EXP31.replace(
            "servers: [epoll-lt, epoll-et]",
            "servers: [epoll-lt, epoll-zz]",
        );
        let msg = Experiment::parse(&bad, "x.yaml").unwrap_err().to_string();
        assert!(
            msg.contains("matrix[0].servers: unknown server model \"epoll-zz\""),
            "{msg}"
        );
        let bad = EXP31.replace("modes: [short, long]", "modes: [shorty]");
        let msg = Experiment::parse(&bad, "x.yaml").unwrap_err().to_string();
        assert!(msg.contains("shorty") && msg.contains("line 7"), "{msg}");
    }

    #[test]
    fn options_the_client_cannot_take_are_caught_at_load() {
        let sustain = "name: s\nquestion: q\nrepetitions: 1\nmatrix:\n  - servers: [select]\n    modes: [sustain]\n    conns: [100]\n    duration: 2s\n    reply_bytes: 1024\n";
        assert!(Experiment::parse(sustain, "s.yaml").is_ok());
        let msg = Experiment::parse(&format!("{sustain}    payload: 64\n"), "s.yaml")
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("matrix[0].payload: mode sustain always sends the seed's 12-byte request"),
            "{msg}"
        );
        let msg = Experiment::parse(&format!("{sustain}bench: {{engine: threads}}\n"), "s.yaml")
            .unwrap_err()
            .to_string();
        assert!(msg.contains("threads") && msg.contains("thread"), "{msg}");
        let e =
            Experiment::parse(&format!("{sustain}bench: {{engine: thread}}\n"), "s.yaml").unwrap();
        assert_eq!(e.bench.engine, Some(BenchEngine::Thread));
        assert_eq!(e.cells()[0].model(), Ok(ServerModel::Select));
    }

    fn err(text: &str) -> String {
        Experiment::parse(text, "x.yaml").unwrap_err().to_string()
    }

    #[test]
    fn adaptive_repetitions_default_to_a_fixed_count_and_are_validated() {
        let e = Experiment::parse(EXP31, "exp31.yaml").unwrap();
        assert_eq!(
            (e.max_repetitions(), e.target_halfwidth(), e.is_adaptive()),
            (3, 0.05, false)
        );
        let text = EXP31.replace(
            "repetitions: 3",
            "repetitions: 3\nmax_repetitions: 10\ntarget_halfwidth: 2.5%",
        );
        let e = Experiment::parse(&text, "x.yaml").unwrap();
        assert_eq!(
            (e.max_repetitions(), e.target_halfwidth(), e.is_adaptive()),
            (10, 0.025, true)
        );
        // It survives a manifest round trip.
        let back: Experiment = serde_yaml::from_str(&serde_yaml::to_string(&e).unwrap()).unwrap();
        assert_eq!(back, e);
        let msg = err(&EXP31.replace("repetitions: 3", "repetitions: 3\nmax_repetitions: 2"));
        assert!(
            msg.contains("max_repetitions: 2 is below repetitions (3)"),
            "{msg}"
        );
        for bad in ["0%", "100%"] {
            let msg = err(&EXP31.replace(
                "repetitions: 3",
                &format!("repetitions: 3\ntarget_halfwidth: {bad}"),
            ));
            assert!(msg.contains("target_halfwidth:"), "{msg}");
        }
        let msg = err(&EXP31.replace("repetitions: 3", "repetitions: 3\ntarget_halfwidth: 5"));
        assert!(
            msg.contains("target_halfwidth") && msg.contains("percentage"),
            "{msg}"
        );
    }

    #[test]
    fn claims_state_kind_and_band() {
        let e = Experiment::parse(EXP31, "exp31.yaml").unwrap();
        let band = e.reference.claims[0].band().unwrap();
        // 2.15 ± 15% = 1.8275 .. 2.4725, closed.
        assert!((band.low - 1.8275).abs() < 1e-12 && (band.high - 2.4725).abs() < 1e-12);
        assert!(band.contains(1.8275) && !band.contains(1.82) && !band.open);
        assert_eq!(band.to_string(), "1.83–2.47×");

        let absolute = EXP31.replace("tolerance: 15%", "tolerance: 0.02");
        let b = Experiment::parse(&absolute, "x.yaml")
            .unwrap()
            .reference
            .claims[0]
            .band()
            .unwrap();
        assert!((b.low - 2.13).abs() < 1e-12 && (b.high - 2.17).abs() < 1e-12);

        let direction = EXP31.replace(
            "kind: magnitude\n      tolerance: 15%",
            "kind: direction\n      direction: higher",
        );
        let b = Experiment::parse(&direction, "x.yaml")
            .unwrap()
            .reference
            .claims[0]
            .band()
            .unwrap();
        assert!(b.open && !b.contains(1.0) && b.contains(1.0001) && b.high.is_infinite());
        assert_eq!(b.to_string(), "above 1×");

        let shape = EXP31.replace(
            "kind: magnitude\n      tolerance: 15%",
            "kind: shape\n      bound: {below: 0.5}",
        );
        let b = Experiment::parse(&shape, "x.yaml")
            .unwrap()
            .reference
            .claims[0]
            .band()
            .unwrap();
        assert!(b.contains(0.49) && !b.contains(0.5) && b.low == 0.0);
        assert_eq!(b.to_string(), "below 0.5×");

        let msg = err(&EXP31.replace("      kind: magnitude\n", ""));
        assert!(msg.contains("reference.claims[0].kind: missing"), "{msg}");
        let msg = err(&EXP31.replace("      tolerance: 15%\n", ""));
        assert!(
            msg.contains("reference.claims[0].tolerance: a magnitude claim needs one"),
            "{msg}"
        );
        let msg = err(&EXP31.replace("tolerance: 15%", "tolerance: 150%"));
        assert!(
            msg.contains("must be between 0% and 100%") || msg.contains("below 100%"),
            "{msg}"
        );
        let msg = err(&EXP31.replace("tolerance: 15%", "tolerance: 15%\n      direction: higher"));
        assert!(
            msg.contains("reference.claims[0].direction: not used by a magnitude claim"),
            "{msg}"
        );
        let halved = EXP31.replace("tolerance: 15%", "tolerance: 20%\n      expect: 0.5");
        let b = Experiment::parse(&halved, "x.yaml")
            .unwrap()
            .reference
            .claims[0]
            .band()
            .unwrap();
        assert!(
            (b.low - 0.4).abs() < 1e-12 && (b.high - 0.6).abs() < 1e-12,
            "{b:?}"
        );
        let msg =
            err(&direction.replace("direction: higher", "direction: higher\n      expect: 2"));
        assert!(
            msg.contains("reference.claims[0].expect: not used by a direction claim"),
            "{msg}"
        );
        let msg = err(&EXP31.replace("tolerance: 15%", "tolerance: abc"));
        assert!(msg.contains("invalid tolerance \"abc\""), "{msg}");
        let msg = err(&shape.replace("{below: 0.5}", "{}"));
        assert!(
            msg.contains("reference.claims[0].bound: a shape claim needs"),
            "{msg}"
        );
    }

    #[test]
    fn a_claim_without_kind_from_an_old_manifest_reads_as_a_legacy_magnitude() {
        let old = "name: x\nmetric: qps\nnumerator: {mode: long}\ndenominator: {mode: short}\nseed_ratio: 2.0\n";
        let c: ReferenceClaim = serde_yaml::from_str(old).unwrap();
        assert_eq!(c.effective_kind(), ClaimKind::Magnitude);
        let b = c.band().unwrap();
        assert!((b.low - 1.7).abs() < 1e-12 && (b.high - 2.3).abs() < 1e-12);
    }
}
