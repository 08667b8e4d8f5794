//! Listening sockets, made before any model starts so that "port in use" is a startup error.

use std::io;
use std::net::{SocketAddr, TcpListener};

use socket2::{Domain, Protocol, Socket, Type};

/// Creates `count` listening sockets on `addr`. With `reuseport` each gets SO_REUSEPORT so the
/// kernel spreads incoming connections across them (socket(7)); otherwise `count` must be 1.
/// When `addr`'s port is 0, the first socket picks the port and the others bind to it.
///
/// Sockets are left blocking; models switch them to non-blocking as they need.
///
/// # Errors
/// socket/bind/listen failures, e.g. EADDRINUSE when another socket holds the port.
pub fn listeners(
    addr: SocketAddr,
    backlog: i32,
    count: usize,
    reuseport: bool,
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
        s.bind(&addr.into())?;
        s.listen(backlog)?;
        let l: TcpListener = s.into();
        addr = l.local_addr()?;
        out.push(l);
    }
    Ok(out)
}
