//! The userspace wire and calibration, live, in client/link/server network namespaces (root
//! and iproute2 needed). Every namespace and process is removed by Drop guards.

use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use echolab_netem::testbed::{
    ChildGuard, Testbed, CLIENT_ADDR, LINK_CLIENT_SIDE, LINK_SERVER_SIDE, SERVER_ADDR,
};
use echolab_netem::wire::counters::WireStats;
use echolab_netem::wire::endtoend::{self, AddedDelayError, ClientWait, PROBE_IP_BYTES};

const BIN: &str = env!("CARGO_BIN_EXE_echolab-netem");
/// Generous: two cores shared with other builds and tests.
const DEADLINE: Duration = Duration::from_secs(60);
const CALIB_PORT: u16 = 7070;

fn profile_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../netem")
}

fn start_wire(tb: &Testbed, profile: &str) -> ChildGuard {
    tb.start_wire(BIN.as_ref(), &profile_dir(), profile, 4, DEADLINE)
        .expect("wire readiness")
}

fn start_calib_server(tb: &Testbed) -> ChildGuard {
    let mut cmd = tb.command(&tb.srv, BIN.as_ref());
    cmd.args(["calib-server", "--port", &CALIB_PORT.to_string()]);
    let mut server = ChildGuard::spawn(cmd).expect("spawn calib-server");
    server
        .wait_for_stderr("calib-server listening on", DEADLINE)
        .expect("calib-server readiness");
    server
}

fn calibrate(tb: &Testbed, profile: &str) -> serde_json::Value {
    let mut cmd = tb.command(&tb.cli, BIN.as_ref());
    cmd.arg("--profile-dir").arg(profile_dir()).args([
        "calibrate",
        "--json",
        "--profile",
        profile,
        "--target",
        &format!("{SERVER_ADDR}:{CALIB_PORT}"),
    ]);
    let out = Testbed::output_within(cmd, DEADLINE).expect("calibrate finishes");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("calibrate {profile}: {stdout}");
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "calibrate JSON ({e}): {stdout} / {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// `echolab-netem rtt` from the client to the calib-server: the path's median RTT, µs.
fn baseline_rtt_us(tb: &Testbed) -> f64 {
    let mut cmd = tb.command(&tb.cli, BIN.as_ref());
    cmd.args(["rtt", "--target", &format!("{SERVER_ADDR}:{CALIB_PORT}")]);
    let out = Testbed::output_within(cmd, DEADLINE).expect("rtt finishes");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("rtt JSON");
    // Three rounds of 40 (the defaults); the path is the quietest round's median.
    assert_eq!(v["probes"], 120, "{v}");
    let rounds: Vec<f64> = v["round_medians_us"]
        .as_array()
        .expect("round_medians_us")
        .iter()
        .map(|m| m.as_f64().unwrap())
        .collect();
    assert_eq!(rounds.len(), 3, "{v}");
    let median = v["rtt_median_us"].as_f64().expect("rtt_median_us");
    assert_eq!(
        median,
        rounds.iter().copied().fold(f64::MAX, f64::min),
        "{v}"
    );
    median
}

/// `calibrate --json --baseline-rtt` with the profile file `profile`; the report and whether
/// the command exited 0.
fn calibrate_with_baseline(
    tb: &Testbed,
    profile: &Path,
    baseline_us: f64,
) -> (serde_json::Value, bool) {
    let mut cmd = tb.command(&tb.cli, BIN.as_ref());
    cmd.arg("calibrate")
        .arg("--json")
        .arg("--profile")
        .arg(profile)
        .args([
            "--target",
            &format!("{SERVER_ADDR}:{CALIB_PORT}"),
            "--baseline-rtt",
            &format!("{baseline_us:.3}us"),
        ]);
    let out = Testbed::output_within(cmd, DEADLINE).expect("calibrate finishes");
    let v = serde_json::from_slice(&out.stdout).expect("calibrate JSON");
    (v, out.status.success())
}

fn check<'a>(report: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name}: {report}"))
}

