//! The results directory of one run, kept current on disk: the manifest is rewritten (write,
//! then atomic rename) whenever something changes, each run record is written as soon as it
//! finishes, and summary.csv is rewritten with it, so a run cut short at any point leaves a
//! readable directory whose manifest says how far it got (echolab_core::results).

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use echolab_core::lab_plan::LabPlan;
use echolab_core::results::{
    write_atomic, CpuPlanRecord, Environment, Manifest, OrderRecord, ResultsDir, RunRecord,
    RunStatus, MANIFEST_FILE, RUNS_DIR,
};
use echolab_runtime::deploy::{DeployLog, DeployRecord};

use crate::inputs::Inputs;
use crate::plan::compact_stamp;

/// A results directory being written.
pub(crate) struct ResultsWriter {
    /// The directory.
    pub dir: PathBuf,
    /// The manifest as last written.
    pub manifest: Manifest,
    runs: Vec<RunRecord>,
}

impl ResultsWriter {
    /// Creates `<base>/<stamp>-<experiment>-<profile>/runs/` and writes the first manifest.
    /// The directory is made with one mkdir(2), which fails if it exists, so two runs that
    /// start in the same second never share one: the second takes the run id's random suffix,
    /// then a counter.
    ///
    /// # Errors
    /// The directory or manifest cannot be written; the message names the path.
    pub(crate) fn create(
        base: &Path,
        manifest: Manifest,
        profile_name: &str,
    ) -> anyhow::Result<Self> {
        let name = format!(
            "{}-{}-{}",
            compact_stamp(&manifest.created_at),
            manifest.experiment.name,
            profile_name
        );
        std::fs::create_dir_all(base)
            .with_context(|| format!("cannot create {}", base.display()))?;
        let suffix = manifest.run_id.rsplit('-').next().unwrap_or("x");
        let candidates = std::iter::once(name.clone())
            .chain(std::iter::once(format!("{name}-{suffix}")))
            .chain((2..).map(|n| format!("{name}-{suffix}-{n}")));
        let mut dir = None;
        for candidate in candidates.take(1000) {
            let path = base.join(candidate);
            match std::fs::create_dir(&path) {
                Ok(()) => {
                    dir = Some(path);
                    break;
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err(e).with_context(|| format!("cannot create {}", path.display()))
                }
            }
        }
        let dir = dir.with_context(|| {
            format!(
                "{}: 1000 results directories named {name}* exist",
                base.display()
            )
        })?;
        std::fs::create_dir(dir.join(RUNS_DIR))
            .with_context(|| format!("cannot create {}", dir.join(RUNS_DIR).display()))?;
        let w = Self {
            dir,
            manifest,
            runs: Vec::new(),
        };
        w.save()?;
        Ok(w)
    }

    /// Rewrites manifest.yaml.
    ///
    /// # Errors
    /// Serialization or I/O, naming the file.
    pub(crate) fn save(&self) -> anyhow::Result<()> {
        let path = self.dir.join(MANIFEST_FILE);
        let text = serde_yaml::to_string(&self.manifest).context("serializing the manifest")?;
        write_atomic(&path, text.as_bytes())?;
        Ok(())
    }

    /// Records a phase's duration in seconds and saves.
    ///
    /// # Errors
    /// As [`ResultsWriter::save`].
    pub(crate) fn phase(&mut self, name: &str, seconds: f64) -> anyhow::Result<()> {
        self.manifest
            .timings
            .phases
            .insert(name.to_string(), seconds);
        self.save()
    }

    /// Writes `runs/<cell>_rep<N>.json`, counts it in the manifest, rewrites summary.csv and
    /// the manifest.
    ///
    /// # Errors
    /// Any write, naming the file.
    pub(crate) fn add_run(&mut self, rec: RunRecord) -> anyhow::Result<()> {
        let path = self.dir.join(RUNS_DIR).join(rec.file_name());
        let json = serde_json::to_vec_pretty(&rec).context("serializing a run record")?;
        write_atomic(&path, &json)?;
        self.runs.push(rec);
        self.manifest.runs_done = self.runs.len() as u64;
        // The report's own writer, so a run cut short has the same columns as a finished one.
        let so_far = ResultsDir {
            path: self.dir.clone(),
            manifest: self.manifest.clone(),
            runs: self.runs.clone(),
            unreadable: Vec::new(),
        };
        let csv =
            echolab_report::summary_csv::render(&echolab_report::dataset::Dataset::new(&so_far))
                .context("summary.csv")?;
        write_atomic(&self.dir.join(echolab_report::SUMMARY_FILE), csv.as_bytes())?;
        self.save()
    }

