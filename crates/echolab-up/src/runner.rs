//! The per-run loop, written once for every backend: start the server and wait for its
//! readiness line, run echo-bench (its `--warmup` is the warm-up) while the server host is
//! sampled, stop the server with SIGTERM and read its final stats, write the run record.

use std::time::Instant;

use anyhow::Context as _;
use echolab_core::cmd::{bench_report, final_stats, ServerCpus};
use echolab_core::experiment::{Cell, Experiment};
use echolab_core::results::{ResourceSample, RunRecord};
use echolab_runtime::deploy::{is_no_answer, Hosts};
use echolab_runtime::hosts::ProcOutput;
use indicatif::{ProgressBar, ProgressStyle};

use crate::commands::{bench_cmd, server_cmd};
use crate::plan::PlannedRun;
use crate::results_dir::ResultsWriter;

/// A progress bar of runs done out of planned, with the ETA, on stderr (hidden when stderr is
/// not a terminal, as indicatif does).
pub(crate) fn progress_bar(total: u64) -> ProgressBar {
    let bar = ProgressBar::new(total);
    let style = ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} runs, ETA {eta} {msg}",
    )
    .expect("a valid template");
    bar.set_style(style);
    bar
}

/// Why the loop stopped early.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RunError {
    /// echo-server could not start for a cell: every later run of the same configuration would
    /// fail the same way, so the run stops here.
    #[error("run {run}: {message}")]
    ServerStart { run: String, message: String },
    /// The results directory could not be written.
    #[error("{0:#}")]
    Results(anyhow::Error),
    /// An engine stopped answering during the run (`docker::deadlines::NoAnswer`): what
    /// would follow waits on it, so the run stops here.
    #[error("run {run}: {message}")]
    EngineSilent { run: String, message: String },
}

/// Seed 002's cross-check: the cell once more against a server of its own, with the client
/// under `strace -f -c -e trace=connect,close`; returns strace's summary. Kept beside the
/// measured run, never instead of it (ptrace slows every traced call).
async fn trace<H: Hosts>(
    hosts: &mut H,
    exp: &Experiment,
    cell: &echolab_core::experiment::Cell,
    server_cpus: ServerCpus,
) -> anyhow::Result<String> {
    let cmd = server_cmd(exp, cell, hosts.server_bind())?;
    let (server, ready) = hosts.start_server(&cmd).await?;
    let traced = hosts
        .trace_bench(&bench_cmd(exp, cell, hosts.target(&ready), server_cpus))
        .await;
    let stopped = hosts.stop_server(server).await;
    let out = traced?;
    let server_out = stopped?;
    if server_out.exited_before_stop {
        anyhow::bail!(
            "server exited during the cross-check: {}",
            server_out.server_exit_reason()
        );
    }
    if out.exit_code != Some(0) {
        anyhow::bail!("strace echo-bench: {}", out.describe());
    }
    // strace -c ends its summary with the "total" row; without it the output is not one.
    if !out.stderr.lines().any(|l| l.trim_end().ends_with("total")) {
        anyhow::bail!("strace printed no summary: {}", out.describe());
    }
    Ok(out.stderr)
}

/// When a cell's measurement window opens after echo-bench starts: its warm-up (none for a
/// connect storm, which echo-bench runs without one).
fn window_start(exp: &Experiment, cell: &echolab_core::experiment::Cell) -> std::time::Duration {
    match cell.mode {
        echolab_core::experiment::BenchMode::ConnectStorm => std::time::Duration::ZERO,
        _ => exp.warmup.map_or(std::time::Duration::ZERO, |w| w.0),
    }
}

/// Starts and stops each of the experiment's custom servers once before any cell, so that a
/// server that does not start, listen or echo is named at once rather than after the cells
/// shuffled before its first one (`echolab-up __serve` checks the echo at every start).
///
/// # Errors
/// The first custom server that did not start or stop cleanly, by name, with its reason.
pub(crate) async fn check_custom_servers<H: Hosts>(
    hosts: &mut H,
    exp: &Experiment,
) -> anyhow::Result<()> {
    for custom in exp.custom_servers() {
        let launch = echolab_core::cmd::ServerLaunch::Custom(custom.cmd(hosts.server_bind()));
        let (server, _) = hosts
            .start_server(&launch)
            .await
            .with_context(|| format!("server {:?} ({launch})", custom.name))?;
        let out = hosts.stop_server(server).await?;
        if out.exited_before_stop {
            anyhow::bail!(
                "server {:?} exited right after its echo check: {}",
                custom.name,
                out.server_exit_reason()
            );
        }
    }
    Ok(())
}

/// Whether a cell may run on these hosts; `Err(reason)` records the run as failed with that
/// reason and skips it (e.g. io_uring denied by the container's seccomp profile).
pub(crate) type CellFilter<'a> = &'a dyn Fn(&Cell) -> Result<(), String>;

