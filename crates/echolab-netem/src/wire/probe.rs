//! The wire's self-probe: how long the kernel and the wake-up take to hand a packet from a TUN
//! write to the wire's read, measured at startup so the wire can subtract it from the delay it
//! schedules (see [`super::shaper::Shaper::set_compensation`]).
//!
//! A packet through the wire makes two kernel passes instead of one: forwarded into the TUN,
//! queued until the sleeping wire thread wakes and reads it, then written back and forwarded
//! again. None of that is visible to the wire, which can only stamp a packet when it reads it.
//! The probe reproduces one such pass: a helper thread writes a probe packet into the
//! direction's TUN, a temporary policy rule (`iif TUN to PROBE_DST lookup TABLE`) makes the
//! kernel forward it straight back out of the same TUN, and the wire thread, asleep in its own
//! `epoll_wait` with its own scheduling class, wakes and reads it. Write-to-read time covers a
//! forward, a TUN transmit, the wake-up and the read: the overhead one direction adds on top of
//! plain forwarding, apart from the release timer's lateness (which the early wake-up removes).
//!
//! Probe addresses are from TEST-NET-1 (RFC 5737), which never appears on a real network.

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hdrhistogram::Histogram;

use super::clock::now_ns;
use echolab_core::hist;

/// Destination of probe packets; the temporary rule matches it.
pub(crate) const PROBE_DST: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
/// Source of probe packets: not local to the link host, so the kernel forwards them.
pub(crate) const PROBE_SRC: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
/// Marks a probe's UDP payload, followed by its 32-bit sequence number.
const MAGIC: [u8; 4] = *b"elpr";
/// IPv4 header 20 + UDP 8 + magic 4 + sequence 4 bytes.
const PROBE_LEN: usize = 36;

