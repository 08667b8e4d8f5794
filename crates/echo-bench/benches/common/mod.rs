//! What echo-bench's benchmarks share: their environment settings, medians, and the guard
//! that keeps `cargo test --benches` from running minutes of load.

/// `name` from the environment as a number, or `default`.
pub(crate) fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The median of `v` (the mean of the middle two for an even count); `v` must not be empty.
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Whether `cargo bench` started this benchmark: it passes `--bench`, while `cargo test
/// --benches` passes nothing and must not run minutes of load.
pub(crate) fn invoked_by_cargo_bench() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// Where a benchmark's server and clients run, as echolab-up's automatic CPU plan places them
/// (`crates/echolab-up/src/cpuplan.rs`): the server alone on the first CPU this process may
/// use, the clients on the others ([`spawn_placed_server`]; processes inherit the affinity of
/// the thread that starts them).
///
/// Why: unpinned, the scheduler's wake-affine placement (a synchronous wake-up is served on
/// the waker's CPU, `wake_affine_idle()` in kernel/sched/fair.c) sometimes keeps server and
/// client on one CPU for a whole run: on a 2-core AMD EPYC VM the same C
/// client against the same server gave 81k, 116k and 108k requests/s in three runs
/// at 100 long connections unpinned, and 131k, 146k pinned.
#[derive(Clone, Copy)]
pub(crate) struct Placement {
    server: nix::sched::CpuSet,
    client: nix::sched::CpuSet,
}

impl Placement {
    /// The placement for this process's CPUs, and what the table's header says of it; `None`
    /// (nothing pinned) with fewer than two, or with `ECHO_BENCH_PIN=0`.
    pub(crate) fn from_env() -> (Option<Self>, String) {
        use nix::sched::{sched_getaffinity, CpuSet};
        use nix::unistd::Pid;
        if std::env::var("ECHO_BENCH_PIN").is_ok_and(|v| v == "0") {
            return (None, "unpinned (ECHO_BENCH_PIN=0)".into());
        }
        let Ok(mine) = sched_getaffinity(Pid::from_raw(0)) else {
            return (None, "unpinned (sched_getaffinity failed)".into());
        };
        let cpus: Vec<usize> = (0..CpuSet::count())
            .filter(|&i| mine.is_set(i).unwrap_or(false))
            .collect();
        let Some((&first, rest)) = cpus.split_first().filter(|(_, rest)| !rest.is_empty()) else {
            return (None, format!("unpinned ({} CPU)", cpus.len()));
        };
        let mut server = CpuSet::new();
        let mut client = CpuSet::new();
        server.set(first).expect("a CPU of this process");
        for &c in rest {
            client.set(c).expect("a CPU of this process");
        }
        let list = |v: &[usize]| {
            v.iter()
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        let label = format!(
            "server pinned to CPU {first}, clients to CPU {} (echolab-up's automatic plan)",
            list(rest)
        );
        (Some(Self { server, client }), label)
    }
}

/// Starts `echo-server --model epoll-et` on the server's CPU of `placement` and leaves the
/// calling thread (and the clients it starts from now on) on the clients' CPUs; unpinned
/// without a placement.
pub(crate) fn spawn_placed_server(placement: Option<&Placement>) -> echolab_testkit::ServerProcess {
    if let Some(p) = placement {
        pin(&p.server);
    }
    let server = echolab_testkit::spawn_echo_server("epoll-et", &[]);
    if let Some(p) = placement {
        pin(&p.client);
    }
    server
}

fn pin(set: &nix::sched::CpuSet) {
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), set)
        .expect("sched_setaffinity to CPUs this process may use");
}
