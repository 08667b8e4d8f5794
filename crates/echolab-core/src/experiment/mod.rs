//! Experiment files (`experiments/*.yaml`): the seed experiments as data.
//!
//! An experiment answers one question. Its `matrix` is a list of blocks; each block is expanded
//! as the cartesian product of its lists into cells (server × mode × conns × rounds), and every
//! cell runs `repetitions` times. `reference` holds the figures the seed document published, so
//! the report can put ours beside them as ratios.
//!
//! Unknown keys are errors, so a typo cannot silently fall back to a default.
//!
//! This module holds the matrix and its cells; [`reference`] the seed's published figures and
//! claims that an experiment compares with.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::cmd::{BenchEngine, ClientOpts, Options, ServerModel, ServerOpts, UnknownModel};
use crate::limits::Rate;
use crate::units::{ByteSize, Dur, Percent};

mod mechanism;
mod reference;
mod servers;

pub use mechanism::{Mechanism, MechanismKind, DEFAULT_AGREEMENT};
pub use reference::{
    Bound, CellSelector, ClaimBand, ClaimKind, Direction, Reference, ReferenceClaim,
    ReferenceFigure, SeedSetup, TimingMethod, Tolerance, LEGACY_TOLERANCE,
};
pub use servers::{CustomServer, ServerEntry};

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
    /// echo-server models (`--model` names) and custom servers ([`CustomServer`]). Names,
    /// not [`ServerModel`]s, so that loading names the block of an unknown one;
    /// [`Experiment::parse`] checks each.
    pub servers: Vec<ServerEntry>,
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
    /// Request payload size in bytes (default 12, the seeds' "hello echo\r\n", stamped with
    /// each request's connection and sequence number: `crate::protocol`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<ByteSize>,
    /// Server reply size in bytes (`echo-server --reply-bytes`, sustain).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_bytes: Option<ByteSize>,
    /// Accepted so that older experiment files and the manifests of older results
    /// directories still read; it changes nothing (every run record holds the latency
    /// histogram).
    #[serde(default)]
    pub hist: bool,
    /// Open loop: the block's short/long cells send this many requests per second in total
    /// (echo-bench `--rate`) instead of each connection's next request leaving when its reply
    /// is in. Such a cell is a probe below saturation: claims and the other mechanisms never
    /// select it (a [`CellSelector`] matches it only with `open_loop: true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<Rate>,
    /// The block's servers time their system calls (echo-server `--time-syscalls`), for a
    /// `syscall-cost` mechanism. Only with `rate` (the timing adds to what it measures, so a
    /// saturated cell never carries it) and only for the models that time their calls.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub time_syscalls: bool,
}

