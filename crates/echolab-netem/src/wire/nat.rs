//! Stateless 1:1 address translation in the wire, for a link across machines
//! (`echolab-netem wire --masquerade-client C --masquerade-as S`): the client host's address
//! C leaves the server side as S, the link host's own address there, which the client's
//! machine then NATs to its own (Docker's masquerade covers S's network, not C's), and what
//! comes back to S goes on to C. One client address, so no connection table: each packet is
//! rewritten on its own.
//!
//! Checksums are updated incrementally (RFC 1624, eqn. 3: HC' = ~(~HC + ~m + m')): the IPv4
//! header checksum, and the TCP or UDP checksum, whose pseudo-header holds both addresses
//! (RFC 793 section 3.1, RFC 768). A UDP checksum of 0 means "none" and stays 0. Fragments
//! after the first carry no transport header and get only the IP header's update. An ICMP
//! error's quoted packet is translated too (`Rewrite::quoted`), so errors such as path MTU
//! discovery's reach the client's sockets.

use std::net::Ipv4Addr;

/// Which address field of a packet a [`Rewrite`] changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Field {
    /// Bytes 12..16 of the IPv4 header (uplink: the client's packets).
    Source,
    /// Bytes 16..20 (downlink: the replies).
    Destination,
}

/// Replaces address `from` by `to` in `field` of every IPv4 packet that holds it there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rewrite {
    /// The field looked at.
    pub field: Field,
    /// The address replaced.
    pub from: Ipv4Addr,
    /// Its replacement.
    pub to: Ipv4Addr,
}

const ICMP: u8 = 1;
const TCP: u8 = 6;
const UDP: u8 = 17;
/// ICMP types that quote the packet they are about (RFC 792): destination unreachable,
/// source quench, redirect, time exceeded, parameter problem.
const ICMP_ERRORS: [u8; 5] = [3, 4, 5, 11, 12];

