//! A replication bundle: one `.tar.gz` per run holding everything needed to run it again and
//! to check that it was not changed on the way.
//!
//! ```text
//! SHA256SUMS              first member: `<sha256 hex>  <path>` per other member (sha256sum(1))
//! bundle.yaml             BundleInfo: schema, run id, experiment, revision, where each part came from
//! results/...             the results directory as it is (manifest.yaml, runs/*.json, report.md, ...)
//! inputs/experiment.yaml  the experiment as run (the manifest's, after --reps)
//! inputs/profile.yaml     the profile as run (the manifest's, with the link's limits in force)
//! inputs/lab.yaml         the lab file of a --lab run, when its digest still matches
//! build/Cargo.lock, build/flake.lock, build/rust-toolchain.toml, build/git-revision
//! image/lab-image.tar     `docker save` of the lab image (only with `--with-image`)
//! ```
//!
//! [`open`] verifies while it extracts, into a directory it creates itself: every member must
//! be a plain file or directory with a relative path of normal components (no `..`, no
//! absolute path, no link of any kind), listed in SHA256SUMS with a matching digest, listed
//! once; every listed file must be there. On any failure the directory is removed and the
//! error is one line naming the member and what is wrong.

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::path::{Component, Path, PathBuf};

use echolab_core::results::{Manifest, ResultsDir, MANIFEST_FILE};
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::Error;

/// Schema tag of [`BundleInfo`]; a bundle with another is refused.
pub const BUNDLE_SCHEMA: &str = "echolab.bundle/1";
/// The checksum list, the archive's first member.
pub const SUMS: &str = "SHA256SUMS";
/// The bundle's own record.
pub const INFO: &str = "bundle.yaml";
/// Where the results directory goes inside the bundle.
pub const RESULTS: &str = "results";
/// The experiment as run.
pub const EXPERIMENT: &str = "inputs/experiment.yaml";
/// The profile as run.
pub const PROFILE: &str = "inputs/profile.yaml";
/// The lab file as run (`--lab` runs only).
pub const LAB: &str = "inputs/lab.yaml";
/// The lab image, `docker save` format.
pub const IMAGE: &str = "image/lab-image.tar";
/// The build inputs copied from the checkout (or from git at the run's revision).
const BUILD_FILES: [&str; 3] = ["Cargo.lock", "flake.lock", "rust-toolchain.toml"];

/// `bundle.yaml`: what the bundle holds and where each part came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BundleInfo {
    /// [`BUNDLE_SCHEMA`].
    pub schema: String,
    /// The run's id (its manifest's `run_id`).
    pub run_id: String,
    /// The experiment's name.
    pub experiment: String,
    /// `git rev-parse HEAD` of the checkout the run was made from (the manifest's).
    pub git_revision: String,
    /// Where Cargo.lock, flake.lock and rust-toolchain.toml were read: `git show <rev>:...`
    /// or the working tree (when the run's revision is dirty or unknown to this checkout).
    pub build_files_from: String,
    /// Whether [`IMAGE`] is in the bundle.
    pub image: bool,
}

/// Options of [`write`].
#[derive(Debug, Clone, Default)]
pub struct BundleOptions {
    /// The checkout whose Cargo.lock, flake.lock and rust-toolchain.toml go in (and whose git
    /// history is asked for them at the run's revision).
    pub root: PathBuf,
    /// Also `docker save` the run's lab image into the bundle.
    pub with_image: bool,
}

/// Archive members in order: (path inside the bundle, content).
type Members = Vec<(String, Vec<u8>)>;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The SHA-256 of `bytes`, lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn io(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Io(format!("{}: {e}", path.display()))
}

