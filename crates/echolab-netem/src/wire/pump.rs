//! One direction of the wire: read packets from a TUN, hold each until the [`Shaper`] says it
//! leaves, write it back.
//!
//! One thread per direction, blocked in `epoll_wait` on three descriptors: the TUN (packets
//! arrive), a `timerfd` armed a margin ([`WakeMargin`], at most `early_wake_ns`) before the
//! earliest release time (absolute `CLOCK_MONOTONIC`), and an `eventfd` that asks it to stop.
//! From the timer's expiry to the release the thread polls (`epoll_wait` with timeout 0, so
//! arrivals are still read at once) and writes the packet at its release time rather than a
//! wake-up latency after it. With
//! nothing queued the timer is disarmed, so an idle wire sleeps. The thread's timer slack is
//! set to 1 ns (prctl(2) `PR_SET_TIMERSLACK`), since the default 50 µs would be added to every
//! wake-up. Each packet's delay counts from when it entered the TUN, by the kernel's stamp
//! ([`super::arrival`]); where no packet socket can be opened, from when the thread read it,
//! minus the median of the [`probe`] it runs before carrying traffic.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{mpsc, Arc, Mutex};

use super::arrival::ArrivalTap;
use super::clock::now_ns;
use super::counters::DirectionTally;
use super::probe::{self, ProbePlan};
use super::shaper::{Shaper, Verdict};
use super::syscall::cvt;
use echolab_core::hist;
use std::time::Duration;

/// Largest packet a TUN hands over without GSO: the 16-bit IP total length.
const MAX_PACKET: usize = 65_535;
/// Packets read per wake-up before releasing due ones, so a flood cannot starve releases.
const READ_BATCH: usize = 64;
/// How long the TUN may stay undrained (every read batch full) before the direction gives up
/// real-time priority, ns. See [`Priority`].
const OVERLOAD_NS: u64 = 2_000_000;

/// A stop signal shared by the directions: an `eventfd` that becomes readable for good.
pub(crate) struct StopSignal(OwnedFd);

