//! Arrival stamps from the kernel: when each packet entered a direction's TUN, so that the wire
//! schedules it from that moment and not from when its thread got to read it.
//!
//! A packet routed into the TUN waits there until the direction's thread wakes and reads it:
//! a wake-up of 10–100 µs on a 2-core VM, different for every packet and invisible to the
//! thread. Subtracting an estimate measured once at startup (the self-probe, [`super::probe`])
//! left lan100's added RTT 20–85 µs short on one machine and 15 µs on another
//! (`examples/wire_perf.rs`). The
//! kernel knows the moment instead: a packet socket bound to the TUN sees every packet the
//! TUN transmits, before the TUN queues it (`dev_queue_xmit_nit` runs before the driver's
//! `ndo_start_xmit`), and stamps it. The tap reads those stamps from a `PACKET_RX_RING`
//! (TPACKET_V2: each frame is handed over as soon as it is written, packet(7)), so a stamp
//! costs no system call, and a classic BPF filter keeps only outgoing packets and only their
//! first [`SNAP_BYTES`] bytes.
//!
//! Frames and TUN reads are in the same order, so the stamp of the packet just read is that
//! of the oldest frame with the same length and first bytes; frames before it are packets the
//! TUN dropped (its queue full) and are discarded. The kernel's software stamps are
//! `CLOCK_REALTIME`; they are converted to the wire's `CLOCK_MONOTONIC` with an offset taken
//! from both clocks at each conversion.
//!
//! Needs CAP_NET_RAW (packet(7)); without it the wire falls back to the self-probe.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};

use super::syscall::cvt;

/// Bytes of each packet the tap keeps: the IPv4 header and the start of the transport header,
/// enough to tell consecutive packets apart (addresses, IP id, ports, TCP sequence numbers).
pub(crate) const SNAP_BYTES: usize = 64;
/// Bytes per ring frame: the TPACKET_V2 header and address (52), aligned, then the snap.
const FRAME_BYTES: usize = 256;
/// Ring block size: one page.
const BLOCK_BYTES: usize = 4096;
/// Ring blocks: 4096 frames, more than the TUN's queue (`txqueuelen`, the profile's limit and at
/// least 1000) at the default limit, so the ring does not fill before the TUN does. A limit
/// raised for an experiment's connections (`echolab_core::link_queue`) lets the TUN hold more
/// than the ring when the wire falls that far behind its reads; such packets are counted
/// `unstamped` and their delay counts from when the wire read them.
const BLOCKS: usize = 256;
const FRAMES: usize = BLOCK_BYTES / FRAME_BYTES * BLOCKS;

// packet(7)'s ring rules, checked at compile time: frames are TPACKET_ALIGNMENT (16) aligned,
// a block holds whole frames, and a frame holds the aligned header, the address and the snap.
const _: () = {
    assert!(FRAME_BYTES % 16 == 0);
    assert!(BLOCK_BYTES % FRAME_BYTES == 0);
    assert!(libc::TPACKET2_HDRLEN.div_ceil(16) * 16 + 16 + SNAP_BYTES <= FRAME_BYTES);
};

/// `tpacket_versions::TPACKET_V2` (linux/if_packet.h).
const TPACKET_V2: libc::c_int = 1;
/// `PACKET_OUTGOING` (linux/if_packet.h): a packet the device transmits.
const PACKET_OUTGOING: u32 = 4;

fn setsockopt<T>(
    fd: &OwnedFd,
    level: libc::c_int,
    name: libc::c_int,
    v: &T,
    what: &str,
) -> io::Result<()> {
    crate::nl::set_option(fd, level, name, v)
        .map_err(|e| io::Error::new(e.kind(), format!("{what}: {e}")))
}

/// The classic BPF program: accept outgoing packets, [`SNAP_BYTES`] of each; drop the rest
/// (packets the wire writes into the TUN, which the tap would otherwise see as incoming).
fn outgoing_only() -> [libc::sock_filter; 4] {
    let op = |code: u32, jt: u8, jf: u8, k: u32| libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    };
    [
        // A = skb->pkt_type (the SKF_AD_PKTTYPE ancillary load).
        op(
            libc::BPF_LD | libc::BPF_W | libc::BPF_ABS,
            0,
            0,
            (libc::SKF_AD_OFF + libc::SKF_AD_PKTTYPE) as u32,
        ),
        op(
            libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K,
            0,
            1,
            PACKET_OUTGOING,
        ),
        op(libc::BPF_RET | libc::BPF_K, 0, 0, SNAP_BYTES as u32),
        op(libc::BPF_RET | libc::BPF_K, 0, 0, 0),
    ]
}

/// `CLOCK_REALTIME` minus `CLOCK_MONOTONIC` now, ns, from a monotonic reading on each side of
/// the realtime one (retried while the two are more than 2 µs apart, i.e. preempted between).
fn realtime_offset_ns() -> i128 {
    let read = |clock| i128::from(super::clock::read_ns(clock));
    let mut best = None;
    for _ in 0..4 {
        let m0 = read(libc::CLOCK_MONOTONIC);
        let r = read(libc::CLOCK_REALTIME);
        let m1 = read(libc::CLOCK_MONOTONIC);
        best = Some(r - (m0 + m1) / 2);
        if m1 - m0 <= 2_000 {
            break;
        }
    }
    best.expect("at least one reading")
}

/// A packet tap on one TUN with its mapped receive ring.
pub(crate) struct ArrivalTap {
    fd: OwnedFd,
    ring: *mut u8,
    next: usize,
}

