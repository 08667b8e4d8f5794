//! Client-side system-call accounting without ptrace.
//!
//! Seed 002 counted the client's `connect`/`close` with `strace -f -c`, and noted that ptrace
//! serialises 100 threads and inflates per-call times. Here every socket call of the hot path
//! goes through a thin wrapper that counts it and times it with two monotonic clock reads
//! (`Instant::now`, i.e. `clock_gettime(CLOCK_MONOTONIC)` through the vDSO, no system call of
//! its own). Each worker owns its [`SyscallCounters`]; they are merged once at the end, so the
//! hot path takes no lock.
//!
//! Calls made outside these wrappers (thread creation, `getrusage`, the Rust runtime's own)
//! are not counted; the table is the I/O path only, like seed 002's `-e trace=` filter.

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, IntoRawFd, RawFd};
use std::time::{Duration, Instant};

use echolab_core::stats::{SyscallStat, SyscallTable};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

/// The system calls echo-bench counts, named as in the man pages (section 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Call {
    /// socket(2).
    Socket,
    /// setsockopt(2): TCP_NODELAY, SO_LINGER, SO_RCVTIMEO/SO_SNDTIMEO, IP_BIND_ADDRESS_NO_PORT.
    Setsockopt,
    /// bind(2) of a source address (`--source-addrs`).
    Bind,
    /// getsockopt(2) SO_ERROR, read after a failed non-blocking connect.
    Getsockopt,
    /// connect(2).
    Connect,
    /// connect(2) with an AF_UNSPEC address: the kernel's tcp_disconnect(), RST and back to
    /// CLOSE, for `--short-sockets reuse` (reported as `disconnect`, not as `connect`, so that
    /// connect counts stay one per request).
    Disconnect,
    /// write(2); on the thread engine's interleaved path, send(2) with MSG_DONTWAIT.
    Write,
    /// read(2); on the thread engine's interleaved path, recv(2) with MSG_DONTWAIT.
    Read,
    /// close(2).
    Close,
    /// epoll_ctl(2).
    EpollCtl,
    /// epoll_pwait2(2) (or epoll_wait(2) on kernels before 5.11); reported as `epoll_wait`.
    EpollWait,
    /// ppoll(2): the thread engine's wait for one socket, bounded by what is left of a
    /// request's deadline (reported as `poll`).
    Poll,
    /// io_uring_enter(2): the ring engine's submit-and-wait, one per loop turn for a batch of
    /// operations (reported as `io_uring_enter`).
    UringEnter,
    /// fcntl(2): the ring engine makes its sockets blocking, two calls per socket.
    Fcntl,
}

impl Call {
    /// Every call, in report order.
    pub(crate) const ALL: [Call; 14] = [
        Call::Socket,
        Call::Setsockopt,
        Call::Bind,
        Call::Getsockopt,
        Call::Connect,
        Call::Disconnect,
        Call::Write,
        Call::Read,
        Call::Close,
        Call::EpollCtl,
        Call::EpollWait,
        Call::Poll,
        Call::UringEnter,
        Call::Fcntl,
    ];

    /// The name used as key in `BenchReport.syscalls`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Call::Socket => "socket",
            Call::Setsockopt => "setsockopt",
            Call::Bind => "bind",
            Call::Getsockopt => "getsockopt",
            Call::Connect => "connect",
            Call::Disconnect => "disconnect",
            Call::Write => "write",
            Call::Read => "read",
            Call::Close => "close",
            Call::EpollCtl => "epoll_ctl",
            Call::EpollWait => "epoll_wait",
            Call::Poll => "poll",
            Call::UringEnter => "io_uring_enter",
            Call::Fcntl => "fcntl",
        }
    }
}

const N_CALLS: usize = Call::ALL.len();

/// Count and total nanoseconds per [`Call`], owned by one thread.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SyscallCounters {
    count: [u64; N_CALLS],
    total_ns: [u64; N_CALLS],
    /// When the latest timed call started and ended (`None` before the first): the engines
    /// take request timestamps from these instead of reading the clock again, which saves
    /// three of seven clock reads per long-connection request.
    last: Option<(Instant, Instant)>,
}

