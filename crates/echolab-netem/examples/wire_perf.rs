//! Measures the userspace wire on this machine (root and iproute2 needed), side by side with
//! plain kernel forwarding, and optionally with other builds of the wire, in one run. Every
//! measurement is repeated `--reps` times with the variants interleaved (so load from other
//! users of the host hits them alike); each figure is the median over repetitions, with the
//! repetitions' values in brackets.
//!
//! 1. release error (write time minus scheduled release, from the wire's own histogram) under
//!    calibration traffic at crossnet and lan100, per direction, with the calibration verdict,
//!    every attempt's goodput, the self-probe compensation, and the most packets the wire held
//!    and how many it dropped at the queue limit;
//! 2. added delay seen from outside, at lan100 and crossnet: 8-byte UDP round trips through
//!    the wire minus the median round trip without it (measured just before and after),
//!    each against the link model's added RTT for that exchange, drawn with the wire's own
//!    seed (a new seed each repetition) ([`echolab_netem::wire::endtoend`]): per-exchange
//!    error at p50, p99 and max, the distribution's median shift, and the baseline's own
//!    p99 − p50 (host noise, included in every figure). Baselines are paced by
//!    the model's median added RTT, so the measuring threads sleep alike in both. Three ways
//!    to take a round trip ([`ClientWait`]): the client blocked (its wake-up counts), the
//!    client polling (it does not), and both blocked with the RTT taken from the kernel's
//!    receive stamps less the echo's turnaround (RFC 5357's two-way method: no endpoint's
//!    scheduling counts, the figure the link is judged by); blocked endpoints run at
//!    real-time priority below the wire's, a polling one fair, so neither delays the wire;
//! 3. the most packets per second each direction carries (64-byte UDP flood, 2 s, at most 5M
//!    datagrams), with and without the wire: forwarded out of the link host's egress device,
//!    and received by the destination socket;
//! 4. the CPU an idle wire uses over 2 s (from /proc/PID/stat).
//!
//! Run: `cargo build --release -p echolab-netem --bins --examples &&
//!       target/release/examples/wire_perf [--reps N] [--section release|delay|rate]...
//!       [--readme docs/measurements.md] target/release/echolab-netem [OTHER_BUILD...]`
//! (all sections when none is named; `--readme` puts the output between the file's wire_perf
//! markers, which is how the figures in docs/measurements.md are made: `scripts/readme-wire`).

use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use echolab_core::cmd::CalibrationReport;
use echolab_core::profile::Profile;
use echolab_netem::testbed::{
    ChildGuard, Testbed, CLIENT_ADDR, LINK_CLIENT_SIDE, LINK_SERVER_SIDE, SERVER_ADDR,
};
use echolab_netem::wire::counters::{DirectionSnapshot, WireStats};
use echolab_netem::wire::endtoend::{self, AddedDelayError, ClientWait, PROBE_IP_BYTES};

const DEADLINE: Duration = Duration::from_secs(60);

/// Everything printed, kept for `--readme`.
static OUTPUT: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());

/// `println!` that also keeps the line for `--readme`.
macro_rules! out {
    ($($arg:tt)*) => {{
        let line = format!($($arg)*);
        println!("{line}");
        let mut o = OUTPUT.lock().unwrap_or_else(|p| p.into_inner());
        o.push_str(&line);
        o.push('\n');
    }};
}

/// The markers in docs/measurements.md; what lies between them is replaced by this run's output.
const README_BEGIN: &str = "<!-- wire_perf:begin -->";
const README_END: &str = "<!-- wire_perf:end -->";

/// Replaces the text between the markers in `readme` with this run's output in a text block,
/// after the command that produced it.
fn splice_readme(readme: &Path, command: &str) -> Result<(), String> {
    let text = std::fs::read_to_string(readme).map_err(|e| format!("{}: {e}", readme.display()))?;
    let (Some(b), Some(e)) = (text.find(README_BEGIN), text.find(README_END)) else {
        return Err(format!(
            "{}: no {README_BEGIN} ... {README_END} markers",
            readme.display()
        ));
    };
    let output = OUTPUT.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let body = format!("{README_BEGIN}\n```text\n$ {command}\n{output}```\n");
    let new = format!("{}{body}{}", &text[..b], &text[e..]);
    std::fs::write(readme, new).map_err(|e| format!("{}: {e}", readme.display()))
}

