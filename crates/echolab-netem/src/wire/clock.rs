//! The wire's one clock: `CLOCK_MONOTONIC` in nanoseconds, the clock of the pumps' release
//! times, of their `timerfd`s (armed with absolute `CLOCK_MONOTONIC` times) and of the
//! self-probe's timestamps, so that all three compare directly.

/// `CLOCK_MONOTONIC` now, ns.
pub(super) fn now_ns() -> u64 {
    read_ns(libc::CLOCK_MONOTONIC) as u64
}

/// `clock` (clock_gettime(2): `CLOCK_MONOTONIC`, `CLOCK_REALTIME`, ...) now, ns since its
/// epoch; the one place the wire and its measurements read a clock.
pub(super) fn read_ns(clock: libc::clockid_t) -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the live timespec passed.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}
