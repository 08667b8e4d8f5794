//! What the report says beside the figures: failures by kind and the load model, the kernel's
//! and the link's counters, runs that started on a busy machine, and the README excerpt the
//! results script splices in.

mod common;

use std::path::Path;
use std::process::Command;

use echolab_core::hist::LatencySummary;
use echolab_core::results::RunStatus;

use common::*;

#[test]
fn failures_by_kind_and_the_load_model_are_stated_beside_qps() {
    let (e, mut runs) = steady_exp31();
    for r in &mut runs {
        let b = r.bench.as_mut().unwrap();
        if r.cell.id() == "epoll-et_short_c100_r10" && r.repetition == 1 {
            b.requests_failed = 4;
            b.failures.insert("timeout".into(), 2);
            b.failures.insert("reset".into(), 1);
            // One failure of an older BenchReport, counted without a kind.
        }
        if r.cell.server == "epoll-lt" {
            b.target_rate = Some(20000.0);
        }
    }
    let tmp = temp_dir("failures");
    let m = manifest(e, RunStatus::Complete, runs.len() as u64);
    write_dir(tmp.path(), &m, &runs);
    echolab_report::render(tmp.path()).unwrap();
    let md = std::fs::read_to_string(tmp.path().join("report.md")).unwrap();
    let quad = section(&md, "QPS matrix");
    assert_eq!(
        row(quad, "epoll-et")[4],
        "reset 1, timeout 2, 1 (kind not recorded) / 0",
        "{quad}"
    );
    assert!(
        quad.contains(
            "Load: closed loop (each connection sends its next request when the previous reply arrives) in some runs, \
             open loop at 20000 req/s (requests sent on schedule, latency from the intended send time) in others."
        ),
        "{quad}"
    );
    let little = section(&md, "Consistency: Little's law");
    assert!(
        little.contains("epoll-et_long_c100_r10") && !little.contains("epoll-lt"),
        "Little's law is checked on closed-loop cells only: {little}"
    );
    let reps = section(&md, "QPS per repetition");
    assert_eq!(
        row(reps, "epoll-et_short_c100_r10").last().unwrap(),
        "reset 1, timeout 2, 1 (kind not recorded)"
    );
    assert!(
        section(&md, "Why results may differ")
            .contains("Failed requests: epoll-et_short_c100_r10 (reset 1"),
        "{md}"
    );
}

#[test]
fn kernel_and_link_counters_flag_the_cells_whose_tail_they_explain() {
    let (e, mut runs) = steady_exp31();
    let late = |p99: f64| LatencySummary {
        p99,
        ..Default::default()
    };
    for r in &mut runs {
        let b = r.bench.as_mut().unwrap();
        b.kernel_counters.insert("TcpExtTW".into(), 1000);
        let troubled = r.cell.id() == "epoll-lt_short_c100_r10";
        if troubled {
            // 120, 121 and 122 SYN retransmissions over the three repetitions: mean 121.
            b.kernel_counters
                .insert("TcpExtTCPSynRetrans".into(), 119 + r.repetition as i64);
        }
        let mut link = echolab_core::results::LinkCounters {
            backend: "userspace-wire".into(),
            ..Default::default()
        };
        link.uplink.counts.packets = 1000;
        link.uplink.release_error_us = Some(late(if troubled { 2500.0 } else { 20.0 }));
        link.uplink.counts.drops_queue = if troubled { 40 } else { 0 };
        link.uplink.counts.drops_loss = 3;
        // Overloaded 1, 2 and 3 times over the three repetitions: mean 2.
        link.uplink.overloaded_spells = if troubled { r.repetition } else { 0 };
        r.link = Some(link);
    }
    let tmp = temp_dir("counters");
    let m = manifest(e, RunStatus::Complete, runs.len() as u64);
    write_dir(tmp.path(), &m, &runs);
    echolab_report::render(tmp.path()).unwrap();
    let md = std::fs::read_to_string(tmp.path().join("report.md")).unwrap();
    let s = section(&md, "Kernel and link counters");
    let bad = row(s, "epoll-lt_short_c100_r10");
    assert_eq!(bad[1], "TW 1000, TWRecycled 0", "{s}");
    assert_eq!(bad[2], "TCPSynRetrans 121", "{s}");
    assert_eq!(
        bad[4],
        "1000 packets, 3 lost by the profile, 40 dropped otherwise, queue peak 0, release error p99 2500 µs"
    );
    assert!(
        bad[5].starts_with(
            "drops (queue full, refused, or TUN full) 40; overloaded 2 times (packets arrived faster \
             than the wire carried them; it gave up real-time priority and its release times slipped); \
             release error p99 2500 µs"
        ),
        "{s}"
    );
    let good = row(s, "epoll-et_long_c100_r10");
    assert_eq!(
        (good[2].as_str(), good[5].as_str()),
        ("none", "none"),
        "{s}"
    );
    assert!(
        s.contains("⚠ epoll-lt_short_c100_r10: client TCPSynRetrans 121, link drops (queue full, refused, or TUN full) 40"),
        "{s}"
    );
    assert_eq!(
        s.matches('⚠').count(),
        1,
        "only the troubled cell is flagged: {s}"
    );
}

