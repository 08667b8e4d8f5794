//! The main form: seed 000's `echo-bench HOST PORT CONNS ROUNDS --mode short|long`.

use echolab_core::protocol;

use crate::engine::{Pattern, Stop};
use crate::setup::{self, PlanInputs, SetupError};
use crate::Finished;
use echolab_core::cmd::{RunArgs, RunMode};

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
    let pattern = match args.mode {
        RunMode::Short => Pattern::Short,
        RunMode::Long => Pattern::Long,
    };
    // Refused before anything is resolved, checked or started.
    setup::engine_runs(args.shared.client.engine, pattern)?;
    crate::short_sockets::resolve(
        args.shared.sock.short_sockets,
        pattern,
        args.shared.client.linger0,
        args.shared.client.engine == crate::engine::EngineKind::Event,
        args.pacing.rate.is_some(),
    )
    .map_err(SetupError::usage)?;
    if args.processes > 1 && args.shard.is_none() {
        // Bad input is refused once, here, rather than by every shard.
        setup::resolve(host, port)?;
        return run_processes(args, conns);
    }
    let request = protocol::payload(args.payload_size as usize);
    let plan = setup::plan(
        PlanInputs {
            addr: setup::resolve(host, port)?,
            pattern,
            conns,
            stop,
            warmup: args.pacing.warmup,
            rate: args.pacing.rate.map(echolab_core::limits::Rate::get),
            reply: crate::engine::Reply::Echo,
            request,
            interval: args.duration.map(|_| INTERVAL),
            shard: args.shard,
            engine: args.shared.client.engine,
        },
        &args.shared.client,
        &args.shared.sock,
    )?;
    let outcome = setup::run_engine(&plan, args.shared.client.engine)?;
    let mut report = crate::report::base_report(
        &plan,
        &outcome,
        args.shared.client.engine,
        &format!("{host}:{port}"),
    );
    crate::report::note_setup_failures(&mut report, &outcome);
    if outcome.recorder.warmup_completed > 0 {
        report.extra.warmup_requests = Some(outcome.recorder.warmup_completed);
    }
    if args.shard.is_some() {
        let measured = outcome.measured(&plan);
        report.extra.shard_interval_histograms =
            Some(outcome.recorder.interval_histograms(measured));
    }
    Ok(Finished {
        report,
        hist: outcome.recorder.hist,
        extra_text: String::new(),
    })
}

/// `--processes N`: runs N shards of this command ([`crate::shard`]) and merges their reports.
fn run_processes(args: &RunArgs, conns: u64) -> Result<Finished, SetupError> {
    if args.processes > conns {
        return Err(SetupError::usage(format!(
            "--processes {} is more than CONNS {conns}: every process needs a connection",
            args.processes
        )));
    }
    // Connecting in long mode takes at most one --timeout per connection a worker makes in a
    // row; a generous bound that still ends a shard that hangs.
    let deadline = args.shared.client.timeout.0 * 2 + std::time::Duration::from_secs(60);
    let env_fail = |message: String| SetupError {
        message,
        exit_code: 1,
    };
    let parts = crate::shard::run_shards(args.processes, deadline).map_err(env_fail)?;
    let report = crate::shard::merge(parts, crate::report::allowed_cpus())
        .map_err(|message| env_fail(format!("--processes: {message}")))?;
    let hist = echolab_core::hist::decode(&report.histogram).map_err(|e| SetupError {
        message: format!("--processes: the merged histogram: {e}"),
        exit_code: 1,
    })?;
    Ok(Finished {
        report,
        hist,
        extra_text: String::new(),
    })
}