impl StopSignal {
    /// A new, unsignalled stop.
    ///
    /// # Errors
    /// eventfd(2) failed.
    pub(crate) fn new() -> io::Result<Arc<Self>> {
        // SAFETY: eventfd(2) with constant flags; the result is checked.
        let fd = cvt(
            unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) },
            "eventfd",
        )?;
        // SAFETY: `fd` is fresh and owned by nobody else.
        Ok(Arc::new(Self(unsafe { OwnedFd::from_raw_fd(fd) })))
    }

    /// Wakes every direction and makes it return.
    pub(crate) fn raise(&self) {
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

/// One direction: its TUN, shaper, counters and timing.
pub(crate) struct Pump {
    /// `"uplink"` or `"downlink"`, for errors.
    pub name: &'static str,
    /// The TUN descriptor (non-blocking).
    pub tun: OwnedFd,
    /// The link model.
    pub shaper: Shaper,
    /// Shared with the reporting thread.
    pub counters: Arc<Mutex<DirectionTally>>,
    /// The most a thread wakes before a release to poll until it, ns: a timer wake-up takes
    /// tens of µs on a busy host, so waking ahead and polling the rest (TUN included) makes
    /// the release time exact. The margin actually used tracks the wake-ups' lateness
    /// ([`WakeMargin`]), or a share of a long wait ([`WakeMargin::IDLE_SHARE`]), below this
    /// cap. Polling happens only while a release is that close,
    /// so an idle wire still sleeps.
    pub early_wake_ns: u64,
    /// The self-probe at startup, whose median becomes the shaper's compensation.
    pub probe: ProbePlan,
    /// Told once the self-probe is done (with its error, if any); the wire installs the
    /// traffic rules only then, so probes and traffic never mix.
    pub probed: mpsc::Sender<Result<(), String>>,
    /// The kernel's arrival stamps for this direction's TUN; without them a packet's delay
    /// counts from when it was read, and the self-probe's median is subtracted instead.
    pub tap: Option<ArrivalTap>,
    /// The address this direction translates, when the link masquerades ([`super::nat`]);
    /// applied after the arrival stamp is matched, which looks at the packet as it came.
    pub rewrite: Option<super::nat::Rewrite>,
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

/// The early-wake margin: a running estimate of the timer's wake-up lateness at quantile
/// [`WakeMargin::QUANTILE`], never above the configured cap. Waking that far ahead means most
/// wake-ups land before the release and poll only the difference, instead of every wake-up
/// polling the whole cap (which, at lan100's 123 µs per full-size packet, took a third of a
/// core per direction and cost TCP goodput on a 2-core host).
///
/// The estimate follows the deterministic form of Frugal-1U (Ma, Muthukrishnan and Sandler,
/// "Frugal Streaming for Estimating Quantiles", 2013): up by `STEP × q` after a later wake-up,
/// down by `STEP × (1 − q)` after an earlier one, which settles where a fraction `1 − q` of
/// wake-ups are later than the estimate.
struct WakeMargin {
    estimate_ns: u64,
    cap_ns: u64,
}

impl WakeMargin {
    const QUANTILE: f64 = 0.9;
    const STEP_NS: f64 = 2_000.0;

    /// Where the estimate starts: 50 µs, the wake-up lateness of a busy host (42–57 µs p99
    /// at lan100 on the 2-core development host). Starting at a larger cap would make every
    /// wire poll that long per release until the estimate came down, 0.2 µs per wake-up,
    /// which under bulk traffic took the CPU that TCP needed (lan100 goodput fell below its
    /// tolerance in 2 of 3 runs with a 400 µs start).
    const START_NS: u64 = 50_000;

    fn new(cap_ns: u64) -> Self {
        Self {
            estimate_ns: cap_ns.min(Self::START_NS),
            cap_ns,
        }
    }

    fn get(&self) -> u64 {
        self.estimate_ns.min(self.cap_ns)
    }

    /// The share of a long wait the thread spends polling before the release it waits for.
    ///
    /// A wait of milliseconds lets the CPU halt, and a halted virtual CPU wakes far later
    /// than a busy one: at crossnet (10 ms one way) the wire's own release error had p99
    /// 158–317 µs with the estimate's margin alone, against 4–12 µs when other work kept
    /// both CPUs from halting (2-core AMD EPYC VM, `wire_perf --section delay`). The
    /// estimate cannot learn that tail: a flow held that long gives one wake-up per packet,
    /// and a p99 needs thousands. Waking this share of the wait ahead (up to the cap) covers
    /// it for waits of about 10 ms and longer, and costs at most this share of one core per
    /// direction, only while packets are held that long; a wait shorter than about 1.7 ms
    /// keeps the estimate's margin.
    const IDLE_SHARE: f64 = 0.03;

    /// The part of the margin a wait of `wait_ns` (from when its release became the next one
    /// to that release) asks for by [`Self::IDLE_SHARE`], ns.
    fn idle_part(wait_ns: u64) -> u64 {
        (wait_ns as f64 * Self::IDLE_SHARE) as u64
    }

    /// The margin before a release whose wait asked for `idle_part_ns`: the larger of that
    /// and the estimate, never above the cap.
    fn before(&self, idle_part_ns: u64) -> u64 {
        self.get().max(idle_part_ns).min(self.cap_ns)
    }

    /// Takes one wake-up's lateness: epoll's return minus the time the timer was set for, ns.
    fn observe(&mut self, lateness_ns: u64) {
        let up = (Self::STEP_NS * Self::QUANTILE) as u64;
        let down = (Self::STEP_NS * (1.0 - Self::QUANTILE)) as u64;
        self.estimate_ns = if lateness_ns > self.estimate_ns {
            (self.estimate_ns + up).min(self.cap_ns)
        } else {
            self.estimate_ns.saturating_sub(down)
        };
    }
}

/// The idle part of the margin before the next release ([`WakeMargin::idle_part`]), fixed
/// when that release became the next one: measured again at each wake-up, the wait would
/// look shorter each time and the thread would re-arm its timer ever closer instead of
/// polling.
#[derive(Debug, Default)]
struct HeadWait {
    /// The release, ns, and the idle part computed when it became the next one.
    head: Option<(u64, u64)>,
}

impl HeadWait {
    /// The idle part for `next_release` (ns, none when nothing is held) at `now_ns`.
    fn idle_part(&mut self, next_release: Option<u64>, now_ns: u64) -> u64 {
        match (next_release, self.head) {
            (Some(r), Some((h, part))) if r == h => part,
            (Some(r), _) => {
                let part = WakeMargin::idle_part(r.saturating_sub(now_ns));
                self.head = Some((r, part));
                part
            }
            (None, _) => 0,
        }
    }
}

/// The SCHED_FIFO priority of the direction threads: 50, the priority the kernel gives
/// threaded interrupt handlers (`MAX_RT_PRIO / 2`, kernel/irq/manage.c), so the wire runs
/// ahead of every fair-scheduled task but not ahead of the interrupts that deliver packets.
const REALTIME_PRIORITY: libc::c_int = 50;

/// Real-time priority (SCHED_FIFO) for the calling thread: a timer wake-up then preempts
/// whatever runs on the CPU at once, instead of waiting for the fair scheduler's next slice
/// (measured on this 2-core host: release p99 of milliseconds under bulk TCP without it).
/// The thread sleeps whenever nothing is due, and the kernel's RT throttling
/// (`sched_rt_runtime_us`) bounds it even under a flood. Needs CAP_SYS_NICE.
fn realtime_priority() -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: REALTIME_PRIORITY,
    };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param for the call.
    cvt(
        unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) },
        "sched_setscheduler(SCHED_FIFO)",
    )
    .map(|_| ())
}

