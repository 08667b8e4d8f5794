//! The link topology's networks, and the addresses containers get on them.
//!
//! The client and server networks are bridges without IP masquerade, so nothing from them is
//! NATed out of the machine. They are not Docker "internal" networks: for those the engine
//! installs filter rules that drop any bridged packet whose destination lies outside the
//! bridge's subnet, which is every packet that the client sends to the server through the
//! link. The one exception is a lab's egress network ([`Masquerade::Yes`]): the link host's
//! way out of the client's machine to the server's, NATed to that machine's address.

use std::net::{IpAddr, Ipv4Addr};

use anyhow::anyhow;
use bollard::models::NetworkCreateRequest;
use bollard::Docker;

use crate::docker::deadlines::call;
use crate::docker::{labels, object_name};

/// Whether the engine NATs what leaves a network for other machines to its machine's address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Masquerade {
    /// Nothing leaves the machine from it (the link topology's two networks).
    No,
    /// Packets to other machines leave with the machine's address (a lab's egress network).
    Yes,
}

/// Creates network `role` of `run_id`; returns its name and IPv4 subnet (`172.20.0.0/16`).
///
/// # Errors
/// The engine refused, or gave the network no IPv4 subnet.
pub(super) async fn create_network(
    docker: &Docker,
    run_id: &str,
    role: &str,
    masquerade: Masquerade,
) -> anyhow::Result<(String, String)> {
    let name = object_name(run_id, role);
    let req = NetworkCreateRequest {
        name: name.clone(),
        driver: Some("bridge".into()),
        internal: Some(false),
        options: Some(
            [(
                "com.docker.network.bridge.enable_ip_masquerade".to_string(),
                (masquerade == Masquerade::Yes).to_string(),
            )]
            .into_iter()
            .collect(),
        ),
        labels: Some(labels(run_id, role)),
        ..Default::default()
    };
    let d = docker.clone();
    crate::docker::creations::create(docker, "create network", &name, async move {
        d.create_network(req).await
    })
    .await?;
    let info = call(
        docker,
        "inspect network",
        &name,
        docker.inspect_network(&name, None),
    )
    .await?;
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

/// The gateway address of `network` (its bridge's address on the host, the way out of the
/// machine).
///
/// # Errors
/// The inspect call failed, or the network has no IPv4 gateway.
pub(super) async fn gateway_of(docker: &Docker, network: &str) -> anyhow::Result<IpAddr> {
    let info = call(
        docker,
        "inspect network",
        network,
        docker.inspect_network(network, None),
    )
    .await?;
    info.ipam
        .and_then(|i| i.config)
        .and_then(|c| {
            c.into_iter()
                .filter_map(|c| c.gateway)
                .find_map(|g| g.parse::<Ipv4Addr>().ok())
        })
        .map(IpAddr::V4)
        .ok_or_else(|| anyhow!("docker: network {network} has no IPv4 gateway"))
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
    let info = call(
        docker,
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
