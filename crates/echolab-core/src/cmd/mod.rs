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
//! echo-bench's client options are one struct both sides use ([`ClientOpts`]: clap for the
//! binary, serde for experiment files, and the argv from the two): adding such a flag is one
//! field. The other flags are one field here (with its line in `argv()`) and one in the
//! binary's clap, held together by `tests/argv.rs`.

mod bench;
mod custom;
mod netem;
mod server;

pub use bench::{
    bench_report, BenchCmd, BenchEngine, ClientOpts, RunCmd, RunMode, ServerCpus, StormCmd,
    SustainCmd,
};
pub use custom::{CustomServerCmd, ServerLaunch};
pub use netem::{
    json_from_stdout, BulkTransfer, CalibServerReady, CalibrationCheck, CalibrationReport, Ipv4Net,
    Masquerade, MissedAttempt, NetemCmd, ProbeResult, RttReport, WIRE_READY_PREFIX,
};
pub use server::{final_stats, Fatal, Ready, ServerCmd, ServerModel, UnknownModel};

use std::fmt::Display;

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
