//! One `echolab-up` call, start to end, as the pipeline of docs/architecture.md's data
//! flow: inputs → plan → deploy → calibrate → cells → teardown → results → report. Each stage
//! is a function here; what a stage builds belongs to its module (`inputs`, `cpuplan`,
//! `results_dir`, `runner`, `rtt_probe`), and every backend is deployed and removed through
//! the runtime's one interface (`echolab_runtime::deploy`). Teardown runs on every path
//! (success, error, Ctrl-C, SIGTERM) before the process exits.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::anyhow;
use echolab_core::calibration::{failure_message, judge_paths};
use echolab_core::cli::EXIT_USAGE;
use echolab_core::lab_file::Lab;
use echolab_core::lab_plan::{Backend, LabPlan, PlanRefusal, Shape};
use echolab_core::results::{Manifest, RunStatus};
use echolab_runtime::deploy::{AnyHosts, AnyRuntime, Deployed, Readings, RunSpec, Runtime};

use crate::adaptive;
use crate::cli::{Args, BackendChoice};
use crate::inputs::{preflight, resolve, Inputs};
use crate::plan;
use crate::results_dir::ResultsWriter;
use crate::rtt_probe::calibrate_rtt;
use crate::runner::{check_custom_servers, progress_bar, run_all, Cells, RunError};

/// Exit status after Ctrl-C or SIGTERM (128 + SIGINT, as shells report it).
pub(crate) const EXIT_INTERRUPTED: u8 = 130;

/// What ended the run.
enum Ending {
    /// All runs done; how many had errors.
    Done(u64),
    /// Stopped by an error.
    Failed(anyhow::Error),
    /// Stopped by a signal.
    Interrupted(&'static str),
}

/// Waits for Ctrl-C (SIGINT) or SIGTERM; returns the signal's name.
async fn shutdown_signal() -> &'static str {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return "SIGINT";
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "SIGINT",
        _ = term.recv() => "SIGTERM",
    }
}

/// Runs the whole call; returns the process exit code.
/// (`--explain` goes to [`crate::explain::run`] instead, which calls `run_once` itself.)
pub async fn main(args: Args, argv: Vec<String>) -> ExitCode {
    run_once(args, argv, &mut None).await
}

/// One run, start to end; `made` gets its results directory once it exists (`--explain`
/// reads it afterwards).
pub(crate) async fn run_once(
    args: Args,
    argv: Vec<String>,
    made: &mut Option<PathBuf>,
) -> ExitCode {
    match pipeline(&args, argv, made).await {
        Ok(code) | Err(code) => code,
    }
}

/// The stages in order; a stage that stops the call has said why and gives the exit code.
async fn pipeline(
    args: &Args,
    argv: Vec<String>,
    made: &mut Option<PathBuf>,
) -> Result<ExitCode, ExitCode> {
    if args.down {
        return Ok(crate::down::down(args).await);
    }
    let mut inputs = read_inputs(args)?;
    if args.build_image {
        return Ok(build_image(&inputs, args.image.as_deref()).await);
    }
    let (runtime, plan) = plan_run(args, &mut inputs).await?;
    let shape = plan.shape;
    let mut out = open_results(args, argv, &inputs, &runtime, plan)?;
    *made = Some(out.dir.clone());
    let (programs, run_id) = (inputs.image_programs(), out.manifest.run_id.clone());
    let spec = run_spec(args, &inputs, (&run_id, shape, &programs), &out.manifest);
    let work = async {
        let mut deployed = runtime.deploy(&spec, &mut out).await?;
        calibrate(&mut deployed, &inputs, &mut out).await?;
        cells(&mut deployed, &inputs, &mut out).await
    };
    let ending = tokio::select! {
        r = work => match r { Ok(n) => Ending::Done(n), Err(e) => Ending::Failed(e) },
        sig = shutdown_signal() => Ending::Interrupted(sig),
    };
    let teardown_error = teardown(&runtime, args, &mut out).await;
    Ok(finish(ending, teardown_error, &mut out, args))
}

/// Prints `echolab-up: <e>` and gives `code`: how a stage stops the call.
fn stop(e: impl std::fmt::Display, code: ExitCode) -> ExitCode {
    eprintln!("echolab-up: {e}");
    code
}

/// Inputs: the profile, experiment and binaries resolved and checked (usage errors exit 2);
/// the profile's warnings printed.
fn read_inputs(args: &Args) -> Result<Inputs, ExitCode> {
    let inputs = resolve(args).map_err(|e| stop(e, ExitCode::from(EXIT_USAGE)))?;
    for warning in inputs.profile.warnings() {
        eprintln!(
            "echolab-up: warning: profile {}: {warning}",
            inputs.profile_path.display()
        );
    }
    preflight(&inputs, args.image.as_deref()).map_err(|e| stop(e, ExitCode::from(EXIT_USAGE)))?;
    Ok(inputs)
}

