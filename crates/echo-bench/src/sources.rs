//! The client's source addresses (`--source-addrs`): which local addresses its connections
//! are made from.
//!
//! Why it matters. A connection is identified by its 4-tuple, so from one source address to
//! one server `ip:port` there are at most as many connections as ephemeral ports
//! (`net.ipv4.ip_local_port_range`, 28,232 by default), and a client that closes first keeps
//! each port in TIME_WAIT for 60 s (tcp(7)). With short connections those ports fill within
//! seconds; from then on connect(2) searches the range for a port whose TIME_WAIT it may
//! reuse (`net.ipv4.tcp_tw_reuse`, on for loopback by default, and only for a TIME_WAIT older
//! than one second: `tcp_twsk_unique()` in net/ipv4/tcp_ipv4.c). The search runs inside
//! connect(2), on the client's CPU: measured on loopback at 100 short connections, about
//! 57 µs per connect(2), which capped a 2-core machine at 14k requests/s where the same run
//! with `--linger0` (no TIME_WAIT) did 40k.
//!
//! Spreading the connections over N source addresses gives each address its own port space
//! and its own search, so the client keeps the seed's semantics (it closes first and keeps
//! TIME_WAIT) without paying for the search. The server sees N peer addresses instead of one;
//! the report records which were used.

use std::net::{IpAddr, Ipv4Addr};

use echolab_core::cmd::SourceChoice;
use socket2::SockAddr;

use crate::pattern::Pattern;

/// Source addresses `auto` uses on an IPv4 loopback target: 127.0.0.1 up to 127.0.0.16. The
/// whole of 127.0.0.0/8 is local on Linux, so these need no set-up.
pub(crate) const LOOPBACK_SOURCES: u8 = 16;

/// Above this share (in percent) of the ephemeral port range
/// (`net.ipv4.ip_local_port_range`), `auto` spreads even long connections: one address could
/// not hold them all, and the few ports left would be searched for by every connect(2).
pub(crate) const ONE_ADDRESS_PERCENT: u64 = 80;

/// The kernel's default `ip_local_port_range`, 32768–60999 (ip-sysctl.rst).
const DEFAULT_EPHEMERAL_PORTS: u64 = 60999 - 32768 + 1;

/// Ports in this namespace's ephemeral range, from `/proc/sys/net/ipv4/ip_local_port_range`
/// (the kernel's default when it cannot be read).
pub(crate) fn ephemeral_ports() -> u64 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| port_range_size(&t))
        .unwrap_or(DEFAULT_EPHEMERAL_PORTS)
}

/// Ports in an `ip_local_port_range` text (`"32768\t60999\n"`, inclusive); `None` when it is
/// not two numbers, low first.
fn port_range_size(text: &str) -> Option<u64> {
    let mut it = text.split_whitespace().map(|n| n.parse::<u64>().ok());
    let (lo, hi) = (it.next()??, it.next()??);
    (hi >= lo).then(|| hi - lo + 1)
}

/// The source addresses of a run and why they were chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sources {
    /// Addresses, connection i using `addrs[i % len]`; empty for the kernel's choice.
    pub addrs: Vec<IpAddr>,
    /// One line for the report: what was chosen and why.
    pub reason: String,
}

/// Resolves `choice` for a run of `pattern` with `conns` connections in all against
/// `target`; `linger0` when closes send RST and keep no TIME_WAIT.
///
/// # Errors
/// An explicit address of another family than the target's, or one that is not an address of
/// this host (bind(2) fails with EADDRNOTAVAIL), naming it.
pub(crate) fn resolve(
    choice: &SourceChoice,
    target: &SockAddr,
    pattern: Pattern,
    linger0: bool,
    conns: u64,
) -> Result<Sources, String> {
    let target_ip = target.as_socket().map(|s| s.ip());
    match choice {
        SourceChoice::Kernel => Ok(Sources {
            addrs: Vec::new(),
            reason: "kernel: one source address, the route's (--source-addrs kernel)".into(),
        }),
        SourceChoice::Auto => Ok(auto(target_ip, pattern, linger0, conns, ephemeral_ports())),
        SourceChoice::List(addrs) => {
            for &ip in addrs {
                if target_ip.is_some_and(|t| t.is_ipv4() != ip.is_ipv4()) {
                    return Err(format!(
                        "--source-addrs {ip} is not of the target's address family"
                    ));
                }
                check_local(ip)?;
            }
            Ok(Sources {
                addrs: addrs.clone(),
                reason: format!("--source-addrs: {} address(es)", addrs.len()),
            })
        }
    }
}

fn auto(
    target_ip: Option<IpAddr>,
    pattern: Pattern,
    linger0: bool,
    conns: u64,
    ports: u64,
) -> Sources {
    let loopback_v4 = matches!(target_ip, Some(IpAddr::V4(ip)) if ip.is_loopback());
    let too_many = conns * 100 > ports * ONE_ADDRESS_PERCENT;
    let why = if !loopback_v4 {
        Some("the target is not IPv4 loopback")
    } else if too_many {
        None
    } else if pattern == Pattern::Long {
        Some("long connections connect once")
    } else if linger0 {
        // Two more system calls per connection (setsockopt, bind) for nothing.
        Some("--linger0 keeps no TIME_WAIT")
    } else {
        None
    };
    if let Some(why) = why {
        return Sources {
            addrs: Vec::new(),
            reason: format!("auto: one source address, the kernel's ({why})"),
        };
    }
    Sources {
        addrs: (1..=LOOPBACK_SOURCES)
            .map(|n| IpAddr::V4(Ipv4Addr::new(127, 0, 0, n)))
            .collect(),
        reason: format!(
            "auto: {LOOPBACK_SOURCES} loopback source addresses 127.0.0.1-127.0.0.\
             {LOOPBACK_SOURCES}, {}",
            if too_many {
                format!("since {conns} connections need more than {ports} ephemeral ports")
            } else {
                "so that TIME_WAIT ports do not make connect(2) search".into()
            }
        ),
    }
}