/// Crossnet's RTT and goodput pass, and the goodput transfers fill the link without ever
/// filling its 500-packet queue: before calibration bounded the receivers' window, a Reno
/// sender overflowed it in every transfer (cubic in half of them; `wire_perf --section
/// release` with those host defaults), and what it carried then depended on its loss
/// recovery. Calibration's senders use Reno, so without the bound this test fails.
#[test]
fn crossnet_calibration_passes_and_its_transfers_never_fill_the_queue() {
    let tb = Testbed::new().expect("namespaces");
    let _server = start_calib_server(&tb);
    let mut wire = start_wire(&tb, "crossnet");
    let report = calibrate(&tb, "crossnet");
    for name in ["rtt_median", "goodput_uplink", "goodput_downlink"] {
        let c = check(&report, name);
        assert_eq!(c["pass"], true, "{c}");
    }
    let bulk = &report["bulk_transfer"];
    assert_eq!(bulk["congestion_control"], "reno", "{report}");
    let stats = wire.terminate(DEADLINE).expect("wire exits on SIGTERM");
    assert!(stats.status.success(), "wire exit: {:?}", stats.status);
    let last: WireStats = serde_json::from_str(
        String::from_utf8_lossy(&stats.stdout)
            .lines()
            .last()
            .expect("final stats"),
    )
    .unwrap();
    assert!(
        last.is_final && last.uplink.packets >= 40 && last.downlink.packets >= 40,
        "{last:?}"
    );
    for (d, window) in [
        (&last.uplink, &bulk["window_uplink_bytes"]),
        (&last.downlink, &bulk["window_downlink_bytes"]),
    ] {
        // A direction holds at most what the receiver offered, in full-size segments (the
        // other transfer's ACKs, one per segment at most, fit in the same bound).
        let window_segments = window.as_u64().expect("a window for a rated link") / 1448;
        assert!(
            d.drops_queue == 0 && d.peak_queue <= window_segments && d.peak_queue < d.limit,
            "window {window_segments} segments: {d:?}"
        );
    }
}

#[test]
fn wire_without_the_link_in_effect_fails_calibration() {
    // No wire: the same namespaces forward unimpaired, and crossnet must not pass.
    let tb = Testbed::new().expect("namespaces");
    let _server = start_calib_server(&tb);
    let report = calibrate(&tb, "crossnet");
    assert_eq!(report["pass"], false, "{report}");
    let rtt = check(&report, "rtt_median");
    assert!(
        rtt["reason"].as_str().unwrap().contains("not in effect"),
        "{rtt}"
    );
    // Repeating does not rescue a link that is not there: every attempt (3 by default) missed.
    let missed = report["missed_attempts"]
        .as_array()
        .expect("missed_attempts");
    assert_eq!(missed.len(), 2, "{report}");
    for m in missed {
        assert!(
            m["reason"].as_str().unwrap().contains("not in effect"),
            "{m}"
        );
    }
    assert!(
        report["reason"]
            .as_str()
            .unwrap()
            .contains("attempt 3 of 3"),
        "{report}"
    );
}

#[test]
fn lan100_gives_goodput_within_tolerance() {
    let tb = Testbed::new().expect("namespaces");
    let _server = start_calib_server(&tb);
    let _wire = start_wire(&tb, "lan100");
    let report = calibrate(&tb, "lan100");
    for dir in ["goodput_uplink", "goodput_downlink"] {
        let c = check(&report, dir);
        assert_eq!(c["pass"], true, "{c}");
    }
}

/// User plus system CPU time of process `pid`, seconds (proc(5): fields 14 and 15 of
/// /proc/PID/stat, in clock ticks).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/PID/stat");
    // The command name (field 2) may hold spaces; the fields after its ')' are fixed.
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // SAFETY: sysconf(3) with a constant name has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap()) / ticks
}

