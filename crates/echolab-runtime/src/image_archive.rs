//! The lab image, made without a registry or a build daemon: the workspace's binaries and
//! their shared-library closure (from `ldd`) packed as one layer into a `docker save`-format
//! archive (manifest.json + config + layer.tar) that `docker load` (the Docker API's
//! `/images/load`) takes as it is.
//!
//! Determinism: every tar entry has mtime 0, uid/gid 0, fixed modes and sorted paths, and the
//! config has a fixed `created` time, so the same binaries give the same layer digest and the
//! same config digest, which is the image id. The image format is the Docker Image
//! Specification v1.2 (moby/moby image/spec/v1.2.md) and the `docker save` layout.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::json;
use sha2::{Digest, Sha256};

/// Where binaries go in the image; also the image's `PATH`.
pub const IMAGE_BIN_DIR: &str = "/usr/local/bin";
/// Repository name of built images (`echolab:<hash>`, `echolab:latest`).
pub const IMAGE_REPO: &str = "echolab";
/// The tag compose files use.
pub const LATEST_TAG: &str = "echolab:latest";
/// Binaries every lab image must hold: the server, the client, and the launcher itself
/// (its hidden `__hold` and `__signal` commands keep a host alive and stop a server).
pub const REQUIRED_BINARIES: &[&str] = &["echo-server", "echo-bench", "echolab-up"];
/// Binaries taken when present: the link and calibration tool (needed by link profiles).
pub const OPTIONAL_BINARIES: &[&str] = &["echolab-netem"];
/// Tools of this machine taken into the image when they are on its PATH: `strace`, for the
/// seed 002 cross-check (`bench.strace: true`), which runs the seed's own command.
pub const HOST_TOOLS: &[&str] = &["strace"];

/// The first `name` on this process's PATH, as a shell would find it.
pub fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|dir| Path::new(dir).join(name))
        .find(|p| p.is_file())
}

/// An image's content, ready to load.
#[derive(Debug, Clone)]
pub struct ImageArchive {
    /// `sha256:<hex>` of the config: the id Docker will give the image.
    pub id: String,
    /// `echolab:<first 12 hex of the id>`.
    pub tag: String,
    /// The `docker save`-format archive.
    pub archive: Vec<u8>,
    /// SHA-256 (hex) of each binary by name, and of each library by its path in the image.
    pub contents: BTreeMap<String, String>,
}

/// A file to put in the image.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct ImageFile {
    /// Absolute path inside the image.
    image_path: String,
    /// Where to read it on this machine.
    source: PathBuf,
}

/// Image building errors, each naming the file or command.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// A required binary is not in the binary directory.
    #[error("{path} not found; build the lab binaries first with `cargo build --release --workspace --bins` (or pass --bin-dir, or --image REF for a prebuilt image)")]
    MissingBinary {
        /// Where it was looked for.
        path: String,
    },
    /// `ldd` could not be run or did not understand a binary.
    #[error("ldd {path}: {message}")]
    Ldd {
        /// The binary.
        path: String,
        /// What ldd said, or why it could not run.
        message: String,
    },
    /// A custom server's program is not on this machine's PATH (nor at its absolute path).
    #[error("server program {program:?} is not on this machine's PATH (nor a file at that path); install it, or give its absolute path in the experiment's `command:`")]
    MissingProgram {
        /// The program as the experiment names it.
        program: String,
    },
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why it could not be read.
        source: std::io::Error,
    },
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// SHA-256 of `data`, lower-case hex.
pub fn sha256_hex(data: &[u8]) -> String {
    hex(&Sha256::digest(data))
}

/// Parses `ldd` output into the absolute paths of the libraries it resolved (the vDSO, which
/// has no file, is skipped).
///
/// # Errors
/// A line saying a library is "not found".
pub fn parse_ldd(output: &str) -> Result<Vec<PathBuf>, String> {
    let mut libs = Vec::new();
    for line in output.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if line.contains("not found") {
            return Err(format!("missing library: {line}"));
        }
        // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or "/lib64/ld-linux-x86-64.so.2 (0x...)"
        let target = line.split_once("=>").map_or(line, |(_, t)| t).trim();
        let path = target.split_whitespace().next().unwrap_or("");
        if path.starts_with('/') {
            libs.push(PathBuf::from(path));
        }
    }
    Ok(libs)
}

