//! Removing Docker objects by label: one run's (teardown, also after an error or Ctrl-C) or
//! every echolab run's (`echolab-up --down`). Containers go first (forced), then networks,
//! which cannot be removed while a container is attached.

use std::collections::HashMap;

use bollard::models::{ContainerSummary, Network};
use bollard::query_parameters::{
    ListContainersOptions, ListImagesOptions, ListNetworksOptions, RemoveContainerOptions,
    RemoveImageOptions,
};
use bollard::Docker;

use super::deadlines::{call, gave_up, within, CALL};
use super::engine::failed;
use super::{OWNER_LABEL, RUN_LABEL};

/// What was removed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Removed {
    /// Container names.
    pub containers: Vec<String>,
    /// Network names.
    pub networks: Vec<String>,
}

fn label_filter(run_id: Option<&str>) -> HashMap<String, Vec<String>> {
    let value = match run_id {
        Some(id) => format!("{RUN_LABEL}={id}"),
        None => RUN_LABEL.to_string(),
    };
    [("label".to_string(), vec![value])].into_iter().collect()
}

/// Every container (running or not) that matches `filters`.
///
/// # Errors
/// The engine could not list them, naming the filters.
async fn containers_matching(
    docker: &Docker,
    filters: &HashMap<String, Vec<String>>,
) -> anyhow::Result<Vec<ContainerSummary>> {
    call(
        docker,
        "list containers",
        &format!("labelled {filters:?}"),
        docker.list_containers(Some(ListContainersOptions {
            all: true,
            filters: Some(filters.clone()),
            ..Default::default()
        })),
    )
    .await
}

/// Every network that matches `filters`.
///
/// # Errors
/// The engine could not list them, naming the filters.
async fn networks_matching(
    docker: &Docker,
    filters: &HashMap<String, Vec<String>>,
) -> anyhow::Result<Vec<Network>> {
    call(
        docker,
        "list networks",
        &format!("labelled {filters:?}"),
        docker.list_networks(Some(ListNetworksOptions {
            filters: Some(filters.clone()),
        })),
    )
    .await
}

/// How long teardown waits for a container removal that another request started.
const REMOVAL_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Whether container `id` is gone within [`REMOVAL_WAIT`] (polled every 50 ms: the engine
/// offers no event for the end of a removal it is already doing).
async fn gone(docker: &Docker, id: &str) -> bool {
    let until = tokio::time::Instant::now() + REMOVAL_WAIT;
    while tokio::time::Instant::now() < until {
        match within(docker, CALL, docker.inspect_container(id, None)).await {
            Ok(Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            })) => return true,
            // An engine that stopped answering will not say.
            Err(_) => return false,
            Ok(_) => {}
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    false
}

/// Removes every container and network labelled with `run_id` (or with any run id, when
/// None). Goes on past individual failures and reports them all.
///
/// # Errors
/// The objects that could not be listed or removed, each named.
pub async fn remove_labelled(docker: &Docker, run_id: Option<&str>) -> anyhow::Result<Removed> {
    let filters = label_filter(run_id);
    let mut removed = Removed::default();
    let mut errors = Vec::new();
    // A run cut short may have creations still on their way: list only after they end.
    if !super::creations::settled(CALL).await {
        errors.push(format!(
            "{} container or network creation(s) still unanswered after {CALL:?}; `echolab-up --down` removes what they made",
            super::creations::in_flight(),
        ));
    }
    for c in containers_matching(docker, &filters).await? {
        let id = c.id.unwrap_or_default();
        let name = c
            .names
            .and_then(|n| n.first().cloned())
            .unwrap_or_else(|| id.clone());
        let name = name.trim_start_matches('/').to_string();
        let options = RemoveContainerOptions {
            force: true,
            v: true,
            ..Default::default()
        };
        let answer = within(docker, CALL, docker.remove_container(&id, Some(options))).await;
        let answer = match answer {
            Ok(a) => a,
            Err(gave) => {
                errors.push(format!("{:#}", gave_up(gave, "remove container", &name)));
                continue;
            }
        };
        match answer {
            Ok(()) => removed.containers.push(name),
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => {}
            // A removal that was under way when the run was cut short (a cell's hosts being
            // made anew at Ctrl-C): wait for the engine to finish it.
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 409,
                message,
            }) if message.contains("already in progress") => {
                if gone(docker, &id).await {
                    removed.containers.push(name);
                } else {
                    errors.push(format!(
                        "docker: container {name} was still being removed after {REMOVAL_WAIT:?}"
                    ));
                }
            }
            Err(e) => errors.push(failed("remove container", &name, e).to_string()),
        }
    }
    for n in networks_matching(docker, &filters).await? {
        let name = n.name.or(n.id).unwrap_or_default();
        let answer = match within(docker, CALL, docker.remove_network(&name)).await {
            Ok(a) => a,
            Err(gave) => {
                errors.push(format!("{:#}", gave_up(gave, "remove network", &name)));
                continue;
            }
        };
        match answer {
            Ok(()) => removed.networks.push(name),
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => {}
            Err(e) => errors.push(failed("remove network", &name, e).to_string()),
        }
    }
    if errors.is_empty() {
        Ok(removed)
    } else {
        Err(anyhow::anyhow!("{}", errors.join("; ")))
    }
}