/// Starts the wire for lan100, checks that it uses no CPU while idle, sends one UDP datagram
/// through it, and returns its stats.
fn idle_then_one_packet(tb: &Testbed, wire: &mut ChildGuard) -> WireStats {
    let pid = wire.child.as_ref().expect("running").id();
    let (cpu0, t0) = (cpu_seconds(pid), Instant::now());
    // The idle window is the measurement itself, not a wait for a condition.
    std::thread::sleep(Duration::from_secs(2));
    let used = cpu_seconds(pid) - cpu0;
    let window = t0.elapsed().as_secs_f64();
    // A wire that polled while idle would use about a core (2 s); a sleeping one uses ~0
    // (the main thread's 1 s tick). 5% leaves room for a loaded host's accounting.
    assert!(
        used < 0.05 * window,
        "idle wire used {used:.3} s CPU in {window:.1} s"
    );
    let rtts = endtoend::udp_round_trips(tb, 1, Duration::ZERO, Duration::from_secs(10)).unwrap();
    assert_eq!(rtts.len(), 1, "one round trip through the wire");
    let s = wire_stats(wire);
    // The probe's temporary rules are gone once the wire is ready.
    let rules = Command::new("ip")
        .args(["-n", &tb.lnk, "rule", "show"])
        .output()
        .unwrap();
    let rules = String::from_utf8_lossy(&rules.stdout);
    assert!(!rules.contains("192.0.2.1"), "{rules}");
    assert!(rules.contains("iif cs lookup 2701"), "{rules}");
    s
}

#[test]
fn idle_wire_sleeps_and_counts_delays_from_kernel_arrival_stamps() {
    let tb = Testbed::new().expect("namespaces");
    let mut wire = start_wire(&tb, "lan100");
    let ready = wire.stderr_seen.last().cloned().unwrap_or_default();
    assert!(ready.contains("delay from kernel stamp"), "{ready}");
    // Root in a namespace of its own has CAP_SYS_NICE and no cgroup limit on real time.
    assert!(
        ready.ends_with(", scheduling real-time (SCHED_FIFO 50)"),
        "{ready}"
    );
    let s = idle_then_one_packet(&tb, &mut wire);
    for (dir, d) in [("uplink", &s.uplink), ("downlink", &s.downlink)] {
        assert_eq!(d.scheduling, "real-time (SCHED_FIFO 50)", "{dir}");
        // Every packet the TUN carried had its stamp (the tap is open before the TUN comes
        // up, so even the kernel's own IPv6 chatter has one), and nothing is subtracted.
        assert_eq!(
            (d.arrival_from.as_str(), d.unstamped, d.compensation_us),
            ("kernel stamp", 0, 0.0),
            "{dir}: {d:?}"
        );
        // Exactly the one datagram each way: the TUNs' own IPv6 chatter is not carried.
        assert!(d.packets == 1 && d.tun_wait_us.max > 0.0, "{dir}: {d:?}");
        assert_eq!(d.self_probe_us.max, 0.0, "{dir}: no self-probe ran");
        // Read from the TUN's own counters, while it still exists.
        assert_eq!(d.drops_device, Some(0), "{dir}");
        assert_eq!(d.early_wake_us, 400.0, "{dir}");
    }
}

#[test]
fn without_cap_net_raw_the_wire_compensates_the_self_probe_median() {
    let tb = Testbed::new().expect("namespaces");
    // The same wire with CAP_NET_RAW out of its bounding set (so root loses it at exec):
    // no packet socket, so delays count from read time minus the self-probe's median. And
    // without CAP_SYS_NICE, as in a container that was not granted it: no real-time
    // priority, which the ready line and the stats say.
    let mut cmd = Command::new("ip");
    cmd.args([
        "netns",
        "exec",
        &tb.lnk,
        "setpriv",
        "--bounding-set=-net_raw,-sys_nice",
    ])
    .arg(BIN)
    .arg("--profile-dir")
    .arg(profile_dir())
    .args([
        "wire",
        "--profile",
        "lan100",
        "--client-side",
        LINK_CLIENT_SIDE,
        "--server-side",
        LINK_SERVER_SIDE,
        "--seed",
        "1",
    ]);
    let mut wire = ChildGuard::spawn(cmd).unwrap();
    wire.wait_for_stderr("echolab-netem wire ready", DEADLINE)
        .unwrap();
    let said = wire.stderr_seen.join("\n");
    assert!(
        said.contains("no kernel arrival stamps") && said.contains("CAP_NET_RAW"),
        "{said}"
    );
    let fair = "fair: sched_setscheduler(SCHED_FIFO): Operation not permitted (os error 1)";
    assert!(
        said.lines()
            .last()
            .is_some_and(|l| l.ends_with(&format!(", scheduling {fair}"))),
        "{said}"
    );
    let s = idle_then_one_packet(&tb, &mut wire);
    for (dir, d) in [("uplink", &s.uplink), ("downlink", &s.downlink)] {
        assert_eq!(d.scheduling, fair, "{dir}");
        // The self-probe ran through the TUN and its median is what is compensated, below
        // the profile's 100 us delay.
        assert!(
            d.compensation_us > 0.0
                && d.compensation_us < 100.0
                && d.compensation_us == d.self_probe_us.p50,
            "{dir}: {d:?}"
        );
        assert_eq!(
            (d.arrival_from.as_str(), d.tun_wait_us.max),
            ("read time", 0.0),
            "{dir}"
        );
    }
}

