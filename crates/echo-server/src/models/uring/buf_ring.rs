//! A ring of provided buffers (`IORING_REGISTER_PBUF_RING`, Linux 5.19; see
//! io_uring_register_buf_ring(3) and io_uring_buf_ring_add(3)): the kernel picks a free buffer
//! for each completed receive and reports its id in the CQE; the application hands the buffer
//! back by appending it at the ring's tail once it no longer needs the bytes.
//!
//! Memory: `count` buffers of `buf_size` bytes in one anonymous mapping, made resident at once
//! (`MAP_POPULATE`), plus one page-aligned mapping of `count` 16-byte ring entries. Resident
//! from the start because the kernel takes buffers round-robin: under traffic every buffer gets
//! touched anyway, so a lazily faulted pool would only make the server's memory grow with its
//! first few megabytes of traffic (and fault pages inside the receive path) before reaching
//! the same fixed size.

use std::io;
use std::num::NonZeroUsize;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, Ordering};

use io_uring::types::BufRingEntry;
use io_uring::Submitter;
use nix::sys::mman::{mmap_anonymous, munmap, MapFlags, ProtFlags};

/// A registered buffer ring. Must be dropped after the `IoUring` it was registered with (the
/// kernel may write into the buffers until the ring is gone); the owner guarantees that by
/// field order.
pub(super) struct BufRing {
    entries: NonNull<BufRingEntry>,
    entries_bytes: usize,
    bufs: NonNull<u8>,
    bufs_bytes: usize,
    buf_size: usize,
    mask: u16,
    /// Tail as written locally; the kernel sees it after [`BufRing::publish`].
    tail: u16,
    published: u16,
}

/// Anonymous private read-write mapping of `bytes` (> 0) bytes.
fn map(bytes: usize, extra: MapFlags) -> io::Result<NonNull<u8>> {
    let len = NonZeroUsize::new(bytes).ok_or(io::ErrorKind::InvalidInput)?;
    // SAFETY: a new anonymous mapping aliases no existing memory; the result is checked.
    let ptr = unsafe {
        mmap_anonymous(
            None,
            len,
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
            MapFlags::MAP_PRIVATE | extra,
        )
    }?;
    Ok(ptr.cast())
}

impl BufRing {
    /// Maps `count` buffers of `buf_size` bytes, registers them as buffer group `bgid` and
    /// hands all of them to the kernel.
    ///
    /// # Errors
    /// `InvalidInput` unless `count` is a power of two in 1..=32768; mmap failures; the
    /// kernel's refusal (EINVAL before Linux 5.19, EEXIST for a used `bgid`).
    pub(super) fn register(
        submitter: &Submitter<'_>,
        bgid: u16,
        count: u16,
        buf_size: usize,
    ) -> io::Result<Self> {
        if !count.is_power_of_two()
            || count > 32768
            || buf_size == 0
            || buf_size > u32::MAX as usize
        {
            return Err(io::ErrorKind::InvalidInput.into());
        }
        let entries_bytes = usize::from(count) * std::mem::size_of::<BufRingEntry>();
        let bufs_bytes = usize::from(count)
            .checked_mul(buf_size)
            .ok_or(io::ErrorKind::InvalidInput)?;
        let entries = map(entries_bytes, MapFlags::empty())?.cast::<BufRingEntry>();
        let bufs = match map(bufs_bytes, MapFlags::MAP_POPULATE) {
            Ok(b) => b,
            Err(e) => {
                // SAFETY: `entries` was mapped above with this length and is not used elsewhere.
                let _ = unsafe { munmap(entries.cast(), entries_bytes) };
                return Err(e);
            }
        };
        let mut ring = Self {
            entries,
            entries_bytes,
            bufs,
            bufs_bytes,
            buf_size,
            mask: count - 1,
            tail: 0,
            published: 0,
        };
        // SAFETY: the entry mapping is page-aligned (mmap), holds `count` entries and stays
        // mapped until `self` is dropped, which the owner does only after the io_uring is gone.
        unsafe { submitter.register_buf_ring_with_flags(entries.as_ptr() as u64, count, bgid, 0) }?;
        for bid in 0..count {
            ring.give_back(bid);
        }
        ring.publish();
        Ok(ring)
    }

    /// Number of buffers.
    pub(super) fn count(&self) -> usize {
        usize::from(self.mask) + 1
    }

    /// Bytes per buffer.
    pub(super) fn buf_size(&self) -> usize {
        self.buf_size
    }

    /// Queues buffer `bid` for reuse by the kernel (visible after [`BufRing::publish`]). The
    /// caller must be done with its bytes and must not give the same buffer back twice.
    pub(super) fn give_back(&mut self, bid: u16) {
        debug_assert!(bid <= self.mask);
        let slot = usize::from(self.tail & self.mask);
        // SAFETY: `slot` < count, so the entry lies inside the mapping. The kernel only reads
        // entries between its head and the published tail; this one is past the published
        // tail, so nothing reads it while it is written. Entry 0's `resv` field doubles as the
        // ring tail: set_addr/set_len/set_bid do not touch it.
        let entry = unsafe { &mut *self.entries.as_ptr().add(slot) };
        entry.set_addr(self.buf_ptr(bid) as u64);
        entry.set_len(self.buf_size as u32);
        entry.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
    }

