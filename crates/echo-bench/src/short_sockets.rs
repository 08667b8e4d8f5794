//! `--short-sockets`: whether a short connection's next request opens a new socket, as
//! neper's tcp_crr and the seed's client do, or re-connects the socket it already has.
//!
//! With `--linger0` a short request ends in an abortive close: close(2) with SO_LINGER {1, 0}
//! runs the kernel's `tcp_disconnect()`, which sends RST and drops the connection, and then
//! frees the socket. connect(2) with an `AF_UNSPEC` address runs the same `tcp_disconnect()`
//! (connect(2): "connectionless sockets may dissolve the association by connecting to an
//! address with the sa_family member of sockaddr set to AF_UNSPEC"; for TCP the kernel's
//! `__inet_stream_connect` does so too) and leaves the socket in CLOSE with its options, its
//! bound source address and its epoll registration, ready for the next connect(2) (a new
//! ephemeral port; `tcp_connect_init` clears the ECONNRESET the disconnect left). The server
//! sees the same packets (handshake, request, reply, RST); the client skips socket(2), its
//! setsockopt(2) and bind(2) calls, epoll_ctl(2) and close(2), and the kernel's allocation and
//! teardown of a socket, per request. The kernel's TCP counters per request are the same (one
//! active open, 8 segments each way on loopback, one RST) but for `TcpExtTCPAbortOnData`,
//! which `tcp_close()` counts for an SO_LINGER-0 close and a disconnect does not. Where the
//! client is the bottleneck, as with short connections on loopback, that is throughput:
//! `scripts/readme-reference` on a 2-core Intel Xeon VM (100 connections, 3 x 5 s each, the
//! table in docs/measurements.md) gave 54.6k requests/s reused against 42.3k fresh, and 17.2
//! against 22.4 us of client CPU per request (neper's tcp_crr: 41.4k, 25.5 us).
//!
//! Without `--linger0` the client closes first with a FIN and the socket's TIME_WAIT outlives
//! its descriptor; re-connecting the same socket would have to wait for the server's FIN first,
//! so the automatic choice keeps fresh sockets there (and the TIME_WAIT shape's cost is the
//! port search, which [`crate::sources`] spreads).
//!
//! In open loop (`--rate`) a request usually ends before its connection's next slot, and the
//! disconnect's error report (`tcp_disconnect()` ends in `sk_error_report()`) then wakes the
//! idle socket's epoll registration once more (EPOLLHUP), an extra epoll_wait(2) return per
//! request (4.01 instead of 3.01 per request at 500 requests/s over 100 connections);
//! the automatic choice keeps fresh sockets there, where the client is not the bottleneck
//! anyway, and `reuse` asks for it all the same.

use echolab_core::cmd::ShortSockets;

use crate::pattern::Pattern;

/// What a run does with a short connection's socket between requests, and why (for the
/// report's `short_sockets` and `short_sockets_reason`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct SocketReuse {
    /// Re-connect the socket after an `AF_UNSPEC` disconnect instead of closing it.
    pub(crate) reuse: bool,
    /// `"fresh"` or `"reuse"` for short connections; empty for the other modes, whose sockets
    /// live for the whole run.
    pub(crate) label: &'static str,
    /// Why: the flag, or the automatic rule's reason; empty with `label`.
    pub(crate) reason: String,
}

/// Resolves `--short-sockets` for a run of `pattern`, on the event engine or not, in open
/// loop (`--rate`) or not.
///
/// # Errors
/// A message naming the flag (a usage error) when `reuse` is asked where it cannot run: not
/// `--mode short`, no `--linger0`, or not the event engine.
pub(crate) fn resolve(
    choice: ShortSockets,
    pattern: Pattern,
    linger0: bool,
    event_engine: bool,
    open_loop: bool,
) -> Result<SocketReuse, String> {
    let why_not = if pattern != Pattern::Short {
        Some(
            "applies to short connections (--mode short) only: long mode, connect-storm and \
             sustain keep one socket per connection",
        )
    } else if !linger0 {
        Some(
            "needs --linger0: without it the client closes with a FIN and keeps TIME_WAIT, \
             and its socket cannot be re-connected before the server's FIN",
        )
    } else if !event_engine {
        Some("runs on --engine event only")
    } else {
        None
    };
    if pattern != Pattern::Short {
        return match (choice, why_not) {
            (ShortSockets::Reuse, Some(why)) => Err(format!("--short-sockets reuse {why}")),
            _ => Ok(SocketReuse::default()),
        };
    }
    let fresh = |reason: String| SocketReuse {
        reuse: false,
        label: "fresh",
        reason,
    };
    Ok(match (choice, why_not) {
        (ShortSockets::Fresh, _) => fresh("--short-sockets fresh".into()),
        (ShortSockets::Reuse, Some(why)) => return Err(format!("--short-sockets reuse {why}")),
        (ShortSockets::Reuse, None) => SocketReuse {
            reuse: true,
            label: "reuse",
            reason: "--short-sockets reuse".into(),
        },
        (ShortSockets::Auto, None) if open_loop => fresh(
            "auto: open loop (--rate): a socket waiting for its slot would take one more epoll \
             wake-up per request from the disconnect"
                .into(),
        ),
        (ShortSockets::Auto, None) => SocketReuse {
            reuse: true,
            label: "reuse",
            reason: "auto: --linger0 on the event engine: connect(2) with AF_UNSPEC sends the \
                     RST that close(2) would, and the socket is re-connected"
                .into(),
        },
        (ShortSockets::Auto, Some(why)) => fresh(format!("auto: reuse {why}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_reuses_only_abortive_short_connections_on_the_event_engine() {
        let auto = |pattern, linger0, event_engine| {
            resolve(ShortSockets::Auto, pattern, linger0, event_engine, false).unwrap()
        };
        let r = auto(Pattern::Short, true, true);
        assert!(r.reuse);
        assert_eq!(r.label, "reuse");
        assert!(r.reason.starts_with("auto: --linger0"), "{}", r.reason);
        let r = auto(Pattern::Short, false, true);
        assert_eq!((r.reuse, r.label), (false, "fresh"));
        assert!(r.reason.contains("needs --linger0"), "{}", r.reason);
        let r = auto(Pattern::Short, true, false);
        assert_eq!((r.reuse, r.label), (false, "fresh"));
        assert!(r.reason.contains("--engine event"), "{}", r.reason);
        for pattern in [Pattern::Long, Pattern::Storm] {
            assert_eq!(auto(pattern, true, true), SocketReuse::default());
        }
    }

    #[test]
    fn fresh_is_always_honoured_and_reuse_refused_where_it_cannot_run() {
        let r = resolve(ShortSockets::Fresh, Pattern::Short, true, true, false).unwrap();
        assert_eq!((r.reuse, r.label), (false, "fresh"));
        assert_eq!(r.reason, "--short-sockets fresh");
        for open_loop in [false, true] {
            let r = resolve(ShortSockets::Reuse, Pattern::Short, true, true, open_loop).unwrap();
            assert_eq!((r.reuse, r.label), (true, "reuse"));
        }
        for (pattern, linger0, event_engine, says) in [
            (Pattern::Short, false, true, "needs --linger0"),
            (Pattern::Short, true, false, "--engine event"),
            (Pattern::Long, true, true, "--mode short"),
        ] {
            let e =
                resolve(ShortSockets::Reuse, pattern, linger0, event_engine, false).unwrap_err();
            assert!(
                e.starts_with("--short-sockets reuse") && e.contains(says),
                "{e}"
            );
        }
    }
}
