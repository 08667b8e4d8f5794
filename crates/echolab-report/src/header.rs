//! The report's header: what the numbers are (experiment, profile, link and its calibration,
//! machine, image, git revision, dates) and whether the directory is complete.

use echolab_core::launcher::{LauncherId, Liveness};
use echolab_core::results::{Manifest, RunStatus};

use crate::dataset::Counts;
use crate::format::{self, Table};

/// Whether every planned run is there and usable.
pub fn is_complete(manifest: &Manifest, counts: &Counts) -> bool {
    manifest.status == RunStatus::Complete && counts.missing == 0 && counts.failed == 0
}

fn or_unknown(s: &str) -> &str {
    if s.trim().is_empty() {
        "unknown"
    } else {
        s
    }
}

/// The run status as the header says it. A manifest that still says `running` is checked
/// against its launcher (`live` judges it): one whose launcher is gone is shown as
/// abandoned, so a run killed with SIGKILL does not read as still going.
pub fn status_text(manifest: &Manifest, live: impl Fn(&LauncherId) -> Liveness) -> String {
    let word = manifest.status.word().to_string();
    match (&manifest.status, &manifest.launcher) {
        (RunStatus::Running, Some(id)) => match live(id) {
            Liveness::Gone => {
                format!("abandoned: the manifest says running, but its launcher ({id}) is gone")
            }
            Liveness::Alive => format!("running: its launcher ({id}) is still going"),
            Liveness::Unknown(why) => format!("running, as far as can be told ({why})"),
        },
        _ => word,
    }
}

/// The report's first lines: the title (the experiment's name and question) and one line
/// saying what was run (whether complete, runs usable of planned, the profile and its link,
/// when), so that the verdicts can follow at once; the details are [`render`]'s.
pub fn opening(manifest: &Manifest, counts: &Counts) -> String {
    let e = &manifest.experiment;
    let completeness = if is_complete(manifest, counts) {
        "Complete"
    } else {
        "**Partial**"
    };
    let reps = if e.is_adaptive() {
        format!("{}–{} repetitions", e.repetitions, e.max_repetitions())
    } else {
        format!("{} repetitions", e.repetitions)
    };
    let link = if manifest.link.backend.is_empty() || manifest.link.backend == "none" {
        String::new()
    } else {
        format!(", link by {}", manifest.link.backend)
    };
    format!(
        "# {}: {}\n\n{completeness} run: {} usable of {} runs ({} cells × {reps}) on profile {}{link}, {} (UTC); details under [The run](#the-run).\n\n",
        e.name,
        e.question,
        counts.ok,
        counts.planned,
        e.cells().len(),
        manifest.profile.profile.name.as_str(),
        manifest.created_at,
    )
}

