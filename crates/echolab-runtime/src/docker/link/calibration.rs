//! Calibration across the link: `echolab-netem calib-server` in the server host,
//! `echolab-netem calibrate` from the client host; it checks RTT and goodput against the
//! profile (the verdict is `echolab_core::calibration`'s) and becomes the manifest's
//! calibration record.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use anyhow::anyhow;
use bollard::Docker;
use echolab_core::calibration::baseline_pace;
use echolab_core::cmd::{
    json_from_stdout, CalibServerReady, CalibrationReport, Job, JobSignal, NetemCmd, RttReport,
    SignalJob,
};
use echolab_core::profile::Profile;
use echolab_core::results::{CalibrationRecord, Settle};
use echolab_core::units::Dur;

use super::netem::netem;
use crate::docker::exec;
use crate::hosts::{ProcOutput, READY_DEADLINE, STOP_DEADLINE};
use crate::image_archive::IMAGE_BIN_DIR;

/// Deadline of one calibration (40 RTT probes and two 1.3 s bulk transfers at most take
/// seconds; generous for a loaded 2-core machine).
pub(super) const CALIBRATION_DEADLINE: Duration = Duration::from_secs(120);

/// The calibration record of an `echolab-netem calibrate --json` report.
pub(super) fn record_of(report: &CalibrationReport) -> CalibrationRecord {
    let mut measured = BTreeMap::new();
    measured.insert("rtt_min_us".to_string(), report.rtt_min_us);
    measured.insert(
        CalibrationRecord::RTT_MEDIAN_US.to_string(),
        report.rtt_median_us,
    );
    for (k, v) in [
        ("rtt_baseline_median_us", report.rtt_baseline_median_us),
        ("added_rtt_us", report.added_rtt_us),
        ("goodput_uplink_mbit", report.goodput_uplink_mbit),
        ("goodput_downlink_mbit", report.goodput_downlink_mbit),
    ] {
        if let Some(v) = v {
            measured.insert(k.to_string(), v);
        }
    }
    CalibrationRecord {
        passed: report.pass,
        reason: report.reason.clone(),
        measured,
        checks: report.checks.clone(),
        settle: report
            .settle
            .map(|s| BTreeMap::from([("calibration_repeat".to_string(), s)]))
            .unwrap_or_default(),
        missed_attempts: report.missed_attempts.clone(),
        bulk_transfer: report.bulk_transfer.clone(),
        ..Default::default()
    }
}

/// Sends SIGKILL to echolab-netem in the server host (the calib-server), best effort: a
/// failure here leaves it to the host's removal at teardown.
async fn kill_calib_server(docker: &Docker, server: &str) {
    let _ = exec::run(
        docker,
        server,
        &Job::Signal(SignalJob {
            target: NetemCmd::PROGRAM.into(),
            signal: JobSignal::Kill,
        })
        .command(IMAGE_BIN_DIR),
        STOP_DEADLINE,
    )
    .await;
}

/// Starts calib-server in `server` on engine `docker` (reached at `server_ip`), waits for a
/// quiet machine ([`crate::settle`]; `what` names the measurement in the warning when it does
/// not come), runs the command `make` builds for its address in `client` on engine
/// `client_docker`, stops calib-server, and returns the command's output and the wait.
///
/// Why wait: every measurement here follows the making of hosts and the exec of
/// calib-server, and the engine's own work (runc, containerd, the new processes) goes on
/// for a while after the API calls return; probes that run meanwhile measure it (see
/// `CalibrationRecord::settle` for the figures).
///
/// # Errors
/// calib-server did not get ready, or the command could not run.
async fn against_calib_server(
    docker: &Docker,
    (server, server_ip): (&str, IpAddr),
    client_docker: &Docker,
    client: &str,
    what: &str,
    make: impl FnOnce(SocketAddr) -> NetemCmd,
) -> anyhow::Result<(ProcOutput, Option<Settle>)> {
    let cmd = netem(&NetemCmd::CalibServer {
        port: 0,
        bind: [0, 0, 0, 0].into(),
    });
    let mut s = exec::start(docker, server, &cmd, CalibServerReady::PREFIX).await?;
    let line = match tokio::time::timeout(READY_DEADLINE, &mut s.ready).await {
        Ok(Ok(line)) => line,
        _ => {
            kill_calib_server(docker, server).await;
            return Err(anyhow!(
                "echolab-netem calib-server in the server host did not get ready"
            ));
        }
    };
    let Some(port) = CalibServerReady::parse(&line).map(|r| r.addr.port()) else {
        kill_calib_server(docker, server).await;
        return Err(anyhow!(
            "calib-server readiness line has no address: {line}"
        ));
    };
    let cmd = netem(&make(SocketAddr::new(server_ip, port)));
    let settle = crate::settle::wait_for_quiet(crate::settle::Condition::Steady).await;
    if let Some(w) = settle.and_then(|s| crate::settle::busy_warning(&format!("the {what}"), &s)) {
        eprintln!("{w}");
    }
    let out = exec::run(client_docker, client, &cmd, CALIBRATION_DEADLINE).await;
    kill_calib_server(docker, server).await;
    let _ = exec::finish(docker, s, STOP_DEADLINE).await;
    Ok((out?, settle))
}

/// A baseline as measured: the path's median RTT and the wait for a quiet machine before it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MeasuredBaseline {
    /// Median RTT of the path without the link.
    pub rtt: Duration,
    /// The wait before the probes (`None` where /proc/stat cannot be read).
    pub settle: Option<Settle>,
}