impl SyscallCounters {
    /// Runs `f` (one system call) and charges its count and duration to `call`.
    #[inline]
    pub(crate) fn timed<R>(&mut self, call: Call, f: impl FnOnce() -> R) -> R {
        let t0 = Instant::now();
        let r = f();
        let t1 = Instant::now();
        self.count[call as usize] += 1;
        self.total_ns[call as usize] += t1.saturating_duration_since(t0).as_nanos() as u64;
        self.last = Some((t0, t1));
        r
    }

    /// The start of the latest timed call (now, before any).
    pub(crate) fn last_start(&self) -> Instant {
        self.last.map_or_else(Instant::now, |(t0, _)| t0)
    }

    /// The end of the latest timed call (now, before any).
    pub(crate) fn last_end(&self) -> Instant {
        self.last.map_or_else(Instant::now, |(_, t1)| t1)
    }

    /// Number of `call`s made.
    pub(crate) fn count(&self, call: Call) -> u64 {
        self.count[call as usize]
    }

    /// Adds `other`'s counts and times to these.
    pub(crate) fn merge(&mut self, other: &Self) {
        for i in 0..N_CALLS {
            self.count[i] += other.count[i];
            self.total_ns[i] += other.total_ns[i];
        }
    }

    /// These counters minus an earlier snapshot of the same thread (warm-up removal).
    pub(crate) fn since(&self, baseline: &Self) -> Self {
        let mut out = self.clone();
        for i in 0..N_CALLS {
            out.count[i] -= baseline.count[i];
            out.total_ns[i] -= baseline.total_ns[i];
        }
        out
    }

    /// The report table: every call made at least once, with count and total time.
    pub(crate) fn to_table(&self) -> SyscallTable {
        Call::ALL
            .iter()
            .filter(|c| self.count(**c) > 0)
            .map(|&c| {
                let stat = SyscallStat {
                    count: self.count(c),
                    total_ns: Some(self.total_ns[c as usize]),
                };
                (c.name().to_string(), stat)
            })
            .collect()
    }
}

/// Per-socket options of a run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SocketOptions {
    /// Set TCP_NODELAY (disable Nagle's algorithm, tcp(7)).
    pub nodelay: bool,
    /// Set SO_LINGER {on, 0}: close(2) sends RST and the client keeps no TIME_WAIT (socket(7)).
    pub linger0: bool,
    /// For blocking sockets: SO_SNDTIMEO/SO_RCVTIMEO (also bounds a blocking connect(2) on
    /// Linux, which then fails with EINPROGRESS). `None` for non-blocking sockets.
    pub blocking_timeout: Option<Duration>,
    /// Local address to connect from (port chosen by the kernel at connect time), or `None`
    /// for the kernel's choice of address too. See [`crate::sources`].
    pub source: Option<IpAddr>,
}

/// Creates a TCP socket for `addr`'s family with `opts` applied; non-blocking unless
/// `opts.blocking_timeout` is set. The caller owns the returned fd and must [`close`] it.
///
/// # Errors
/// socket(2) or setsockopt(2) failures (EMFILE when out of descriptors); nothing leaks.
pub(crate) fn open_tcp_socket(
    c: &mut SyscallCounters,
    addr: &SockAddr,
    opts: &SocketOptions,
) -> io::Result<RawFd> {
    let ty = if opts.blocking_timeout.is_none() {
        Type::STREAM.nonblocking()
    } else {
        Type::STREAM
    };
    let sock = c.timed(Call::Socket, || {
        Socket::new(Domain::from(addr.family() as i32), ty, Some(Protocol::TCP))
    })?;
    // `sock` closes itself (uncounted) if an option fails; that is an error path only.
    if opts.nodelay {
        c.timed(Call::Setsockopt, || sock.set_tcp_nodelay(true))?;
    }
    if opts.linger0 {
        c.timed(Call::Setsockopt, || sock.set_linger(Some(Duration::ZERO)))?;
    }
    if let Some(t) = opts.blocking_timeout {
        c.timed(Call::Setsockopt, || sock.set_write_timeout(Some(t)))?;
        c.timed(Call::Setsockopt, || sock.set_read_timeout(Some(t)))?;
    }
    if let Some(ip) = opts.source {
        // IP_BIND_ADDRESS_NO_PORT (ip(7), Linux 4.2): bind(2) fixes only the address and the
        // port is chosen at connect(2) against the full 4-tuple, so sockets of different
        // source addresses share the ephemeral port range instead of each taking a port.
        c.timed(Call::Setsockopt, || {
            set_int_option(&sock, libc::IPPROTO_IP, libc::IP_BIND_ADDRESS_NO_PORT, 1)
        })?;
        let local = SockAddr::from(std::net::SocketAddr::new(ip, 0));
        c.timed(Call::Bind, || sock.bind(&local))?;
    }
    Ok(sock.into_raw_fd())
}