/// Plan: every rule that joins two inputs settled before any engine is contacted, then the
/// runtime reached (with `--backend auto`, the local one where no engine answers, planned
/// again for it); the profile becomes the one the link gets, its queues sized for the
/// experiment.
async fn plan_run(args: &Args, inputs: &mut Inputs) -> Result<(AnyRuntime, LabPlan), ExitCode> {
    let lab = match args.lab.as_deref() {
        Some(path) => {
            let local = args.backend == BackendChoice::Local;
            let lab = Lab::for_run(path, &inputs.profile, local);
            Some(lab.map_err(|e| stop(e, ExitCode::from(EXIT_USAGE)))?)
        }
        None => None,
    };
    let requested = match args.backend {
        BackendChoice::Local => Backend::Processes,
        BackendChoice::Docker | BackendChoice::Auto => Backend::Containers,
    };
    let plan = plan_on(args, inputs, lab.as_ref(), requested).map_err(|e| {
        let code = match e {
            PlanRefusal::Usage(_) => ExitCode::from(EXIT_USAGE),
            PlanRefusal::Unsupported(_) => ExitCode::FAILURE,
        };
        stop(e, code)
    })?;
    if let Some(l) = &lab {
        for name in l.unused() {
            eprintln!(
                "echolab-up: warning: lab file {}: no role names engine {name}; this run does not contact it",
                l.path.display()
            );
        }
    }
    let (runtime, plan) = reach(args, inputs, lab, plan).await?;
    size_link_queues(inputs, &plan);
    Ok((runtime, plan))
}

/// The plan of `inputs` on `backend` (`lab`: the lab file, if any).
fn plan_on(
    args: &Args,
    inputs: &Inputs,
    lab: Option<&Lab>,
    backend: Backend,
) -> Result<LabPlan, PlanRefusal> {
    let explicit_cpu_plan = matches!(
        args.cpu_plan,
        crate::cpuplan::CpuPlanChoice::Explicit { .. }
    );
    LabPlan::new(
        &inputs.profile,
        &inputs.experiment,
        lab,
        backend,
        explicit_cpu_plan,
    )
}

/// The runtime `plan` needs: this machine's engine for one engine's shapes (falling back to
/// processes under `--backend auto`, planned again), a lab's engines, or processes.
async fn reach(
    args: &Args,
    inputs: &Inputs,
    lab: Option<Lab>,
    plan: LabPlan,
) -> Result<(AnyRuntime, LabPlan), ExitCode> {
    if let Some(lab) = lab {
        let runtime = AnyRuntime::lab(lab).await;
        let runtime =
            runtime.map_err(|e| stop(format!("{e}; nothing was created"), ExitCode::FAILURE))?;
        return Ok((runtime, plan));
    }
    match plan.shape {
        Shape::Across { .. } | Shape::Local => Ok((AnyRuntime::local(), plan)),
        Shape::Loopback | Shape::Link => match AnyRuntime::engine().await {
            Ok(runtime) => Ok((runtime, plan)),
            Err(reason) if args.backend == BackendChoice::Auto => {
                eprintln!(
                    "echolab-up: {reason}; using the local backend (processes on this machine)"
                );
                let plan = plan_on(args, inputs, None, Backend::Processes)
                    .map_err(|e| stop(e, ExitCode::FAILURE))?;
                Ok((AnyRuntime::local(), plan))
            }
            Err(reason) => Err(stop(reason, ExitCode::FAILURE)),
        },
    }
}

/// From here on the profile is the one the link gets: its limits sized for the experiment
/// (every backend and the manifest's profile read them from it); says so when a limit was
/// raised.
fn size_link_queues(inputs: &mut Inputs, plan: &LabPlan) {
    let Some(queue) = &plan.queue else { return };
    let raised = [
        (&queue.uplink, &inputs.profile.uplink),
        (&queue.downlink, &inputs.profile.downlink),
    ]
    .iter()
    .any(|(s, spec)| {
        spec.as_ref()
            .is_some_and(|spec| s.limit > spec.default_limit())
    });
    if raised {
        eprintln!("echolab-up: link queue: {}", queue.reason);
    }
    inputs.profile = queue.apply(&inputs.profile);
}

