//! The Docker backend (docs/architecture.md, "Backends"): hosts are containers made through the
//! Docker API (bollard), every object labelled `echolab.run=<run id>` so that teardown, Ctrl-C and
//! `--down` find it.
//!
//! - [`engine`]: connecting (API version negotiated down to the engine's, e.g. 1.41 for
//!   Docker 20.10) and the error wording (what failed, on which object).
//! - [`deadlines`]: how long any call to an engine may take, and the watchdog that fails
//!   what waits on an engine that stopped answering.
//! - [`image`]: the lab image: load the deterministic archive, or take `--image`.
//! - [`exec`]: running a command in a host and collecting or streaming its output.
//! - [`cgroup_sampling`]: CPU and memory samples of a container, from its cgroup files or the
//!   engine's stats.
//! - [`topology`]: how a host container is made, and the loopback topology; [`link`]: the
//!   link topology (networks, link host, endpoints, the link itself, its calibration).
//! - [`docker_hosts`]: the `Hosts` implementation on either topology's containers, and on a
//!   lab's machines ([`lab`]: `--lab`, server and client on engines of their own).
//! - [`privileges`]: what each role's containers may do (user, capabilities, read-only root,
//!   seccomp, pids and memory limits); [`confinement`]: those of a run, after the io_uring
//!   probe.
//! - [`wiretap`]: the userspace wire's counters, read while it runs.
//! - [`cleanup`]: removing a run's objects, or every echolab object.
//! - [`ownership`]: for `--down`, which runs' objects may be removed (those whose launcher is gone).
//! - [`uring`]: whether io_uring works under the containers' seccomp profile.

/// The engine's API client, as the launcher holds it (it makes no calls of its own).
pub use bollard::Docker;

pub mod cgroup_sampling;
pub mod cleanup;
pub mod client_shards;
pub mod confinement;
pub mod creations;
pub mod deadlines;
pub mod docker_hosts;
pub mod engine;
pub mod exec;
pub mod image;
pub mod lab;
pub mod link;
pub mod linktap;
pub mod ownership;
pub mod privileges;
pub mod qdisctap;
pub mod topology;
pub mod uring;
pub mod wiretap;

/// The label every object of a run carries, with the run id as value.
pub const RUN_LABEL: &str = "echolab.run";
/// The label naming an object's role (`server`, `client`, `link`, `route-helper`, ...).
pub const ROLE_LABEL: &str = "echolab.role";

/// The label naming the launcher process that made an object
/// ([`echolab_core::launcher::LauncherId::to_label`]), so that `--down` can tell a live run
/// from an abandoned one.
pub const OWNER_LABEL: &str = "echolab.owner";

/// This launcher's owner label value, read once (`None` where /proc is unreadable).
fn owner_label() -> Option<&'static str> {
    static OWNER: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    OWNER
        .get_or_init(|| echolab_core::launcher::LauncherId::current().map(|id| id.to_label()))
        .as_deref()
}

/// The labels of an object of `run_id` in `role`, with this launcher as its owner.
pub fn labels(run_id: &str, role: &str) -> std::collections::HashMap<String, String> {
    let mut l: std::collections::HashMap<String, String> = [
        (RUN_LABEL.to_string(), run_id.to_string()),
        (ROLE_LABEL.to_string(), role.to_string()),
    ]
    .into_iter()
    .collect();
    if let Some(owner) = owner_label() {
        l.insert(OWNER_LABEL.to_string(), owner.to_string());
    }
    l
}

/// The name of an object of `run_id` in `role`: `echolab-<run id>-<role>`.
pub fn object_name(run_id: &str, role: &str) -> String {
    format!("echolab-{run_id}-{role}")
}