/// What the per-run loop works with: the hosts, the experiment, the results being written,
/// the progress bar, which cells may run, and whether each run gets fresh hosts.
pub(crate) struct Cells<'a, H: Hosts> {
    /// The hosts the runs are made on.
    pub(crate) hosts: &'a mut H,
    /// The experiment.
    pub(crate) exp: &'a Experiment,
    /// Where each run's record goes.
    pub(crate) out: &'a mut ResultsWriter,
    /// Runs done out of planned.
    pub(crate) bar: &'a ProgressBar,
    /// Which cells may run on these hosts.
    pub(crate) filter: CellFilter<'a>,
    /// Each run gets new client and server hosts first ([`Hosts::fresh_hosts`]).
    pub(crate) fresh_hosts: bool,
}

/// What one run measured, before it is read into its record.
struct Measured<H: Hosts> {
    link_before: Option<anyhow::Result<H::LinkReading>>,
    link_after: Option<anyhow::Result<H::LinkReading>>,
    bench: anyhow::Result<(ProcOutput, Vec<ResourceSample>)>,
    stopped: anyhow::Result<ProcOutput>,
}

/// The state carried from one run to the next.
#[derive(Default)]
struct Loop {
    /// Runs that ended with an error but let the run go on.
    failed: u64,
    /// A server that died during a cell may have taken its host with it: the next cell gets
    /// fresh hosts even when hosts are otherwise reused.
    replace_hosts: bool,
}

/// Runs `runs` in order and writes a record for each; with `fresh_hosts`, each run gets new
/// client and server hosts first ([`Hosts::fresh_hosts`]). Returns the number of runs that
/// ended with an error but let the run go on (bench failures, skipped cells).
///
/// # Errors
/// [`RunError`]; the record of the failing run is written first.
pub(crate) async fn run_all<H: Hosts>(
    c: &mut Cells<'_, H>,
    runs: &[PlannedRun],
) -> Result<u64, RunError> {
    let server_cpus = c
        .out
        .manifest
        .cpu_plan
        .as_ref()
        .map_or(ServerCpus::Shared, |p| p.server_cpus());
    let mut state = Loop::default();
    for (cell, rep) in runs {
        run_one(c, &mut state, cell, *rep, server_cpus).await?;
    }
    Ok(state.failed)
}

/// One run of `cell` (repetition `rep`): its record written, the loop's state updated.
async fn run_one<H: Hosts>(
    c: &mut Cells<'_, H>,
    state: &mut Loop,
    cell: &Cell,
    rep: u64,
    server_cpus: ServerCpus,
) -> Result<(), RunError> {
    let name = format!("{}_rep{rep}", cell.id());
    c.bar.set_message(name.clone());
    let t0 = Instant::now();
    let mut rec = RunRecord {
        cell: cell.clone(),
        repetition: rep,
        started_at: echolab_core::utc_now_rfc3339(),
        wall_s: 0.0,
        bench: None,
        server: None,
        server_pid: None,
        samples: Vec::new(),
        settle: None,
        link: None,
        strace: None,
        error: None,
    };
    if let Err(reason) = (c.filter)(cell) {
        rec.error = Some(reason);
        state.failed += 1;
        c.out.add_run(rec).map_err(RunError::Results)?;
        c.bar.inc(1);
        return Ok(());
    }
    if c.fresh_hosts || std::mem::take(&mut state.replace_hosts) {
        fresh_hosts(c, &name, &mut rec).await?;
    }
    let launch = server_cmd(c.exp, cell, c.hosts.server_bind());
    let prints_stats = launch.as_ref().is_ok_and(|l| l.prints_stats());
    let started = match &launch {
        Ok(cmd) => c.hosts.start_server(cmd).await,
        Err(e) => Err(anyhow::Error::new(e.clone())),
    };
    let (server, ready) = match started {
        Ok(s) => s,
        Err(e) => {
            let message = format!("{e:#}");
            rec.error = Some(message.clone());
            rec.wall_s = t0.elapsed().as_secs_f64();
            c.out.add_run(rec).map_err(RunError::Results)?;
            return Err(RunError::ServerStart { run: name, message });
        }
    };
    rec.server_pid = Some(ready.pid);
    let measured = measure(c, cell, server, &ready, server_cpus).await;
    let silent = engine_silent(&measured);
    let mut errors = Vec::new();
    state.replace_hosts |= read_into(c.exp, cell, measured, prints_stats, &mut rec, &mut errors);
    if c.exp.bench.strace && silent.is_none() {
        match trace(c.hosts, c.exp, cell, server_cpus).await {
            Ok(summary) => rec.strace = Some(summary),
            Err(e) => errors.push(format!("strace cross-check: {e:#}")),
        }
    }
    rec.wall_s = t0.elapsed().as_secs_f64();
    if !errors.is_empty() {
        state.failed += 1;
        rec.error = Some(errors.join("; "));
    }
    c.out.add_run(rec).map_err(RunError::Results)?;
    c.bar.inc(1);
    match silent {
        Some(message) => Err(RunError::EngineSilent { run: name, message }),
        None => Ok(()),
    }
}