/// The baseline: the median RTT from `client` (on engine `client_docker`) to calib-server in
/// `server` (on engine `docker`) with the link host forwarding plainly, before the link is
/// installed (`echolab-netem rtt`), paced as `profile`'s link will hold each probe
/// ([`baseline_pace`]).
///
/// # Errors
/// The tools could not run or printed no report.
pub(super) async fn baseline(
    docker: &Docker,
    server: &str,
    client_docker: &Docker,
    client: &str,
    server_ip: IpAddr,
    profile: &Profile,
) -> anyhow::Result<MeasuredBaseline> {
    let pace = Some(Dur(baseline_pace(profile)));
    let (out, settle) = against_calib_server(
        docker,
        (server, server_ip),
        client_docker,
        client,
        "baseline RTT",
        |target| NetemCmd::Rtt { target, pace },
    )
    .await?;
    let report: RttReport = printed_report(&out, "rtt", "report")?;
    Ok(MeasuredBaseline {
        rtt: Duration::from_secs_f64(report.rtt_median_us / 1e6),
        settle,
    })
}

/// The RTT of the path without the link, which calibration checks the link's addition
/// against.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Baseline {
    /// None measured (a lab's `native` path: nothing is added to check).
    None,
    /// Measured on one machine before the link was installed: the total RTT is judged by the
    /// profile's `expected.rtt`, and what the link adds over this by `added_rtt`.
    OneMachine(MeasuredBaseline),
    /// Measured between two machines: the total is also judged as this plus what the
    /// profile adds (`echolab_core::calibration::sum_rtt_check`).
    AcrossMachines(MeasuredBaseline),
}

/// Calibrates across the link (or a lab's real path) with echolab-netem: calib-server in
/// `server` on engine `docker` (reached at `server_ip`), calibrate in `client` on engine
/// `client_docker`, with the `baseline` RTT of the path without the link.
///
/// # Errors
/// The tools could not run or printed no report (a miss is `passed: false`).
pub async fn calibrate(
    docker: &Docker,
    server: &str,
    client_docker: &Docker,
    client: &str,
    server_ip: IpAddr,
    profile: &Profile,
    baseline: Baseline,
) -> anyhow::Result<CalibrationRecord> {
    let (measured_baseline, across_machines) = match baseline {
        Baseline::None => (None, false),
        Baseline::OneMachine(b) => (Some(b), false),
        Baseline::AcrossMachines(b) => (Some(b), true),
    };
    let baseline_rtt = measured_baseline.map(|b| Dur(b.rtt));
    let (out, settle) = against_calib_server(
        docker,
        (server, server_ip),
        client_docker,
        client,
        "calibration",
        |target| NetemCmd::Calibrate {
            target,
            profile: profile.clone(),
            json: true,
            baseline_rtt,
            across_machines,
        },
    )
    .await?;
    let report: CalibrationReport = printed_report(&out, "calibrate", "calibration report")?;
    let mut record = record_of(&report);
    let waits = [
        ("baseline", measured_baseline.and_then(|b| b.settle)),
        ("calibration", settle),
    ];
    for (name, wait) in waits {
        if let Some(w) = wait {
            record.settle.insert(name.to_string(), w);
        }
    }
    Ok(record)
}

/// The JSON report `echolab-netem <tool>` printed on stdout. A run that measured prints its
/// report even when its checks fail; one that printed nothing could not measure, and its own
/// output says why.
///
/// # Errors
/// Nothing on stdout after a failed exit (naming the exit and stderr), or stdout that is not
/// the report (naming the parse error as `<what>`).
fn printed_report<T: serde::de::DeserializeOwned>(
    out: &ProcOutput,
    tool: &str,
    what: &str,
) -> anyhow::Result<T> {
    if out.exit_code != Some(0) && out.stdout.trim().is_empty() {
        return Err(anyhow!("echolab-netem {tool}: {}", out.describe()));
    }
    json_from_stdout(&out.stdout).map_err(|e| {
        anyhow!(
            "echolab-netem {tool} printed no {what} ({e}; {})",
            out.describe()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_netem_report_becomes_a_calibration_record() {
        let report: CalibrationReport = serde_json::from_value(json!({
            "profile": "crossnet", "target": "10.0.0.2:7070", "probes": 40,
            "rtt_min_us": 19800.0, "rtt_median_us": 20900.0,
            "goodput_uplink_mbit": 46.5, "goodput_downlink_mbit": 47.0,
            "checks": [{"name": "rtt_median", "measured": 20900.0, "low": 18600.0, "high": 22100.0, "unit": "us", "pass": true, "reason": "ok"}],
            "pass": true, "reason": "all checks passed",
            "bulk_transfer": {"congestion_control": "reno", "window_uplink_bytes": 487976, "window_downlink_bytes": 487976}
        }))
        .unwrap();
        let r = record_of(&report);
        assert!(r.passed);
        let bulk = r
            .bulk_transfer
            .as_ref()
            .expect("the goodput transfers' settings kept");
        assert_eq!(
            (bulk.congestion_control.as_str(), bulk.window_uplink_bytes),
            ("reno", Some(487_976))
        );
        assert_eq!(r.measured["rtt_median_us"], 20900.0);
        assert_eq!((r.checks[0].low, r.checks[0].high), (18600.0, 22100.0));
        assert_eq!(r.checks[0].name, "rtt_median");
        let failed = record_of(&CalibrationReport {
            goodput_uplink_mbit: None,
            goodput_downlink_mbit: None,
            checks: vec![],
            pass: false,
            reason: "rtt_median 5000 us below 18600 us".into(),
            missed_attempts: vec![],
            settle: None,
            ..report
        });
        assert!(!failed.passed && failed.reason.contains("below"));
        assert!(
            !failed.measured.contains_key("goodput_uplink_mbit"),
            "an unmeasured goodput is left out, not recorded as 0"
        );
    }
}
