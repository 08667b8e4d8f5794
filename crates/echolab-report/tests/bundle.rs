//! `echolab-report bundle`: a run's replication bundle is written, verified and extracted into
//! a fresh directory; an altered, truncated, foreign or escaping archive is refused in one
//! line, exit 2, with nothing extracted (and nothing written outside the fresh directory).

mod common;

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{closed_loop_runs, manifest, shipped, temp_dir, write_dir};
use echolab_core::results::RunStatus;
use echolab_report::bundle::{self, BundleOptions, SUMS};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A finished exp31 run in `dir`.
fn run(dir: &Path) {
    let e = shipped("exp31");
    let runs = closed_loop_runs(
        &e,
        |_| vec![50_000.0, 51_000.0, 52_000.0],
        |c, q| c.conns as f64 / q * 1e6,
    );
    let mut m = manifest(e, RunStatus::Complete, 12);
    m.environment.git_rev = "not-a-revision".into();
    write_dir(dir, &m, &runs);
}

/// A run and its bundle under `tmp`.
fn bundled(tmp: &Path) -> (PathBuf, PathBuf) {
    let dir = tmp.join("run");
    run(&dir);
    let out = tmp.join("run.tar.gz");
    let opts = BundleOptions {
        root: root(),
        with_image: false,
    };
    bundle::write(&dir, &out, &opts).unwrap();
    (dir, out)
}

/// Every member of the archive at `path`, as (name bytes, entry type, content).
fn members(path: &Path) -> Vec<(Vec<u8>, tar::EntryType, Vec<u8>)> {
    let f = std::fs::File::open(path).unwrap();
    let mut a = tar::Archive::new(flate2::read::GzDecoder::new(f));
    a.entries()
        .unwrap()
        .map(|e| {
            let mut e = e.unwrap();
            let name = e.path_bytes().into_owned();
            let kind = e.header().entry_type();
            let mut v = Vec::new();
            e.read_to_end(&mut v).unwrap();
            (name, kind, v)
        })
        .collect()
}

/// Writes `members` as a tar.gz at `path`, each name put into the header as given (the tar
/// crate's own path setters refuse `..`, which is what these archives are made to carry).
fn write_raw(path: &Path, members: &[(Vec<u8>, tar::EntryType, Vec<u8>)]) {
    let f = std::fs::File::create(path).unwrap();
    let mut b = tar::Builder::new(flate2::write::GzEncoder::new(
        f,
        flate2::Compression::default(),
    ));
    for (name, kind, data) in members {
        let mut h = tar::Header::new_old();
        h.as_old_mut().name[..name.len()].copy_from_slice(name);
        h.set_entry_type(*kind);
        if kind.is_symlink() {
            h.set_link_name("/etc/passwd").unwrap();
        }
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append(&h, data.as_slice()).unwrap();
    }
    b.into_inner().unwrap().finish().unwrap().flush().unwrap();
}

/// Opens `archive` into a fresh directory under `tmp`, expecting a refusal; returns its one
/// line, having checked that the fresh directory is gone again.
fn refused(tmp: &Path, archive: &Path) -> String {
    let fresh = tmp.join("fresh");
    let e = bundle::open(archive, &fresh).unwrap_err();
    assert_eq!(e.exit_code(), 2, "{e}");
    assert!(
        !fresh.exists(),
        "the fresh directory is removed after a refusal"
    );
    let line = e.to_string();
    assert_eq!(line.lines().count(), 1, "{line}");
    assert!(line.contains("refused"), "{line}");
    line
}

#[test]
fn a_bundle_holds_the_run_and_its_inputs_and_opens_into_a_fresh_directory() {
    let tmp = temp_dir("bundle");
    let (dir, out) = bundled(tmp.path());
    let m = members(&out);
    assert_eq!(m[0].0, SUMS.as_bytes(), "the checksum list comes first");
    let names: Vec<String> = m
        .iter()
        .map(|(n, _, _)| String::from_utf8_lossy(n).into_owned())
        .collect();
    for want in [
        "bundle.yaml",
        "results/manifest.yaml",
        "inputs/experiment.yaml",
        "inputs/profile.yaml",
        "build/Cargo.lock",
        "build/flake.lock",
        "build/rust-toolchain.toml",
        "build/git-revision",
    ] {
        assert!(names.iter().any(|n| n == want), "{want} in {names:?}");
    }
    let sums = String::from_utf8(m[0].2.clone()).unwrap();
    assert_eq!(
        sums.lines().count(),
        m.len() - 1,
        "every other member listed"
    );
    let opened = bundle::open(&out, &tmp.path().join("fresh")).unwrap();
    assert_eq!(opened.info.experiment, "exp31");
    let original = echolab_core::results::ResultsDir::load(&dir).unwrap();
    let copy = echolab_core::results::ResultsDir::load(&opened.results()).unwrap();
    assert_eq!(original.manifest, copy.manifest);
    assert_eq!(original.runs.len(), copy.runs.len());
    // The experiment as run reads back as the manifest's.
    let text = std::fs::read_to_string(opened.dir.join(bundle::EXPERIMENT)).unwrap();
    let e: echolab_core::experiment::Experiment = serde_yaml::from_str(&text).unwrap();
    assert_eq!(e, original.manifest.experiment);
    // A second open into the same directory is refused: only fresh directories.
    let again = bundle::open(&out, &opened.dir).unwrap_err().to_string();
    assert!(again.contains("already exists"), "{again}");
}

