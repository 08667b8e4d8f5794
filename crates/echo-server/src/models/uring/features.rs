//! What the running kernel's io_uring offers, and the ring itself: the release-based feature
//! decision ([`Features`]), ring creation with the flags a single-threaded reactor wants, and
//! the opcode check.

use anyhow::anyhow;
use io_uring::{opcode, squeue, IoUring, Probe};
use nix::errno::Errno;

/// Submission queue entries; more pending operations than this are flushed with an extra
/// enter mid-batch (counted like any other).
pub(super) const SQ_ENTRIES: u32 = 1024;
/// Completion queue entries: multishot receives post many completions per submission, so the
/// CQ is sized well above the SQ (the kernel keeps overflowing completions anyway, NODROP).
pub(super) const CQ_ENTRIES: u32 = 8 * SQ_ENTRIES;

/// What the running kernel supports, decided once at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Features {
    /// IORING_ACCEPT_MULTISHOT (Linux 5.19).
    pub multishot_accept: bool,
    /// Multishot recv (Linux 6.0) with a registered buffer ring (Linux 5.19).
    pub multishot_recv: bool,
    /// A multishot recv that ends by itself after a given number of bytes (the SQE's
    /// `optlen`, Linux 6.17: "io_uring/net: Support multishot receive len cap").
    pub recv_limit: bool,
}

impl Features {
    /// Everything the kernel has, from its release (`/proc/sys/kernel/osrelease`): the
    /// multishot flags are not opcodes, so io_uring's opcode probe cannot see them. A kernel
    /// that claims a version but refuses a flag (EINVAL) is handled at run time by falling
    /// back for good.
    pub(super) fn detect() -> Self {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let version = kernel_version(&release).unwrap_or((0, 0));
        Self {
            multishot_accept: version >= (5, 19),
            multishot_recv: version >= (6, 0),
            recv_limit: version >= (6, 17),
        }
    }
}

/// Byte offset of `optlen` in `struct io_uring_sqe` (include/uapi/linux/io_uring.h: the `u32`
/// after `personality`, shared with `splice_fd_in` and `file_index`).
const SQE_OPTLEN_OFFSET: usize = 44;

/// `entry` (a multishot recv) ending by itself at the completion that brings what it received
/// to `bytes` or more, that completion without IORING_CQE_F_MORE ([`Features::recv_limit`]);
/// a completion that crosses the limit is not cut short, so up to one buffer less a byte more
/// may arrive. Kernels before 6.17 read
/// the field as `file_index` and refuse the recv with EINVAL. The io-uring crate has no setter
/// for this field.
pub(super) fn with_total_limit(mut entry: squeue::Entry, bytes: u32) -> squeue::Entry {
    const _: () = assert!(std::mem::size_of::<squeue::Entry>() == 64);
    // SAFETY: `squeue::Entry` is `#[repr(C)]` around the kernel's 64-byte `io_uring_sqe`
    // (size checked above), so bytes 44..48 are the `optlen` union member, a plain u32 in
    // the entry's own memory; the write is unaligned-safe and reads nothing.
    unsafe {
        (&mut entry as *mut squeue::Entry)
            .cast::<u8>()
            .add(SQE_OPTLEN_OFFSET)
            .cast::<u32>()
            .write_unaligned(bytes);
    }
    entry
}

/// `(major, minor)` of a kernel release string such as `"6.18.44-fc-v657"`.
fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.trim().split(|c: char| !c.is_ascii_digit());
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// Creates a ring, preferring the flags that cut task-work overhead for a single-threaded
/// reactor (Linux 6.1) and retrying without them on older kernels.
pub(super) fn new_ring() -> anyhow::Result<IoUring> {
    let tuned = IoUring::builder()
        .setup_cqsize(CQ_ENTRIES)
        .setup_submit_all()
        .setup_coop_taskrun()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(SQ_ENTRIES);
    let result = match tuned {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => IoUring::builder()
            .setup_cqsize(CQ_ENTRIES)
            .build(SQ_ENTRIES),
        other => other,
    };
    result.map_err(|e| match e.raw_os_error() {
        Some(code @ (libc::EPERM | libc::ENOSYS)) => anyhow!(
            "io_uring is not available here (io_uring_setup: {}): Docker's default seccomp profile \
             blocks it (or sysctl kernel.io_uring_disabled is set); run with a seccomp profile allowing \
             io_uring_setup/io_uring_enter/io_uring_register",
            Errno::from_raw(code).desc()
        ),
        _ => anyhow!("io_uring_setup failed: {e}"),
    })
}

