//! Whole runs that complete: the smoke experiment on loopback (twice in a row) and through
//! crossnet's link, a link queue too small for its traffic, and the storm and sustain cells.

use echolab_core::experiment::BenchMode;
use echolab_testkit::TempDir;

use super::common::*;

#[test]
fn smoke_on_loopback_then_again_right_after() {
    let e = engine();
    let first = TempDir::new("up-docker-loop1");
    let bins = snapshot_bins(&first);
    let o = run(
        &first.path().join("results"),
        &bins,
        &profile_experiment("loopback", "smoke"),
    );
    let r1 = check_complete_smoke(&e, &first.path().join("results"), &o, "none");
    assert!(r1.manifest.hosts["client"]["network_mode"]
        .as_str()
        .unwrap()
        .starts_with("container:"));
    // The same command again at once: the image is reused, names do not collide.
    let second = TempDir::new("up-docker-loop2");
    let o = run(
        second.path(),
        &bins,
        &profile_experiment("loopback", "smoke"),
    );
    let r2 = check_complete_smoke(&e, second.path(), &o, "none");
    assert_ne!(r1.manifest.run_id, r2.manifest.run_id);
    assert_eq!(
        r1.manifest.image.id, r2.manifest.image.id,
        "same binaries, same image id"
    );
}

#[test]
fn smoke_on_crossnet_through_the_link() {
    let e = engine();
    let base = TempDir::new("up-docker-crossnet");
    let bins = snapshot_bins(&base);
    let out = base.path().join("results");
    let o = run(&out, &bins, &profile_experiment("crossnet", "smoke"));
    let expected_backend = expected_link_backend();
    let r = check_complete_smoke(&e, &out, &o, expected_backend);
    let link = &r.manifest.hosts["link"];
    assert_eq!(
        link["cap_add"],
        serde_json::json!(["NET_ADMIN", "NET_RAW", "SYS_NICE"])
    );
    assert_eq!(link["devices"], serde_json::json!(["/dev/net/tun"]));
    assert_eq!(link["sysctls"]["net.ipv4.ip_forward"], "1");
    // The wire's counters per run: every request crossed it (a short request is at least
    // SYN, the ACK with the 12 bytes and a FIN uplink; a long one its data), none was
    // dropped by a queue on this unloaded path.
    if expected_backend == "userspace-wire" {
        // With NET_RAW the wire counts each packet's delay from the kernel's arrival stamp.
        let ready = r.manifest.link.installed["installed"]["ready"]
            .as_str()
            .unwrap_or("");
        assert!(ready.contains("delay from kernel stamp"), "{ready}");
        // The link host asked for a real-time budget: granted, the wire's threads run
        // real-time (CAP_SYS_NICE is granted too); refused (an engine whose cgroup has no
        // budget to give), the record says why and the wire says it runs fair-scheduled.
        match link["cpu_realtime_runtime_us"].as_i64() {
            Some(400_000) => assert!(
                ready.ends_with("scheduling real-time (SCHED_FIFO 50)"),
                "{ready}"
            ),
            None => {
                let note = link["realtime_note"].as_str().unwrap_or("");
                assert!(note.contains("refused a real-time budget"), "{link}");
                assert!(ready.contains("scheduling fair: "), "{ready}");
            }
            other => panic!("cpu_realtime_runtime_us {other:?}: {link}"),
        }
        for rec in &r.runs {
            let link = rec.link.as_ref().expect("link counters in the run record");
            let at_least = match rec.cell.mode {
                BenchMode::Short => 200 * 3,
                _ => 200,
            };
            assert!(
                link.uplink.counts.packets >= at_least && link.downlink.counts.packets >= 200,
                "{}: {link:?}",
                rec.file_name()
            );
            assert_eq!(link.unintended_drops(), 0, "{}: {link:?}", rec.file_name());
        }
        let cal = r.manifest.link.calibration.as_ref().unwrap();
        let cal_link = cal
            .link_counters
            .as_ref()
            .expect("calibration's link counters");
        assert!(
            cal_link.uplink.counts.bytes > 1_000_000,
            "the bulk transfers crossed: {cal_link:?}"
        );
    }
    // Calibration checked what the link adds over the path measured before it was installed:
    // crossnet adds 2 x (10 ms + (68 + 38) B at 50 Mbit/s = 16.96 us) = 20.03392 ms, +- 10%.
    let cal = r.manifest.link.calibration.as_ref().unwrap();
    let added = cal.checks.iter().find(|c| c.name == "added_rtt");
    let added = added.unwrap_or_else(|| panic!("an added_rtt check: {cal:?}"));
    assert!(added.pass, "{cal:?}");
    assert!(
        (added.low - 18_030.528).abs() < 1e-6 && (added.high - 22_037.312).abs() < 1e-6,
        "{added:?}"
    );
    let (base, total) = (
        cal.measured["rtt_baseline_median_us"],
        cal.measured["rtt_median_us"],
    );
    assert!(
        base > 0.0 && base < 5_000.0,
        "a plain path is fast: {cal:?}"
    );
    assert!(
        (cal.measured["added_rtt_us"] - (total - base)).abs() < 1e-6,
        "added = total - baseline: {cal:?}"
    );
    // The profile adds 20 ms of RTT: a long-connection round trip cannot be faster.
    for rec in r
        .runs
        .iter()
        .filter(|r| r.cell.mode == echolab_core::experiment::BenchMode::Long)
    {
        let p50 = rec.bench.as_ref().unwrap().latency_us.unwrap().p50;
        assert!(
            p50 >= 18_000.0,
            "{}: p50 {p50} us is below the link's 20 ms RTT",
            rec.file_name()
        );
    }
}

