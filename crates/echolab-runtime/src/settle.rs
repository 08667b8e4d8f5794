//! Waiting for a quiet machine before a cell or a calibration measurement, on the async
//! runtime: the condition and its figures are `echolab_core::quiet`'s. Only meaningful when
//! the engine runs on this machine, which is the only backend that makes hosts per cell.

pub use echolab_core::quiet::Condition;
use echolab_core::quiet::{Look, QuietWait, PROBE};
use echolab_core::results::Settle;

/// Waits until the machine meets `condition` ([`echolab_core::quiet`]), at most its deadline.
/// `None` when /proc/stat cannot be read (not Linux, or hidden). The wake-up probe of a
/// [`Condition::Steady`] wait blocks a thread, so it runs on the blocking pool.
pub async fn wait_for_quiet(condition: Condition) -> Option<Settle> {
    let mut wait = QuietWait::start(condition)?;
    loop {
        let wake = match condition {
            Condition::Idle => {
                tokio::time::sleep(PROBE).await;
                None
            }
            Condition::Steady => {
                tokio::task::spawn_blocking(move || echolab_core::quiet::pause_blocking(condition))
                    .await
                    .ok()
                    .flatten()
            }
        };
        match wait.look(wake) {
            Look::Waiting => {}
            Look::Over(s) => return Some(s),
            Look::Unreadable => return None,
        }
    }
}

/// echolab-up's warning for a measurement named `what` that starts after a wait that ended
/// without quiet (`None` when it was quiet).
pub fn busy_warning(what: &str, settle: &Settle) -> Option<String> {
    echolab_core::quiet::busy_warning("echolab-up", what, settle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_async_wait_ends_within_the_deadline() {
        let s = wait_for_quiet(Condition::Idle)
            .await
            .expect("/proc/stat is readable here");
        let deadline = echolab_core::quiet::QUIET_DEADLINE.as_secs_f64();
        assert!(
            s.waited_s >= 0.3 - 0.01 && s.waited_s <= deadline + 1.0,
            "{s:?}"
        );
        assert!(s.quiet || s.waited_s >= deadline, "gave up early: {s:?}");
    }

    #[tokio::test]
    async fn the_async_steady_wait_records_the_wake_ups() {
        let s = wait_for_quiet(Condition::Steady)
            .await
            .expect("/proc/stat is readable here");
        assert!(s.wake_p99_us.is_some(), "{s:?}");
        let deadline = echolab_core::quiet::STEADY_DEADLINE.as_secs_f64();
        assert!(s.quiet || s.waited_s >= deadline, "gave up early: {s:?}");
    }
}
