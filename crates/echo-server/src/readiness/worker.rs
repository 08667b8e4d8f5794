//! Worker threads of the readiness models. A worker returns only with a fatal error (epoll_create
//! failed, the wait call failed); the process then ends with its fatal line (`crate::fatal`).

use std::convert::Infallible;

/// Starts thread `name` running `serve`; if `serve` fails, the whole process exits with status 1.
///
/// # Errors
/// When the thread cannot be created.
pub(crate) fn spawn<F>(name: String, serve: F) -> anyhow::Result<()>
where
    F: FnOnce() -> anyhow::Result<Infallible> + Send + 'static,
{
    let who = name.clone();
    std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            let Err(e) = serve();
            fatal(&who, &e)
        })
        .map_err(|e| anyhow::anyhow!("cannot start worker thread {name}: {e}"))?;
    Ok(())
}

/// Prints the fatal error of worker `who` and exits the process with status 1.
pub(crate) fn fatal(who: &str, e: &anyhow::Error) -> ! {
    crate::fatal::exit(&format!("{who}: {e:#}"))
}