/// The floor for the added delay: ±100 µs (at lan100, 5% of the added delay is less).
const FLOOR_US: f64 = 100.0;

/// What lan100 (netem/lan100.yaml: 100 us delay, 100 mbit, 38 bytes of Ethernet overhead per
/// packet, the same each way) adds to one UDP round trip of a [`PROBE_IP_BYTES`]-byte packet,
/// µs, worked out by hand rather than by the wire's own link model: each way 100 us of delay plus
/// the serialization of (36 + 38) bytes x 8 bits at 100 Mbit/s = 5.92 us.
const LAN100_ADDED_RTT_US: f64 = 2.0 * (100.0 + (36.0 + 38.0) * 8.0 / 100.0);

#[test]
fn lan100_end_to_end_added_delay_median_within_the_floor() {
    // Seen from outside: UDP round trips through the wire minus the median round trip
    // without it, against the hand-computed figure above. The median, not p99: these tests
    // run in parallel with bulk transfers on 2 shared cores, where the p99 of a non-real-time
    // client's round trips moves by hundreds of µs with the load (examples/wire_perf.rs
    // measures p99 with repetitions). A block hit by a load burst is measured again, up to 3
    // blocks; a defect (a missing or doubled delay, a late timer) fails all of them. Each
    // block starts after a wait for a steady host (echolab_core::quiet, Condition::Steady):
    // on a 2-core VM every block of some runs missed by +180..+520 us while steal was taking
    // the VM's CPUs, and the baseline without the wire was inflated too (305-338 us median
    // against 64-100 us minutes later).
    let tb = Testbed::new().expect("namespaces");
    // The figure above is only as good as its inputs: pin them to the shipped profile.
    let p = echolab_core::profile::Profile::load(&profile_dir().join("lan100.yaml")).unwrap();
    for spec in [p.uplink.as_ref().unwrap(), p.downlink.as_ref().unwrap()] {
        assert_eq!(
            (
                spec.delay.0,
                spec.rate.map(|r| r.0),
                spec.overhead,
                spec.jitter.0
            ),
            (
                Duration::from_micros(100),
                Some(100_000_000),
                38,
                Duration::ZERO
            ),
            "netem/lan100.yaml changed: update LAN100_ADDED_RTT_US"
        );
    }
    assert_eq!(PROBE_IP_BYTES, 36, "update LAN100_ADDED_RTT_US");
    // Without jitter every packet gets the same added delay: the model is that one figure.
    let model = [LAN100_ADDED_RTT_US; 500];
    // As an application sees it (the client's own clock), and as RFC 5357 takes it (kernel
    // receive stamps less the echo's turnaround), each against a baseline taken the same way.
    for wait in [ClientWait::Block, ClientWait::Stamped] {
        let mut seen = Vec::new();
        for _ in 0..3 {
            let settle = echolab_core::quiet::wait_for_quiet_blocking(
                echolab_core::quiet::Condition::Steady,
            );
            let pace = Duration::from_secs_f64(LAN100_ADDED_RTT_US / 1e6);
            let base =
                endtoend::sorted(&endtoend::round_trips(&tb, 500, pace, DEADLINE, wait).unwrap());
            let mut wire = start_wire(&tb, "lan100");
            let shaped = endtoend::round_trips(&tb, 500, Duration::ZERO, DEADLINE, wait).unwrap();
            // SIGTERM, so the wire removes its rules and the next baseline is unimpaired.
            let exit = wire.terminate(DEADLINE).expect("wire exits on SIGTERM");
            assert!(exit.status.success(), "{:?}", exit.status);
            let e = AddedDelayError::of(&shaped, &base, &model);
            assert!(
                base.len() >= 450 && e.exchanges >= 450,
                "{wait:?}: {} {}",
                base.len(),
                e.exchanges
            );
            println!("lan100 added-delay error, {wait:?}: {e:?} after {settle:?}");
            if e.p50.abs() <= FLOOR_US {
                break;
            }
            seen.push((e, settle));
            assert!(
                seen.len() < 3,
                "{wait:?}: median added-delay error outside +-{FLOOR_US} us in 3 blocks: {seen:?}"
            );
        }
    }
}

