//! The I/O models. Each `start` function receives a [`ServeCtx`], starts its workers (threads,
//! or processes for prefork) and returns at once with a [`Running`]; the main thread then only
//! waits for signals and prints statistics. Models never need to handle shutdown themselves:
//! on SIGTERM/SIGINT the main thread stops forked children, prints the final line and exits.
//! Models apply no socket options of their own: `--nodelay` is set on the listening sockets,
//! whose accepted connections inherit it (`listen`).
//!
//! A worker that hits a fatal error (not a per-connection one) ends the process with its fatal
//! line (`crate::fatal`); a prefork worker process that dies is replaced by the main thread
//! (`serve::Children`).
//!
//! # Per-connection memory
//!
//! Every model bounds what one connection can make the server hold, so that a client that
//! sends without reading is stopped by TCP flow control (its bytes wait in the kernel's socket
//! buffers), and none lets one connection's back-pressure take what the others need (a shared
//! buffer pool, a worker, a slot). In reply mode (`--reply-bytes`) every model keeps only a
//! count of owed bytes per connection and writes replies from one shared template
//! ([`crate::reply`]).
//!
//! | model | per connection | a client that does not read |
//! |---|---|---|
//! | `select`, `poll`, `epoll-lt`, `epoll-et`, `reuseport` | one `--read-buf` buffer ([`crate::readiness::conn`]) | is not read while its echo is unsent; the reactor serves the others meanwhile |
//! | `prefork` | the same, in the worker process that accepted it | the same, within that worker |
//! | `thread` | one `--read-buf` buffer and one thread (128 KiB stack) | blocks its own thread in write(2) only |
//! | `tokio` | one `--read-buf` buffer and one task | suspends its own task only |
//! | `uring` | its share of the shared buffer ring (8 × `--read-buf`) plus one own `--read-buf` buffer | holds at most its share; a connection that finds the ring short receives into its own buffer (see `uring`'s module documentation) |

pub(crate) mod backoff;
mod epoll;
mod poll;
mod prefork;
mod reuseport;
mod select;
mod thread;
mod tokio_rt;
mod uring;

use crate::counters::Sys;
use crate::serve::{Running, ServeCtx};
use echolab_core::cmd::ServerModel;

/// The system calls a model's stats always list, even at zero: its I/O calls and its wait call.
pub(crate) fn listed_syscalls(model: ServerModel) -> &'static [Sys] {
    use Sys::*;
    match model {
        ServerModel::Select => &[Accept, Read, Write, Close, Select],
        ServerModel::Poll => &[Accept, Read, Write, Close, Poll],
        ServerModel::EpollLt
        | ServerModel::EpollEt
        | ServerModel::Prefork
        | ServerModel::Reuseport => &[Accept, Read, Write, Close, EpollWait, EpollCtl],
        ServerModel::Thread => &[Accept, Read, Write, Close],
        ServerModel::Uring => &[IoUringEnter],
        // tokio's reactor is epoll; its calls happen inside mio, so only what the model itself
        // issues through tokio's API is counted (accept/read/write/close as operations).
        ServerModel::Tokio => &[Accept, Read, Write, Close],
    }
}

/// Starts `model`.
///
/// # Errors
/// Setup failures (epoll_create, io_uring_setup, fork, thread spawn) as a message for the user.
pub(crate) fn start(model: ServerModel, ctx: ServeCtx) -> anyhow::Result<Running> {
    match model {
        ServerModel::Select => select::start(ctx),
        ServerModel::Poll => poll::start(ctx),
        ServerModel::EpollLt => epoll::start(ctx, epoll::Trigger::Level),
        ServerModel::EpollEt => epoll::start(ctx, epoll::Trigger::Edge),
        ServerModel::Thread => thread::start(ctx),
        ServerModel::Prefork => prefork::start(ctx),
        ServerModel::Reuseport => reuseport::start(ctx),
        ServerModel::Uring => uring::start(ctx),
        ServerModel::Tokio => tokio_rt::start(ctx),
    }
}
