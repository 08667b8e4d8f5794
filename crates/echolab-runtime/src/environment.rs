//! The machine and software a run happens on, for the manifest.

use std::path::Path;
use std::process::Command;

use echolab_core::results::Environment;

use crate::hosts::host_mem_bytes;

/// The host's kernel release (`uname -r`), from /proc/sys/kernel/osrelease.
pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// This namespace's default TCP congestion control, from
/// /proc/sys/net/ipv4/tcp_congestion_control; empty when unreadable.
pub fn tcp_congestion_control() -> String {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The first "model name" of /proc/cpuinfo.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|v| v.trim_start_matches([' ', '\t', ':']).trim().to_string())
            })
        })
        .unwrap_or_default()
}

/// `git rev-parse HEAD` of `root`, with `-dirty` when tracked files differ; empty outside git.
pub fn git_rev(root: &Path) -> String {
    let run = |args: &[&str]| {
        Command::new("git")
            .arg("-C")
            .arg(root)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
    };
    let Some(head) = run(&["rev-parse", "HEAD"]) else {
        return String::new();
    };
    let mut rev = String::from_utf8_lossy(&head.stdout).trim().to_string();
    if run(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|o| !o.stdout.is_empty())
    {
        rev.push_str("-dirty");
    }
    rev
}

/// Everything but the Docker version, which the Docker backend fills in.
pub fn capture(root: &Path) -> Environment {
    Environment {
        kernel: kernel_release(),
        cpu_model: cpu_model(),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get() as u64),
        mem_bytes: host_mem_bytes(),
        docker_version: String::new(),
        git_rev: git_rev(root),
        echolab_version: env!("CARGO_PKG_VERSION").to_string(),
        tcp_congestion_control: tcp_congestion_control(),
    }
}