/// The run's details in Markdown, under "## The run": status, runs, profile, backends, CPU plan,
/// order, engines, machine, image, revision, date, command, seed, then the calibration.
pub fn render(manifest: &Manifest, counts: &Counts) -> String {
    let e = &manifest.experiment;
    let env = &manifest.environment;
    let status = status_text(manifest, LauncherId::liveness);
    let completeness = if is_complete(manifest, counts) {
        "complete"
    } else {
        "**partial**"
    };
    let mut out = String::from("## The run\n\n");
    let mut t = Table::new(["What", "Value"]);
    t.row([
        "Status".to_string(),
        format!("{completeness} (run status: {status})"),
    ]);
    t.row([
        "Runs".to_string(),
        format!(
            "{} usable of {} planned ({} cells × {}); {} failed, {} missing; manifest says {} done",
            counts.ok,
            counts.planned,
            e.cells().len(),
            if e.is_adaptive() {
                format!(
                    "{}–{} repetitions, adaptive, target half-width {}",
                    e.repetitions,
                    e.max_repetitions(),
                    format::pct(e.target_halfwidth())
                )
            } else {
                format!("{} repetitions", e.repetitions)
            },
            counts.failed,
            counts.missing,
            manifest.runs_done
        ),
    ]);
    if let Some(err) = &manifest.error {
        t.row(["Run error".to_string(), err.clone()]);
    }
    t.row([
        "Profile".to_string(),
        format!(
            "{} ({} topology): {}",
            manifest.profile.profile.name.as_str(),
            manifest.profile.profile.topology.name(),
            manifest.profile.profile.description.as_str()
        ),
    ]);
    let link = &manifest.link;
    let reason = if link.reason.is_empty() {
        String::new()
    } else {
        format!(" ({})", link.reason)
    };
    t.row([
        "Link backend".to_string(),
        format!("{}{reason}", or_unknown(&link.backend)),
    ]);
    t.row([
        "Host backend".to_string(),
        or_unknown(&manifest.backend).to_string(),
    ]);
    if let Some(p) = &manifest.cpu_plan {
        let role =
            |name: &str, cpus: &Option<String>| cpus.as_ref().map(|c| format!("{name} on CPU {c}"));
        let roles: Vec<String> = [
            role("server", &p.server),
            role("client", &p.client),
            role("link", &p.link),
        ]
        .into_iter()
        .flatten()
        .collect();
        let roles = if roles.is_empty() {
            "not pinned".to_string()
        } else {
            roles.join(", ")
        };
        t.row([
            "CPU plan".to_string(),
            format!("{} ({}): {}", roles, p.mode, p.note),
        ]);
    }
    if let Some(o) = &manifest.order {
        let order = match o.kind.as_str() {
            "shuffled" => format!(
                "each repetition round shuffled (seed {}, `--order-seed {}` repeats it)",
                o.seed, o.seed
            ),
            other => format!("{other} (matrix order in every round)"),
        };
        let hosts = if o.fresh_hosts_per_cell {
            "fresh client and server hosts for every cell"
        } else if !manifest.engines.is_empty() {
            "one client and one server host for all cells, on their machines (a lab run makes no host again per cell, so a cell inherits the TIME_WAIT sockets of the cells before it)"
        } else {
            "one client and one server host for all cells"
        };
        t.row(["Cell order".to_string(), format!("{order}; {hosts}")]);
    }
    for (name, m) in &manifest.engines {
        t.row([
            format!("Engine {name} ({})", m.roles.join(", ")),
            format!(
                "{} at {}: {}, kernel {}, {} ({} logical CPUs, {:.1} GiB memory), Docker {}, image {} ({})",
                or_unknown(&m.hostname),
                m.endpoint,
                if m.address.is_empty() { "no address given".to_string() } else { format!("reached at {}", m.address) },
                or_unknown(&m.kernel),
                or_unknown(&m.cpu_model),
                m.cpus,
                m.mem_bytes as f64 / (1u64 << 30) as f64,
                or_unknown(&m.docker_version),
                or_unknown(&m.image_id),
                if m.image_loaded { "loaded this run" } else { "already there" },
            ),
        ]);
    }
    let launcher = if manifest.engines.is_empty() {
        ""
    } else {
        " (launcher's machine)"
    };
    t.row([
        format!("Kernel{launcher}"),
        or_unknown(&env.kernel).to_string(),
    ]);
    t.row([
        format!("CPU{launcher}"),
        format!(
            "{} ({} logical CPUs, {:.1} GiB memory)",
            or_unknown(&env.cpu_model),
            env.cpus,
            env.mem_bytes as f64 / (1u64 << 30) as f64
        ),
    ]);
    t.row([
        format!("TCP congestion control{launcher}"),
        or_unknown(&env.tcp_congestion_control).to_string(),
    ]);
    t.row([
        "Docker".to_string(),
        or_unknown(&env.docker_version).to_string(),
    ]);
    t.row([
        "Image".to_string(),
        format!(
            "{} (id {})",
            or_unknown(&manifest.image.reference),
            or_unknown(&manifest.image.id)
        ),
    ]);
    t.row([
        "Git revision".to_string(),
        or_unknown(&env.git_rev).to_string(),
    ]);
    t.row([
        "echolab version".to_string(),
        or_unknown(&env.echolab_version).to_string(),
    ]);
    let finished = manifest.finished_at.as_deref().unwrap_or("not finished");
    t.row([
        "Date".to_string(),
        format!("{} → {finished} (UTC)", manifest.created_at),
    ]);
    t.row([
        "Command".to_string(),
        format!(
            "`{}`",
            std::iter::once("echolab-up")
                .chain(manifest.args.iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join(" ")
        ),
    ]);
    t.row(["Run id".to_string(), manifest.run_id.clone()]);
    if !e.reference.source.is_empty() {
        let env_text = if e.reference.environment.is_empty() {
            String::new()
        } else {
            format!("; measured on {}", e.reference.environment)
        };
        let title = if e.reference.title.is_empty() {
            String::new()
        } else {
            format!("{}: ", e.reference.title)
        };
        t.row([
            "Seed".to_string(),
            format!("{title}{}{env_text}", e.reference.source),
        ]);
    }
    out.push_str(&t.to_markdown());
    out.push('\n');
    out.push_str(&calibration(manifest));
    out
}

/// The calibration: passed or not, why, and each figure measured vs expected.
fn calibration(manifest: &Manifest) -> String {
    let Some(cal) = &manifest.link.calibration else {
        return "Calibration: none recorded.\n\n".into();
    };
    let verdict = if cal.passed { "passed" } else { "**FAILED**" };
    let mut out = format!(
        "Calibration {verdict}{}\n\n",
        if cal.reason.is_empty() {
            String::new()
        } else {
            format!(": {}", cal.reason)
        }
    );
    if !cal.checks.is_empty() {
        let mut t = Table::new(["Check", "Measured", "Accepted", "Result"]);
        for c in &cal.checks {
            t.row([
                c.name.clone(),
                format!("{} {}", format::num(c.measured), c.unit),
                format!("{}–{} {}", format::num(c.low), format::num(c.high), c.unit),
                if c.pass {
                    "pass".to_string()
                } else {
                    "**FAIL**".to_string()
                },
            ]);
        }
        out.push_str(&t.to_markdown());
        out.push('\n');
    }
    // Figures measured beside the checks (minimum RTT, probe counts), with the profile's
    // nominal value where it names the same figure.
    if !cal.measured.is_empty() {
        let figures: Vec<String> = cal
            .measured
            .iter()
            .map(|(k, m)| match cal.expected.get(k) {
                Some(x) => format!("{k} {} (nominal {})", format::num(*m), format::num(*x)),
                None => format!("{k} {}", format::num(*m)),
            })
            .collect();
        out.push_str(&format!("Measured: {}.\n\n", figures.join(", ")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(status: &str, launcher: Option<&str>) -> Manifest {
        let launcher = launcher
            .map(|l| format!("launcher: {{{l}}}\n"))
            .unwrap_or_default();
        serde_yaml::from_str(&format!(
            "schema: x\nrun_id: r\nstatus: {status}\n{launcher}created_at: t\nargs: []\nbackend: docker\nexperiment: {{name: t, question: q, repetitions: 1, matrix: [{{servers: [epoll-et], modes: [long], conns: [2], rounds: [3]}}]}}\nprofile: {{name: loopback, description: d, source: s, topology: loopback, expected: {{rtt: {{value: 0s, minus: 0s, plus: 1ms}}}}}}\ninputs: {{}}\nenvironment: {{kernel: k, cpu_model: c, cpus: 2, mem_bytes: 1, git_rev: g, echolab_version: v}}\nruns_planned: 4\nruns_done: 1\n"
        ))
        .unwrap()
    }

    const LAUNCHER: &str = "host: lab1, boot_id: b, pid: 77, start_ticks: 5";

    #[test]
    fn a_running_manifest_whose_launcher_is_gone_reads_as_abandoned() {
        let m = manifest("running", Some(LAUNCHER));
        assert_eq!(
            status_text(&m, |_| Liveness::Gone),
            "abandoned: the manifest says running, but its launcher (pid 77 on lab1) is gone"
        );
        assert_eq!(
            status_text(&m, |_| Liveness::Alive),
            "running: its launcher (pid 77 on lab1) is still going"
        );
        // Ended runs and manifests older than the launcher field are shown as they say.
        let never = |_: &LauncherId| -> Liveness { panic!("an ended run is not judged") };
        assert_eq!(
            status_text(&manifest("complete", Some(LAUNCHER)), never),
            "complete"
        );
        assert_eq!(status_text(&manifest("running", None), never), "running");
        assert_eq!(
            status_text(&manifest("abandoned", Some(LAUNCHER)), never),
            "abandoned"
        );
    }

    #[test]
    fn a_lab_run_names_each_engine_and_its_machine() {
        let mut m = manifest("complete", None);
        let plain = render(&m, &Counts::default());
        assert!(
            plain.contains("| Kernel |") && !plain.contains("Engine"),
            "{plain}"
        );
        m.engines.insert(
            "b".into(),
            echolab_core::results::EngineRecord {
                endpoint: "tcp://10.0.0.2:2376".into(),
                roles: vec!["client".into()],
                address: "10.0.0.2".into(),
                docker_version: "28.2.2 (API 1.50)".into(),
                hostname: "lab2".into(),
                kernel: "6.1.0".into(),
                cpu_model: "Xeon".into(),
                cpus: 8,
                mem_bytes: 16 << 30,
                image_id: "sha256:ab".into(),
                image_loaded: true,
            },
        );
        let lab = render(&m, &Counts::default());
        assert!(
            lab.contains("| Engine b (client) | lab2 at tcp://10.0.0.2:2376: reached at 10.0.0.2, kernel 6.1.0, Xeon (8 logical CPUs, 16.0 GiB memory), Docker 28.2.2 (API 1.50), image sha256:ab (loaded this run) |"),
            "{lab}"
        );
        assert!(lab.contains("| Kernel (launcher's machine) | k |"), "{lab}");
    }
}
