//! Each crate keeps to its job (docs/architecture.md, "Crates": what a crate owns and what it
//! may not touch), read from the manifests and source trees: which echolab crates and which
//! outside crates it may depend on (and which only its tests may), and which paths its source
//! may not name. Every crate under `crates/` has a role here, so a new crate, or a new arrow
//! between crates that the document does not draw, fails this test until the document and
//! this table say it.

use std::path::{Path, PathBuf};

fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// What docs/architecture.md's "Crates" section lets one crate touch.
struct Role {
    krate: &'static str,
    /// The echolab crates its `[dependencies]` may name.
    uses: &'static [&'static str],
    /// The echolab crates only its `[dev-dependencies]` may name (its tests').
    tests_use: &'static [&'static str],
    /// Outside crates it may not depend on, even in tests.
    never: &'static [&'static str],
    /// Paths its `src/` may not name outside comments (`bollard::`, `tokio::`).
    no_paths: &'static [&'static str],
    /// The document's reason, for the failure message.
    why: &'static str,
}

const ROLES: &[Role] = &[
    Role {
        krate: "echolab-core",
        uses: &[],
        tests_use: &[],
        never: &["tokio", "bollard", "clap_complete"],
        no_paths: &[
            "tokio::",
            "bollard::",
            "echolab_netem",
            "echolab_runtime",
            "echolab_report",
            "echolab_up",
        ],
        why: "core is the shared vocabulary: no async runtime, no Docker, no other echolab crate",
    },
    Role {
        krate: "echo-server",
        uses: &["echolab-core"],
        tests_use: &["echolab-testkit"],
        never: &["bollard"],
        no_paths: &[
            "bollard::",
            "echolab_netem",
            "echolab_runtime",
            "echolab_report",
            "echolab_up",
        ],
        why: "the server under test may use only core: the contracts it prints are core's types",
    },
    Role {
        krate: "echo-bench",
        uses: &["echolab-core"],
        tests_use: &["echolab-testkit"],
        never: &["bollard", "tokio"],
        no_paths: &[
            "bollard::",
            "echolab_netem",
            "echolab_runtime",
            "echolab_report",
            "echolab_up",
        ],
        why: "the load generator may use only core: the contracts it prints are core's types",
    },
    Role {
        krate: "echolab-netem",
        uses: &["echolab-core"],
        tests_use: &["echolab-netem", "echolab-testkit"],
        never: &["bollard", "tokio"],
        no_paths: &[
            "bollard::",
            "echolab_runtime",
            "echolab_report",
            "echolab_up",
        ],
        why: "the link knows nothing of containers or experiments",
    },
    Role {
        krate: "echolab-runtime",
        uses: &["echolab-core"],
        tests_use: &["echolab-testkit"],
        never: &["clap", "indicatif", "echolab-report", "echolab-up"],
        no_paths: &[
            "clap::",
            "echolab_report",
            "echolab_up",
            "echolab_netem::",
            "Manifest",
        ],
        why: "the runtime deploys hosts and returns records: no report, no verdicts, no \
              command-line parsing, no writing of the manifest (a deploy hands typed records \
              to the launcher); the contracts it reads back (the link's counters) are core's",
    },
    Role {
        krate: "echolab-report",
        uses: &["echolab-core"],
        tests_use: &["echolab-testkit"],
        never: &["bollard", "tokio"],
        no_paths: &[
            "bollard::",
            "tokio::",
            "echolab_runtime",
            "echolab_netem",
            "echolab_up",
        ],
        why: "the report reads a results directory and nothing else",
    },
    Role {
        krate: "echolab-up",
        uses: &["echolab-core", "echolab-report", "echolab-runtime"],
        tests_use: &[
            "echolab-netem",
            "echo-server",
            "echo-bench",
            "echolab-testkit",
        ],
        never: &[],
        no_paths: &["bollard::"],
        why: "the launcher may not call the Docker API itself: every engine call goes through \
              echolab-runtime (its tests may, to check what a run left)",
    },
    Role {
        krate: "echolab-testkit",
        uses: &["echolab-core"],
        tests_use: &[],
        never: &["bollard", "tokio"],
        no_paths: &["echolab_runtime", "echolab_up", "echolab_report"],
        why: "test support: binaries, servers, fixtures; only tests depend on it",
    },
];