/// The machine the figures come from: date, CPU count and model, kernel (their CPU model
/// changes from one session to the next, and the figures with it).
fn machine_line() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")?
                .split_once(':')
                .map(|x| x.1.trim())
        })
        .unwrap_or("unknown model");
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!(
        "machine: {} UTC, {cpus} CPUs ({model}), kernel {}",
        &echolab_core::utc_now_rfc3339()[..16],
        kernel.trim()
    )
}

/// The `cpu` line of /proc/stat (proc(5)), jiffies: user nice system idle iowait irq
/// softirq steal.
fn cpu_times() -> Option<Vec<u64>> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .filter_map(|x| x.parse().ok())
        .collect();
    (v.len() == 8).then_some(v)
}

/// The hypervisor's share of the run: steal time (8th field) over all CPU time between two
/// readings. On a VM, time stolen in bursts shows as milliseconds in the host-noise rows above.
fn steal_line(before: &[u64], after: &[u64]) -> String {
    let d: Vec<u64> = after.iter().zip(before).map(|(a, b)| a - b).collect();
    let total: u64 = d.iter().sum();
    format!(
        "host: steal {:.2}% of all CPU time over the run (/proc/stat), busy {:.1}%",
        100.0 * d[7] as f64 / total.max(1) as f64,
        100.0 * (total - d[3] - d[4]) as f64 / total.max(1) as f64
    )
}

fn netem_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../netem")
}

fn start_wire(tb: &Testbed, bin: &Path, profile: &str) -> ChildGuard {
    start_wire_seeded(tb, bin, profile, 1)
}

fn start_wire_seeded(tb: &Testbed, bin: &Path, profile: &str, seed: u64) -> ChildGuard {
    tb.start_wire(bin, &netem_dir(), profile, seed, DEADLINE)
        .expect("wire ready")
}

fn stop_wire(mut w: ChildGuard) -> WireStats {
    let out = w.terminate(DEADLINE).expect("wire stops");
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.lines().last().expect("final stats")).expect("stats JSON")
}

/// Median of `v` (NaN when empty).
fn median(v: &[f64]) -> f64 {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| !x.is_nan()).collect();
    s.sort_by(f64::total_cmp);
    endtoend::quantile(&s, 0.5)
}

/// "median [rep1 rep2 ...]" with `digits` decimals.
fn show(v: &[f64], digits: usize) -> String {
    let reps: Vec<String> = v.iter().map(|x| format!("{x:.digits$}")).collect();
    format!("{:.digits$} [{}]", median(v), reps.join(" "))
}

/// One calibration through a fresh wire `bin` at `profile`: its report (`calibrate --json`),
/// the wire's final stats, and the wire's CPU over the calibration in % of one core (what its
/// early wake-up's polling costs under traffic).
fn calibrated(tb: &Testbed, bin: &Path, profile: &str) -> (CalibrationReport, WireStats, f64) {
    let mut server = tb.command(&tb.srv, bin);
    server.args(["calib-server", "--port", "7070"]);
    let mut server = ChildGuard::spawn(server).unwrap();
    server.wait_for_stderr("listening", DEADLINE).unwrap();
    let wire = start_wire(tb, bin, profile);
    let pid = wire.child.as_ref().expect("running").id();
    let (cpu0, t0) = (cpu_seconds(pid), Instant::now());
    let mut cal = tb.command(&tb.cli, bin);
    cal.arg("--profile-dir").arg(netem_dir()).args([
        "calibrate",
        "--profile",
        profile,
        "--target",
        &format!("{SERVER_ADDR}:7070"),
        "--json",
    ]);
    let out = Testbed::output_within(cal, DEADLINE).unwrap();
    let report: CalibrationReport = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "calibrate --json: {e}; stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let cpu = (cpu_seconds(pid) - cpu0) / t0.elapsed().as_secs_f64() * 100.0;
    (report, stop_wire(wire), cpu)
}