fn set_int_option(
    sock: &Socket,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: the fd is open for the life of `sock`; the value is a c_int of the given size.
    let ret = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    cvt(ret).map(drop)
}

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn cvt_size(ret: libc::ssize_t) -> io::Result<usize> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}

/// connect(2). A non-blocking socket reports `EINPROGRESS` as an error; the caller waits for
/// writability and then learns the outcome from the next write or [`take_socket_error`].
pub(crate) fn connect(c: &mut SyscallCounters, fd: RawFd, addr: &SockAddr) -> io::Result<()> {
    // SAFETY: `addr` is a valid sockaddr of `addr.len()` bytes for the duration of the call;
    // connect(2) only reads it. An invalid fd yields EBADF, not undefined behaviour.
    let ret = c.timed(Call::Connect, || unsafe {
        libc::connect(fd, addr.as_ptr().cast(), addr.len())
    });
    cvt(ret).map(drop)
}

/// Dissolves `fd`'s connection with connect(2) to an `AF_UNSPEC` address: for TCP the
/// kernel's tcp_disconnect(), which sends RST from an established connection (as close(2)
/// with SO_LINGER {1, 0} does) and leaves the socket in CLOSE, open and still registered with
/// epoll, for the next [`connect`]. See [`crate::short_sockets`].
///
/// # Errors
/// What connect(2) returns (EBADF for a closed fd).
pub(crate) fn disconnect(c: &mut SyscallCounters, fd: RawFd) -> io::Result<()> {
    // SAFETY: a zeroed sockaddr with only sa_family set is a valid AF_UNSPEC address of its
    // size; connect(2) only reads it.
    let ret = c.timed(Call::Disconnect, || unsafe {
        let mut unspec: libc::sockaddr = std::mem::zeroed();
        unspec.sa_family = libc::AF_UNSPEC as libc::sa_family_t;
        libc::connect(
            fd,
            &unspec,
            std::mem::size_of::<libc::sockaddr>() as libc::socklen_t,
        )
    });
    cvt(ret).map(drop)
}

/// write(2) of `buf`; returns the number of bytes taken (possibly fewer than `buf.len()`).
pub(crate) fn write(c: &mut SyscallCounters, fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: `buf` is a live, initialised slice of `buf.len()` bytes that write(2) only reads.
    let ret = c.timed(Call::Write, || unsafe {
        libc::write(fd, buf.as_ptr().cast(), buf.len())
    });
    cvt_size(ret)
}

/// read(2) into `buf`; `Ok(0)` is end of stream.
pub(crate) fn read(c: &mut SyscallCounters, fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is a live, exclusively borrowed slice of `buf.len()` writable bytes.
    let ret = c.timed(Call::Read, || unsafe {
        libc::read(fd, buf.as_mut_ptr().cast(), buf.len())
    });
    cvt_size(ret)
}

