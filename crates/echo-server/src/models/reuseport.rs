//! `reuseport`: --workers reactor threads, each with its own SO_REUSEPORT listener (made in
//! listen.rs; the kernel hashes each incoming connection to one of them, socket(7)) and its own
//! edge-triggered epoll reactor (models::epoll::run). No state is shared between reactors.

use super::epoll::{self, ReactorSpec, Trigger};
use crate::readiness::conn::Protocol;
use crate::readiness::worker;
use crate::serve::{Running, ServeCtx};

/// Starts one reactor thread per listener; reactor `i` counts into counter slot `i`.
///
/// # Errors
/// When a thread cannot start.
pub(super) fn start(ctx: ServeCtx) -> anyhow::Result<Running> {
    anyhow::ensure!(
        ctx.listeners.len() <= ctx.counters.len(),
        "{} listeners but {} counter slots",
        ctx.listeners.len(),
        ctx.counters.len()
    );
    let spec = ReactorSpec {
        trigger: Trigger::Edge,
        exclusive: false,
    };
    let reactors = ctx.listeners.len();
    for (i, (listener, counters)) in ctx.listeners.into_iter().zip(ctx.counters).enumerate() {
        counters.pid.add(u64::from(std::process::id()));
        let proto = Protocol::new(ctx.read_buf, ctx.reply_bytes);
        worker::spawn(format!("reuseport-{i}"), move || {
            epoll::run(listener, spec, proto, counters)
        })?;
    }
    // A reactor that fails ends the process (worker::spawn), so there is nothing to check.
    epoll::wait_listening(&ctx.counters[..reactors], epoll::STARTUP_DEADLINE, |_| {
        Ok(())
    })?;
    Ok(Running::default())
}
