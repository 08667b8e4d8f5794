//! Small fixtures the integration tests of several crates need: a scratch directory that goes
//! away with the test, and a bounded wait for a condition.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// A fresh directory under the system temp dir, removed with everything in it on drop, also
/// when the test panics.
///
/// Its name, `echolab-PREFIX-PID-N`, holds the process id and a counter, so tests running at
/// once (threads of one test binary, or several binaries) never share one, and the prefix tells
/// which test left a directory behind when a process was killed before its drops ran.
pub struct TempDir {
    path: PathBuf,
    keep_var: Option<&'static str>,
}

impl TempDir {
    /// Creates `echolab-{prefix}-{pid}-{n}` under [`std::env::temp_dir`], emptied first if a
    /// killed process with the same id left one.
    ///
    /// # Panics
    /// When the directory cannot be created: a test cannot go on without it.
    pub fn new(prefix: &str) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "echolab-{prefix}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
        Self {
            path,
            keep_var: None,
        }
    }

    /// The same directory, left in place on drop (its path printed on stderr) when the
    /// environment variable `var` is set: to look at what a test wrote, e.g. a rendered report.
    pub fn kept_when_set(mut self, var: &'static str) -> Self {
        self.keep_var = Some(var);
        self
    }

    /// The directory's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for TempDir {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if self.keep_var.is_some_and(|v| std::env::var_os(v).is_some()) {
            eprintln!("kept {}", self.path.display());
            return;
        }
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Polls `probe` until it gives a value and returns that value; a condition that only holds or
/// not is written `|| cond().then_some(())`.
///
/// # Panics
/// When `deadline` passes first, naming `what` (what the test waited for) and the deadline;
/// also when `probe` panics, which a probe may do to stop the wait early (a process it waits
/// on exited).
pub fn wait_until<T>(what: &str, deadline: Duration, mut probe: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + deadline;
    // Short at first, so that a condition about to hold is seen at once; longer later, so that
    // a wait of minutes (a Docker run) does not take CPU from the processes it waits for.
    let mut pause = Duration::from_millis(10);
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(
            Instant::now() < end,
            "timed out after {deadline:?} waiting for {what}"
        );
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// The shipped profile `netem/{name}.yaml` as a manifest records it, for tests that build a
/// manifest by hand.
///
/// # Panics
/// The shipped profile does not read (a test failure, naming the file).
pub fn recorded_profile(name: &str) -> echolab_core::profile::RecordedProfile {
    let relative = format!("netem/{name}.yaml");
    let path = crate::workspace_root().join(&relative);
    echolab_core::profile::RecordedProfile {
        profile: echolab_core::profile::Profile::load(&path).unwrap_or_else(|e| panic!("{e}")),
        path: relative,
    }
}

/// [`recorded_profile`] of `loopback`.
pub fn recorded_loopback_profile() -> echolab_core::profile::RecordedProfile {
    recorded_profile("loopback")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_temp_dir_is_fresh_per_call_and_gone_after_drop() {
        let (a, b) = (TempDir::new("fixtures"), TempDir::new("fixtures"));
        assert_ne!(a.path(), b.path());
        assert!(a.path().is_dir() && b.path().is_dir());
        std::fs::write(a.path().join("f"), "x").unwrap();
        let kept = a.path().to_path_buf();
        drop(a);
        assert!(!kept.exists(), "{}", kept.display());
    }

    #[test]
    fn wait_until_returns_the_probe_value() {
        let mut n = 0;
        let v = wait_until("the third probe", Duration::from_secs(5), || {
            n += 1;
            (n == 3).then_some(n * 10)
        });
        assert_eq!(v, 30);
    }

    #[test]
    #[should_panic(expected = "waiting for nothing at all")]
    fn wait_until_names_what_it_waited_for() {
        wait_until("nothing at all", Duration::from_millis(30), || None::<()>);
    }
}
