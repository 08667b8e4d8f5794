//! Listening sockets, made before any model starts so that "port in use" is a startup error.
//!
//! TCP_NODELAY (`--nodelay`, on by default) is set here, on the listening sockets: Linux copies
//! a listener's socket options into each connection it accepts (tcp(7) is silent on it; the
//! test below checks it), so every model's connections get it without one more system call per
//! connection, which would show in the per-request system-call counts.
//!
//! A port is one server's: [`foreign_listener`] finds a listening socket of another process on
//! the address, which `main` refuses before and again after making its own listeners. The bind
//! alone does not: SO_REUSEPORT lets a second `reuseport` server (same user) join the first
//! one's port, and the kernel then splits the connections between two servers that each count
//! only their own system calls.
//!
//! The check reads the kernel's socket tables (/proc/net/tcp and tcp6, proc(5)) rather than
//! probe-binding a socket without SO_REUSEPORT: a probe closed before our own sockets exist
//! leaves a window in which a second server can start, and a probe held while they are made
//! still lets two servers that probe at the same moment both pass. Reading the tables after
//! our listeners listen has no such window (two servers started together each see the other
//! and both refuse), sees every listener whatever its options, and tells ours from another
//! process's by socket inode.

use std::collections::HashSet;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener};
use std::os::fd::AsRawFd as _;

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

/// The kernel's socket tables of this network namespace (proc(5)); tcp6 is absent where IPv6
/// is disabled.
const TABLES: [&str; 2] = ["/proc/net/tcp", "/proc/net/tcp6"];

/// `st` of a listening socket in the tables (TCP_LISTEN, include/net/tcp_states.h).
const LISTEN: &str = "0A";

/// The address of a listening socket of another process that takes connections meant for
/// `addr` (same port; the same IP, or a wildcard on either side), if any. `ours` are this
/// server's own listeners, told apart by inode. Port 0 has no such socket.
///
/// A table that cannot be read is skipped; when neither can be read (no /proc) there is
/// nothing to check against and the answer is `None`.
pub(crate) fn foreign_listener(
    addr: SocketAddr,
    ours: &[TcpListener],
) -> io::Result<Option<SocketAddr>> {
    if addr.port() == 0 {
        return Ok(None);
    }
    let own = ours
        .iter()
        .map(socket_inode)
        .collect::<io::Result<HashSet<u64>>>()?;
    for table in TABLES {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        if let Some(found) = listener_in_table(&text, addr, &own) {
            return Ok(Some(found));
        }
    }
    Ok(None)
}

/// The inode of a socket, as the tables' `inode` column gives it (fstat(2)'s st_ino).
fn socket_inode(l: &TcpListener) -> io::Result<u64> {
    // SAFETY: an all-zero stat is a valid value for fstat(2) to overwrite.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat(2) on a descriptor the listener owns, writing only `st`.
    if unsafe { libc::fstat(l.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.st_ino)
}

/// [`foreign_listener`] over one table's text.
fn listener_in_table(text: &str, addr: SocketAddr, own: &HashSet<u64>) -> Option<SocketAddr> {
    text.lines().skip(1).find_map(|line| {
        // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 10 || f[3] != LISTEN {
            return None;
        }
        let local = parse_table_addr(f[1])?;
        let inode: u64 = f[9].parse().ok()?;
        (local.port() == addr.port() && overlaps(local.ip(), addr.ip()) && !own.contains(&inode))
            .then_some(local)
    })
}

/// `ADDR:PORT` as the tables print it: the address's 32-bit words each in hexadecimal as the
/// host stores them (so byte-swapped on little-endian), the port in hexadecimal.
fn parse_table_addr(field: &str) -> Option<SocketAddr> {
    let (ip, port) = field.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| {
        u32::from_str_radix(ip.get(i * 8..i * 8 + 8)?, 16)
            .ok()
            .map(u32::to_ne_bytes)
    };
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
        32 => {
            let mut b = [0u8; 16];
            for i in 0..4 {
                b[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            IpAddr::V6(Ipv6Addr::from(b))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// Whether a listener on `a` takes connections for `b` or the other way round: equal (an
/// IPv4-mapped IPv6 address equals its IPv4 one), or either a wildcard of any family (a
/// dual-stack `::` listener takes IPv4 connections too; an IPv6-only one is counted as well,
/// which errs on the side of refusing).
fn overlaps(a: IpAddr, b: IpAddr) -> bool {
    a.is_unspecified() || b.is_unspecified() || a.to_canonical() == b.to_canonical()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpStream;

    #[test]
    fn table_lines_are_read_as_the_kernel_prints_them() {
        // Two lines of a real /proc/net/tcp (little-endian) and one of tcp6.
        let v4 = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
             0: 0100007F:2704 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0 100 0 0 10 0\n\
             1: 0100007F:2704 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 4343 1 0 20 4 30 10 -1\n";
        let at = |s: &str| s.parse::<SocketAddr>().unwrap();
        let none = HashSet::new();
        // Only the LISTEN line counts (the established one shares the port, 9988).
        assert_eq!(
            listener_in_table(v4, at("127.0.0.1:9988"), &none),
            Some(at("127.0.0.1:9988"))
        );
        assert_eq!(
            listener_in_table(v4, at("0.0.0.0:9988"), &none),
            Some(at("127.0.0.1:9988"))
        );
        assert_eq!(listener_in_table(v4, at("127.0.0.2:9988"), &none), None);
        assert_eq!(listener_in_table(v4, at("127.0.0.1:9989"), &none), None);
        // Our own socket is not another process's.
        assert_eq!(
            listener_in_table(v4, at("127.0.0.1:9988"), &HashSet::from([4242])),
            None
        );
        let v6 = "header\n\
             0: 00000000000000000000000000000000:2704 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 77 1 0 100 0 0 10 0\n";
        assert_eq!(
            listener_in_table(v6, at("127.0.0.1:9988"), &none),
            Some(at("[::]:9988"))
        );
        if cfg!(target_endian = "little") {
            assert_eq!(
                parse_table_addr("00000000000000000000000001000000:0016"),
                Some(at("[::1]:22"))
            );
        }
    }

    #[test]
    fn a_live_listener_is_found_unless_it_is_ours() {
        let l = listeners(([127, 0, 0, 1], 0).into(), 8, 1, false, true).unwrap();
        let addr = l[0].local_addr().unwrap();
        assert_eq!(foreign_listener(addr, &[]).unwrap(), Some(addr));
        assert_eq!(foreign_listener(addr, &l).unwrap(), None);
    }

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