/// The shared libraries `binary` loads, by `ldd`; empty for a static binary.
///
/// # Errors
/// [`ImageError::Ldd`].
fn library_closure(binary: &Path) -> Result<Vec<PathBuf>, ImageError> {
    let err = |message: String| ImageError::Ldd {
        path: binary.display().to_string(),
        message,
    };
    let out = std::process::Command::new("ldd")
        .arg(binary)
        .output()
        .map_err(|e| err(format!("cannot run ldd: {e}")))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        // ldd exits 1 with "not a dynamic executable" for static binaries: no closure.
        if stdout.contains("not a dynamic executable")
            || stderr.contains("not a dynamic executable")
        {
            return Ok(Vec::new());
        }
        return Err(err(stderr.trim().to_string()));
    }
    parse_ldd(&stdout).map_err(err)
}

/// The binaries (required and present optional ones) in `bin_dir`, by name.
///
/// # Errors
/// [`ImageError::MissingBinary`] for the first required binary that is missing.
pub fn find_binaries(bin_dir: &Path) -> Result<BTreeMap<String, PathBuf>, ImageError> {
    let mut found = BTreeMap::new();
    for name in REQUIRED_BINARIES {
        let p = bin_dir.join(name);
        if !p.is_file() {
            return Err(ImageError::MissingBinary {
                path: p.display().to_string(),
            });
        }
        found.insert(name.to_string(), p);
    }
    for name in OPTIONAL_BINARIES {
        let p = bin_dir.join(name);
        if p.is_file() {
            found.insert(name.to_string(), p);
        }
    }
    for name in HOST_TOOLS {
        if let Some(p) = on_path(name) {
            found.insert(name.to_string(), p);
        }
    }
    Ok(found)
}

/// Where a custom server's program is on this machine: an absolute path as it is, a bare name
/// on the PATH.
///
/// # Errors
/// [`ImageError::MissingProgram`].
pub fn find_program(program: &str) -> Result<PathBuf, ImageError> {
    let found = if program.contains('/') {
        Some(PathBuf::from(program)).filter(|p| p.is_file())
    } else {
        on_path(program)
    };
    found.ok_or_else(|| ImageError::MissingProgram {
        program: program.to_string(),
    })
}

/// Builds the image archive for the binaries in `bin_dir`, with `programs` (custom servers'
/// programs, `command[0]` of each) taken from this machine into the image's bin directory
/// under their file names, with their shared libraries.
///
/// # Errors
/// A missing binary or program, an `ldd` failure, or an unreadable file.
pub fn build_archive(bin_dir: &Path, programs: &[String]) -> Result<ImageArchive, ImageError> {
    let mut binaries = find_binaries(bin_dir)?;
    for program in programs {
        let path = find_program(program)?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| program.clone());
        binaries.insert(name, path);
    }
    let mut files: BTreeSet<ImageFile> = BTreeSet::new();
    for (name, path) in &binaries {
        files.insert(ImageFile {
            image_path: format!("{IMAGE_BIN_DIR}/{name}"),
            source: path.clone(),
        });
        for lib in library_closure(path)? {
            let image_path = lib.display().to_string();
            files.insert(ImageFile {
                image_path,
                source: lib,
            });
        }
    }
    let mut contents = BTreeMap::new();
    let mut layer_files = Vec::new();
    for f in &files {
        let data = std::fs::read(&f.source).map_err(|source| ImageError::Read {
            path: f.source.display().to_string(),
            source,
        })?;
        let key = match f.image_path.strip_prefix(&format!("{IMAGE_BIN_DIR}/")) {
            Some(name) if binaries.contains_key(name) => name.to_string(),
            _ => f.image_path.clone(),
        };
        contents.insert(key, sha256_hex(&data));
        layer_files.push((f.image_path.clone(), data));
    }
    let lib_dirs: BTreeSet<String> = files
        .iter()
        .filter(|f| !f.image_path.starts_with(IMAGE_BIN_DIR))
        .filter_map(|f| {
            Path::new(&f.image_path)
                .parent()
                .map(|p| p.display().to_string())
        })
        .collect();
    Ok(assemble(&layer_files, &lib_dirs, &contents))
}