#[test]
fn a_new_testbed_deletes_the_namespaces_a_killed_test_left() {
    // A process that made a namespace in the testbed's naming and was killed before its Drop.
    let mut child = Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let orphan = format!("elab-{dead}-0-lnk");
    let out = Command::new("ip")
        .args(["netns", "add", &orphan])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let listed = || {
        let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|l| l.split_whitespace().next() == Some(orphan.as_str()))
    };
    // (Another test's testbed, starting meanwhile, may sweep it first: the end state is the
    // same.)
    let tb = Testbed::new().expect("namespaces");
    assert!(!listed(), "{orphan} still there");
    // Its own namespaces are kept while it lives.
    assert!(Path::new("/run/netns").join(&tb.lnk).exists());
}

#[test]
fn every_endpoint_wait_answers_each_exchange_in_order_and_keeps_the_pace() {
    let tb = Testbed::new().expect("namespaces");
    for wait in [ClientWait::Block, ClientWait::Spin, ClientWait::Stamped] {
        let t0 = Instant::now();
        let rtts = endtoend::round_trips(&tb, 50, Duration::from_millis(2), DEADLINE, wait)
            .unwrap_or_else(|e| panic!("{wait:?}: {e}"));
        let took = t0.elapsed();
        assert_eq!(rtts.len(), 50, "{wait:?}");
        assert!(
            // A round trip through two namespaces takes microseconds, never under one.
            rtts.iter()
                .all(|r| r.is_some_and(|us| (1.0..1e6).contains(&us))),
            "{wait:?}: {rtts:?}"
        );
        // 49 pauses of 2 ms before the last exchange, then the echo's 1 s of silence after
        // it before the echo ends (without pauses: 1.0x s).
        assert!(
            took >= Duration::from_millis(49 * 2 + 1000 - 5) && took < Duration::from_secs(10),
            "{wait:?}: {took:?}"
        );
    }
}

/// The scheduling policy (proc(5) `stat` field 41: 0 SCHED_OTHER, 1 SCHED_FIFO, 5 SCHED_IDLE)
/// of this process's thread named `name`, if there is one.
fn policy_of_thread(name: &str) -> Option<u32> {
    std::fs::read_dir("/proc/self/task")
        .ok()?
        .flatten()
        .find_map(|t| {
            let comm = std::fs::read_to_string(t.path().join("comm")).ok()?;
            if comm.trim() != name {
                return None;
            }
            let stat = std::fs::read_to_string(t.path().join("stat")).ok()?;
            // Fields after the parenthesised command name, which may hold spaces.
            let after = &stat[stat.rfind(')')? + 2..];
            after.split_whitespace().nth(41 - 3)?.parse().ok()
        })
}

/// The SOL_SOCKET option `name` of descriptor `fd` as an int (getsockopt(2)); `None` when the
/// call fails (not a socket, or closed meanwhile).
fn socket_int_option(fd: libc::c_int, name: libc::c_int) -> Option<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt only writes `len` bytes into `value`, which is live and that size.
    let got = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            name,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    (got == 0).then_some(value)
}

