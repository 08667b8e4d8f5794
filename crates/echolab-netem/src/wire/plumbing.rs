//! The wire's place in the link host's routing: two TUN devices (one per direction), a default
//! route into each from its own table, and policy rules that send what arrives on each side
//! into its TUN. Packets the wire writes back enter the kernel on the TUN and are forwarded by
//! the main table. All through rtnetlink and `/dev/net/tun`, so only NET_ADMIN is needed.
//!
//! ```text
//! client --> [client-side] --rule iif client-side: table UP--> elab-up --wire--> elab-up --main--> [server-side] --> server
//! server --> [server-side] --rule iif server-side: table DOWN-> elab-dn --wire--> elab-dn --main--> [client-side] --> client
//! ```
//! IPv4 only: IPv6 packets are forwarded unimpaired. The launcher's networks are IPv4, and a lab
//! file whose server is reached over IPv6 is refused on a link profile (`Lab::for_run`).

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::nl::{
    self, Message, NlError, Socket, NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REQUEST,
};

const RTM_NEWLINK: u16 = 16;
const RTM_NEWRULE: u16 = 32;
const RTM_DELRULE: u16 = 33;
const IFLA_TXQLEN: u16 = 13;
const FRA_DST: u16 = 1;
const FRA_IIFNAME: u16 = 3;
const FRA_PRIORITY: u16 = 6;
const FRA_TABLE: u16 = 15;
/// linux/fib_rules.h; a rule on it makes the kernel dissect each packet's protocol (4.17+).
const FRA_IP_PROTO: u16 = 22;
const FR_ACT_TO_TBL: u8 = 1;
/// `TUNSETIFF` = `_IOW('T', 202, int)` (linux/if_tun.h).
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TUN: libc::c_short = 0x0001;
const IFF_NO_PI: libc::c_short = 0x1000;

/// Opens a TUN device named `name` (layer 3, no packet-info header), non-blocking.
///
/// # Errors
/// `/dev/net/tun` missing or not permitted (needs NET_ADMIN), or the name is invalid.
pub(crate) fn open_tun(name: &str) -> io::Result<OwnedFd> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("TUN name {name:?} must have 1 to 15 bytes"),
        ));
    }
    // SAFETY: open(2) of a constant NUL-terminated path; the result is checked.
    let raw = unsafe {
        libc::open(
            c"/dev/net/tun".as_ptr(),
            libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    };
    if raw < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("cannot open /dev/net/tun (the link host needs it and NET_ADMIN): {e}"),
        ));
    }
    // SAFETY: `raw` is a fresh descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: ifreq is plain old data; zero is a valid value for every field.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in ifr.ifr_name.iter_mut().zip(name.bytes()) {
        *dst = src as libc::c_char;
    }
    ifr.ifr_ifru.ifru_flags = IFF_TUN | IFF_NO_PI;
    // SAFETY: TUNSETIFF reads and writes a `struct ifreq`, which `ifr` is, for the call's duration.
    if unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETIFF, &mut ifr as *mut libc::ifreq) } < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("cannot create TUN device {name:?}: {e}"),
        ));
    }
    Ok(fd)
}

fn ifinfomsg_up(ifindex: u32) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[4..8].copy_from_slice(&(ifindex as i32).to_ne_bytes());
    b[8..12].copy_from_slice(&(libc::IFF_UP as u32).to_ne_bytes()); // ifi_flags
    b[12..16].copy_from_slice(&(libc::IFF_UP as u32).to_ne_bytes()); // ifi_change
    b
}

/// `ip link set dev IF up txqueuelen N`. The TUN's transmit queue is where the kernel holds
/// packets until the wire reads them; it is set to at least the wire's own limit so that drops
/// happen, and are counted, in the wire rather than silently in the kernel.
pub(crate) fn link_up(
    sock: &mut Socket,
    ifindex: u32,
    name: &str,
    txqueuelen: u32,
) -> Result<(), NlError> {
    let seq = sock.next_seq();
    let mut msg = Message::new(
        RTM_NEWLINK,
        NLM_F_REQUEST | NLM_F_ACK,
        seq,
        &ifinfomsg_up(ifindex),
    );
    msg.attr_u32(IFLA_TXQLEN, txqueuelen);
    sock.request(&msg, &format!("set {name} up"))
}

/// `ip route replace default dev IF table T`.
pub(crate) fn default_route_via(
    sock: &mut Socket,
    ifindex: u32,
    table: u32,
    name: &str,
) -> Result<(), NlError> {
    let seq = sock.next_seq();
    let route = crate::route::Route {
        dst: None,
        gateway: None,
        oif: Some(ifindex),
        table,
    };
    sock.request(
        &crate::route::replace_message(&route, seq),
        &format!("add default route via {name} in table {table}"),
    )
}

