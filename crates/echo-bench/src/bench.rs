//! The main form: seed 000's `echo-bench HOST PORT CONNS ROUNDS --mode short|long`.

use echolab_core::protocol;

use crate::cli::{Mode, RunArgs};
use crate::engine::{Pattern, Stop};
use crate::setup::{self, PlanInputs, SetupError};
use crate::Finished;

/// Interval of the per-interval records of a `--duration` run.
pub(crate) const INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// Runs the short/long benchmark described by `args`.
///
/// # Errors
/// Unresolvable host, too few file descriptors, or an engine that could not start.
pub(crate) fn run(args: &RunArgs) -> Result<Finished, SetupError> {
    // clap guarantees these (required unless a subcommand is given, and there is none here).
    let (Some(host), Some(port), Some(conns)) = (&args.host, args.port, args.conns) else {
        return Err(SetupError::usage("HOST, PORT and CONNS are required"));
    };
    let stop = match (args.rounds, args.duration) {
        (_, Some(d)) => Stop::Duration(d),
        (Some(n), None) => Stop::Rounds(n),
        (None, None) => return Err(SetupError::usage("give ROUNDS or --duration")),
    };
    let request = protocol::payload(args.payload_size as usize);
    let plan = setup::plan(
        PlanInputs {
            addr: setup::resolve(host, port)?,
            pattern: match args.mode {
                Mode::Short => Pattern::Short,
                Mode::Long => Pattern::Long,
            },
            conns,
            stop,
            warmup: args.load.warmup,
            rate: args.rate,
            expected_reply: request.clone(),
            request,
            interval: args.duration.map(|_| INTERVAL),
        },
        &args.sock,
    )?;
    let outcome = setup::run_engine(&plan, args.load.engine)?;
    let mut report =
        crate::report::base_report(&plan, &outcome, args.load.engine, &format!("{host}:{port}"));
    crate::report::note_setup_failures(&mut report, &outcome);
    if outcome.recorder.warmup_completed > 0 {
        report.extra.insert(
            "warmup_requests".into(),
            outcome.recorder.warmup_completed.into(),
        );
    }
    Ok(Finished {
        report,
        hist: outcome.recorder.hist,
        extra_text: String::new(),
    })
}
