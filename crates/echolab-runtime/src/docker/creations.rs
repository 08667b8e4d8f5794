//! Engine calls that create objects (containers, networks) run to completion even when the
//! run that asked for them is cut short, and teardown waits for them before it lists what to
//! remove.
//!
//! Why: at Ctrl-C the launcher drops the run's future. A create request already sent goes on
//! in the engine, which makes the container after teardown has listed the run's containers,
//! so it stays behind (seen once in 13 interrupted runs: a route-helper container left in
//! state Created). Here the request is a task of its own, counted while it runs; dropping
//! the caller only drops the wait for its answer, and [`settled`] lets teardown wait until no
//! creation is left in flight, so the listing sees everything the run made.

use std::future::Future;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use tokio::sync::watch;

use bollard::Docker;

use super::deadlines::{gave_up, within, CALL};

/// A count of creations in flight, and a way to wait for it to reach 0.
pub struct Tracker(Arc<watch::Sender<usize>>);

/// This process's creations.
static CREATIONS: LazyLock<Tracker> = LazyLock::new(Tracker::new);

/// Counts one creation from construction to drop.
struct Counted(Arc<watch::Sender<usize>>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl Tracker {
    fn new() -> Self {
        Self(Arc::new(watch::channel(0).0))
    }

    fn count(&self) -> Counted {
        self.0.send_modify(|n| *n += 1);
        Counted(self.0.clone())
    }

    /// Creations in flight now.
    pub fn in_flight(&self) -> usize {
        *self.0.borrow()
    }

    /// Runs the engine call `fut` (one that creates `object` on `docker`'s engine) as a task
    /// of its own, under the deadlines of [`super::deadlines::call`], and returns its answer.
    /// If the caller is dropped, the call still runs to its end, counted by
    /// [`Tracker::in_flight`] until then.
    ///
    /// # Errors
    /// The engine's error, or no answer in time, naming `op` and `object`, as
    /// [`super::deadlines::call`].
    pub async fn create<T: Send + 'static>(
        &self,
        docker: &Docker,
        op: &str,
        object: &str,
        fut: impl Future<Output = Result<T, bollard::errors::Error>> + Send + 'static,
    ) -> anyhow::Result<T> {
        let counted = self.count();
        let docker = docker.clone();
        let task = tokio::spawn(async move {
            let answer = within(&docker, CALL, fut).await;
            drop(counted);
            answer
        });
        match task.await {
            Ok(Ok(r)) => r.map_err(|e| super::deadlines::failed(op, object, e)),
            Ok(Err(gave)) => Err(gave_up(gave, op, object)),
            Err(e) => Err(anyhow::anyhow!("docker: {op} {object}: {e}")),
        }
    }

    /// Waits until no creation is in flight, for at most `deadline`; false when some still
    /// were.
    pub async fn settled(&self, deadline: Duration) -> bool {
        let mut rx = self.0.subscribe();
        tokio::time::timeout(deadline, rx.wait_for(|n| *n == 0))
            .await
            .is_ok_and(|r| r.is_ok())
    }
}

/// [`Tracker::create`] on this process's creations.
///
/// # Errors
/// As [`Tracker::create`].
pub async fn create<T: Send + 'static>(
    docker: &Docker,
    op: &str,
    object: &str,
    fut: impl Future<Output = Result<T, bollard::errors::Error>> + Send + 'static,
) -> anyhow::Result<T> {
    CREATIONS.create(docker, op, object, fut).await
}

/// [`Tracker::settled`] on this process's creations.
pub async fn settled(deadline: Duration) -> bool {
    CREATIONS.settled(deadline).await
}

/// [`Tracker::in_flight`] of this process's creations.
pub fn in_flight() -> usize {
    CREATIONS.in_flight()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A client of no engine: these calls end before the watchdog would ping it.
    fn unpinged() -> Docker {
        Docker::connect_with_http("http://127.0.0.1:9", 1, bollard::API_DEFAULT_VERSION).unwrap()
    }

    #[tokio::test]
    async fn a_dropped_caller_leaves_its_creation_running_and_counted_until_it_ends() {
        let tracker: &'static Tracker = Box::leak(Box::new(Tracker::new()));
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let finished = Arc::new(AtomicBool::new(false));
        let done = finished.clone();
        let docker = unpinged();
        let caller = tokio::spawn(async move {
            tracker
                .create(&docker, "create container", "c1", async move {
                    let _ = released.await;
                    done.store(true, Ordering::SeqCst);
                    Ok::<_, bollard::errors::Error>(7)
                })
                .await
        });
        // Cut the caller short only once its creation is under way.
        let mut rx = tracker.0.subscribe();
        rx.wait_for(|n| *n == 1).await.unwrap();
        caller.abort();
        assert!(caller.await.unwrap_err().is_cancelled());
        assert_eq!(tracker.in_flight(), 1);
        assert!(
            !tracker.settled(Duration::from_millis(50)).await,
            "still in flight"
        );
        release.send(()).unwrap();
        assert!(tracker.settled(Duration::from_secs(10)).await);
        assert!(finished.load(Ordering::SeqCst), "the call ran to its end");
        assert_eq!(tracker.in_flight(), 0);
    }

    #[tokio::test]
    async fn the_process_wide_tracker_is_settled_with_nothing_in_flight() {
        // No lib test creates through it, so nothing is in flight here.
        assert_eq!(in_flight(), 0);
        assert!(settled(Duration::from_millis(1)).await);
    }

    #[tokio::test]
    async fn the_engines_answer_or_error_comes_back_named() {
        let tracker = Tracker::new();
        let docker = unpinged();
        let ok = tracker.create(&docker, "create network", "n1", async {
            Ok::<_, bollard::errors::Error>(3)
        });
        assert_eq!(ok.await.unwrap(), 3);
        let refused = tracker
            .create(&docker, "create network", "n2", async {
                Err::<(), _>(bollard::errors::Error::DockerResponseServerError {
                    status_code: 409,
                    message: "network n2 exists".into(),
                })
            })
            .await
            .unwrap_err()
            .to_string();
        assert_eq!(
            refused,
            "docker: create network n2: network n2 exists (HTTP 409)"
        );
        assert_eq!(tracker.in_flight(), 0);
        assert!(tracker.settled(Duration::from_millis(1)).await);
    }
}
