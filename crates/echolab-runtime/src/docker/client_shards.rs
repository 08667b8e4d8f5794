//! One client run split over several client machines of a lab (`roles.client: [b, c]`): the
//! echo-bench of each machine runs its share of the connections as a shard
//! ([`echolab_core::shard`]), all are released together once every one has connected, and
//! their reports merge into one, whose counters add up across the machines' kernels.
//!
//! The barrier is what makes the shares one load: a machine that started while another was
//! still connecting would measure a lighter server. It costs one line on each shard's stdin,
//! written after the last ready line; the machines' clocks are not involved.

use anyhow::anyhow;
use bollard::Docker;
use echolab_core::cmd::BenchCmd;
use echolab_core::shard::{self, CounterScope, Shard, READY_LINE};
use tokio::io::AsyncWriteExt as _;

use super::exec;
use crate::hosts::ProcOutput;
use crate::image_archive::IMAGE_BIN_DIR;

/// A client host on one machine of the lab.
#[derive(Clone)]
pub struct ClientHost {
    /// Its machine's engine.
    pub docker: Docker,
    /// The host container.
    pub container: String,
    /// The lab file's name for the engine.
    pub engine: String,
    /// Its endpoint, as the lab file gives it.
    pub endpoint: String,
}

impl ClientHost {
    /// `e` said of this host's engine (`engine b (tcp://10.0.0.2:2376): ...`), keeping its
    /// causes, so that [`super::deadlines::is_no_answer`] still finds an engine that stopped
    /// answering.
    pub fn on_engine(&self, e: anyhow::Error) -> anyhow::Error {
        super::engine::on_engine(&self.engine, &self.endpoint, e)
    }
}

/// Runs `bench` split over `clients` (shard K on client K) to completion within `deadline`:
/// starts every shard, waits until each has connected, releases them together, and returns
/// one output whose stdout is the merged report (`extra.client_machines` lists the engines).
/// A shard that fails or prints no report makes the output fail with its status and every
/// shard's stderr, each line prefixed with its engine.
///
/// # Errors
/// A shard could not be started, ended before it was ready (with its status and stderr), or
/// the deadline passed; the caller kills what still runs.
pub async fn run(
    clients: &[ClientHost],
    bench: &BenchCmd,
    deadline: std::time::Duration,
) -> anyhow::Result<ProcOutput> {
    let until = tokio::time::Instant::now() + deadline;
    let count = clients.len() as u64;
    let mut started = Vec::new();
    for (index, c) in clients.iter().enumerate() {
        let mut cmd = vec![format!("{IMAGE_BIN_DIR}/{}", BenchCmd::PROGRAM)];
        cmd.extend(
            bench
                .shard_argv(Shard {
                    index: index as u64,
                    count,
                })
                .map_err(|e| anyhow!("{e}"))?,
        );
        let (stream, stdin) = exec::start_with_stdin(&c.docker, &c.container, &cmd)
            .await
            .map_err(|e| c.on_engine(e))?;
        started.push((stream, stdin));
    }
    // Every shard's ready line, or the first that ended without one.
    let mut not_ready = None;
    for (k, (stream, _)) in started.iter_mut().enumerate() {
        let lines = stream.stdout_lines.as_mut().expect("taken only here");
        let ready = loop {
            match tokio::time::timeout_at(until, lines.recv()).await {
                Ok(Some(line)) if line.trim_end() == READY_LINE => break true,
                Ok(Some(_)) => continue,
                Ok(None) => break false,
                Err(_) => {
                    return Err(anyhow!(
                        "engine {}: echo-bench shard {k}/{count} was not ready within {deadline:?}",
                        clients[k].engine
                    ))
                }
            }
        };
        if !ready {
            not_ready = Some(k);
            break;
        }
    }
    if let Some(k) = not_ready {
        // The others wait for a release that will not come: the caller kills them.
        let (stream, _stdin) = started.swap_remove(k);
        let left = until.saturating_duration_since(tokio::time::Instant::now());
        let why = match exec::finish(&clients[k].docker, stream, left).await {
            Ok(out) => format!("{}: {}", out.describe(), out.stderr.trim()),
            // Not the shard's end but its engine's silence: said as such.
            Err(e) if super::deadlines::is_no_answer(&e) => {
                return Err(clients[k].on_engine(e.context(format!("echo-bench shard {k}/{count}"))))
            }
            Err(e) => format!("{e:#}"),
        };
        return Err(anyhow!(
            "engine {}: echo-bench shard {k}/{count} ended before it was ready ({why})",
            clients[k].engine
        ));
    }
    for (k, (_, stdin)) in started.iter_mut().enumerate() {
        let released = match stdin.write_all(b"go\n").await {
            Ok(()) => stdin.flush().await,
            Err(e) => Err(e),
        };
        released.map_err(|e| anyhow!("engine {}: releasing echo-bench: {e}", clients[k].engine))?;
    }
    let mut outputs = Vec::new();
    // The stdin ends stay open until every shard is done.
    let mut stdins = Vec::new();
    for (k, (stream, stdin)) in started.into_iter().enumerate() {
        stdins.push(stdin);
        let left = until.saturating_duration_since(tokio::time::Instant::now());
        let out = exec::finish(&clients[k].docker, stream, left)
            .await
            .map_err(|e| clients[k].on_engine(e.context("echo-bench")))?;
        outputs.push((clients[k].engine.clone(), out));
    }
    drop(stdins);
    Ok(merged(outputs))
}

