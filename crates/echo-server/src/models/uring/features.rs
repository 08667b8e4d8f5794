//! What the running kernel's io_uring offers, and the ring itself: the release-based feature
//! decision ([`Features`]), ring creation with the flags a single-threaded reactor wants, and
//! the opcode check.

use anyhow::anyhow;
use io_uring::{opcode, IoUring, Probe};
use nix::errno::Errno;

/// Submission queue entries; more pending operations than this are flushed with an extra
/// enter mid-batch (counted like any other).
pub const SQ_ENTRIES: u32 = 1024;
/// Completion queue entries: multishot receives post many completions per submission, so the
/// CQ is sized well above the SQ (the kernel keeps overflowing completions anyway, NODROP).
pub const CQ_ENTRIES: u32 = 8 * SQ_ENTRIES;

/// What the running kernel supports, decided once at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Features {
    /// IORING_ACCEPT_MULTISHOT (Linux 5.19).
    pub multishot_accept: bool,
    /// Multishot recv (Linux 6.0) with a registered buffer ring (Linux 5.19).
    pub multishot_recv: bool,
}

impl Features {
    /// Everything the kernel has, from its release (`/proc/sys/kernel/osrelease`): the
    /// multishot flags are not opcodes, so io_uring's opcode probe cannot see them. A kernel
    /// that claims a version but refuses a flag (EINVAL) is handled at run time by falling
    /// back for good.
    pub fn detect() -> Self {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let version = kernel_version(&release).unwrap_or((0, 0));
        Self {
            multishot_accept: version >= (5, 19),
            multishot_recv: version >= (6, 0),
        }
    }
}

/// `(major, minor)` of a kernel release string such as `"6.18.44-fc-v657"`.
fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.trim().split(|c: char| !c.is_ascii_digit());
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// Creates a ring, preferring the flags that cut task-work overhead for a single-threaded
/// reactor (Linux 6.1) and retrying without them on older kernels.
pub fn new_ring() -> anyhow::Result<IoUring> {
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
pub fn check_opcodes(ring: &IoUring) -> anyhow::Result<()> {
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

    #[test]
    fn kernel_versions_parse_from_release_strings() {
        assert_eq!(kernel_version("6.18.44-fc-v657\n"), Some((6, 18)));
        assert_eq!(kernel_version("5.4.0-150-generic"), Some((5, 4)));
        assert_eq!(kernel_version("garbage"), None);
    }
}
