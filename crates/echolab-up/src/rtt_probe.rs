//! The RTT probe, the calibration of hosts without a link: before the first cell, measure the
//! path the cells will use and compare it with the profile's `expected` figures
//! (echolab_core::profile::Expected) by core's one verdict. A failed calibration stops the
//! run. Behind a link, echolab-netem calibrates instead, as the runtime deploys it
//! (`echolab_runtime::deploy::Readings`).
//!
//! RTT is measured the way the profile defines it, as the median of small TCP round trips:
//! one long connection doing `RTT_ROUNDS` request/echo round trips with the lab's own
//! echo-server (epoll-et) and echo-bench (`--mode long`), on the same hosts and path as the
//! cells. Goodput (link profiles with a rate) comes from the link tool's calibration.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use anyhow::Context as _;
use echolab_core::calibration::judge_probe;
use echolab_core::cmd::{
    bench_report, final_stats, BenchCmd, RunArgs, RunMode, ServerCmd, ServerModel,
};
use echolab_core::profile::Profile;
use echolab_core::results::CalibrationRecord;

use echolab_runtime::hosts::Hosts;

/// Round trips of the RTT probe: enough for a stable median (the median of 2000 samples moves
/// by well under 1% between runs on an idle path) and well under a second on loopback; 40 s
/// at a 20 ms RTT is avoided by [`rtt_rounds`].
pub(crate) const RTT_ROUNDS: u64 = 2000;

/// Round trips for a profile: [`RTT_ROUNDS`], capped so that the probe lasts about 5 s at the
/// expected RTT (at least 100 round trips).
pub(crate) fn rtt_rounds(profile: &Profile) -> u64 {
    let rtt_s = profile.expected.rtt.value.0.as_secs_f64();
    if rtt_s <= 0.0 {
        return RTT_ROUNDS;
    }
    ((5.0 / rtt_s) as u64).clamp(100, RTT_ROUNDS)
}

/// The probe's server: epoll-et (the seeds' ET server) on `bind`, a kernel-chosen port.
pub fn probe_server_cmd(bind: IpAddr) -> ServerCmd {
    ServerCmd::new(ServerModel::EpollEt, bind, 0)
}

/// The probe's client: one long connection making `rounds` round trips to `target`.
pub fn probe_bench_cmd(target: SocketAddr, rounds: u64) -> BenchCmd {
    let mut run = RunArgs::new(target, 1, RunMode::Long);
    run.rounds = Some(rounds);
    run.shared.out.json = true;
    BenchCmd::Run(run)
}

/// Measures the RTT between the hosts with echo-server/echo-bench and judges it; a miss is
/// measured again after a wait for a quiet machine, up to
/// [`CALIBRATION_ATTEMPTS`](echolab_core::calibration::CALIBRATION_ATTEMPTS), as
/// `echolab-netem calibrate --attempts` does across a link (`echolab_netem::calibrate::attempts` says
/// why). The record is the last attempt's, with the misses before it in `missed_attempts` and
/// the wait before it in `settle["calibration_repeat"]`. Seen in CI on a 2-core Intel Xeon VM
/// once: exp32's loopback probe at a median of 1,481.7 us against at most 1,000 us,
/// where the run of exp31 a minute earlier had passed.
///
/// # Errors
/// The probe server or client failed (not a calibration miss, which is `passed: false`).
pub(crate) async fn calibrate_rtt<H: Hosts>(
    hosts: &mut H,
    profile: &Profile,
) -> anyhow::Result<CalibrationRecord> {
    use echolab_core::calibration::{Attempt, Attempts, CALIBRATION_ATTEMPTS};
    let mut rule = Attempts::new(CALIBRATION_ATTEMPTS);
    let mut settle = None;
    loop {
        let mut record = probe_once(hosts, profile).await?;
        if let Some(s) = settle {
            record.settle.insert("calibration_repeat".to_string(), s);
        }
        let miss = || echolab_core::results::MissedAttempt {
            rtt_median_us: record.rtt_median_us().unwrap_or_default(),
            reason: record.reason.clone(),
            settle,
            ..Default::default()
        };
        match rule.judge(record.passed, &record.reason, miss) {
            Attempt::Decided { reason, missed } => {
                record.reason = reason;
                record.missed_attempts = missed;
                return Ok(record);
            }
            Attempt::Again => {
                settle = echolab_runtime::settle::wait_for_quiet(
                    echolab_runtime::settle::Condition::Steady,
                )
                .await;
            }
        }
    }
}