/// A policy rule `ip rule add [iif IIF] [to DST/32] lookup TABLE priority PRIO`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rule {
    /// Incoming interface name; empty for a rule that matches every interface.
    pub iif: String,
    /// Only packets to this host address, when set (the self-probe's rule).
    pub dst: Option<Ipv4Addr>,
    /// Only packets of this IP protocol (`ipproto`), when set: a masquerading wire's rules
    /// match TCP and UDP, so that ARP, whose route check has no protocol, still finds the
    /// host's own addresses in the `local` table behind them.
    pub ip_proto: Option<u8>,
    /// Routing table.
    pub table: u32,
    /// Rule priority (lower is earlier; the main table's rule is 32766).
    pub priority: u32,
}

fn rule_message(rule: &Rule, msg_type: u16, flags: u16, seq: u32) -> Message {
    // fib_rule_hdr: family, dst_len, src_len, tos, table, res1, res2, action, flags.
    let dst_len = if rule.dst.is_some() { 32 } else { 0 };
    let hdr = [
        libc::AF_INET as u8,
        dst_len,
        0,
        0,
        0,
        0,
        0,
        FR_ACT_TO_TBL,
        0,
        0,
        0,
        0,
    ];
    let mut msg = Message::new(msg_type, flags, seq, &hdr);
    if let Some(dst) = rule.dst {
        msg.attr(FRA_DST, &dst.octets());
    }
    if !rule.iif.is_empty() {
        msg.attr_str(FRA_IIFNAME, &rule.iif);
    }
    if let Some(proto) = rule.ip_proto {
        msg.attr(FRA_IP_PROTO, &[proto]);
    }
    msg.attr_u32(FRA_PRIORITY, rule.priority)
        .attr_u32(FRA_TABLE, rule.table);
    msg
}

/// The kernel's `local` routing table (`RT_TABLE_LOCAL`, linux/rtnetlink.h), which its rule of
/// priority 0 looks up first: a packet to one of the host's own addresses is delivered there.
pub(crate) const TABLE_LOCAL: u32 = 255;

/// The `local` table's rule at `priority` (0 is the kernel's own).
pub(crate) fn local_rule(priority: u32) -> Rule {
    Rule {
        iif: String::new(),
        dst: None,
        ip_proto: None,
        table: TABLE_LOCAL,
        priority,
    }
}

/// Adds `rule`; an identical existing rule counts as success, so setup can be repeated.
pub(crate) fn add_rule(sock: &mut Socket, rule: &Rule) -> Result<(), NlError> {
    let seq = sock.next_seq();
    let msg = rule_message(
        rule,
        RTM_NEWRULE,
        NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
        seq,
    );
    match sock.request(
        &msg,
        &format!("add rule iif {} lookup {}", rule.iif, rule.table),
    ) {
        Err(e) if e.errno == libc::EEXIST => Ok(()),
        r => r,
    }
}

/// Deletes `rule`; a missing rule counts as success.
pub(crate) fn delete_rule(sock: &mut Socket, rule: &Rule) -> Result<(), NlError> {
    let seq = sock.next_seq();
    let msg = rule_message(rule, RTM_DELRULE, NLM_F_REQUEST | NLM_F_ACK, seq);
    match sock.request(
        &msg,
        &format!("delete rule iif {} lookup {}", rule.iif, rule.table),
    ) {
        Err(e) if e.errno == libc::ENOENT => Ok(()),
        r => r,
    }
}

/// Makes sure `/proc/sys/<path>` reads `want`, writing it when it does not. `name` is the
/// sysctl's dotted name for the message.
///
/// # Errors
/// The value differs and cannot be written (inside containers `/proc/sys` is read-only): the
/// message names the sysctl and says to set it when the host is created.
pub(crate) fn ensure_sysctl(name: &str, want: &str, acceptable: &[&str]) -> Result<(), String> {
    let path = format!("/proc/sys/{}", name.replace('.', "/"));
    let now = std::fs::read_to_string(&path)
        .map_err(|e| format!("sysctl {name}: cannot read {path}: {e}"))?;
    let now = now.trim();
    if now == want || acceptable.contains(&now) {
        return Ok(());
    }
    std::fs::write(&path, want).map_err(|e| {
        format!(
            "sysctl {name} is {now} and the wire needs {want}, but it cannot be set here ({e}); \
             set it when the link host is created, e.g. `docker run --sysctl {name}={want}`"
        )
    })
}

/// The sysctls the wire needs: forwarding on, and reverse-path filtering not strict on the
/// TUN devices (packets come back on a TUN with sources that route via the veth; loose
/// mode 2 is fine). The effective rp_filter of a device is the larger of `all` and the device's
/// own value (ip-sysctl.rst), which a new TUN inherits from `default`.
///
/// # Errors
/// The first sysctl that is wrong and cannot be set, named.
pub(crate) fn ensure_forwarding_sysctls(tuns: &[&str]) -> Result<(), String> {
    ensure_sysctl("net.ipv4.ip_forward", "1", &[])?;
    ensure_sysctl("net.ipv4.conf.all.rp_filter", "0", &["2"])?;
    for tun in tuns {
        ensure_sysctl(&format!("net.ipv4.conf.{tun}.rp_filter"), "0", &["2"]).map_err(|e| {
            format!("{e} (a new device inherits net.ipv4.conf.default.rp_filter: set that to 0 at creation)")
        })?;
    }
    Ok(())
}

