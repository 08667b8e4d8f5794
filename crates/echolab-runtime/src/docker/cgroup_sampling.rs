//! CPU and memory of a container during a run. The sampler reads the container's cumulative
//! counters when the client starts, every
//! [`SAMPLE_INTERVAL`](crate::hosts::SAMPLE_INTERVAL), and when the client ends, and turns
//! each pair of consecutive readings into a sample, so even a run shorter than the interval
//! gets one sample covering all of it. CPU is computed as `docker stats` does: container CPU
//! time over the host's CPU time between the readings, times the online CPUs, in percent of
//! one core. Memory is usage minus inactive file pages (cgroup v2 `inactive_file`, v1
//! `total_inactive_file`), as `docker stats` reports it.
//!
//! The counters come from the container's cgroup files when the engine runs on this machine
//! (found through /proc/PID/cgroup of its main process; cgroup v1 `cpuacct.usage`,
//! `memory.usage_in_bytes`, v2 `cpu.stat`, `memory.current`; the kernel's cgroup
//! documentation): a read costs microseconds. Otherwise they come from the engine's one-shot
//! stats, which Docker 20.10 answers only at its collector's next tick (up to a second), and
//! CPU percent is then relative to the host CPU time the engine reports.

use std::path::{Path, PathBuf};
use std::time::Instant;

use bollard::models::ContainerStatsResponse;
use bollard::query_parameters::StatsOptions;
use bollard::Docker;
use echolab_core::results::ResourceSample;
use futures_util::StreamExt as _;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::hosts::{host_mem_bytes, mem_percent};

/// A running sampler; [`Sampler::stop`] returns what it collected.
pub struct Sampler {
    stop: oneshot::Sender<()>,
    task: JoinHandle<Vec<ResourceSample>>,
}

/// The cumulative figures of one stats reading.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reading {
    /// Container CPU time, ns.
    pub cpu_ns: u64,
    /// Host CPU time over all CPUs, ns, from the engine; None for cgroup readings, whose CPU
    /// percent is relative to wall time (`at`).
    pub system_ns: Option<u64>,
    /// When it was read.
    pub at: Instant,
    /// Online CPUs.
    pub online: u32,
    /// Memory in use, bytes, without inactive file pages.
    pub mem_bytes: u64,
    /// The user-mode and kernel-mode parts of `cpu_ns`, ns, where the source splits them
    /// (cgroup files); None from the engine's stats, whose split is in scheduler ticks of
    /// another clock.
    pub user_sys_ns: Option<(u64, u64)>,
}

/// The figures of one stats response, or None when it lacks CPU counters.
pub fn reading_of(s: &ContainerStatsResponse) -> Option<Reading> {
    let cpu = s.cpu_stats.as_ref()?;
    let cpu_ns = cpu.cpu_usage.as_ref()?.total_usage?;
    let system_ns = cpu.system_cpu_usage?;
    let online = cpu.online_cpus.filter(|n| *n > 0).unwrap_or(1);
    let mem = s.memory_stats.as_ref();
    let usage = mem.and_then(|m| m.usage).unwrap_or(0);
    let inactive = mem
        .and_then(|m| m.stats.as_ref())
        .and_then(|st| {
            st.get("inactive_file")
                .or_else(|| st.get("total_inactive_file"))
                .copied()
        })
        .unwrap_or(0);
    Some(Reading {
        cpu_ns,
        system_ns: Some(system_ns),
        at: Instant::now(),
        online,
        mem_bytes: usage.saturating_sub(inactive),
        user_sys_ns: None,
    })
}

/// Where a container's cgroup counters are on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CgroupFiles {
    /// cgroup v1: the controller directories.
    V1 {
        /// The cpuacct controller's directory (`cpuacct.usage`, `cpuacct.stat`).
        cpuacct: PathBuf,
        /// The memory controller's directory (`memory.usage_in_bytes`).
        memory: PathBuf,
    },
    /// cgroup v2: the unified directory (`cpu.stat`, `memory.current`).
    V2 {
        /// The container's cgroup directory.
        dir: PathBuf,
    },
}

/// The cgroup directories named by a /proc/PID/cgroup text (cgroups(7)), under `root`
/// (/sys/fs/cgroup).
pub fn cgroup_files(proc_cgroup: &str, root: &Path) -> Option<CgroupFiles> {
    let (mut cpuacct, mut memory, mut unified) = (None, None, None);
    for line in proc_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let rel = path.trim_start_matches('/');
        if controllers.is_empty() {
            unified = Some(root.join(rel));
        }
        for c in controllers.split(',') {
            match c {
                "cpuacct" => cpuacct = Some(root.join(controllers).join(rel)),
                "memory" => memory = Some(root.join(controllers).join(rel)),
                _ => {}
            }
        }
    }
    match (cpuacct, memory, unified) {
        (Some(cpuacct), Some(memory), _) => Some(CgroupFiles::V1 { cpuacct, memory }),
        (_, _, Some(dir)) => Some(CgroupFiles::V2 { dir }),
        _ => None,
    }
}