/// Whether this process's UDP socket bound to `addr` is non-blocking (O_NONBLOCK) and whether
/// it asks for receive stamps (SO_TIMESTAMPNS), if there is one.
fn udp_socket_flags(addr: std::net::Ipv4Addr) -> Option<(bool, bool)> {
    std::fs::read_dir("/proc/self/fd")
        .ok()?
        .flatten()
        .find_map(|e| {
            let fd: libc::c_int = e.file_name().to_str()?.parse().ok()?;
            // SAFETY: getsockopt/getsockname/fcntl on a descriptor number only read its state;
            // one that is not a socket (or closed meanwhile) fails and is skipped. The buffers
            // are live and sized as passed.
            unsafe {
                if socket_int_option(fd, libc::SO_TYPE)? != libc::SOCK_DGRAM {
                    return None;
                }
                let mut sa: libc::sockaddr_in = std::mem::zeroed();
                let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
                if libc::getsockname(fd, (&mut sa as *mut libc::sockaddr_in).cast(), &mut len) != 0
                    || sa.sin_family != libc::AF_INET as libc::sa_family_t
                    || u32::from_be(sa.sin_addr.s_addr) != u32::from(addr)
                {
                    return None;
                }
                let stamps = socket_int_option(fd, libc::SO_TIMESTAMPNS)?;
                Some((
                    libc::fcntl(fd, libc::F_GETFL) & libc::O_NONBLOCK != 0,
                    stamps != 0,
                ))
            }
        })
}

#[test]
fn each_endpoint_wait_gives_the_endpoints_their_scheduling() {
    let tb = std::sync::Arc::new(Testbed::new().expect("namespaces"));
    // (echo, client) policies: blocked endpoints real-time, a polling client fair; and
    // (non-blocking, receive stamps) of the echo's and the client's sockets.
    for (wait, expected, flags) in [
        (ClientWait::Block, (1, 1), ((false, false), (false, false))),
        (ClientWait::Spin, (1, 0), ((false, false), (true, false))),
        (ClientWait::Stamped, (1, 1), ((false, true), (false, true))),
    ] {
        let run = {
            let tb = tb.clone();
            std::thread::spawn(move || {
                endtoend::round_trips(&tb, 400, Duration::from_millis(2), DEADLINE, wait)
            })
        };
        // Readiness: both threads named and past their first exchange (then their policy is
        // set), read within the run's 0.8 s of exchanges.
        let seen = loop {
            let both = (
                policy_of_thread(endtoend::ECHO_THREAD),
                policy_of_thread(endtoend::CLIENT_THREAD),
            );
            if both == (Some(expected.0), Some(expected.1)) || run.is_finished() {
                break (
                    both,
                    udp_socket_flags(SERVER_ADDR),
                    udp_socket_flags(CLIENT_ADDR),
                );
            }
            // The poll interval of this check; the polling endpoints need the CPUs.
            std::thread::sleep(Duration::from_millis(1));
        };
        let rtts = run.join().unwrap().unwrap();
        assert_eq!(
            seen,
            (
                (Some(expected.0), Some(expected.1)),
                Some(flags.0),
                Some(flags.1)
            ),
            "{wait:?}: ((echo policy, client policy), echo (polls, stamps), client (polls, stamps))"
        );
        assert_eq!(rtts.iter().flatten().count(), 400, "{wait:?}");
    }
}

/// Asks the wire for stats (SIGUSR1) and reads them.
fn wire_stats(wire: &mut ChildGuard) -> WireStats {
    wire.signal(libc::SIGUSR1);
    let line = wire.next_stdout_line(DEADLINE).expect("stats line");
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("stats JSON ({e}): {line}"))
}