/// The direction thread's scheduling class: real-time while it waits for release times, fair
/// while it is overloaded.
///
/// Real-time priority buys exact wake-ups, but a thread that never sleeps keeps its CPU from
/// every fair-scheduled task. Under a packet flood the wire never sleeps, and it is the one
/// that wakes the receiving application (its TUN write delivers the packet), with a
/// synchronous wake-up, which the scheduler serves on the waker's CPU
/// (`wake_affine_idle()`, kernel/sched/fair.c): the receiver then waits behind the wire and
/// its socket buffer overflows. Measured with `wire_perf --section rate` on 2 cores: the
/// receiver got 6% of a CPU and 0.26 of plain forwarding's packet rate. So once the TUN has
/// stayed undrained for [`OVERLOAD_NS`] (packets arrive faster than the wire carries them;
/// release times are lost anyway), the thread takes the fair class and shares its CPU; it
/// takes real-time priority back before it next sleeps.
struct Priority {
    realtime: bool,
    /// Since when every read batch was full, ns (`None` while the TUN drains).
    undrained_since: Option<u64>,
    /// When the current fair spell began, ns.
    fair_since: u64,
}

impl Priority {
    /// The state after [`realtime_priority`] succeeded (`realtime`) or failed.
    fn new(realtime: bool) -> Self {
        Self {
            realtime,
            undrained_since: None,
            fair_since: 0,
        }
    }

    /// Takes one read pass's outcome at `now_ns`: `drained` when the TUN ran empty. Gives up
    /// real-time priority once the TUN has been undrained for [`OVERLOAD_NS`]; true when it
    /// did so now.
    fn after_reads(&mut self, drained: bool, now_ns: u64) -> bool {
        if drained {
            self.undrained_since = None;
            return false;
        }
        let since = *self.undrained_since.get_or_insert(now_ns);
        if !self.realtime || now_ns.saturating_sub(since) < OVERLOAD_NS {
            return false;
        }
        let fair = libc::sched_param { sched_priority: 0 };
        // SAFETY: pid 0 is the calling thread; `fair` is a valid sched_param for SCHED_OTHER.
        if unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &fair) } != 0 {
            return false;
        }
        self.realtime = false;
        self.fair_since = now_ns;
        true
    }

    /// Before the thread sleeps: takes real-time priority back after a fair spell, and
    /// returns that spell's length, ns.
    fn before_sleep(&mut self, now_ns: u64) -> Option<u64> {
        if self.realtime || self.fair_since == 0 {
            return None;
        }
        realtime_priority().ok()?;
        self.realtime = true;
        self.undrained_since = None;
        Some(now_ns.saturating_sub(self.fair_since))
    }
}

