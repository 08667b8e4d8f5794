//! The wire at rest and its packets' timestamps: no CPU while idle, delays counted from the
//! kernel's arrival stamps, and a compensated self-probe where CAP_NET_RAW is missing.

use std::process::Command;
use std::time::{Duration, Instant};

use echolab_netem::testbed::{ChildGuard, Testbed, LINK_CLIENT_SIDE, LINK_SERVER_SIDE};
use echolab_netem::wire::counters::WireStats;
use echolab_netem::wire::endtoend;

use super::common::*;

/// User plus system CPU time of process `pid`, seconds
/// ([`echolab_testkit::process_cpu_seconds`]).
fn cpu_seconds(pid: u32) -> f64 {
    echolab_testkit::process_cpu_seconds(pid).expect("/proc/PID/stat of a live process")
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
        assert!(
            d.counts.packets == 1 && d.tun_wait_us.is_some_and(|t| t.max > 0.0),
            "{dir}: {d:?}"
        );
        assert_eq!(d.self_probe_us, None, "{dir}: no self-probe ran");
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
                && d.self_probe_us.is_some_and(|p| d.compensation_us == p.p50),
            "{dir}: {d:?}"
        );
        assert_eq!(
            (d.arrival_from.as_str(), d.tun_wait_us),
            ("read time", None),
            "{dir}"
        );
    }
}
