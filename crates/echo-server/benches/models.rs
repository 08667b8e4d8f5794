//! Side-by-side QPS of every echo-server model: each model in turn is
//! started from the release build and driven by echolab's load generator, echo-bench, with 100
//! long connections sending 12-byte echoes (closed loop) for a fixed time after a warm-up. One
//! table row per model: QPS, p99, and the server's system calls per request from its final
//! ServerStats line (requests = bytes_in / 12, so warm-up requests count on both sides).
//!
//! Run (builds echo-server in the bench profile; echo-bench must be built first):
//!
//!     cargo build --release -p echo-bench
//!     cargo bench -p echo-server --bench models -- [--duration 5s] [--warmup 1s] \
//!         [--conns 100] [--client-threads 1] [--workers 2] [--repeat 1] [--no-reference] \
//!         [MODEL...]
//!
//! With `--repeat K` the whole set runs K rounds (models interleaved, so that a burst of outside
//! load hits every model alike) and a summary gives each model's median QPS and its median ratio
//! to the C reference of the same round.
//!
//! The machine matters: client and server share it, so `--client-threads 1` leaves one core to
//! single-reactor servers. Ratios between rows of one run are the result; absolute numbers move
//! with whatever else the machine does. For that ratio the table starts with a reference row:
//! the textbook single-threaded C epoll echo server in `benches/c_reference/epoll_echo.c`,
//! compiled with `cc -O2` when a C compiler is present (`--no-reference` skips it).

#[path = "../tests/common/mod.rs"]
mod common;

use std::process::Command;

use echolab_core::protocol::DEFAULT_PAYLOAD;
use echolab_core::stats::{BenchReport, ServerStats};
use echolab_testkit::{workspace_bin, ServerProcess};

struct Options {
    duration: String,
    warmup: String,
    conns: String,
    client_threads: String,
    workers: String,
    /// `warmup` in seconds.
    warmup_s: f64,
    reference: bool,
    repeat: u32,
    models: Vec<String>,
}

fn parse_options() -> Result<Options, String> {
    let mut o = Options {
        duration: "5s".into(),
        warmup: "1s".into(),
        conns: "100".into(),
        client_threads: "1".into(),
        workers: "2".into(),
        warmup_s: 1.0,
        reference: true,
        repeat: 1,
        models: Vec::new(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "--duration" => o.duration = value("--duration")?,
            "--warmup" => o.warmup = value("--warmup")?,
            "--conns" => o.conns = value("--conns")?,
            "--client-threads" => o.client_threads = value("--client-threads")?,
            "--workers" => o.workers = value("--workers")?,
            "--no-reference" => o.reference = false,
            "--repeat" => {
                let v = value("--repeat")?;
                o.repeat = v
                    .parse()
                    .ok()
                    .filter(|&n| n >= 1)
                    .ok_or(format!("--repeat {v:?}: need a count >= 1"))?;
            }
            // cargo bench passes --bench to every bench target.
            "--bench" => {}
            m if common::ALL_MODELS.contains(&m) => o.models.push(m.to_string()),
            other => {
                return Err(format!(
                    "unknown argument {other:?} (models: {:?})",
                    common::ALL_MODELS
                ))
            }
        }
    }
    o.warmup_s = echolab_core::units::parse_duration(&o.warmup)
        .map_err(|e| format!("--warmup {:?}: {e}", o.warmup))?
        .as_secs_f64();
    if o.models.is_empty() {
        o.models = common::ALL_MODELS.iter().map(|m| m.to_string()).collect();
    }
    Ok(o)
}

/// One model's row.
struct Row {
    bench: BenchReport,
    server: ServerStats,
    server_cpu_s: f64,
}

fn run_model(model: &str, o: &Options) -> Result<Row, String> {
    let server_bin = env!("CARGO_BIN_EXE_echo-server");
    let server = ServerProcess::spawn(
        server_bin.as_ref(),
        &[
            "--model",
            model,
            "--port",
            "0",
            "--bind",
            "127.0.0.1",
            "--workers",
            &o.workers,
        ],
    );
    let cpu_before = common::tree_cpu_seconds(server.pid());
    let bench = drive(server.addr.port(), o);
    let server_cpu_s = common::tree_cpu_seconds(server.pid()) - cpu_before;
    // Stopped before the load's result is looked at, so the stats line is read either way.
    let (_, stats, _) = server.stop();
    Ok(Row {
        bench: bench?,
        server: stats,
        server_cpu_s,
    })
}

