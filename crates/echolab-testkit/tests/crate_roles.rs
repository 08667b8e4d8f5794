//! Each crate keeps to its job (docs/architecture.md, "Crates"), read from the manifests and
//! source trees: the launcher orchestrates and holds no runtime of its own; the runtime
//! deploys hosts and knows nothing of verdicts or the launcher; core sits at the bottom.

use std::path::{Path, PathBuf};

fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The names of `krate`'s `[dependencies]` (not dev- or build-dependencies).
fn dependencies(krate: &str) -> Vec<String> {
    let path = crates_dir().join(krate).join("Cargo.toml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    dependencies_in(&text)
}

fn dependencies_in(manifest: &str) -> Vec<String> {
    let mut in_section = false;
    let mut names = Vec::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_section = line == "[dependencies]";
            continue;
        }
        if !in_section || line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(name) = line.split(['=', '.', ' ']).next() {
            names.push(name.to_string());
        }
    }
    names
}

/// Every `.rs` file under `dir`, recursively.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(sources(&path));
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
    out
}

fn assert_no_dependency(krate: &str, forbidden: &[&str], why: &str) {
    let deps = dependencies(krate);
    assert!(!deps.is_empty(), "{krate}: no [dependencies] read");
    for f in forbidden {
        assert!(
            !deps.iter().any(|d| d == f),
            "{krate} depends on {f}: {why}"
        );
    }
}

#[test]
fn the_launcher_holds_no_runtime_of_its_own() {
    assert_no_dependency(
        "echolab-up",
        &["bollard"],
        "the Docker API is echolab-runtime's; the launcher keeps the stages",
    );
    let src = crates_dir().join("echolab-up/src");
    for file in sources(&src) {
        let rel = file
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .to_string();
        assert!(
            !rel.starts_with("docker"),
            "echolab-up/src/{rel}: the Docker backend lives in echolab-runtime"
        );
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(
            !text.contains("bollard::"),
            "echolab-up/src/{rel} calls the Docker API directly"
        );
    }
}

#[test]
fn the_runtime_knows_nothing_of_verdicts_or_the_launcher() {
    assert_no_dependency(
        "echolab-runtime",
        &["echolab-report", "echolab-up", "clap", "indicatif"],
        "the runtime deploys hosts and returns records; what they mean is the launcher's and the report's",
    );
}

#[test]
fn core_stays_at_the_bottom() {
    assert_no_dependency(
        "echolab-core",
        &[
            "echolab-netem",
            "echolab-report",
            "echolab-runtime",
            "echolab-up",
            "tokio",
            "bollard",
        ],
        "core is the shared vocabulary: types, parsers and rules, no I/O runtime",
    );
}

#[test]
fn the_manifest_reader_sees_only_the_dependencies_section() {
    let text = "[package]\nname = \"x\"\n[dependencies]\nfoo.workspace = true\nbar = \"1\"\n# baz = \"1\"\n[dev-dependencies]\nqux = \"1\"\n";
    assert_eq!(dependencies_in(text), ["foo", "bar"]);
}