/// Every attempt's goodput in `report`, the missed ones first, as (uplink, downlink) Mbit/s.
fn attempt_goodputs(report: &CalibrationReport) -> Vec<(Option<f64>, Option<f64>)> {
    let missed = report
        .missed_attempts
        .iter()
        .map(|m| (m.goodput_uplink_mbit, m.goodput_downlink_mbit));
    missed
        .chain([(report.goodput_uplink_mbit, report.goodput_downlink_mbit)])
        .collect()
}

fn udp_rtts(tb: &Testbed, n: usize, pace: Duration, wait: ClientWait) -> Vec<Option<f64>> {
    endtoend::round_trips(tb, n, pace, DEADLINE, wait).expect("UDP round trips")
}

/// Packets device `dev` in namespace `ns` has transmitted (`ip -s -j link`).
fn tx_packets(ns: &str, dev: &str) -> u64 {
    let out = std::process::Command::new("ip")
        .args(["-n", ns, "-s", "-j", "link", "show", "dev", dev])
        .output()
        .expect("ip -s link");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("ip JSON");
    v[0]["stats64"]["tx"]["packets"]
        .as_u64()
        .expect("stats64.tx.packets")
}

/// UDP datagrams dropped because a receiving socket's buffer was full, in namespace `ns`
/// (`RcvbufErrors` of the `Udp:` lines of /proc/net/snmp, read by a thread in `ns`).
fn udp_rcvbuf_errors(tb: &Testbed, ns: &str) -> u64 {
    let text = tb
        .in_netns(ns, || std::fs::read_to_string("/proc/thread-self/net/snmp"))
        .expect("enter namespace")
        .expect("/proc/thread-self/net/snmp");
    let mut udp = text.lines().filter(|l| l.starts_with("Udp: "));
    let (names, values) = (
        udp.next().expect("Udp header"),
        udp.next().expect("Udp values"),
    );
    let at = names
        .split_whitespace()
        .position(|n| n == "RcvbufErrors")
        .expect("RcvbufErrors");
    values.split_whitespace().nth(at).unwrap().parse().unwrap()
}

/// The receiving socket's buffer in the packet-rate test, bytes: deep enough (about 20 ms of
/// 64-byte datagrams at 100k/s, each taking about 1 KiB of buffer with its kernel overhead) that
/// the receiver's own scheduling delays, which this test does not measure, lose nothing.
const RECEIVE_BUFFER_BYTES: libc::c_int = 2 << 20;

