//! What the I/O models share with the rest of the server: [`ServeCtx`], what a model is given
//! to serve, and [`Running`], what it hands back to the main thread. Kept apart from `models`
//! and `readiness` so that both can use them without importing each other.

use std::net::TcpListener;

use crate::counters::WorkerCounters;

/// Everything a model needs to serve.
pub(crate) struct ServeCtx {
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
pub(crate) struct Running {
    /// Worker processes the main thread watches (prefork); `None` for the models whose
    /// workers are threads of this process.
    pub children: Option<Box<dyn Children>>,
}

/// Worker processes, supervised by the main thread: a worker that dies is replaced at once,
/// and said so on stderr, or the server ends with the reason.
pub(crate) trait Children {
    /// Reaps every worker that exited (after a SIGCHLD) and starts a replacement for each,
    /// printing one line per replacement on stderr.
    ///
    /// # Errors
    /// A worker that cannot be replaced (fork failed, or it keeps dying): the reason, for the
    /// server's fatal line.
    fn reap_and_replace(&mut self) -> Result<(), String>;

    /// Workers started again so far.
    fn restarts(&self) -> u64;

    /// Stops every worker (SIGKILL) and reaps it.
    fn stop(&mut self);
}
