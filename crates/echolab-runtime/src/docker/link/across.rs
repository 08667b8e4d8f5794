//! A link profile between two machines of a lab (`--lab` with a `link` profile such as
//! lan100): the impairment is added on the client's machine, on top of the real path.
//!
//! ```text
//! client's machine:                                                       server's machine:
//! client host --[client net]-- link host --[egress net]-- NAT ==real path== server host
//! ```
//!
//! The client host gets a network of its own on its engine, routed to the server's address
//! through a link host there, as in the one-machine link topology; the link host's other leg
//! is an egress network whose packets leave the machine NATed to its address, so the server
//! host (host networking on its machine, [`crate::docker::lab`]) answers the client's machine
//! and needs no route of its own. Both directions are impaired in that one link host, which is
//! an egress shaper on a host. Docker masquerades only its own networks'
//! addresses, so the client's address is translated to the link host's own on the egress
//! network and back in the link host: by the kernel (`echolab-netem masquerade`, an nftables
//! masquerade) for the baseline and under kernel netem where the kernel has sch_netem, or by
//! the userspace wire itself (`echolab_netem::wire::nat`, the kernel's masquerade removed
//! first) where it has not; the link record says which. The baseline RTT is measured from the
//! client host before the link is installed, through the link host's plain forwarding and
//! that masquerade: the real path plus both NATs and the client's hop to the link host, which
//! calibration adds to what the profile adds (`echolab_core::calibration::sum_rtt_check`).
//!
//! The NAT keeps one conntrack entry per connection on the client's machine; the manifest's
//! link record says so, since a connection-rate cell pays for it.

use std::collections::BTreeMap;
use std::net::IpAddr;

use bollard::Docker;
use echolab_core::cmd::Masquerade;
use echolab_core::lab_plan::{CLIENT_NET, EGRESS_NET};
use echolab_core::profile::Profile;
use echolab_core::results::LinkRecord;
use serde_json::json;

use super::calibration::{self, MeasuredBaseline};
use super::endpoints::endpoint_on;
use super::helpers::add_route;
use super::netem::{device_with, install, kernel_masquerade};
use super::networks::{create_network, gateway_of, ip_on, ipv4, Masquerade as Nat};
use super::records::{self, Side};
use crate::docker::exec::Streaming;
use crate::docker::object_name;
use crate::docker::privileges::RunPrivileges;
use crate::docker::topology::{create_host, HostSpec};
use crate::docker::wiretap::WireTap;

/// The server host of a lab run, on its own engine, reached at `addr`.
pub struct RemoteServer<'a> {
    /// The server's engine.
    pub docker: &'a Docker,
    /// The server host (host networking).
    pub host: &'a str,
    /// The address of the server's machine that the client reaches it at.
    pub addr: IpAddr,
    /// Where that address comes from, for errors (`engines.a.address in lab.yaml`).
    pub addr_from: String,
}

/// The client side of a lab link, up.
pub struct AcrossUp {
    /// The client host's container id.
    pub client: String,
    /// Manifest records: `link`, `client`, `networks`.
    pub records: BTreeMap<String, serde_json::Value>,
    /// The installed link (backend, why, what).
    pub link: LinkRecord,
    /// The RTT from the client host to the server before the link was installed.
    pub baseline: MeasuredBaseline,
    /// The wire's counters, when it carries the link.
    pub tap: Option<WireTap>,
    /// Kernel netem's qdiscs, when they carry the link.
    pub qdiscs: Option<crate::docker::qdisctap::QdiscTap>,
    /// The running wire, kept so that its output is collected until teardown.
    pub wire: Option<Streaming>,
}