/// Gives `rx` [`RECEIVE_BUFFER_BYTES`] of receive buffer, above `net.core.rmem_max`
/// (SO_RCVBUFFORCE, socket(7): needs CAP_NET_ADMIN, which this example has as root).
fn deep_receive_buffer(rx: &UdpSocket) {
    use std::os::fd::AsRawFd;
    // SAFETY: passes a live c_int of its own size to setsockopt(2) on a socket we own.
    let rc = unsafe {
        libc::setsockopt(
            rx.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&RECEIVE_BUFFER_BYTES as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "SO_RCVBUFFORCE: {}", std::io::Error::last_os_error());
}

/// Packets per second of one flood: what the link host forwarded out of its egress device
/// while the sender ran (what the link carries; packets still queued at the end are not
/// counted), and what the receiving socket got (lower when the receiver, a fair-scheduled
/// thread sharing 2 cores with the sender and the wire, falls behind and its buffer drops).
struct FloodRate {
    /// Datagrams the sender sent per second.
    offered: f64,
    forwarded: f64,
    received: f64,
    /// Datagrams the receiving socket dropped (its buffer full: the receiver fell behind).
    receiver_drops: u64,
}

/// Sends 64-byte UDP datagrams from `from_ns` to `to` for `secs` (at most 5M datagrams):
/// as fast as the sender can (`pace` `None`, a flood) or on a fixed schedule of `pace`
/// datagrams per second (open loop: a late sender catches up in a burst, so the offered rate
/// does not drop when the host is busy); `egress` is the link namespace's device towards `to`.
fn flood(
    tb: &Testbed,
    from_ns: &str,
    to_ns: &str,
    to: std::net::Ipv4Addr,
    egress: &str,
    secs: f64,
    pace: Option<f64>,
) -> FloodRate {
    let rx = tb
        .in_netns(to_ns, move || UdpSocket::bind((to, 0)))
        .unwrap()
        .unwrap();
    let port = rx.local_addr().unwrap().port();
    rx.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    deep_receive_buffer(&rx);
    let counter = std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        let (mut n, mut first, mut last) = (0u64, None, Instant::now());
        while rx.recv(&mut buf).is_ok() {
            let now = Instant::now();
            first.get_or_insert(now);
            last = now;
            n += 1;
        }
        match first {
            Some(f) if n > 1 => (n - 1) as f64 / last.duration_since(f).as_secs_f64(),
            _ => 0.0,
        }
    });
    let tx = tb
        .in_netns(from_ns, || UdpSocket::bind("0.0.0.0:0"))
        .unwrap()
        .unwrap();
    let rcvbuf0 = udp_rcvbuf_errors(tb, to_ns);
    let (tx0, t0) = (tx_packets(&tb.lnk, egress), Instant::now());
    let end = t0 + Duration::from_secs_f64(secs);
    let payload = [0u8; 64];
    let mut sent = 0u64;
    loop {
        let now = Instant::now();
        if now >= end || sent >= 5_000_000 {
            break;
        }
        if let Some(rate) = pace {
            if sent as f64 >= now.duration_since(t0).as_secs_f64() * rate {
                // Ahead of the schedule: a short sleep, so the sender leaves its CPU to the
                // wire and the receiver as a paced application would.
                std::thread::sleep(Duration::from_micros(200));
                continue;
            }
        }
        if tx.send_to(&payload, (to, port)).is_ok() {
            sent += 1;
        }
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let forwarded = (tx_packets(&tb.lnk, egress) - tx0) as f64 / elapsed;
    let received = counter.join().unwrap();
    FloodRate {
        offered: sent as f64 / elapsed,
        forwarded,
        received,
        receiver_drops: udp_rcvbuf_errors(tb, to_ns) - rcvbuf0,
    }
}

/// User plus system CPU time of process `pid`, seconds
/// ([`echolab_testkit::process_cpu_seconds`]).
fn cpu_seconds(pid: u32) -> f64 {
    echolab_testkit::process_cpu_seconds(pid).expect("/proc/PID/stat of a live process")
}

struct Args {
    reps: usize,
    bins: Vec<PathBuf>,
    /// Sections to run ([`SECTIONS`]); all when none is named.
    sections: Vec<String>,
    /// `--readme FILE`: splice the output into FILE between its wire_perf markers.
    readme: Option<PathBuf>,
}

/// `--section` names: 1, 2, and 3 with 4 (the idle CPU is measured on the rate test's wire).
const SECTIONS: [&str; 3] = ["release", "delay", "rate"];

fn args() -> Args {
    let mut reps = 3;
    let mut bins = Vec::new();
    let mut sections = Vec::new();
    let mut readme = None;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        if a == "--readme" {
            readme = it.next().map(PathBuf::from);
        } else if a == "--section" {
            let v = it.next().unwrap_or_default();
            if !SECTIONS.contains(&v.as_str()) {
                eprintln!("wire_perf: --section {v:?}: expected one of {SECTIONS:?}");
                std::process::exit(2);
            }
            sections.push(v);
        } else if a == "--reps" {
            let v = it.next().unwrap_or_default();
            reps = v.parse().unwrap_or_else(|_| {
                eprintln!("wire_perf: --reps {v:?}: expected a positive whole number");
                std::process::exit(2)
            });
        } else {
            bins.push(PathBuf::from(a));
        }
    }
    if bins.is_empty() {
        bins.push("target/release/echolab-netem".into());
    }
    for b in &bins {
        if !b.is_file() {
            eprintln!(
                "wire_perf: {} not found; build with cargo build --release -p echolab-netem",
                b.display()
            );
            std::process::exit(2);
        }
    }
    Args {
        reps: reps.max(1),
        bins,
        sections,
        readme,
    }
}