/// Runs echo-bench against `addr`'s port with the options' load; returns its report.
fn drive(port: u16, o: &Options) -> Result<BenchReport, String> {
    let port = port.to_string();
    let out = Command::new(workspace_bin("echo-bench"))
        .args([
            "127.0.0.1",
            &port,
            &o.conns,
            "--mode",
            "long",
            "--duration",
            &o.duration,
        ])
        .args([
            "--warmup",
            &o.warmup,
            "--threads",
            &o.client_threads,
            "--json",
        ])
        .output()
        .map_err(|e| format!("run echo-bench: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "echo-bench failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("echo-bench --json output: {e}"))
}

/// Compiles and drives the C reference server; returns its report and CPU seconds.
fn run_reference(o: &Options) -> Result<(BenchReport, f64), String> {
    let src = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/benches/c_reference/epoll_echo.c"
    );
    let bin = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("c_epoll_echo");
    let cc = Command::new("cc")
        .args(["-O2", "-o"])
        .arg(&bin)
        .arg(src)
        .output()
        .map_err(|e| format!("cc not runnable ({e}); use --no-reference"))?;
    if !cc.status.success() {
        return Err(format!(
            "cc failed: {}",
            String::from_utf8_lossy(&cc.stderr).trim()
        ));
    }
    // Killed and reaped when dropped at the end of this function.
    let server = ServerProcess::spawn(&bin, &["0"]);
    let cpu_before = common::tree_cpu_seconds(server.pid());
    let report = drive(server.addr.port(), o)?;
    Ok((report, common::tree_cpu_seconds(server.pid()) - cpu_before))
}

fn per_request(stats: &ServerStats, names: &[&str]) -> f64 {
    let requests = stats.totals.bytes_in as f64 / DEFAULT_PAYLOAD.len() as f64;
    let calls: u64 = names.iter().map(|n| common::syscalls(stats, n)).sum();
    if requests > 0.0 {
        calls as f64 / requests
    } else {
        f64::NAN
    }
}

/// A table row: the model's cells after the name.
fn row_cells(r: &Row) -> String {
    let all: Vec<&str> = r
        .server
        .totals
        .syscalls
        .keys()
        .map(String::as_str)
        .collect();
    let wait = ["epoll_wait", "select", "poll", "io_uring_enter"];
    let requests = r.server.totals.bytes_in as f64 / DEFAULT_PAYLOAD.len() as f64;
    format!(
        "{:.0} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.3} | {:.2} | {:.1}",
        r.bench.qps,
        us(r.bench.latency_us.map(|l| l.p50)),
        us(r.bench.latency_us.map(|l| l.p99)),
        r.bench.requests_failed,
        per_request(&r.server, &all),
        per_request(&r.server, &["read"]),
        per_request(&r.server, &["write"]),
        per_request(&r.server, &wait),
        per_request(&r.server, &["epoll_ctl"]),
        r.server_cpu_s,
        r.server_cpu_s * 1e6 / requests,
    )
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn main() {
    let o = match parse_options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("models bench: {e}");
            std::process::exit(2);
        }
    };
    println!(
        "echo-server models, loopback, {} long connections x 12-byte echo, closed loop, {} after \
         {} warm-up, echo-bench --threads {}, server --workers {} (multi-worker models), \
         {} round(s), models interleaved within a round\n",
        o.conns, o.duration, o.warmup, o.client_threads, o.workers, o.repeat
    );
    println!(
        "| round | model | QPS | p50 us | p99 us | failed | syscalls/req | read/req | write/req | \
         wait/req | epoll_ctl/req | server CPU s | server CPU us/req |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    // Per model: QPS of each round, and its ratio to the reference of the same round.
    let mut qps: Vec<Vec<f64>> = vec![Vec::new(); o.models.len()];
    let mut ratio: Vec<Vec<f64>> = vec![Vec::new(); o.models.len()];
    for round in 1..=o.repeat {
        let reference = if o.reference {
            match run_reference(&o) {
                Ok((b, cpu)) => {
                    // No server counters here: requests over warm-up + run are estimated as the
                    // measured QPS times that whole time (hence "~").
                    let requests = b.qps * (o.warmup_s + b.duration_s);
                    println!(
                        "| {round} | C epoll-lt (reference) | {:.0} | {} | {} | {} | - | - | - \
                         | - | - | {cpu:.2} | ~{:.1} |",
                        b.qps,
                        us(b.latency_us.map(|l| l.p50)),
                        us(b.latency_us.map(|l| l.p99)),
                        b.requests_failed,
                        cpu * 1e6 / requests
                    );
                    Some(b.qps)
                }
                Err(e) => {
                    println!("| {round} | C epoll-lt (reference) | error: {e} |");
                    None
                }
            }
        } else {
            None
        };
        for (i, model) in o.models.iter().enumerate() {
            match run_model(model, &o) {
                Ok(r) => {
                    println!("| {round} | {model} | {} |", row_cells(&r));
                    qps[i].push(r.bench.qps);
                    if let Some(q) = reference {
                        ratio[i].push(r.bench.qps / q);
                    }
                }
                Err(e) => println!("| {round} | {model} | error: {e} |"),
            }
        }
    }
    println!(
        "\n| model | median QPS | min QPS | max QPS | median QPS / C reference (same round) |"
    );
    println!("|---|---:|---:|---:|---:|");
    for (i, model) in o.models.iter().enumerate() {
        let (lo, hi) = qps[i]
            .iter()
            .fold((f64::MAX, 0f64), |(l, h), &q| (l.min(q), h.max(q)));
        println!(
            "| {model} | {:.0} | {lo:.0} | {hi:.0} | {:.2} |",
            median(&mut qps[i]),
            median(&mut ratio[i])
        );
    }
}

/// A latency in µs, or `-` when no request succeeded.
fn us(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.0}"))
}
