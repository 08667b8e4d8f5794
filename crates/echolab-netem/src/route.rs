//! IPv4 routes over rtnetlink (rtnetlink(7)), encoded the way iproute2's `ip route replace`
//! encodes them, for the wire (a default route into its TUN in a private table) and for
//! `echolab-netem route` (`DST via GW` in the main table of a client or server host, run by
//! the launcher's short-lived route helper).

use std::net::Ipv4Addr;

use echolab_core::cmd::Ipv4Net;

use crate::nl::{Message, Socket, NLM_F_ACK, NLM_F_CREATE, NLM_F_REPLACE, NLM_F_REQUEST};

/// RTM_NEWROUTE (linux/rtnetlink.h).
pub(crate) const RTM_NEWROUTE: u16 = 24;
const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const RTA_TABLE: u16 = 15;
/// The main routing table (`ip route` without `table`).
pub(crate) const RT_TABLE_MAIN: u32 = 254;
const RTPROT_STATIC: u8 = 4;
const RT_SCOPE_UNIVERSE: u8 = 0;
const RT_SCOPE_LINK: u8 = 253;
const RTN_UNICAST: u8 = 1;

/// One unicast IPv4 route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Route {
    /// Destination prefix (address, length); `None` is the default route.
    pub(crate) dst: Option<(Ipv4Addr, u8)>,
    /// Next hop; `None` for a route straight out of `oif` (scope link).
    pub(crate) gateway: Option<Ipv4Addr>,
    /// Outgoing interface index, when given.
    pub(crate) oif: Option<u32>,
    /// Routing table number.
    pub(crate) table: u32,
}

/// The RTM_NEWROUTE request for `ip route replace ROUTE` (create or replace, with an ACK).
///
/// As iproute2 does, a table below 256 goes in the rtmsg header and a larger one in an
/// RTA_TABLE attribute; the scope is universe with a gateway and link without.
pub(crate) fn replace_message(route: &Route, seq: u32) -> Message {
    let (table_byte, table_attr) = match u8::try_from(route.table) {
        Ok(t) => (t, None),
        Err(_) => (0, Some(route.table)),
    };
    let scope = if route.gateway.is_some() {
        RT_SCOPE_UNIVERSE
    } else {
        RT_SCOPE_LINK
    };
    // rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags (u32).
    let rtmsg = [
        libc::AF_INET as u8,
        route.dst.map_or(0, |(_, len)| len),
        0,
        0,
        table_byte,
        RTPROT_STATIC,
        scope,
        RTN_UNICAST,
        0,
        0,
        0,
        0,
    ];
    let mut msg = Message::new(
        RTM_NEWROUTE,
        NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE,
        seq,
        &rtmsg,
    );
    if let Some(t) = table_attr {
        msg.attr_u32(RTA_TABLE, t);
    }
    if let Some((addr, _)) = route.dst {
        msg.attr(RTA_DST, &addr.octets());
    }
    if let Some(gw) = route.gateway {
        msg.attr(RTA_GATEWAY, &gw.octets());
    }
    if let Some(oif) = route.oif {
        msg.attr_u32(RTA_OIF, oif);
    }
    msg
}

/// `ip route replace DST via VIA` in the main table.
pub(crate) fn via_in_main_table(dst: Ipv4Net, via: Ipv4Addr) -> Route {
    Route {
        dst: Some((dst.addr, dst.len)),
        gateway: Some(via),
        oif: None,
        table: RT_TABLE_MAIN,
    }
}

/// Installs [`via_in_main_table`] in this network namespace (`echolab-netem route`).
///
/// # Errors
/// The netlink socket cannot be opened, or the kernel refused the route (the message names
/// it: no NET_ADMIN, a gateway not on any attached network).
pub fn replace_in_main_table(dst: Ipv4Net, via: Ipv4Addr) -> Result<(), String> {
    let mut sock = Socket::open().map_err(|e| format!("netlink socket: {e}"))?;
    let seq = sock.next_seq();
    sock.request(
        &replace_message(&via_in_main_table(dst, via), seq),
        &format!("route {dst} via {via}"),
    )
    .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gateway_route_in_the_main_table_has_no_table_attribute() {
        let r = Route {
            dst: Some((Ipv4Addr::new(172, 20, 0, 0), 16)),
            gateway: Some(Ipv4Addr::new(172, 21, 0, 2)),
            oif: None,
            table: RT_TABLE_MAIN,
        };
        let b = replace_message(&r, 7).bytes().to_vec();
        // nlmsghdr (16) + rtmsg (12) + RTA_DST (4 + 4) + RTA_GATEWAY (4 + 4).
        assert_eq!(b.len(), 16 + 12 + 8 + 8);
        assert_eq!(u16::from_ne_bytes([b[4], b[5]]), RTM_NEWROUTE);
        assert_eq!(
            (b[16 + 1], b[16 + 4], b[16 + 6]),
            (16, 254, RT_SCOPE_UNIVERSE),
            "dst_len, table, scope"
        );
        assert_eq!(&b[28..36], &[8, 0, 1, 0, 172, 20, 0, 0]);
        assert_eq!(&b[36..44], &[8, 0, 5, 0, 172, 21, 0, 2]);
    }

    #[test]
    fn the_route_helper_message_carries_destination_and_gateway() {
        let dst = "172.20.0.0/16".parse().unwrap();
        let m = replace_message(&via_in_main_table(dst, Ipv4Addr::new(172, 21, 0, 2)), 7);
        let b = m.bytes();
        // nlmsghdr (16) + rtmsg (12) + RTA_DST (4 + 4) + RTA_GATEWAY (4 + 4).
        assert_eq!(b.len(), 16 + 12 + 8 + 8);
        assert_eq!(u16::from_ne_bytes([b[4], b[5]]), RTM_NEWROUTE);
        assert_eq!(b[16 + 1], 16, "dst_len");
        assert_eq!(&b[28..36], &[8, 0, 1, 0, 172, 20, 0, 0]);
        assert_eq!(&b[36..44], &[8, 0, 5, 0, 172, 21, 0, 2]);
    }

    #[test]
    fn a_large_table_goes_in_an_attribute_and_a_device_route_has_link_scope() {
        let r = Route {
            dst: None,
            gateway: None,
            oif: Some(9),
            table: 2701,
        };
        let b = replace_message(&r, 1).bytes().to_vec();
        assert_eq!((b[16 + 1], b[16 + 4], b[16 + 6]), (0, 0, RT_SCOPE_LINK));
        assert_eq!(
            &b[28..36],
            &[8, 0, 15, 0, 0x8d, 0x0a, 0, 0],
            "RTA_TABLE 2701"
        );
        assert_eq!(&b[36..44], &[8, 0, 4, 0, 9, 0, 0, 0], "RTA_OIF 9");
    }
}
