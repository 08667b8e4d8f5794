//! What the I/O models share with the rest of the server: [`ServeCtx`], what a model is given
//! to serve, and [`Running`], what it hands back to the main thread. Kept apart from `models`
//! and `readiness` so that both can use them without importing each other.

use std::net::TcpListener;

use crate::counters::WorkerCounters;

/// Everything a model needs to serve.
pub struct ServeCtx {
    /// Per-connection read buffer, bytes (`--read-buf`, at least 1).
    pub read_buf: usize,
    /// `Some(n)`: reply mode, n bytes per '\n'-terminated request; `None`: echo mode.
    pub reply_bytes: Option<usize>,
    /// Number of workers for multi-worker models (at least 1); 1 otherwise.
    pub workers: usize,
    /// prefork: use EPOLLEXCLUSIVE on the shared listener.
    pub exclusive: bool,
    /// Listening sockets (blocking): one per worker for `reuseport`, exactly one otherwise.
    pub listeners: Vec<TcpListener>,
    /// One counter slot per worker (`counters.len() == workers`), in shared memory.
    pub counters: &'static [WorkerCounters],
}

/// What a started model leaves for the main thread to manage.
#[derive(Default)]
pub struct Running {
    /// Child processes to stop (SIGKILL, then reap) before the final stats line (prefork).
    pub children: Vec<nix::unistd::Pid>,
}