/// send(2) of `buf` with MSG_DONTWAIT (a blocking socket behaves as a non-blocking one for
/// this call); charged to [`Call::Write`]. `WouldBlock` when the send buffer is full.
pub(crate) fn write_nowait(c: &mut SyscallCounters, fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: `buf` is a live, initialised slice of `buf.len()` bytes that send(2) only reads.
    let ret = c.timed(Call::Write, || unsafe {
        libc::send(fd, buf.as_ptr().cast(), buf.len(), libc::MSG_DONTWAIT)
    });
    cvt_size(ret)
}

/// recv(2) into `buf` with MSG_DONTWAIT; charged to [`Call::Read`]. `Ok(0)` is end of
/// stream, `WouldBlock` means nothing is queued.
pub(crate) fn read_nowait(c: &mut SyscallCounters, fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is a live, exclusively borrowed slice of `buf.len()` writable bytes.
    let ret = c.timed(Call::Read, || unsafe {
        libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT)
    });
    cvt_size(ret)
}

/// ppoll(2) on one socket for `events` (POLLIN, POLLOUT), waiting at most `timeout`
/// (nanosecond precision, unlike poll(2)'s milliseconds). Returns the `revents` bits, 0 when
/// the time ran out.
///
/// # Errors
/// ppoll(2)'s own errors (EINTR is returned to the caller, which retries).
pub(crate) fn poll_one(
    c: &mut SyscallCounters,
    fd: RawFd,
    events: libc::c_short,
    timeout: Duration,
) -> io::Result<libc::c_short> {
    let mut pfd = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `pfd` and `ts` are live locals; ppoll(2) reads `ts`, reads and writes the one
    // pollfd it is told of, and is given no signal mask (null).
    let ret = c.timed(Call::Poll, || unsafe {
        libc::ppoll(&mut pfd, 1, &ts, std::ptr::null())
    });
    cvt(ret).map(|_| pfd.revents)
}

/// close(2). The fd is gone afterwards whatever the result (close(2), "NOTES"), so errors are
/// ignored.
pub(crate) fn close(c: &mut SyscallCounters, fd: RawFd) {
    // SAFETY: the caller gives up `fd`, which it owns and does not use again.
    c.timed(Call::Close, || unsafe { libc::close(fd) });
}

/// getsockopt(SO_ERROR): the pending error of a socket whose non-blocking connect failed.
pub(crate) fn take_socket_error(c: &mut SyscallCounters, fd: RawFd) -> Option<io::Error> {
    let mut err: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `err` and `len` are valid for writes of the sizes getsockopt(2) is told.
    let ret = c.timed(Call::Getsockopt, || unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            (&mut err as *mut libc::c_int).cast(),
            &mut len,
        )
    });
    if ret < 0 {
        return Some(io::Error::last_os_error());
    }
    (err != 0).then(|| io::Error::from_raw_os_error(err))
}

/// epoll_create1(EPOLL_CLOEXEC); not counted (once per worker).
pub(crate) fn epoll_create() -> io::Result<RawFd> {
    // SAFETY: no pointers involved.
    cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })
}

/// A non-blocking CLOEXEC timerfd on CLOCK_MONOTONIC that expires every `period`
/// (timerfd_create(2)); not counted (once per worker).
pub(crate) fn periodic_timerfd(period: Duration) -> io::Result<RawFd> {
    // SAFETY: no pointers involved.
    let fd = cvt(unsafe {
        libc::timerfd_create(
            libc::CLOCK_MONOTONIC,
            libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
        )
    })?;
    let ts = libc::timespec {
        tv_sec: period.as_secs() as libc::time_t,
        tv_nsec: period.subsec_nanos() as libc::c_long,
    };
    let spec = libc::itimerspec {
        it_interval: ts,
        it_value: ts,
    };
    // SAFETY: `spec` is a valid itimerspec that timerfd_settime(2) only reads; the old value
    // pointer may be null.
    if let Err(e) = cvt(unsafe { libc::timerfd_settime(fd, 0, &spec, std::ptr::null_mut()) }) {
        // SAFETY: fd was created above and is not used again.
        unsafe { libc::close(fd) };
        return Err(e);
    }
    Ok(fd)
}