#[test]
fn runs_that_started_on_a_busy_machine_are_named_at_the_top_and_in_why_results_differ() {
    let (e, mut runs) = steady_exp31();
    for r in &mut runs {
        let busy = r.cell.id() == "epoll-et_long_c100_r10" && r.repetition <= 2;
        r.settle = Some(echolab_core::results::Settle {
            waited_s: if busy { 10.0 } else { 0.3 },
            last_busy: if busy {
                0.5 + 0.1 * r.repetition as f64
            } else {
                0.02
            },
            quiet: !busy,
            wake_p99_us: None,
        });
    }
    let (_tmp, _, md) = rendered(
        "busy",
        &manifest(e, RunStatus::Complete, runs.len() as u64),
        &runs,
    );
    let line = "⚠ Busy machine: 2 runs started while other processes kept the CPUs busy (up to 70% of all CPUs after \
                the launcher's bounded wait for quiet): epoll-et_long_c100_r10 (2 of 3).";
    let top = md.split("## ").next().unwrap();
    assert!(
        top.contains(line),
        "the warning stands above the first table:\n{top}"
    );
    assert!(
        section(&md, "Why results may differ").contains(line),
        "{md}"
    );
}

#[test]
fn readme_results_script_splices_a_real_report_between_the_markers() {
    let tmp = temp_dir("readme");
    let dir = tmp.path().join("run");
    results_dir(&dir, RunStatus::Complete, |_, _| true, |_, _| None);
    let readme = tmp.path().join("README.md");
    let before = format!(
        "# echolab\n\nIntro.\n\n{}\nhand-written text\n{}\n\n## Next\n",
        echolab_report::readme::BEGIN,
        echolab_report::readme::END
    );
    std::fs::write(&readme, &before).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/readme-results");
    let run = || {
        Command::new(&script)
            .arg(&dir)
            .env("ECHOLAB_REPORT", env!("CARGO_BIN_EXE_echolab-report"))
            .env("ECHOLAB_README", &readme)
            .output()
            .unwrap()
    };
    let out = run();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = std::fs::read_to_string(&readme).unwrap();
    assert!(
        after.starts_with("# echolab\n\nIntro.\n\n") && after.ends_with("\n\n## Next\n"),
        "{after}"
    );
    assert!(!after.contains("hand-written text"));
    // The report's own tables and verdicts, with where they come from.
    let report = echolab_report::build(&dir).unwrap().markdown;
    let et_row = report
        .lines()
        .find(|l| l.starts_with("| epoll-et | 25000"))
        .unwrap();
    assert!(after.contains(et_row), "{after}");
    assert!(
        after.contains("#### QPS matrix, server × mode (100 connections, 10 rounds)"),
        "{after}"
    );
    // The verdict table opens the excerpt; the latency tables stay in the report.
    assert!(
        after.contains("#### Verdicts\n\n| Claim | Seed |"),
        "{after}"
    );
    assert!(!after.contains("#### Latency ratios"), "{after}");
    assert!(
        after.contains("**reproduced**: our 95% CI 1.94–2.41× lies inside the band."),
        "{after}"
    );
    assert!(
        after.contains("run `20261130T015737Z-exp-test-loopback`"),
        "{after}"
    );
    assert!(
        !after.contains("## Connect storm"),
        "only the excerpt's sections"
    );
    // Running it again changes nothing.
    assert!(run().status.success());
    assert_eq!(std::fs::read_to_string(&readme).unwrap(), after);

    // A partial run is refused, and the README is left alone.
    let partial = tmp.path().join("partial");
    results_dir(
        &partial,
        RunStatus::Interrupted,
        |id, _| id != "select_connect-storm_c300",
        |_, _| None,
    );
    let out = Command::new(&script)
        .arg(&partial)
        .env("ECHOLAB_REPORT", env!("CARGO_BIN_EXE_echolab-report"))
        .env("ECHOLAB_README", &readme)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("partial run"));
    assert_eq!(std::fs::read_to_string(&readme).unwrap(), after);
}

