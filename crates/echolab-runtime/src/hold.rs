//! The small jobs the launcher binary does inside the lab image, so the image needs no
//! shell and no other tool:
//!
//! - `echolab-up __hold`: the host container's main process. It owns nothing but the
//!   namespaces; it reaps orphaned children (as PID 1 must; a prefork server's workers are
//!   re-parented to it) and exits 0 on SIGTERM or SIGINT.
//! - `echolab-up __signal TARGET SIG`: sends SIG (`TERM`, `KILL`, `INT`, `USR1`) to TARGET, a pid
//!   or a process name (every process of that name in the pid namespace, from /proc/PID/comm).
//!
//! Their command lines are core's (`echolab_core::cmd::Job`); the launcher binary parses them
//! and hands each job its typed arguments.
//! - `echolab-up __cpu-model`: prints the machine's CPU model (/proc/cpuinfo), which a lab
//!   run records for each machine (an engine's API does not say it).

use echolab_core::cmd::SignalJob;
use nix::sys::signal::{kill, SigSet, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;

/// Runs `__hold` until SIGTERM/SIGINT; returns the exit code.
pub fn hold() -> i32 {
    let mut set = SigSet::empty();
    for s in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGCHLD] {
        set.add(s);
    }
    // Blocked so that sigwait receives them instead of their default actions.
    if let Err(e) = set.thread_block() {
        eprintln!("echolab-up __hold: cannot block signals: {e}");
        return 1;
    }
    loop {
        match set.wait() {
            Ok(Signal::SIGCHLD) => {
                while let Ok(status) = waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                    if status == nix::sys::wait::WaitStatus::StillAlive {
                        break;
                    }
                }
            }
            Ok(_) => return 0,
            Err(e) => {
                eprintln!("echolab-up __hold: sigwait: {e}");
                return 1;
            }
        }
    }
}

/// The pids of processes named `comm` (/proc/PID/comm), excluding this process.
fn pids_named(comm: &str) -> Vec<i32> {
    let me = std::process::id() as i32;
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| *pid != me)
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == comm)
        })
        .collect()
}

/// Runs `__signal TARGET SIG`; returns the exit code (0 when at least one process got it, 1
/// when none did).
pub fn signal(job: &SignalJob) -> i32 {
    let target = &job.target;
    let sig = match Signal::try_from(job.signal.number()) {
        Ok(sig) => sig,
        Err(e) => {
            eprintln!("echolab-up __signal: {}: {e}", job.signal);
            return 1;
        }
    };
    let pids = match target.parse::<i32>() {
        Ok(pid) if pid > 0 => vec![pid],
        _ => pids_named(target),
    };
    let mut delivered = 0;
    for pid in &pids {
        match kill(Pid::from_raw(*pid), sig) {
            Ok(()) => delivered += 1,
            Err(e) => eprintln!("echolab-up __signal: kill({pid}, {sig}): {e}"),
        }
    }
    if delivered == 0 {
        eprintln!("echolab-up __signal: no process {target} got {sig}");
        1
    } else {
        0
    }
}

/// Runs `__cpu-model`: prints the first "model name" of /proc/cpuinfo; returns the exit code
/// (1 when there is none).
pub fn cpu_model() -> i32 {
    let model = crate::environment::cpu_model();
    if model.is_empty() {
        eprintln!("echolab-up __cpu-model: no \"model name\" in /proc/cpuinfo");
        return 1;
    }
    println!("{model}");
    0
}
