//! Calibration through a running wire: what each profile's link gives passes, a link not in
//! effect fails, and the added-RTT check judges the link against the baseline before it.

use std::path::Path;

use echolab_netem::testbed::{Testbed, SERVER_ADDR};
use echolab_netem::wire::counters::WireStats;

use super::common::*;

/// Crossnet's RTT and goodput pass, and the goodput transfers fill the link without ever
/// filling its queue: before calibration bounded the receivers' window, a Reno
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
        last.is_final && last.uplink.counts.packets >= 40 && last.downlink.counts.packets >= 40,
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
            d.counts.drops_queue == 0 && d.peak_queue <= window_segments && d.peak_queue < d.limit,
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