#[test]
fn the_clients_own_choices_are_stated_once_each() {
    let (e, mut runs) = steady_exp31();
    for r in &mut runs {
        let short = r.cell.id().contains("_short_");
        let b = r.bench.as_mut().unwrap();
        b.threads = if short { 2 } else { 1 };
        b.threads_reason = if short {
            "auto: 2 of 2 CPU(s): all".into()
        } else {
            "auto: 1 of 2 CPU(s): half".into()
        };
        b.source_addrs_reason = if short {
            "auto: 16 loopback source addresses".into()
        } else {
            "auto: one source address, the kernel's".into()
        };
    }
    let tmp = temp_dir("client-choices");
    let m = manifest(e, RunStatus::Complete, runs.len() as u64);
    write_dir(tmp.path(), &m, &runs);
    echolab_report::render(tmp.path()).unwrap();
    let md = std::fs::read_to_string(tmp.path().join("report.md")).unwrap();
    let why = section(&md, "Why results may differ");
    assert!(
        why.contains(
            "Client: echo-bench worker threads 1 (auto: 1 of 2 CPU(s): half); 2 (auto: 2 of 2 CPU(s): all); \
             source addresses: auto: 16 loopback source addresses; auto: one source address, the kernel's."
        ),
        "{why}"
    );
}

#[test]
fn records_without_the_clients_choices_add_no_client_line() {
    let (e, runs) = steady_exp31();
    let tmp = temp_dir("client-choices-old");
    let m = manifest(e, RunStatus::Complete, runs.len() as u64);
    write_dir(tmp.path(), &m, &runs);
    echolab_report::render(tmp.path()).unwrap();
    let md = std::fs::read_to_string(tmp.path().join("report.md")).unwrap();
    assert!(!md.contains("Client: echo-bench"), "{md}");
}

#[test]
fn kernel_netem_counters_flag_qdisc_drops_only_where_the_profile_has_no_loss() {
    let render = |lossy: bool| {
        let (e, mut runs) = steady_exp31();
        for r in &mut runs {
            let troubled = r.cell.id() == "epoll-lt_short_c100_r10";
            let mut link = echolab_core::results::LinkCounters {
                backend: "kernel-netem".into(),
                ..Default::default()
            };
            link.uplink.counts.packets = 1000 + r.repetition;
            link.downlink.counts.packets = 900;
            // 10, 11 and 12 drops over the three repetitions: mean 11.
            link.uplink.drops_qdisc = if troubled { 9 + r.repetition } else { 0 };
            link.downlink.overlimits = 4;
            r.link = Some(link);
        }
        let tmp = temp_dir(if lossy { "qdisc-lossy" } else { "qdisc" });
        let mut m = manifest(e, RunStatus::Complete, runs.len() as u64);
        m.profile = echolab_testkit::fixtures::recorded_profile("crossnet");
        let uplink = m
            .profile
            .profile
            .uplink
            .as_mut()
            .expect("crossnet has a link");
        uplink.loss = echolab_core::units::Percent(if lossy { 1.0 } else { 0.0 });
        write_dir(tmp.path(), &m, &runs);
        echolab_report::render(tmp.path()).unwrap();
        std::fs::read_to_string(tmp.path().join("report.md")).unwrap()
    };
    let md = render(false);
    let s = section(&md, "Kernel and link counters");
    let bad = row(s, "epoll-lt_short_c100_r10");
    assert_eq!(
        bad[4],
        "kernel netem: 1902 packets, 11 dropped by its qdiscs (queue limit only: no random loss), overlimits 4",
        "{s}"
    );
    assert!(
        bad[5].starts_with("qdisc drops 11 (the profile has no random loss"),
        "{s}"
    );
    assert_eq!(row(s, "epoll-et_long_c100_r10")[5], "none", "{s}");
    assert_eq!(s.matches('⚠').count(), 1, "{s}");
    // With random loss in the profile, the same drops are not trouble: netem counts both.
    let md = render(true);
    let s = section(&md, "Kernel and link counters");
    let row_lossy = row(s, "epoll-lt_short_c100_r10");
    assert!(
        row_lossy[4].contains("random loss and queue limit together"),
        "{s}"
    );
    assert_eq!(row_lossy[5], "none", "{s}");
}
