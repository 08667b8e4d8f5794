//! What the report does with directories that are not what a complete run leaves: not a
//! results directory, a damaged run file, an old manifest, and `--stdout` (which writes
//! nothing).

mod common;

use std::process::Command;

use echolab_core::results::{RunStatus, MANIFEST_FILE};

use common::*;

#[test]
fn a_directory_that_is_not_a_results_directory_fails_clearly() {
    let tmp = temp_dir("empty");
    let err = echolab_report::render(tmp.path()).unwrap_err();
    assert_eq!(err.exit_code(), 2);
    assert!(
        err.to_string()
            .contains("is not an echolab results directory (no manifest.yaml)"),
        "{err}"
    );
    assert!(!tmp.path().join("report.md").exists(), "nothing is written");

    let bin = env!("CARGO_BIN_EXE_echolab-report");
    let out = Command::new(bin).arg(tmp.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.lines().count(),
        1,
        "one line, no backtrace: {stderr}"
    );
    assert!(
        stderr.starts_with("echolab-report: ")
            && stderr.contains(&tmp.path().display().to_string()),
        "{stderr}"
    );

    let missing = tmp.path().join("does-not-exist");
    let out = Command::new(bin).arg(&missing).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not exist"));
    let file = tmp.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let out = Command::new(bin).arg(&file).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a directory"));

    // A broken manifest names the file.
    std::fs::write(tmp.path().join(MANIFEST_FILE), "schema: [unclosed").unwrap();
    let out = Command::new(bin).arg(tmp.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("manifest.yaml"));

    let help = Command::new(bin).arg("--help").output().unwrap();
    assert!(help.status.success() && String::from_utf8_lossy(&help.stdout).contains("Example:"));
}

#[test]
fn a_damaged_run_file_is_named_and_left_out_not_fatal() {
    let tmp = temp_dir("damaged");
    results_dir(tmp.path(), RunStatus::Complete, |_, _| true, |_, _| None);
    let runs = tmp.path().join("runs");
    let mut files: Vec<_> = std::fs::read_dir(&runs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let victim = files[0].clone();
    std::fs::write(&victim, "{broken").unwrap();
    let summary = echolab_report::render(tmp.path()).unwrap();
    assert!(!summary.complete, "a left-out run makes the report partial");
    assert_eq!(summary.counts.missing, 1, "{:?}", summary.counts);
    let md = std::fs::read_to_string(tmp.path().join("report.md")).unwrap();
    let name = victim.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        md.contains("Unreadable run files") && md.contains(&name),
        "{md}"
    );
}

#[test]
fn an_old_manifest_without_claim_kinds_or_new_keys_still_renders() {
    let tmp = temp_dir("old");
    results_dir(tmp.path(), RunStatus::Complete, |_, _| true, |_, _| None);
    let path = tmp.path().join(MANIFEST_FILE);
    let text = std::fs::read_to_string(&path).unwrap();
    // Manifests written before this change had no kind, tolerance, setup or max_repetitions.
    let old: String = text
        .lines()
        .filter(|l| {
            !l.trim_start().starts_with("kind:") && !l.trim_start().starts_with("tolerance:")
        })
        .map(|l| format!("{l}\n"))
        .collect();
    assert_ne!(old, text);
    std::fs::write(&path, old).unwrap();
    let summary = echolab_report::render(tmp.path()).unwrap();
    let md = std::fs::read_to_string(tmp.path().join("report.md")).unwrap();
    assert!(
        md.contains("band 1.87–2.47× (magnitude ±15%, assumed: the experiment predates claims with a stated band): **reproduced**"),
        "{md}"
    );
    assert_eq!(summary.claims.len(), 3);
}

#[test]
fn stdout_mode_prints_the_report_and_writes_nothing() {
    let tmp = temp_dir("stdout");
    results_dir(tmp.path(), RunStatus::Complete, |_, _| true, |_, _| None);
    let out = Command::new(env!("CARGO_BIN_EXE_echolab-report"))
        .arg("--stdout")
        .arg(tmp.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("# exp-test: "));
    assert!(
        !tmp.path().join("report.md").exists()
            && !tmp.path().join("summary.csv").exists()
            && !tmp.path().join("plots").exists()
    );
}