    /// The run records written so far.
    pub(crate) fn runs(&self) -> &[RunRecord] {
        &self.runs
    }

    /// Sets the final status, error and end time, and saves.
    ///
    /// # Errors
    /// As [`ResultsWriter::save`].
    pub(crate) fn finish(
        &mut self,
        status: RunStatus,
        error: Option<String>,
    ) -> anyhow::Result<()> {
        self.manifest.status = status;
        self.manifest.error = error;
        self.manifest.finished_at = Some(echolab_core::utc_now_rfc3339());
        self.save()
    }
}

/// What the manifest of a starting run records besides its inputs.
pub(crate) struct Start {
    /// The command line as given.
    pub(crate) argv: Vec<String>,
    /// `local` or `docker`.
    pub(crate) backend: &'static str,
    /// The plan every rule joining two inputs settled.
    pub(crate) plan: LabPlan,
    /// The machine and software the run happens on.
    pub(crate) environment: Environment,
    /// Which CPUs each role gets.
    pub(crate) cpu_plan: CpuPlanRecord,
    /// Whether each cell gets fresh hosts.
    pub(crate) fresh_hosts_per_cell: bool,
    /// The server's engine (`20.10.24 (API 1.41)`), for containers.
    pub(crate) engine_version: Option<String>,
}

/// The manifest of a run starting now on `inputs`: a new run id, status `running`.
pub(crate) fn starting_manifest(inputs: &Inputs, start: Start) -> Manifest {
    let created = echolab_core::utc_now_rfc3339();
    let run_id = crate::plan::new_run_id(&created);
    let recorded_profile = echolab_core::profile::RecordedProfile {
        profile: inputs.profile.clone(),
        path: inputs.profile_path.display().to_string(),
    };
    let mut manifest = Manifest::running(
        &run_id,
        start.argv,
        start.backend,
        inputs.experiment.clone(),
        recorded_profile,
        inputs.recorded(),
        inputs.runs.len() as u64,
    );
    manifest.created_at = created;
    manifest.plan = Some(start.plan);
    manifest.environment = start.environment;
    manifest.cpu_plan = Some(start.cpu_plan);
    manifest.order = Some(OrderRecord {
        kind: inputs.order.kind().into(),
        seed: inputs.order.seed(),
        fresh_hosts_per_cell: start.fresh_hosts_per_cell,
    });
    if let Some(v) = start.engine_version {
        manifest.environment.docker_version = v;
    }
    manifest
}

/// A deploy records its hosts, link, image and phases in the run's manifest as it goes.
impl DeployLog for ResultsWriter {
    fn record(&mut self, record: DeployRecord) {
        let m = &mut self.manifest;
        match record {
            DeployRecord::Image(image) => m.image = image,
            DeployRecord::Privileges(p) => m.privileges = p,
            DeployRecord::Hosts(hosts) => m.hosts.extend(hosts),
            DeployRecord::Link(link) => m.link = *link,
            DeployRecord::Engines(engines) => m.engines = engines,
        }
    }

    fn phase(&mut self, name: &str, seconds: f64) -> anyhow::Result<()> {
        ResultsWriter::phase(self, name, seconds)
    }
}

/// Marks every results directory under `base` whose manifest says `running` but whose
/// launcher is gone ([`echolab_core::launcher`]) as `abandoned`, keeping the runs it finished;
/// returns those directories. Manifests without a launcher (older ones) or whose launcher ran
/// on another host are left as they are; unreadable ones are skipped.
pub(crate) fn mark_abandoned(base: &Path) -> Vec<PathBuf> {
    mark_abandoned_with(base, |id| id.liveness())
}

