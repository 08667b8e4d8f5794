//! The link topology (DESIGN.md "Topologies"): a client network and a server network, and a
//! link host on both that routes between them and impairs each direction.
//!
//! The networks are bridges without IP masquerade, so nothing from them is NATed out of the
//! machine. They are not Docker "internal" networks: for those the engine installs filter
//! rules that drop any bridged packet whose destination lies outside the bridge's subnet,
//! which is every packet that the client sends to the server through the link.
//!
//! ```text
//! client host --[client net]-- link host --[server net]-- server host
//! ```
//!
//! - Link host: NET_ADMIN and /dev/net/tun only (never privileged), ip_forward=1 and
//!   rp_filter=0 (forwarded packets re-enter from the wire's TUN devices, which strict
//!   reverse-path filtering would drop). `echolab-netem probe` decides the backend: kernel
//!   netem (`echolab-netem apply`, read back) where the kernel has sch_netem, else the
//!   userspace wire (`echolab-netem wire`, running until teardown).
//! - Client and server hosts: no added capability. Their route to the other network via the
//!   link is set by a short-lived helper container that joins their network namespace with
//!   NET_ADMIN and runs `echolab-netem route`.
//! - Calibration: `echolab-netem calib-server` in the server host, `echolab-netem calibrate`
//!   from the client host, across the link; it checks RTT and goodput against the profile.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use anyhow::anyhow;
use bollard::models::NetworkCreateRequest;
use bollard::query_parameters::{LogsOptions, RemoveContainerOptions, WaitContainerOptions};
use bollard::Docker;
use echolab_core::cmd::{
    json_from_stdout, CalibServerReady, CalibrationReport, Ipv4Net, NetemCmd, ProbeResult,
    WIRE_READY_PREFIX,
};
use echolab_core::profile::Profile;
use echolab_core::results::{CalibrationCheck, CalibrationRecord, LinkRecord};
use futures_util::StreamExt as _;
use serde_json::json;

use super::engine::failed;
use super::exec;
use super::topology::{create_host, endpoint_sysctls, DockerHosts, HostSpec};
use super::{labels, object_name};
use crate::hosts::{ProcOutput, READY_DEADLINE, STOP_DEADLINE};
use crate::image::IMAGE_BIN_DIR;

/// Deadline of one calibration (40 RTT probes and two 1.3 s bulk transfers at most take
/// seconds; generous for a loaded 2-core machine).
pub const CALIBRATION_DEADLINE: Duration = Duration::from_secs(120);

fn bin(name: &str) -> String {
    format!("{IMAGE_BIN_DIR}/{name}")
}

/// The exec command line of `cmd` in a lab host.
fn netem(cmd: &NetemCmd) -> Vec<String> {
    let mut v = vec![bin(NetemCmd::PROGRAM)];
    v.extend(cmd.argv());
    v
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

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
    /// The running wire, kept so that its output is collected until teardown.
    _wire: Option<exec::Streaming>,
}

async fn create_network(
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

async fn ip_on(docker: &Docker, container: &str, network: &str) -> anyhow::Result<IpAddr> {
    let info = super::engine::call(
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

/// Runs a one-shot helper container to completion and removes it.
async fn run_helper(
    docker: &Docker,
    run_id: &str,
    image: &str,
    spec: &mut HostSpec,
) -> anyhow::Result<ProcOutput> {
    let id = create_host(docker, run_id, image, spec).await?;
    let name = object_name(run_id, &spec.role);
    let waited = tokio::time::timeout(
        STOP_DEADLINE,
        docker
            .wait_container(&id, None::<WaitContainerOptions>)
            .next(),
    )
    .await;
    let exit_code = match waited {
        Ok(Some(Ok(r))) => Some(r.status_code),
        Ok(Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. }))) => Some(code),
        Ok(Some(Err(e))) => return Err(failed("wait for container", &name, e)),
        Ok(None) => None,
        Err(_) => {
            return Err(anyhow!(
                "docker: container {name} did not finish within {STOP_DEADLINE:?}"
            ))
        }
    };
    let mut logs = docker.logs(
        &id,
        Some(LogsOptions {
            stdout: true,
            stderr: true,
            ..Default::default()
        }),
    );
    let (mut stdout, mut stderr) = (String::new(), String::new());
    while let Some(Ok(chunk)) = logs.next().await {
        match chunk {
            bollard::container::LogOutput::StdOut { message } => {
                stdout.push_str(&String::from_utf8_lossy(&message))
            }
            bollard::container::LogOutput::StdErr { message } => {
                stderr.push_str(&String::from_utf8_lossy(&message))
            }
            _ => {}
        }
    }
    docker
        .remove_container(
            &id,
            Some(RemoveContainerOptions {
                force: true,
                ..Default::default()
            }),
        )
        .await
        .map_err(|e| failed("remove container", &name, e))?;
    Ok(ProcOutput {
        exit_code,
        stdout,
        stderr,
    })
}

