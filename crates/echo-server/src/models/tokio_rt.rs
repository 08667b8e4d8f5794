//! `tokio`: the tokio multi-threaded runtime with `--workers` worker threads, an accept task
//! and one task per connection doing `read` then `write` until everything read is written
//! (the baseline a Rust user reaches for).
//!
//! Buffering is bounded as in the `thread` model: a task reads again only after its writes
//! completed, so memory per connection is one `--read-buf` buffer.
//!
//! Counting. tokio's reactor (mio over epoll) makes its own epoll_wait/epoll_ctl calls and
//! retries reads after EAGAIN internally; none of that is visible through tokio's API. So the
//! `syscalls` this model reports are the operations it issues through tokio, each counted once
//! when it completes: `accept`, `read`, `write`, `close` (a connection task ending). They are a
//! lower bound on the real system calls; `strace -c -f` gives the rest.
//!
//! Each runtime worker thread writes its own counter slot: `on_thread_start` hands every
//! thread the runtime starts the next slot index, kept in a thread-local, and a task counts
//! into the slot of the thread it is running on at that moment (tasks migrate between workers,
//! but a slot is only ever written by the OS thread that owns it, which keeps
//! [`Counter::add`](crate::counters::Counter::add)'s single-writer rule). The runtime starts
//! its worker threads when it is built, before this model can start any other thread in it,
//! and the model never uses `spawn_blocking` or `block_in_place`, so worker threads get slots
//! 0..workers. A thread that got no slot (an index past the end) would share a slot with the
//! atomic [`Counter::add_shared`](crate::counters::Counter::add_shared), at the price of a
//! possible lost update from the slot's owner; see [`here`].

use std::cell::Cell;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use anyhow::Context as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

use super::backoff::{accept_error_needs_backoff, AcceptBackoff};
use crate::counters::{ErrKind, Sys, WorkerCounters};
use crate::reply::{Owed, ReplyBody};
use crate::serve::{Running, ServeCtx};

