//! What one request cost each side, from one run record alone: CPU time (user and kernel),
//! system calls, and the server's wake-ups, per request; and how busy each side was over the
//! measured window. These are the inputs of a cell's bound label ([`crate::bounds`]) and of
//! the seeds' mechanisms ([`crate::mechanisms`]).
//!
//! | metric | unit | from |
//! |---|---|---|
//! | `server_cpu_pct` | % of one core | time-weighted mean of `samples[].cpu_pct` over the window |
//! | `server_cpu_us_per_req` | µs | `server_cpu_pct` / 100 × `bench.duration_s` / `bench.requests_ok` |
//! | `server_user_us_per_req`, `server_sys_us_per_req` | µs | the same with `cpu_user_pct`, `cpu_sys_pct` (cgroup readings only) |
//! | `server_syscalls_per_req` | calls | all of `server.syscalls` / the requests the server read (`bytes_in` / payload) |
//! | `server_waits_per_req` | calls | the wait calls (`epoll_wait`, `select`, `poll`, `io_uring_enter`) / the same |
//! | `server_events_per_req` | events | `server.events_returned` / the same |
//! | `client_cpu_pct` | % of one core | (`client_cpu.user_s` + `sys_s`) / `duration_s` × 100 |
//! | `client_cpu_us_per_req`, `client_user_us_per_req`, `client_sys_us_per_req` | µs | `client_cpu` / `requests_ok` |
//! | `client_syscalls_per_req` | calls | all of `bench.syscalls` / `requests_ok` (both over the window) |
//!
//! The server's counters run from its start, warm-up included, so its per-request counts
//! divide by every request it read; its CPU is sampled over the window only, so CPU per
//! request divides by the window's requests.

use echolab_core::results::{ResourceSample, RunRecord};

/// Server CPU over the window, % of one core.
pub const SERVER_CPU_PCT: &str = "server_cpu_pct";
/// Server CPU per request, µs.
pub const SERVER_CPU_US: &str = "server_cpu_us_per_req";
/// Server user-mode CPU per request, µs.
pub const SERVER_USER_US: &str = "server_user_us_per_req";
/// Server kernel-mode CPU per request, µs.
pub const SERVER_SYS_US: &str = "server_sys_us_per_req";
/// Server system calls per request.
pub const SERVER_SYSCALLS: &str = "server_syscalls_per_req";
/// Server wait calls per request.
pub const SERVER_WAITS: &str = "server_waits_per_req";
/// Server readiness events per request.
pub const SERVER_EVENTS: &str = "server_events_per_req";
/// Client CPU over the window, % of one core.
pub const CLIENT_CPU_PCT: &str = "client_cpu_pct";
/// Client CPU per request, µs.
pub const CLIENT_CPU_US: &str = "client_cpu_us_per_req";
/// Client user-mode CPU per request, µs.
pub const CLIENT_USER_US: &str = "client_user_us_per_req";
/// Client kernel-mode CPU per request, µs.
pub const CLIENT_SYS_US: &str = "client_sys_us_per_req";
/// Client system calls per request.
pub const CLIENT_SYSCALLS: &str = "client_syscalls_per_req";

/// Every metric this module defines.
pub const ALL: [&str; 12] = [
    SERVER_CPU_PCT,
    SERVER_CPU_US,
    SERVER_USER_US,
    SERVER_SYS_US,
    SERVER_SYSCALLS,
    SERVER_WAITS,
    SERVER_EVENTS,
    CLIENT_CPU_PCT,
    CLIENT_CPU_US,
    CLIENT_USER_US,
    CLIENT_SYS_US,
    CLIENT_SYSCALLS,
];

/// The wait calls of echo-server's models, as its syscall table names them.
const WAIT_CALLS: [&str; 4] = ["epoll_wait", "select", "poll", "io_uring_enter"];

/// Unit of a metric of this module, `None` for another name.
pub fn unit(metric: &str) -> Option<&'static str> {
    Some(match metric {
        SERVER_CPU_PCT | CLIENT_CPU_PCT => "% of a core",
        SERVER_CPU_US | SERVER_USER_US | SERVER_SYS_US | CLIENT_CPU_US | CLIENT_USER_US
        | CLIENT_SYS_US => "µs/req",
        SERVER_SYSCALLS | SERVER_WAITS | CLIENT_SYSCALLS => "calls/req",
        SERVER_EVENTS => "events/req",
        _ => return None,
    })
}