fn main() {
    let Args {
        reps,
        bins,
        sections,
        readme,
    } = args();
    let run = |section: &str| sections.is_empty() || sections.iter().any(|s| s == section);
    let tb = Testbed::new().expect("namespaces (run as root)");
    let names: Vec<String> = bins.iter().map(|b| b.display().to_string()).collect();
    out!("wire builds: {names:?}; {reps} repetitions, interleaved");
    out!("{}", machine_line());
    let stat_before = cpu_times();

    if run("release") {
        release_section(&tb, &bins, &names, reps);
    }
    if run("delay") {
        delay_section(&tb, &bins, &names, reps);
    }
    if run("rate") {
        rate_and_idle_section(&tb, &bins, &names, reps);
    }
    if let (Some(a), Some(b)) = (stat_before, cpu_times()) {
        out!("{}", steal_line(&a, &b));
    }
    if let Some(readme) = readme {
        // The command as typed, without the --readme pair (where the output went).
        let mut command = vec!["target/release/examples/wire_perf".to_string()];
        let mut args = std::env::args().skip(1);
        while let Some(a) = args.next() {
            if a == "--readme" {
                args.next();
            } else {
                command.push(a);
            }
        }
        if let Err(e) = splice_readme(&readme, &command.join(" ")) {
            eprintln!("wire_perf: --readme: {e}");
            std::process::exit(1);
        }
    }
}

/// Section 1: release error under calibration traffic.
fn release_section(tb: &Testbed, bins: &[PathBuf], names: &[String], reps: usize) {
    out!("== release error under calibration traffic (us), per build and profile");
    for profile in ["crossnet", "lan100"] {
        for (bin, name) in bins.iter().zip(names) {
            let mut passes = 0;
            let mut cols: [Vec<f64>; 12] = Default::default();
            let mut verdicts = Vec::new();
            let mut wire_cpu = Vec::new();
            let mut goodput: [Vec<f64>; 2] = Default::default();
            for _ in 0..reps {
                let (report, s, cpu) = calibrated(tb, bin, profile);
                wire_cpu.push(cpu);
                passes += report.pass as usize;
                if !report.pass {
                    verdicts.push(report.reason.clone());
                }
                for (up, down) in attempt_goodputs(&report) {
                    goodput[0].extend(up);
                    goodput[1].extend(down);
                }
                for (i, d) in [&s.uplink, &s.downlink].into_iter().enumerate() {
                    // A direction that released nothing has no release error to show.
                    if let Some(r) = d.release_error_us {
                        cols[i * 6].push(r.p50);
                        cols[i * 6 + 1].push(r.p99);
                        cols[i * 6 + 2].push(r.max);
                    }
                    cols[i * 6 + 3].push(d.compensation_us);
                    cols[i * 6 + 4].push(d.peak_queue as f64);
                    cols[i * 6 + 5].push(d.counts.drops_queue as f64);
                }
            }
            out!(
                "  {profile} {name}: calibration passed {passes} of {reps} {verdicts:?}; wire CPU during it {} % of one core",
                show(&wire_cpu, 1)
            );
            out!(
                "    goodput, every attempt (Mbit/s): uplink {}  downlink {}",
                show(&goodput[0], 1),
                show(&goodput[1], 1)
            );
            for (i, dir) in ["uplink", "downlink"].into_iter().enumerate() {
                out!(
                    "    {dir}: p50 {}  p99 {}  max {}  compensation {}; queue peak {} packets, dropped at the limit {}",
                    show(&cols[i * 6], 1),
                    show(&cols[i * 6 + 1], 1),
                    show(&cols[i * 6 + 2], 0),
                    show(&cols[i * 6 + 3], 1),
                    show(&cols[i * 6 + 4], 0),
                    show(&cols[i * 6 + 5], 0)
                );
            }
        }
    }
}

