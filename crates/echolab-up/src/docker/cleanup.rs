//! Removing Docker objects by label: one run's (teardown, also after an error or Ctrl-C) or
//! every echolab run's (`echolab-up --down`). Containers go first (forced), then networks,
//! which cannot be removed while a container is attached.

use std::collections::HashMap;

use bollard::query_parameters::{
    ListContainersOptions, ListNetworksOptions, RemoveContainerOptions,
};
use bollard::Docker;

use super::engine::failed;
use super::RUN_LABEL;

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

/// Removes every container and network labelled with `run_id` (or with any run id, when
/// None). Goes on past individual failures and reports them all.
///
/// # Errors
/// The objects that could not be listed or removed, each named.
pub async fn remove_labelled(docker: &Docker, run_id: Option<&str>) -> anyhow::Result<Removed> {
    let filters = label_filter(run_id);
    let mut removed = Removed::default();
    let mut errors = Vec::new();
    let containers = docker
        .list_containers(Some(ListContainersOptions {
            all: true,
            filters: Some(filters.clone()),
            ..Default::default()
        }))
        .await
        .map_err(|e| failed("list containers", &format!("labelled {filters:?}"), e))?;
    for c in containers {
        let id = c.id.unwrap_or_default();
        let name = c
            .names
            .and_then(|n| n.first().cloned())
            .unwrap_or_else(|| id.clone());
        let name = name.trim_start_matches('/').to_string();
        match docker
            .remove_container(
                &id,
                Some(RemoveContainerOptions {
                    force: true,
                    v: true,
                    ..Default::default()
                }),
            )
            .await
        {
            Ok(()) => removed.containers.push(name),
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => {}
            Err(e) => errors.push(failed("remove container", &name, e).to_string()),
        }
    }
    let networks = docker
        .list_networks(Some(ListNetworksOptions {
            filters: Some(filters.clone()),
        }))
        .await
        .map_err(|e| failed("list networks", &format!("labelled {filters:?}"), e))?;
    for n in networks {
        let name = n.name.or(n.id).unwrap_or_default();
        match docker.remove_network(&name).await {
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

/// Names of the containers and networks labelled with `run_id` (any run when None) that exist.
///
/// # Errors
/// The engine could not list them.
pub async fn list_labelled(docker: &Docker, run_id: Option<&str>) -> anyhow::Result<Removed> {
    let filters = label_filter(run_id);
    let containers = docker
        .list_containers(Some(ListContainersOptions {
            all: true,
            filters: Some(filters.clone()),
            ..Default::default()
        }))
        .await
        .map_err(|e| failed("list containers", "labelled", e))?;
    let networks = docker
        .list_networks(Some(ListNetworksOptions {
            filters: Some(filters),
        }))
        .await
        .map_err(|e| failed("list networks", "labelled", e))?;
    Ok(Removed {
        containers: containers
            .into_iter()
            .filter_map(|c| c.names.and_then(|n| n.first().cloned()))
            .collect(),
        networks: networks.into_iter().filter_map(|n| n.name).collect(),
    })
}