/// A tar header with the fixed metadata every entry gets.
fn header(path: &str, kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut h = tar::Header::new_ustar();
    h.set_path(path.trim_start_matches('/'))
        .expect("image paths are short ASCII");
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    h.set_size(size);
    h.set_cksum();
    h
}

/// The layer: every parent directory (0755, and /tmp 1777), then files (0755), sorted by path.
fn layer_tar(files: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut dirs: BTreeSet<String> = BTreeSet::from(["tmp/".to_string()]);
    for (path, _) in files {
        let mut p = Path::new(path.trim_start_matches('/'));
        while let Some(parent) = p.parent().filter(|q| !q.as_os_str().is_empty()) {
            dirs.insert(format!("{}/", parent.display()));
            p = parent;
        }
    }
    let mut sorted: Vec<&(String, Vec<u8>)> = files.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let mut b = tar::Builder::new(Vec::new());
    for d in &dirs {
        let mode = if d == "tmp/" { 0o1777 } else { 0o755 };
        b.append(
            &header(d, tar::EntryType::Directory, mode, 0),
            std::io::empty(),
        )
        .expect("in-memory tar");
    }
    for (path, data) in sorted {
        b.append(
            &header(path, tar::EntryType::Regular, 0o755, data.len() as u64),
            data.as_slice(),
        )
        .expect("in-memory tar");
    }
    b.into_inner().expect("in-memory tar")
}