/// `ip` as IPv4: the lab's networks are IPv4 (their subnets are looked up as such).
fn ipv4(ip: IpAddr, what: &str) -> anyhow::Result<Ipv4Addr> {
    match ip {
        IpAddr::V4(v4) => Ok(v4),
        IpAddr::V6(_) => Err(anyhow!("{what} {ip} is not an IPv4 address")),
    }
}

async fn add_route(
    docker: &Docker,
    run_id: &str,
    image: &str,
    role: &str,
    target: &str,
    dst: &str,
    via: IpAddr,
) -> anyhow::Result<serde_json::Value> {
    let route = NetemCmd::Route {
        dst: dst
            .parse::<Ipv4Net>()
            .map_err(|e| anyhow!("docker: network subnet: {e}"))?,
        via: ipv4(via, "the link host's address")?,
    };
    let mut spec = HostSpec {
        role: format!("route-{role}"),
        network_mode: format!("container:{target}"),
        cap_add: vec!["NET_ADMIN".into()],
        cmd: Some(netem(&route)),
        ..Default::default()
    };
    let out = run_helper(docker, run_id, image, &mut spec).await?;
    if out.exit_code != Some(0) {
        return Err(anyhow!(
            "route {dst} via {via} in the {role} host: {}",
            out.describe()
        ));
    }
    Ok(
        json!({ "route": format!("{dst} via {via}"), "set_by": spec.record(&object_name(run_id, &spec.role), "removed after use") }),
    )
}

async fn device_with(docker: &Docker, container: &str, ip: IpAddr) -> anyhow::Result<String> {
    let cmd = netem(&NetemCmd::Ifname {
        address: ipv4(ip, "the link host's address")?,
    });
    let out = exec::run(docker, container, &cmd, STOP_DEADLINE).await?;
    let dev = out.stdout.trim().to_string();
    if out.exit_code != Some(0) || dev.is_empty() {
        return Err(anyhow!(
            "finding the link host's device with {ip}: {}",
            out.describe()
        ));
    }
    Ok(dev)
}