/// New client and server hosts for run `name`, then a wait for a quiet machine (in `rec`).
///
/// # Errors
/// [`RunError::ServerStart`] when the hosts could not be made again; the record is written.
async fn fresh_hosts<H: Hosts>(
    c: &mut Cells<'_, H>,
    name: &str,
    rec: &mut RunRecord,
) -> Result<(), RunError> {
    match c.hosts.fresh_hosts().await {
        Ok(true) => {
            rec.settle =
                echolab_runtime::settle::wait_for_quiet(echolab_runtime::settle::Condition::Idle)
                    .await;
            if let Some(w) = rec
                .settle
                .and_then(|s| echolab_runtime::settle::busy_warning(name, &s))
            {
                c.bar.println(w);
            }
            Ok(())
        }
        Ok(false) => Ok(()),
        Err(e) => {
            let message = format!("fresh hosts for the cell: {e:#}");
            rec.error = Some(message.clone());
            c.out.add_run(rec.clone()).map_err(RunError::Results)?;
            Err(RunError::ServerStart {
                run: name.to_string(),
                message,
            })
        }
    }
}

/// Runs echo-bench against the started `server` with the link read before and after, then
/// stops the server.
async fn measure<H: Hosts>(
    c: &mut Cells<'_, H>,
    cell: &Cell,
    server: H::Server,
    ready: &echolab_core::cmd::Ready,
    server_cpus: ServerCpus,
) -> Measured<H> {
    let target = c.hosts.target(ready);
    let link_before = c.hosts.link_snapshot().await;
    let bench = c
        .hosts
        .run_bench(
            &bench_cmd(c.exp, cell, target, server_cpus),
            &server,
            window_start(c.exp, cell),
        )
        .await;
    let link_after = c.hosts.link_snapshot().await;
    let stopped = c.hosts.stop_server(server).await;
    Measured {
        link_before,
        link_after,
        bench,
        stopped,
    }
}

/// The first error of `m` that says an engine stopped answering: the run stops after this
/// record.
fn engine_silent<H: Hosts>(m: &Measured<H>) -> Option<String> {
    let readings = [&m.link_before, &m.link_after].into_iter().flatten();
    let link_errors = readings.filter_map(|r| r.as_ref().err());
    link_errors
        .chain(m.bench.as_ref().err())
        .chain(m.stopped.as_ref().err())
        .find(|e| is_no_answer(e))
        .map(|e| format!("{e:#}"))
}

/// Reads what run `cell` measured into `rec`, pushing what went wrong onto `errors`; returns
/// whether the server exited during the cell (its host is replaced before the next).
fn read_into<H: Hosts>(
    exp: &Experiment,
    cell: &Cell,
    m: Measured<H>,
    prints_stats: bool,
    rec: &mut RunRecord,
    errors: &mut Vec<String>,
) -> bool {
    match (m.link_before, m.link_after) {
        (Some(Ok(before)), Some(Ok(after))) => match H::link_counters(&before, &after) {
            Ok(counters) => rec.link = Some(counters),
            Err(e) => errors.push(format!("link counters: {e:#}")),
        },
        (Some(Err(e)), _) | (_, Some(Err(e))) => errors.push(format!("link counters: {e:#}")),
        _ => {}
    }
    match m.bench {
        Ok((output, samples)) => {
            rec.samples = echolab_runtime::hosts::window_samples(
                samples,
                window_start(exp, cell),
                cell.duration.map(|d| d.0),
            );
            read_bench(&output, rec, errors);
        }
        Err(e) => errors.push(format!("echo-bench: {e:#}")),
    }
    match m.stopped {
        Ok(output) if output.exited_before_stop => {
            // The cause first: the client's failures follow from it.
            errors.insert(
                0,
                format!(
                    "server exited during the cell: {}",
                    output.server_exit_reason()
                ),
            );
            return true;
        }
        // A custom server prints no stats: its record has none, and the report says so.
        Ok(_) if !prints_stats => {}
        Ok(output) => match final_stats(&output.stdout) {
            Ok(stats) => rec.server = Some(stats),
            Err(e) => errors.push(format!("echo-server {}: {e}", output.describe())),
        },
        Err(e) => errors.push(format!("stopping echo-server: {e:#}")),
    }
    false
}

/// Reads echo-bench's report from `output` into `rec`; a run in which nothing succeeded
/// measured nothing and is never a result.
fn read_bench(output: &ProcOutput, rec: &mut RunRecord, errors: &mut Vec<String>) {
    match bench_report(&output.stdout) {
        Ok(report) => rec.bench = Some(report),
        Err(e) => errors.push(format!("echo-bench {}: {e}", output.describe())),
    }
    if rec.bench.is_some() && output.exit_code != Some(0) {
        errors.push(format!("echo-bench {}", output.describe()));
    }
    if let Some(b) = rec.bench.as_ref().filter(|b| b.requests_ok == 0) {
        errors.push(format!(
            "no request succeeded ({} failed: {})",
            b.requests_failed,
            b.failures
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
}