fn assemble(
    files: &[(String, Vec<u8>)],
    lib_dirs: &BTreeSet<String>,
    contents: &BTreeMap<String, String>,
) -> ImageArchive {
    let layer = layer_tar(files);
    let layer_hex = sha256_hex(&layer);
    let epoch = "1970-01-01T00:00:00Z";
    let mut env = vec![format!("PATH={IMAGE_BIN_DIR}")];
    if !lib_dirs.is_empty() {
        env.push(format!(
            "LD_LIBRARY_PATH={}",
            lib_dirs.iter().cloned().collect::<Vec<_>>().join(":")
        ));
    }
    let config = json!({
        "architecture": "amd64",
        "os": "linux",
        "created": epoch,
        "config": {
            "Env": env,
            "Cmd": echolab_core::cmd::Job::Hold.command(IMAGE_BIN_DIR),
            "WorkingDir": "/",
            "Labels": { "org.echolab.image": "lab" },
        },
        "rootfs": { "type": "layers", "diff_ids": [format!("sha256:{layer_hex}")] },
        "history": [{ "created": epoch, "created_by": "echolab-up image builder (binaries + ldd closure)" }],
    });
    let config_bytes = serde_json::to_vec(&config).expect("JSON of a json! value");
    let config_hex = sha256_hex(&config_bytes);
    let tag = format!("{IMAGE_REPO}:{}", &config_hex[..12]);
    let manifest = json!([{
        "Config": format!("{config_hex}.json"),
        "RepoTags": [tag.clone(), LATEST_TAG],
        "Layers": [format!("{layer_hex}/layer.tar")],
    }]);
    let manifest_bytes = serde_json::to_vec(&manifest).expect("JSON of a json! value");
    let mut outer = tar::Builder::new(Vec::new());
    let mut add = |path: &str, kind: tar::EntryType, mode: u32, data: &[u8]| {
        outer
            .append(&header(path, kind, mode, data.len() as u64), data)
            .expect("in-memory tar");
    };
    add(
        &format!("{config_hex}.json"),
        tar::EntryType::Regular,
        0o644,
        &config_bytes,
    );
    add(
        &format!("{layer_hex}/"),
        tar::EntryType::Directory,
        0o755,
        &[],
    );
    add(
        &format!("{layer_hex}/layer.tar"),
        tar::EntryType::Regular,
        0o644,
        &layer,
    );
    add(
        "manifest.json",
        tar::EntryType::Regular,
        0o644,
        &manifest_bytes,
    );
    ImageArchive {
        id: format!("sha256:{config_hex}"),
        tag,
        archive: outer.into_inner().expect("in-memory tar"),
        contents: contents.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_output_is_parsed_into_library_paths() {
        let out = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x1)\n\
                   \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x2)\n\t/lib64/ld-linux-x86-64.so.2 (0x3)\n";
        let libs = parse_ldd(out).unwrap();
        let names: Vec<String> = libs.iter().map(|p| p.display().to_string()).collect();
        assert_eq!(
            names,
            [
                "/lib/x86_64-linux-gnu/libgcc_s.so.1",
                "/lib/x86_64-linux-gnu/libc.so.6",
                "/lib64/ld-linux-x86-64.so.2"
            ]
        );
        assert!(parse_ldd("\tlibfoo.so.1 => not found\n")
            .unwrap_err()
            .contains("libfoo"));
    }

    fn fake_bin_dir(tag: &str, content: &[u8]) -> PathBuf {
        let d = std::env::temp_dir().join(format!("echolab-up-image-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        // Copies of a real dynamic executable, so ldd has a closure to find.
        let sh = std::fs::read("/bin/true").unwrap();
        for name in REQUIRED_BINARIES {
            let mut data = sh.clone();
            data.extend_from_slice(content);
            std::fs::write(d.join(name), data).unwrap();
            std::fs::set_permissions(
                d.join(name),
                std::os::unix::fs::PermissionsExt::from_mode(0o755),
            )
            .unwrap();
        }
        d
    }

    #[test]
    fn the_same_binaries_give_the_same_image_id() {
        let a = fake_bin_dir("a", b"one");
        let first = build_archive(&a, &[]).unwrap();
        // Rewrite the files (new mtimes) with the same bytes: the id must not move.
        let again = fake_bin_dir("a", b"one");
        let second = build_archive(&again, &[]).unwrap();
        assert_eq!(first.id, second.id);
        assert_eq!(first.archive, second.archive);
        assert!(
            first.contents.keys().any(|k| k.ends_with("libc.so.6")),
            "{:?}",
            first.contents.keys()
        );
        assert!(first.contents.contains_key("echo-server"));
        let b = fake_bin_dir("b", b"two");
        let third = build_archive(&b, &[]).unwrap();
        assert_ne!(first.id, third.id, "different binaries, different image");
        assert_eq!(
            third.tag,
            format!("echolab:{}", &third.id["sha256:".len()..][..12])
        );
        std::fs::remove_dir_all(&a).unwrap();
        std::fs::remove_dir_all(&b).unwrap();
    }

    #[test]
    fn a_missing_binary_names_the_build_command() {
        let d = std::env::temp_dir().join(format!("echolab-up-image-empty-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let e = build_archive(&d, &[]).unwrap_err().to_string();
        assert!(
            e.contains("echo-server not found")
                && e.contains("cargo build --release --workspace --bins"),
            "{e}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn layer_entries_are_sorted_with_fixed_metadata() {
        let layer = layer_tar(&[
            ("/usr/local/bin/b".into(), b"bb".to_vec()),
            ("/lib/a.so".into(), b"a".to_vec()),
        ]);
        let mut ar = tar::Archive::new(layer.as_slice());
        let mut paths = Vec::new();
        for e in ar.entries().unwrap() {
            let e = e.unwrap();
            let h = e.header();
            assert_eq!(
                (h.mtime().unwrap(), h.uid().unwrap(), h.gid().unwrap()),
                (0, 0, 0)
            );
            paths.push(e.path().unwrap().display().to_string());
        }
        assert_eq!(
            paths,
            [
                "lib/",
                "tmp/",
                "usr/",
                "usr/local/",
                "usr/local/bin/",
                "lib/a.so",
                "usr/local/bin/b"
            ]
        );
    }
}
