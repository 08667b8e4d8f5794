//! One `echolab-up` call, start to end: resolve the inputs, pick the backend, write the
//! results directory while running, and tear down on every path (success, error, Ctrl-C,
//! SIGTERM) before the process exits.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::anyhow;
use echolab_core::cli::EXIT_USAGE;
use echolab_core::experiment::Cell;
use echolab_core::lab_plan::{Backend, LabPlan, PlanRefusal, Shape};
use echolab_core::profile::Topology;
use echolab_core::results::{CalibrationRecord, LinkRecord, RunStatus};
use echolab_runtime::docker;
use echolab_runtime::docker::confinement::Confinement;
use echolab_runtime::hosts::Hosts;
use echolab_runtime::local::LocalHosts;

use crate::adaptive;
use crate::cli::{Args, BackendChoice};
use crate::inputs::{file_digest, preflight, resolve, Inputs};
use crate::plan;
use crate::results_dir::ResultsWriter;
use crate::rtt_probe::{calibrate_rtt, failure_message};
use crate::runner::{check_custom_servers, progress_bar, run_all, RunError};

/// Where a run's hosts are.
enum Hosting {
    /// Processes on this machine.
    Local,
    /// Containers on one engine.
    Docker(docker::engine::Engine),
    /// Containers on the engines of a lab file, one machine per role.
    Lab(Box<(echolab_core::lab_file::Lab, docker::lab::LabEngines)>),
}

