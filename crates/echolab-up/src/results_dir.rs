//! The results directory of one run, kept current on disk: the manifest is rewritten (write,
//! then atomic rename) whenever something changes, each run record is written as soon as it
//! finishes, and summary.csv is rewritten with it, so a run cut short at any point leaves a
//! readable directory whose manifest says how far it got (echolab_core::results).

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use echolab_core::results::{
    write_atomic, Manifest, ResultsDir, RunRecord, RunStatus, MANIFEST_FILE, RUNS_DIR,
};

/// A results directory being written.
pub(crate) struct ResultsWriter {
    /// The directory.
    pub dir: PathBuf,
    /// The manifest as last written.
    pub manifest: Manifest,
    runs: Vec<RunRecord>,
}

/// `YYYYmmddTHHMMSSZ` from an RFC 3339 UTC time (`2026-11-30T01:57:37.123456Z`).
pub(crate) fn compact_stamp(rfc3339: &str) -> String {
    let secs: String = rfc3339
        .chars()
        .take(19)
        .filter(|c| *c != '-' && *c != ':')
        .collect();
    format!("{secs}Z")
}

impl ResultsWriter {
    /// Creates `<base>/<stamp>-<experiment>-<profile>/runs/` (with the run id's suffix when a
    /// directory of that name exists) and writes the first manifest.
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
        let mut dir = base.join(&name);
        if dir.exists() {
            dir = base.join(format!(
                "{name}-{}",
                manifest.run_id.rsplit('-').next().unwrap_or("x")
            ));
        }
        std::fs::create_dir_all(dir.join(RUNS_DIR))
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

#[cfg(test)]
mod tests {
    use super::*;
    use echolab_core::experiment::Experiment;
    use echolab_core::results::ResultsDir;

    pub(crate) fn manifest() -> Manifest {
        let exp = Experiment::parse(
            "name: t\nquestion: q\nrepetitions: 2\nmatrix:\n  - servers: [epoll-et]\n    modes: [long]\n    conns: [2]\n    rounds: [3]\n",
            "t.yaml",
        )
        .unwrap();
        crate::plan::new_manifest(
            "run-1",
            vec![],
            "local",
            exp,
            serde_json::json!({}),
            Default::default(),
            2,
        )
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
}