/// The value of `key` in a cgroup `*.stat` file (lines `key value`).
fn stat_value(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
}

fn read_u64(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

impl CgroupFiles {
    /// Reads the counters now.
    pub fn read(&self) -> Option<Reading> {
        let (cpu_ns, user_sys_ns, usage, stat, inactive_key) = match self {
            CgroupFiles::V1 { cpuacct, memory } => (
                read_u64(&cpuacct.join("cpuacct.usage"))?,
                read_u64(&cpuacct.join("cpuacct.usage_user"))
                    .zip(read_u64(&cpuacct.join("cpuacct.usage_sys"))),
                read_u64(&memory.join("memory.usage_in_bytes"))?,
                std::fs::read_to_string(memory.join("memory.stat")).ok()?,
                "total_inactive_file",
            ),
            CgroupFiles::V2 { dir } => {
                let cpu = std::fs::read_to_string(dir.join("cpu.stat")).ok()?;
                (
                    stat_value(&cpu, "usage_usec")? * 1000,
                    stat_value(&cpu, "user_usec")
                        .zip(stat_value(&cpu, "system_usec"))
                        .map(|(u, s)| (u * 1000, s * 1000)),
                    read_u64(&dir.join("memory.current"))?,
                    std::fs::read_to_string(dir.join("memory.stat")).ok()?,
                    "inactive_file",
                )
            }
        };
        let inactive = stat_value(&stat, inactive_key).unwrap_or(0);
        Some(Reading {
            cpu_ns,
            system_ns: None,
            at: Instant::now(),
            online: 1,
            mem_bytes: usage.saturating_sub(inactive),
            user_sys_ns,
        })
    }

    /// The cgroup files of `container`, if they are readable here (the engine is local).
    pub async fn of(docker: &Docker, container: &str) -> Option<Self> {
        let pid = super::deadlines::call(
            docker,
            "inspect container",
            container,
            docker.inspect_container(container, None),
        )
        .await
        .ok()?
        .state?
        .pid
        .filter(|p| *p > 0)?;
        let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        let files = cgroup_files(&text, Path::new("/sys/fs/cgroup"))?;
        files.read().map(|_| files)
    }
}

/// The sample between two readings, stamped `t_s` (seconds since the client started).
pub fn sample_between(
    before: &Reading,
    after: &Reading,
    t_s: f64,
    host_total: u64,
) -> ResourceSample {
    let cpu = after.cpu_ns.saturating_sub(before.cpu_ns) as f64;
    let (num, den) = match (before.system_ns, after.system_ns) {
        (Some(b), Some(a)) => (f64::from(after.online) * cpu, a.saturating_sub(b) as f64),
        _ => (
            cpu,
            after.at.saturating_duration_since(before.at).as_nanos() as f64,
        ),
    };
    let pct = |ns: f64| if den > 0.0 { 100.0 * ns / den } else { 0.0 };
    let cpu_pct = pct(num);
    // The split comes only from cgroup readings, whose percent is over wall time (den).
    let split = before.user_sys_ns.zip(after.user_sys_ns).map(|(b, a)| {
        (
            pct(a.0.saturating_sub(b.0) as f64),
            pct(a.1.saturating_sub(b.1) as f64),
        )
    });
    ResourceSample {
        t_s,
        cpu_pct,
        mem_bytes: after.mem_bytes,
        mem_pct: mem_percent(after.mem_bytes, host_total),
        cpu_user_pct: split.map(|s| s.0),
        cpu_sys_pct: split.map(|s| s.1),
    }
}

async fn read(docker: &Docker, container: &str, files: &Option<CgroupFiles>) -> Option<Reading> {
    if let Some(f) = files {
        return f.read();
    }
    let opts = StatsOptions {
        stream: false,
        one_shot: true,
    };
    let mut stats = docker.stats(container, Some(opts));
    // A reading the engine does not give in time is a missing sample, not a hung cell.
    let s = super::deadlines::within(docker, super::deadlines::CALL, stats.next())
        .await
        .ok()??
        .ok()?;
    reading_of(&s)
}

impl Sampler {
    /// Takes the first reading of `container`, then samples it on
    /// [`sample_schedule`](crate::hosts::sample_schedule)`(window_start)` until
    /// [`Sampler::stop`].
    pub async fn start(
        docker: &Docker,
        container: &str,
        window_start: std::time::Duration,
    ) -> Self {
        let docker = docker.clone();
        let container = container.to_string();
        let files = CgroupFiles::of(&docker, &container).await;
        let first = read(&docker, &container, &files).await;
        let start = Instant::now();
        let (stop, mut stopped) = oneshot::channel();
        let task = tokio::spawn(async move {
            let total = host_mem_bytes();
            let mut samples = Vec::new();
            let mut last = first;
            let mut tick = crate::hosts::sample_schedule(window_start);
            loop {
                let done = tokio::select! {
                    _ = &mut stopped => true,
                    _ = tick.tick() => false,
                };
                let now = read(&docker, &container, &files).await;
                if let (Some(a), Some(b)) = (&last, &now) {
                    samples.push(sample_between(a, b, start.elapsed().as_secs_f64(), total));
                }
                if now.is_some() {
                    last = now;
                }
                if done {
                    break samples;
                }
            }
        });
        Self { stop, task }
    }

    /// Takes the last reading and returns the samples.
    pub async fn stop(self) -> Vec<ResourceSample> {
        let _ = self.stop.send(());
        self.task.await.unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bollard::models::{ContainerCpuStats, ContainerCpuUsage, ContainerMemoryStats};

    #[test]
    fn cpu_is_percent_of_one_core_and_memory_excludes_inactive_files() {
        let response = |total: u64, system: u64| ContainerStatsResponse {
            cpu_stats: Some(ContainerCpuStats {
                cpu_usage: Some(ContainerCpuUsage {
                    total_usage: Some(total),
                    ..Default::default()
                }),
                system_cpu_usage: Some(system),
                online_cpus: Some(2),
                ..Default::default()
            }),
            memory_stats: Some(ContainerMemoryStats {
                usage: Some(10_000),
                stats: Some([("inactive_file".to_string(), 4_000)].into_iter().collect()),
                ..Default::default()
            }),
            ..Default::default()
        };
        // 0.5 s of container CPU over 1 s of wall on 2 CPUs (2 s of host CPU): half a core.
        let a = reading_of(&response(1_000_000_000, 10_000_000_000)).unwrap();
        let b = reading_of(&response(1_500_000_000, 12_000_000_000)).unwrap();
        let sample = sample_between(&a, &b, 1.0, 100_000);
        assert!((sample.cpu_pct - 50.0).abs() < 1e-9, "{sample:?}");
        assert_eq!(sample.mem_bytes, 6_000);
        assert!((sample.mem_pct - 6.0).abs() < 1e-9);
        assert!(reading_of(&ContainerStatsResponse::default()).is_none());
    }

    #[test]
    fn cgroup_files_are_found_for_v1_and_v2() {
        let root = std::path::Path::new("/sys/fs/cgroup");
        let v1 = "4:memory:/docker/abc\n2:cpuacct:/docker/abc\n1:cpu:/docker/abc\n0::/docker/abc\n";
        assert_eq!(
            cgroup_files(v1, root),
            Some(CgroupFiles::V1 {
                cpuacct: root.join("cpuacct/docker/abc"),
                memory: root.join("memory/docker/abc")
            })
        );
        let joined = "3:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n";
        assert_eq!(
            cgroup_files(joined, root),
            Some(CgroupFiles::V1 {
                cpuacct: root.join("cpu,cpuacct/docker/abc"),
                memory: root.join("memory/docker/abc")
            })
        );
        let v2 = "0::/system.slice/docker-abc.scope\n";
        assert_eq!(
            cgroup_files(v2, root),
            Some(CgroupFiles::V2 {
                dir: root.join("system.slice/docker-abc.scope")
            })
        );
        assert_eq!(
            stat_value("usage_usec 1500\nuser_usec 1000\n", "usage_usec"),
            Some(1500)
        );
        assert_eq!(
            stat_value("total_inactive_file 7\ninactive_file 3\n", "inactive_file"),
            Some(3)
        );
    }

    #[test]
    fn cgroup_cpu_is_percent_of_one_core_over_wall_time() {
        let t0 = Instant::now();
        let a = Reading {
            cpu_ns: 0,
            system_ns: None,
            at: t0,
            online: 1,
            mem_bytes: 1,
            user_sys_ns: Some((0, 0)),
        };
        let b = Reading {
            cpu_ns: 250_000_000,
            system_ns: None,
            at: t0 + std::time::Duration::from_millis(500),
            online: 1,
            mem_bytes: 2,
            user_sys_ns: Some((50_000_000, 200_000_000)),
        };
        let s = sample_between(&a, &b, 0.5, 100);
        assert!((s.cpu_pct - 50.0).abs() < 1e-9, "{s:?}");
        assert_eq!(s.mem_bytes, 2);
        // 50 ms user and 200 ms kernel over 500 ms of wall: 10% and 40% of a core.
        assert!((s.cpu_user_pct.unwrap() - 10.0).abs() < 1e-9, "{s:?}");
        assert!((s.cpu_sys_pct.unwrap() - 40.0).abs() < 1e-9, "{s:?}");
        // The engine's stats do not split: no user or kernel part.
        let engine = Reading {
            user_sys_ns: None,
            ..b
        };
        assert_eq!(sample_between(&a, &engine, 0.5, 100).cpu_sys_pct, None);
    }
}
