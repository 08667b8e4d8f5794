//! echo-bench with its default flags against a C reference client (`reference/rr_client.c`,
//! a single-threaded epoll loop in the shape of neper's tcp_rr / tcp_crr), side by side in one
//! run, against the same `echo-server --model epoll-et`, for five load shapes (and the
//! short `--linger0` one once more with `--short-sockets fresh`, the C client's socket per
//! request, so that the effect of reusing sockets shows beside it): QPS and client CPU per
//! request, and their ratios.
//!
//!     cargo build --release -p echo-server && cargo bench -p echo-bench --bench reference
//!
//! Every measurement runs in a network namespace of its own (server and client both), when
//! the process may create one (root): no TIME_WAIT sockets or connection-tracking entries of
//! an earlier run are left to slow the next one, which otherwise makes the order of the runs
//! decide the short-connection figures. Without that privilege it says so and runs in the
//! current namespace. Repetitions alternate the clients (ABAB...).
//!
//! Server and client run on disjoint CPUs where there are two or more ([`Placement`]).
//!
//! QPS is the smaller of what the client and what the server can do; the server's share of
//! its core over each run says which: near 1, the server is the ceiling, and no client can
//! beat another by more than 1/share there (at 100 long connections on a 2-core Intel Xeon VM,
//! the single-reactor server used 0.91–0.97 of its core under either client; this bench
//! prints the share per run).
//!
//! With `ECHO_BENCH_NEPER=DIR` (neper's `tcp_rr` and `tcp_crr` built in DIR), neper's client
//! runs too, with `-T 1` and, for more than one flow, `-T 2`, in the same alternation, and the
//! table adds its QPS and echo-bench's ratio to the better of the two ([`neper`]).
//!
//! Environment: `ECHO_BENCH_REPS` repetitions (default 3), `ECHO_BENCH_SECS` measured seconds
//! per run (default 5); `ECHO_BENCH_PIN=0` pins nothing; `CC` the C compiler (default `cc`);
//! `ECHO_BENCH_NEPER` as above.

use std::path::{Path, PathBuf};
mod common;
#[path = "reference/neper.rs"]
mod neper;

use std::process::Command;

use common::{env_u64, invoked_by_cargo_bench, median, spawn_placed_server, Placement};
use echolab_core::stats::BenchReport;

/// One load shape: echo-bench's arguments after `HOST PORT`, and the reference client's
/// `FLOWS MODE LINGER0`.
struct Shape {
    label: &'static str,
    echo_bench: &'static [&'static str],
    reference: (&'static str, &'static str, &'static str),
}

const SHAPES: &[Shape] = &[
    Shape {
        label: "100 long connections",
        echo_bench: &["100", "--mode", "long"],
        reference: ("100", "rr", "0"),
    },
    Shape {
        label: "100 long connections, --threads 1",
        echo_bench: &["100", "--mode", "long", "--threads", "1"],
        reference: ("100", "rr", "0"),
    },
    Shape {
        label: "1 long connection",
        echo_bench: &["1", "--mode", "long"],
        reference: ("1", "rr", "0"),
    },
    Shape {
        label: "100 short connections, --linger0 (RST, no TIME_WAIT)",
        echo_bench: &["100", "--mode", "short", "--linger0"],
        reference: ("100", "crr", "1"),
    },
    Shape {
        label: "100 short connections, --linger0, --short-sockets fresh (a socket per request)",
        echo_bench: &[
            "100",
            "--mode",
            "short",
            "--linger0",
            "--short-sockets",
            "fresh",
        ],
        reference: ("100", "crr", "1"),
    },
    Shape {
        label: "100 short connections, client keeps TIME_WAIT",
        echo_bench: &["100", "--mode", "short"],
        reference: ("100", "crr", "0"),
    },
];

/// Whose turn a run is.
#[derive(Debug, Clone, Copy)]
enum Client {
    EchoBench,
    Reference,
    /// neper with the k-th of the shape's thread counts.
    Neper(usize),
}

/// Throughput and CPU of one run.
#[derive(Debug, Clone, Copy)]
struct Run {
    qps: f64,
    cpu_us_per_request: f64,
    /// The share of the client's CPU time spent in the kernel (system time over user plus
    /// system): on loopback the sender's system calls also carry the receiver's TCP work in
    /// softirq (delivery, waking the server), so where it is near 1 the client's own code
    /// leaves little to cut, and 1 / (this share) bounds what a faster client could gain.
    kernel_share: f64,
    failures: u64,
    /// The server's CPU time over the client's whole run (start to exit, warm-up and
    /// connection set-up included), as a share of one core: near 1, the server is the
    /// ceiling and a faster client cannot raise QPS by more than 1/share.
    server_busy: f64,
}

