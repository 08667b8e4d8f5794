//! The link topology's two networks, and the addresses containers get on them.
//!
//! The networks are bridges without IP masquerade, so nothing from them is NATed out of the
//! machine. They are not Docker "internal" networks: for those the engine installs filter
//! rules that drop any bridged packet whose destination lies outside the bridge's subnet,
//! which is every packet that the client sends to the server through the link.

use std::net::{IpAddr, Ipv4Addr};

use anyhow::anyhow;
use bollard::models::NetworkCreateRequest;
use bollard::Docker;

use crate::docker::engine::failed;
use crate::docker::{labels, object_name};

/// Creates network `role` of `run_id`; returns its name and IPv4 subnet (`172.20.0.0/16`).
///
/// # Errors
/// The engine refused, or gave the network no IPv4 subnet.
pub(super) async fn create_network(
    docker: &Docker,
    run_id: &str,
    role: &str,
) -> anyhow::Result<(String, String)> {
    let name = object_name(run_id, role);
    let req = NetworkCreateRequest {
        name: name.clone(),
        driver: Some("bridge".into()),
        internal: Some(false),
        options: Some(
            [(
                "com.docker.network.bridge.enable_ip_masquerade".to_string(),
                "false".to_string(),
            )]
            .into_iter()
            .collect(),
        ),
        labels: Some(labels(run_id, role)),
        ..Default::default()
    };
    docker
        .create_network(req)
        .await
        .map_err(|e| failed("create network", &name, e))?;
    let info = docker
        .inspect_network(&name, None)
        .await
        .map_err(|e| failed("inspect network", &name, e))?;
    let subnet = info
        .ipam
        .and_then(|i| i.config)
        .and_then(|c| {
            c.into_iter()
                .find_map(|c| c.subnet.filter(|s| s.contains('.')))
        })
        .ok_or_else(|| anyhow!("docker: network {name} has no IPv4 subnet"))?;
    Ok((name, subnet))
}

/// The address of `container` on `network`.
///
/// # Errors
/// The inspect call failed, or the container has no address there.
pub(super) async fn ip_on(
    docker: &Docker,
    container: &str,
    network: &str,
) -> anyhow::Result<IpAddr> {
    let info = crate::docker::engine::call(
        "inspect container",
        container,
        docker.inspect_container(container, None),
    )
    .await?;
    info.network_settings
        .and_then(|n| n.networks)
        .and_then(|n| n.get(network).and_then(|e| e.ip_address.clone()))
        .and_then(|ip| ip.parse().ok())
        .ok_or_else(|| anyhow!("docker: container {container} has no address on network {network}"))
}

/// `ip` as IPv4: the lab's networks are IPv4 (their subnets are looked up as such).
pub(super) fn ipv4(ip: IpAddr, what: &str) -> anyhow::Result<Ipv4Addr> {
    match ip {
        IpAddr::V4(v4) => Ok(v4),
        IpAddr::V6(_) => Err(anyhow!("{what} {ip} is not an IPv4 address")),
    }
}