/// Section 2: the added delay seen from outside, against the link model.
fn delay_section(tb: &Testbed, bins: &[PathBuf], names: &[String], reps: usize) {
    out!("== added delay seen from outside: error vs the link model (us)");
    let cases = [("lan100", 1000), ("crossnet", 300)]
        .into_iter()
        .flat_map(|(p, n)| {
            [ClientWait::Block, ClientWait::Spin, ClientWait::Stamped].map(|w| (p, n, w))
        });
    for (profile, n, wait) in cases {
        let p = Profile::load(&netem_dir().join(format!("{profile}.yaml"))).expect("profile");
        let (up, down) = (p.uplink.unwrap(), p.downlink.unwrap());
        let model = endtoend::model_added_rtt(&up, &down, PROBE_IP_BYTES, 100_000, 9);
        out!(
            "  {profile}, client {}: model added RTT p50 {:.1} p99 {:.1}; {n} round trips per block, \
             each compared with the model's draw for it (the wire's own seed)",
            match wait {
                ClientWait::Block => "blocked in recv (its wake-up counts)",
                ClientWait::Spin => "polling (its wake-up left out)",
                ClientWait::Stamped => "and echo blocked, RTT from the kernel's receive stamps less the echo's turnaround (RFC 5357: no endpoint's scheduling counts)",
            },
            endtoend::quantile(&model, 0.5),
            endtoend::quantile(&model, 0.99)
        );
        // Baselines sleep between exchanges as long as the wire holds each one.
        let pace = Duration::from_secs_f64(endtoend::quantile(&model, 0.5) / 1e6);
        let mut noise = Vec::new();
        // Per build: per-exchange error p50, p99, max, p99 beyond the host's noise, and the
        // distribution's median shift (wire::endtoend).
        let mut errs: Vec<[Vec<f64>; 5]> = bins.iter().map(|_| Default::default()).collect();
        // Blocks where the wire carried other packets than the exchanges', so that its draws
        // and the model's do not pair (none expected: the testbed's links carry nothing else).
        let mut unpaired = Vec::new();
        // The wire's own view: release error p50 and p99 (both directions' worse) and the
        // compensation it subtracted (uplink + downlink), per build.
        let mut own: Vec<[Vec<f64>; 4]> = bins.iter().map(|_| Default::default()).collect();
        // The host at each repetition's start: timer wake-up p99 after a wait for a steady
        // machine (echolab_core::quiet), and whether it came before the wait's deadline.
        let mut host = Vec::new();
        for rep in 0..reps {
            if let Some(s) =
                echolab_core::quiet::wait_for_quiet_blocking(echolab_core::quiet::Condition::Steady)
            {
                host.push(format!(
                    "{:.0}{}",
                    s.wake_p99_us.unwrap_or(f64::NAN),
                    if s.quiet { "" } else { " (not steady)" }
                ));
            }
            // A new seed each repetition, the same for every build within it; the model is
            // drawn with it too, so each exchange pairs with the draws the wire gave it.
            let seed = 1 + rep as u64;
            let model = endtoend::model_added_rtt_in_order(&up, &down, PROBE_IP_BYTES, n, seed);
            let before = endtoend::sorted(&udp_rtts(tb, 1000.min(n), pace, wait));
            let mut shaped = Vec::new();
            for (i, bin) in bins.iter().enumerate() {
                let wire = start_wire_seeded(tb, bin, profile, seed);
                shaped.push(udp_rtts(tb, n, Duration::ZERO, wait));
                let s = stop_wire(wire);
                let (u, d) = (&s.uplink, &s.downlink);
                let answered = shaped[i].iter().flatten().count() as u64;
                if u.counts.packets != n as u64 || d.counts.packets != answered {
                    unpaired.push(format!(
                        "rep {rep} {}: {} up / {} down for {n} exchanges, {answered} answered",
                        names[i], u.counts.packets, d.counts.packets
                    ));
                }
                // The worse direction of each; a direction without the figure does not count.
                let worse = |f: fn(&DirectionSnapshot) -> Option<f64>| {
                    f(u).into_iter().chain(f(d)).reduce(f64::max)
                };
                own[i][0].extend(worse(|x| x.release_error_us.map(|r| r.p50)));
                own[i][1].extend(worse(|x| x.release_error_us.map(|r| r.p99)));
                own[i][2].push(u.compensation_us + d.compensation_us);
                own[i][3].extend(worse(|x| x.tun_wait_us.map(|r| r.p50)));
            }
            let after = endtoend::sorted(&udp_rtts(tb, 1000.min(n), pace, wait));
            noise.push(endtoend::quantile(&before, 0.99) - endtoend::quantile(&before, 0.5));
            // The path without the wire, before and after the builds ran.
            let mut baseline = [before, after].concat();
            baseline.sort_by(f64::total_cmp);
            for (i, s) in shaped.iter().enumerate() {
                let e = AddedDelayError::of(s, &baseline, &model);
                errs[i][0].push(e.p50);
                errs[i][1].push(e.p99);
                errs[i][2].push(e.max);
                errs[i][3].push(e.p99_beyond_noise);
                errs[i][4].push(e.median_shift);
            }
        }
        out!(
            "    each repetition after a wait for a steady host; its timer wake-up p99 (us): [{}]",
            host.join(" ")
        );
        out!("    baseline p99 - p50 (host noise): {}", show(&noise, 1));
        if !unpaired.is_empty() {
            out!(
                "    NOT PAIRED (the wire carried other packets; per-exchange errors are wrong): {}",
                unpaired.join("; ")
            );
        }
        for ((name, e), o) in names.iter().zip(&errs).zip(&own) {
            out!(
                "    {name}: per-exchange error p50 {}  p99 {}  max {}; p99 beyond the host's noise {}; the distribution's median shift {}",
                show(&e[0], 1),
                show(&e[1], 1),
                show(&e[2], 0),
                show(&e[3], 1),
                show(&e[4], 1)
            );
            out!(
                "      the wire's own release error p50 {}  p99 {} (worse direction); compensation up + down {}; TUN wait p50 {} (worse direction, kernel stamps only)",
                show(&o[0], 1),
                show(&o[1], 1),
                show(&o[2], 1),
                show(&o[3], 1)
            );
        }
    }
}

