//! `echolab-up --down`: which runs' objects to remove. By default only the runs whose
//! launcher is gone ([`echolab_core::launcher`]: killed, crashed, or ended with `--keep`);
//! a run whose launcher is alive, or was started from another host, or whose objects carry no
//! owner (compose's, or an echolab older than the owner label) is kept and said so.
//! `--down --all` removes every echolab object, as before the owner label existed.

use std::collections::BTreeMap;

use bollard::Docker;
use echolab_core::launcher::{LauncherId, Liveness};

use super::cleanup::{self, Removed};

/// What `--down` decided for one run id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ownership {
    /// Its launcher is gone: remove.
    Abandoned,
    /// Keep, for the reason given (a live launcher, one on another host, no owner label).
    Kept(String),
}

/// Judges one run from the owner label its objects carry (`None`: no label), with `live`
/// telling a launcher's liveness.
pub fn judge(owner: Option<&str>, live: impl Fn(&LauncherId) -> Liveness) -> Ownership {
    let Some(label) = owner else {
        return Ownership::Kept(
            "no owner label (compose's objects, or made by an older echolab); --down --all removes them".into(),
        );
    };
    let Some(id) = LauncherId::from_label(label) else {
        return Ownership::Kept(format!(
            "unreadable owner label {label:?}; --down --all removes it"
        ));
    };
    match live(&id) {
        Liveness::Gone => Ownership::Abandoned,
        Liveness::Alive => Ownership::Kept(format!("its launcher ({id}) is still running")),
        Liveness::Unknown(why) => Ownership::Kept(format!(
            "its launcher ({id}) cannot be checked from here: {why}; --down --all removes it"
        )),
    }
}

/// The result of `--down`.
#[derive(Debug, Default)]
pub struct DownOutcome {
    /// What was removed.
    pub removed: Removed,
    /// Run ids kept, each with the reason.
    pub kept: BTreeMap<String, String>,
    /// Run ids removed because their launcher is gone.
    pub abandoned: Vec<String>,
}

/// Removes the objects of every run whose launcher is gone (or of every run, with `all`).
///
/// # Errors
/// Listing failed, or some objects could not be removed (each named).
pub async fn down(docker: &Docker, all: bool) -> anyhow::Result<DownOutcome> {
    let owners = cleanup::run_owners(docker).await?;
    let mut outcome = DownOutcome::default();
    let mut errors = Vec::new();
    for (run_id, owner) in owners {
        let verdict = if all {
            Ownership::Abandoned
        } else {
            judge(owner.as_deref(), LauncherId::liveness)
        };
        match verdict {
            Ownership::Kept(why) => {
                outcome.kept.insert(run_id, why);
            }
            Ownership::Abandoned => match cleanup::remove_labelled(docker, Some(&run_id)).await {
                Ok(r) => {
                    outcome.removed.containers.extend(r.containers);
                    outcome.removed.networks.extend(r.networks);
                    outcome.abandoned.push(run_id);
                }
                Err(e) => errors.push(format!("{e:#}")),
            },
        }
    }
    if errors.is_empty() {
        Ok(outcome)
    } else {
        Err(anyhow::anyhow!("{}", errors.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "4242 987654 lab1 6f1c0b2e-0000-4000-8000-000000000001";

    #[test]
    fn only_a_run_whose_launcher_is_gone_is_removed() {
        assert_eq!(judge(Some(ID), |_| Liveness::Gone), Ownership::Abandoned);
        let alive = judge(Some(ID), |_| Liveness::Alive);
        assert_eq!(
            alive,
            Ownership::Kept("its launcher (pid 4242 on lab1) is still running".into())
        );
        let Ownership::Kept(elsewhere) = judge(Some(ID), |_| {
            Liveness::Unknown("launched from host lab1".into())
        }) else {
            panic!("a launcher on another host must be kept");
        };
        assert!(elsewhere.contains("launched from host lab1") && elsewhere.contains("--all"));
    }

    #[test]
    fn objects_without_a_readable_owner_are_kept() {
        let never = |_: &LauncherId| -> Liveness { panic!("no id to judge") };
        for owner in [None, Some("compose"), Some("4242 x lab1 b")] {
            let Ownership::Kept(why) = judge(owner, never) else {
                panic!("{owner:?} must be kept");
            };
            assert!(why.contains("--down --all"), "{owner:?}: {why}");
        }
    }
}