/// Results: the manifest of the starting run written in a directory of its own (earlier
/// runs whose launcher is gone marked abandoned first), and the plan announced.
fn open_results(
    args: &Args,
    argv: Vec<String>,
    inputs: &Inputs,
    runtime: &AnyRuntime,
    plan: LabPlan,
) -> Result<ResultsWriter, ExitCode> {
    let environment = echolab_runtime::environment::capture(&inputs.root);
    let has_link = inputs.profile.topology != echolab_core::profile::Topology::Loopback;
    let placement = runtime.placement();
    let cpu_plan = crate::cpuplan::for_run(&args.cpu_plan, &placement, environment.cpus, has_link)
        .map_err(|e| stop(e, ExitCode::from(EXIT_USAGE)))?;
    let start = crate::results_dir::Start {
        argv,
        backend: runtime.backend(),
        plan,
        environment,
        cpu_plan,
        // A lab's hosts share their machines' network namespaces: no container is fresh.
        fresh_hosts_per_cell: runtime.fresh_hosts_possible() && !args.reuse_hosts,
        engine_version: runtime.engine_version(),
    };
    let manifest = crate::results_dir::starting_manifest(inputs, start);
    for dir in crate::results_dir::mark_abandoned(&inputs.out) {
        eprintln!(
            "echolab-up: earlier run {} was still 'running' but its launcher is gone: marked abandoned (its finished runs are kept)",
            dir.display()
        );
    }
    let out = ResultsWriter::create(&inputs.out, manifest, &inputs.profile.name)
        .map_err(|e| stop(format!("{e:#}"), ExitCode::FAILURE))?;
    eprintln!(
        "echolab-up: run {}: {} of {} on {} ({}); results in {}",
        out.manifest.run_id,
        inputs.describe_plan(),
        inputs.experiment.name,
        inputs.profile.name,
        runtime.backend(),
        out.dir.display()
    );
    Ok(out)
}

/// What the runtime's deploy needs of run `run_id` (its shape, the programs its image
/// carries; this machine's CPUs and the CPU plan as `manifest` records them).
fn run_spec<'a>(
    args: &'a Args,
    inputs: &'a Inputs,
    (run_id, shape, programs): (&'a str, Shape, &'a [String]),
    manifest: &Manifest,
) -> RunSpec<'a> {
    RunSpec {
        run_id,
        shape,
        runs: &inputs.runs,
        experiment: &inputs.experiment,
        profile: &inputs.profile,
        bin_dir: &inputs.bin_dir,
        programs,
        prebuilt: args.image.as_deref(),
        allow_uring_unconfined: args.allow_uring_unconfined,
        machine_cpus: manifest.environment.cpus,
        cpu_plan: manifest.cpu_plan.clone().unwrap_or_default(),
    }
}

/// Calibrate: the deploy's readings, or the RTT probe on the hosts where no link tool
/// measured, judged once by core (`judge_paths`); a failed calibration stops the run.
async fn calibrate(
    deployed: &mut Deployed<AnyHosts>,
    inputs: &Inputs,
    out: &mut ResultsWriter,
) -> anyhow::Result<()> {
    let (paths, seconds) = match std::mem::replace(&mut deployed.readings, Readings::OnTheHosts) {
        Readings::Paths { paths, seconds } => (paths, seconds),
        Readings::OnTheHosts => {
            let t = Instant::now();
            let record = calibrate_rtt(&mut deployed.hosts, &inputs.profile).await?;
            (vec![(String::new(), record)], t.elapsed().as_secs_f64())
        }
    };
    let calibration = judge_paths(paths);
    out.manifest.link.calibration = Some(calibration.clone());
    out.phase("calibration", seconds)?;
    if !calibration.passed {
        return Err(anyhow!(
            "{}",
            failure_message(&inputs.profile.name, &calibration)
        ));
    }
    Ok(())
}

/// Cells: the custom servers checked once, every planned run, then adaptive rounds (netperf's
/// -i max,min -I level,width): after the minimum, another round for the cells whose headline
/// interval is still wider than the target and for the cells of claims whose interval
/// straddles their band's edge (a verdict that has not settled). Returns the runs with errors.
async fn cells(
    deployed: &mut Deployed<AnyHosts>,
    inputs: &Inputs,
    out: &mut ResultsWriter,
) -> anyhow::Result<u64> {
    check_custom_servers(&mut deployed.hosts, &inputs.experiment).await?;
    let t = Instant::now();
    let bar = progress_bar(inputs.runs.len() as u64);
    let fresh_hosts = out
        .manifest
        .order
        .as_ref()
        .is_some_and(|o| o.fresh_hosts_per_cell);
    let exp = &inputs.experiment;
    let gate = &deployed.gate;
    let filter = |cell: &echolab_core::experiment::Cell| gate.allows(cell);
    let mut c = Cells {
        hosts: &mut deployed.hosts,
        exp,
        out,
        bar: &bar,
        filter: &filter,
        fresh_hosts,
    };
    let mut result = run_all(&mut c, &inputs.runs).await;
    for round in exp.repetitions + 1..=exp.max_repetitions() {
        let Ok(failed_so_far) = result else { break };
        let mut pending = adaptive::cells_short_of_target(exp, c.out.runs());
        for cell in adaptive::cells_of_unsettled_claims(&c.out.manifest, c.out.runs()) {
            if !pending.contains(&cell) {
                pending.push(cell);
            }
        }
        if pending.is_empty() {
            break;
        }
        let runs = plan::round(&pending, round, inputs.order);
        c.out.manifest.runs_planned += runs.len() as u64;
        bar.inc_length(runs.len() as u64);
        result = run_all(&mut c, &runs).await.map(|n| n + failed_so_far);
    }
    bar.finish_and_clear();
    out.phase("cells", t.elapsed().as_secs_f64())?;
    result.map_err(|e| match e {
        RunError::Results(e) => e,
        other => anyhow!("{other}"),
    })
}

