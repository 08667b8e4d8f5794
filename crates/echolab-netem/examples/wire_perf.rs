//! Measures the userspace wire on this machine (root and iproute2 needed), side by side with
//! plain kernel forwarding in the same run:
//!
//! 1. release error (write time minus scheduled release, from the wire's own histogram) under
//!    calibration traffic at crossnet and lan100, per direction: p50 / p99 / max;
//! 2. lan100 added delay seen from outside: UDP round trips through the wire minus the median
//!    round trip without it, compared with the nominal 2 x (100 us + serialization);
//! 3. the most packets per second each direction carries (64-byte UDP flood, 2 s, bounded),
//!    with and without the wire.
//!
//! Run: `cargo build --release -p echolab-netem --bins --examples &&
//!       target/release/examples/wire_perf target/release/echolab-netem`

use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use echolab_netem::testbed::{
    ChildGuard, Testbed, CLIENT_ADDR, LINK_CLIENT_SIDE, LINK_SERVER_SIDE, SERVER_ADDR,
};
use echolab_netem::wire::stats::WireStats;

const DEADLINE: Duration = Duration::from_secs(60);

fn netem_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../netem")
}

fn start_wire(tb: &Testbed, bin: &Path, profile: &str) -> ChildGuard {
    let mut cmd = tb.command(&tb.lnk, bin);
    cmd.arg("--profile-dir").arg(netem_dir()).args([
        "wire",
        "--profile",
        profile,
        "--client-side",
        LINK_CLIENT_SIDE,
        "--server-side",
        LINK_SERVER_SIDE,
        "--seed",
        "1",
    ]);
    let mut w = ChildGuard::spawn(cmd).expect("spawn wire");
    w.wait_for_stderr("wire ready", DEADLINE)
        .expect("wire ready");
    w
}

fn stop_wire(mut w: ChildGuard) -> WireStats {
    let out = w.terminate(DEADLINE).expect("wire stops");
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.lines().last().expect("final stats")).expect("stats JSON")
}

fn release_errors(tb: &Testbed, bin: &Path, profile: &str) {
    let mut server = tb.command(&tb.srv, bin);
    server.args(["calib-server", "--port", "7070"]);
    let mut server = ChildGuard::spawn(server).unwrap();
    server.wait_for_stderr("listening", DEADLINE).unwrap();
    let wire = start_wire(tb, bin, profile);
    let mut cal = tb.command(&tb.cli, bin);
    cal.arg("--profile-dir").arg(netem_dir()).args([
        "calibrate",
        "--profile",
        profile,
        "--target",
        &format!("{SERVER_ADDR}:7070"),
    ]);
    let out = Testbed::output_within(cal, DEADLINE).unwrap();
    print!(
        "calibrate {profile}:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let s = stop_wire(wire);
    for (dir, d) in [("uplink", &s.uplink), ("downlink", &s.downlink)] {
        let e = &d.release_error_us;
        println!(
            "  {profile} {dir}: {} packets, release error p50 {:.1} us, p99 {:.1} us, max {:.1} us",
            d.packets, e.p50, e.p99, e.max
        );
    }
}

fn udp_rtts(tb: &Testbed, n: usize) -> Vec<f64> {
    let echo = tb
        .in_netns(&tb.srv, || UdpSocket::bind((SERVER_ADDR, 0)))
        .unwrap()
        .unwrap();
    let port = echo.local_addr().unwrap().port();
    echo.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let echo_thread = std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        while let Ok((len, from)) = echo.recv_from(&mut buf) {
            let _ = echo.send_to(&buf[..len], from);
        }
    });
    let client = tb
        .in_netns(&tb.cli, || UdpSocket::bind((CLIENT_ADDR, 0)))
        .unwrap()
        .unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(1)))
        .unwrap();
    let mut rtts = Vec::with_capacity(n);
    let mut buf = [0u8; 64];
    for i in 0..n as u64 {
        let t0 = Instant::now();
        client
            .send_to(&i.to_le_bytes(), (SERVER_ADDR, port))
            .unwrap();
        if client.recv(&mut buf).is_ok() {
            rtts.push(t0.elapsed().as_secs_f64() * 1e6);
        }
    }
    echo_thread.join().unwrap();
    rtts.sort_by(f64::total_cmp);
    rtts
}