/// One probe: echo-server and echo-bench between the hosts, its figures judged by core
/// ([`judge_probe`]).
async fn probe_once<H: Hosts>(
    hosts: &mut H,
    profile: &Profile,
) -> anyhow::Result<CalibrationRecord> {
    let (server, ready) = hosts
        .start_server(&probe_server_cmd(hosts.server_bind()).into())
        .await
        .context("calibration server")?;
    let target = hosts.target(&ready);
    let rounds = rtt_rounds(profile);
    let bench = hosts
        .run_bench(&probe_bench_cmd(target, rounds), &server, Duration::ZERO)
        .await;
    let stopped = hosts.stop_server(server).await;
    let (out, _) = bench.context("calibration client")?;
    let report = bench_report(&out.stdout)
        .map_err(|e| anyhow::anyhow!("calibration client ({}): {e}", out.describe()))?;
    let stats = stopped.ok().and_then(|o| final_stats(&o.stdout).ok());
    let mut measured = BTreeMap::new();
    measured.insert("round_trips".into(), report.requests_ok as f64);
    measured.insert("failures".into(), report.requests_failed as f64);
    if let Some(latency) = &report.latency_us {
        measured.insert("rtt_min_us".into(), latency.min);
        measured.insert(CalibrationRecord::RTT_MEDIAN_US.into(), latency.p50);
        measured.insert("rtt_p99_us".into(), latency.p99);
        if let Some(s) = stats {
            measured.insert("server_bytes_in".into(), s.totals.bytes_in as f64);
        }
    }
    let median = report.latency_us.as_ref().map(|l| l.p50);
    Ok(judge_probe(
        profile,
        measured,
        median,
        rounds,
        report.requests_failed,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use echolab_core::calibration::{failure_message, judge_rtt};
    use echolab_core::cmd::{Ready, ServerLaunch};
    use echolab_runtime::hosts::ProcOutput;

    fn profile(rtt: &str) -> Profile {
        Profile::from_yaml(
            &format!("name: l\ndescription: d\nsource: s\ntopology: loopback\nexpected:\n  rtt: {{ value: {rtt}, minus: 10us, plus: 90us }}\n"),
            "l.yaml",
        )
        .unwrap()
    }

    #[test]
    fn rtt_is_judged_against_the_asymmetric_range() {
        let p = profile("20us");
        let mut r = CalibrationRecord::default();
        judge_rtt(&p, 35.0, &mut r);
        assert!(r.passed, "{}", r.reason);
        assert_eq!(r.expected["rtt_median_us"], 20.0, "the nominal RTT, in µs");
        judge_rtt(&p, 111.0, &mut r);
        assert!(
            !r.passed && r.reason.contains("111.0") && r.reason.contains("10.0..110.0"),
            "{}",
            r.reason
        );
        judge_rtt(&p, 9.0, &mut r);
        assert!(!r.passed);
        assert_eq!(r.checks.len(), 1, "re-judging replaces the check");
        let msg = failure_message("loopback", &r);
        assert!(
            msg.contains("rtt_median 9.0 us (expected 10.0..110.0, FAILED)"),
            "{msg}"
        );
    }

    #[test]
    fn the_probe_is_one_long_connection_to_an_et_server() {
        let bind: IpAddr = "0.0.0.0".parse().unwrap();
        assert_eq!(
            probe_server_cmd(bind).argv().join(" "),
            "--model epoll-et --bind 0.0.0.0 --port 0"
        );
        let target: SocketAddr = "10.0.0.2:41000".parse().unwrap();
        assert_eq!(
            probe_bench_cmd(target, 250).argv().join(" "),
            "10.0.0.2 41000 1 250 --mode long --json"
        );
    }

    #[test]
    fn probe_length_follows_the_expected_rtt() {
        assert_eq!(rtt_rounds(&profile("20us")), RTT_ROUNDS);
        assert_eq!(rtt_rounds(&profile("20ms")), 250);
    }

    /// Hosts that answer the probe with a canned BenchReport: `failed` of 2000 round trips
    /// failed, the median `p50_us`.
    struct CannedHosts {
        p50_us: f64,
        failed: u64,
    }

    impl Hosts for CannedHosts {
        type Server = ();
        type LinkReading = std::convert::Infallible;

        fn link_counters(
            before: &Self::LinkReading,
            _: &Self::LinkReading,
        ) -> anyhow::Result<echolab_core::results::LinkCounters> {
            echolab_runtime::hosts::no_link(before)
        }

        async fn fresh_hosts(&mut self) -> anyhow::Result<bool> {
            Ok(false)
        }

        fn server_bind(&self) -> IpAddr {
            "127.0.0.1".parse().unwrap()
        }

        fn target(&self, ready: &Ready) -> SocketAddr {
            ready.addr
        }

        async fn start_server(&mut self, _: &ServerLaunch) -> anyhow::Result<((), Ready)> {
            let line = "echo-server listening on 127.0.0.1:4242 model=epoll-et workers=1 pid=7";
            Ok(((), Ready::parse(line).unwrap()))
        }

        async fn run_bench(
            &mut self,
            _: &BenchCmd,
            _: &(),
            _: std::time::Duration,
        ) -> anyhow::Result<(ProcOutput, Vec<echolab_core::results::ResourceSample>)> {
            let report = echolab_core::stats::BenchReport {
                requests_ok: 2000 - self.failed,
                requests_failed: self.failed,
                latency_us: Some(echolab_core::hist::LatencySummary {
                    p50: self.p50_us,
                    ..Default::default()
                }),
                ..Default::default()
            };
            let stdout = serde_json::to_string(&report).unwrap();
            Ok((
                ProcOutput {
                    exit_code: Some(0),
                    stdout,
                    ..Default::default()
                },
                Vec::new(),
            ))
        }

        async fn trace_bench(&mut self, _: &BenchCmd) -> anyhow::Result<ProcOutput> {
            unreachable!("calibration traces nothing")
        }

        async fn stop_server(&mut self, _: ()) -> anyhow::Result<ProcOutput> {
            Ok(ProcOutput::default())
        }
    }

    fn calibrated(p50_us: f64, failed: u64) -> CalibrationRecord {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(calibrate_rtt(
            &mut CannedHosts { p50_us, failed },
            &profile("20us"),
        ))
        .unwrap()
    }

    #[test]
    fn a_probe_with_failed_round_trips_fails_calibration_even_at_the_right_rtt() {
        let ok = calibrated(35.0, 0);
        assert!(ok.passed, "{}", ok.reason);
        assert_eq!(
            (ok.measured["round_trips"], ok.measured["failures"]),
            (2000.0, 0.0)
        );
        let lossy = calibrated(35.0, 3);
        assert!(!lossy.passed);
        // Every attempt (3) gives the same canned answer: two recorded misses, then the verdict.
        assert!(
            lossy.reason.starts_with(
                "failed: 3 of 2000 probe round trips failed (attempt 3 of 3, after a wait for a steady machine; earlier: attempt 1 failed: 3 of 2000"
            ),
            "{}",
            lossy.reason
        );
        assert_eq!(lossy.missed_attempts.len(), 2);
        assert!(lossy.settle.contains_key("calibration_repeat"));
        assert!(ok.missed_attempts.is_empty() && ok.settle.is_empty());
        // A wrong RTT keeps its own reason, whatever else failed.
        let slow = calibrated(500.0, 3);
        assert!(
            !slow.passed && slow.reason.contains("RTT median 500.0 us"),
            "{}",
            slow.reason
        );
    }
}
