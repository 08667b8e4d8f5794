//! Waiting for a quiet machine before a measurement: making fresh hosts sets the engine,
//! containerd and runc to work (namespaces, cgroups, mounts, the new containers' first exec)
//! for a while after the API calls return, and tearing down network namespaces keeps a
//! kernel worker busy; a measurement that starts meanwhile shares the CPUs with that work.
//! Measured on the 2-core development machine (exp31 on loopback, 10 repetitions per cell):
//! cells started right after fresh hosts had a QPS CV of 12–21% and 15% lower means than
//! cells on hosts made once (CV 3–6%).
//!
//! The condition is read from the kernel: the share of all CPUs' time spent busy (not idle or
//! iowait) in /proc/stat (proc(5)) over consecutive [`PROBE`] intervals. /proc/stat is not
//! namespaced, so inside a container it still describes the whole machine. The lab's hosts
//! are idle between measurements (a hold process and nothing else), so a busy share above
//! [`QUIET_BUSY`] is someone else's work.
//!
//! A calibration needs more than idle CPUs: it measures time, and on a virtual machine the
//! host can take the CPUs away (steal) while the guest's own /proc/stat still looks idle at
//! its 10 ms tick. So the wait before a calibration ([`Condition::Steady`]) also measures
//! what a timing measurement suffers: how late the thread's timer wake-ups are
//! ([`wake_lateness`]). Measured on a 2-core CI VM (`nanosleep` of 100 µs with
//! 1 ns timer slack, 0.5 s windows): p99 lateness 55–200 µs in quiet phases, 300–1,040 µs
//! while steal was 3–10% of CPU time; in the same minutes plain forwarding between two
//! namespaces had a median RTT of 64–100 µs, or 305–338 µs, and the wire's lan100 blocks
//! missed their added delay by +180 to +520 µs in every block of a test run.
//!
//! Written once for its two users: echolab-up (before cells and calibrations, async) and
//! `echolab-netem calibrate` (before a repeated attempt, blocking); [`QuietWait`] is the
//! state, the callers bring their own pause ([`pause_blocking`] or an async equivalent).

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// How long one look at the CPUs lasts.
pub const PROBE: Duration = Duration::from_millis(100);
/// Busy share of all CPUs below which the machine counts as quiet.
pub const QUIET_BUSY: f64 = 0.10;
/// Consecutive quiet probes needed.
pub const QUIET_PROBES: u32 = 3;
/// The most a wait lasts; the measurement then starts anyway, and the record says so.
pub const QUIET_DEADLINE: Duration = Duration::from_secs(10);
/// The most a wait for a steady host lasts: steal phases on the CI VM lasted 10–20 s.
pub const STEADY_DEADLINE: Duration = Duration::from_secs(20);
/// What each sleep of the wake-up probe asks for.
pub const WAKE_SLEEP: Duration = Duration::from_micros(100);
/// p99 of the timer's wake-up lateness, µs, above which the host is not steady enough for a
/// timing measurement (figures in the module's documentation: quiet phases stay below 200).
pub const STEADY_WAKE_P99_US: f64 = 300.0;

/// What a wait waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Condition {
    /// CPUs idle: less than [`QUIET_BUSY`] busy (before a cell).
    Idle,
    /// CPUs idle and timer wake-ups on time: p99 lateness at most [`STEADY_WAKE_P99_US`]
    /// (before a calibration, which measures time).
    Steady,
}

/// How late a thread's timer wake-ups were over a window: the lateness of each
/// `nanosleep(WAKE_SLEEP)` past its asked-for length.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WakeLateness {
    /// Median lateness, µs.
    pub p50_us: f64,
    /// 99th percentile of the lateness, µs.
    pub p99_us: f64,
    /// Sleeps measured.
    pub samples: usize,
}