impl Pump {
    /// Carries packets until `stop` is raised.
    ///
    /// # Errors
    /// A TUN read or an epoll/timer call failed; the message names the direction.
    pub(crate) fn run(mut self, stop: Arc<StopSignal>) -> io::Result<()> {
        // SAFETY: prctl(PR_SET_TIMERSLACK) only changes this thread's timer slack.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
        let realtime = realtime_priority();
        if let Err(e) = &realtime {
            eprintln!("echolab-netem wire: {}: no real-time priority ({e}); release times may slip by milliseconds when the host's CPUs are busy", self.name);
        }
        self.counters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .scheduling = match &realtime {
            Ok(()) => format!("real-time (SCHED_FIFO {REALTIME_PRIORITY})"),
            Err(e) => format!("fair: {e}"),
        };
        let mut priority = Priority::new(realtime.is_ok());
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
        let mut scratch = vec![0u8; MAX_PACKET];
        // The probe waits on the TUN alone; a stop raised meanwhile stays pending in the
        // eventfd and is seen at the loop's first wait, at most the probe's deadline later.
        self.self_probe(ep.as_raw_fd(), &mut scratch);
        epoll_add(ep.as_raw_fd(), timer.as_raw_fd(), TOKEN_TIMER)?;
        epoll_add(ep.as_raw_fd(), stop.fd(), TOKEN_STOP)?;

        let mut queue: BinaryHeap<Reverse<Held>> = BinaryHeap::new();
        let mut pool: Vec<Vec<u8>> = Vec::new();
        let mut armed_for: Option<u64> = None;
        let mut seq = 0u64;
        let mut tun_readable = false;
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 4];
        let name = self.name;
        let mut margin = WakeMargin::new(self.early_wake_ns);
        let mut head = HeadWait::default();
        loop {
            let next_release = queue.peek().map(|Reverse(h)| h.release_ns);
            let now = now_ns();
            let early = margin.before(head.idle_part(next_release, now));
            // Poll without blocking while the TUN has not been drained or the next release is
            // within the early-wake margin; otherwise sleep until the timer, armed `early`
            // ahead of the release.
            let polling = tun_readable || next_release.is_some_and(|r| r <= now + early);
            if !polling {
                if let Some(wake_at) = next_release.map(|r| r - early) {
                    if armed_for != Some(wake_at) {
                        arm_timer(timer.as_raw_fd(), wake_at)
                            .map_err(|e| io::Error::new(e.kind(), format!("{name}: {e}")))?;
                        armed_for = Some(wake_at);
                    }
                }
            }
            if !polling {
                if let Some(spell_ns) = priority.before_sleep(now_ns()) {
                    let mut c = self.counters.lock().unwrap_or_else(|p| p.into_inner());
                    c.fair_share_ns += spell_ns;
                }
            }
            let timeout = if polling { 0 } else { -1 };
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
                        if let Some(wake_at) = armed_for.take() {
                            margin.observe(now_ns().saturating_sub(wake_at));
                        }
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
                    if len == 0 || scratch[0] >> 4 != 4 {
                        // Empty or not IPv4: the TUNs' own IPv6 chatter (router solicitations, MLD
                        // reports), never traffic between the hosts (the wire's rules are
                        // IPv4). Shaping it would take draws from the loss and jitter
                        // generator, so a seeded run's traffic would get other draws.
                        c.not_ipv4 += 1;
                        continue;
                    }
                    let read_at = now_ns();
                    let arrived = match self.tap.as_mut() {
                        None => read_at,
                        Some(tap) => match tap.arrival_of(&scratch[..len]) {
                            Some(at) => {
                                let at = at.min(read_at);
                                // As the release error below: only 0 ns is clamped, to 1 ns.
                                let _ = hist::record_ns(&mut c.tun_wait, read_at - at);
                                at
                            }
                            None => {
                                c.unstamped += 1;
                                read_at
                            }
                        },
                    };
                    match self.shaper.admit(arrived, len, queue.len()) {
                        Verdict::Lost => c.drops_loss += 1,
                        Verdict::QueueFull => c.drops_queue += 1,
                        Verdict::Release(release_ns) => {
                            let mut data = pool.pop().unwrap_or_default();
                            data.clear();
                            data.extend_from_slice(&scratch[..len]);
                            if let Some(r) = &self.rewrite {
                                if r.apply(&mut data) {
                                    c.translated += 1;
                                }
                            }
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
                if priority.after_reads(!tun_readable, now_ns()) {
                    c.fair_share_spells += 1;
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
                    // A release on time (0 ns late) is recorded at the histogram's 1 ns
                    // floor, within its resolution; a packet is never held an hour.
                    let _ = hist::record_ns(
                        &mut c.release_error,
                        written_at.saturating_sub(h.release_ns),
                    );
                }
                pool.push(h.data);
            }
            drop(c);
        }
    }

