//! Which launcher process owns a run, written so that another process (a later `echolab-up
//! --down`, the next run, `echolab-report`) can tell whether that launcher is still alive.
//!
//! A pid alone is not enough: pids are reused, and the engine may be reached from several
//! machines. The identity is the host name, the kernel's boot id
//! (`/proc/sys/kernel/random/boot_id`, new at every boot: random(4)), the pid, and the
//! process's start time in clock ticks since boot (`/proc/<pid>/stat` field 22, proc(5)),
//! which a reused pid does not share.

use serde::{Deserialize, Serialize};

/// The identity of one launcher process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LauncherId {
    /// Host name (`/proc/sys/kernel/hostname`).
    pub host: String,
    /// Boot id of that host's kernel.
    pub boot_id: String,
    /// Process id.
    pub pid: u32,
    /// Start time, clock ticks after boot (proc(5), `/proc/<pid>/stat` field 22).
    pub start_ticks: u64,
}

/// Whether a launcher is still running, as far as this machine can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Liveness {
    /// The process is running (same boot, same pid, same start time).
    Alive,
    /// It is not: its pid is gone or reused, or the host rebooted since.
    Gone,
    /// It ran on another host; this one cannot see its processes. The text says which host.
    Unknown(String),
}

/// What a process needs to know about the machine it runs on to judge a [`LauncherId`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThisMachine {
    /// Host name.
    pub host: String,
    /// Boot id.
    pub boot_id: String,
}

impl ThisMachine {
    /// Read from /proc; `None` where /proc is not mounted.
    pub fn read() -> Option<Self> {
        Some(Self {
            host: read_trimmed("/proc/sys/kernel/hostname")?,
            boot_id: read_trimmed("/proc/sys/kernel/random/boot_id")?,
        })
    }
}

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// The start time (field 22) in a `/proc/<pid>/stat` line. The command name (field 2) is in
/// parentheses and may itself hold spaces and parentheses, so fields are counted after the
/// last `)`.
pub fn start_ticks_from_stat(stat: &str) -> Option<u64> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    // Fields 3.. follow the command name; field 22 is the 20th of them.
    after_comm.split_whitespace().nth(19)?.parse().ok()
}

/// The start time of process `pid`, `None` if there is no such process.
pub fn process_start_ticks(pid: u32) -> Option<u64> {
    start_ticks_from_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

impl LauncherId {
    /// This process; `None` where /proc is not readable.
    pub fn current() -> Option<Self> {
        let here = ThisMachine::read()?;
        let pid = std::process::id();
        Some(Self {
            host: here.host,
            boot_id: here.boot_id,
            pid,
            start_ticks: process_start_ticks(pid)?,
        })
    }

    /// As one label value: `pid start_ticks host boot_id`, space-separated (no field holds a
    /// space: host names are DNS labels, boot ids UUIDs).
    pub fn to_label(&self) -> String {
        format!(
            "{} {} {} {}",
            self.pid, self.start_ticks, self.host, self.boot_id
        )
    }

    /// The inverse of [`LauncherId::to_label`]; `None` for anything else.
    pub fn from_label(label: &str) -> Option<Self> {
        let mut f = label.split(' ');
        let id = Self {
            pid: f.next()?.parse().ok()?,
            start_ticks: f.next()?.parse().ok()?,
            host: f.next().filter(|s| !s.is_empty())?.to_string(),
            boot_id: f.next().filter(|s| !s.is_empty())?.to_string(),
        };
        f.next().is_none().then_some(id)
    }

    /// Whether this launcher is alive, judged on this machine.
    pub fn liveness(&self) -> Liveness {
        match ThisMachine::read() {
            Some(here) => self.liveness_on(&here, process_start_ticks),
            None => Liveness::Unknown("/proc is not readable here".into()),
        }
    }

    /// Whether this launcher is alive, judged on `here`, where `start_of(pid)` gives the start
    /// time of a running process.
    pub fn liveness_on(
        &self,
        here: &ThisMachine,
        start_of: impl Fn(u32) -> Option<u64>,
    ) -> Liveness {
        if self.host != here.host {
            return Liveness::Unknown(format!("launched from host {}", self.host));
        }
        if self.boot_id != here.boot_id {
            return Liveness::Gone;
        }
        if start_of(self.pid) == Some(self.start_ticks) {
            Liveness::Alive
        } else {
            Liveness::Gone
        }
    }
}

impl std::fmt::Display for LauncherId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {} on {}", self.pid, self.host)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id() -> LauncherId {
        LauncherId {
            host: "lab1".into(),
            boot_id: "6f1c0b2e-0000-4000-8000-000000000001".into(),
            pid: 4242,
            start_ticks: 987_654,
        }
    }

    #[test]
    fn start_time_is_field_22_even_with_parentheses_and_spaces_in_the_name() {
        // A real line shape (proc(5)): pid (comm) state ppid pgrp session tty tpgid flags
        // minflt cminflt majflt cmajflt utime stime cutime cstime priority nice threads
        // itrealvalue starttime ...
        let stat = "4242 (echo lab) (x)) S 1 4242 4242 0 -1 4194560 120 0 0 0 3 1 0 0 20 0 1 0 987654 12345678 300";
        assert_eq!(start_ticks_from_stat(stat), Some(987_654));
        assert_eq!(start_ticks_from_stat("4242 (x) S 1 2"), None);
        assert_eq!(start_ticks_from_stat("no parenthesis"), None);
    }

    #[test]
    fn this_process_is_alive_and_a_label_round_trips() {
        let me = LauncherId::current().expect("/proc is readable in tests");
        assert_eq!(me.pid, std::process::id());
        assert_eq!(me.liveness(), Liveness::Alive);
        assert_eq!(LauncherId::from_label(&me.to_label()), Some(me));
    }

    #[test]
    fn labels_that_are_not_an_id_are_refused() {
        for bad in [
            "",
            "4242",
            "4242 987654 lab1",
            "x 987654 lab1 b",
            "4242 987654 lab1 b extra",
            "4242 987654  b",
        ] {
            assert_eq!(LauncherId::from_label(bad), None, "{bad:?}");
        }
        assert_eq!(
            LauncherId::from_label("4242 987654 lab1 6f1c0b2e-0000-4000-8000-000000000001"),
            Some(id())
        );
    }

    #[test]
    fn liveness_needs_the_same_host_boot_pid_and_start_time() {
        let here = ThisMachine {
            host: "lab1".into(),
            boot_id: id().boot_id,
        };
        let running = |pid: u32| (pid == 4242).then_some(987_654);
        assert_eq!(id().liveness_on(&here, running), Liveness::Alive);
        // The pid was reused by a process that started later.
        let reused = |_| Some(1_000_000);
        assert_eq!(id().liveness_on(&here, reused), Liveness::Gone);
        assert_eq!(id().liveness_on(&here, |_| None), Liveness::Gone);
        let rebooted = ThisMachine {
            boot_id: "another boot".into(),
            ..here.clone()
        };
        assert_eq!(id().liveness_on(&rebooted, running), Liveness::Gone);
        let elsewhere = ThisMachine {
            host: "lab2".into(),
            ..here
        };
        assert_eq!(
            id().liveness_on(&elsewhere, running),
            Liveness::Unknown("launched from host lab1".into())
        );
    }
}