/// `checksum` (as in the packet, big-endian) updated for 16-bit words `old` becoming `new`.
fn update(checksum: u16, old: [u16; 2], new: [u16; 2]) -> u16 {
    let mut sum = u32::from(!checksum);
    for w in old {
        sum += u32::from(!w);
    }
    for w in new {
        sum += u32::from(w);
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

fn words(a: Ipv4Addr) -> [u16; 2] {
    let o = a.octets();
    [
        u16::from_be_bytes([o[0], o[1]]),
        u16::from_be_bytes([o[2], o[3]]),
    ]
}

fn patch(packet: &mut [u8], at: usize, old: [u16; 2], new: [u16; 2]) {
    let c = u16::from_be_bytes([packet[at], packet[at + 1]]);
    packet[at..at + 2].copy_from_slice(&update(c, old, new).to_be_bytes());
}

impl Rewrite {
    /// Rewrites `packet` (an IPv4 packet as read from a TUN) when its `field` holds `from`;
    /// returns whether it did. Anything shorter than its own header is left alone.
    pub(crate) fn apply(&self, packet: &mut [u8]) -> bool {
        let Some(transport) = self.rewrite_ipv4(packet, 0, self.field) else {
            return false;
        };
        if let Some(t) = transport {
            if packet[9] == ICMP && packet.len() >= t + 8 && ICMP_ERRORS.contains(&packet[t]) {
                self.quoted(packet, t);
            }
        }
        true
    }

    /// Rewrites the IPv4 header at `packet[ip..]` when its address in `field` is `from`:
    /// the address, the header checksum, and the checksum of a TCP or UDP header after it
    /// that is long enough to hold one (a UDP checksum of 0 stays 0). `None` when nothing was
    /// rewritten (not IPv4, a header cut short, another address); else where the transport
    /// header starts, or `None` inside for a fragment after the first, which carries none.
    fn rewrite_ipv4(&self, packet: &mut [u8], ip: usize, field: Field) -> Option<Option<usize>> {
        let header = packet.get(ip..)?;
        if header.len() < 20 || header[0] >> 4 != 4 {
            return None;
        }
        let ihl = usize::from(header[0] & 0x0f) * 4;
        let at = ip
            + match field {
                Field::Source => 12,
                Field::Destination => 16,
            };
        if ihl < 20 || header.len() < ihl || packet[at..at + 4] != self.from.octets() {
            return None;
        }
        let (old, new) = (words(self.from), words(self.to));
        packet[at..at + 4].copy_from_slice(&self.to.octets());
        patch(packet, ip + 10, old, new);
        let fragment_offset = u16::from_be_bytes([packet[ip + 6], packet[ip + 7]]) & 0x1fff;
        if fragment_offset != 0 {
            return Some(None);
        }
        let t = ip + ihl;
        let length = packet.len() - t;
        match packet[ip + 9] {
            TCP if length >= 18 => patch(packet, t + 16, old, new),
            UDP if length >= 8 && packet[t + 6..t + 8] != [0, 0] => patch(packet, t + 6, old, new),
            _ => {}
        }
        Some(Some(t))
    }

    /// The packet an ICMP error quotes (RFC 792: its IP header and at least 8 bytes of its
    /// payload, after the 8-byte ICMP header at `icmp`) was sent by the host the error goes
    /// to, so the address this rewrite changes sits in the quote's other field: a reply's
    /// destination S was the quoted packet's source, a client's error about a packet it got
    /// quotes C as destination. Without this the client's kernel would match no socket to
    /// the error (a "fragmentation needed" of path MTU discovery, RFC 1191, or a port
    /// unreachable). The quote is rewritten as a packet is ([`Self::rewrite_ipv4`], whose
    /// transport checksum needs only its first 18 bytes); the ICMP checksum covers the quote,
    /// so it is computed again over the message.
    fn quoted(&self, packet: &mut [u8], icmp: usize) {
        let other = match self.field {
            Field::Source => Field::Destination,
            Field::Destination => Field::Source,
        };
        if self.rewrite_ipv4(packet, icmp + 8, other).is_none() {
            return;
        }
        packet[icmp + 2..icmp + 4].copy_from_slice(&[0, 0]);
        let sum = internet_checksum(&packet[icmp..]);
        packet[icmp + 2..icmp + 4].copy_from_slice(&sum.to_be_bytes());
    }
}

/// The Internet checksum of `bytes` (RFC 1071), for the ICMP message whose quote changed.
fn internet_checksum(bytes: &[u8]) -> u16 {
    let mut sum: u32 = bytes
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c.get(1).copied().unwrap_or(0)])))
        .sum();
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Internet checksum computed from scratch (RFC 1071), independent of [`update`].
    fn checksum(bytes: &[u8]) -> u16 {
        let mut sum = 0u64;
        for chunk in bytes.chunks(2) {
            let hi = u64::from(chunk[0]) << 8;
            sum += hi | chunk.get(1).map_or(0, |b| u64::from(*b));
        }
        while sum >> 16 != 0 {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        !(sum as u16)
    }

    /// An IPv4 packet `src -> dst` of `protocol` carrying `transport` (its checksum field
    /// filled in here), with both checksums computed from scratch.
    fn packet(src: [u8; 4], dst: [u8; 4], protocol: u8, mut transport: Vec<u8>) -> Vec<u8> {
        let total = 20 + transport.len();
        let mut ip = vec![
            0x45,
            0,
            (total >> 8) as u8,
            total as u8,
            0x12,
            0x34,
            0x40,
            0,
            64,
            protocol,
            0,
            0,
        ];
        ip.extend_from_slice(&src);
        ip.extend_from_slice(&dst);
        let c = checksum(&ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        let at = if protocol == TCP { 16 } else { 6 };
        transport[at..at + 2].copy_from_slice(&[0, 0]);
        let c = transport_checksum(&ip, &transport);
        transport[at..at + 2].copy_from_slice(&c.to_be_bytes());
        ip.extend(transport);
        ip
    }

    fn transport_checksum(ip: &[u8], transport: &[u8]) -> u16 {
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&ip[12..20]);
        pseudo.extend_from_slice(&[
            0,
            ip[9],
            (transport.len() >> 8) as u8,
            transport.len() as u8,
        ]);
        pseudo.extend_from_slice(transport);
        checksum(&pseudo)
    }

    /// Both checksums of `p` verify (sum to zero with their fields included).
    fn verifies(p: &[u8]) -> bool {
        let transport = &p[20..];
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&p[12..20]);
        pseudo.extend_from_slice(&[0, p[9], (transport.len() >> 8) as u8, transport.len() as u8]);
        pseudo.extend_from_slice(transport);
        checksum(&p[..20]) == 0 && checksum(&pseudo) == 0
    }

    fn tcp_segment() -> Vec<u8> {
        // Ports 40000 -> 7070, seq, ack, offset 5, flags PSH|ACK, window, then 12 bytes.
        let mut t = vec![
            0x9c, 0x40, 0x1b, 0x9e, 1, 2, 3, 4, 5, 6, 7, 8, 0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0,
        ];
        t.extend_from_slice(b"hello, echo!");
        t
    }

    const CLIENT: [u8; 4] = [172, 19, 0, 3];
    const SHARED: [u8; 4] = [172, 20, 0, 2];
    const SERVER: [u8; 4] = [10, 213, 0, 1];

    #[test]
    fn the_source_becomes_the_shared_address_with_checksums_that_verify() {
        let mut p = packet(CLIENT, SERVER, TCP, tcp_segment());
        assert!(verifies(&p));
        let r = Rewrite {
            field: Field::Source,
            from: CLIENT.into(),
            to: SHARED.into(),
        };
        assert!(r.apply(&mut p));
        assert_eq!(
            p,
            packet(SHARED, SERVER, TCP, tcp_segment()),
            "as if built with the new address"
        );
        assert!(verifies(&p));
    }

    #[test]
    fn the_reply_goes_back_to_the_client_for_tcp_and_udp() {
        let back = Rewrite {
            field: Field::Destination,
            from: SHARED.into(),
            to: CLIENT.into(),
        };
        let mut p = packet(SERVER, SHARED, TCP, tcp_segment());
        assert!(back.apply(&mut p));
        assert_eq!(p, packet(SERVER, CLIENT, TCP, tcp_segment()));
        let udp = vec![0x1b, 0x9e, 0x9c, 0x40, 0, 12, 0, 0, 1, 2, 3, 4];
        let mut p = packet(SERVER, SHARED, UDP, udp.clone());
        assert!(back.apply(&mut p));
        assert_eq!(p, packet(SERVER, CLIENT, UDP, udp));
    }

    #[test]
    fn other_addresses_short_packets_and_fragments_are_left_as_they_need() {
        let r = Rewrite {
            field: Field::Source,
            from: CLIENT.into(),
            to: SHARED.into(),
        };
        let other = packet(SERVER, CLIENT, TCP, tcp_segment());
        let mut p = other.clone();
        assert!(
            !r.apply(&mut p),
            "the client's address as destination is not the source"
        );
        assert_eq!(p, other);
        let mut short = vec![0x45, 0, 0, 10];
        assert!(!r.apply(&mut short));
        // UDP without a checksum keeps none.
        let mut p = packet(CLIENT, SERVER, UDP, vec![0, 1, 0, 2, 0, 8, 0, 0]);
        p[26..28].copy_from_slice(&[0, 0]);
        assert!(r.apply(&mut p));
        assert_eq!(&p[26..28], &[0, 0]);
        assert_eq!(checksum(&p[..20]), 0);
        // A later fragment: only the IP header changes (its payload is not a TCP header).
        let mut p = packet(CLIENT, SERVER, TCP, tcp_segment());
        p[6..8].copy_from_slice(&[0, 0x10]);
        p[10..12].copy_from_slice(&[0, 0]);
        let c = checksum(&p[..20]);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        let payload = p[20..].to_vec();
        assert!(r.apply(&mut p));
        assert_eq!(&p[12..16], &SHARED);
        assert_eq!(checksum(&p[..20]), 0);
        assert_eq!(p[20..], payload[..]);
    }

    /// An ICMP message `src -> dst` of `kind` and `code` (4 bytes after the checksum: the
    /// next-hop MTU 1400 of a "fragmentation needed") quoting `quote`, with the ICMP and IP
    /// checksums computed from scratch.
    fn icmp(src: [u8; 4], dst: [u8; 4], kind: u8, code: u8, quote: &[u8]) -> Vec<u8> {
        let mut message = vec![kind, code, 0, 0, 0, 0, 0x05, 0x78];
        message.extend_from_slice(quote);
        let c = checksum(&message);
        message[2..4].copy_from_slice(&c.to_be_bytes());
        let total = 20 + message.len();
        let mut ip = vec![
            0x45,
            0,
            (total >> 8) as u8,
            total as u8,
            0,
            1,
            0,
            0,
            64,
            ICMP,
            0,
            0,
        ];
        ip.extend_from_slice(&src);
        ip.extend_from_slice(&dst);
        let c = checksum(&ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        ip.extend(message);
        ip
    }

    #[test]
    fn an_icmp_error_is_translated_inside_its_quote_too() {
        // Not CLIENT and SHARED: their words have the same one's-complement sum, so a
        // checksum left alone would still be right for them.
        let (client, shared) = ([192, 168, 7, 21], [10, 44, 0, 2]);
        let back = Rewrite {
            field: Field::Destination,
            from: shared.into(),
            to: client.into(),
        };
        let udp = vec![0x9c, 0x40, 0x1b, 0x9e, 0, 12, 0, 0, 1, 2, 3, 4];
        // The server's port unreachable about a datagram the client's side sent (it left
        // the link as `shared`): quoted whole, so the quote's UDP checksum is there.
        let mut p = icmp(
            SERVER,
            shared,
            3,
            3,
            &packet(shared, SERVER, UDP, udp.clone()),
        );
        assert!(back.apply(&mut p));
        assert_eq!(
            p,
            icmp(
                SERVER,
                client,
                3,
                3,
                &packet(client, SERVER, UDP, udp.clone())
            ),
            "as if the client's datagram had been quoted"
        );
        assert_eq!(checksum(&p[20..]), 0, "the ICMP checksum verifies");
        // A router's "fragmentation needed" (path MTU discovery) quoting a TCP segment's
        // IP header and first 8 bytes only (RFC 792's minimum): no TCP checksum to update.
        let quote = |src| packet(src, SERVER, TCP, tcp_segment())[..28].to_vec();
        let mut p = icmp(SERVER, shared, 3, 4, &quote(shared));
        assert!(back.apply(&mut p));
        assert_eq!(p, icmp(SERVER, client, 3, 4, &quote(client)));
        // The other way: the client's error about a server's packet quotes it as destination.
        let out = Rewrite {
            field: Field::Source,
            from: client.into(),
            to: shared.into(),
        };
        let mut p = icmp(
            client,
            SERVER,
            3,
            3,
            &packet(SERVER, client, TCP, tcp_segment()),
        );
        assert!(out.apply(&mut p));
        assert_eq!(
            p,
            icmp(
                shared,
                SERVER,
                3,
                3,
                &packet(SERVER, shared, TCP, tcp_segment())
            )
        );
        // A quoted datagram without a UDP checksum keeps none.
        let mut bare = packet(shared, SERVER, UDP, udp.clone());
        bare[26..28].copy_from_slice(&[0, 0]);
        let mut p = icmp(SERVER, shared, 3, 3, &bare);
        assert!(back.apply(&mut p));
        assert_eq!(p[20 + 8 + 26..20 + 8 + 28], [0, 0]);
        assert_eq!(checksum(&p[20..]), 0);
        // Not an error (echo request, type 8): only the outer header is the link's business,
        // even when its data looks like a quote of the client's packet.
        let echo_data = packet(client, SERVER, UDP, udp);
        let mut p = icmp(client, SERVER, 8, 0, &echo_data);
        assert!(out.apply(&mut p));
        assert_eq!(p, icmp(shared, SERVER, 8, 0, &echo_data));
        // An error about someone else's packet keeps its quote.
        let mut p = icmp(
            SERVER,
            shared,
            3,
            3,
            &packet(SERVER, [10, 0, 0, 9], UDP, vec![0; 8]),
        );
        let quoted = p[28..].to_vec();
        assert!(back.apply(&mut p));
        assert_eq!(p[28..], quoted[..]);
        assert_eq!(checksum(&p[20..]), 0);
    }

    #[test]
    fn a_malformed_quote_is_left_alone_without_a_panic() {
        let (client, shared) = ([192, 168, 7, 21], [10, 44, 0, 2]);
        let back = Rewrite {
            field: Field::Destination,
            from: shared.into(),
            to: client.into(),
        };
        let whole = packet(
            shared,
            SERVER,
            UDP,
            vec![0x9c, 0x40, 0x1b, 0x9e, 0, 12, 0, 0, 1, 2, 3, 4],
        );
        let mut options = whole.clone();
        options[0] = 0x46; // an IHL of 24 bytes, of which the quote below holds 20
        let mut tiny_ihl = whole.clone();
        tiny_ihl[0] = 0x44; // an IHL below the minimum of 20 bytes
        let mut ipv6 = whole.clone();
        ipv6[0] = 0x65;
        for (what, quote) in [
            ("no quote at all", &whole[..0]),
            ("19 bytes of an IPv4 header", &whole[..19]),
            ("a header cut inside its options", &options[..20]),
            ("an IHL of 16 bytes", &tiny_ihl[..]),
            ("not IPv4", &ipv6[..]),
        ] {
            let mut p = icmp(SERVER, shared, 3, 3, quote);
            assert!(back.apply(&mut p), "{what}: the outer header is rewritten");
            assert_eq!(p[16..20], client, "{what}");
            assert_eq!(&p[28..], quote, "{what}: the quote is left as it came");
        }
        // A quote whose IP header ends where the packet does: translated, with no
        // transport bytes to patch.
        let mut p = icmp(SERVER, shared, 3, 3, &whole[..20]);
        assert!(back.apply(&mut p));
        assert_eq!(p[28 + 12..28 + 16], client);
        assert_eq!(
            checksum(&p[28..48]),
            0,
            "the quote's header checksum verifies"
        );
        assert_eq!(checksum(&p[20..]), 0);
    }

    #[test]
    fn a_checksum_through_the_fold_and_the_zero_corner_verifies() {
        // Addresses whose words overflow 16 bits when summed, for every rewrite direction.
        for (from, to) in [
            ([255, 255, 255, 254], [0, 0, 0, 1]),
            ([0, 0, 0, 1], [255, 255, 255, 255]),
            ([128, 0, 127, 255], [127, 255, 128, 0]),
        ] {
            let mut p = packet(from, SERVER, TCP, tcp_segment());
            let r = Rewrite {
                field: Field::Source,
                from: from.into(),
                to: to.into(),
            };
            assert!(r.apply(&mut p));
            assert!(verifies(&p), "{from:?} -> {to:?}");
        }
    }
}