thread_local! {
    /// Counter slot of the current runtime thread; `usize::MAX` on threads the runtime did not start.
    static SLOT: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// What every task shares.
struct Shared {
    read_buf: usize,
    reply: Option<ReplyBody>,
    counters: &'static [WorkerCounters],
}

/// How a count is applied to the current thread's slot.
struct Here {
    slot: &'static WorkerCounters,
    owned: bool,
}

impl Here {
    fn add(&self, counter: impl Fn(&WorkerCounters) -> &crate::counters::Counter, n: u64) {
        let c = counter(self.slot);
        if self.owned {
            c.add(n);
        } else {
            c.add_shared(n);
        }
    }
}

/// The counter slot of the thread this code runs on. Must be called again after every
/// `.await`, since the task may have moved to another worker.
fn here(shared: &Shared) -> Here {
    let index = SLOT.with(Cell::get);
    match shared.counters.get(index) {
        Some(slot) => Here { slot, owned: true },
        None => Here {
            slot: &shared.counters[index % shared.counters.len()],
            owned: false,
        },
    }
}

/// A multi-threaded runtime with `workers` worker threads, each of which takes the next counter
/// slot index when it starts.
fn build_runtime(workers: usize) -> io::Result<tokio::runtime::Runtime> {
    let next_slot = AtomicUsize::new(0);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("tokio-worker")
        .on_thread_start(move || SLOT.with(|s| s.set(next_slot.fetch_add(1, Ordering::Relaxed))))
        .enable_io()
        .enable_time()
        .build()
}

/// Builds the runtime, starts the accept task and returns. The runtime is leaked on purpose:
/// it serves until the process exits after the final stats line.
///
/// # Errors
/// When the runtime's threads cannot be started or the listener cannot be registered with it.
pub(super) fn start(ctx: ServeCtx) -> anyhow::Result<Running> {
    let listener = ctx
        .listeners
        .into_iter()
        .next()
        .context("tokio model: no listening socket")?;
    let counters = ctx.counters;
    let pid = u64::from(std::process::id());
    for slot in counters {
        // Before any worker can count: the main thread is still the only writer.
        slot.pid.add(pid);
    }
    let runtime = build_runtime(ctx.workers).context("cannot start the tokio runtime")?;
    listener
        .set_nonblocking(true)
        .context("cannot make the listener non-blocking")?;
    let listener = {
        let _in_runtime = runtime.enter();
        TcpListener::from_std(listener).context("cannot register the listener with tokio")?
    };
    let shared = Arc::new(Shared {
        read_buf: ctx.read_buf,
        reply: ctx.reply_bytes.map(ReplyBody::new),
        counters,
    });
    runtime.spawn(accept_loop(listener, shared));
    Box::leak(Box::new(runtime));
    Ok(Running::default())
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut backoff = AcceptBackoff::default();
    loop {
        let accepted = listener.accept().await;
        let c = here(&shared);
        c.add(|s| s.sys(Sys::Accept), 1);
        match accepted {
            Ok((stream, _peer)) => {
                backoff.succeeded();
                c.add(|s| &s.accepted, 1);
                tokio::spawn(serve(stream, Arc::clone(&shared)));
            }
            Err(e) => {
                c.add(|s| s.error(ErrKind::from_io(&e)), 1);
                if accept_error_needs_backoff(&e) {
                    // A backoff, not a readiness wait: nothing announces a free descriptor.
                    tokio::time::sleep(backoff.failed()).await;
                }
            }
        }
    }
}

/// Serves one connection until EOF or an error (counted; it ends this connection only).
async fn serve(mut stream: TcpStream, shared: Arc<Shared>) {
    if let Err(e) = echo_until_eof(&mut stream, &shared).await {
        here(&shared).add(|s| s.error(ErrKind::from_io(&e)), 1);
    }
    // Counted before the close: once the client sees EOF, a stats line must include it.
    let c = here(&shared);
    c.add(|s| s.sys(Sys::Close), 1);
    c.add(|s| &s.closed, 1);
    drop(stream);
}

async fn echo_until_eof(stream: &mut TcpStream, shared: &Shared) -> io::Result<()> {
    let mut buf = vec![0u8; shared.read_buf];
    let mut owed = Owed::default();
    loop {
        let got = stream.read(&mut buf).await;
        here(shared).add(|s| s.sys(Sys::Read), 1);
        let n = match got? {
            0 => return Ok(()),
            n => n,
        };
        here(shared).add(|s| &s.bytes_in, n as u64);
        match &shared.reply {
            None => write_all_counted(stream, &buf[..n], shared).await?,
            Some(body) => {
                owed.add_requests(body, &buf[..n]);
                while owed.left() > 0 {
                    let chunk = owed.next(body);
                    write_all_counted(stream, chunk, shared).await?;
                    owed.consume(body, chunk.len());
                }
            }
        }
    }
}

/// `write_all` with one count per completed write, so short writes show up as extra calls.
async fn write_all_counted(
    stream: &mut TcpStream,
    mut data: &[u8],
    shared: &Shared,
) -> io::Result<()> {
    while !data.is_empty() {
        let wrote = stream.write(data).await;
        let c = here(shared);
        c.add(|s| s.sys(Sys::Write), 1);
        match wrote? {
            0 => return Err(io::ErrorKind::WriteZero.into()),
            k => {
                c.add(|s| &s.bytes_out, k as u64);
                data = &data[k..];
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::alloc_shared;
    use std::collections::HashMap;

    #[test]
    fn every_worker_thread_counts_into_its_own_slot() {
        const WORKERS: usize = 2;
        let runtime = build_runtime(WORKERS).unwrap();
        let shared = Shared {
            read_buf: 1,
            reply: None,
            counters: alloc_shared(WORKERS).unwrap(),
        };
        let seen: Vec<(std::thread::ThreadId, usize, bool)> = runtime.block_on(async {
            let tasks: Vec<_> = (0..64)
                .map(|_| {
                    tokio::spawn(async {
                        tokio::task::yield_now().await;
                        (std::thread::current().id(), SLOT.with(Cell::get))
                    })
                })
                .collect();
            let mut seen = Vec::new();
            for t in tasks {
                let (thread, slot) = t.await.unwrap();
                seen.push((thread, slot, slot < WORKERS));
            }
            seen
        });
        let mut slot_of: HashMap<std::thread::ThreadId, usize> = HashMap::new();
        for (thread, slot, owned) in seen {
            assert!(owned, "a task ran on a thread without a slot ({slot})");
            assert_eq!(
                *slot_of.entry(thread).or_insert(slot),
                slot,
                "a thread changed slots"
            );
        }
        let mut slots: Vec<usize> = slot_of.values().copied().collect();
        slots.sort_unstable();
        slots.dedup();
        assert_eq!(slots.len(), slot_of.len(), "two threads share a slot");
        // The test thread (block_on) is not a worker: it has no slot and counts atomically.
        let fallback = here(&shared);
        assert!(!fallback.owned);
        fallback.add(|s| &s.accepted, 1);
        assert_eq!(
            shared
                .counters
                .iter()
                .map(|s| s.accepted.get())
                .sum::<u64>(),
            1
        );
    }
}