/// The RFC 1071 Internet checksum of `bytes` (even length).
fn internet_checksum(bytes: &[u8]) -> u16 {
    let mut sum: u32 = bytes
        .chunks_exact(2)
        .map(|w| u16::from_be_bytes([w[0], w[1]]) as u32)
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Probe packet number `seq`: IPv4/UDP from [`PROBE_SRC`] to [`PROBE_DST`], TTL 64 (the kernel
/// decrements it once per forward), UDP checksum 0 (none, allowed for IPv4 by RFC 768).
pub(crate) fn probe_packet(seq: u32) -> [u8; PROBE_LEN] {
    let mut p = [0u8; PROBE_LEN];
    p[0] = 0x45; // version 4, header 5 words
    p[2..4].copy_from_slice(&(PROBE_LEN as u16).to_be_bytes());
    p[8] = 64; // TTL
    p[9] = libc::IPPROTO_UDP as u8;
    p[12..16].copy_from_slice(&PROBE_SRC.octets());
    p[16..20].copy_from_slice(&PROBE_DST.octets());
    let csum = internet_checksum(&p[..20]);
    p[10..12].copy_from_slice(&csum.to_be_bytes());
    p[20..22].copy_from_slice(&9u16.to_be_bytes()); // discard port, both ends
    p[22..24].copy_from_slice(&9u16.to_be_bytes());
    p[24..26].copy_from_slice(&((PROBE_LEN - 20) as u16).to_be_bytes());
    p[28..32].copy_from_slice(&MAGIC);
    p[32..36].copy_from_slice(&seq.to_be_bytes());
    p
}

/// The sequence number of a probe packet as read back from the TUN (TTL decremented by the
/// forward), or `None` for any other packet.
pub(crate) fn probe_seq(packet: &[u8]) -> Option<u32> {
    let is_probe = packet.len() == PROBE_LEN
        && packet[0] == 0x45
        && packet[9] == libc::IPPROTO_UDP as u8
        && packet[16..20] == PROBE_DST.octets()
        && packet[28..32] == MAGIC;
    is_probe.then(|| u32::from_be_bytes(packet[32..36].try_into().expect("4 bytes")))
}

/// How many probes and how far apart. The spacing lets the wire thread fall asleep (and its
/// CPU idle) between probes, as it does between the packets of a request-response exchange.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProbePlan {
    /// Probes to send; 0 skips the probe.
    pub count: u32,
    /// Pause between probes.
    pub spacing: Duration,
}

/// Sends `plan.count` probes into `tun` from a helper thread and reads them back on the
/// calling thread, which waits in `epoll_wait` on `ep` (where `tun` is registered; `scratch`
/// receives packets). Other packets read meanwhile (the host's own IPv6 chatter on a new
/// device) are discarded: the wire carries no traffic until its rules exist.
///
/// Returns the write-to-read times, ns.
///
/// # Errors
/// A write, read or epoll call failed, or fewer than half the probes came back within
/// `count × spacing + 2 s` (the probe rule or forwarding is missing).
pub(crate) fn measure(
    tun: BorrowedFd<'_>,
    ep: RawFd,
    scratch: &mut [u8],
    plan: ProbePlan,
) -> io::Result<Histogram<u64>> {
    let mut samples = hist::new_latency_histogram();
    if plan.count == 0 {
        return Ok(samples);
    }
    let sent_at: Vec<AtomicU64> = (0..plan.count).map(|_| AtomicU64::new(0)).collect();
    let deadline =
        now_ns() + (plan.spacing * plan.count + Duration::from_secs(2)).as_nanos() as u64;
    std::thread::scope(|s| {
        let writer = s.spawn(|| -> io::Result<()> {
            for seq in 0..plan.count {
                let pkt = probe_packet(seq);
                sent_at[seq as usize].store(now_ns(), Ordering::SeqCst);
                // SAFETY: writes the probe's bytes from a live array to the TUN descriptor,
                // which the caller keeps open for the scope's duration.
                let w = unsafe { libc::write(tun.as_raw_fd(), pkt.as_ptr().cast(), pkt.len()) };
                if w < 0 {
                    let e = io::Error::last_os_error();
                    return Err(io::Error::new(e.kind(), format!("write probe to TUN: {e}")));
                }
                std::thread::sleep(plan.spacing);
            }
            Ok(())
        });
        let mut received = 0u32;
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 4];
        while received < plan.count {
            let now = now_ns();
            if now >= deadline {
                break;
            }
            let timeout_ms = ((deadline - now) / 1_000_000).max(1) as i32;
            // SAFETY: `events` is a live array of the length passed.
            let n = unsafe {
                libc::epoll_wait(ep, events.as_mut_ptr(), events.len() as i32, timeout_ms)
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(io::Error::new(e.kind(), format!("epoll_wait: {e}")));
            }
            loop {
                // SAFETY: reads at most `scratch.len()` bytes into the live scratch buffer.
                let r = unsafe {
                    libc::read(tun.as_raw_fd(), scratch.as_mut_ptr().cast(), scratch.len())
                };
                let read_at = now_ns();
                if r < 0 {
                    let e = io::Error::last_os_error();
                    match e.kind() {
                        io::ErrorKind::WouldBlock => break,
                        io::ErrorKind::Interrupted => continue,
                        _ => return Err(io::Error::new(e.kind(), format!("read probe: {e}"))),
                    }
                }
                let Some(seq) = probe_seq(&scratch[..r as usize]) else {
                    continue;
                };
                let Some(t0) = sent_at.get(seq as usize).map(|t| t.load(Ordering::SeqCst)) else {
                    continue;
                };
                if t0 != 0 {
                    // Only a 0 ns reading can be clamped (to the 1 ns floor), which is within
                    // the histogram's resolution; nothing waits an hour here.
                    let _ = hist::record_ns(&mut samples, read_at.saturating_sub(t0));
                    received += 1;
                }
            }
        }
        writer
            .join()
            .map_err(|_| io::Error::other("probe writer panicked"))??;
        if received * 2 < plan.count {
            return Err(io::Error::other(format!(
                "only {received} of {} self-probes came back through the TUN",
                plan.count
            )));
        }
        Ok(samples)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_header_checksums_to_zero_and_round_trips() {
        let p = probe_packet(0x0102_0304);
        // A correct IPv4 header checksum makes the header's ones-complement sum 0xffff.
        assert_eq!(internet_checksum(&p[..20]), 0);
        assert_eq!(probe_seq(&p), Some(0x0102_0304));
        let mut forwarded = p;
        forwarded[8] -= 1; // the kernel's TTL decrement (and checksum update) keep it a probe
        assert_eq!(probe_seq(&forwarded), Some(0x0102_0304));
        let mut other = p;
        other[16..20].copy_from_slice(&[10, 201, 2, 2]);
        assert_eq!(probe_seq(&other), None);
        assert_eq!(probe_seq(&p[..20]), None);
    }
}
