//! Listening sockets, made before any model starts so that "port in use" is a startup error.
//!
//! TCP_NODELAY (`--nodelay`, on by default) is set here, on the listening sockets: Linux copies
//! a listener's socket options into each connection it accepts (tcp(7) is silent on it; the
//! test below checks it), so every model's connections get it without one more system call per
//! connection, which would show in the per-request system-call counts.

use std::io;
use std::net::{SocketAddr, TcpListener};

use socket2::{Domain, Protocol, Socket, Type};

/// Creates `count` listening sockets on `addr`. With `reuseport` each gets SO_REUSEPORT so the
/// kernel spreads incoming connections across them (socket(7)); otherwise `count` must be 1.
/// When `addr`'s port is 0, the first socket picks the port and the others bind to it.
///
/// With `nodelay` each also gets TCP_NODELAY, which the connections it accepts inherit.
///
/// Sockets are left blocking; models switch them to non-blocking as they need.
///
/// # Errors
/// socket/bind/listen failures, e.g. EADDRINUSE when another socket holds the port.
pub(crate) fn listeners(
    addr: SocketAddr,
    backlog: i32,
    count: usize,
    reuseport: bool,
    nodelay: bool,
) -> io::Result<Vec<TcpListener>> {
    let mut out = Vec::with_capacity(count);
    let mut addr = addr;
    for _ in 0..count.max(1) {
        let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        // SO_REUSEADDR lets a restarted server bind while old connections sit in TIME_WAIT.
        s.set_reuse_address(true)?;
        if reuseport {
            s.set_reuse_port(true)?;
        }
        s.set_tcp_nodelay(nodelay)?;
        s.bind(&addr.into())?;
        s.listen(backlog)?;
        let l: TcpListener = s.into();
        addr = l.local_addr()?;
        out.push(l);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpStream;

    /// What the models rely on: an accepted connection has the listener's TCP_NODELAY, and
    /// only that (the connecting side's setting does not leak into it).
    #[test]
    fn accepted_connections_inherit_the_listeners_nodelay() {
        for nodelay in [true, false] {
            let l = listeners(([127, 0, 0, 1], 0).into(), 8, 1, false, nodelay).unwrap();
            let client = TcpStream::connect(l[0].local_addr().unwrap()).unwrap();
            client.set_nodelay(!nodelay).unwrap();
            let (accepted, _) = l[0].accept().unwrap();
            assert_eq!(accepted.nodelay().unwrap(), nodelay);
        }
    }
}