/// [`mark_abandoned`] with the liveness judge given.
pub(crate) fn mark_abandoned_with(
    base: &Path,
    live: impl Fn(&echolab_core::launcher::LauncherId) -> echolab_core::launcher::Liveness,
) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(base) else {
        return Vec::new();
    };
    let mut marked = Vec::new();
    for dir in entries.flatten().map(|e| e.path()) {
        let path = dir.join(MANIFEST_FILE);
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        // Most directories are finished: skip parsing them.
        if !text.lines().any(|l| l == "status: running") {
            continue;
        }
        let Ok(mut m) = serde_yaml::from_str::<Manifest>(&text) else {
            continue;
        };
        let gone = m.status == RunStatus::Running
            && m.launcher
                .as_ref()
                .is_some_and(|id| live(id) == echolab_core::launcher::Liveness::Gone);
        if !gone {
            continue;
        }
        m.status = RunStatus::Abandoned;
        let launcher = m
            .launcher
            .as_ref()
            .map(|l| l.to_string())
            .unwrap_or_default();
        m.error = Some(format!(
            "abandoned: its launcher ({launcher}) was found gone at {} with {} of {} runs done",
            echolab_core::utc_now_rfc3339(),
            m.runs_done,
            m.runs_planned
        ));
        let Ok(yaml) = serde_yaml::to_string(&m) else {
            continue;
        };
        if write_atomic(&path, yaml.as_bytes()).is_ok() {
            marked.push(dir);
        }
    }
    marked.sort();
    marked
}

#[cfg(test)]
mod tests {
    use super::*;
    use echolab_core::experiment::Experiment;
    use echolab_core::results::ResultsDir;

