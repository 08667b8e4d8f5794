//! The server's last words: every exit other than by SIGTERM/SIGINT (and other than a usage
//! error, exit status 2) prints one [`Fatal`] line, `echo-server: fatal: <reason>`, on stderr
//! and exits non-zero, whichever thread or process ends it:
//! - an error of the main thread or of a worker ([`exit`], [`exit_child`]): status 1;
//! - a panic in any thread ([`install`]'s panic hook): status 1. A panic ends the whole
//!   server rather than one thread, because a server missing its reactor thread would keep
//!   listening and serve nobody;
//! - a signal whose default action ends the process: the catchable ones are read by the main
//!   thread (`signals`) and end it with status 128 + the signal's number; the faults (SIGSEGV,
//!   SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGSYS, SIGTRAP) get a handler here that writes the line
//!   and lets the signal end the process as it would have. Only SIGKILL ends it silently.
//!
//! `ECHO_SERVER_FAULT=panic` or `=error` makes a started server panic in a thread of its own,
//! or its main thread fail, right after the readiness line: what the tests of this contract
//! use to reach those paths (see `inject`).

use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use echolab_core::cmd::Fatal;
use nix::sys::signal::Signal;

/// Exit status of an error or a panic.
pub(crate) const STATUS: i32 = 1;

/// Prints the line for `reason` (one `write`, so that lines of dying threads do not interleave).
pub(crate) fn print(reason: &str) {
    let line = format!("{}\n", Fatal::new(reason));
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// Prints the line for `reason` and ends the process with status [`STATUS`] (from any thread
/// of the server's own process).
pub(crate) fn exit(reason: &str) -> ! {
    print(reason);
    std::process::exit(STATUS)
}

/// Like [`exit`], for a forked child (prefork's workers): `_exit`, so that nothing of the
/// parent's (exit handlers, stdio buffers it inherited) runs twice.
pub(crate) fn exit_child(reason: &str) -> ! {
    print(reason);
    // SAFETY: _exit ends the process at once; it touches no memory of this program.
    unsafe { libc::_exit(STATUS) }
}

/// The faults and aborts reported by a signal handler, with what their default action means.
const FAULTS: [(Signal, &str); 7] = [
    (Signal::SIGSEGV, "invalid memory reference"),
    (Signal::SIGBUS, "bus error"),
    (Signal::SIGILL, "illegal instruction"),
    (Signal::SIGFPE, "arithmetic exception"),
    (Signal::SIGABRT, "abort"),
    (Signal::SIGSYS, "bad system call"),
    (Signal::SIGTRAP, "trace or breakpoint trap"),
];

/// Per fault signal: the line to write (made before any handler runs, so that the handler
/// only reads it) and the disposition it replaced.
static FAULT_LINES: OnceLock<Vec<(libc::c_int, Vec<u8>, libc::sigaction)>> = OnceLock::new();
/// Set by the first fault handler that runs: one line, even when an abort follows a fault.
static REPORTED: AtomicBool = AtomicBool::new(false);

/// The reason for a fault signal `sig`, as the handler reports it.
pub(crate) fn fault_reason(sig: Signal) -> String {
    let what = FAULTS
        .iter()
        .find(|(s, _)| *s == sig)
        .map_or("", |(_, w)| w);
    format!("killed by signal {} ({what})", sig.as_str())
}

/// Installs the panic hook and the fault-signal handlers. Call once, first thing in `main`.
pub(crate) fn install() {
    std::panic::set_hook(Box::new(|info| {
        let thread = std::thread::current();
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(a non-text panic payload)".into());
        let at = info
            .location()
            .map_or(String::new(), |l| format!(" at {}:{}", l.file(), l.line()));
        exit(&format!(
            "panic in thread '{}'{at}: {message}",
            thread.name().unwrap_or("unnamed")
        ))
    }));
    let lines = FAULTS
        .iter()
        .map(|&(sig, _)| {
            // SAFETY: an all-zero sigaction is a valid value (SIG_DFL, empty mask); it is
            // overwritten by the current disposition below.
            let mut previous: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: a null new action only reads the current disposition into `previous`.
            unsafe { libc::sigaction(sig as libc::c_int, std::ptr::null(), &mut previous) };
            let line = format!("{}\n", Fatal::new(&fault_reason(sig))).into_bytes();
            (sig as libc::c_int, line, previous)
        })
        .collect();
    if FAULT_LINES.set(lines).is_err() {
        return;
    }
    for &(sig, _) in &FAULTS {
        // SAFETY: as above, zeroed is a valid sigaction; the fields set next make it this
        // module's handler, run on the alternate stack where a thread has one (Rust gives
        // its threads one, so a stack overflow can still be reported).
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = on_fault as *const () as libc::sighandler_t;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        // SAFETY: installs a handler that only calls async-signal-safe functions (write,
        // sigaction, raise) on data prepared before installation.
        unsafe { libc::sigaction(sig as libc::c_int, &action, std::ptr::null_mut()) };
    }
}

/// The fault-signal handler: writes the prepared line (once), then lets the signal end the
/// process as it would have. A fault raised by the CPU (`si_code > 0`) recurs when the handler
/// returns, so the previous disposition is put back for it: Rust's own handler (which reports
/// a stack overflow and aborts) or the default action. A signal sent by kill(2), raise(3) or
/// abort(3) (`si_code <= 0`) is raised again under the default action.
extern "C" fn on_fault(sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    let Some(entry) = FAULT_LINES
        .get()
        .and_then(|l| l.iter().find(|(s, _, _)| *s == sig))
    else {
        return;
    };
    if !REPORTED.swap(true, Ordering::SeqCst) {
        // SAFETY: write(2) of a live, immutable buffer; async-signal-safe.
        unsafe { libc::write(2, entry.1.as_ptr().cast(), entry.1.len()) };
    }
    // SAFETY: `info` is the siginfo the kernel passed to this SA_SIGINFO handler.
    let sent = info.is_null() || unsafe { (*info).si_code } <= 0;
    if sent {
        // SAFETY: sigaction(2) and raise(3) are async-signal-safe; the zeroed action is
        // SIG_DFL. The raised signal is blocked while this handler runs and is delivered,
        // under the default action, when it returns.
        unsafe {
            let mut default: libc::sigaction = std::mem::zeroed();
            default.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(sig, &default, std::ptr::null_mut());
            libc::raise(sig);
        }
    } else {
        // SAFETY: puts back the disposition read in `install`, a valid sigaction.
        unsafe { libc::sigaction(sig, &entry.2, std::ptr::null_mut()) };
    }
}

/// `ECHO_SERVER_FAULT`, read once: what fault to inject after the readiness line, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Inject {
    /// A thread of the server panics.
    Panic,
    /// The main thread fails with an error.
    Error,
}

/// The fault `ECHO_SERVER_FAULT` asks for (`panic` or `error`), if any.
///
/// # Errors
/// Any other value, named.
pub(crate) fn inject() -> Result<Option<Inject>, String> {
    match std::env::var("ECHO_SERVER_FAULT").as_deref() {
        Err(_) => Ok(None),
        Ok("panic") => Ok(Some(Inject::Panic)),
        Ok("error") => Ok(Some(Inject::Error)),
        Ok(other) => Err(format!(
            "ECHO_SERVER_FAULT={other:?} is not a fault it can inject (panic, error)"
        )),
    }
}