#[test]
fn storm_and_sustain_cells_run_through_the_launcher() {
    let e = engine();
    let base = TempDir::new("up-docker-storm-sustain");
    let (mut cmd, out) = loopback_experiment(
        &base,
        "s.yaml",
        "name: s\nquestion: do seed 004's two cell kinds run end to end?\nrepetitions: 1\nwarmup: 0s\nmatrix:\n  - servers: [epoll-lt]\n    modes: [connect-storm]\n    conns: [50]\n  - servers: [select]\n    modes: [sustain]\n    conns: [20]\n    duration: 2s\n    reply_bytes: 1024\n",
    );
    // Unpinned hosts: the launcher tells echo-bench that the server shares its CPUs.
    cmd.args(["--cpu-plan", "shared"]);
    let o = cmd.output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let r = results(&out);
    assert_eq!(r.runs.len(), 2);
    let cpus = r.manifest.environment.cpus;
    for run in &r.runs {
        let b = run.bench.as_ref().expect("a bench report");
        assert_eq!(run.error, None);
        assert!(run.server.is_some(), "final server stats");
        assert!(
            b.threads_reason.contains("(--server-cpus shared)"),
            "{}",
            b.threads_reason
        );
        match run.cell.mode {
            BenchMode::ConnectStorm => {
                // Every one of the 50 connections proven by an echo over it.
                assert_eq!((b.requests_ok, b.requests_failed), (50, 0));
                assert_eq!(b.extra.established, Some(50));
                assert!(b.extra.time_to_establish_s.is_some_and(|t| t > 0.0));
            }
            BenchMode::Sustain => {
                // Long connections on the server's CPUs: half of them for the client.
                assert_eq!(b.threads, (cpus / 2).max(1), "{}", b.threads_reason);
                assert_eq!((b.reply_bytes, b.requests_failed), (Some(1024), 0));
                // One interval record per second of the 2 s run.
                assert_eq!(b.intervals.len(), 2, "{:?}", b.intervals);
                assert!(!run.samples.is_empty(), "server CPU samples in the window");
            }
            other => panic!("unexpected mode {other:?}"),
        }
    }
    assert_nothing_left(&e, &r.manifest.run_id);
}
