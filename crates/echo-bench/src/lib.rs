//! `echo-bench`: echolab's load generator. See `echo-bench --help` and the module docs:
//! [`engine`] (event and thread engines), [`storm`] and [`sustain`]
//! (seed 004's deadlink and activelink), [`syscalls`] (accounting), [`report`] (output).
//!
//! Its command line is defined once, in `echolab_core::cmd::BenchCli`: the clap structs this
//! crate parses are the commands the launcher builds.

mod bench;
mod engine;
mod gate;
mod interrupt;
mod pattern;
mod recorder;
mod report;
mod setup;
pub mod shard;
pub mod short_sockets;
pub mod sources;
mod storm;
mod sustain;
mod syscalls;

use std::io::Write as _;

use clap::Parser as _;
use echolab_core::stats::BenchReport;
use hdrhistogram::Histogram;

use echolab_core::cmd::{BenchCli, BenchCmd, OutputArgs};

/// A finished run: its report, its latency histogram (for `--hist`) and any command-specific
/// text for the human output.
pub struct Finished {
    /// The report `--json` prints.
    pub report: BenchReport,
    /// Latencies of successful requests, nanoseconds.
    pub hist: Histogram<u64>,
    /// Printed after the summary (storm and sustain details).
    pub extra_text: String,
}

/// The whole program: parses the command line, runs the load, prints the report; returns the
/// exit status (0, 1 on a failure, when no request succeeded, or with `--fail-on-error` and
/// failed requests, 2 bad input, 128 + the signal's number after a SIGINT or SIGTERM cut the
/// run short: 130 or 143).
pub fn real_main() -> i32 {
    // Before any other thread starts, so that every one of them inherits the blocked mask.
    if let Err(e) = interrupt::install() {
        eprintln!(
            "echo-bench: cannot take SIGINT/SIGTERM ({e}); a signal will end the run without \
             a report"
        );
    }
    let cmd = match echolab_core::cli::parsed_or_exit("echo-bench", BenchCli::try_parse()) {
        Ok(c) => c.into_cmd(),
        Err(code) => return i32::from(code),
    };
    let shard = match &cmd {
        BenchCmd::Run(a) => a.shard,
        _ => None,
    };
    if shard.is_some() {
        interrupt::quiet();
    }
    let (result, out, asked) = match &cmd {
        BenchCmd::Run(a) => (bench::run(a), &a.shared.out, a.duration),
        BenchCmd::ConnectStorm(a) => (storm::run(a), &a.shared.out, None),
        BenchCmd::Sustain(a) => (sustain::run(a), &a.shared.out, Some(a.duration)),
    };
    match result {
        Ok(mut done) => {
            report::note_conntrack(
                &mut done.report,
                echolab_core::netstat::ConntrackFill::read(),
            );
            if let Some(i) = interrupt::received() {
                report::note_interrupt(&mut done.report, i.name(), asked);
            }
            let code = emit(&done, out);
            let r = &done.report;
            if !r.interrupted {
                return code;
            }
            let by = r.interrupted_by.as_deref().unwrap_or("SIGINT");
            if shard.is_none() {
                eprintln!(
                    "echo-bench: interrupted by {by}: the report covers {:.3} s of measurement",
                    r.duration_s
                );
            }
            // A shard stopped on its own (not through this process) marks the merged report.
            by.parse::<nix::sys::signal::Signal>().map_or(
                interrupt::exit_code(nix::sys::signal::Signal::SIGINT),
                interrupt::exit_code,
            )
        }
        Err(e) => {
            eprintln!("echo-bench: {}", e.message);
            interrupt::received().map_or(e.exit_code, interrupt::Interrupt::exit_code)
        }
    }
}

/// `: timeout 12, refused 3`, or empty without failures.
fn failure_kinds(r: &BenchReport) -> String {
    if r.failures.is_empty() {
        return String::new();
    }
    let kinds: Vec<String> = r.failures.iter().map(|(k, v)| format!("{k} {v}")).collect();
    format!(": {}", kinds.join(", "))
}

/// Prints the report as asked and returns the exit status.
fn emit(done: &Finished, out: &OutputArgs) -> i32 {
    let r = &done.report;
    let mut text = String::new();
    if out.json {
        text = serde_json::to_string_pretty(r).expect("a BenchReport serialises");
        text.push('\n');
    } else {
        text.push_str(&report::render_summary(r));
        text.push_str(&done.extra_text);
        if out.hist {
            text.push_str(&report::render_histogram(&done.hist));
        }
        if out.syscalls {
            text.push_str(&report::render_syscalls(r));
        }
    }
    // A closed stdout (`| head`) is not worth a panic.
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
    // A run that measured nothing is no result, whatever its report says of it: a script that
    // reads only the status must not take it for one. The report is still printed (null
    // latency, the failures by kind), so the cause can be read.
    if r.requests_ok == 0 {
        eprintln!(
            "echo-bench: no request succeeded ({} failed{}); no latency was measured",
            r.requests_failed,
            failure_kinds(r)
        );
        return 1;
    }
    if out.fail_on_error && r.requests_failed > 0 {
        eprintln!(
            "echo-bench: {} request(s) failed (--fail-on-error)",
            r.requests_failed
        );
        return 1;
    }
    0
}
