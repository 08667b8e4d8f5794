//! Where profiles and experiments live: the echolab root whose `netem/` and `experiments/`
//! NAME arguments are looked up in. How a `--profile`/`--experiment` argument becomes a file
//! is core's one resolver ([`echolab_core::inputs::resolve`]): a bare NAME is
//! `netem/NAME.yaml` or `experiments/NAME.yaml` under the root; an argument with a `/` or a
//! `.yaml`/`.yml` ending is a path.

use std::path::{Path, PathBuf};

use echolab_core::experiment::Experiment;
use echolab_core::inputs::resolve;
pub(crate) use echolab_core::inputs::{available, EXPERIMENTS_DIR, PROFILES_DIR};
use echolab_core::profile::Profile;

/// An input that could not be resolved or read; the message is one line for the user.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct CatalogError(pub String);

/// The echolab checkout whose `netem/` and `experiments/` are used.
///
/// Found as: `$ECHOLAB_ROOT`; else the nearest ancestor of the working directory that has an
/// `experiments/` or `netem/` directory; else the workspace this binary was built from.
pub(crate) fn find_root() -> PathBuf {
    if let Some(root) = std::env::var_os("ECHOLAB_ROOT") {
        return PathBuf::from(root);
    }
    if let Ok(cwd) = std::env::current_dir() {
        for dir in cwd.ancestors() {
            if dir.join(EXPERIMENTS_DIR).is_dir() || dir.join(PROFILES_DIR).is_dir() {
                return dir.to_path_buf();
            }
        }
    }
    build_workspace_root()
}

/// The workspace root this crate was compiled in (crates/echolab-up/../..).
pub(crate) fn build_workspace_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // Resolved so that results paths read `<root>/results`, not `crates/echolab-up/../../results`.
    root.canonicalize().unwrap_or(root)
}

/// Resolves and loads a profile ([`Profile::resolve`] in the root's `netem/`).
///
/// # Errors
/// [`resolve`]'s, or the profile's parse error (file, field, line and column).
pub(crate) fn load_profile(root: &Path, arg: &str) -> Result<(PathBuf, Profile), CatalogError> {
    Profile::resolve(arg, &root.join(PROFILES_DIR)).map_err(CatalogError)
}

/// Resolves and loads an experiment.
///
/// # Errors
/// [`resolve`]'s, or the experiment's parse error (file, field, line and column).
pub(crate) fn load_experiment(
    root: &Path,
    arg: &str,
) -> Result<(PathBuf, Experiment), CatalogError> {
    let path = resolve("experiment", arg, &root.join(EXPERIMENTS_DIR)).map_err(CatalogError)?;
    let experiment =
        Experiment::load(&path).map_err(|e| CatalogError(format!("experiment {e}")))?;
    Ok((path, experiment))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_root(tag: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("echolab-up-catalog-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join(EXPERIMENTS_DIR)).unwrap();
        std::fs::create_dir_all(d.join(PROFILES_DIR)).unwrap();
        d
    }

    #[test]
    fn unknown_names_list_the_available_ones() {
        let root = temp_root("unknown");
        std::fs::write(root.join("experiments/b.yaml"), "x").unwrap();
        std::fs::write(root.join("experiments/a.yaml"), "x").unwrap();
        std::fs::write(root.join("experiments/notes.txt"), "x").unwrap();
        let e = load_experiment(&root, "exp99").unwrap_err().to_string();
        assert!(
            e.contains("unknown experiment 'exp99'") && e.ends_with(": a, b"),
            "{e}"
        );
        let e = load_profile(&root, "mars").unwrap_err().to_string();
        assert!(
            e.contains("unknown profile 'mars'") && e.ends_with(": none"),
            "{e}"
        );
        let e = load_profile(&root, "/nonexistent/p.yaml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/p.yaml does not exist"), "{e}");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn invalid_yaml_names_file_line_and_column() {
        let root = temp_root("yaml");
        let bad = "name: x\nquestion: q\nrepetitions: [1\nmatrix: []\n";
        std::fs::write(root.join("experiments/bad.yaml"), bad).unwrap();
        let e = load_experiment(&root, "bad").unwrap_err().to_string();
        assert!(
            e.contains("bad.yaml") && e.contains("line") && e.contains("column"),
            "{e}"
        );
        std::fs::write(root.join("netem/bad.yaml"), "name: p\ntopology: [\n").unwrap();
        let e = load_profile(&root, "bad").unwrap_err().to_string();
        assert!(
            e.contains("netem/bad.yaml") && e.contains("line") && e.contains("column"),
            "{e}"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_project_experiments_load() {
        let root = build_workspace_root();
        for name in available(&root.join(EXPERIMENTS_DIR)) {
            load_experiment(&root, &name).unwrap_or_else(|e| panic!("{e}"));
        }
    }
}
