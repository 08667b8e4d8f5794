//! Two network jobs the launcher binary does inside the lab image, for the link topology:
//!
//! - `echolab-up __route add CIDR GW`: `ip route replace CIDR via GW` over rtnetlink
//!   (rtnetlink(7)), run by a short-lived helper container that joins a client or server
//!   host's network namespace with NET_ADMIN, so those hosts never hold NET_ADMIN themselves.
//! - `echolab-up __ifname IP`: prints the name of the interface that has address IP
//!   (getifaddrs(3)), so the link host's devices are found by address, not by attach order.

use std::net::Ipv4Addr;

use echolab_netem::nl::{Message, Socket};
use echolab_netem::route::{replace_message, Route, RT_TABLE_MAIN};

/// An IPv4 prefix `a.b.c.d/len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix {
    /// Network address.
    pub addr: Ipv4Addr,
    /// Prefix length, 0..=32.
    pub len: u8,
}

/// Parses `10.1.2.0/24`.
///
/// # Errors
/// Not an IPv4 prefix.
pub fn parse_prefix(s: &str) -> Result<Prefix, String> {
    let (a, l) = s
        .split_once('/')
        .ok_or_else(|| format!("{s:?} is not an IPv4 prefix like 10.0.0.0/24"))?;
    let addr = a
        .parse()
        .map_err(|_| format!("{a:?} is not an IPv4 address"))?;
    let len: u8 = l
        .parse()
        .ok()
        .filter(|n| *n <= 32)
        .ok_or_else(|| format!("{l:?} is not a prefix length 0..32"))?;
    Ok(Prefix { addr, len })
}

/// The RTM_NEWROUTE message for `ip route replace DST via GW` in the main table.
pub fn route_message(seq: u32, dst: Prefix, gw: Ipv4Addr) -> Message {
    let route = Route {
        dst: Some((dst.addr, dst.len)),
        gateway: Some(gw),
        oif: None,
        table: RT_TABLE_MAIN,
    };
    replace_message(&route, seq)
}

/// `__route add CIDR GW`; returns the exit code.
pub fn route_main(args: &[String]) -> i32 {
    let [verb, dst, gw] = args else {
        eprintln!("usage: echolab-up __route add CIDR GATEWAY");
        return 2;
    };
    let parsed = (verb == "add")
        .then_some(())
        .ok_or_else(|| format!("unknown verb {verb:?}"))
        .and_then(|_| {
            let dst = parse_prefix(dst)?;
            let gw: Ipv4Addr = gw
                .parse()
                .map_err(|_| format!("{gw:?} is not an IPv4 address"))?;
            Ok((dst, gw))
        });
    let (dst, gw) = match parsed {
        Ok(x) => x,
        Err(e) => {
            eprintln!("echolab-up __route: {e}");
            return 2;
        }
    };
    let result = Socket::open()
        .map_err(|e| e.to_string())
        .and_then(|mut sock| {
            let seq = sock.next_seq();
            sock.request(
                &route_message(seq, dst, gw),
                &format!("route {}/{} via {gw}", dst.addr, dst.len),
            )
            .map_err(|e| e.to_string())
        });
    match result {
        Ok(()) => {
            eprintln!("echolab-up __route: {}/{} via {gw}", dst.addr, dst.len);
            0
        }
        Err(e) => {
            eprintln!("echolab-up __route: {e}");
            1
        }
    }
}

/// `__ifname IP`; prints the interface holding IP and returns the exit code.
pub fn ifname_main(args: &[String]) -> i32 {
    let Some(ip) = args.first().and_then(|a| a.parse::<Ipv4Addr>().ok()) else {
        eprintln!("usage: echolab-up __ifname IPV4");
        return 2;
    };
    match echolab_netem::netdev::device_with_address(ip) {
        Ok(dev) => {
            println!("{dev}");
            0
        }
        Err(e) => {
            eprintln!("echolab-up __ifname: {e}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_parse_and_bad_ones_are_named() {
        assert_eq!(
            parse_prefix("10.1.2.0/24").unwrap(),
            Prefix {
                addr: Ipv4Addr::new(10, 1, 2, 0),
                len: 24
            }
        );
        assert!(parse_prefix("10.1.2.0").unwrap_err().contains("10.1.2.0"));
        assert!(parse_prefix("10.1.2.0/33").unwrap_err().contains("33"));
    }

    #[test]
    fn the_route_message_carries_destination_and_gateway() {
        let m = route_message(
            7,
            parse_prefix("172.20.0.0/16").unwrap(),
            Ipv4Addr::new(172, 21, 0, 2),
        );
        let b = m.bytes();
        // nlmsghdr (16) + rtmsg (12) + RTA_DST (4 + 4) + RTA_GATEWAY (4 + 4).
        assert_eq!(b.len(), 16 + 12 + 8 + 8);
        assert_eq!(
            u16::from_ne_bytes([b[4], b[5]]),
            echolab_netem::route::RTM_NEWROUTE
        );
        assert_eq!(b[16 + 1], 16, "dst_len");
        assert_eq!(&b[28..36], &[8, 0, 1, 0, 172, 20, 0, 0]);
        assert_eq!(&b[36..44], &[8, 0, 5, 0, 172, 21, 0, 2]);
    }
}
