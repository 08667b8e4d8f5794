//! Waiting for a quiet machine before a cell: making fresh hosts sets the engine, containerd
//! and runc to work (namespaces, cgroups, mounts, the new containers' first exec) for a while
//! after the API calls return; a cell that starts meanwhile shares the CPUs with that work.
//! Measured on the 2-core development machine (exp31 on loopback, 10 repetitions per cell):
//! cells started right after fresh hosts had a QPS CV of 12–21% and 15% lower means than
//! cells on hosts made once (CV 3–6%).
//!
//! The condition is read from the kernel: the share of all CPUs' time spent busy (not idle or
//! iowait) in /proc/stat (proc(5)) over consecutive [`PROBE`] intervals. The lab's hosts are
//! idle between cells (a hold process and nothing else), so a busy share above [`QUIET_BUSY`]
//! is someone else's work. Only meaningful when the engine runs on this machine, which is the
//! only backend that makes hosts per cell.

use std::time::{Duration, Instant};

use echolab_core::results::Settle;

/// How long one look at the CPUs lasts.
pub(crate) const PROBE: Duration = Duration::from_millis(100);
/// Busy share of all CPUs below which the machine counts as quiet.
pub(crate) const QUIET_BUSY: f64 = 0.10;
/// Consecutive quiet probes needed.
pub(crate) const QUIET_PROBES: u32 = 3;
/// The most a cell waits for quiet; it then starts anyway, and the record says so.
pub(crate) const QUIET_DEADLINE: Duration = Duration::from_secs(10);

/// Busy and total jiffies of all CPUs from the `cpu` line of /proc/stat: busy is everything
/// but idle (4th value) and iowait (5th).
pub(crate) fn busy_total(stat: &str) -> Option<(u64, u64)> {
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

/// Waits until the machine has been quiet for [`QUIET_PROBES`] probes in a row, at most
/// [`QUIET_DEADLINE`]. `None` when /proc/stat cannot be read (not Linux, or hidden).
pub(crate) async fn wait_for_quiet() -> Option<Settle> {
    let start = Instant::now();
    let mut last = read()?;
    let mut streak = 0;
    loop {
        tokio::time::sleep(PROBE).await;
        let now = read()?;
        let (busy, total) = (now.0.saturating_sub(last.0), now.1.saturating_sub(last.1));
        last = now;
        let share = if total == 0 {
            0.0
        } else {
            busy as f64 / total as f64
        };
        streak = if share < QUIET_BUSY { streak + 1 } else { 0 };
        let waited = start.elapsed();
        if streak >= QUIET_PROBES || waited >= QUIET_DEADLINE {
            return Some(Settle {
                waited_s: waited.as_secs_f64(),
                last_busy: share,
                quiet: streak >= QUIET_PROBES,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_is_all_but_idle_and_iowait() {
        // user nice system idle iowait irq softirq steal guest guest_nice
        let stat = "cpu  100 5 50 800 20 3 7 15 40 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n";
        // total = 100+5+50+800+20+3+7+15 = 1000 (guests are inside user); idle = 820.
        assert_eq!(busy_total(stat), Some((180, 1000)));
        assert_eq!(busy_total("cpu0 1 2 3\n"), None);
    }

    #[tokio::test]
    async fn an_idle_wait_ends_and_says_what_it_saw() {
        let s = wait_for_quiet().await.expect("/proc/stat is readable here");
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
}
