//! The command lines of echolab's binaries and what they print back, defined once.
//!
//! The launcher never spells a flag: it fills a typed command ([`ServerCmd`], [`BenchCmd`],
//! [`NetemCmd`]) and calls its `argv()`. The binaries' own clap definitions are checked
//! against every argv the launcher can build (echolab-up's `tests/argv.rs`), so a renamed
//! flag fails `cargo test`, not a run inside a container.
//!
//! What the binaries print back is typed here too: echo-server's readiness line ([`Ready`]),
//! the line it prints before any exit other than by SIGTERM/SIGINT ([`Fatal`]), its stats
//! line ([`final_stats`]), echo-bench's report ([`bench_report`]), and
//! echolab-netem's probe ([`ProbeResult`]), calibration report ([`CalibrationReport`]) and
//! readiness lines ([`CalibServerReady`], [`WIRE_READY_PREFIX`]).
//!
//! The options an experiment can set are one struct per binary that both sides use
//! ([`ServerOpts`] for echo-server, [`ClientOpts`] for echo-bench; the [`Options`] trait):
//! clap for the binary, serde for the experiment file's section, and the argv from the two,
//! so that adding such a flag is one field and its round-trip test. The flags only the
//! launcher sets (ports, modes, durations) are one field here, with its line in `argv()`, and
//! one in the binary's clap, held together by `tests/argv.rs`; echo-bench's whole command
//! line is one definition, its clap structs ([`BenchCli`]), which the launcher fills.

mod bench;
mod bench_cli;
mod custom;
mod job;
mod netem;
mod server;

pub use bench::{bench_report, BenchEngine, ClientOpts, ServerCpus};
pub use bench_cli::{
    parse_source_choice, BenchCli, BenchCmd, BenchSubcommand, OutputArgs, Pacing, RunArgs, RunMode,
    SharedArgs, ShortSockets, SocketArgs, SourceChoice, StormArgs, SustainArgs,
    DEFAULT_PAYLOAD_BYTES, MAX_SOURCE_ADDRS,
};
pub use custom::{CustomServerCmd, ServerLaunch};
pub use job::{Job, JobSignal, SignalJob};
pub use netem::{
    json_from_stdout, BulkTransfer, CalibServerReady, CalibrationCheck, CalibrationReport, Ipv4Net,
    Masquerade, MissedAttempt, NetemCmd, ProbeResult, RttReport, WIRE_READY_PREFIX,
};
pub use server::{final_stats, Fatal, Ready, ServerCmd, ServerModel, ServerOpts, UnknownModel};

use std::fmt::Display;

use serde::de::DeserializeOwned;
use serde::Serialize;

/// A binary's options that an experiment file can set: one clap `Args` struct that is the
/// binary's flags (it flattens the struct), the keys of the experiment's section (serde, by
/// field name) and the launcher's argv (built from the two by [`Options::argv`]). A field added
/// to an implementor is a flag, a key and a part of every argv at once; `parse(argv(x)) == x`
/// holds it (the implementors' tests).
///
/// Implementors derive `clap::Args`, `Serialize` and `Deserialize` with
/// `#[serde(default, deny_unknown_fields)]`, and take [`Default`] from clap's defaults
/// (`Self::parse(&[])`), so that a key left out and a flag left out mean the same.
pub trait Options:
    clap::Args + clap::FromArgMatches + Serialize + DeserializeOwned + Default
{
    /// The binary these are the flags of (clap's messages name it).
    const PROGRAM: &'static str;

    /// These options read from the binary's flags (`--threads 2`), by its own rules (value
    /// ranges, nonzero durations).
    ///
    /// # Errors
    /// clap's error for a flag the binary would refuse; it names the flag and the value.
    fn parse(args: &[String]) -> Result<Self, clap::Error> {
        let command = Self::augment_args(clap::Command::new(Self::PROGRAM).no_binary_name(true));
        let matches = command.try_get_matches_from(args)?;
        <Self as clap::FromArgMatches>::from_arg_matches(&matches)
    }

    /// The flags that give these options, leaving out those at the binary's defaults
    /// (`--linger0` for a `true` switch, `--nodelay=false` for a flag whose value is optional,
    /// `--timeout 2s` otherwise).
    fn argv(&self) -> Vec<String> {
        let mut a = Argv::default();
        a.options(self);
        a.done()
    }

    /// The options an experiment gave, checked as the binary will check them.
    ///
    /// # Errors
    /// The first value the binary would refuse, as clap's one-line message (e.g.
    /// "invalid value '0' for '--threads <THREADS>': 0 is not in 1..=1024").
    fn check(&self) -> Result<(), String> {
        Self::parse(&self.argv())
            .map(|_| ())
            .map_err(|e| crate::cli::one_line_error(&e.render().to_string()))
    }
}

/// An argv under construction: one method per kind of argument, so that each builder's
/// `argv()` is one line per flag.
#[derive(Default)]
struct Argv(Vec<String>);