impl Hosting {
    /// The engines to clean up, with their names and endpoints (`""` for the one engine of a
    /// Docker run) and the manifest's host records on each (`hosts`).
    fn engines(
        &self,
        hosts: &BTreeMap<String, serde_json::Value>,
    ) -> Vec<crate::teardown::EngineToClear> {
        use crate::teardown::{records_on, EngineToClear};
        match self {
            Hosting::Local => vec![],
            Hosting::Docker(e) => vec![EngineToClear {
                name: String::new(),
                endpoint: String::new(),
                docker: e.docker.clone(),
                records: hosts.keys().cloned().collect(),
            }],
            Hosting::Lab(l) => {
                let clients: Vec<&str> = l.1.clients.iter().map(|c| c.name.as_str()).collect();
                l.1.all()
                    .into_iter()
                    .map(|e| EngineToClear {
                        name: e.name.clone(),
                        endpoint: e.endpoint.clone(),
                        docker: e.engine.docker.clone(),
                        records: records_on(&e.name, &clients, hosts),
                    })
                    .collect()
            }
        }
    }
}

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
    if args.down {
        return crate::down::down(&args).await;
    }
    let mut inputs = match resolve(&args) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("echolab-up: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    for warning in inputs.profile.warnings() {
        eprintln!(
            "echolab-up: warning: profile {}: {warning}",
            inputs.profile_path.display()
        );
    }
    if let Err(e) = preflight(&inputs, args.image.as_deref()) {
        eprintln!("echolab-up: {e}");
        return ExitCode::from(EXIT_USAGE);
    }
    if args.build_image {
        return build_image(&inputs, args.image.as_deref()).await;
    }
    let lab = match args.lab.as_deref() {
        Some(path) => match echolab_core::lab_file::Lab::for_run(
            path,
            &inputs.profile,
            args.backend == BackendChoice::Local,
        ) {
            Ok(l) => Some(l),
            Err(e) => {
                eprintln!("echolab-up: {e}");
                return ExitCode::from(EXIT_USAGE);
            }
        },
        None => None,
    };
    let explicit_cpu_plan = matches!(
        args.cpu_plan,
        crate::cpuplan::CpuPlanChoice::Explicit { .. }
    );
    let plan_on = |backend| {
        LabPlan::new(
            &inputs.profile,
            &inputs.experiment,
            lab.as_ref(),
            backend,
            explicit_cpu_plan,
        )
    };
    let requested = match args.backend {
        BackendChoice::Local => Backend::Processes,
        BackendChoice::Docker | BackendChoice::Auto => Backend::Containers,
    };
    // Every rule that joins two inputs is settled here, before any engine is contacted.
    let mut lab_plan = match plan_on(requested) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("echolab-up: {e}");
            return match e {
                PlanRefusal::Usage(_) => ExitCode::from(EXIT_USAGE),
                PlanRefusal::Unsupported(_) => ExitCode::FAILURE,
            };
        }
    };
    if let Some(l) = &lab {
        for name in l.unused() {
            eprintln!(
                "echolab-up: warning: lab file {}: no role names engine {name}; this run does not contact it",
                l.path.display()
            );
        }
    }
    let engine = match lab_plan.shape {
        Shape::Across { .. } | Shape::Local => None,
        Shape::Loopback | Shape::Link => match docker::engine::connect().await {
            Ok(e) => Some(e),
            Err(reason) if args.backend == BackendChoice::Auto => {
                eprintln!(
                    "echolab-up: {reason}; using the local backend (processes on this machine)"
                );
                lab_plan = match plan_on(Backend::Processes) {
                    Ok(p) => p,
                    Err(e) => {
                        eprintln!("echolab-up: {e}");
                        return ExitCode::FAILURE;
                    }
                };
                None
            }
            Err(reason) => {
                eprintln!("echolab-up: {reason}");
                return ExitCode::FAILURE;
            }
        },
    };
    let hosting = match (lab, engine) {
        (Some(lab), _) => match docker::lab::LabEngines::connect(&lab).await {
            Ok(engines) => Hosting::Lab(Box::new((lab, engines))),
            Err(e) => {
                eprintln!("echolab-up: {e}; nothing was created");
                return ExitCode::FAILURE;
            }
        },
        (None, Some(e)) => Hosting::Docker(e),
        (None, None) => Hosting::Local,
    };
    if let Some(queue) = &lab_plan.queue {
        // From here on the profile is the one the link gets: its limits sized for the
        // experiment (both backends and the manifest's profile read them from it).
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
    let created = echolab_core::utc_now_rfc3339();
    let run_id = plan::new_run_id(&created);
    let recorded_profile = echolab_core::profile::RecordedProfile {
        profile: inputs.profile.clone(),
        path: inputs.profile_path.display().to_string(),
    };
    let mut recorded_inputs = BTreeMap::new();
    recorded_inputs.insert(
        "profile".to_string(),
        inputs.profile_path.display().to_string(),
    );
    recorded_inputs.insert(
        "profile_digest".to_string(),
        file_digest(&inputs.profile_path),
    );
    recorded_inputs.insert(
        "experiment".to_string(),
        inputs.experiment_path.display().to_string(),
    );
    recorded_inputs.insert(
        "experiment_digest".to_string(),
        file_digest(&inputs.experiment_path),
    );
    recorded_inputs.insert("bin_dir".to_string(), inputs.bin_dir.display().to_string());
    let backend = if matches!(hosting, Hosting::Local) {
        "local"
    } else {
        "docker"
    };
    let mut manifest = echolab_core::results::Manifest::running(
        &run_id,
        argv,
        backend,
        inputs.experiment.clone(),
        recorded_profile,
        recorded_inputs,
        inputs.runs.len() as u64,
    );
    manifest.created_at = created;
    manifest.plan = Some(lab_plan.clone());
    manifest.environment = echolab_runtime::environment::capture(&inputs.root);
    let has_link = inputs.profile.topology != Topology::Loopback;
    let cpu_plan = if let Hosting::Lab(l) = &hosting {
        let (s, c) = (&l.1.server, l.1.client());
        let clients: Vec<String> =
            l.1.clients
                .iter()
                .map(|c| format!("engine {}'s ({} CPUs)", c.name, c.machine.cpus))
                .collect();
        echolab_core::results::CpuPlanRecord {
            mode: echolab_core::results::CpuPlanRecord::MACHINES.into(),
            machine_cpus: c.machine.cpus,
            note: format!(
                "server on engine {}'s machine ({} CPUs), client on {}; nothing pinned",
                s.name,
                s.machine.cpus,
                clients.join(", ")
            ),
            ..Default::default()
        }
    } else if matches!(hosting, Hosting::Docker(_)) {
        match crate::cpuplan::resolve(&args.cpu_plan, manifest.environment.cpus, has_link) {
            Ok(p) => p,
            Err(e) => {
                eprintln!("echolab-up: {e}");
                return ExitCode::from(EXIT_USAGE);
            }
        }
    } else {
        echolab_core::results::CpuPlanRecord {
            mode: "shared".into(),
            machine_cpus: manifest.environment.cpus,
            note: "local backend: processes on this machine, not pinned".into(),
            ..Default::default()
        }
    };
    manifest.cpu_plan = Some(cpu_plan);
    manifest.order = Some(echolab_core::results::OrderRecord {
        kind: inputs.order.kind().into(),
        seed: inputs.order.seed(),
        // A lab's hosts share their machines' network namespaces: no container is fresh.
        fresh_hosts_per_cell: matches!(hosting, Hosting::Docker(_)) && !args.reuse_hosts,
    });
    let server_engine = match &hosting {
        Hosting::Docker(e) => Some(e),
        Hosting::Lab(l) => Some(&l.1.server.engine),
        Hosting::Local => None,
    };
    if let Some(e) = server_engine {
        manifest.environment.docker_version = format!("{} (API {})", e.version, e.api_version);
    }
    for dir in crate::results_dir::mark_abandoned(&inputs.out) {
        eprintln!(
            "echolab-up: earlier run {} was still 'running' but its launcher is gone: marked abandoned (its finished runs are kept)",
            dir.display()
        );
    }
    let mut out = match ResultsWriter::create(&inputs.out, manifest, &inputs.profile.name) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("echolab-up: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    *made = Some(out.dir.clone());
    let e = &inputs.experiment;
    let planned = if e.max_repetitions() > e.repetitions {
        format!(
            "{} runs ({} cells × {} repetitions, up to {} each until the CI is within {:.0}%)",
            inputs.runs.len(),
            e.cells().len(),
            e.repetitions,
            e.max_repetitions(),
            e.target_halfwidth() * 100.0
        )
    } else {
        format!("{} runs", inputs.runs.len())
    };
    eprintln!(
        "echolab-up: run {run_id}: {planned} of {} on {} ({backend}); results in {}",
        e.name,
        inputs.profile.name,
        out.dir.display()
    );

    let ending = {
        let work = async {
            match &hosting {
                Hosting::Docker(engine) => {
                    run_docker(engine, &args, &inputs, &run_id, &mut out).await
                }
                Hosting::Lab(lab) => {
                    run_lab(&lab.0, &lab.1, &args, &inputs, &run_id, &mut out).await
                }
                Hosting::Local => run_local(&inputs, &mut out).await,
            }
        };
        tokio::select! {
            r = work => match r { Ok(n) => Ending::Done(n), Err(e) => Ending::Failed(e) },
            sig = shutdown_signal() => Ending::Interrupted(sig),
        }
    };

    let teardown = Instant::now();
    let mut teardown_error = None;
    if args.keep && !matches!(hosting, Hosting::Local) {
        eprintln!(
            "echolab-up: --keep: run {run_id}'s containers stay up; `echolab-up --down{}` removes them",
            args.lab
                .as_ref()
                .map(|p| format!(" --lab {}", p.display()))
                .unwrap_or_default()
        );
    } else {
        // Every engine, even after one failed, all at once and each bounded: a lab run
        // leaves nothing on any machine that answers, and names what it left on one that
        // does not.
        let engines = hosting.engines(&out.manifest.hosts);
        let errors =
            crate::teardown::tear_down(engines, &run_id, &out.manifest.hosts, args.lab.as_deref())
                .await;
        if !errors.is_empty() {
            teardown_error = Some(format!("teardown: {}", errors.join("; ")));
        }
    }
    let _ = out.phase("teardown", teardown.elapsed().as_secs_f64());

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
    let error = match (error, &teardown_error) {
        (Some(e), Some(t)) => Some(format!("{e}; {t}")),
        (None, Some(t)) => Some(t.clone()),
        (e, None) => e,
    };
    let code = if teardown_error.is_some() {
        ExitCode::FAILURE
    } else {
        code
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

async fn build_image(inputs: &Inputs, prebuilt: Option<&str>) -> ExitCode {
    let engine = match docker::engine::connect().await {
        Ok(e) => e,
        Err(reason) => {
            eprintln!("echolab-up: {reason}");
            return ExitCode::FAILURE;
        }
    };
    match docker::image::ensure(
        &engine.docker,
        &inputs.bin_dir,
        &inputs.image_programs(),
        prebuilt,
    )
    .await
    {
        Ok(image) => {
            println!("{} {}", image.reference, image.id);
            eprintln!(
                "echolab-up: image {} ({}) is also tagged echolab:latest",
                image.reference, image.id
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("echolab-up: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Calibrates (unless `done` carries a calibration already made, with its seconds), stops
/// on a failed calibration, then runs every planned run. Shared by both backends.
async fn calibrate_and_run<H: Hosts>(
    hosts: &mut H,
    inputs: &Inputs,
    out: &mut ResultsWriter,
    done: Option<(CalibrationRecord, f64)>,
    skip: &dyn Fn(&Cell) -> Result<(), String>,
) -> anyhow::Result<u64> {
    let (calibration, seconds) = match done {
        Some(d) => d,
        None => {
            let t = Instant::now();
            let c = calibrate_rtt(hosts, &inputs.profile).await?;
            (c, t.elapsed().as_secs_f64())
        }
    };
    out.manifest.link.calibration = Some(calibration.clone());
    out.phase("calibration", seconds)?;
    if !calibration.passed {
        return Err(anyhow!(
            "{}",
            failure_message(&inputs.profile.name, &calibration)
        ));
    }
    check_custom_servers(hosts, &inputs.experiment).await?;
    let t = Instant::now();
    let bar = progress_bar(inputs.runs.len() as u64);
    let fresh = out
        .manifest
        .order
        .as_ref()
        .is_some_and(|o| o.fresh_hosts_per_cell);
    let exp = &inputs.experiment;
    let mut result = run_all(hosts, exp, &inputs.runs, out, &bar, skip, fresh).await;
    // Adaptive repetitions (netperf's -i max,min -I level,width): after the minimum, another
    // round for the cells whose headline interval is still wider than the target.
    for round in exp.repetitions + 1..=exp.max_repetitions() {
        let Ok(failed_so_far) = result else { break };
        // Another round for the cells whose interval is still wider than the target, and for
        // the cells of claims whose interval straddles their band's edge (a verdict that has
        // not settled).
        let mut pending = adaptive::cells_short_of_target(exp, out.runs());
        for cell in adaptive::cells_of_unsettled_claims(&out.manifest, out.runs()) {
            if !pending.contains(&cell) {
                pending.push(cell);
            }
        }
        if pending.is_empty() {
            break;
        }
        let runs = plan::round(&pending, round, inputs.order);
        out.manifest.runs_planned += runs.len() as u64;
        bar.inc_length(runs.len() as u64);
        result = run_all(hosts, exp, &runs, out, &bar, skip, fresh)
            .await
            .map(|n| n + failed_so_far);
    }
    bar.finish_and_clear();
    out.phase("cells", t.elapsed().as_secs_f64())?;
    result.map_err(|e| match e {
        RunError::Results(e) => e,
        other => anyhow!("{other}"),
    })
}

async fn run_local(inputs: &Inputs, out: &mut ResultsWriter) -> anyhow::Result<u64> {
    let t = Instant::now();
    let mut hosts = LocalHosts::new(&inputs.bin_dir)?;
    out.manifest.hosts.insert(
        "server".into(),
        serde_json::json!({ "process": inputs.bin_dir.join("echo-server").display().to_string(), "network": "this machine's loopback", "sysctls": "this machine's", "ulimits": "inherited" }),
    );
    out.manifest.hosts.insert(
        "client".into(),
        serde_json::json!({ "process": inputs.bin_dir.join("echo-bench").display().to_string(), "network": "this machine's loopback" }),
    );
    out.manifest.link = LinkRecord { backend: "none".into(), reason: "loopback profile on the local backend: client and server are processes on this machine, over 127.0.0.1".into(), ..Default::default() };
    for name in ["echo-server", "echo-bench"] {
        out.manifest.image.binaries.insert(
            name.into(),
            file_digest(&inputs.bin_dir.join(name))
                .trim_start_matches("sha256:")
                .to_string(),
        );
    }
    out.manifest.image.reference = "local processes".into();
    out.phase("topology_up", t.elapsed().as_secs_f64())?;
    calibrate_and_run(&mut hosts, inputs, out, None, &|_| Ok(())).await
}

/// What [`Confinement::new`] needs of a run.
fn run_inputs<'a>(
    args: &Args,
    inputs: &'a Inputs,
    run_id: &'a str,
    image: &'a str,
    cpus: u64,
) -> docker::confinement::RunInputs<'a> {
    docker::confinement::RunInputs {
        runs: &inputs.runs,
        experiment: &inputs.experiment,
        profile: &inputs.profile,
        allow_uring_unconfined: args.allow_uring_unconfined,
        run_id,
        image,
        cpus,
    }
}

async fn run_docker(
    engine: &docker::engine::Engine,
    args: &Args,
    inputs: &Inputs,
    run_id: &str,
    out: &mut ResultsWriter,
) -> anyhow::Result<u64> {
    let d = &engine.docker;
    let t = Instant::now();
    out.manifest.image = docker::image::ensure(
        d,
        &inputs.bin_dir,
        &inputs.image_programs(),
        args.image.as_deref(),
    )
    .await?;
    out.phase("image", t.elapsed().as_secs_f64())?;
    let image = out.manifest.image.id.clone();

    let t = Instant::now();
    let cpus = out.manifest.environment.cpus;
    let confined = Confinement::new(
        d,
        &run_inputs(args, inputs, run_id, &image, cpus),
        &mut out.manifest,
    )
    .await?;
    let privileges = confined.privileges.clone();
    let skip = confined.skip();
    match out.manifest.plan.as_ref().map(|p| p.shape) {
        Some(Shape::Loopback) => {
            let cpus = out.manifest.cpu_plan.clone().unwrap_or_default();
            let spec = docker::topology::LoopbackSpec {
                run_id: run_id.to_string(),
                image: image.clone(),
                privileges,
                server_cpus: cpus.server,
                client_cpus: cpus.client,
            };
            let (mut hosts, records) =
                docker::docker_hosts::DockerHosts::loopback(d, &spec).await?;
            confined.record_hosts(&mut out.manifest, records);
            out.manifest.link = LinkRecord {
                backend: "none".into(),
                reason: "loopback topology: the client shares the server's network namespace and targets 127.0.0.1".into(),
                ..Default::default()
            };
            out.phase("topology_up", t.elapsed().as_secs_f64())?;
            calibrate_and_run(&mut hosts, inputs, out, None, &skip).await
        }
        Some(Shape::Link) => {
            let mut up = docker::link::up(
                d,
                run_id,
                &image,
                &privileges,
                &inputs.profile,
                &out.manifest.cpu_plan.clone().unwrap_or_default(),
            )
            .await?;
            confined.record_hosts(&mut out.manifest, up.records.clone());
            out.manifest.link = up.link.clone();
            out.phase("topology_up", t.elapsed().as_secs_f64())?;
            let t = Instant::now();
            let calibration = up.calibrate(d).await?;
            let elapsed = t.elapsed().as_secs_f64();
            calibrate_and_run(
                &mut up.hosts,
                inputs,
                out,
                Some((calibration, elapsed)),
                &skip,
            )
            .await
        }
        other => Err(anyhow!(
            "internal: the Docker backend on one engine was handed a plan of shape {other:?}"
        )),
    }
}

/// A lab run (`--lab`): the image on every engine, the server host on the server's machine
/// and the client host on the client's ([`docker::lab`]), the real path calibrated, then
/// every planned run.
async fn run_lab(
    lab: &echolab_core::lab_file::Lab,
    engines: &docker::lab::LabEngines,
    args: &Args,
    inputs: &Inputs,
    run_id: &str,
    out: &mut ResultsWriter,
) -> anyhow::Result<u64> {
    let t = Instant::now();
    let (image, per_engine) = docker::lab::ensure_image(
        engines,
        &inputs.bin_dir,
        &inputs.image_programs(),
        args.image.as_deref(),
    )
    .await?;
    out.manifest.image = image;
    out.phase("image", t.elapsed().as_secs_f64())?;
    let image = out.manifest.image.id.clone();

    let t = Instant::now();
    let server = &engines.server;
    let cpus = server.machine.cpus;
    let what = run_inputs(args, inputs, run_id, &image, cpus);
    let confined = Confinement::new(&server.engine.docker, &what, &mut out.manifest).await?;
    let mut up = docker::lab::up(
        engines,
        lab,
        run_id,
        &image,
        &confined.privileges,
        &inputs.profile,
    )
    .await?;
    confined.record_hosts(&mut out.manifest, up.records.clone());
    out.manifest.engines = up.engine_records(engines, lab, &per_engine).await;
    out.manifest.link = up.link.clone();
    out.phase("topology_up", t.elapsed().as_secs_f64())?;
    let t = Instant::now();
    let calibration = up.calibrate(engines).await.map_err(|e| {
        anyhow!(
            "calibration from {} to the server at {} (engines.{}.address in {}): {e:#}",
            if engines.clients.len() > 1 {
                "the client machines"
            } else {
                "the client's machine"
            },
            lab.server_address(),
            server.name,
            lab.path.display()
        )
    })?;
    let elapsed = t.elapsed().as_secs_f64();
    let skip = confined.skip();
    calibrate_and_run(
        &mut up.hosts,
        inputs,
        out,
        Some((calibration, elapsed)),
        &skip,
    )
    .await
}
