//! `uring`: one reactor thread driving io_uring (Linux 5.6+).
//!
//! Operations, by kernel support (probed at start, see [`Features`]):
//! - accept: one multishot accept (Linux 5.19) that yields a completion per connection;
//!   otherwise a single-shot accept re-armed after each completion.
//! - receive: one multishot recv per connection (Linux 6.0) with buffers picked by the kernel
//!   from a registered buffer ring ([`buf_ring`], Linux 5.19); otherwise a single-shot recv into
//!   the connection's own `--read-buf` buffer, re-armed when its bytes are written back.
//! - send: echo mode sends straight from the buffer the bytes arrived in (no copy) and hands
//!   the buffer back to the ring when the send completes; reply mode sends from a shared
//!   [`ReplyBody`](crate::reply::ReplyBody). At most one send per connection is in flight,
//!   so bytes leave in order; a short send is resubmitted for the rest.
//! - close: an io_uring close once no operation of the connection is in flight.
//!
//! The loop submits everything queued and waits for at least one completion in a single
//! `io_uring_enter`, then handles every completion reaped, so the system calls per request fall
//! as load rises (one enter serves a whole batch).
//!
//! Bounded memory, and no connection waiting for another. A multishot recv keeps taking
//! buffers as long as data arrives, whether or not the client reads its echo; the ring is
//! shared by every connection. So:
//! - The ring is a fixed pool of about [`POOL_TARGET_BYTES`](reactor::POOL_TARGET_BYTES),
//!   allocated (and made resident) at start: the server's memory does not grow with what
//!   clients leave unread.
//! - Per connection, holding [`MAX_HELD_BUFS`](reactor::MAX_HELD_BUFS) buffers' worth of
//!   unsent input stops its receiving until half of it is sent. Where the kernel has the
//!   multishot recv byte limit (Linux 6.17, [`Features::recv_limit`]) each recv is armed to
//!   end within the bytes left below that share, so the cap is hard in bytes. Elsewhere the recv
//!   is cancelled (ASYNC_CANCEL) at the cap, and the kernel may fill more buffers before the
//!   cancel lands (whatever the socket had queued during one reactor turn): a soft cap.
//! - Progress never depends on the ring. Enough clients that do not read can hold every ring
//!   buffer (40 × 8 shares are more than 256 buffers). A recv that finds the ring empty
//!   (ENOBUFS, counted as `errors.recv_buffer_exhausted`), and every recv armed while the ring
//!   has less than one share free, goes to the connection's own `--read-buf` buffer (a
//!   single-shot recv) instead; the connection returns to the ring at a later receive once
//!   the ring has room. So a client that never reads costs the server at most its share of
//!   the ring plus one `--read-buf` buffer, and takes nothing another connection needs.
//!
//! Reply mode holds no buffers (a count of owed bytes, [`Owed`](crate::reply::Owed), with the
//! ring buffer handed back at once) and pauses at
//! [`MAX_OWED_BUFS`](reactor::MAX_OWED_BUFS) buffers' worth owed. Single-shot receives hold
//! one buffer per connection and never read ahead of the echo.
//!
//! Descriptor exhaustion: a failed accept (EMFILE...) ends a multishot accept; it is re-armed
//! after a Timeout operation of [`AcceptBackoff`](crate::models::backoff::AcceptBackoff)
//! length instead of at once.
//!
//! Counters (slot 0): `syscalls.io_uring_enter` counts every enter (waits and the rare
//! flush of a full submission queue), `ops` counts submitted operations by opcode,
//! `events_returned` the completions reaped, `empty_wakeups` the waits that reaped none.
//!
//! Files: `features` (what the kernel offers, ring setup), `user_data` (which operation a
//! completion ends), `conn` (per-connection state), `buf_ring` (the provided-buffer ring),
//! `reactor` (the loop and every operation), `tests` (the reactor with features forced on/off).

mod buf_ring;
mod conn;
mod features;
mod reactor;
#[cfg(test)]
mod tests;
mod user_data;

use std::sync::mpsc;

use anyhow::Context as _;

use self::features::Features;
use self::reactor::{pool_buffers, Config, Reactor};
use crate::serve::{Running, ServeCtx};

/// Starts the reactor thread and returns once its ring is set up.
///
/// # Errors
/// io_uring unavailable (seccomp, `kernel.io_uring_disabled`, kernel too old: one line saying
/// so), or the thread cannot be spawned.
pub(super) fn start(ctx: ServeCtx) -> anyhow::Result<Running> {
    let listener = ctx
        .listeners
        .into_iter()
        .next()
        .context("uring model: no listening socket")?;
    let counters = &ctx.counters[0];
    counters.pid.add(u64::from(std::process::id()));
    let config = Config {
        read_buf: ctx.read_buf,
        reply_bytes: ctx.reply_bytes,
        features: Features::detect(),
        pool_buffers: pool_buffers(ctx.read_buf),
    };
    let (ready_tx, ready_rx) = mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("uring-reactor".into())
        // The ring is created on the thread that uses it: IORING_SETUP_SINGLE_ISSUER binds it
        // to its creator.
        .spawn(move || match Reactor::new(listener, &config, counters) {
            Ok(reactor) => {
                let _ = ready_tx.send(Ok(reactor.describe()));
                reactor.run()
            }
            Err(e) => {
                let _ = ready_tx.send(Err(e));
            }
        })
        .context("cannot spawn the io_uring reactor thread")?;
    let description = ready_rx
        .recv()
        .context("the io_uring reactor thread died during setup")??;
    eprintln!("echo-server: uring: {description}");
    Ok(Running::default())
}
