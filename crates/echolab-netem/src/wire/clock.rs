//! The wire's one clock: `CLOCK_MONOTONIC` in nanoseconds, the clock of the pumps' release
//! times, of their `timerfd`s (armed with absolute `CLOCK_MONOTONIC` times) and of the
//! self-probe's timestamps, so that all three compare directly.

/// `CLOCK_MONOTONIC` now, ns.
pub(super) fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the live timespec passed.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