/// Every regular file under `dir`, as (path relative to `dir` with `/`, absolute path), sorted.
fn files_under(dir: &Path) -> Result<Vec<(String, PathBuf)>, Error> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).map_err(|e| io(&d, e))? {
            let entry = entry.map_err(|e| io(&d, e))?;
            let path = entry.path();
            let kind = entry.file_type().map_err(|e| io(&path, e))?;
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file() {
                let rel = path.strip_prefix(dir).unwrap_or(&path);
                let rel = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join("/");
                // Temporary files of an atomic write in progress (`.NAME.tmp-PID`,
                // echolab_core::results::write_atomic) are not part of the run.
                let name = entry.file_name().to_string_lossy().into_owned();
                if !(name.starts_with('.') && name.contains(".tmp-")) {
                    out.push((rel, path));
                }
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Cargo.lock, flake.lock, rust-toolchain.toml at `rev` from git when the checkout knows that
/// revision and it was clean, else from the working tree; with where they came from.
fn build_files(root: &Path, rev: &str) -> Result<(Members, String), Error> {
    let clean = !rev.is_empty() && !rev.ends_with("-dirty");
    if clean {
        let from_git: Option<Members> = BUILD_FILES
            .iter()
            .map(|f| {
                let out = std::process::Command::new("git")
                    .arg("-C")
                    .arg(root)
                    .args(["show", &format!("{rev}:{f}")])
                    .output()
                    .ok()?;
                out.status.success().then(|| (f.to_string(), out.stdout))
            })
            .collect();
        if let Some(files) = from_git {
            return Ok((
                files,
                format!("git show {rev}:<file> in {}", root.display()),
            ));
        }
    }
    let mut files = Vec::new();
    for f in BUILD_FILES {
        let p = root.join(f);
        files.push((f.to_string(), std::fs::read(&p).map_err(|e| io(&p, e))?));
    }
    Ok((
        files,
        format!(
            "the working tree of {} (revision {} not available from git there)",
            root.display(),
            if rev.is_empty() { "unknown" } else { rev }
        ),
    ))
}

/// The lab file of a `--lab` run, when the path in its command line still holds it; `None`
/// for a run without `--lab`.
fn lab_file(m: &Manifest) -> Result<Option<Vec<u8>>, Error> {
    let Some(i) = m.args.iter().position(|a| a == "--lab") else {
        return m
            .args
            .iter()
            .find_map(|a| a.strip_prefix("--lab="))
            .map(|p| std::fs::read(p).map_err(|e| io(Path::new(p), e)))
            .transpose();
    };
    let Some(p) = m.args.get(i + 1) else {
        return Ok(None);
    };
    std::fs::read(p)
        .map(Some)
        .map_err(|e| io(Path::new(p), format!("the run's lab file: {e}")))
}

/// `docker save` of `image` into `path`.
fn save_image(image: &str, path: &Path) -> Result<(), Error> {
    if image.is_empty() {
        return Err(Error::BadInput(
            "--with-image: the manifest records no image id (a local-backend run has none)".into(),
        ));
    }
    let status = std::process::Command::new("docker")
        .args(["save", "-o"])
        .arg(path)
        .arg(image)
        .status()
        .map_err(|e| Error::Io(format!("docker save {image}: {e}")))?;
    if !status.success() {
        return Err(Error::Io(format!("docker save {image}: {status}")));
    }
    Ok(())
}

/// Writes the bundle of the run in `run_dir` to `out` (a `.tar.gz`), returning what it holds.
///
/// # Errors
/// As [`ResultsDir::load`] for a directory that is not a run's; [`Error::BadInput`] for a run
/// still going or `--with-image` without an image; [`Error::Io`] naming the file that could
/// not be read or written (the build files, the lab file, `docker save`, `out`).
pub fn write(run_dir: &Path, out: &Path, opts: &BundleOptions) -> Result<BundleInfo, Error> {
    let run = ResultsDir::load(run_dir)?;
    let m = &run.manifest;
    if m.status == echolab_core::results::RunStatus::Running {
        return Err(Error::BadInput(format!(
            "{}: the run is still going (status running); bundle it once it has ended",
            run_dir.join(MANIFEST_FILE).display()
        )));
    }
    let mut members: Vec<(String, Vec<u8>)> = Vec::new();
    for (rel, path) in files_under(run_dir)? {
        let bytes = std::fs::read(&path).map_err(|e| io(&path, e))?;
        members.push((format!("{RESULTS}/{rel}"), bytes));
    }
    members.push((EXPERIMENT.into(), to_yaml(&m.experiment)?));
    members.push((PROFILE.into(), to_yaml(&m.profile.profile)?));
    if let Some(lab) = lab_file(m)? {
        members.push((LAB.into(), lab));
    }
    let (build, build_from) = build_files(&opts.root, &m.environment.git_rev)?;
    for (name, bytes) in build {
        members.push((format!("build/{name}"), bytes));
    }
    members.push((
        "build/git-revision".into(),
        format!("{}\n", m.environment.git_rev).into_bytes(),
    ));
    let info = BundleInfo {
        schema: BUNDLE_SCHEMA.into(),
        run_id: m.run_id.clone(),
        experiment: m.experiment.name.clone(),
        git_revision: m.environment.git_rev.clone(),
        build_files_from: build_from,
        image: opts.with_image,
    };
    members.push((
        INFO.into(),
        serde_yaml::to_string(&info)
            .map_err(|e| Error::Io(format!("{INFO}: {e}")))?
            .into_bytes(),
    ));
    let image_tmp = out.with_extension("image.tmp");
    let image = if opts.with_image {
        save_image(&m.image.id, &image_tmp)?;
        Some(image_tmp.clone())
    } else {
        None
    };
    let result = write_archive(out, &members, image.as_deref());
    if image.is_some() {
        let _ = std::fs::remove_file(&image_tmp);
    }
    result.map(|()| info)
}

/// A typed record as YAML.
fn to_yaml<T: Serialize>(v: &T) -> Result<Vec<u8>, Error> {
    serde_yaml::to_string(v)
        .map(String::into_bytes)
        .map_err(|e| Error::Io(format!("cannot write a bundle's input as YAML: {e}")))
}

fn file_sha256(path: &Path) -> Result<String, Error> {
    let mut f = std::fs::File::open(path).map_err(|e| io(path, e))?;
    let mut h = Sha256::new();
    std::io::copy(&mut f, &mut h).map_err(|e| io(path, e))?;
    Ok(hex(&h.finalize()))
}

fn write_archive(
    out: &Path,
    members: &[(String, Vec<u8>)],
    image: Option<&Path>,
) -> Result<(), Error> {
    let mut sums = String::new();
    for (name, bytes) in members {
        sums.push_str(&format!("{}  {name}\n", sha256_hex(bytes)));
    }
    if let Some(p) = image {
        sums.push_str(&format!("{}  {IMAGE}\n", file_sha256(p)?));
    }
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| io(parent, e))?;
    }
    let tmp = out.with_extension("partial");
    let file = std::fs::File::create(&tmp).map_err(|e| io(&tmp, e))?;
    let mut tar = tar::Builder::new(GzEncoder::new(file, flate2::Compression::default()));
    let mut add = |name: &str, bytes: &[u8]| {
        let mut h = tar::Header::new_gnu();
        h.set_size(bytes.len() as u64);
        h.set_mode(0o644);
        h.set_mtime(0);
        h.set_cksum();
        tar.append_data(&mut h, name, bytes)
            .map_err(|e| io(&tmp, e))
    };
    add(SUMS, sums.as_bytes())?;
    for (name, bytes) in members {
        add(name, bytes)?;
    }
    if let Some(p) = image {
        tar.append_path_with_name(p, IMAGE)
            .map_err(|e| io(&tmp, e))?;
    }
    let gz = tar.into_inner().map_err(|e| io(&tmp, e))?;
    let mut file = gz.finish().map_err(|e| io(&tmp, e))?;
    file.flush().map_err(|e| io(&tmp, e))?;
    std::fs::rename(&tmp, out).map_err(|e| io(out, e))
}