/// The models whose system calls echo-server can time (`--time-syscalls`): the readiness
/// models, whose calls all go through one place; thread, tokio and uring issue theirs
/// elsewhere (a blocking thread each, tokio's reactor, batched ring submissions).
pub const TIMED_MODELS: [ServerModel; 6] = [
    ServerModel::Select,
    ServerModel::Poll,
    ServerModel::EpollLt,
    ServerModel::EpollEt,
    ServerModel::Prefork,
    ServerModel::Reuseport,
];

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
    /// Server options: echo-server's own, by their flag names ([`crate::cmd::ServerOpts`]),
    /// applied to every cell of a model they concern (`workers` to the multi-worker models,
    /// `exclusive` to prefork).
    #[serde(default)]
    pub server: ServerOpts,
    /// Client options: echo-bench's own, by their flag names
    /// ([`crate::cmd::ClientOpts`]), and `strace`.
    #[serde(default)]
    pub bench: ClientOpts,
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

    /// Every custom server of the matrix, once each, in file order.
    pub fn custom_servers(&self) -> Vec<&CustomServer> {
        let mut out: Vec<&CustomServer> = Vec::new();
        for entry in self.matrix.iter().flat_map(|b| &b.servers) {
            if let ServerEntry::Custom(c) = entry {
                if !out.iter().any(|o| o.name == c.name) {
                    out.push(c);
                }
            }
        }
        out
    }

    /// The custom server a cell names, if it is one (else the cell's server is a model).
    pub fn custom_server(&self, name: &str) -> Option<&CustomServer> {
        self.custom_servers().into_iter().find(|c| c.name == name)
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
    /// Open-loop rate, requests per second in total ([`MatrixBlock::rate`]); absent: closed
    /// loop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<Rate>,
    /// The server times its system calls ([`MatrixBlock::time_syscalls`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub time_syscalls: bool,
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
        if let Some(r) = self.rate {
            id.push_str(&format!("_rate{r}"));
        }
        if self.time_syscalls {
            id.push_str("_timed");
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
        /// The file.
        path: String,
        /// Why it could not be read.
        source: std::io::Error,
    },
    /// YAML syntax or schema error; serde_yaml's message carries field, line and column.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// What is wrong, naming the field.
        message: String,
    },
    /// The file parsed but makes no sense.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong, naming the field.
        message: String,
    },
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
        self.check_ranges()?;
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
        self.bench.check().map_err(|e| format!("bench: {e}"))?;
        self.server.check().map_err(|e| format!("server: {e}"))?;
        if self.server.time_syscalls {
            return Err(
                "server.time_syscalls: timing adds to what every cell measures; set time_syscalls \
                 on an open-loop probe block of the matrix (beside its rate) instead"
                    .into(),
            );
        }
        for (i, b) in self.matrix.iter().enumerate() {
            let at = |field: &str| format!("matrix[{i}].{field}");
            if b.servers.is_empty() {
                return Err(format!("{}: needs at least one server", at("servers")));
            }
            for (j, entry) in b.servers.iter().enumerate() {
                match entry {
                    ServerEntry::Model(name) => {
                        if let Err(e) = name.parse::<ServerModel>() {
                            return Err(format!(
                                "{}: {e}; a server of your own is {{name, command, port}}",
                                at("servers")
                            ));
                        }
                    }
                    ServerEntry::Custom(c) => {
                        c.validate()
                            .map_err(|m| format!("{}[{j}].{m}", at("servers")))?;
                        if self
                            .custom_servers()
                            .iter()
                            .any(|o| o.name == c.name && *o != c)
                        {
                            return Err(format!(
                                "{}[{j}].name: server {:?} is defined twice, differently",
                                at("servers"),
                                c.name
                            ));
                        }
                        // echo-bench's sustain needs echo-server's --reply-bytes answers.
                        if b.modes.contains(&BenchMode::Sustain) || b.reply_bytes.is_some() {
                            return Err(format!(
                                "{}[{j}]: server {:?} is not an echo-server model, so it cannot \
                                 answer sustain's reply_bytes requests; run it in short, long \
                                 or connect-storm cells",
                                at("servers"),
                                c.name
                            ));
                        }
                    }
                }
            }
            if b.modes.is_empty() {
                return Err(format!("{}: needs at least one mode", at("modes")));
            }
            if b.conns.is_empty() {
                return Err(format!(
                    "{}: needs at least one connection count",
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
            if b.rate.is_some()
                && !b
                    .modes
                    .iter()
                    .all(|m| matches!(m, BenchMode::Short | BenchMode::Long))
            {
                return Err(format!(
                    "{}: an open-loop rate applies to modes short and long only; put the other modes in a block of their own",
                    at("rate")
                ));
            }
            if b.time_syscalls {
                if b.rate.is_none() {
                    return Err(format!(
                        "{}: timed system calls add to what a cell measures, so only an open-loop \
                         probe below saturation times them; give the block a rate",
                        at("time_syscalls")
                    ));
                }
                if let Some(other) = b.servers.iter().find(|e| {
                    !matches!(e, ServerEntry::Model(n) if n.parse::<ServerModel>().is_ok_and(|m| TIMED_MODELS.contains(&m)))
                }) {
                    let names: Vec<&str> = TIMED_MODELS.iter().map(|m| m.name()).collect();
                    return Err(format!(
                        "{}: echo-server times the calls of {} only, not {:?}",
                        at("time_syscalls"),
                        names.join(", "),
                        other.name()
                    ));
                }
            }
            // echo-bench's ring engine drives long connections only (its `--engine uring`).
            if self.bench.engine == BenchEngine::Uring && b.modes.contains(&BenchMode::Short) {
                return Err(format!(
                    "bench.engine: uring runs long connections only (modes long and sustain), \
                     but {} has mode short; use engine event or thread for it",
                    at("modes")
                ));
            }
            if self.bench.engine != BenchEngine::Event && b.modes.contains(&BenchMode::ConnectStorm)
            {
                return Err(format!(
                    "bench.engine: {} cannot run {} mode connect-storm, which runs on the event \
                     engine only; put connect-storm in an experiment of its own",
                    self.bench.engine,
                    at("modes")
                ));
            }
        }
        // A reference that matches no cell could never be compared: catch the typo here.
        let cells = self.cells();
        if self.server.exclusive
            && !cells
                .iter()
                .any(|c| c.server == ServerModel::Prefork.name())
        {
            return Err(
                "server.exclusive: applies to prefork cells only, and the matrix has none".into(),
            );
        }
        let unmatched = |sel: &CellSelector| !cells.iter().any(|c| sel.matches(c));
        for (i, f) in self.reference.figures.iter().enumerate() {
            if unmatched(&f.cell) {
                return Err(format!(
                    "reference.figures[{i}].cell: {} matches no cell of the matrix",
                    f.cell
                ));
            }
            f.validate_rounds()
                .map_err(|m| format!("reference.figures[{i}].{m}"))?;
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
                // A ratio is of two cells: a selector that names several cannot say which.
                let matched: Vec<String> = cells
                    .iter()
                    .filter(|c| sel.matches(c))
                    .map(Cell::id)
                    .collect();
                if matched.len() > 1 {
                    return Err(format!(
                        "reference.claims[{i}].{side}: {sel} matches {} cells ({}); name conns, mode or the other coordinates that tell them apart",
                        matched.len(),
                        matched.join(", ")
                    ));
                }
            }
        }
        let claim_names: Vec<&str> = self
            .reference
            .claims
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        for (i, m) in self.reference.mechanisms.iter().enumerate() {
            m.validate(&claim_names)
                .map_err(|e| format!("reference.mechanisms[{i}].{e}"))?;
            if let Some(sel) = &m.series {
                let matched = cells.iter().filter(|c| sel.matches(c)).count();
                if matched < 2 {
                    return Err(format!(
                        "reference.mechanisms[{i}].series: {sel} matches {matched} cells of the matrix; a scan needs at least 2"
                    ));
                }
                continue;
            }
            for (side, sel) in [("numerator", &m.numerator), ("denominator", &m.denominator)] {
                let matched = cells.iter().filter(|c| sel.matches(c)).count();
                if matched != 1 {
                    return Err(format!(
                        "reference.mechanisms[{i}].{side}: {sel} matches {matched} cells of the matrix; it must name one"
                    ));
                }
            }
            let probes = [
                ("probe_numerator", &m.probe_numerator),
                ("probe_denominator", &m.probe_denominator),
            ];
            for (side, sel) in probes {
                let Some(sel) = sel else { continue };
                let matched: Vec<&Cell> = cells.iter().filter(|c| sel.matches(c)).collect();
                match matched.as_slice() {
                    [one] if one.time_syscalls => {}
                    [one] => {
                        return Err(format!(
                            "reference.mechanisms[{i}].{side}: {} does not time its system calls (its block needs time_syscalls: true)",
                            one.id()
                        ))
                    }
                    _ => {
                        return Err(format!(
                            "reference.mechanisms[{i}].{side}: {sel} matches {} cells of the matrix; it must name one",
                            matched.len()
                        ))
                    }
                }
            }
        }
        Ok(())
    }

    /// Every number of the file against its range in [`crate::limits`], the ranges of the
    /// echo-bench and echo-server flags the cells become (so that a cell cannot fail inside a
    /// container for a value its file could have been refused for).
    fn check_ranges(&self) -> Result<(), String> {
        use crate::limits::{
            check_count, check_field_duration, MAX_CONNS, MAX_MESSAGE_BYTES, MAX_REPETITIONS,
            MAX_ROUNDS,
        };
        check_count("repetitions", self.repetitions, 1, MAX_REPETITIONS)?;
        if let Some(max) = self.max_repetitions {
            check_count("max_repetitions", max, 1, MAX_REPETITIONS)?;
        }
        if let Some(w) = self.window {
            check_field_duration("window", w, true)?;
        }
        if let Some(w) = self.warmup {
            check_field_duration("warmup", w, false)?;
        }
        for (i, b) in self.matrix.iter().enumerate() {
            let at = |field: &str| format!("matrix[{i}].{field}");
            for &c in &b.conns {
                check_count(&at("conns"), c, 1, MAX_CONNS)?;
            }
            for &r in &b.rounds {
                check_count(&at("rounds"), r, 1, MAX_ROUNDS)?;
            }
            if let Some(d) = b.duration {
                check_field_duration(&at("duration"), d, true)?;
            }
            if let Some(p) = b.payload {
                check_count(&at("payload"), p.0, 1, MAX_MESSAGE_BYTES)?;
            }
            if let Some(r) = b.reply_bytes {
                check_count(&at("reply_bytes"), r.0, 1, MAX_MESSAGE_BYTES)?;
            }
        }
        Ok(())
    }

    /// Expands the matrix into cells, in file order, without duplicates.
    pub fn cells(&self) -> Vec<Cell> {
        let mut out: Vec<Cell> = Vec::new();
        for b in &self.matrix {
            let payload = b.payload.map_or(12, |p| p.0);
            for server in b.servers.iter().map(ServerEntry::name) {
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
                                server: server.to_string(),
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
                                rate: b.rate,
                                time_syscalls: b.time_syscalls,
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
mod tests;