/// Teardown: every engine's objects removed (all at once, each bounded), unless `--keep`;
/// returns what could not be removed, in one line.
async fn teardown(runtime: &AnyRuntime, args: &Args, out: &mut ResultsWriter) -> Option<String> {
    let t = Instant::now();
    let mut teardown_error = None;
    if args.keep && !matches!(runtime, AnyRuntime::Local) {
        eprintln!(
            "echolab-up: --keep: run {}'s containers stay up; `echolab-up --down{}` removes them",
            out.manifest.run_id,
            args.lab
                .as_ref()
                .map(|p| format!(" --lab {}", p.display()))
                .unwrap_or_default()
        );
    } else {
        // Every engine, even after one failed: a lab run leaves nothing on any machine that
        // answers, and names what it left on one that does not.
        let (run_id, hosts) = (&out.manifest.run_id, &out.manifest.hosts);
        let errors = runtime.teardown(run_id, hosts, args.lab.as_deref()).await;
        if !errors.is_empty() {
            teardown_error = Some(format!("teardown: {}", errors.join("; ")));
        }
    }
    let _ = out.phase("teardown", t.elapsed().as_secs_f64());
    teardown_error
}

/// Results and report: the run's status and error (the teardown's joined to the run's) in
/// the manifest, the report rendered, the last lines said; returns the exit code.
fn finish(
    ending: Ending,
    teardown_error: Option<String>,
    out: &mut ResultsWriter,
    args: &Args,
) -> ExitCode {
    let (status, error, code) = match ending {
        Ending::Done(0) => (RunStatus::Complete, None, ExitCode::SUCCESS),
        Ending::Done(n) => (
            RunStatus::Complete,
            // Of the runs made, adaptive repetitions' included (not only the first plan's).
            Some(format!(
                "{n} of {} runs had errors; see their records",
                out.manifest.runs_planned
            )),
            ExitCode::FAILURE,
        ),
        Ending::Failed(e) => (RunStatus::Failed, Some(format!("{e:#}")), ExitCode::FAILURE),
        Ending::Interrupted(sig) => (
            RunStatus::Interrupted,
            Some(format!("interrupted by {sig}")),
            ExitCode::from(EXIT_INTERRUPTED),
        ),
    };
    let (error, code) = match (error, teardown_error) {
        (Some(e), Some(t)) => (Some(format!("{e}; {t}")), ExitCode::FAILURE),
        (None, Some(t)) => (Some(t), ExitCode::FAILURE),
        (e, None) => (e, code),
    };
    if let Err(e) = out.finish(status, error.clone()) {
        eprintln!("echolab-up: {e:#}");
    }
    crate::report::render(&out.dir, !args.quiet_verdicts);
    if let Some(e) = &error {
        eprintln!("echolab-up: {e}");
    }
    eprintln!(
        "echolab-up: {} ({} of {} runs written): {}",
        status.word(),
        out.manifest.runs_done,
        out.manifest.runs_planned,
        out.dir.display()
    );
    code
}

/// `--build-image`: the lab image built (or `prebuilt` taken) on this machine's engine; prints
/// its reference and id.
async fn build_image(inputs: &Inputs, prebuilt: Option<&str>) -> ExitCode {
    let programs = inputs.image_programs();
    match echolab_runtime::deploy::build_image(&inputs.bin_dir, &programs, prebuilt).await {
        Ok(image) => {
            println!("{} {}", image.reference, image.id);
            eprintln!(
                "echolab-up: image {} ({}) is also tagged echolab:latest",
                image.reference, image.id
            );
            ExitCode::SUCCESS
        }
        Err(e) => stop(format!("{e:#}"), ExitCode::FAILURE),
    }
}