    /// Runs the self-probe, sets the shaper's compensation to its median and records both,
    /// then tells the wire. A failed probe leaves the wire uncompensated (said on stderr and
    /// visible as `compensation_us: 0` in the stats); it still carries packets.
    fn self_probe(&mut self, ep: RawFd, scratch: &mut [u8]) {
        let outcome = probe::measure(self.tun.as_fd(), ep, scratch, self.probe);
        let mut c = self.counters.lock().unwrap_or_else(|p| p.into_inner());
        c.early_wake_ns = self.early_wake_ns;
        c.kernel_stamps = self.tap.is_some();
        let report = match outcome {
            Ok(samples) => {
                let median = if samples.is_empty() {
                    0
                } else {
                    samples.value_at_quantile(0.5)
                };
                self.shaper.set_compensation(Duration::from_nanos(median));
                c.compensation_ns = median;
                c.self_probe = samples;
                Ok(())
            }
            Err(e) => Err(format!("{}: self-probe: {e}", self.name)),
        };
        drop(c);
        let _ = self.probed.send(report);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priority_turns_fair_after_two_undrained_milliseconds_and_back_before_sleeping() {
        let mut p = Priority::new(true);
        assert!(
            !p.after_reads(false, 10_000_000),
            "first full batch starts the clock"
        );
        assert!(
            !p.after_reads(false, 11_999_999),
            "1.999 ms undrained is not overload"
        );
        assert!(
            !p.after_reads(true, 11_999_999),
            "a drained TUN resets the clock"
        );
        assert!(!p.after_reads(false, 12_000_000));
        assert!(!p.after_reads(false, 13_999_999));
        assert!(
            p.after_reads(false, 14_000_000),
            "2 ms undrained since 12 ms"
        );
        assert!(!p.realtime);
        assert!(
            !p.after_reads(false, 20_000_000),
            "already fair: no second spell"
        );
        // Taking real-time priority back needs CAP_SYS_NICE; without it the thread stays fair
        // and the spell goes on.
        match p.before_sleep(14_500_000) {
            Some(spell) => {
                assert_eq!(spell, 500_000);
                assert!(p.realtime);
                assert_eq!(p.before_sleep(15_000_000), None, "no spell to end");
                let fair = libc::sched_param { sched_priority: 0 };
                // SAFETY: back to the fair class for the rest of this test thread.
                unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &fair) };
            }
            None => assert!(!p.realtime),
        }
        let mut never = Priority::new(false);
        assert!(!never.after_reads(false, 0));
        assert!(
            !never.after_reads(false, 5_000_000),
            "without real-time priority nothing to give up"
        );
        assert_eq!(never.before_sleep(6_000_000), None);
    }

    #[test]
    fn wake_margin_settles_at_the_ninetieth_percentile_and_respects_the_cap() {
        let mut m = WakeMargin::new(50_000);
        assert_eq!(m.get(), 50_000, "starts at 50 us");
        let mut wide = WakeMargin::new(400_000);
        assert_eq!(wide.get(), 50_000, "starts at 50 us below a larger cap");
        // Wake-ups 300 us late raise it by 1.8 us each: 100 of them reach 230 us.
        for _ in 0..100 {
            wide.observe(300_000);
        }
        assert_eq!(wide.get(), 230_000);
        // Lateness cycling evenly over 0..20 us: the 90th percentile is 18 us.
        for i in 0..20_000u64 {
            m.observe((i * 7_919) % 20_000);
        }
        assert!((16_000..=20_000).contains(&m.get()), "{}", m.get());
        // Wake-ups always later than the cap: the margin stays at the cap.
        for _ in 0..1000 {
            m.observe(80_000);
        }
        assert_eq!(m.get(), 50_000);
        let mut off = WakeMargin::new(0);
        off.observe(30_000);
        assert_eq!(off.get(), 0, "a zero cap turns early wake-up off");
        assert_eq!(off.before(WakeMargin::idle_part(20_000_000)), 0);
    }

    #[test]
    fn a_long_wait_wakes_a_share_of_it_ahead_within_the_cap() {
        let m = WakeMargin::new(400_000);
        // 10 ms: 3% is 300 us, above the 50 us estimate.
        assert_eq!(m.before(WakeMargin::idle_part(10_000_000)), 300_000);
        // 1 ms: 30 us, below the estimate, which rules.
        assert_eq!(m.before(WakeMargin::idle_part(1_000_000)), 50_000);
        // 100 ms: 3 ms, held to the cap.
        assert_eq!(m.before(WakeMargin::idle_part(100_000_000)), 400_000);
        assert_eq!(m.before(0), 50_000);
    }

    #[test]
    fn the_idle_part_is_fixed_when_a_release_becomes_the_next_one() {
        let mut h = HeadWait::default();
        assert_eq!(h.idle_part(None, 0), 0);
        // Held 10 ms from t = 1 s: 300 us, and still 300 us when woken 9.7 ms later.
        assert_eq!(h.idle_part(Some(1_010_000_000), 1_000_000_000), 300_000);
        assert_eq!(h.idle_part(Some(1_010_000_000), 1_009_700_000), 300_000);
        // An earlier release arrives: its own wait counts, 2 ms -> 60 us.
        assert_eq!(h.idle_part(Some(1_009_800_000), 1_007_800_000), 60_000);
        // The queue empties and a packet comes later.
        assert_eq!(h.idle_part(None, 1_020_000_000), 0);
        assert_eq!(h.idle_part(Some(1_030_000_000), 1_020_000_000), 300_000);
        // A release already due waits nothing.
        let mut late = HeadWait::default();
        assert_eq!(late.idle_part(Some(5), 10), 0);
    }
}