/// The dependency names of one `[section]` of a manifest (`dependencies`, `dev-dependencies`).
fn section_in(manifest: &str, section: &str) -> Vec<String> {
    let header = format!("[{section}]");
    let mut in_section = false;
    let mut names = Vec::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_section = line == header;
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

fn manifest(krate: &str) -> String {
    let path = crates_dir().join(krate).join("Cargo.toml");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"))
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

/// `(line number, line)` of the lines of `text` that name `path` outside a comment.
fn naming(text: &str, path: &str) -> Vec<(usize, String)> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| {
            let code = l.split("//").next().unwrap_or("");
            code.contains(path)
        })
        .map(|(i, l)| (i + 1, l.trim().to_string()))
        .collect()
}

fn is_echolab(name: &str) -> bool {
    name.starts_with("echolab-") || name.starts_with("echo-")
}

#[test]
fn every_crate_has_a_role() {
    let mut on_disk: Vec<String> = std::fs::read_dir(crates_dir())
        .unwrap()
        .filter_map(|e| {
            let e = e.ok()?;
            e.path()
                .join("Cargo.toml")
                .exists()
                .then(|| e.file_name().to_string_lossy().to_string())
        })
        .collect();
    on_disk.sort();
    let mut roles: Vec<String> = ROLES.iter().map(|r| r.krate.to_string()).collect();
    roles.sort();
    assert_eq!(
        on_disk, roles,
        "each crate under crates/ has one role (docs/architecture.md, \"Crates\")"
    );
}

#[test]
fn each_crate_depends_only_on_what_its_role_allows() {
    for r in ROLES {
        let text = manifest(r.krate);
        let deps = section_in(&text, "dependencies");
        let dev = section_in(&text, "dev-dependencies");
        assert!(!deps.is_empty(), "{}: no [dependencies] read", r.krate);
        for d in deps.iter().filter(|d| is_echolab(d)) {
            assert!(
                r.uses.contains(&d.as_str()),
                "{} depends on {d}, which its role does not allow ({})",
                r.krate,
                r.why
            );
        }
        for d in dev.iter().filter(|d| is_echolab(d)) {
            assert!(
                r.uses.contains(&d.as_str()) || r.tests_use.contains(&d.as_str()),
                "{}'s tests depend on {d}, which its role does not allow ({})",
                r.krate,
                r.why
            );
        }
        for d in deps.iter().chain(&dev) {
            assert!(
                !r.never.contains(&d.as_str()),
                "{} depends on {d}: {}",
                r.krate,
                r.why
            );
        }
        // Only tests depend on the test kit.
        assert!(
            !deps.iter().any(|d| d == "echolab-testkit"),
            "{} depends on echolab-testkit outside its tests",
            r.krate
        );
    }
}

#[test]
fn no_crate_names_what_its_role_forbids() {
    for r in ROLES {
        let src = crates_dir().join(r.krate).join("src");
        for file in sources(&src) {
            let text = std::fs::read_to_string(&file).unwrap();
            let rel = file
                .strip_prefix(crates_dir())
                .unwrap()
                .display()
                .to_string();
            for path in r.no_paths {
                let hits = naming(&text, path);
                assert!(hits.is_empty(), "{rel} names {path} at {hits:?}: {}", r.why);
            }
        }
    }
}

#[test]
fn the_launcher_has_no_docker_module_of_its_own() {
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
    }
}

#[test]
fn the_readers_see_only_their_section_and_code_outside_comments() {
    let text = "[package]\nname = \"x\"\n[dependencies]\nfoo.workspace = true\nbar = \"1\"\n# baz = \"1\"\n[dev-dependencies]\nqux = \"1\"\n";
    assert_eq!(section_in(text, "dependencies"), ["foo", "bar"]);
    assert_eq!(section_in(text, "dev-dependencies"), ["qux"]);
    let src =
        "//! see `bollard::Docker`\nuse bollard::Docker; // the API\nlet x = 1; // bollard::x\n";
    assert_eq!(
        naming(src, "bollard::"),
        [(2, "use bollard::Docker; // the API".to_string())]
    );
}