/// A verified bundle, extracted.
#[derive(Debug, Clone)]
pub struct Opened {
    /// The directory it was extracted into (made by [`open`]).
    pub dir: PathBuf,
    /// Its record.
    pub info: BundleInfo,
}

impl Opened {
    /// The results directory inside.
    pub fn results(&self) -> PathBuf {
        self.dir.join(RESULTS)
    }
}

/// A member's path, checked: relative, normal components only.
fn safe_path(name: &Path) -> Result<PathBuf, String> {
    let mut out = PathBuf::new();
    for c in name.components() {
        match c {
            Component::Normal(p) => out.push(p),
            Component::CurDir => {}
            Component::ParentDir => return Err("a `..` component".into()),
            Component::RootDir | Component::Prefix(_) => return Err("an absolute path".into()),
        }
    }
    if out.as_os_str().is_empty() {
        return Err("an empty path".into());
    }
    Ok(out)
}

fn parse_sums(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut sums = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let Some((digest, name)) = line.split_once("  ") else {
            return Err(format!("{SUMS} line {}: not `<sha256>  <path>`", i + 1));
        };
        if digest.len() != 64 || !digest.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!(
                "{SUMS} line {}: {digest:?} is not a SHA-256",
                i + 1
            ));
        }
        if sums.insert(name.to_string(), digest.to_string()).is_some() {
            return Err(format!("{SUMS} lists {name} twice"));
        }
    }
    Ok(sums)
}