/// The time-weighted mean of `f` over `samples`: each sample covers the time since the one
/// before it; the first, whose start is not recorded, is weighted like the median of the
/// others (a whole sampling interval), or alone when it is the only one.
fn weighted_mean(
    samples: &[ResourceSample],
    f: impl Fn(&ResourceSample) -> Option<f64>,
) -> Option<f64> {
    let values: Vec<f64> = samples.iter().map(&f).collect::<Option<_>>()?;
    if values.is_empty() {
        return None;
    }
    let mut gaps: Vec<f64> = samples
        .windows(2)
        .map(|w| (w[1].t_s - w[0].t_s).max(0.0))
        .collect();
    let first = if gaps.is_empty() {
        1.0
    } else {
        let mut sorted = gaps.clone();
        sorted.sort_by(f64::total_cmp);
        sorted[sorted.len() / 2]
    };
    gaps.insert(0, first);
    let total: f64 = gaps.iter().sum();
    (total > 0.0).then(|| values.iter().zip(&gaps).map(|(v, w)| v * w).sum::<f64>() / total)
}

/// Requests the server read over its life: payload bytes in over the request size.
fn server_requests(run: &RunRecord) -> Option<f64> {
    let server = run.server.as_ref()?;
    let requests = server.totals.bytes_in as f64 / run.cell.payload.max(1) as f64;
    (requests > 0.0).then_some(requests)
}