/// Makes the client host, the link host and their networks on `client_docker`, routes the
/// client to `server.addr` through the link host and the link host out of the machine,
/// measures the baseline, then installs `profile` in the link host.
///
/// # Errors
/// Any step, naming the object; what exists carries the run label for teardown.
pub async fn up(
    server: &RemoteServer<'_>,
    client_docker: &Docker,
    run_id: &str,
    image: &str,
    privileges: &RunPrivileges,
    profile: &Profile,
) -> anyhow::Result<AcrossUp> {
    let d = client_docker;
    let (client_net, client_subnet) = create_network(d, run_id, CLIENT_NET, Nat::No).await?;
    let (egress_net, egress_subnet) = create_network(d, run_id, EGRESS_NET, Nat::Yes).await?;
    let mut link_spec = super::link_host(privileges, &client_net, &egress_net, None);
    // The client's packets re-enter from the wire's TUN with the link host's own address as
    // their source (echolab_netem::wire::nat).
    link_spec
        .sysctls
        .insert("net.ipv4.conf.all.accept_local".into(), "1".into());
    let link = create_host(d, run_id, image, &mut link_spec).await?;
    let link_client_ip = ip_on(d, &link, &client_net).await?;
    let link_egress_ip = ip_on(d, &link, &egress_net).await?;
    let way_out = gateway_of(d, &egress_net).await?;
    let to_server = format!("{}/32", server.addr);
    let link_route = add_route(d, run_id, image, "link", &link, &to_server, way_out).await?;

    let mut client_spec = HostSpec {
        privileges: privileges.client.clone(),
        ..endpoint_on("client", &client_net)
    };
    let client = create_host(d, run_id, image, &mut client_spec).await?;
    let client_ip = ip_on(d, &client, &client_net).await?;
    let client_route = add_route(
        d,
        run_id,
        image,
        "client",
        &client,
        &to_server,
        link_client_ip,
    )
    .await?;

    // The baseline from the client host through the link host's plain forwarding, with the
    // kernel's masquerade translating the client's address (the machine's NAT masquerades
    // only the egress network's addresses): the whole path the link will sit on, as
    // forwarded as it gets. A wire adding nothing would not do: on a busy machine its own
    // wake-ups add 100 us and more, which a delay hides.
    let client_side = device_with(d, &link, link_client_ip).await?;
    let egress_side = device_with(d, &link, link_egress_ip).await?;
    let client_v4 = ipv4(client_ip, "the client host's address")?;
    kernel_masquerade(d, &link, Some((client_v4, egress_side.clone()))).await?;
    let baseline =
        calibration::baseline(server.docker, server.host, d, &client, server.addr, profile)
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "the real path from the client's machine to the server at {} ({}): {e:#}",
                    server.addr,
                    server.addr_from
                )
            })?;
    let masquerade = Some(Masquerade {
        client: client_v4,
        shared: ipv4(link_egress_ip, "the link host's egress address")?,
    });
    let mut installed = install(d, &link, profile, &client_side, &egress_side, masquerade).await?;
    let tap = installed
        .wire
        .as_mut()
        .and_then(|s| s.stdout_lines.take())
        .map(|lines| WireTap::new(d, &link, lines));
    // Kernel netem: the uplink's qdisc on the egress device, the downlink's on the client side.
    let qdiscs = (installed.backend == "kernel-netem")
        .then(|| crate::docker::qdisctap::QdiscTap::new(d, &link, &egress_side, &client_side));

    let mut link_record = link_spec.record(&object_name(run_id, "link"), &link);
    link_record["routes"] = json!([link_route]);
    let mut client_record = client_spec.record(&object_name(run_id, "client"), &client);
    client_record["address"] = json!(client_ip.to_string());
    client_record["routes"] = json!([client_route]);
    let records = records::hosts(
        link_record,
        &BTreeMap::from([("client".to_string(), client_record)]),
        &Side {
            key: "client_net",
            net: client_net,
            subnet: client_subnet,
            link_ip: link_client_ip,
            device: client_side,
        },
        &Side {
            key: "egress_net",
            net: egress_net,
            subnet: egress_subnet,
            link_ip: link_egress_ip,
            device: egress_side,
        },
    );
    let mut link = records::link(&installed, &profile.name);
    link.reason = format!(
        "{}; across machines: the link host is on the client's machine, between the client host and the machine's way out (NAT to its address, one conntrack entry per connection), and impairs both directions there, on top of the real path to the server at {} (the baseline, {:.1} us from the client host through the link host's plain forwarding, which calibration adds to what the profile adds)",
        link.reason,
        server.addr,
        baseline.rtt.as_secs_f64() * 1e6
    );
    Ok(AcrossUp {
        client,
        records,
        link,
        baseline,
        tap,
        qdiscs,
        wire: installed.wire,
    })
}