/// Fails unless the kernel has every opcode this model issues.
pub(super) fn check_opcodes(ring: &IoUring) -> anyhow::Result<()> {
    let mut probe = Probe::new();
    ring.submitter().register_probe(&mut probe).map_err(|e| {
        anyhow!("io_uring opcode probe failed ({e}); the uring model needs Linux 5.6 or later")
    })?;
    let needed = [
        (opcode::Accept::CODE, "ACCEPT"),
        (opcode::Recv::CODE, "RECV"),
        (opcode::Send::CODE, "SEND"),
        (opcode::Close::CODE, "CLOSE"),
        (opcode::Timeout::CODE, "TIMEOUT"),
        (opcode::AsyncCancel::CODE, "ASYNC_CANCEL"),
    ];
    match needed.iter().find(|(code, _)| !probe.is_supported(*code)) {
        Some((_, name)) => Err(anyhow!("this kernel's io_uring lacks IORING_OP_{name}; the uring model needs Linux 5.6 or later")),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::uring::buf_ring::BufRing;
    use io_uring::cqueue;
    use std::io::{Read as _, Write as _};
    use std::os::fd::AsRawFd as _;
    use std::os::unix::net::UnixStream;

    /// A multishot recv limited to 128 bytes, with 64-byte buffers and 192 bytes queued: two
    /// full buffers, the second completion without MORE, and the last 64 bytes left in the
    /// socket. This is what checks [`SQE_OPTLEN_OFFSET`] against the running kernel; one
    /// without the feature refuses the limit (EINVAL), which is what the reactor's fallback
    /// relies on.
    #[test]
    fn a_limited_multishot_recv_ends_at_its_limit() {
        let mut ring = IoUring::new(8).expect("io_uring_setup (is io_uring allowed here?)");
        let _bufs = BufRing::register(&ring.submitter(), 3, 8, 64).expect("buffer ring");
        let (mut tx, mut rx) = UnixStream::pair().unwrap();
        tx.write_all(&[7u8; 192]).unwrap();
        let entry = with_total_limit(
            opcode::RecvMulti::new(io_uring::types::Fd(rx.as_raw_fd()), 3).build(),
            128,
        );
        // SAFETY: a multishot recv writes only into the registered ring's buffers.
        unsafe { ring.submission().push(&entry.user_data(1)) }.unwrap();
        let mut seen = Vec::new();
        // At most 3 completions: without the limit all 192 bytes would come back, each with
        // MORE, and the loop must not wait for a fourth that never comes.
        while seen.len() < 3 && seen.last().is_none_or(|&(_, more): &(i32, bool)| more) {
            ring.submit_and_wait(1).unwrap();
            seen.extend(
                ring.completion()
                    .map(|c| (c.result(), cqueue::more(c.flags()))),
            );
        }
        if Features::detect().recv_limit {
            assert_eq!(seen, [(64, true), (64, false)]);
            rx.set_nonblocking(true).unwrap();
            let mut rest = [0u8; 256];
            assert_eq!(
                rx.read(&mut rest).unwrap(),
                64,
                "the bytes past the limit stay queued"
            );
        } else {
            assert_eq!(seen, [(-libc::EINVAL, false)]);
        }
        drop(ring);
    }

    #[test]
    fn kernel_versions_parse_from_release_strings() {
        assert_eq!(kernel_version("6.18.44-fc-v657\n"), Some((6, 18)));
        assert_eq!(kernel_version("5.4.0-150-generic"), Some((5, 4)));
        assert_eq!(kernel_version("garbage"), None);
    }
}