/// Measures the calling thread's timer wake-up lateness for `window`: back-to-back sleeps of
/// [`WAKE_SLEEP`] with the thread's timer slack at 1 ns (prctl(2) `PR_SET_TIMERSLACK`;
/// restored after), so the lateness is the scheduler's and the host's, not the default 50 µs
/// of slack. Blocks the thread for `window`; costs a few µs of CPU per sleep.
pub fn wake_lateness(window: Duration) -> WakeLateness {
    // SAFETY: prctl with PR_GET_TIMERSLACK/PR_SET_TIMERSLACK only reads or sets this
    // thread's timer slack.
    let slack = unsafe { libc::prctl(libc::PR_GET_TIMERSLACK, 0, 0, 0, 0) };
    // SAFETY: as above; sets this thread's slack to 1 ns.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
    let start = Instant::now();
    let mut late_us = Vec::with_capacity(4096);
    while start.elapsed() < window {
        let t = Instant::now();
        std::thread::sleep(WAKE_SLEEP);
        let late = t.elapsed().saturating_sub(WAKE_SLEEP);
        late_us.push(late.as_secs_f64() * 1e6);
    }
    if slack > 0 {
        // SAFETY: as above; puts back the slack read before.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, slack as libc::c_ulong, 0, 0, 0) };
    }
    late_us.sort_by(f64::total_cmp);
    let at = |q: f64| {
        late_us
            .get(((late_us.len() as f64 - 1.0) * q).round() as usize)
            .copied()
            .unwrap_or(0.0)
    };
    WakeLateness {
        p50_us: at(0.5),
        p99_us: at(0.99),
        samples: late_us.len(),
    }
}

/// The wait for a quiet machine before a cell or a calibration measurement: how it ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Settle {
    /// Seconds waited.
    pub waited_s: f64,
    /// Busy share of all CPUs in the last probe (0..1).
    pub last_busy: f64,
    /// Whether the machine went quiet before the deadline (else the cell started anyway).
    pub quiet: bool,
    /// p99 of the timer's wake-up lateness in the last probe, µs ([`wake_lateness`]); only
    /// for a wait for a steady host ([`Condition::Steady`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_p99_us: Option<f64>,
}

/// Busy and total jiffies of all CPUs from the `cpu` line of /proc/stat: busy is everything
/// but idle (4th value) and iowait (5th). `None` when the line is missing or short.
pub fn busy_total(stat: &str) -> Option<(u64, u64)> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    if v.len() < 5 {
        return None;
    }
    // guest and guest_nice (9th, 10th) are already counted in user and nice.
    let total: u64 = v.iter().take(8).sum();
    let idle = v[3] + v[4];
    Some((total - idle, total))
}

