//! `thread`: one OS thread per connection with blocking I/O (the classic "thread per
//! connection" server of the seeds), plus one thread running the accept loop.
//!
//! Buffering is bounded by construction: a connection thread does not read again until it has
//! written everything the last read produced, so a client that stops reading stalls its own
//! thread in write(2) and TCP flow control stops its sender; memory per connection is one
//! `--read-buf` buffer and a thread stack.
//!
//! Counters: every thread writes slot 0 with [`Counter::add_shared`] (an atomic add) at each
//! system call. The alternative, a per-thread batch flushed now and then, would leave counts of
//! a thread blocked in read(2) unflushed when the final stats line is printed (the main thread
//! cannot make a blocked thread flush), so the final line would be wrong exactly for idle long
//! connections. An uncontended atomic add costs a few nanoseconds against the microseconds of
//! a blocking read/write round trip with its two context switches, so per-call atomics are both
//! exact and cheap enough for this model.
//!
//! [`Counter::add_shared`]: crate::counters::Counter::add_shared

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;

use anyhow::Context as _;

use super::backoff::{accept_error_needs_backoff, AcceptBackoff};
use crate::counters::{ErrKind, Sys, WorkerCounters};
use crate::reply::{Owed, ReplyBody};
use crate::serve::{Running, ServeCtx};

/// Stack of a connection thread. The read buffer lives on the heap, so a connection thread
/// needs little stack; a small one lets thousands of connections fit in memory.
const CONN_STACK_BYTES: usize = 128 << 10;

/// What every connection thread shares.
struct Shared {
    read_buf: usize,
    reply: Option<ReplyBody>,
    counters: &'static WorkerCounters,
}

/// Starts the accept thread; returns at once.
///
/// # Errors
/// When the accept thread cannot be spawned.
pub(super) fn start(ctx: ServeCtx) -> anyhow::Result<Running> {
    let listener = ctx
        .listeners
        .into_iter()
        .next()
        .context("thread model: no listening socket")?;
    let counters = &ctx.counters[0];
    counters.pid.add_shared(u64::from(std::process::id()));
    let shared = Arc::new(Shared {
        read_buf: ctx.read_buf,
        reply: ctx.reply_bytes.map(ReplyBody::new),
        counters,
    });
    std::thread::Builder::new()
        .name("accept".into())
        .spawn(move || accept_loop(&listener, &shared))
        .context("cannot spawn the accept thread")?;
    Ok(Running::default())
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    let c = shared.counters;
    let mut backoff = AcceptBackoff::default();
    loop {
        let accepted = listener.accept();
        c.sys(Sys::Accept).add_shared(1);
        match accepted {
            Ok((stream, _peer)) => {
                backoff.succeeded();
                c.accepted.add_shared(1);
                let conn_shared = Arc::clone(shared);
                let spawned = std::thread::Builder::new()
                    .name("conn".into())
                    .stack_size(CONN_STACK_BYTES)
                    .spawn(move || serve(stream, &conn_shared));
                if let Err(e) = spawned {
                    // The stream was moved into the closure that failed to start, and is
                    // dropped (closed) with it.
                    c.error(ErrKind::from_io(&e)).add_shared(1);
                    c.sys(Sys::Close).add_shared(1);
                    c.closed.add_shared(1);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                c.error(ErrKind::from_io(&e)).add_shared(1);
                if accept_error_needs_backoff(&e) {
                    // A backoff, not a readiness wait: nothing announces a free descriptor.
                    std::thread::sleep(backoff.failed());
                }
            }
        }
    }
}

/// Serves one connection until EOF or an error, then closes it. Every error is the
/// connection's own (EPIPE, ECONNRESET, ...): it is counted and ends this connection only.
fn serve(stream: TcpStream, shared: &Shared) {
    let c = shared.counters;
    if let Err(e) = echo_until_eof(&stream, shared) {
        c.error(ErrKind::from_io(&e)).add_shared(1);
    }
    // Counted before the close: once the client sees EOF, a stats line must include it.
    c.sys(Sys::Close).add_shared(1);
    c.closed.add_shared(1);
    drop(stream);
}

fn echo_until_eof(mut stream: &TcpStream, shared: &Shared) -> io::Result<()> {
    let c = shared.counters;
    let mut buf = vec![0u8; shared.read_buf];
    let mut owed = Owed::default();
    loop {
        let got = stream.read(&mut buf);
        c.sys(Sys::Read).add_shared(1);
        let n = match got {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        c.bytes_in.add_shared(n as u64);
        match &shared.reply {
            None => write_all_counted(stream, &buf[..n], c)?,
            Some(body) => {
                owed.add_requests(body, &buf[..n]);
                while owed.left() > 0 {
                    let chunk = owed.next(body);
                    write_all_counted(stream, chunk, c)?;
                    owed.consume(body, chunk.len());
                }
            }
        }
    }
}

/// `write_all` with one count per write(2), so short writes show up as extra calls.
fn write_all_counted(
    mut stream: &TcpStream,
    mut data: &[u8],
    c: &WorkerCounters,
) -> io::Result<()> {
    while !data.is_empty() {
        let wrote = stream.write(data);
        c.sys(Sys::Write).add_shared(1);
        match wrote {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(k) => {
                c.bytes_out.add_shared(k as u64);
                data = &data[k..];
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