#[test]
fn ten_percent_loss_gives_ten_percent_over_3000_probes() {
    let tb = Testbed::new().expect("namespaces");
    let dir = tempdir();
    let profile = dir.join("loss10.yaml");
    std::fs::write(
        &profile,
        "name: loss10\ndescription: 10% uplink loss\nsource: test\ntopology: link\n\
         uplink: { loss: 10%, limit: 5000 }\ndownlink: { limit: 5000 }\n\
         expected:\n  rtt: { value: 0s, minus: 0s, plus: 1s }\n",
    )
    .unwrap();
    let mut wire = start_wire(&tb, profile.to_str().unwrap());
    let receiver = tb
        .in_netns(&tb.srv, || UdpSocket::bind((SERVER_ADDR, 9000)))
        .unwrap()
        .unwrap();
    receiver
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let sender = tb
        .in_netns(&tb.cli, || UdpSocket::bind("0.0.0.0:0"))
        .unwrap()
        .unwrap();
    const PROBES: u64 = 3000;
    const WINDOW: u64 = 200;
    // Markers carry a tag no probe has; they are lost like probes and resent until one arrives.
    const MARKER: u64 = 1 << 63;
    let mut received = 0u64;
    let mut buf = [0u8; 64];
    for window in 0..PROBES / WINDOW {
        // A window at a time, so no queue outside the wire (veth backlog, TUN queue) overflows.
        for i in 0..WINDOW {
            sender
                .send_to(&(window * WINDOW + i).to_le_bytes(), (SERVER_ADDR, 9000))
                .unwrap();
        }
        // The wire keeps order, so once this window's marker arrives every earlier probe that
        // survived has arrived too.
        let end = Instant::now() + DEADLINE;
        'window: loop {
            assert!(
                Instant::now() < end,
                "window {window}: no marker arrived; {received} probes so far"
            );
            sender
                .send_to(&(MARKER | window).to_le_bytes(), (SERVER_ADDR, 9000))
                .unwrap();
            while let Ok(n) = receiver.recv(&mut buf) {
                let v = u64::from_le_bytes(buf[..n.min(8)].try_into().unwrap());
                if v == MARKER | window {
                    break 'window;
                }
                if v & MARKER == 0 {
                    received += 1;
                }
            }
        }
    }
    let s = wire_stats(&mut wire);
    assert_eq!(s.uplink.drops_queue, 0, "{s:?}");
    let loss = (PROBES - received) as f64 / PROBES as f64 * 100.0;
    println!(
        "loss {loss:.2}% over {PROBES} probes (wire counted {} lost, markers included)",
        s.uplink.drops_loss
    );
    assert!(
        (7.0..=13.0).contains(&loss),
        "loss {loss}% outside 10 +- 3%"
    );
}

/// A scratch directory, removed on drop (also when the test panics).
struct TempDir(PathBuf);

