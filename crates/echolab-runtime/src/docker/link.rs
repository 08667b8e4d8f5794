//! The link topology (docs/architecture.md, "Topologies"): a client network and a server
//! network, and a link host on both that routes between them and impairs each direction.
//!
//! ```text
//! client host --[client net]-- link host --[server net]-- server host
//! ```
//!
//! - Link host: NET_ADMIN and /dev/net/tun only ([`super::privileges`]), ip_forward=1 and
//!   rp_filter=0 (forwarded packets re-enter from the wire's TUN devices, which strict
//!   reverse-path filtering would drop). `echolab-netem probe` decides the backend: kernel
//!   netem (`echolab-netem apply`, read back) where the kernel has sch_netem, else the
//!   userspace wire (`echolab-netem wire`, running until teardown) (`netem`).
//! - Client and server hosts ([`endpoints`]): no added capability. Their route to the other
//!   network via the link is set by a short-lived helper container (`helpers`) that joins
//!   their network namespace with NET_ADMIN and runs `echolab-netem route`.
//! - `networks`: the two bridges; `records`: what goes into the manifest.
//! - [`calibration`]: `echolab-netem calib-server` in the server host, `echolab-netem
//!   calibrate` from the client host, across the link; it checks RTT and goodput against the
//!   profile.
//!
//! [`up`] does these steps in order; each module does one of them.

pub mod across;
pub mod calibration;
pub mod endpoints;
mod helpers;
mod netem;
mod networks;
mod records;

use std::collections::BTreeMap;
use std::net::IpAddr;

use bollard::Docker;
use echolab_core::lab_plan::{CLIENT_NET, SERVER_NET};
use echolab_core::profile::Profile;
use echolab_core::results::{CalibrationRecord, LinkRecord};

use super::docker_hosts::DockerHosts;
use super::object_name;
use super::privileges::RunPrivileges;
use super::topology::{create_host, HostSpec};
use endpoints::Endpoints;
use networks::{create_network, ip_on, Masquerade};
use records::Side;

/// The link topology once up.
pub struct LinkUp {
    /// Client and server hosts.
    pub hosts: DockerHosts,
    /// Host settings for the manifest.
    pub records: BTreeMap<String, serde_json::Value>,
    /// The installed link.
    pub link: LinkRecord,
    server_ip: IpAddr,
    server: String,
    client: String,
    /// The profile calibration checks the link against.
    profile: Profile,
    /// The RTT between client and server before the link was installed.
    baseline: calibration::MeasuredBaseline,
    /// The running wire, kept so that its output is collected until teardown.
    _wire: Option<super::exec::Streaming>,
}

/// The link host's spec: on `client_net` and `server_net` (the network towards the server),
/// with the link's capabilities, forwarding on, and reverse-path filtering off (forwarded
/// packets re-enter from the wire's TUN devices).
pub(super) fn link_host(
    privileges: &RunPrivileges,
    client_net: &str,
    server_net: &str,
    cpuset: Option<String>,
) -> HostSpec {
    let sysctls = [
        ("net.ipv4.ip_forward", "1"),
        ("net.ipv4.conf.all.rp_filter", "0"),
        ("net.ipv4.conf.default.rp_filter", "0"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    HostSpec {
        role: "link".into(),
        network_mode: client_net.into(),
        extra_networks: vec![(client_net.into(), None), (server_net.into(), None)],
        privileges: privileges.link.clone(),
        sysctls,
        cpuset,
        ..Default::default()
    }
}

/// Brings up networks, hosts, routes and the link, and reads the link back.
///
/// # Errors
/// Any step, naming the object; what exists carries the run label for teardown.
pub async fn up(
    docker: &Docker,
    run_id: &str,
    image: &str,
    privileges: &RunPrivileges,
    profile: &Profile,
    cpus: &echolab_core::results::CpuPlanRecord,
) -> anyhow::Result<LinkUp> {
    let (client_net, client_subnet) =
        create_network(docker, run_id, CLIENT_NET, Masquerade::No).await?;
    let (server_net, server_subnet) =
        create_network(docker, run_id, SERVER_NET, Masquerade::No).await?;
    let mut link_spec = link_host(privileges, &client_net, &server_net, cpus.link.clone());
    let link = create_host(docker, run_id, image, &mut link_spec).await?;
    let link_client_ip = ip_on(docker, &link, &client_net).await?;
    let link_server_ip = ip_on(docker, &link, &server_net).await?;
    let endpoints = Endpoints {
        run_id: run_id.to_string(),
        image: image.to_string(),
        privileges: privileges.clone(),
        client_net: client_net.clone(),
        server_net: server_net.clone(),
        client_subnet: client_subnet.clone(),
        server_subnet: server_subnet.clone(),
        link_client_ip,
        link_server_ip,
        server_cpus: cpus.server.clone(),
        client_cpus: cpus.client.clone(),
    };
    let made = endpoints.make(docker).await?;
    let (server, client, server_ip) = (made.server.clone(), made.client.clone(), made.server_ip);
    // Before the link is installed the link host forwards plainly: the path's own RTT, which
    // calibration subtracts to check what the link adds.
    let baseline =
        calibration::baseline(docker, &server, docker, &client, server_ip, profile).await?;
    let client_side = netem::device_with(docker, &link, link_client_ip).await?;
    let server_side = netem::device_with(docker, &link, link_server_ip).await?;
    let mut installed =
        netem::install(docker, &link, profile, &client_side, &server_side, None).await?;
    let tap = installed
        .wire
        .as_mut()
        .and_then(|s| s.stdout_lines.take())
        .map(|lines| super::wiretap::WireTap::new(docker, &link, lines));
    // Kernel netem: the uplink's qdisc on the server-side device, the downlink's on the
    // client-side one (as `netem::install` applied them).
    let qdiscs = (installed.backend == "kernel-netem")
        .then(|| super::qdisctap::QdiscTap::new(docker, &link, &server_side, &client_side));
    let records = records::hosts(
        link_spec.record(&object_name(run_id, "link"), &link),
        &made.records,
        &Side {
            key: "client_net",
            net: client_net,
            subnet: client_subnet,
            link_ip: link_client_ip,
            device: client_side,
        },
        &Side {
            key: "server_net",
            net: server_net,
            subnet: server_subnet,
            link_ip: link_server_ip,
            device: server_side,
        },
    );
    let link_record = records::link(&installed, &profile.name);
    Ok(LinkUp {
        hosts: DockerHosts::behind_link(docker, made, endpoints, tap, qdiscs),
        records,
        link: link_record,
        server_ip,
        server,
        client,
        profile: profile.clone(),
        baseline,
        _wire: installed.wire,
    })
}

impl LinkUp {
    /// Calibrates across the link with echolab-netem (calib-server in the server host,
    /// calibrate in the client host; [`calibration`]), checking the RTT the link adds over
    /// the baseline measured before it was installed; the wire's counters across it go into
    /// the record.
    ///
    /// # Errors
    /// The tools could not run or printed no report (a miss is `passed: false`).
    pub async fn calibrate(&mut self, docker: &Docker) -> anyhow::Result<CalibrationRecord> {
        let run = calibration::calibrate(
            docker,
            &self.server,
            docker,
            &self.client,
            self.server_ip,
            &self.profile,
            calibration::Baseline::OneMachine(self.baseline),
        );
        self.hosts.count_link(run).await
    }

    /// The hosts, and the running wire whose output must be collected until teardown.
    pub fn into_parts(self) -> (DockerHosts, Option<super::exec::Streaming>) {
        (self.hosts, self._wire)
    }
}
