//! `echo-bench sustain` (seed 004's "activelink"): N long connections, each looping a small
//! request and an N-byte reply from `echo-server --reply-bytes N`, for a fixed duration, with
//! one interval record per `--interval` so the launcher can pair throughput and latency with
//! the server's CPU and memory samples.

use echolab_core::protocol;

use crate::engine::{Pattern, Stop};
use crate::setup::{self, PlanInputs, SetupError};
use crate::Finished;
use echolab_core::cmd::SustainArgs;

/// Runs the sustained load described by `args`. The request is the seed payload's size,
/// stamped (its stamp keeps the reply-mode request terminator `\n` at its end); the reply is
/// verified against `protocol::reply_body(reply_bytes)`, the same for every request, so it
/// cannot show whose it is.
///
/// # Errors
/// Unresolvable host, too few file descriptors, or an engine that could not start.
pub(crate) fn run(args: &SustainArgs) -> Result<Finished, SetupError> {
    let request = protocol::payload(protocol::DEFAULT_PAYLOAD.len());
    debug_assert_eq!(request.last(), Some(&protocol::REQUEST_END));
    let plan = setup::plan(
        PlanInputs {
            addr: setup::resolve(&args.host, args.port)?,
            pattern: Pattern::Long,
            conns: args.n,
            stop: Stop::Duration(args.duration),
            warmup: args.pacing.warmup,
            rate: args.pacing.rate.map(echolab_core::limits::Rate::get),
            request,
            reply: crate::engine::Reply::Fixed(protocol::reply_body(args.reply_bytes as usize)),
            interval: Some(args.interval),
            shard: None,
            engine: args.shared.client.engine,
        },
        &args.shared.client,
        &args.shared.sock,
    )?;
    let outcome = setup::run_engine(&plan, args.shared.client.engine)?;
    let target = format!("{}:{}", args.host, args.port);
    let mut report =
        crate::report::base_report(&plan, &outcome, args.shared.client.engine, &target);
    report.mode = "sustain".into();
    report.reply_bytes = Some(args.reply_bytes);
    report.extra.interval_s = Some(args.interval.as_secs_f64());
    crate::report::note_setup_failures(&mut report, &outcome);
    let mut text = String::from(
        "interval    t(s)        ok   failed        QPS     rx MB/s   P50(µs)   P99(µs)\n",
    );
    for (i, iv) in report.intervals.iter().enumerate() {
        text.push_str(&format!(
            "{:>8} {:>7.2} {:>9} {:>8} {:>10.0} {:>11.2} {:>9} {:>9}\n",
            i + 1,
            iv.t_s,
            iv.requests_ok,
            iv.requests_failed,
            iv.qps,
            iv.rx_bytes_per_s / 1e6,
            crate::report::us(iv.latency_us.map(|l| l.p50), 0),
            crate::report::us(iv.latency_us.map(|l| l.p99), 0)
        ));
    }
    Ok(Finished {
        report,
        hist: outcome.recorder.hist,
        extra_text: text,
    })
}