/// Reads a timerfd's expiration count, which also re-arms a periodic timerfd (the kernel
/// restarts the interval timer on read, fs/timerfd.c). Not counted: it is the engine's clock
/// (at most 1000 reads/s per worker, 10/s with the default --timeout), not the I/O path.
pub(crate) fn drain_timerfd(fd: RawFd) {
    let mut expirations = 0u64;
    // SAFETY: reads at most 8 bytes into a live u64; an EAGAIN leaves it untouched.
    unsafe { libc::read(fd, (&mut expirations as *mut u64).cast(), 8) };
}

/// epoll_ctl(EPOLL_CTL_ADD) of `fd` for `events`, tagged with `token`.
pub(crate) fn epoll_add(
    c: &mut SyscallCounters,
    epfd: RawFd,
    fd: RawFd,
    events: u32,
    token: u64,
) -> io::Result<()> {
    let mut ev = libc::epoll_event { events, u64: token };
    // SAFETY: `ev` is a valid epoll_event that epoll_ctl(2) only reads.
    let ret = c.timed(Call::EpollCtl, || unsafe {
        libc::epoll_ctl(epfd, libc::EPOLL_CTL_ADD, fd, &mut ev)
    });
    cvt(ret).map(drop)
}

/// Waits for events on `epfd` for at most `timeout` (`None`: indefinitely), with nanosecond
/// resolution through epoll_pwait2(2) so that open-loop send times are not rounded to
/// milliseconds; falls back to epoll_wait(2) (ms, rounded up) where the kernel lacks it.
/// Returns the number of events written to the front of `events`; EINTR gives 0.
pub(crate) fn epoll_wait(
    c: &mut SyscallCounters,
    epfd: RawFd,
    events: &mut [libc::epoll_event],
    timeout: Option<Duration>,
) -> io::Result<usize> {
    static NO_PWAIT2: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let max = events.len().min(i32::MAX as usize) as libc::c_int;
    let ret = if !NO_PWAIT2.load(std::sync::atomic::Ordering::Relaxed) {
        let ts = timeout.map(|d| libc::timespec {
            tv_sec: d.as_secs().min(i64::MAX as u64) as libc::time_t,
            tv_nsec: d.subsec_nanos() as libc::c_long,
        });
        let ts_ptr = ts
            .as_ref()
            .map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: `events` is a writable array of `max` epoll_events, `ts_ptr` is null or
        // points to a live timespec, and a null sigmask means "do not change the mask".
        let r = c.timed(Call::EpollWait, || unsafe {
            libc::syscall(
                libc::SYS_epoll_pwait2,
                epfd,
                events.as_mut_ptr(),
                max,
                ts_ptr,
                std::ptr::null::<u8>(),
                0,
            )
        });
        if r < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) {
            NO_PWAIT2.store(true, std::sync::atomic::Ordering::Relaxed);
            return epoll_wait(c, epfd, events, timeout);
        }
        r as libc::c_int
    } else {
        let ms = timeout.map_or(-1, |d| {
            d.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as libc::c_int
        });
        // SAFETY: `events` is a writable array of `max` epoll_events.
        c.timed(Call::EpollWait, || unsafe {
            libc::epoll_wait(epfd, events.as_mut_ptr(), max, ms)
        })
    };
    match cvt(ret) {
        Ok(n) => Ok(n as usize),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_merge_subtract_and_table_only_used_calls() {
        let mut a = SyscallCounters::default();
        a.timed(Call::Connect, || ());
        a.timed(Call::Connect, || ());
        let base = a.clone();
        a.timed(Call::Close, || ());
        let mut b = a.since(&base);
        assert_eq!(b.count(Call::Connect), 0);
        assert_eq!(b.count(Call::Close), 1);
        b.merge(&a);
        let t = b.to_table();
        assert_eq!(t["connect"].count, 2);
        assert_eq!(t["close"].count, 2);
        assert!(!t.contains_key("read"));
    }
}
