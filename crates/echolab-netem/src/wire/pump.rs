//! One direction of the wire: read packets from a TUN, hold each until the [`Shaper`] says it
//! leaves, write it back.
//!
//! One thread per direction, blocked in `epoll_wait` on three descriptors: the TUN (packets
//! arrive), a `timerfd` armed at the earliest release time (absolute `CLOCK_MONOTONIC`), and an
//! `eventfd` that asks it to stop. With nothing queued the timer is disarmed, so an idle wire
//! sleeps. The thread's timer slack is set to 1 ns (prctl(2) `PR_SET_TIMERSLACK`), since the
//! default 50 µs would be added to every release.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};

use super::shaper::{Shaper, Verdict};
use super::stats::DirectionCounters;
use echolab_core::hist;

/// Largest packet a TUN hands over without GSO: the 16-bit IP total length.
const MAX_PACKET: usize = 65_535;
/// Packets read per wake-up before releasing due ones, so a flood cannot starve releases.
const READ_BATCH: usize = 64;

/// `CLOCK_MONOTONIC` now, ns.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the live timespec passed.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn cvt(r: libc::c_int, what: &str) -> io::Result<libc::c_int> {
    if r < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("{what}: {e}")));
    }
    Ok(r)
}

/// A stop signal shared by the directions: an `eventfd` that becomes readable for good.
pub struct StopSignal(OwnedFd);

impl StopSignal {
    /// A new, unsignalled stop.
    ///
    /// # Errors
    /// eventfd(2) failed.
    pub fn new() -> io::Result<Arc<Self>> {
        // SAFETY: eventfd(2) with constant flags; the result is checked.
        let fd = cvt(
            unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) },
            "eventfd",
        )?;
        // SAFETY: `fd` is fresh and owned by nobody else.
        Ok(Arc::new(Self(unsafe { OwnedFd::from_raw_fd(fd) })))
    }

    /// Wakes every direction and makes it return.
    pub fn raise(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to an eventfd we own. A full counter (not
        // reachable with one write per stop) would only mean it is already raised.
        unsafe { libc::write(self.0.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// A packet held until its release time.
struct Held {
    release_ns: u64,
    seq: u64,
    data: Vec<u8>,
}

impl PartialEq for Held {
    fn eq(&self, o: &Self) -> bool {
        (self.release_ns, self.seq) == (o.release_ns, o.seq)
    }
}
impl Eq for Held {}
impl PartialOrd for Held {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Held {
    // Equal release times leave in arrival order.
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.release_ns, self.seq).cmp(&(o.release_ns, o.seq))
    }
}

/// One direction: its TUN, shaper and counters.
pub struct Pump {
    /// `"uplink"` or `"downlink"`, for errors.
    pub name: &'static str,
    /// The TUN descriptor (non-blocking).
    pub tun: OwnedFd,
    /// The link model.
    pub shaper: Shaper,
    /// Shared with the reporting thread.
    pub counters: Arc<Mutex<DirectionCounters>>,
}

const TOKEN_TUN: u64 = 1;
const TOKEN_TIMER: u64 = 2;
const TOKEN_STOP: u64 = 3;

fn epoll_add(ep: RawFd, fd: RawFd, token: u64) -> io::Result<()> {
    let mut ev = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: token,
    };
    // SAFETY: registers a live descriptor with a live epoll instance; `ev` outlives the call.
    cvt(
        unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev) },
        "epoll_ctl",
    )
    .map(|_| ())
}

fn arm_timer(timer: RawFd, at_ns: u64) -> io::Result<()> {
    let spec = libc::itimerspec {
        it_interval: libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        },
        // A zero value would disarm; the earliest real release time is never 0.
        it_value: libc::timespec {
            tv_sec: (at_ns / 1_000_000_000) as i64,
            tv_nsec: (at_ns % 1_000_000_000) as i64,
        },
    };
    // SAFETY: `spec` is a valid itimerspec for the call; the old value is not requested.
    cvt(
        unsafe {
            libc::timerfd_settime(timer, libc::TFD_TIMER_ABSTIME, &spec, std::ptr::null_mut())
        },
        "timerfd_settime",
    )
    .map(|_| ())
}

/// Real-time priority (SCHED_FIFO) for the calling thread: a timer wake-up then preempts
/// whatever runs on the CPU at once, instead of waiting for the fair scheduler's next slice
/// (measured on this 2-core host: release p99 of milliseconds under bulk TCP without it).
/// The thread sleeps whenever nothing is due, and the kernel's RT throttling
/// (`sched_rt_runtime_us`) bounds it even under a flood. Needs CAP_SYS_NICE.
fn realtime_priority() -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 50 };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param for the call.
    cvt(
        unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) },
        "sched_setscheduler(SCHED_FIFO)",
    )
    .map(|_| ())
}