/// The value of `metric` (one of [`ALL`]) in `run`, `None` when the run failed or lacks the
/// input (no samples, no server stats, a source that does not split user from kernel time).
pub fn value(run: &RunRecord, metric: &str) -> Option<f64> {
    if run.error.is_some() {
        return None;
    }
    let bench = run.bench.as_ref()?;
    let window_requests = (bench.requests_ok > 0).then_some(bench.requests_ok as f64)?;
    let per_request_us = |pct: f64| pct / 100.0 * bench.duration_s * 1e6 / window_requests;
    let server_pct = |f: fn(&ResourceSample) -> Option<f64>| weighted_mean(&run.samples, f);
    let count_of = |names: &[&str]| {
        let s = run.server.as_ref()?;
        let n: u64 = s
            .totals
            .syscalls
            .iter()
            .filter(|(k, _)| names.is_empty() || names.contains(&k.as_str()))
            .map(|(_, v)| v.count)
            .sum();
        Some(n as f64 / server_requests(run)?)
    };
    let cpu = &bench.client_cpu;
    match metric {
        SERVER_CPU_PCT => server_pct(|s| Some(s.cpu_pct)),
        SERVER_CPU_US => server_pct(|s| Some(s.cpu_pct)).map(per_request_us),
        SERVER_USER_US => server_pct(|s| s.cpu_user_pct).map(per_request_us),
        SERVER_SYS_US => server_pct(|s| s.cpu_sys_pct).map(per_request_us),
        SERVER_SYSCALLS => count_of(&[]),
        SERVER_WAITS => count_of(&WAIT_CALLS),
        SERVER_EVENTS => {
            Some(run.server.as_ref()?.totals.events_returned as f64 / server_requests(run)?)
        }
        CLIENT_CPU_PCT => {
            (bench.duration_s > 0.0).then(|| 100.0 * (cpu.user_s + cpu.sys_s) / bench.duration_s)
        }
        CLIENT_CPU_US => Some((cpu.user_s + cpu.sys_s) * 1e6 / window_requests),
        CLIENT_USER_US => Some(cpu.user_s * 1e6 / window_requests),
        CLIENT_SYS_US => Some(cpu.sys_s * 1e6 / window_requests),
        CLIENT_SYSCALLS => {
            Some(bench.syscalls.values().map(|s| s.count).sum::<u64>() as f64 / window_requests)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use echolab_core::experiment::{BenchMode, Cell};
    use echolab_core::stats::{BenchReport, CpuTime, ServerStats, SyscallStat};

    fn sample(t_s: f64, cpu: f64, user: Option<f64>) -> ResourceSample {
        ResourceSample {
            t_s,
            cpu_pct: cpu,
            cpu_user_pct: user,
            cpu_sys_pct: user.map(|u| cpu - u),
            ..Default::default()
        }
    }

    /// 10,000 requests of 12 bytes in a 0.5 s window; the server read 12,000 (warm-up too).
    fn run() -> RunRecord {
        let mut bench = BenchReport {
            requests_ok: 10_000,
            duration_s: 0.5,
            client_cpu: CpuTime {
                user_s: 0.1,
                sys_s: 0.3,
            },
            ..Default::default()
        };
        for (name, count) in [("read", 10_000), ("write", 10_000), ("epoll_wait", 5_000)] {
            bench.syscalls.insert(
                name.into(),
                SyscallStat {
                    count,
                    total_ns: None,
                },
            );
        }
        let mut server = ServerStats::default();
        server.totals.bytes_in = 12 * 12_000;
        server.totals.events_returned = 18_000;
        for (name, count) in [("read", 12_000), ("write", 12_000), ("epoll_wait", 6_000)] {
            server.totals.syscalls.insert(
                name.into(),
                SyscallStat {
                    count,
                    total_ns: None,
                },
            );
        }
        RunRecord {
            cell: Cell {
                server: "epoll-et".into(),
                mode: BenchMode::Long,
                conns: 100,
                rounds: None,
                duration: None,
                payload: 12,
                reply_bytes: None,
                rate: None,
                time_syscalls: false,
            },
            repetition: 1,
            started_at: String::new(),
            wall_s: 1.0,
            bench: Some(bench),
            server: Some(server),
            server_pid: None,
            // 0.25 s at 80% then 0.25 s at 100%, and a 0.05 s tail at 20%: weighted 86.4%.
            samples: vec![
                sample(0.75, 80.0, Some(20.0)),
                sample(1.0, 100.0, Some(30.0)),
                sample(1.05, 20.0, Some(10.0)),
            ],
            settle: None,
            link: None,
            strace: None,
            error: None,
        }
    }

    #[test]
    fn each_cost_by_hand() {
        let r = run();
        let v = |m| value(&r, m).unwrap();
        let close = |a: f64, b: f64| assert!((a - b).abs() < 1e-9, "{a} vs {b}");
        // (80 × 0.25 + 100 × 0.25 + 20 × 0.05) / 0.55 = 83.636…%
        close(v(SERVER_CPU_PCT), 46.0 / 0.55);
        // 83.6% of 0.5 s over 10,000 requests = 41.8 µs.
        close(v(SERVER_CPU_US), 46.0 / 0.55 / 100.0 * 0.5 * 1e6 / 1e4);
        // User: (20 × 0.25 + 30 × 0.25 + 10 × 0.05) / 0.55 = 23.6%.
        close(v(SERVER_USER_US), 13.0 / 0.55 / 100.0 * 0.5 * 1e6 / 1e4);
        close(v(SERVER_SYS_US) + v(SERVER_USER_US), v(SERVER_CPU_US));
        // 30,000 calls over 12,000 requests read; 6,000 waits; 18,000 events.
        close(v(SERVER_SYSCALLS), 2.5);
        close(v(SERVER_WAITS), 0.5);
        close(v(SERVER_EVENTS), 1.5);
        close(v(CLIENT_CPU_PCT), 80.0);
        close(v(CLIENT_CPU_US), 40.0);
        close(v(CLIENT_USER_US), 10.0);
        close(v(CLIENT_SYS_US), 30.0);
        close(v(CLIENT_SYSCALLS), 2.5);
    }

    #[test]
    fn missing_inputs_give_no_figure() {
        let mut r = run();
        r.samples[1].cpu_user_pct = None;
        assert_eq!(
            value(&r, SERVER_USER_US),
            None,
            "one sample without the split"
        );
        assert!(value(&r, SERVER_CPU_US).is_some());
        r.server = None;
        assert_eq!(value(&r, SERVER_SYSCALLS), None);
        r.samples.clear();
        assert_eq!(value(&r, SERVER_CPU_PCT), None);
        let mut failed = run();
        failed.error = Some("x".into());
        assert_eq!(value(&failed, CLIENT_CPU_US), None);
        let mut nothing = run();
        nothing.bench.as_mut().unwrap().requests_ok = 0;
        assert_eq!(value(&nothing, CLIENT_CPU_US), None);
        assert_eq!(value(&run(), "qps"), None, "not a cost metric");
    }
}
