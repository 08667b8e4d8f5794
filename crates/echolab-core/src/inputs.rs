//! How a NAME-or-PATH argument (`--profile crossnet`, `--experiment exp31.yaml`) becomes a
//! file, written once for every binary that takes one (echolab-up's `--profile` and
//! `--experiment`, echolab-netem's `--profile`).
//!
//! An argument with a `/` or a `.yaml`/`.yml` ending is a path; any other is a NAME, looked up
//! as `DIR/NAME.yaml`, then `DIR/NAME.yml`.

use std::path::{Path, PathBuf};

/// Directory of link profiles under an echolab checkout (`netem/`).
pub const PROFILES_DIR: &str = "netem";
/// Directory of experiments under an echolab checkout (`experiments/`).
pub const EXPERIMENTS_DIR: &str = "experiments";

/// The stems of the `*.yaml` and `*.yml` files in `dir`, sorted; empty if the directory is
/// missing or unreadable.
pub fn available(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .collect();
    names.sort();
    // `a.yaml` and `a.yml` are one name (the first wins in `resolve`).
    names.dedup();
    names
}

fn looks_like_path(arg: &str) -> bool {
    arg.contains('/') || arg.ends_with(".yaml") || arg.ends_with(".yml")
}

/// Turns a NAME or PATH argument into an existing file; `kind` ("profile", "experiment") and
/// `dir` (where names are looked up) only shape the error message.
///
/// # Errors
/// One line for the user: a path that does not exist or is a directory, or an unknown name
/// with the names available in `dir`.
pub fn resolve(kind: &str, arg: &str, dir: &Path) -> Result<PathBuf, String> {
    if looks_like_path(arg) {
        let p = PathBuf::from(arg);
        return if p.is_file() {
            Ok(p)
        } else if p.is_dir() {
            Err(format!("{kind} {arg} is a directory, not a file"))
        } else {
            Err(format!("{kind} file {arg} does not exist"))
        };
    }
    for ext in ["yaml", "yml"] {
        let p = dir.join(format!("{arg}.{ext}"));
        if p.is_file() {
            return Ok(p);
        }
    }
    let names = available(dir);
    let list = if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    };
    Err(format!(
        "unknown {kind} '{arg}'; available in {}: {list}",
        dir.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(tag: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("echolab-core-inputs-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn names_find_yaml_then_yml_and_paths_are_taken_as_given() {
        let d = temp_dir("names");
        std::fs::write(d.join("a.yml"), "x").unwrap();
        std::fs::write(d.join("b.yaml"), "x").unwrap();
        std::fs::write(d.join("b.yml"), "x").unwrap();
        std::fs::write(d.join("notes.txt"), "x").unwrap();
        assert_eq!(resolve("profile", "a", &d).unwrap(), d.join("a.yml"));
        assert_eq!(resolve("profile", "b", &d).unwrap(), d.join("b.yaml"));
        let yml = d.join("a.yml").display().to_string();
        assert_eq!(
            resolve("profile", &yml, Path::new("/")).unwrap(),
            d.join("a.yml")
        );
        assert_eq!(available(&d), ["a", "b"]);
        let e = resolve("profile", "mars", &d).unwrap_err();
        assert_eq!(
            e,
            format!("unknown profile 'mars'; available in {}: a, b", d.display())
        );
        let e = resolve("experiment", &d.display().to_string(), &d).unwrap_err();
        assert_eq!(
            e,
            format!("experiment {} is a directory, not a file", d.display())
        );
        std::fs::remove_dir_all(&d).unwrap();
        assert_eq!(
            resolve("profile", "x", &d).unwrap_err(),
            format!("unknown profile 'x'; available in {}: none", d.display())
        );
    }
}