impl std::ops::Deref for TempDir {
    type Target = PathBuf;
    fn deref(&self) -> &PathBuf {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tempdir() -> TempDir {
    let d = std::env::temp_dir().join(format!(
        "echolab-netem-test-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&d).unwrap();
    TempDir(d)
}

#[test]
fn bad_profiles_give_named_errors_and_exit_2() {
    let dir = tempdir();
    let cases = [
        (
            "uplink: { delay: 10 parsecs }",
            "uplink.delay",
            "10 parsecs",
        ),
        ("uplink: { delay: 1ms, jiter: 1ms }", "jiter", "uplink"),
        (
            "uplink: { rate: 100 furlongs }",
            "uplink.rate",
            "100 furlongs",
        ),
        ("uplink: { loss: 10 }", "uplink.loss", "10"),
        (
            "uplink: { rate: 1gbit, delay: 100ms, limit: 10 }",
            "uplink.limit",
            "10 packets",
        ),
    ];
    for (i, (uplink, field, value)) in cases.iter().enumerate() {
        let path = dir.join(format!("bad{i}.yaml"));
        std::fs::write(
            &path,
            format!("name: bad\ndescription: d\nsource: s\ntopology: link\n{uplink}\ndownlink: {{}}\nexpected:\n  rtt: {{ value: 0s, minus: 0s, plus: 1s }}\n"),
        )
        .unwrap();
        let out = Command::new(BIN)
            .args([
                "wire",
                "--profile",
                path.to_str().unwrap(),
                "--client-side",
                "x",
                "--server-side",
                "y",
            ])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{uplink}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert!(
            err.contains(field) && err.contains(value) && err.contains(path.to_str().unwrap()),
            "{uplink}: {err}"
        );
    }
}

#[test]
fn wire_names_the_missing_sysctl_when_proc_sys_is_read_only() {
    let tb = Testbed::new().expect("namespaces");
    tb.sysctl(&tb.lnk, "net.ipv4.ip_forward", "0").unwrap();
    // As in a container: /proc/sys read-only in the wire's own mount namespace.
    let script = format!(
        "mount --bind /proc/sys /proc/sys && mount -o remount,bind,ro /proc/sys && exec {BIN} wire --profile {} --client-side {LINK_CLIENT_SIDE} --server-side {LINK_SERVER_SIDE}",
        profile_dir().join("crossnet.yaml").display()
    );
    let mut cmd = Command::new("ip");
    cmd.args([
        "netns", "exec", &tb.lnk, "unshare", "--mount", "sh", "-c", &script,
    ]);
    let out = Testbed::output_within(cmd, DEADLINE).unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("net.ipv4.ip_forward") && err.contains("--sysctl"),
        "{err}"
    );
}

#[test]
fn calibration_judges_what_the_link_adds_over_the_baseline_measured_before_it() {
    let tb = Testbed::new().expect("namespaces");
    let _server = start_calib_server(&tb);
    // Before the wire: the link namespace forwards plainly.
    let baseline = baseline_rtt_us(&tb);
    assert!(baseline > 0.0 && baseline < 2_000.0, "{baseline}");
    let _wire = start_wire(&tb, "lan100");
    let dir = std::env::temp_dir().join(format!("wire-added-rtt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // The running link adds 2 x (100 us + serialization of (68 + 38) B at 100 Mbit/s =
    // 8.48 us) = 217 us. Three profiles claim 100 us each way (right, within +-150 us: this
    // test runs beside others, whose load the endpoints' wake-ups add to the total), 600 us
    // (far more than the link adds) and 10 us within +-20 us (far less), with no rate and a
    // wide total-RTT range so that only the added-RTT check can fail.
    let claim = |us: u32, at_least_us: u32| {
        let path = dir.join(format!("claim{us}.yaml"));
        std::fs::write(
            &path,
            format!(
                "name: claim{us}\ndescription: d\nsource: test\ntopology: link\n\
                 uplink: {{ delay: {us}us }}\ndownlink: {{ delay: {us}us }}\n\
                 expected:\n  rtt: {{ value: {}us, minus: {}us, plus: 5ms }}\n  \
                 added_rtt: {{ relative: 10%, at_least: {at_least_us}us }}\n",
                2 * us,
                2 * us
            ),
        )
        .unwrap();
        calibrate_with_baseline(&tb, &path, baseline)
    };
    let (right, ok) = claim(100, 150);
    let added = check(&right, "added_rtt");
    assert!(ok && added["pass"] == true, "{right}");
    assert_eq!(
        (added["low"].as_f64(), added["high"].as_f64()),
        (Some(50.0), Some(350.0))
    );
    let measured = added["measured"].as_f64().unwrap();
    assert!(
        (right["added_rtt_us"].as_f64().unwrap() - measured).abs() < 1e-9
            && (right["rtt_baseline_median_us"].as_f64().unwrap() - baseline).abs() < 0.01
            && (right["rtt_median_us"].as_f64().unwrap() - baseline - measured).abs() < 0.01,
        "added = median - baseline: {right}"
    );
    let (more, ok) = claim(600, 50);
    let c = check(&more, "added_rtt");
    assert!(!ok && c["pass"] == false, "{more}");
    assert!(
        c["reason"].as_str().unwrap().contains("not in effect"),
        "{c}"
    );
    let (less, ok) = claim(10, 20);
    let c = check(&less, "added_rtt");
    assert!(!ok && c["pass"] == false, "{less}");
    assert!(c["reason"].as_str().unwrap().contains("too slow"), "{c}");
    let _ = std::fs::remove_dir_all(&dir);
}