impl Pump {
    /// Carries packets until `stop` is raised.
    ///
    /// # Errors
    /// A TUN read or an epoll/timer call failed; the message names the direction.
    pub fn run(mut self, stop: Arc<StopSignal>) -> io::Result<()> {
        // SAFETY: prctl(PR_SET_TIMERSLACK) only changes this thread's timer slack.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
        if let Err(e) = realtime_priority() {
            eprintln!("echolab-netem wire: {}: no real-time priority ({e}); release times may slip by milliseconds when the host's CPUs are busy", self.name);
        }
        // SAFETY: epoll_create1/timerfd_create with constant flags; results are checked and
        // immediately owned.
        let ep = unsafe {
            OwnedFd::from_raw_fd(cvt(
                libc::epoll_create1(libc::EPOLL_CLOEXEC),
                "epoll_create1",
            )?)
        };
        // SAFETY: as above.
        let timer = unsafe {
            OwnedFd::from_raw_fd(cvt(
                libc::timerfd_create(
                    libc::CLOCK_MONOTONIC,
                    libc::TFD_CLOEXEC | libc::TFD_NONBLOCK,
                ),
                "timerfd_create",
            )?)
        };
        epoll_add(ep.as_raw_fd(), self.tun.as_raw_fd(), TOKEN_TUN)?;
        epoll_add(ep.as_raw_fd(), timer.as_raw_fd(), TOKEN_TIMER)?;
        epoll_add(ep.as_raw_fd(), stop.fd(), TOKEN_STOP)?;

        let mut queue: BinaryHeap<Reverse<Held>> = BinaryHeap::new();
        let mut pool: Vec<Vec<u8>> = Vec::new();
        let mut scratch = vec![0u8; MAX_PACKET];
        let mut armed_for: Option<u64> = None;
        let mut seq = 0u64;
        let mut tun_readable = false;
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 4];
        let name = self.name;
        loop {
            // Only sleep when the TUN has been drained; otherwise poll without blocking.
            let timeout = if tun_readable { 0 } else { -1 };
            // SAFETY: `events` is a live array of the length passed.
            let n = unsafe {
                libc::epoll_wait(
                    ep.as_raw_fd(),
                    events.as_mut_ptr(),
                    events.len() as i32,
                    timeout,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(io::Error::new(e.kind(), format!("{name}: epoll_wait: {e}")));
            }
            for ev in &events[..n as usize] {
                match ev.u64 {
                    TOKEN_STOP => return Ok(()),
                    TOKEN_TUN => tun_readable = true,
                    _ => {
                        let mut expirations = 0u64;
                        // SAFETY: reads 8 bytes into a live u64; EAGAIN (already read) is harmless.
                        unsafe {
                            libc::read(timer.as_raw_fd(), (&mut expirations as *mut u64).cast(), 8)
                        };
                        armed_for = None;
                    }
                }
            }
            let mut c = self.counters.lock().unwrap_or_else(|p| p.into_inner());
            if tun_readable {
                for _ in 0..READ_BATCH {
                    // SAFETY: reads at most `scratch.len()` bytes into the live scratch buffer.
                    let r = unsafe {
                        libc::read(
                            self.tun.as_raw_fd(),
                            scratch.as_mut_ptr().cast(),
                            scratch.len(),
                        )
                    };
                    if r < 0 {
                        let e = io::Error::last_os_error();
                        match e.kind() {
                            io::ErrorKind::WouldBlock => {
                                tun_readable = false;
                                break;
                            }
                            io::ErrorKind::Interrupted => continue,
                            _ => {
                                return Err(io::Error::new(
                                    e.kind(),
                                    format!("{name}: read from TUN: {e}"),
                                ))
                            }
                        }
                    }
                    let len = r as usize;
                    match self.shaper.admit(now_ns(), len, queue.len()) {
                        Verdict::Lost => c.drops_loss += 1,
                        Verdict::QueueFull => c.drops_queue += 1,
                        Verdict::Release(release_ns) => {
                            let mut data = pool.pop().unwrap_or_default();
                            data.clear();
                            data.extend_from_slice(&scratch[..len]);
                            seq += 1;
                            queue.push(Reverse(Held {
                                release_ns,
                                seq,
                                data,
                            }));
                            c.peak_queue = c.peak_queue.max(queue.len() as u64);
                        }
                    }
                }
            }
            let now = now_ns();
            while queue.peek().is_some_and(|Reverse(h)| h.release_ns <= now) {
                let Reverse(h) = queue.pop().expect("peeked");
                let written_at = now_ns();
                // SAFETY: writes the held packet's bytes from a live buffer.
                let w = unsafe {
                    libc::write(self.tun.as_raw_fd(), h.data.as_ptr().cast(), h.data.len())
                };
                if w < 0 {
                    c.drops_write += 1;
                } else {
                    c.packets += 1;
                    c.bytes += h.data.len() as u64;
                    hist::record_ns(
                        &mut c.release_error,
                        written_at.saturating_sub(h.release_ns),
                    );
                }
                pool.push(h.data);
            }
            drop(c);
            match queue.peek() {
                Some(Reverse(h)) if armed_for != Some(h.release_ns) => {
                    arm_timer(timer.as_raw_fd(), h.release_ns)
                        .map_err(|e| io::Error::new(e.kind(), format!("{name}: {e}")))?;
                    armed_for = Some(h.release_ns);
                }
                _ => {}
            }
        }
    }
}