/// Compiles the reference client into cargo's scratch directory for benchmarks.
fn build_reference() -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/reference/rr_client.c");
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("rr_client");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args(["-O2", "-Wall", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .unwrap_or_else(|e| panic!("cannot run the C compiler {cc:?} (set CC): {e}"));
    assert!(status.success(), "{cc} {} failed: {status}", src.display());
    out
}

/// Runs `f` on a thread inside a fresh network namespace with `lo` up, when allowed; the
/// processes it spawns are born there. Returns whether it was isolated.
fn isolated<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> (T, bool) {
    std::thread::spawn(move || {
        let fresh = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).is_ok()
            && Command::new("ip")
                .args(["link", "set", "lo", "up"])
                .status()
                .is_ok_and(|s| s.success());
        (f(), fresh)
    })
    .join()
    .expect("benchmark thread")
}

fn run_echo_bench(port: u16, args: &[&str], secs: u64) -> Run {
    let (port, duration) = (port.to_string(), format!("{secs}s"));
    let mut all = vec!["127.0.0.1", &port];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--duration", &duration, "--json"]);
    let out = Command::new(env!("CARGO_BIN_EXE_echo-bench"))
        .args(&all)
        .output()
        .expect("run echo-bench");
    assert!(
        out.status.success(),
        "echo-bench {all:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: BenchReport = serde_json::from_slice(&out.stdout).expect("a BenchReport");
    Run {
        qps: r.qps,
        cpu_us_per_request: (r.client_cpu.user_s + r.client_cpu.sys_s) * 1e6
            / r.requests_ok.max(1) as f64,
        kernel_share: share(r.client_cpu.sys_s, r.client_cpu.user_s),
        failures: r.requests_failed,
        server_busy: 0.0,
    }
}

fn run_reference(bin: &Path, port: u16, shape: &Shape, secs: u64) -> Run {
    let (flows, mode, linger0) = shape.reference;
    let text = stdout_of(
        Command::new(bin).args([
            "127.0.0.1",
            &port.to_string(),
            flows,
            &secs.to_string(),
            mode,
            linger0,
        ]),
        "rr_client",
    );
    let field = |name: &str| printed_number(&text, name, "rr_client");
    let n = field("transactions");
    Run {
        qps: n / field("seconds"),
        cpu_us_per_request: (field("user_s") + field("sys_s")) * 1e6 / n.max(1.0),
        kernel_share: share(field("sys_s"), field("user_s")),
        failures: field("errors") as u64,
        server_busy: 0.0,
    }
}

/// What `cmd`, an outside client (`who`), printed on stdout.
///
/// # Panics
/// When it cannot start or exits unsuccessfully, with what it printed.
fn stdout_of(cmd: &mut Command, who: &str) -> String {
    let out = cmd
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {who}: {e}"));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{who} {:?}: {text}{}",
        cmd.get_args().collect::<Vec<_>>(),
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// The number a client printed as `name=VALUE` (whitespace-separated, as the C client prints
/// them, or one per line, as neper does).
///
/// # Panics
/// When `text` has no such number, naming `who` printed it.
fn printed_number(text: &str, name: &str, who: &str) -> f64 {
    text.split_whitespace()
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{who} printed no {name}: {text}"))
}

/// `sys / (sys + user)`, 0 when both are 0.
fn share(sys: f64, user: f64) -> f64 {
    if sys + user > 0.0 {
        sys / (sys + user)
    } else {
        0.0
    }
}

fn main() {
    if !invoked_by_cargo_bench() {
        return;
    }
    let reps = env_u64("ECHO_BENCH_REPS", 3).max(1);
    let secs = env_u64("ECHO_BENCH_SECS", 5).max(1);
    let reference = build_reference();
    let neper = neper::Neper::from_env().map(std::sync::Arc::new);
    let (placement, placed) = Placement::from_env();
    println!(
        "echo-server --model epoll-et; {reps} repetitions x {secs} s per client and shape, \
         alternating; medians; {placed}\n"
    );
    let neper_head = if neper.is_some() {
        " neper QPS (-T 1/-T 2) | echo-bench / better neper | neper CPU µs/request (better) | server's share under neper (better) |"
    } else {
        ""
    };
    println!("| load | echo-bench QPS | C reference QPS | QPS ratio | echo-bench CPU µs/request | C CPU µs/request | CPU ratio | client CPU in the kernel (echo-bench/C) | server's share of its core (echo-bench/C) | failures (echo-bench/C) |{neper_head}");
    println!(
        "|---|---|---|---|---|---|---|---|---|---|{}",
        if neper.is_some() {
            "---|---|---|---|"
        } else {
            ""
        }
    );
    let mut all_isolated = true;
    for shape in SHAPES {
        let (mut eb, mut c) = (Vec::new(), Vec::new());
        // neper's runs by thread count: -T 1, and -T 2 where there is more than one flow.
        let neper_threads: &[u32] = match (&neper, shape.reference.0) {
            (None, _) => &[],
            (Some(_), "1") => &[1],
            (Some(_), _) => &[1, 2],
        };
        let mut by_neper: Vec<Vec<Run>> = vec![Vec::new(); neper_threads.len()];
        for _ in 0..reps {
            let turns = [Client::EchoBench, Client::Reference]
                .into_iter()
                .chain((0..neper_threads.len()).map(Client::Neper));
            for turn in turns {
                let bin = reference.clone();
                let neper = neper.clone();
                let neper_t = match turn {
                    Client::Neper(k) => neper_threads[k],
                    _ => 0,
                };
                let (run, fresh) = isolated(move || {
                    let server = spawn_placed_server(placement.as_ref());
                    let port = server.addr.port();
                    let (cpu0, t0) = (server.cpu_seconds(), std::time::Instant::now());
                    let mut run = match (turn, &neper) {
                        (Client::Reference, _) => run_reference(&bin, port, shape, secs),
                        (Client::EchoBench, _) => run_echo_bench(port, shape.echo_bench, secs),
                        (Client::Neper(_), Some(n)) => n.run(port, shape.reference, neper_t, secs),
                        (Client::Neper(_), None) => unreachable!("neper turns need neper"),
                    };
                    if let (Some(a), Some(b)) = (cpu0, server.cpu_seconds()) {
                        run.server_busy = (b - a) / t0.elapsed().as_secs_f64();
                    }
                    run
                });
                all_isolated &= fresh;
                match turn {
                    Client::Reference => c.push(run),
                    Client::EchoBench => eb.push(run),
                    Client::Neper(k) => by_neper[k].push(run),
                }
            }
        }
        let med = |v: &[Run], f: fn(&Run) -> f64| median(v.iter().map(f).collect());
        let (eq, cq) = (med(&eb, |r| r.qps), med(&c, |r| r.qps));
        let (ec, cc) = (
            med(&eb, |r| r.cpu_us_per_request),
            med(&c, |r| r.cpu_us_per_request),
        );
        let (es, cs) = (med(&eb, |r| r.server_busy), med(&c, |r| r.server_busy));
        let (ek, ck) = (med(&eb, |r| r.kernel_share), med(&c, |r| r.kernel_share));
        let fails = |v: &[Run]| v.iter().map(|r| r.failures).sum::<u64>();
        let neper_cells = if by_neper.is_empty() {
            String::new()
        } else {
            // The better neper is the thread count with the higher median QPS.
            let qps: Vec<f64> = by_neper.iter().map(|v| med(v, |r| r.qps)).collect();
            let best = (0..qps.len())
                .max_by(|&a, &b| qps[a].total_cmp(&qps[b]))
                .expect("at least one neper run");
            let all = qps
                .iter()
                .map(|q| format!("{q:.0}"))
                .collect::<Vec<_>>()
                .join("/");
            format!(
                " {all} | {:.2}x | {:.2} | {:.2} |",
                eq / qps[best],
                med(&by_neper[best], |r| r.cpu_us_per_request),
                med(&by_neper[best], |r| r.server_busy),
            )
        };
        println!(
            "| {} | {eq:.0} | {cq:.0} | {:.2}x | {ec:.2} | {cc:.2} | {:.2}x | {ek:.2}/{ck:.2} | {es:.2}/{cs:.2} | {}/{} |{neper_cells}",
            shape.label,
            eq / cq,
            ec / cc,
            fails(&eb),
            fails(&c)
        );
    }
    if !all_isolated {
        println!(
            "note: runs shared this network namespace (no privilege for unshare(2)); \
             TIME_WAIT sockets of one run were still there in the next"
        );
    }
}
