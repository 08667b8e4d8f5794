//! Per-worker counters, written by one worker without atomic read-modify-write and merged only
//! when a stats line is printed.
//!
//! The slots live in one anonymous `MAP_SHARED` mapping made before any worker starts, so the
//! `prefork` model's child processes write into memory the parent reads; threads of the other
//! models share it like any heap memory. Each slot is cache-line aligned so that two workers
//! never write the same line (no false sharing on the hot path).

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Instant;

use echolab_core::stats::{KindCounts, ServerCounters, SyscallStat, SyscallTable, WorkerStats};
use nix::errno::Errno;

/// Whether the I/O path times its system calls (`--time-syscalls`): set once by the main
/// thread before any worker starts (forked workers inherit it), read on every call.
static TIMED: AtomicBool = AtomicBool::new(false);

/// Turns the timing of system calls on for the life of the process; call before any worker
/// starts.
pub(crate) fn time_syscalls() {
    TIMED.store(true, Relaxed);
}

/// Whether system calls are timed.
pub(crate) fn timing() -> bool {
    TIMED.load(Relaxed)
}

/// The start of one timed call: `None` when timing is off, so that the untimed path pays one
/// relaxed load and a predictable branch, and no clock read. The clock is CLOCK_MONOTONIC
/// (`Instant`), read through the vDSO without a system call of its own.
#[inline(always)]
pub(crate) fn clock() -> Option<Instant> {
    if TIMED.load(Relaxed) {
        Some(Instant::now())
    } else {
        None
    }
}

/// One counter. [`Counter::add`] is a plain load and store (no lock prefix): correct only while
/// a single thread writes the counter, which is how every model uses its slot. Readers see a
/// value at most one update old, which is all a statistics line needs.
#[derive(Default)]
#[repr(transparent)]
pub(crate) struct Counter(AtomicU64);