// SAFETY: the ring is a private mapping owned by this value; it is used by one thread at a
// time (the direction's), moved there with the pump.
unsafe impl Send for ArrivalTap {}

impl ArrivalTap {
    /// Opens a packet socket on the device with index `ifindex`, with the outgoing-only filter
    /// and a mapped TPACKET_V2 ring.
    ///
    /// # Errors
    /// No CAP_NET_RAW (EPERM), or a refused option or mapping; the message names the step.
    pub(crate) fn open(ifindex: u32) -> io::Result<Self> {
        let proto = (libc::ETH_P_ALL as u16).to_be();
        // SAFETY: socket(2) with constant arguments; the result is checked and then owned.
        let fd = unsafe {
            OwnedFd::from_raw_fd(cvt(
                libc::socket(
                    libc::AF_PACKET,
                    libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                    proto as i32,
                ),
                "socket(AF_PACKET)",
            )?)
        };
        let filter = outgoing_only();
        let prog = libc::sock_fprog {
            len: filter.len() as u16,
            filter: filter.as_ptr().cast_mut(),
        };
        setsockopt(
            &fd,
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            &prog,
            "SO_ATTACH_FILTER",
        )?;
        setsockopt(
            &fd,
            libc::SOL_PACKET,
            libc::PACKET_VERSION,
            &TPACKET_V2,
            "PACKET_VERSION",
        )?;
        let req = libc::tpacket_req {
            tp_block_size: BLOCK_BYTES as u32,
            tp_block_nr: BLOCKS as u32,
            tp_frame_size: FRAME_BYTES as u32,
            tp_frame_nr: FRAMES as u32,
        };
        setsockopt(
            &fd,
            libc::SOL_PACKET,
            libc::PACKET_RX_RING,
            &req,
            "PACKET_RX_RING",
        )?;
        // SAFETY: maps the ring the kernel just allocated for this socket, of exactly its size.
        let ring = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                BLOCK_BYTES * BLOCKS,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ring == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("mmap packet ring: {e}")));
        }
        let tap = Self {
            fd,
            ring: ring.cast(),
            next: 0,
        };
        // Bound last: until now no frame could arrive, so none was taken unfiltered.
        // SAFETY: an all-zero sockaddr_ll is valid; the fields that matter are set below.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = proto;
        addr.sll_ifindex = ifindex as i32;
        // SAFETY: binds our socket to a live, fully initialized sockaddr_ll of the size passed.
        let bound = unsafe {
            libc::bind(
                tap.fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        cvt(bound, "bind packet socket")?;
        Ok(tap)
    }

    /// Frame `i`'s header.
    fn frame(&self, i: usize) -> *mut libc::tpacket2_hdr {
        // SAFETY: `i < FRAMES`, so the offset is inside the mapping; frames are 16-byte
        // aligned within a page-aligned block.
        unsafe { self.ring.add(i * FRAME_BYTES).cast() }
    }

    /// The frame status word, shared with the kernel.
    fn status(&self, i: usize) -> &AtomicU32 {
        // SAFETY: `tp_status` is the frame header's first field, an aligned u32 that the
        // kernel and this thread hand the frame over with (packet(7)); an atomic view of it
        // gives the acquire/release ordering that hand-over needs.
        unsafe { AtomicU32::from_ptr(std::ptr::addr_of_mut!((*self.frame(i)).tp_status)) }
    }

    /// The `CLOCK_MONOTONIC` time (ns) at which `packet`, just read from the TUN, entered it;
    /// `None` when the ring holds no frame of it (a frame lost to a full ring). Frames of
    /// packets the TUN dropped, found before it, are discarded.
    pub(crate) fn arrival_of(&mut self, packet: &[u8]) -> Option<u64> {
        let snap = packet.len().min(SNAP_BYTES);
        let mut offset = None;
        // At most one pass over the ring: a packet without a frame must not eat it all.
        for _ in 0..FRAMES {
            let i = self.next;
            if self.status(i).load(Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
                return None;
            }
            // SAFETY: the kernel has handed frame `i` over (TP_STATUS_USER, acquired above),
            // and its header and the `tp_snaplen` bytes at `tp_net` lie inside the frame.
            let (matches, sec, nsec) = unsafe {
                let h = &*self.frame(i);
                let data = std::slice::from_raw_parts(
                    self.ring.add(i * FRAME_BYTES + h.tp_net as usize),
                    (h.tp_snaplen as usize).min(FRAME_BYTES - h.tp_net as usize),
                );
                let matches = h.tp_len as usize == packet.len()
                    && data.len() >= snap
                    && data[..snap] == packet[..snap];
                (matches, h.tp_sec, h.tp_nsec)
            };
            self.status(i)
                .store(libc::TP_STATUS_KERNEL, Ordering::Release);
            self.next = (i + 1) % FRAMES;
            if matches {
                let real = sec as i128 * 1_000_000_000 + nsec as i128;
                let off = *offset.get_or_insert_with(realtime_offset_ns);
                return u64::try_from(real - off).ok();
            }
        }
        None
    }
}

impl Drop for ArrivalTap {
    fn drop(&mut self) {
        // SAFETY: unmaps the ring mapped in `open`, of the same size; nothing refers to it
        // after this.
        unsafe { libc::munmap(self.ring.cast(), BLOCK_BYTES * BLOCKS) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_offset_is_stable() {
        let (a, b) = (realtime_offset_ns(), realtime_offset_ns());
        assert!((a - b).abs() < 50_000, "{a} {b}");
    }
}