/// One output of the shards' (engine, output) pairs, in shard order.
fn merged(outputs: Vec<(String, ProcOutput)>) -> ProcOutput {
    let stderr: String = outputs
        .iter()
        .map(|(engine, o)| prefixed(engine, &o.stderr))
        .collect();
    let failed = outputs.iter().find(|(_, o)| o.exit_code != Some(0));
    let exit_code = failed.map_or(Some(0), |(_, o)| o.exit_code);
    let reports: Result<Vec<_>, String> = outputs
        .iter()
        .map(|(engine, o)| {
            let json = o
                .stdout
                .lines()
                .filter(|l| l.trim_end() != READY_LINE)
                .collect::<Vec<_>>()
                .join("\n");
            echolab_core::cmd::bench_report(&json).map_err(|e| format!("engine {engine}: {e}"))
        })
        .collect();
    let engines: Vec<String> = outputs.iter().map(|(e, _)| e.clone()).collect();
    let stdout = match reports.and_then(|r| shard::merge(r, CounterScope::SeparateMachines)) {
        Ok(mut report) => {
            report.threads_reason = format!(
                "{} client machines, each {}",
                engines.len(),
                report.threads_reason
            );
            report.extra.client_machines = Some(engines);
            serde_json::to_string(&report).expect("a report serializes")
        }
        // No report: the runner says so, with this stderr.
        Err(e) => {
            return ProcOutput {
                exit_code: exit_code.filter(|c| *c != 0).or(Some(1)),
                stdout: String::new(),
                stderr: format!("{stderr}{e}\n"),
                exited_before_stop: false,
            }
        }
    };
    ProcOutput {
        exit_code,
        stdout,
        stderr,
        exited_before_stop: false,
    }
}

/// `text` with each line prefixed `engine NAME: `.
fn prefixed(engine: &str, text: &str) -> String {
    text.lines()
        .map(|l| format!("engine {engine}: {l}\n"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use echolab_core::stats::BenchReport;

    fn output(code: i64, report: Option<BenchReport>, stderr: &str) -> ProcOutput {
        let stdout = match report {
            Some(r) => format!("{READY_LINE}\n{}\n", serde_json::to_string(&r).unwrap()),
            None => format!("{READY_LINE}\n"),
        };
        ProcOutput {
            exit_code: Some(code),
            stdout,
            stderr: stderr.into(),
            exited_before_stop: false,
        }
    }

    fn report(conns: u64, ok: u64, tw: i64) -> BenchReport {
        let mut h = echolab_core::hist::new_latency_histogram();
        assert!(!echolab_core::hist::record_ns(&mut h, 100_000));
        let mut r = BenchReport {
            conns,
            requests_ok: ok,
            duration_s: 1.0,
            histogram: echolab_core::hist::encode(&h),
            threads_reason: "1 thread".into(),
            ..Default::default()
        };
        r.kernel_counters.insert("TcpExtTW".into(), tw);
        r
    }

    #[test]
    fn the_machines_reports_merge_into_one_whose_counts_add_up() {
        let out = merged(vec![
            ("b".into(), output(0, Some(report(50, 1000, 500)), "")),
            (
                "c".into(),
                output(0, Some(report(50, 3000, 1500)), "slow\n"),
            ),
        ]);
        assert_eq!(out.exit_code, Some(0));
        assert_eq!(out.stderr, "engine c: slow\n");
        let r = echolab_core::cmd::bench_report(&out.stdout).unwrap();
        assert_eq!((r.conns, r.requests_ok, r.qps), (100, 4000, 4000.0));
        // Two kernels: their TIME_WAIT entries add.
        assert_eq!(r.kernel_counters["TcpExtTW"], 2000);
        assert_eq!(
            r.extra.client_machines,
            Some(vec!["b".to_string(), "c".to_string()])
        );
        assert_eq!(r.threads_reason, "2 client machines, each 1 thread");
    }

    #[test]
    fn a_failed_or_silent_machine_fails_the_run_and_names_its_engine() {
        let out = merged(vec![
            ("b".into(), output(0, Some(report(50, 1000, 0)), "")),
            ("c".into(), output(1, Some(report(50, 0, 0)), "refused\n")),
        ]);
        // Both printed a report: it is kept, and the status says one failed.
        assert_eq!(out.exit_code, Some(1));
        assert!(!out.stdout.is_empty());
        let out = merged(vec![
            ("b".into(), output(0, Some(report(50, 1000, 0)), "")),
            ("c".into(), output(0, None, "")),
        ]);
        assert_eq!((out.exit_code, out.stdout.as_str()), (Some(1), ""));
        assert!(
            out.stderr
                .contains("engine c: echo-bench printed no valid report"),
            "{}",
            out.stderr
        );
    }
}