/// A run's teardown on one engine, bounded: a ping first (an engine that does not answer it
/// within [`super::deadlines::PING`] is left alone), then [`remove_labelled`] within
/// [`super::deadlines::TEARDOWN`].
///
/// # Errors
/// Why the run's objects may still be there, in one line.
pub async fn tear_down(docker: &Docker, run_id: &str) -> Result<Removed, String> {
    if !super::deadlines::answers(docker).await {
        return Err(format!(
            "the engine did not answer a ping within {:?}: nothing removed",
            super::deadlines::PING
        ));
    }
    let teardown = super::deadlines::TEARDOWN;
    match tokio::time::timeout(teardown, remove_labelled(docker, Some(run_id))).await {
        Ok(Ok(removed)) => Ok(removed),
        Ok(Err(e)) => Err(format!("{e:#}")),
        Err(_) => Err(format!("teardown did not finish within {teardown:?}")),
    }
}

/// Every run id that has objects on the engine, with the owner label its objects carry
/// (`None` when none of them has one).
///
/// # Errors
/// The engine could not list them.
pub async fn run_owners(
    docker: &Docker,
) -> anyhow::Result<std::collections::BTreeMap<String, Option<String>>> {
    let filters = label_filter(None);
    let containers = containers_matching(docker, &filters).await?;
    let networks = networks_matching(docker, &filters).await?;
    let mut owners = std::collections::BTreeMap::<String, Option<String>>::new();
    let labels = containers
        .into_iter()
        .filter_map(|c| c.labels)
        .chain(networks.into_iter().filter_map(|n| n.labels));
    for l in labels {
        if let Some(run) = l.get(RUN_LABEL) {
            let owner = owners.entry(run.clone()).or_default();
            if owner.is_none() {
                *owner = l.get(OWNER_LABEL).cloned();
            }
        }
    }
    Ok(owners)
}

/// Names of the containers and networks labelled with `run_id` (any run when None) that exist.
///
/// # Errors
/// The engine could not list them.
pub async fn list_labelled(docker: &Docker, run_id: Option<&str>) -> anyhow::Result<Removed> {
    let filters = label_filter(run_id);
    let containers = containers_matching(docker, &filters).await?;
    let networks = networks_matching(docker, &filters).await?;
    Ok(Removed {
        containers: containers
            .into_iter()
            .filter_map(|c| c.names.and_then(|n| n.first().cloned()))
            .collect(),
        networks: networks.into_iter().filter_map(|n| n.name).collect(),
    })
}

/// Whether `tag` is one of the launcher's content-addressed tags in repository `repo`
/// (`echolab:<hex>` for the lab image, [`crate::image_archive::IMAGE_REPO`]), which nothing
/// refers to once a newer build replaced it (`echolab:latest`, `echolab:nix` and any user tag
/// are not).
pub fn is_content_tag(tag: &str, repo: &str) -> bool {
    tag.strip_prefix(repo)
        .and_then(|t| t.strip_prefix(':'))
        .is_some_and(|t| !t.is_empty() && t.chars().all(|c| c.is_ascii_hexdigit()))
}

/// Removes the images of repository `repo` (the lab image's,
/// [`crate::image_archive::IMAGE_REPO`]) whose only tags are content tags
/// ([`is_content_tag`]): the images of earlier binaries. An image a container still uses is
/// left alone (the engine refuses). Returns the tags removed.
///
/// # Errors
/// Listing images failed; a refused removal is skipped, not an error.
pub async fn remove_stale_images(docker: &Docker, repo: &str) -> anyhow::Result<Vec<String>> {
    let filters: HashMap<String, Vec<String>> = [("reference".to_string(), vec![repo.to_string()])]
        .into_iter()
        .collect();
    let images = call(
        docker,
        "list images",
        repo,
        docker.list_images(Some(ListImagesOptions {
            filters: Some(filters),
            ..Default::default()
        })),
    )
    .await?;
    let mut removed = Vec::new();
    for image in images {
        if image.repo_tags.is_empty() || !image.repo_tags.iter().all(|t| is_content_tag(t, repo)) {
            continue;
        }
        for tag in &image.repo_tags {
            let removal = docker.remove_image(tag, None::<RemoveImageOptions>, None);
            if let Ok(Ok(_)) = within(docker, CALL, removal).await {
                removed.push(tag.clone());
            }
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_content_hash_tags_are_stale() {
        assert!(is_content_tag("echolab:8a6fdb163b08", "echolab"));
        assert!(!is_content_tag("echolab:latest", "echolab"));
        assert!(!is_content_tag("echolab:nix", "echolab"));
        assert!(!is_content_tag("other:8a6fdb163b08", "echolab"));
        assert!(!is_content_tag("echolab:", "echolab"));
        assert!(!is_content_tag("echolabx:8a6fdb163b08", "echolab"));
        assert!(!is_content_tag("echolab8a6fdb163b08", "echolab"));
    }
}