fn pct(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// Floods 64-byte UDP datagrams from `from_ns` to `to` for `secs` (at most 5M datagrams) and
/// returns the rate at which they arrived, per second.
fn flood(tb: &Testbed, from_ns: &str, to_ns: &str, to: std::net::Ipv4Addr, secs: f64) -> f64 {
    let rx = tb
        .in_netns(to_ns, move || UdpSocket::bind((to, 0)))
        .unwrap()
        .unwrap();
    let port = rx.local_addr().unwrap().port();
    rx.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
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
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let payload = [0u8; 64];
    let mut sent = 0u64;
    while Instant::now() < end && sent < 5_000_000 {
        if tx.send_to(&payload, (to, port)).is_ok() {
            sent += 1;
        }
    }
    counter.join().unwrap()
}

fn main() {
    let bin = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "target/release/echolab-netem".into()),
    );
    assert!(
        bin.is_file(),
        "{} not found; build with cargo build --release -p echolab-netem",
        bin.display()
    );
    let tb = Testbed::new().expect("namespaces (run as root)");

    println!("== release error under calibration traffic");
    release_errors(&tb, &bin, "crossnet");
    release_errors(&tb, &bin, "lan100");

    println!("== lan100 added delay seen from outside (UDP 48-byte round trips, 2000 each)");
    let base = udp_rtts(&tb, 2000);
    let base_p50 = pct(&base, 0.5);
    let wire = start_wire(&tb, &bin, "lan100");
    let shaped = udp_rtts(&tb, 2000);
    stop_wire(wire);
    // 2 x (100 us delay + (20 IP + 8 UDP + 8 payload + 38 framing) bytes at 100 Mbit/s).
    let nominal = 2.0 * (100.0 + (20.0 + 8.0 + 8.0 + 38.0) * 8.0 / 100.0);
    let err: Vec<f64> = shaped.iter().map(|r| r - base_p50 - nominal).collect();
    println!(
        "  baseline RTT p50 {base_p50:.1} us; with wire p50 {:.1} p99 {:.1} us; added-delay error vs nominal {nominal:.1} us: p50 {:+.1} p99 {:+.1} max {:+.1} us",
        pct(&shaped, 0.5),
        pct(&shaped, 0.99),
        pct(&err, 0.5),
        pct(&err, 0.99),
        err.last().unwrap()
    );

    println!("== packet rate, 64-byte UDP flood for 2 s per direction");
    let plain_up = flood(&tb, &tb.cli, &tb.srv, SERVER_ADDR, 2.0);
    let plain_down = flood(&tb, &tb.srv, &tb.cli, CLIENT_ADDR, 2.0);
    let dir = std::env::temp_dir().join(format!("wire-perf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pass = dir.join("passthrough.yaml");
    std::fs::write(&pass, "name: passthrough\ndescription: no impairment\nsource: perf\ntopology: link\nuplink: { limit: 10000 }\ndownlink: { limit: 10000 }\nexpected:\n  rtt: { value: 0s, minus: 0s, plus: 1s }\n").unwrap();
    let wire = start_wire(&tb, &bin, pass.to_str().unwrap());
    let wire_up = flood(&tb, &tb.cli, &tb.srv, SERVER_ADDR, 2.0);
    let wire_down = flood(&tb, &tb.srv, &tb.cli, CLIENT_ADDR, 2.0);
    let s = stop_wire(wire);
    let _ = std::fs::remove_dir_all(&dir);
    println!("  plain forwarding: uplink {plain_up:.0} pkt/s, downlink {plain_down:.0} pkt/s");
    println!(
        "  through the wire: uplink {wire_up:.0} pkt/s ({:.2} of plain), downlink {wire_down:.0} pkt/s ({:.2} of plain); wire drops_queue up {} down {}",
        wire_up / plain_up,
        wire_down / plain_down,
        s.uplink.drops_queue,
        s.downlink.drops_queue
    );
}