/// Packets the kernel dropped when transmitting into device `name` (the `tx drop` column of
/// /proc/self/net/dev, the namespace's own; for a TUN: its queue was full because its reader
/// fell behind). `None` when the device or the counter cannot be read.
pub(crate) fn tx_dropped(name: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/net/dev").ok()?;
    tx_dropped_in(&text, name)
}

/// [`tx_dropped`] from the text of /proc/net/dev: after `name:`, 8 receive columns, then
/// transmit bytes, packets, errs, drop.
fn tx_dropped_in(proc_net_dev: &str, name: &str) -> Option<u64> {
    let line = proc_net_dev
        .lines()
        .find_map(|l| l.trim_start().strip_prefix(name)?.strip_prefix(':'))?;
    line.split_whitespace().nth(11)?.parse().ok()
}

/// Index of a device, with the error naming it.
pub(crate) fn index_of(name: &str) -> io::Result<u32> {
    nl::ifindex(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tx_drops_are_the_twelfth_column_of_the_named_device_only() {
        // Layout of /proc/net/dev (proc(5)); values chosen so that every column differs.
        let text = "Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16
elab-up: 101 102 103 104 105 106 107 108 109 110 111 112 113 114 115 116
elab-up2: 1 1 1 1 1 1 1 1 1 1 1 999 1 1 1 1
";
        assert_eq!(tx_dropped_in(text, "elab-up"), Some(112));
        assert_eq!(tx_dropped_in(text, "lo"), Some(12));
        assert_eq!(tx_dropped_in(text, "elab-up2"), Some(999));
        assert_eq!(tx_dropped_in(text, "eth9"), None);
    }

    #[test]
    fn rule_message_carries_iif_priority_and_table() {
        let rule = Rule {
            iif: "eth1".into(),
            dst: None,
            ip_proto: None,
            table: 2701,
            priority: 100,
        };
        let m = rule_message(&rule, RTM_NEWRULE, NLM_F_REQUEST, 9);
        let body = &m.bytes()[16 + 12..];
        let got: Vec<(u16, Vec<u8>)> = nl::attrs(body).map(|(k, v)| (k, v.to_vec())).collect();
        assert_eq!(got[0], (FRA_IIFNAME, b"eth1\0".to_vec()));
        assert_eq!(got[1], (FRA_PRIORITY, 100u32.to_ne_bytes().to_vec()));
        assert_eq!(got[2], (FRA_TABLE, 2701u32.to_ne_bytes().to_vec()));
        assert_eq!(m.bytes()[16 + 7], FR_ACT_TO_TBL);
        assert_eq!(m.bytes()[16 + 1], 0, "no destination, dst_len 0");
    }

    #[test]
    fn rule_with_destination_matches_that_host_only() {
        let rule = Rule {
            iif: "elab-up".into(),
            dst: Some(Ipv4Addr::new(192, 0, 2, 1)),
            ip_proto: None,
            table: 2701,
            priority: 90,
        };
        let m = rule_message(&rule, RTM_NEWRULE, NLM_F_REQUEST, 9);
        assert_eq!(m.bytes()[16 + 1], 32, "dst_len /32");
        let body = &m.bytes()[16 + 12..];
        let got: Vec<(u16, Vec<u8>)> = nl::attrs(body).map(|(k, v)| (k, v.to_vec())).collect();
        assert_eq!(got[0], (FRA_DST, vec![192, 0, 2, 1]));
        assert_eq!(got[1], (FRA_IIFNAME, b"elab-up\0".to_vec()));
    }

    #[test]
    fn a_protocol_rule_carries_one_byte_and_the_local_rule_no_interface() {
        // `ip rule add iif eth1 ipproto tcp lookup 2702 pref 101` as iproute2 encodes it:
        // FRA_IP_PROTO (22) with the one byte 6.
        let rule = Rule {
            iif: "eth1".into(),
            dst: None,
            ip_proto: Some(6),
            table: 2702,
            priority: 101,
        };
        let m = rule_message(&rule, RTM_NEWRULE, NLM_F_REQUEST, 9);
        let got: Vec<(u16, Vec<u8>)> = nl::attrs(&m.bytes()[16 + 12..])
            .map(|(k, v)| (k, v.to_vec()))
            .collect();
        assert!(got.contains(&(22, vec![6])), "{got:?}");
        let m = rule_message(&local_rule(200), RTM_NEWRULE, NLM_F_REQUEST, 9);
        let got: Vec<(u16, Vec<u8>)> = nl::attrs(&m.bytes()[16 + 12..])
            .map(|(k, v)| (k, v.to_vec()))
            .collect();
        assert_eq!(
            got,
            vec![
                (FRA_PRIORITY, 200u32.to_ne_bytes().to_vec()),
                (FRA_TABLE, 255u32.to_ne_bytes().to_vec())
            ]
        );
    }
}
