//! Test support shared by echolab's crates (a dev-dependency only).
//!
//! Integration tests of one crate often need another crate's binary (echo-bench's tests run
//! `echo-server`). Cargo only exposes `CARGO_BIN_EXE_*` for the crate's own binaries, so
//! [`workspace_bin`] finds the others in the same target directory. `cargo nextest run
//! --workspace` (the README's test command) builds every workspace binary before any test runs.

use std::path::PathBuf;

/// Path of the workspace binary `name` built in the same profile as the running test.
///
/// # Panics
/// When the binary is not there, with the command that builds it; a test cannot go on without it.
pub fn workspace_bin(name: &str) -> PathBuf {
    // A test executable lives in target/<profile>/deps/; binaries live in target/<profile>/.
    let exe = std::env::current_exe().expect("current_exe is readable");
    let profile_dir = exe
        .parent()
        .and_then(|deps| if deps.ends_with("deps") { deps.parent() } else { Some(deps) })
        .expect("test executable has a parent directory");
    let path = profile_dir.join(name);
    assert!(
        path.is_file(),
        "{} not found: build it first with `cargo build --workspace --bins` (or run the README's \
         test command, `cargo nextest run --workspace`, which builds it)",
        path.display()
    );
    path
}