impl Argv {
    /// A positional argument or a subcommand name.
    fn arg(&mut self, v: impl Display) -> &mut Self {
        self.0.push(v.to_string());
        self
    }

    /// `--name VALUE`.
    fn val(&mut self, name: &str, v: impl Display) -> &mut Self {
        self.0.push(format!("--{name}"));
        self.0.push(v.to_string());
        self
    }

    /// A positional argument when there is one.
    fn opt_arg(&mut self, v: Option<impl Display>) -> &mut Self {
        if let Some(v) = v {
            self.arg(v);
        }
        self
    }

    /// `--name VALUE` when the value differs from the binary's default.
    fn changed<T: Display + PartialEq>(&mut self, name: &str, v: T, default: T) -> &mut Self {
        if v != default {
            self.val(name, v);
        }
        self
    }

    /// `--name VALUE` when there is a value.
    fn opt(&mut self, name: &str, v: Option<impl Display>) -> &mut Self {
        if let Some(v) = v {
            self.val(name, v);
        }
        self
    }

    /// `--name=VALUE` when there is a value (for flags whose value is optional, which clap
    /// takes only in this form: `--nodelay=false`).
    fn eq(&mut self, name: &str, v: Option<impl Display>) -> &mut Self {
        if let Some(v) = v {
            self.0.push(format!("--{name}={v}"));
        }
        self
    }

    /// `--name` when `on`.
    fn flag(&mut self, name: &str, on: bool) -> &mut Self {
        if on {
            self.0.push(format!("--{name}"));
        }
        self
    }

    /// The flags of a clap `Args` struct whose field values differ from its [`Default`], each
    /// value read from the field's serde serialization under the flag's id (clap's id is the
    /// field name, as serde's key is): a `true` switch (`ArgAction::SetTrue`) as `--name`, a
    /// flag whose value is optional as `--name=VALUE`, anything else as `--name VALUE`. One
    /// definition of the struct thus gives the parser, the YAML keys and the argv.
    fn options<T: clap::Args + serde::Serialize + Default>(&mut self, opts: &T) -> &mut Self {
        let value = |t: &T| serde_json::to_value(t).expect("option structs serialize");
        let (now, default) = (value(opts), value(&T::default()));
        let command = T::augment_args(clap::Command::new("options"));
        for arg in command.get_arguments() {
            let (Some(long), id) = (arg.get_long(), arg.get_id().as_str()) else {
                continue;
            };
            let Some(v) = now.get(id).filter(|&v| Some(v) != default.get(id)) else {
                continue;
            };
            let text = match v {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Null => continue,
                other => other.to_string(),
            };
            match arg.get_action() {
                clap::ArgAction::SetTrue => self.flag(long, v == &serde_json::Value::Bool(true)),
                _ if arg.get_num_args().is_some_and(|n| n.min_values() == 0) => {
                    self.eq(long, Some(text))
                }
                _ => self.val(long, text),
            };
        }
        self
    }

    fn done(&mut self) -> Vec<String> {
        std::mem::take(&mut self.0)
    }
}

/// The last `n` characters of `s` (trimmed), for error messages that quote a program's output.
pub fn tail(s: &str, n: usize) -> &str {
    let s = s.trim();
    let mut start = s.len().saturating_sub(n);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// Checks that `all` (every field away from its default) and the default survive their own
/// argv, and each of `all`'s fields alone too, so that one flag cannot hide behind another's
/// default; `skip` names fields that are not flags (`#[arg(skip)]`).
#[cfg(test)]
pub(crate) fn assert_survives_its_own_argv<T>(all: &T, skip: &[&str])
where
    T: Options + std::fmt::Debug + PartialEq,
{
    assert!(T::default().argv().is_empty(), "{:?}", T::default().argv());
    assert_eq!(&T::parse(&all.argv()).unwrap(), all, "{:?}", all.argv());
    let all_json = serde_json::to_value(all).unwrap();
    let fields = all_json.as_object().unwrap();
    assert!(!fields.is_empty());
    for (key, value) in fields.iter().filter(|(k, _)| !skip.contains(&k.as_str())) {
        let mut one = serde_json::to_value(T::default()).unwrap();
        assert_ne!(
            one.get(key),
            Some(value),
            "{key} is set away from its default"
        );
        one[key] = value.clone();
        let one: T = serde_json::from_value(one).unwrap();
        assert_eq!(
            T::parse(&one.argv()).unwrap(),
            one,
            "{key}: {:?}",
            one.argv()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_whole_characters() {
        assert_eq!(tail("  abcdef \n", 3), "def");
        assert_eq!(tail("ab", 10), "ab");
        // "é" is two bytes: cutting inside it moves the start forward to the next character.
        assert_eq!(tail("xé", 1), "");
        assert_eq!(tail("xéy", 2), "y");
    }
}