/// Verifies the bundle `archive` and extracts it into `dir`, which must not exist yet (it is
/// made here, with its parents, and removed again when the bundle is refused).
///
/// # Errors
/// [`Error::BadInput`], one line naming `archive` and what is wrong: not gzip/tar or cut short,
/// not an echolab bundle (no [`SUMS`] first, no or foreign [`INFO`]), a member that is a link
/// or has a `..` or absolute path, a member missing from or altered against [`SUMS`], a
/// listed file missing; [`Error::Io`] when `dir` exists or cannot be written.
pub fn open(archive: &Path, dir: &Path) -> Result<Opened, Error> {
    if dir.exists() {
        return Err(Error::Io(format!(
            "{}: already exists; a bundle is extracted only into a fresh directory",
            dir.display()
        )));
    }
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    match extract(archive, dir) {
        Ok(info) => Ok(Opened {
            dir: dir.to_path_buf(),
            info,
        }),
        Err(e) => {
            let _ = std::fs::remove_dir_all(dir);
            Err(e)
        }
    }
}

fn extract(archive: &Path, dir: &Path) -> Result<BundleInfo, Error> {
    let refuse = |what: String| {
        Error::BadInput(format!(
            "{}: refused, {what}; nothing of it is used",
            archive.display()
        ))
    };
    let file = std::fs::File::open(archive).map_err(|e| io(archive, e))?;
    let mut tar = tar::Archive::new(GzDecoder::new(file));
    let entries = tar
        .entries()
        .map_err(|e| refuse(format!("not a readable tar.gz ({e})")))?;
    let mut sums: Option<BTreeMap<String, String>> = None;
    let mut seen = BTreeMap::new();
    for entry in entries {
        let mut entry = entry.map_err(|e| refuse(format!("truncated or corrupt archive ({e})")))?;
        let raw = entry.path_bytes().into_owned();
        let name = String::from_utf8_lossy(&raw).into_owned();
        let kind = entry.header().entry_type();
        let rel = safe_path(Path::new(&name))
            .map_err(|why| refuse(format!("member {name:?} has {why}")))?;
        if !(kind.is_file() || kind.is_dir()) {
            return Err(refuse(format!(
                "member {name:?} is a {kind:?} entry; only plain files and directories are allowed"
            )));
        }
        if kind.is_dir() {
            continue;
        }
        let mut bytes = Vec::new();
        entry
            .read_to_end(&mut bytes)
            .map_err(|e| refuse(format!("truncated or corrupt archive at {name:?} ({e})")))?;
        let Some(list) = sums.as_ref() else {
            if name != SUMS {
                return Err(refuse(format!(
                    "not an echolab bundle (first member is {name:?}, not {SUMS})"
                )));
            }
            let text =
                String::from_utf8(bytes).map_err(|_| refuse(format!("{SUMS} is not text")))?;
            sums = Some(parse_sums(&text).map_err(refuse)?);
            continue;
        };
        let Some(want) = list.get(&name) else {
            return Err(refuse(format!("member {name:?} is not listed in {SUMS}")));
        };
        let got = sha256_hex(&bytes);
        if *want != got {
            return Err(refuse(format!(
                "member {name:?} was altered (sha256 {got}, {SUMS} says {want})"
            )));
        }
        if seen.insert(name.clone(), ()).is_some() {
            return Err(refuse(format!("member {name:?} appears twice")));
        }
        let path = dir.join(&rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io(parent, e))?;
        }
        std::fs::write(&path, &bytes).map_err(|e| io(&path, e))?;
    }
    // The gzip trailer (CRC and length) follows the tar's end: read it too, so that an
    // archive cut in its last bytes is caught.
    std::io::copy(&mut tar.into_inner(), &mut std::io::sink())
        .map_err(|e| refuse(format!("truncated or corrupt archive at its end ({e})")))?;
    let Some(list) = sums else {
        return Err(refuse("empty archive: not an echolab bundle".into()));
    };
    if let Some(missing) = list.keys().find(|k| !seen.contains_key(*k)) {
        return Err(refuse(format!(
            "truncated: {missing:?}, listed in {SUMS}, is missing"
        )));
    }
    let info_path = dir.join(INFO);
    let text = std::fs::read_to_string(&info_path)
        .map_err(|_| refuse(format!("not an echolab bundle (no {INFO})")))?;
    let info: BundleInfo =
        serde_yaml::from_str(&text).map_err(|e| refuse(format!("{INFO} does not parse ({e})")))?;
    if info.schema != BUNDLE_SCHEMA {
        return Err(refuse(format!(
            "{INFO} has schema {:?}, this echolab reads {BUNDLE_SCHEMA:?}",
            info.schema
        )));
    }
    if !dir.join(RESULTS).join(MANIFEST_FILE).is_file() {
        return Err(refuse(format!("no {RESULTS}/{MANIFEST_FILE}")));
    }
    Ok(info)
}
