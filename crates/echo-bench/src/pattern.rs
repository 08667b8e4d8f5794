//! How a run uses its connections ([`Pattern`]), shared by the engines and the rules that
//! depend on it (source addresses, worker threads).

/// How a connection is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pattern {
    /// Every request is connect, send, receive, close; latency is connect to close.
    Short,
    /// Connect once before the start barrier, then send/receive rounds; latency is send to
    /// receive.
    Long,
    /// connect-storm (seed 004's deadlink): connect, prove the connection with one echo, keep
    /// it open until every connection of the run is established.
    Storm,
}

impl Pattern {
    /// The `BenchReport.mode` name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Pattern::Short => "short",
            Pattern::Long => "long",
            Pattern::Storm => "connect-storm",
        }
    }
}