fn read() -> Option<(u64, u64)> {
    busy_total(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// One wait for a quiet machine, looked at every [`PROBE`]: quiet once [`QUIET_PROBES`]
/// looks in a row met its [`Condition`], or over at the condition's deadline
/// ([`QUIET_DEADLINE`], [`STEADY_DEADLINE`]).
#[derive(Debug)]
pub struct QuietWait {
    condition: Condition,
    start: Instant,
    last: (u64, u64),
    streak: u32,
}

/// What one look saw.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Look {
    /// Not quiet yet, not over: pause [`PROBE`] and look again.
    Waiting,
    /// The wait is over (quiet, or the deadline came first).
    Over(Settle),
    /// /proc/stat could not be read.
    Unreadable,
}

impl QuietWait {
    /// Starts a wait for `condition`; `None` when /proc/stat cannot be read (not Linux, or
    /// hidden).
    pub fn start(condition: Condition) -> Option<Self> {
        Some(Self {
            condition,
            start: Instant::now(),
            last: read()?,
            streak: 0,
        })
    }

    /// What this wait waits for.
    pub fn condition(&self) -> Condition {
        self.condition
    }

    /// Looks at the CPUs' time since the last look (call it after a pause of [`PROBE`]);
    /// `wake` is the pause's wake-up lateness, which a [`Condition::Steady`] wait needs
    /// (without it a look is not steady).
    pub fn look(&mut self, wake: Option<WakeLateness>) -> Look {
        let Some(now) = read() else {
            return Look::Unreadable;
        };
        let (busy, total) = (
            now.0.saturating_sub(self.last.0),
            now.1.saturating_sub(self.last.1),
        );
        self.last = now;
        let share = if total == 0 {
            0.0
        } else {
            busy as f64 / total as f64
        };
        let on_time = match self.condition {
            Condition::Idle => true,
            Condition::Steady => wake.is_some_and(|w| w.p99_us <= STEADY_WAKE_P99_US),
        };
        self.streak = if share < QUIET_BUSY && on_time {
            self.streak + 1
        } else {
            0
        };
        let deadline = match self.condition {
            Condition::Idle => QUIET_DEADLINE,
            Condition::Steady => STEADY_DEADLINE,
        };
        let waited = self.start.elapsed();
        if self.streak >= QUIET_PROBES || waited >= deadline {
            Look::Over(Settle {
                waited_s: waited.as_secs_f64(),
                last_busy: share,
                quiet: self.streak >= QUIET_PROBES,
                wake_p99_us: match self.condition {
                    Condition::Idle => None,
                    Condition::Steady => wake.map(|w| w.p99_us),
                },
            })
        } else {
            Look::Waiting
        }
    }
}

/// The pause between two looks of a wait for `condition`, blocking the thread for [`PROBE`]:
/// a sleep, or for [`Condition::Steady`] the wake-up probe, whose figures the next look needs.
pub fn pause_blocking(condition: Condition) -> Option<WakeLateness> {
    match condition {
        Condition::Idle => {
            std::thread::sleep(PROBE);
            None
        }
        Condition::Steady => Some(wake_lateness(PROBE)),
    }
}

/// Waits for `condition`, blocking the thread; `None` when /proc/stat cannot be read.
pub fn wait_for_quiet_blocking(condition: Condition) -> Option<Settle> {
    let mut wait = QuietWait::start(condition)?;
    loop {
        let wake = pause_blocking(condition);
        match wait.look(wake) {
            Look::Waiting => {}
            Look::Over(s) => return Some(s),
            Look::Unreadable => return None,
        }
    }
}

/// The warning `program` prints for a measurement named `what` that starts after a wait that
/// ended without quiet (`None` when it was quiet).
pub fn busy_warning(program: &str, what: &str, settle: &Settle) -> Option<String> {
    if settle.quiet {
        return None;
    }
    let late = match settle.wake_p99_us {
        Some(p99) if p99 > STEADY_WAKE_P99_US => format!(
            ", and timer wake-ups were {p99:.0} us late at p99 (the host taking the CPUs away: steal)"
        ),
        _ => String::new(),
    };
    Some(format!(
        "{program}: warning: {what} starts on a busy machine (other processes used {:.0}% of the CPUs{late} after {:.0} s of waiting); its figures measure that too",
        settle.last_busy * 100.0,
        settle.waited_s
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_wait_that_ended_busy_is_warned_about_with_its_figures() {
        let quiet = Settle {
            waited_s: 0.3,
            last_busy: 0.05,
            quiet: true,
            ..Default::default()
        };
        assert_eq!(busy_warning("echolab-up", "the calibration", &quiet), None);
        let busy = Settle {
            waited_s: 10.2,
            last_busy: 0.456,
            quiet: false,
            ..Default::default()
        };
        assert_eq!(
            busy_warning("echolab-up", "the calibration", &busy).as_deref(),
            Some("echolab-up: warning: the calibration starts on a busy machine (other processes used 46% of the CPUs after 10 s of waiting); its figures measure that too")
        );
        // A steady wait that ended with late wake-ups says so; on-time ones are not mentioned.
        let stolen = Settle {
            waited_s: 20.1,
            last_busy: 0.04,
            quiet: false,
            wake_p99_us: Some(812.4),
        };
        assert_eq!(
            busy_warning("echolab-netem", "attempt 2", &stolen).as_deref(),
            Some("echolab-netem: warning: attempt 2 starts on a busy machine (other processes used 4% of the CPUs, and timer wake-ups were 812 us late at p99 (the host taking the CPUs away: steal) after 20 s of waiting); its figures measure that too")
        );
        let busy_on_time = Settle {
            wake_p99_us: Some(80.0),
            ..busy
        };
        assert_eq!(
            busy_warning("echolab-up", "the calibration", &busy_on_time),
            busy_warning("echolab-up", "the calibration", &busy)
        );
    }

    #[test]
    fn the_wake_probe_measures_its_window_and_restores_the_timer_slack() {
        // SAFETY: reads this thread's timer slack.
        let slack = || unsafe { libc::prctl(libc::PR_GET_TIMERSLACK, 0, 0, 0, 0) };
        let before = slack();
        let t = Instant::now();
        let w = wake_lateness(Duration::from_millis(50));
        let took = t.elapsed();
        assert_eq!(slack(), before, "timer slack not restored");
        assert!(took >= Duration::from_millis(50), "{took:?}");
        // Each sample is one sleep of at least WAKE_SLEEP, so a 50 ms window holds at most
        // 500 of them, and at least one.
        assert!((1..=500).contains(&w.samples), "{w:?}");
        assert!(0.0 <= w.p50_us && w.p50_us <= w.p99_us, "{w:?}");
    }

    #[test]
    fn a_steady_wait_is_not_quiet_without_wake_figures() {
        let mut wait = QuietWait::start(Condition::Steady).expect("/proc/stat");
        assert_eq!(wait.condition(), Condition::Steady);
        for _ in 0..QUIET_PROBES + 1 {
            assert_eq!(wait.look(None), Look::Waiting);
        }
        // Figures far beyond the bound do not count either.
        let late = WakeLateness {
            p50_us: 500.0,
            p99_us: STEADY_WAKE_P99_US + 1.0,
            samples: 100,
        };
        for _ in 0..QUIET_PROBES + 1 {
            assert_eq!(wait.look(Some(late)), Look::Waiting);
        }
    }

    #[test]
    fn busy_is_all_but_idle_and_iowait() {
        // user nice system idle iowait irq softirq steal guest guest_nice
        let stat = "cpu  100 5 50 800 20 3 7 15 40 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n";
        // total = 100+5+50+800+20+3+7+15 = 1000 (guests are inside user); idle = 820.
        assert_eq!(busy_total(stat), Some((180, 1000)));
        assert_eq!(busy_total("cpu0 1 2 3\n"), None);
    }

    #[test]
    fn an_idle_wait_ends_and_says_what_it_saw() {
        let s = wait_for_quiet_blocking(Condition::Idle).expect("/proc/stat is readable here");
        assert_eq!(s.wake_p99_us, None, "an idle wait does not probe wake-ups");
        assert!(s.waited_s >= 0.3 - 0.01, "three probes at least: {s:?}");
        assert!(s.waited_s <= QUIET_DEADLINE.as_secs_f64() + 1.0, "{s:?}");
        assert!((0.0..=1.0).contains(&s.last_busy), "{s:?}");
        if s.quiet {
            assert!(
                s.last_busy < QUIET_BUSY,
                "quiet, yet the last probe was busy: {s:?}"
            );
        } else {
            assert!(
                s.waited_s >= QUIET_DEADLINE.as_secs_f64(),
                "gave up early: {s:?}"
            );
        }
    }

    #[test]
    fn a_steady_wait_ends_within_its_deadline_with_the_wake_figures() {
        let s = wait_for_quiet_blocking(Condition::Steady).expect("/proc/stat is readable here");
        assert!(s.waited_s <= STEADY_DEADLINE.as_secs_f64() + 1.0, "{s:?}");
        let p99 = s.wake_p99_us.expect("a steady wait records the wake-ups");
        if s.quiet {
            assert!(
                p99 <= STEADY_WAKE_P99_US && s.last_busy < QUIET_BUSY,
                "{s:?}"
            );
        } else {
            assert!(
                s.waited_s >= STEADY_DEADLINE.as_secs_f64(),
                "gave up early: {s:?}"
            );
        }
    }
}