#[test]
fn one_byte_changed_anywhere_is_refused() {
    let tmp = temp_dir("bundle-byte");
    let (_, out) = bundled(tmp.path());
    let bytes = std::fs::read(&out).unwrap();
    // In the compressed stream (the gzip CRC or the deflate data catches it), and in a
    // member's content re-packed as a valid archive (the checksum list catches it).
    let mut flipped = bytes.clone();
    let i = flipped.len() / 2;
    flipped[i] ^= 0x01;
    let bad = tmp.path().join("flipped.tar.gz");
    std::fs::write(&bad, &flipped).unwrap();
    let line = refused(tmp.path(), &bad);
    assert!(
        line.contains("corrupt") || line.contains("altered"),
        "{line}"
    );
    let mut m = members(&out);
    let manifest = m
        .iter_mut()
        .find(|(n, _, _)| n == b"results/manifest.yaml")
        .unwrap();
    manifest.2[10] ^= 0x01;
    let repacked = tmp.path().join("repacked.tar.gz");
    write_raw(&repacked, &m);
    let line = refused(tmp.path(), &repacked);
    assert!(
        line.contains("\"results/manifest.yaml\" was altered"),
        "{line}"
    );
}

#[test]
fn a_truncated_bundle_is_refused() {
    let tmp = temp_dir("bundle-cut");
    let (_, out) = bundled(tmp.path());
    let bytes = std::fs::read(&out).unwrap();
    for keep in [bytes.len() - 10, bytes.len() / 2, 100] {
        let cut = tmp.path().join("cut.tar.gz");
        std::fs::write(&cut, &bytes[..keep]).unwrap();
        let line = refused(tmp.path(), &cut);
        assert!(line.contains("truncated"), "{keep}: {line}");
    }
    // Cut at a member boundary and re-packed whole: the list names what is missing.
    let mut m = members(&out);
    m.truncate(m.len() - 1);
    let short = tmp.path().join("short.tar.gz");
    write_raw(&short, &m);
    let line = refused(tmp.path(), &short);
    assert!(line.contains("is missing"), "{line}");
}

#[test]
fn members_that_escape_or_link_and_foreign_archives_are_refused() {
    let tmp = temp_dir("bundle-escape");
    let (_, out) = bundled(tmp.path());
    let m = members(&out);
    let sums = m[0].clone();
    let file = tar::EntryType::Regular;
    let cases: [(&[u8], tar::EntryType, &str); 4] = [
        (b"../escaped", file, "has a `..` component"),
        (b"results/../../escaped", file, "has a `..` component"),
        (b"/tmp/escaped-absolute", file, "has an absolute path"),
        (b"results/link", tar::EntryType::Symlink, "Symlink entry"),
    ];
    for (name, kind, why) in cases {
        let evil = tmp.path().join("evil.tar.gz");
        write_raw(&evil, &[sums.clone(), (name.to_vec(), kind, b"x".to_vec())]);
        let line = refused(tmp.path(), &evil);
        assert!(line.contains(why), "{line}");
    }
    assert!(!tmp.path().join("escaped").exists());
    // A tar.gz that is not a bundle: its first member is not the checksum list.
    let foreign = tmp.path().join("foreign.tar.gz");
    write_raw(
        &foreign,
        &[(b"README".to_vec(), file, b"hello".to_vec()), sums],
    );
    let line = refused(tmp.path(), &foreign);
    assert!(line.contains("not an echolab bundle"), "{line}");
    // Not even gzip.
    let text = tmp.path().join("text.tar.gz");
    std::fs::write(&text, "just text\n").unwrap();
    refused(tmp.path(), &text);
}

#[test]
fn the_command_writes_a_bundle_and_refuses_a_missing_run_with_exit_2() {
    let bin = echolab_testkit::workspace_bin("echolab-report");
    let tmp = temp_dir("bundle-cli");
    let dir = tmp.path().join("run");
    run(&dir);
    let out = tmp.path().join("b.tar.gz");
    let o = Command::new(&bin)
        .args(["bundle"])
        .arg(&dir)
        .arg("--out")
        .arg(&out)
        .arg("--root")
        .arg(root())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(bundle::open(&out, &tmp.path().join("x")).is_ok());
    let o = Command::new(&bin)
        .args(["bundle"])
        .arg(tmp.path().join("nothing"))
        .arg("--root")
        .arg(root())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(String::from_utf8_lossy(&o.stderr).lines().count(), 1);
}