/// The spec of endpoint host `role` (client or server): attached to `net` only, with the
/// endpoint sysctls; the link host is its only way to the other side.
fn endpoint_on(role: &str, net: &str) -> HostSpec {
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
    run_id: String,
    image: String,
    server_security: Vec<String>,
    client_net: String,
    server_net: String,
    client_subnet: String,
    server_subnet: String,
    link_client_ip: IpAddr,
    link_server_ip: IpAddr,
    server_cpus: Option<String>,
    client_cpus: Option<String>,
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
            security_opt: self.server_security.clone(),
            cpuset: self.server_cpus.clone(),
            ..endpoint_on("server", &self.server_net)
        };
        let mut client_spec = HostSpec {
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

/// Brings up networks, hosts, routes and the link, and reads the link back.
///
/// # Errors
/// Any step, naming the object; what exists carries the run label for teardown.
pub async fn up(
    docker: &Docker,
    run_id: &str,
    image: &str,
    server_security: &[String],
    profile: &Profile,
    cpus: &echolab_core::results::CpuPlanRecord,
) -> anyhow::Result<LinkUp> {
    let (client_net, client_subnet) = create_network(docker, run_id, "client-net").await?;
    let (server_net, server_subnet) = create_network(docker, run_id, "server-net").await?;
    let link_sysctls = [
        ("net.ipv4.ip_forward", "1"),
        ("net.ipv4.conf.all.rp_filter", "0"),
        ("net.ipv4.conf.default.rp_filter", "0"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let mut link_spec = HostSpec {
        role: "link".into(),
        network_mode: client_net.clone(),
        extra_networks: vec![(client_net.clone(), None), (server_net.clone(), None)],
        cap_add: vec!["NET_ADMIN".into()],
        devices: vec!["/dev/net/tun".into()],
        sysctls: link_sysctls,
        cpuset: cpus.link.clone(),
        ..Default::default()
    };
    let link = create_host(docker, run_id, image, &mut link_spec).await?;
    let link_client_ip = ip_on(docker, &link, &client_net).await?;
    let link_server_ip = ip_on(docker, &link, &server_net).await?;
    let endpoints = Endpoints {
        run_id: run_id.to_string(),
        image: image.to_string(),
        server_security: server_security.to_vec(),
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
    let client_side = device_with(docker, &link, link_client_ip).await?;
    let server_side = device_with(docker, &link, link_server_ip).await?;

    let probe_out = exec::run(docker, &link, &netem(&NetemCmd::Probe), STOP_DEADLINE).await?;
    let probe: ProbeResult = json_from_stdout(&probe_out.stdout).map_err(|e| {
        anyhow!(
            "echolab-netem probe in the link host printed no probe result ({e}; {})",
            probe_out.describe()
        )
    })?;
    let has_netem = probe.has_netem;
    let probe_reason = probe.reason.clone();
    let (backend, installed, wire) = if has_netem {
        let cmd = netem(&NetemCmd::Apply {
            profile: profile.clone(),
            uplink_dev: server_side.clone(),
            downlink_dev: client_side.clone(),
        });
        let out = exec::run(docker, &link, &cmd, STOP_DEADLINE).await?;
        if out.exit_code != Some(0) {
            return Err(anyhow!(
                "echolab-netem apply in the link host: {}",
                out.describe()
            ));
        }
        // The read-back goes into the manifest as printed: free-form, not read by anything.
        let installed =
            serde_json::from_str(out.stdout.trim()).unwrap_or_else(|_| json!(out.stdout.trim()));
        ("kernel-netem", installed, None)
    } else {
        let cmd = netem(&NetemCmd::Wire {
            profile: profile.clone(),
            client_side: client_side.clone(),
            server_side: server_side.clone(),
            stats_interval: None,
        });
        let mut s = exec::start(docker, &link, &cmd, WIRE_READY_PREFIX).await?;
        let line = match tokio::time::timeout(READY_DEADLINE, &mut s.ready).await {
            Ok(Ok(line)) => line,
            Ok(Err(_)) => {
                let out = exec::finish(docker, s, STOP_DEADLINE).await?;
                return Err(anyhow!(
                    "echolab-netem wire in the link host exited before it was ready ({})",
                    out.describe()
                ));
            }
            Err(_) => {
                return Err(anyhow!(
                    "echolab-netem wire in the link host was not ready within {READY_DEADLINE:?}"
                ))
            }
        };
        (
            "userspace-wire",
            json!({ "ready": line.trim_start_matches(WIRE_READY_PREFIX) }),
            Some(s),
        )
    };
    let mut wire = wire;
    let tap = wire
        .as_mut()
        .and_then(|s| s.stdout_lines.take())
        .map(|lines| super::wiretap::WireTap::new(docker, &link, lines));
    let mut records = BTreeMap::new();
    let mut link_rec = link_spec.record(&object_name(run_id, "link"), &link);
    link_rec["addresses"] = json!({ "client_net": link_client_ip.to_string(), "server_net": link_server_ip.to_string() });
    link_rec["devices_by_side"] = json!({ "client": client_side, "server": server_side });
    records.insert("link".to_string(), link_rec);
    records.extend(made.records.clone());
    records.insert(
        "networks".to_string(),
        json!({ client_net: client_subnet, server_net: server_subnet }),
    );
    let reason = if has_netem {
        format!("the kernel has sch_netem ({probe_reason})")
    } else {
        format!("the kernel has no sch_netem ({probe_reason}); the userspace wire carries the link")
    };
    let link_record = LinkRecord {
        backend: backend.into(),
        reason,
        installed: json!({ "probe": probe, "installed": installed, "profile": profile.name }),
        calibration: None,
    };
    Ok(LinkUp {
        hosts: DockerHosts::behind_link(docker, made, endpoints, tap),
        records,
        link: link_record,
        server_ip,
        server,
        client,
        profile: profile.clone(),
        _wire: wire,
    })
}

/// The calibration record of an `echolab-netem calibrate --json` report.
pub fn record_of(report: &CalibrationReport) -> CalibrationRecord {
    let mut measured = BTreeMap::new();
    measured.insert("rtt_min_us".to_string(), report.rtt_min_us);
    measured.insert("rtt_median_us".to_string(), report.rtt_median_us);
    for (k, v) in [
        ("goodput_uplink_mbit", report.goodput_uplink_mbit),
        ("goodput_downlink_mbit", report.goodput_downlink_mbit),
    ] {
        if let Some(v) = v {
            measured.insert(k.to_string(), v);
        }
    }
    CalibrationRecord {
        passed: report.pass,
        reason: report.reason.clone(),
        measured,
        checks: report
            .checks
            .iter()
            .map(|c| CalibrationCheck {
                name: c.name.clone(),
                unit: c.unit.clone(),
                measured: c.measured,
                low: c.low,
                high: c.high,
                pass: c.pass,
            })
            .collect(),
        ..Default::default()
    }
}

impl LinkUp {
    /// Sends SIGKILL to echolab-netem in the server host (the calib-server), best effort: a
    /// failure here leaves it to the host's removal at teardown.
    async fn kill_calib_server(&self, docker: &Docker) {
        let _ = exec::run(
            docker,
            &self.server,
            &strings(&[&bin("echolab-up"), "__signal", NetemCmd::PROGRAM, "KILL"]),
            STOP_DEADLINE,
        )
        .await;
    }

    /// Calibrates across the link with echolab-netem (calib-server in the server host,
    /// calibrate in the client host).
    ///
    /// # Errors
    /// The tools could not run or printed no report (a miss is `passed: false`).
    pub async fn calibrate(&self, docker: &Docker) -> anyhow::Result<CalibrationRecord> {
        let cmd = netem(&NetemCmd::CalibServer {
            port: 0,
            bind: [0, 0, 0, 0].into(),
        });
        let mut s = exec::start(docker, &self.server, &cmd, CalibServerReady::PREFIX).await?;
        let line = match tokio::time::timeout(READY_DEADLINE, &mut s.ready).await {
            Ok(Ok(line)) => line,
            _ => {
                self.kill_calib_server(docker).await;
                return Err(anyhow!(
                    "echolab-netem calib-server in the server host did not get ready"
                ));
            }
        };
        let port = CalibServerReady::parse(&line)
            .map(|r| r.addr.port())
            .ok_or_else(|| anyhow!("calib-server readiness line has no address: {line}"))?;
        let cmd = netem(&NetemCmd::Calibrate {
            target: SocketAddr::new(self.server_ip, port),
            profile: self.profile.clone(),
            json: true,
        });
        let out = exec::run(docker, &self.client, &cmd, CALIBRATION_DEADLINE).await;
        self.kill_calib_server(docker).await;
        let _ = exec::finish(docker, s, STOP_DEADLINE).await;
        let out = out?;
        let report: CalibrationReport = json_from_stdout(&out.stdout).map_err(|e| {
            anyhow!(
                "echolab-netem calibrate printed no calibration report ({e}; {})",
                out.describe()
            )
        })?;
        Ok(record_of(&report))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_netem_report_becomes_a_calibration_record() {
        let report: CalibrationReport = serde_json::from_value(json!({
            "profile": "crossnet", "target": "10.0.0.2:7070", "probes": 40,
            "rtt_min_us": 19800.0, "rtt_median_us": 20900.0,
            "goodput_uplink_mbit": 46.5, "goodput_downlink_mbit": 47.0,
            "checks": [{"name": "rtt_median", "measured": 20900.0, "low": 18600.0, "high": 22100.0, "unit": "us", "pass": true, "reason": "ok"}],
            "pass": true, "reason": "all checks passed"
        }))
        .unwrap();
        let r = record_of(&report);
        assert!(r.passed);
        assert_eq!(r.measured["rtt_median_us"], 20900.0);
        assert_eq!((r.checks[0].low, r.checks[0].high), (18600.0, 22100.0));
        assert_eq!(r.checks[0].name, "rtt_median");
        let failed = record_of(&CalibrationReport {
            goodput_uplink_mbit: None,
            goodput_downlink_mbit: None,
            checks: vec![],
            pass: false,
            reason: "rtt_median 5000 us below 18600 us".into(),
            ..report
        });
        assert!(!failed.passed && failed.reason.contains("below"));
        assert!(
            !failed.measured.contains_key("goodput_uplink_mbit"),
            "an unmeasured goodput is left out, not recorded as 0"
        );
    }
}
