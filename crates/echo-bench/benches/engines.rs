//! The engines side by side in one run (event, ring, thread), against one
//! `echo-server --model epoll-et`: QPS and client CPU per request at 1 and 100 long
//! connections, as ratios to the thread engine (the seed's kind of client) and to the default
//! event engine (does the ring win?).
//!
//!     cargo build --release -p echo-server && cargo bench -p echo-bench --bench engines
//!
//! Environment: `ECHO_BENCH_REPS` repetitions (default 5), `ECHO_BENCH_SECS` measured seconds
//! per run (default 5, after a 1 s warm-up), `ECHO_BENCH_CONNS` connection counts (default
//! `1,100`), `ECHO_BENCH_PIN=0` pins nothing (else server and clients run on disjoint CPUs,
//! [`Placement`]). Repetitions alternate the variants (ABCABC...) so
//! that drift in machine load hits all of them alike; the table shows medians and the spread.

mod common;

use std::process::Command;

use common::{env_u64, invoked_by_cargo_bench, median, spawn_placed_server, Placement};
use echolab_core::stats::BenchReport;

struct Variant {
    label: &'static str,
    args: &'static [&'static str],
}

const VARIANTS: &[Variant] = &[
    Variant {
        label: "event (default threads)",
        args: &["--engine", "event"],
    },
    Variant {
        label: "event --threads 1",
        args: &["--engine", "event", "--threads", "1"],
    },
    Variant {
        label: "uring (default threads)",
        args: &["--engine", "uring"],
    },
    Variant {
        label: "thread (1 per conn)",
        args: &["--engine", "thread"],
    },
];

fn run_once(port: u16, conns: u64, secs: u64, extra: &[&str]) -> BenchReport {
    let (port, conns, duration) = (port.to_string(), conns.to_string(), format!("{secs}s"));
    let mut args = vec![
        "127.0.0.1",
        &port,
        &conns,
        "--mode",
        "long",
        "--duration",
        &duration,
    ];
    args.extend_from_slice(&["--warmup", "1s", "--json"]);
    args.extend_from_slice(extra);
    let out = Command::new(env!("CARGO_BIN_EXE_echo-bench"))
        .args(&args)
        .output()
        .expect("run echo-bench");
    assert!(
        out.status.success(),
        "echo-bench {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("a BenchReport")
}

fn main() {
    if !invoked_by_cargo_bench() {
        return;
    }
    let reps = env_u64("ECHO_BENCH_REPS", 5).max(1);
    let secs = env_u64("ECHO_BENCH_SECS", 5).max(1);
    let (placement, placed) = Placement::from_env();
    let server = spawn_placed_server(placement.as_ref());
    let port = server.addr.port();
    println!(
        "echo-server --model epoll-et on {}; {reps} repetitions x {secs} s (+1 s warm-up); {placed}",
        server.addr
    );
    println!("| conns | engine | QPS (median) | QPS min..max | client CPU µs/request (median) | QPS vs thread | CPU/request vs thread | QPS vs event | CPU/request vs event | failures |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let conn_counts: Vec<u64> = std::env::var("ECHO_BENCH_CONNS")
        .unwrap_or_else(|_| "1,100".into())
        .split(',')
        .map(|c| {
            c.trim()
                .parse()
                .expect("ECHO_BENCH_CONNS is a comma-separated list of numbers")
        })
        .collect();
    for conns in conn_counts {
        let mut qps = vec![Vec::new(); VARIANTS.len()];
        let mut cpu = vec![Vec::new(); VARIANTS.len()];
        let mut failed = vec![0u64; VARIANTS.len()];
        for _ in 0..reps {
            for (i, v) in VARIANTS.iter().enumerate() {
                let r = run_once(port, conns, secs, v.args);
                qps[i].push(r.qps);
                cpu[i].push(
                    (r.client_cpu.user_s + r.client_cpu.sys_s) * 1e6 / r.requests_ok.max(1) as f64,
                );
                failed[i] += r.requests_failed;
            }
        }
        let thread = VARIANTS.len() - 1;
        let (base_qps, base_cpu) = (median(qps[thread].clone()), median(cpu[thread].clone()));
        let (event_qps, event_cpu) = (median(qps[0].clone()), median(cpu[0].clone()));
        for (i, v) in VARIANTS.iter().enumerate() {
            let (q, c) = (median(qps[i].clone()), median(cpu[i].clone()));
            let lo = qps[i].iter().cloned().fold(f64::INFINITY, f64::min);
            let hi = qps[i].iter().cloned().fold(0.0, f64::max);
            println!(
                "| {conns} | {} | {q:.0} | {lo:.0}..{hi:.0} | {c:.2} | {:.2}x | {:.2}x | {:.2}x | {:.2}x | {} |",
                v.label,
                q / base_qps,
                c / base_cpu,
                q / event_qps,
                c / event_cpu,
                failed[i]
            );
        }
    }
    drop(server);
}
