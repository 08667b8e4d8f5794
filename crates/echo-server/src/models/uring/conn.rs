//! What the reactor keeps per connection: its descriptor, the state of its operations, and the
//! received bytes it still has to send back.

use std::collections::VecDeque;
use std::os::fd::RawFd;

use crate::reply::Owed;

/// Received bytes waiting to be sent back (echo mode), `len` bytes from `off`.
#[derive(Debug, Clone, Copy)]
pub(super) enum Chunk {
    /// In ring buffer `bid`, handed back when fully sent.
    Ring { bid: u16, off: u32, len: u32 },
    /// In the connection's own buffer (single-shot receive).
    Own { off: u32, len: u32 },
}

/// One connection.
#[derive(Debug, Default)]
pub(super) struct Conn {
    pub(super) live: bool,
    pub(super) fd: RawFd,
    /// Bumped whenever the slot is reused.
    pub(super) generation: u32,
    /// Arm number of the current (or last) receive.
    pub(super) recv_tag: u32,
    pub(super) recv_armed: bool,
    pub(super) recv_multishot: bool,
    /// The current multishot recv ends by itself after a byte limit ([`super::features::with_total_limit`]).
    pub(super) recv_limited: bool,
    pub(super) cancel_sent: bool,
    pub(super) send_in_flight: bool,
    /// The client half-closed (recv returned 0): flush, then close.
    pub(super) read_eof: bool,
    /// A fatal error: drop pending output, stop in-flight operations, close.
    pub(super) dead: bool,
    /// The last receive found the buffer ring empty (ENOBUFS): the next one goes to the own
    /// buffer, so that the connection never waits for buffers other connections hold.
    pub(super) ring_dry: bool,
    pub(super) out: VecDeque<Chunk>,
    pub(super) owed: Owed,
    /// Buffer for single-shot receives, made on first use.
    pub(super) own_buf: Option<Box<[u8]>>,
}

impl Conn {
    pub(super) fn own_buf_busy(&self) -> bool {
        self.out.iter().any(|c| matches!(c, Chunk::Own { .. }))
    }

    /// Received bytes not yet sent back (echo mode).
    pub(super) fn held_bytes(&self) -> u64 {
        self.out
            .iter()
            .map(|c| match *c {
                Chunk::Ring { off, len, .. } | Chunk::Own { off, len } => u64::from(len - off),
            })
            .sum()
    }
}