impl Counter {
    /// Adds `n`; the caller must be the only writer of this counter.
    #[inline(always)]
    pub(crate) fn add(&self, n: u64) {
        self.0.store(self.0.load(Relaxed).wrapping_add(n), Relaxed);
    }
    /// Adds 1; the caller must be the only writer of this counter.
    #[inline(always)]
    pub(crate) fn inc(&self) {
        self.add(1);
    }
    /// Adds `n` with an atomic read-modify-write, for the few slots several threads share
    /// (the `thread` model's connection threads).
    #[inline]
    pub(crate) fn add_shared(&self, n: u64) {
        self.0.fetch_add(n, Relaxed);
    }
    /// Replaces the value (prefork's worker pid, when a worker is replaced); the caller must
    /// be the only writer of this counter.
    pub(crate) fn set(&self, v: u64) {
        self.0.store(v, Relaxed);
    }
    /// Current value.
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

macro_rules! kinds {
    ($(#[$doc:meta])* $name:ident { $($variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[repr(usize)]
        pub(crate) enum $name { $($variant),+ }
        impl $name {
            /// Every kind, in index order.
            pub(crate) const ALL: &'static [$name] = &[$($name::$variant),+];
            /// Number of kinds.
            pub(crate) const COUNT: usize = $name::ALL.len();
            /// The name used in ServerStats JSON.
            pub(crate) fn name(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }
    };
}

kinds!(
    /// System calls a model makes on its I/O path.
    Sys {
        Accept = "accept", Read = "read", Write = "write", Close = "close",
        EpollWait = "epoll_wait", EpollCtl = "epoll_ctl", Select = "select", Poll = "poll",
        IoUringEnter = "io_uring_enter", Shutdown = "shutdown",
    }
);

kinds!(
    /// io_uring operations (submitted entries, not system calls).
    Op {
        Accept = "accept", AcceptMulti = "accept_multishot", Recv = "recv",
        RecvMulti = "recv_multishot", Send = "send", Close = "close",
        ProvideBuffers = "provide_buffers", Cancel = "cancel",
    }
);

kinds!(
    /// Error kinds counted separately; everything else is `Other`.
    ErrKind {
        Emfile = "emfile", Enfile = "enfile", Enobufs = "enobufs", Enomem = "enomem",
        Econnreset = "econnreset", Epipe = "epipe", Econnaborted = "econnaborted",
        Etimedout = "etimedout", FdOverSetsize = "fd_over_setsize",
        RecvBufferExhausted = "recv_buffer_exhausted", Other = "other",
    }
);

impl ErrKind {
    /// Maps an errno to its kind.
    pub(crate) fn from_errno(e: Errno) -> Self {
        match e {
            Errno::EMFILE => Self::Emfile,
            Errno::ENFILE => Self::Enfile,
            Errno::ENOBUFS => Self::Enobufs,
            Errno::ENOMEM => Self::Enomem,
            Errno::ECONNRESET => Self::Econnreset,
            Errno::EPIPE => Self::Epipe,
            Errno::ECONNABORTED => Self::Econnaborted,
            Errno::ETIMEDOUT => Self::Etimedout,
            _ => Self::Other,
        }
    }

    /// Maps an I/O error to its kind (`Other` when it carries no errno).
    pub(crate) fn from_io(e: &std::io::Error) -> Self {
        e.raw_os_error()
            .map_or(Self::Other, |n| Self::from_errno(Errno::from_raw(n)))
    }
}

/// The counters of one worker. Zero bytes are a valid initial state (all fields are atomics),
/// which is what a fresh anonymous mapping holds.
#[repr(C, align(128))]
#[derive(Default)]
pub(crate) struct WorkerCounters {
    /// Process id of the worker (set by the worker when it starts; 0 if it never did).
    pub pid: Counter,
    /// 1 once the worker's epoll reactor has registered its listener (not reported): prefork's
    /// parent waits for every child's before the server announces readiness, so that no
    /// child is still starting when the first connection comes.
    pub listening: Counter,
    /// Connections accepted.
    pub accepted: Counter,
    /// Connections closed.
    pub closed: Counter,
    /// Payload bytes read.
    pub bytes_in: Counter,
    /// Payload bytes written.
    pub bytes_out: Counter,
    /// Events (or completions) returned by the wait call.
    pub events_returned: Counter,
    /// Wait calls that returned nothing.
    pub empty_wakeups: Counter,
    /// Reads that returned EAGAIN.
    pub eagain_read: Counter,
    /// Writes that returned EAGAIN.
    pub eagain_write: Counter,
    sys: [Counter; Sys::COUNT],
    /// Nanoseconds inside each system call, when timed ([`clock`]).
    sys_ns: [Counter; Sys::COUNT],
    ops: [Counter; Op::COUNT],
    errors: [Counter; ErrKind::COUNT],
}

impl WorkerCounters {
    /// The counter of system call `s`.
    #[inline(always)]
    pub(crate) fn sys(&self, s: Sys) -> &Counter {
        &self.sys[s as usize]
    }
    /// Adds the time since `started` (from [`clock`]) to system call `s`; nothing when
    /// timing is off.
    #[inline(always)]
    pub(crate) fn timed(&self, s: Sys, started: Option<Instant>) {
        if let Some(t) = started {
            self.sys_ns[s as usize].add(t.elapsed().as_nanos() as u64);
        }
    }
    /// The counter of io_uring operation `o`.
    #[inline(always)]
    pub(crate) fn op(&self, o: Op) -> &Counter {
        &self.ops[o as usize]
    }
    /// The counter of error kind `k`.
    #[inline(always)]
    pub(crate) fn error(&self, k: ErrKind) -> &Counter {
        &self.errors[k as usize]
    }

    /// Reads every counter into the JSON shape. `always` names the system calls listed even at
    /// zero (the model's own set); others appear only when non-zero. Each call's `total_ns`
    /// is there when the calls are timed ([`timing`]), absent otherwise.
    pub(crate) fn snapshot(&self, always: &[Sys]) -> ServerCounters {
        let mut syscalls = SyscallTable::new();
        let timed = timing();
        for &s in Sys::ALL {
            let count = self.sys(s).get();
            if count > 0 || always.contains(&s) {
                syscalls.insert(
                    s.name().to_string(),
                    SyscallStat {
                        count,
                        total_ns: timed.then(|| self.sys_ns[s as usize].get()),
                    },
                );
            }
        }
        let nonzero = |names: &mut KindCounts, name: &str, v: u64| {
            if v > 0 {
                names.insert(name.to_string(), v);
            }
        };
        let mut ops = KindCounts::new();
        Op::ALL
            .iter()
            .for_each(|&o| nonzero(&mut ops, o.name(), self.op(o).get()));
        let mut errors = KindCounts::new();
        ErrKind::ALL
            .iter()
            .for_each(|&k| nonzero(&mut errors, k.name(), self.error(k).get()));
        ServerCounters {
            accepted: self.accepted.get(),
            closed: self.closed.get(),
            bytes_in: self.bytes_in.get(),
            bytes_out: self.bytes_out.get(),
            syscalls,
            events_returned: self.events_returned.get(),
            empty_wakeups: self.empty_wakeups.get(),
            eagain_read: self.eagain_read.get(),
            eagain_write: self.eagain_write.get(),
            ops,
            errors,
        }
    }
}

/// Allocates `n` zeroed counter slots in shared anonymous memory that lives until the process
/// exits (and is inherited by forked children).
///
/// # Errors
/// When mmap(2) fails (ENOMEM).
pub(crate) fn alloc_shared(n: usize) -> nix::Result<&'static [WorkerCounters]> {
    let n = n.max(1);
    let len = NonZeroUsize::new(n * std::mem::size_of::<WorkerCounters>()).expect("n >= 1");
    // SAFETY: a fresh anonymous mapping has no other users; it is page-aligned (more than the
    // 128-byte alignment WorkerCounters needs), zero-filled (a valid WorkerCounters: all fields
    // are AtomicU64), and never unmapped, so the 'static slice stays valid for the process.
    unsafe {
        let ptr = nix::sys::mman::mmap_anonymous(
            None,
            len,
            nix::sys::mman::ProtFlags::PROT_READ | nix::sys::mman::ProtFlags::PROT_WRITE,
            nix::sys::mman::MapFlags::MAP_SHARED,
        )?;
        Ok(std::slice::from_raw_parts(
            ptr.as_ptr() as *const WorkerCounters,
            n,
        ))
    }
}

/// Sums the slots into server totals plus one [`WorkerStats`] per slot.
pub(crate) fn merge(
    slots: &[WorkerCounters],
    always: &[Sys],
) -> (ServerCounters, Vec<WorkerStats>) {
    let mut total = ServerCounters::default();
    let mut workers = Vec::with_capacity(slots.len());
    for (i, slot) in slots.iter().enumerate() {
        let c = slot.snapshot(always);
        total.accepted += c.accepted;
        total.closed += c.closed;
        total.bytes_in += c.bytes_in;
        total.bytes_out += c.bytes_out;
        total.events_returned += c.events_returned;
        total.empty_wakeups += c.empty_wakeups;
        total.eagain_read += c.eagain_read;
        total.eagain_write += c.eagain_write;
        for (k, v) in &c.syscalls {
            let t = total.syscalls.entry(k.clone()).or_default();
            t.count += v.count;
            if let Some(ns) = v.total_ns {
                t.total_ns = Some(t.total_ns.unwrap_or(0) + ns);
            }
        }
        for (k, v) in &c.ops {
            *total.ops.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &c.errors {
            *total.errors.entry(k.clone()).or_default() += v;
        }
        workers.push(WorkerStats {
            worker: i as u32,
            pid: slot.pid.get() as u32,
            counters: c,
        });
    }
    (total, workers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_sums_slots_and_keeps_each_worker() {
        let slots = alloc_shared(2).unwrap();
        slots[0].accepted.add(3);
        slots[1].accepted.inc();
        slots[1].sys(Sys::EpollWait).add(5);
        slots[0].error(ErrKind::Emfile).inc();
        let (total, workers) = merge(slots, &[Sys::Accept]);
        assert_eq!(total.accepted, 4);
        assert_eq!(total.syscalls["epoll_wait"].count, 5);
        assert_eq!(total.syscalls["accept"].count, 0, "listed even at zero");
        assert!(
            !total.syscalls.contains_key("select"),
            "zero and not listed"
        );
        assert_eq!(total.errors["emfile"], 1);
        assert_eq!(workers.len(), 2);
        assert_eq!(workers[1].counters.accepted, 1);
    }

    #[test]
    fn timed_calls_add_their_time_and_merge_it() {
        let slots = alloc_shared(2).unwrap();
        // Off: no clock is read and nothing is added.
        assert!(!timing() && clock().is_none());
        slots[0].timed(Sys::Read, clock());
        assert_eq!(slots[0].sys_ns[Sys::Read as usize].get(), 0);
        let (total, _) = merge(slots, &[Sys::Read]);
        assert_eq!(total.syscalls["read"].total_ns, None, "untimed: no total");
        // A started clock adds at least the time that passed before the call ended.
        let started = Some(Instant::now() - std::time::Duration::from_micros(5));
        slots[0].sys(Sys::Read).inc();
        slots[0].timed(Sys::Read, started);
        slots[1].sys(Sys::Read).inc();
        slots[1].timed(Sys::Read, started);
        let each = slots[0].sys_ns[Sys::Read as usize].get();
        assert!(each >= 5_000, "{each} ns");
        let both = each + slots[1].sys_ns[Sys::Read as usize].get();
        TIMED.store(true, Relaxed);
        let (total, workers) = merge(slots, &[Sys::Read]);
        TIMED.store(false, Relaxed);
        assert_eq!(total.syscalls["read"].count, 2);
        assert_eq!(total.syscalls["read"].total_ns, Some(both));
        assert_eq!(workers[0].counters.syscalls["read"].total_ns, Some(each));
    }

    #[test]
    fn slots_are_shared_with_forked_children() {
        let slots = alloc_shared(1).unwrap();
        // SAFETY: the child only touches the shared mapping and calls _exit; no locks, no heap.
        match unsafe { nix::unistd::fork() }.unwrap() {
            nix::unistd::ForkResult::Child => {
                slots[0].bytes_in.add(42);
                // SAFETY: _exit is async-signal-safe and skips Rust/libc teardown in the child.
                unsafe { libc::_exit(0) };
            }
            nix::unistd::ForkResult::Parent { child } => {
                nix::sys::wait::waitpid(child, None).unwrap();
                assert_eq!(slots[0].bytes_in.get(), 42);
            }
        }
    }
}