/// Fails unless `ip` is an address of this host (network namespace).
fn check_local(ip: IpAddr) -> Result<(), String> {
    bind_test(ip).map_err(|e| format!("--source-addrs {ip} is not an address of this host: {e}"))
}

/// Binds a throw-away UDP socket to `ip`: succeeds exactly when `ip` is an address of this
/// host (bind(2) fails with EADDRNOTAVAIL otherwise).
pub(crate) fn bind_test(ip: IpAddr) -> std::io::Result<()> {
    let domain = if ip.is_ipv4() {
        socket2::Domain::IPV4
    } else {
        socket2::Domain::IPV6
    };
    socket2::Socket::new(domain, socket2::Type::DGRAM, None)?
        .bind(&SockAddr::from(std::net::SocketAddr::new(ip, 0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(a, b, c, d))
    }

    #[test]
    fn port_ranges_count_both_ends() {
        assert_eq!(port_range_size("32768\t60999\n"), Some(28_232));
        assert_eq!(port_range_size("1024 1024"), Some(1));
        assert_eq!(port_range_size("5 4"), None);
        assert_eq!(port_range_size("x 4"), None);
        assert_eq!(port_range_size("5"), None);
        assert_eq!(DEFAULT_EPHEMERAL_PORTS, 28_232);
    }

    fn target(ip: IpAddr) -> SockAddr {
        SockAddr::from(std::net::SocketAddr::new(ip, 9988))
    }

    #[test]
    fn auto_spreads_only_per_request_connects_to_ipv4_loopback() {
        let lo = target(v4(127, 0, 0, 1));
        let spread = resolve(&SourceChoice::Auto, &lo, Pattern::Short, false, 100).unwrap();
        assert_eq!(spread.addrs.len(), 16);
        assert_eq!(
            (spread.addrs[0], spread.addrs[15]),
            (v4(127, 0, 0, 1), v4(127, 0, 0, 16))
        );
        let storm = resolve(&SourceChoice::Auto, &lo, Pattern::Storm, false, 100).unwrap();
        assert_eq!(storm.addrs, spread.addrs);
        for (t, p, linger0) in [
            (lo.clone(), Pattern::Long, false),
            (lo.clone(), Pattern::Short, true),
            (target(v4(10, 1, 2, 3)), Pattern::Short, false),
            (target("::1".parse().unwrap()), Pattern::Short, false),
        ] {
            let s = resolve(&SourceChoice::Auto, &t, p, linger0, 100).unwrap();
            assert!(s.addrs.is_empty(), "{p:?}: {s:?}");
            assert!(s.reason.starts_with("auto: one source address"), "{s:?}");
        }
    }

    #[test]
    fn auto_spreads_long_connections_that_one_address_could_not_hold() {
        let lo = Some(v4(127, 0, 0, 1));
        let at = |conns| auto(lo, Pattern::Long, false, conns, 28_232).addrs.len();
        // 80% of 28,232 ports is 22,585.6.
        assert_eq!(at(22_585), 0);
        assert_eq!(at(22_586), 16);
        // Exactly 80% still fits.
        assert_eq!(auto(lo, Pattern::Long, false, 80, 100).addrs.len(), 0);
        assert_eq!(auto(lo, Pattern::Long, false, 81, 100).addrs.len(), 16);
        let s = auto(lo, Pattern::Long, false, 50_000, 28_232);
        assert!(
            s.reason.contains("50000 connections need more than 28232"),
            "{}",
            s.reason
        );
        assert!(
            auto(Some(v4(10, 0, 0, 1)), Pattern::Long, false, 50_000, 28_232)
                .addrs
                .is_empty()
        );
    }

    #[test]
    fn explicit_addresses_must_be_local_and_of_the_targets_family() {
        let lo = target(v4(127, 0, 0, 1));
        let ok = SourceChoice::List(vec![v4(127, 0, 0, 7)]);
        assert_eq!(
            resolve(&ok, &lo, Pattern::Short, false, 1).unwrap().addrs,
            vec![v4(127, 0, 0, 7)]
        );
        // 192.0.2.0/24 is TEST-NET-1 (RFC 5737): never an address of this host.
        let e = resolve(
            &SourceChoice::List(vec![v4(192, 0, 2, 1)]),
            &lo,
            Pattern::Short,
            false,
            1,
        )
        .unwrap_err();
        assert!(
            e.contains("192.0.2.1") && e.contains("not an address of this host"),
            "{e}"
        );
        let e = resolve(
            &SourceChoice::List(vec!["::1".parse().unwrap()]),
            &lo,
            Pattern::Short,
            false,
            1,
        )
        .unwrap_err();
        assert!(e.contains("family"), "{e}");
    }
}