    /// Makes the buffers given back since the last call visible to the kernel. Returns whether
    /// there were any.
    pub(super) fn publish(&mut self) -> bool {
        if self.tail == self.published {
            return false;
        }
        // SAFETY: the tail is the u16 at the ring's base (BufRingEntry::tail), inside the
        // mapping and aligned for u16; the kernel reads it concurrently, hence the atomic view.
        // Release orders the entry writes of give_back before the new tail.
        unsafe {
            let tail = BufRingEntry::tail(self.entries.as_ptr()) as *const AtomicU16;
            (*tail).store(self.tail, Ordering::Release);
        }
        self.published = self.tail;
        true
    }

    /// Start of buffer `bid`.
    pub(super) fn buf_ptr(&self, bid: u16) -> *mut u8 {
        debug_assert!(bid <= self.mask);
        // SAFETY: bid < count, so the offset stays inside the buffer mapping.
        unsafe { self.bufs.as_ptr().add(usize::from(bid) * self.buf_size) }
    }

    /// The first `len` bytes of buffer `bid`, which a completion reported as filled and which
    /// has not been given back since.
    pub(super) fn filled(&self, bid: u16, len: usize) -> &[u8] {
        assert!(len <= self.buf_size, "completion longer than its buffer");
        // SAFETY: the range lies inside buffer `bid`; the kernel wrote it before posting the
        // completion and does not touch the buffer again until it is given back, which needs
        // `&mut self` and so ends this borrow first.
        unsafe { std::slice::from_raw_parts(self.buf_ptr(bid), len) }
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: both mappings were made in `register` with these lengths; the kernel no
        // longer uses them (the owning io_uring is dropped first, see the type's docs).
        unsafe {
            let _ = munmap(self.bufs.cast(), self.bufs_bytes);
            let _ = munmap(self.entries.cast(), self.entries_bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use io_uring::{cqueue, opcode, squeue, types, IoUring};
    use std::io::Write as _;
    use std::os::fd::AsRawFd as _;
    use std::os::unix::net::UnixStream;

    /// Receives once from `fd` with a buffer picked from group `bgid`; returns (bytes, bid).
    fn recv_selected(ring: &mut IoUring, fd: i32, bgid: u16) -> (i32, Option<u16>) {
        let sqe = opcode::Recv::new(types::Fd(fd), std::ptr::null_mut(), 0)
            .buf_group(bgid)
            .build()
            .flags(squeue::Flags::BUFFER_SELECT);
        // SAFETY: the entry points at no memory of ours; the kernel picks a ring buffer.
        unsafe { ring.submission().push(&sqe) }.unwrap();
        ring.submit_and_wait(1).unwrap();
        let cqe = ring.completion().next().expect("one completion");
        (cqe.result(), cqueue::buffer_select(cqe.flags()))
    }

    #[test]
    fn kernel_fills_given_back_buffers_in_ring_order() {
        let mut ring = IoUring::new(8).expect("io_uring_setup (is io_uring allowed here?)");
        let mut bufs =
            BufRing::register(&ring.submitter(), 7, 2, 64).expect("register buffer ring");
        let (mut tx, rx) = UnixStream::pair().unwrap();

        tx.write_all(b"first").unwrap();
        let (n, bid) = recv_selected(&mut ring, rx.as_raw_fd(), 7);
        assert_eq!(n, 5);
        let first = bid.expect("a provided buffer");
        assert_eq!(bufs.filled(first, 5), b"first");

        tx.write_all(b"second").unwrap();
        let (n, bid) = recv_selected(&mut ring, rx.as_raw_fd(), 7);
        let second = bid.unwrap();
        assert_ne!(first, second);
        assert_eq!(bufs.filled(second, n as usize), b"second");

        // Both buffers are out: the next receive finds the ring empty.
        tx.write_all(b"third").unwrap();
        assert_eq!(
            recv_selected(&mut ring, rx.as_raw_fd(), 7),
            (-libc::ENOBUFS, None)
        );

        bufs.give_back(first);
        assert!(bufs.publish());
        assert!(!bufs.publish(), "nothing new to publish");
        let (n, bid) = recv_selected(&mut ring, rx.as_raw_fd(), 7);
        assert_eq!(
            (bid, bufs.filled(first, n as usize)),
            (Some(first), &b"third"[..])
        );
        drop(ring);
    }

    #[test]
    fn counts_that_are_not_powers_of_two_are_refused() {
        let ring = IoUring::new(8).expect("io_uring_setup");
        let err = BufRing::register(&ring.submitter(), 1, 3, 64)
            .err()
            .expect("refused");
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }
}
