//! Ctrl-C and SIGTERM during a run: the first signal ends the measurement window, and
//! echo-bench reports what it measured until then, marked interrupted, and exits with
//! 128 + the signal's number, as iperf3 and wrk print their partial results when stopped; a
//! second signal exits at once, for a drain that takes too long.
//!
//! Why a thread in sigwait(2) rather than a signal handler: the signals are blocked in every
//! thread (the mask is inherited by the threads started later, so [`install`] must run before
//! any of them), and one thread takes them synchronously with sigwait(2) (`man 2 sigwait`,
//! `man 3 pthread_sigmask`). It may then lock, allocate and print, which a handler may not, and
//! no system call of the engines is ever interrupted by EINTR.
//!
//! The engines poll [`cut_at`] through `Window::end`: an event or io_uring worker wakes at
//! least every deadline sweep (at most 100 ms), a thread-engine connection looks when its
//! request in flight ends; from then on they start no request, drain those in flight (up to
//! `--timeout`) and stop, as at the end of a `--duration` window. A rounds-bounded run ends
//! the same way; the connect storm, one round with no window, runs to its end and is only
//! marked interrupted.

use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use nix::sys::signal::{SigSet, Signal};
use nix::unistd::Pid;

/// The first signal of the run and when it came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Interrupt {
    /// When the signal thread took the signal: the measurement window ends here.
    pub(crate) at: Instant,
    /// SIGINT or SIGTERM.
    pub(crate) signal: Signal,
}

impl Interrupt {
    /// The exit status after the partial report: 128 + the signal's number (130 for SIGINT,
    /// 143 for SIGTERM), the shell's status of a process killed by it, so a script sees the
    /// run was stopped.
    pub(crate) fn exit_code(self) -> i32 {
        exit_code(self.signal)
    }

    /// `"SIGINT"` or `"SIGTERM"`, for the report's `interrupted_by`.
    pub(crate) fn name(self) -> &'static str {
        self.signal.as_str()
    }
}

/// 128 + the number of `signal`.
pub(crate) fn exit_code(signal: Signal) -> i32 {
    128 + signal as i32
}

static FIRST: OnceLock<Interrupt> = OnceLock::new();

/// Child processes (`--processes` shards) that get every signal this process takes: they run
/// in a process group of their own, so a terminal's Ctrl-C reaches only this process, and each
/// shard then counts one signal per signal of the parent, not two.
static CHILDREN: Mutex<Vec<Pid>> = Mutex::new(Vec::new());

/// The signals that interrupt a run.
fn handled() -> SigSet {
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    set
}

/// Blocks SIGINT and SIGTERM in the calling thread and starts the thread that takes them.
/// Call it first thing in `main`, before any other thread starts: a thread started earlier
/// keeps the default action and would let the signal kill the process.
///
/// # Errors
/// pthread_sigmask(3) failed or the thread could not be started; the run then goes on with
/// the default actions (the signals kill it, as before).
pub(crate) fn install() -> std::io::Result<()> {
    let set = handled();
    set.thread_block().map_err(std::io::Error::from)?;
    let started = std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || loop {
            // sigwait(2) fails only with EINVAL for a bad set, which this one is not.
            if let Ok(signal) = set.wait() {
                on_signal(signal, Instant::now());
            }
        });
    if let Err(e) = started {
        let _ = set.thread_unblock();
        return Err(e);
    }
    Ok(())
}

/// What a signal does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    /// The first: end the window, report, exit later with 128 + signo.
    Cut,
    /// A later one: exit at once with this status.
    Exit(i32),
}

/// The first signal cuts the window; any later one exits.
fn action(first: Option<Interrupt>, signal: Signal) -> Action {
    match first {
        None => Action::Cut,
        Some(_) => Action::Exit(exit_code(signal)),
    }
}

fn on_signal(signal: Signal, now: Instant) {
    forward(signal);
    match action(FIRST.get().copied(), signal) {
        Action::Cut => {
            let _ = FIRST.set(Interrupt { at: now, signal });
            say(&format!(
                "echo-bench: {}: ending the measurement window now and reporting what was \
                 measured; send it again to exit at once\n",
                signal.as_str()
            ));
        }
        Action::Exit(code) => {
            say(&format!(
                "echo-bench: a second signal ({}): exiting at once, without a report\n",
                signal.as_str()
            ));
            // _exit(2), not exit(3): the main thread may be exiting too, and atexit handlers
            // and a half-written stdout buffer are not worth waiting for.
            // SAFETY: _exit(2) ends the process without touching any of its memory.
            unsafe { libc::_exit(code) };
        }
    }
}

/// Shards leave the word to their parent, which says the same once.
static QUIET: AtomicBool = AtomicBool::new(false);

/// Stops the notes on stderr: this process is a `--processes` shard.
pub(crate) fn quiet() {
    QUIET.store(true, Ordering::Relaxed);
}

/// Writes `line` to stderr in one write(2), so that the notes of processes sharing the
/// terminal do not interleave.
fn say(line: &str) {
    if !QUIET.load(Ordering::Relaxed) {
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }
}

/// Sends `signal` to every registered child still running.
fn forward(signal: Signal) {
    let children = CHILDREN.lock().unwrap_or_else(|p| p.into_inner());
    for &pid in children.iter() {
        // A child that already exited (ESRCH) has nothing left to stop; its pid cannot have
        // been reused, since the parent reaps its shards only after removing them here.
        let _ = nix::sys::signal::kill(pid, signal);
    }
}

/// Registers a child that gets every later signal of this process, and sends it the one
/// already taken, if any, so that a shard started after Ctrl-C still stops.
pub(crate) fn add_child(pid: u32) {
    let pid = Pid::from_raw(pid as i32);
    let mut children = CHILDREN.lock().unwrap_or_else(|p| p.into_inner());
    children.push(pid);
    if let Some(first) = FIRST.get() {
        let _ = nix::sys::signal::kill(pid, first.signal);
    }
}

/// Forgets every registered child (before they are reaped, so no signal goes to a reused
/// pid).
pub(crate) fn clear_children() {
    CHILDREN.lock().unwrap_or_else(|p| p.into_inner()).clear();
}

/// The first SIGINT or SIGTERM of the run, if one came.
pub(crate) fn received() -> Option<Interrupt> {
    FIRST.get().copied()
}

/// When the first signal came: the end of every measurement window that may be cut short.
#[inline]
pub(crate) fn cut_at() -> Option<Instant> {
    FIRST.get().map(|i| i.at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_signal_cuts_and_a_second_exits_with_its_own_status() {
        assert_eq!(action(None, Signal::SIGINT), Action::Cut);
        assert_eq!(action(None, Signal::SIGTERM), Action::Cut);
        let first = Interrupt {
            at: Instant::now(),
            signal: Signal::SIGINT,
        };
        assert_eq!(action(Some(first), Signal::SIGINT), Action::Exit(130));
        assert_eq!(action(Some(first), Signal::SIGTERM), Action::Exit(143));
        assert_eq!((first.exit_code(), first.name()), (130, "SIGINT"));
    }
}
