//! The client and server hosts of a link topology: each on its own network, routed to the
//! other network through the link host. Made at start-up, and again for every cell that gets
//! fresh hosts.

use std::collections::BTreeMap;
use std::net::IpAddr;

use bollard::Docker;
use serde_json::json;

use super::helpers::add_route;
use super::networks::ip_on;
use crate::docker::object_name;
use crate::docker::privileges::RunPrivileges;
use crate::docker::topology::{create_host, endpoint_sysctls, HostSpec};

/// The spec of endpoint host `role` (client or server): attached to `net` only, with the
/// endpoint sysctls; the link host is its only way to the other side.
pub(super) fn endpoint_on(role: &str, net: &str) -> HostSpec {
    HostSpec {
        role: role.into(),
        network_mode: net.into(),
        extra_networks: vec![(net.into(), None)],
        sysctls: endpoint_sysctls(),
        ..Default::default()
    }
}

/// What it takes to make the client and server hosts of a link topology, once the networks
/// and the link host exist: at start-up, and again for every cell that gets fresh hosts.
#[derive(Debug, Clone)]
pub struct Endpoints {
    pub(super) run_id: String,
    pub(super) image: String,
    pub(super) privileges: RunPrivileges,
    pub(super) client_net: String,
    pub(super) server_net: String,
    pub(super) client_subnet: String,
    pub(super) server_subnet: String,
    pub(super) link_client_ip: IpAddr,
    pub(super) link_server_ip: IpAddr,
    pub(super) server_cpus: Option<String>,
    pub(super) client_cpus: Option<String>,
}

/// Client and server hosts as made by [`Endpoints::make`].
pub struct MadeEndpoints {
    /// Server container id.
    pub server: String,
    /// Client container id.
    pub client: String,
    /// The server's address on its network.
    pub server_ip: IpAddr,
    /// Their manifest records (`server`, `client`).
    pub records: BTreeMap<String, serde_json::Value>,
}

impl Endpoints {
    /// Creates the server and client hosts on their networks and routes each to the other
    /// network through the link host.
    ///
    /// # Errors
    /// Any step, naming the object; what exists carries the run label for teardown.
    pub async fn make(&self, docker: &Docker) -> anyhow::Result<MadeEndpoints> {
        let (run_id, image) = (self.run_id.as_str(), self.image.as_str());
        let mut server_spec = HostSpec {
            privileges: self.privileges.server.clone(),
            cpuset: self.server_cpus.clone(),
            ..endpoint_on("server", &self.server_net)
        };
        let mut client_spec = HostSpec {
            privileges: self.privileges.client.clone(),
            cpuset: self.client_cpus.clone(),
            ..endpoint_on("client", &self.client_net)
        };
        let server = create_host(docker, run_id, image, &mut server_spec).await?;
        let client = create_host(docker, run_id, image, &mut client_spec).await?;
        let server_ip = ip_on(docker, &server, &self.server_net).await?;
        let client_ip = ip_on(docker, &client, &self.client_net).await?;
        let client_route = add_route(
            docker,
            run_id,
            image,
            "client",
            &client,
            &self.server_subnet,
            self.link_client_ip,
        )
        .await?;
        let server_route = add_route(
            docker,
            run_id,
            image,
            "server",
            &server,
            &self.client_subnet,
            self.link_server_ip,
        )
        .await?;
        let mut records = BTreeMap::new();
        let mut server_rec = server_spec.record(&object_name(run_id, "server"), &server);
        server_rec["address"] = json!(server_ip.to_string());
        server_rec["routes"] = json!([server_route]);
        records.insert("server".to_string(), server_rec);
        let mut client_rec = client_spec.record(&object_name(run_id, "client"), &client);
        client_rec["address"] = json!(client_ip.to_string());
        client_rec["routes"] = json!([client_route]);
        records.insert("client".to_string(), client_rec);
        Ok(MadeEndpoints {
            server,
            client,
            server_ip,
            records,
        })
    }
}