/// The offered load of the packet-rate section's paced rows, datagrams per second per
/// direction: the floor of what the wire must carry (docs/measurements.md,
/// "Userspace wire").
const PACED_PPS: f64 = 100_000.0;

/// Sections 3 and 4: packet rate against plain forwarding, and the idle wire's CPU.
fn rate_and_idle_section(tb: &Testbed, bins: &[PathBuf], names: &[String], reps: usize) {
    out!("== packet rate, 64-byte UDP for 2 s per direction, flooded and paced at {PACED_PPS} pkt/s, into a {} KiB receive buffer (pkt/s; ratio to plain forwarding in the same repetition)", RECEIVE_BUFFER_BYTES / 1024);
    let dir = std::env::temp_dir().join(format!("wire-perf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pass = dir.join("passthrough.yaml");
    std::fs::write(&pass, "name: passthrough\ndescription: no impairment\nsource: perf\ntopology: link\nuplink: { limit: 10000 }\ndownlink: { limit: 10000 }\nexpected:\n  rtt: { value: 0s, minus: 0s, plus: 1s }\n").unwrap();
    let loads: [(&str, Option<f64>); 2] = [("flood", None), ("paced", Some(PACED_PPS))];
    // Per load and direction: offered, forwarded, received, receiver drops; through each
    // build also forwarded and received as ratios to plain, and the wire's overload spells.
    let mut plain: Vec<[[Vec<f64>; 4]; 2]> = loads.iter().map(|_| Default::default()).collect();
    let mut rates: Vec<Vec<[[Vec<f64>; 7]; 2]>> = bins
        .iter()
        .map(|_| loads.iter().map(|_| Default::default()).collect())
        .collect();
    let mut idle_cpu: Vec<Vec<f64>> = bins.iter().map(|_| Vec::new()).collect();
    let both = |tb: &Testbed, pace: Option<f64>| {
        [
            flood(
                tb,
                &tb.cli,
                &tb.srv,
                SERVER_ADDR,
                LINK_SERVER_SIDE,
                2.0,
                pace,
            ),
            flood(
                tb,
                &tb.srv,
                &tb.cli,
                CLIENT_ADDR,
                LINK_CLIENT_SIDE,
                2.0,
                pace,
            ),
        ]
    };
    for _ in 0..reps {
        for (l, &(load, pace)) in loads.iter().enumerate() {
            let base = both(tb, pace);
            for (d, r) in base.iter().enumerate() {
                let p = &mut plain[l][d];
                p[0].push(r.offered);
                p[1].push(r.forwarded);
                p[2].push(r.received);
                p[3].push(r.receiver_drops as f64);
            }
            for (i, bin) in bins.iter().enumerate() {
                let wire = start_wire(tb, bin, pass.to_str().unwrap());
                if l == 0 {
                    let pid = wire.child.as_ref().expect("running").id();
                    let (c0, t0) = (cpu_seconds(pid), Instant::now());
                    // The idle window itself is the measurement, not a wait for readiness.
                    std::thread::sleep(Duration::from_secs(2));
                    idle_cpu[i].push((cpu_seconds(pid) - c0) / t0.elapsed().as_secs_f64() * 100.0);
                }
                let through = both(tb, pace);
                let s = stop_wire(wire);
                for (d, ((r, b), w)) in through
                    .iter()
                    .zip(&base)
                    .zip([&s.uplink, &s.downlink])
                    .enumerate()
                {
                    let x = &mut rates[i][l][d];
                    x[0].push(r.offered);
                    x[1].push(r.forwarded);
                    x[2].push(r.forwarded / b.forwarded);
                    x[3].push(r.received);
                    x[4].push(r.received / b.received);
                    x[5].push(r.receiver_drops as f64);
                    x[6].push(w.fair_share_spells as f64);
                }
                for (dir, d, r) in [
                    ("uplink", &s.uplink, &through[0]),
                    ("downlink", &s.downlink, &through[1]),
                ] {
                    out!(
                        "    {} {load} {dir} drops by cause: loss model {}, wire queue {}, TUN queue (wire behind) {}, write-back {}, receiving socket's buffer {}; overloaded {} times ({:.0} ms)",
                        names[i],
                        d.counts.drops_loss,
                        d.counts.drops_queue,
                        d.drops_device.map_or("unknown".into(), |n| n.to_string()),
                        d.counts.drops_write,
                        r.receiver_drops,
                        d.fair_share_spells,
                        d.fair_share_ms
                    );
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    for (l, &(load, _)) in loads.iter().enumerate() {
        for (d, dir) in ["uplink", "downlink"].into_iter().enumerate() {
            let p = &plain[l][d];
            out!(
                "  {load} {dir} plain forwarding: offered {}  forwarded {}  received {}  (receiving socket's buffer dropped {})",
                show(&p[0], 0),
                show(&p[1], 0),
                show(&p[2], 0),
                show(&p[3], 0)
            );
            for (name, r) in names.iter().zip(&rates) {
                let x = &r[l][d];
                out!(
                    "  {load} {dir} {name}: offered {}  forwarded {} ({} of plain)  received {} ({} of plain)  (receiving socket's buffer dropped {}; wire overloaded {} times)",
                    show(&x[0], 0),
                    show(&x[1], 0),
                    show(&x[2], 2),
                    show(&x[3], 0),
                    show(&x[4], 2),
                    show(&x[5], 0),
                    show(&x[6], 0)
                );
            }
        }
    }
    out!("== idle wire CPU over 2 s (% of one core)");
    for (name, c) in names.iter().zip(&idle_cpu) {
        out!("  {name}: {}", show(c, 2));
    }
}
