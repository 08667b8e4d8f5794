//! Building blocks of the readiness-based models (`select`, `poll`, `epoll-lt`, `epoll-et`,
//! `prefork`, `reuseport`): counted system calls, per-connection buffering, accepting with a
//! backoff when descriptors run out, and worker threads that end the process on a fatal error.
//!
//! Each model only decides *when* to call these (which readiness API, which trigger mode);
//! what a readable or writable connection does is written once, in [`conn`].

pub(crate) mod accept;
pub(crate) mod conn;
pub(crate) mod io;
pub(crate) mod scan;
pub(crate) mod worker;
