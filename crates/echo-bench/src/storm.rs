//! `echo-bench connect-storm` (seed 004's "deadlink"): open N connections as fast as the
//! machine allows and report the time until all of them are established.
//!
//! "Established" is proven, not assumed: a connection counts once a 1-byte echo came back over
//! it, because a completed handshake only means the kernel queued the connection in the
//! server's backlog, not that the server accepted it. Connections stay open until every one
//! of them has been proven (or has failed), so the server holds N at once, as in the seed.

use echolab_core::hist::LatencySummary;
use echolab_core::protocol;

use crate::engine::{EngineKind, Pattern, Stop};
use crate::setup::{self, PlanInputs, SetupError};
use crate::Finished;
use echolab_core::cmd::StormArgs;

/// Bytes of the echo that proves a connection.
pub(crate) const PROOF_BYTES: usize = 1;

/// Runs the storm described by `args` on the event engine.
///
/// The report's latency is connect start to echo proven; `extra` carries
/// `time_to_establish_s` (start until the last connection was proven or failed),
/// `established` and `connect_latency_us` (connect(2) until the socket is writable, i.e. the
/// handshake).
///
/// # Errors
/// Unresolvable host, too few file descriptors, or an engine that could not start.
pub(crate) fn run(args: &StormArgs) -> Result<Finished, SetupError> {
    if args.shared.client.engine != EngineKind::Event {
        return Err(SetupError::usage(format!(
            "--engine {}: connect-storm runs on the event engine only",
            args.shared.client.engine
        )));
    }
    let request = protocol::payload(PROOF_BYTES);
    let plan = setup::plan(
        PlanInputs {
            addr: setup::resolve(&args.host, args.port)?,
            pattern: Pattern::Storm,
            conns: args.n,
            stop: Stop::Rounds(1),
            warmup: std::time::Duration::ZERO,
            rate: None,
            reply: crate::engine::Reply::Echo,
            request,
            interval: None,
            shard: None,
            engine: EngineKind::Event,
        },
        &args.shared.client,
        &args.shared.sock,
    )?;
    let outcome = setup::run_engine(&plan, EngineKind::Event)?;
    let target = format!("{}:{}", args.host, args.port);
    let mut report = crate::report::base_report(&plan, &outcome, EngineKind::Event, &target);
    let connect = LatencySummary::from_histogram(&outcome.connect_hist);
    let to_establish = outcome
        .recorder
        .last_completion
        .map_or(0.0, |l| (l - outcome.gate_opened).as_secs_f64());
    report.duration_s = to_establish;
    report.qps = if to_establish > 0.0 {
        outcome.established as f64 / to_establish
    } else {
        0.0
    };
    report.extra.time_to_establish_s = Some(to_establish);
    report.extra.established = Some(outcome.established);
    report.extra.connect_latency_us = connect;
    let us = |f: fn(&LatencySummary) -> f64| crate::report::us(connect.as_ref().map(f), 0);
    let text = format!(
        "established {}/{} in {:.4} s ({:.0} connections/s)\n\
         connect latency µs (connect to writable): P50 {} P90 {} P99 {} max {}\n",
        outcome.established,
        args.n,
        to_establish,
        report.qps,
        us(|l| l.p50),
        us(|l| l.p90),
        us(|l| l.p99),
        us(|l| l.max)
    );
    Ok(Finished {
        report,
        hist: outcome.recorder.hist,
        extra_text: text,
    })
}