    /// A directory under the system's temp dir, removed on drop.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(tag: &str) -> Self {
            let p = std::env::temp_dir().join(format!("echolab-up-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            Self(p)
        }

        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    pub(crate) fn manifest() -> Manifest {
        let exp = Experiment::parse(
            "name: t\nquestion: q\nrepetitions: 2\nmatrix:\n  - servers: [epoll-et]\n    modes: [long]\n    conns: [2]\n    rounds: [3]\n",
            "t.yaml",
        )
        .unwrap();
        echolab_core::results::Manifest::running(
            "run-1",
            vec![],
            "local",
            exp,
            echolab_testkit::fixtures::recorded_loopback_profile(),
            Default::default(),
            2,
        )
    }

    #[test]
    fn deploy_records_go_under_their_fields_and_older_manifests_read_without_privileges() {
        use echolab_core::results::HostPrivileges;
        // A manifest written before the field existed has no `privileges` key at all.
        let mut m = manifest();
        let old = serde_yaml::to_string(&m).unwrap();
        assert!(!old.contains("privileges"), "{old}");
        let back: Manifest = serde_yaml::from_str(&old).unwrap();
        assert!(back.privileges.is_empty());
        let server = HostPrivileges {
            memory_bytes: 268_435_456,
            ..Default::default()
        };
        let records = [
            DeployRecord::Privileges([("server".to_string(), server)].into()),
            DeployRecord::Hosts([("server".to_string(), serde_json::json!({"id": "c1"}))].into()),
            DeployRecord::Hosts([("io_uring".to_string(), serde_json::json!({"ok": true}))].into()),
        ];
        let dir = Scratch::new("records");
        let mut out = ResultsWriter::create(dir.path(), m.clone(), "loopback").unwrap();
        for r in records {
            out.record(r);
        }
        m = out.manifest.clone();
        assert_eq!(m.privileges["server"].memory_bytes, 268_435_456);
        assert_eq!(m.hosts.keys().collect::<Vec<_>>(), ["io_uring", "server"]);
        let back: Manifest = serde_yaml::from_str(&serde_yaml::to_string(&m).unwrap()).unwrap();
        assert_eq!(back, m);
    }

    #[test]
    fn the_manifest_follows_every_run() {
        let base = std::env::temp_dir().join(format!("echolab-up-results-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let m = manifest();
        let cell = m.experiment.cells()[0].clone();
        let mut w = ResultsWriter::create(&base, m, "loopback").unwrap();
        assert!(w
            .dir
            .file_name()
            .unwrap()
            .to_string_lossy()
            .ends_with("-t-loopback"));
        let rec = RunRecord {
            cell,
            repetition: 1,
            started_at: "x".into(),
            wall_s: 0.5,
            bench: None,
            server: None,
            server_pid: None,
            samples: vec![],
            settle: None,
            link: None,
            strace: None,
            error: Some("boom".into()),
        };
        w.add_run(rec).unwrap();
        let back = ResultsDir::load(&w.dir).unwrap();
        assert_eq!(
            (
                back.manifest.runs_done,
                back.manifest.runs_planned,
                back.runs.len()
            ),
            (1, 2, 1)
        );
        assert_eq!(back.manifest.status, RunStatus::Running);
        w.finish(RunStatus::Failed, Some("stopped".into())).unwrap();
        let back = ResultsDir::load(&w.dir).unwrap();
        assert_eq!(
            (back.manifest.status, back.manifest.error.as_deref()),
            (RunStatus::Failed, Some("stopped"))
        );
        let csv = std::fs::read_to_string(w.dir.join(echolab_report::SUMMARY_FILE)).unwrap();
        // The report's columns: the failed repetition 1, and repetition 2 not run.
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 3, "{csv}");
        assert!(lines[0].starts_with("run_file,status,cell_id,"), "{csv}");
        assert!(
            lines[1].starts_with("epoll-et_long_c2_r3_rep1.json,failed,")
                && lines[1].ends_with("boom"),
            "{csv}"
        );
        assert!(
            lines[2].starts_with("epoll-et_long_c2_r3_rep2.json,missing,"),
            "{csv}"
        );
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn runs_started_in_the_same_second_never_share_a_directory() {
        let base = Scratch::new("same-second");
        // Eight launchers with the same start second and the same run id suffix, at once.
        let m = manifest();
        let dirs: Vec<PathBuf> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        ResultsWriter::create(base.path(), m.clone(), "loopback")
                            .unwrap()
                            .dir
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut names: Vec<String> = dirs
            .iter()
            .map(|d| d.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        names.sort();
        let stamp = compact_stamp(&m.created_at);
        let mut expected = vec![
            format!("{stamp}-t-loopback"),
            format!("{stamp}-t-loopback-1"),
        ];
        expected.extend((2..8).map(|n| format!("{stamp}-t-loopback-1-{n}")));
        expected.sort();
        assert_eq!(names, expected);
        for d in &dirs {
            assert!(d.join(MANIFEST_FILE).is_file() && d.join(RUNS_DIR).is_dir());
        }
    }

    #[test]
    fn only_running_manifests_of_gone_launchers_are_marked_abandoned() {
        use echolab_core::launcher::{LauncherId, Liveness};
        let base = Scratch::new("abandoned");
        let launcher = |pid| LauncherId {
            host: "lab1".into(),
            boot_id: "b".into(),
            pid,
            start_ticks: 7,
        };
        // (directory, status, launcher pid): pid 1 is alive, pid 2 is gone.
        let cases = [
            ("killed", RunStatus::Running, Some(2)),
            ("live", RunStatus::Running, Some(1)),
            ("finished", RunStatus::Complete, Some(2)),
            ("old", RunStatus::Running, None),
        ];
        for (name, status, pid) in cases {
            let mut m = manifest();
            m.status = status;
            m.launcher = pid.map(launcher);
            m.runs_done = 1;
            let dir = base.path().join(name);
            std::fs::create_dir(&dir).unwrap();
            std::fs::write(dir.join(MANIFEST_FILE), serde_yaml::to_string(&m).unwrap()).unwrap();
        }
        let judge = |id: &LauncherId| {
            if id.pid == 1 {
                Liveness::Alive
            } else {
                Liveness::Gone
            }
        };
        let marked = mark_abandoned_with(base.path(), judge);
        assert_eq!(marked, vec![base.path().join("killed")]);
        let status = |name: &str| {
            let text = std::fs::read_to_string(base.path().join(name).join(MANIFEST_FILE)).unwrap();
            serde_yaml::from_str::<Manifest>(&text).unwrap()
        };
        let killed = status("killed");
        assert_eq!(killed.status, RunStatus::Abandoned);
        let why = killed.error.unwrap();
        assert!(
            why.contains("pid 2 on lab1") && why.contains("1 of 2 runs done"),
            "{why}"
        );
        assert_eq!(status("live").status, RunStatus::Running);
        assert_eq!(status("finished").status, RunStatus::Complete);
        assert_eq!(status("old").status, RunStatus::Running);
        // Marking twice changes nothing.
        assert!(mark_abandoned_with(base.path(), judge).is_empty());
    }
}
