//! What the link topology writes into the manifest: the link host's record (its settings,
//! addresses and which device faces which side), the networks, and the link record (backend,
//! why, what was installed).

use std::collections::BTreeMap;
use std::net::IpAddr;

use echolab_core::results::LinkRecord;
use serde_json::json;

use super::netem::Installed;

/// One of the two networks: its name, subnet, and the link host's address and device on it.
pub(super) struct Side {
    /// Its key in the link host's `addresses` (`client_net`, `server_net`, `egress_net`).
    pub(super) key: &'static str,
    /// Network name.
    pub(super) net: String,
    /// Its IPv4 subnet.
    pub(super) subnet: String,
    /// The link host's address on it.
    pub(super) link_ip: IpAddr,
    /// The link host's device on it.
    pub(super) device: String,
}

/// The hosts' records: the link host's (`link_record` is its [`HostSpec`] record, to which
/// addresses and devices by side are added), the endpoints', and the `networks` entry.
///
/// [`HostSpec`]: crate::docker::topology::HostSpec
pub(super) fn hosts(
    mut link_record: serde_json::Value,
    endpoints: &BTreeMap<String, serde_json::Value>,
    client: &Side,
    server: &Side,
) -> BTreeMap<String, serde_json::Value> {
    let mut records = BTreeMap::new();
    link_record["addresses"] =
        json!({ client.key: client.link_ip.to_string(), server.key: server.link_ip.to_string() });
    link_record["devices_by_side"] = json!({ "client": client.device, "server": server.device });
    records.insert("link".to_string(), link_record);
    records.extend(endpoints.clone());
    records.insert(
        "networks".to_string(),
        json!({ client.net.clone(): client.subnet, server.net.clone(): server.subnet }),
    );
    records
}

/// The manifest's link record: the backend, why it was chosen, and what it installed
/// (calibration is added once measured).
pub(super) fn link(installed: &Installed, profile_name: &str) -> LinkRecord {
    let probe_reason = &installed.probe.reason;
    let mut reason = if installed.probe.has_netem {
        format!("the kernel has sch_netem ({probe_reason})")
    } else {
        format!("the kernel has no sch_netem ({probe_reason}); the userspace wire carries the link")
    };
    if installed.across {
        reason.push_str(if installed.probe.has_netem {
            "; the kernel's source NAT (an nftables masquerade in the link host) translates the client's address to the link host's"
        } else {
            "; the wire translates the client's address to the link host's itself (the kernel's masquerade, which carried the baseline, is removed first)"
        });
    }
    LinkRecord {
        backend: installed.backend.into(),
        reason,
        installed: json!({ "probe": installed.probe, "installed": installed.installed, "profile": profile_name }),
        calibration: None,
    }
}

#[cfg(test)]
mod tests {
    use echolab_core::cmd::ProbeResult;

    use super::*;

    fn installed(has_netem: bool, across: bool) -> Installed {
        Installed {
            backend: if has_netem {
                "kernel-netem"
            } else {
                "userspace-wire"
            },
            probe: ProbeResult {
                has_netem,
                reason: "PROBE".into(),
                method: "fresh network namespace".into(),
            },
            installed: json!(null),
            wire: None,
            across,
        }
    }

    #[test]
    fn the_reason_says_which_backend_and_across_machines_who_translates() {
        let reasons: Vec<String> = [(true, false), (false, false), (true, true), (false, true)]
            .into_iter()
            .map(|(n, a)| link(&installed(n, a), "lan100").reason)
            .collect();
        assert_eq!(reasons[0], "the kernel has sch_netem (PROBE)");
        assert_eq!(
            reasons[1],
            "the kernel has no sch_netem (PROBE); the userspace wire carries the link"
        );
        assert_eq!(
            reasons[2],
            "the kernel has sch_netem (PROBE); the kernel's source NAT (an nftables masquerade in the link host) translates the client's address to the link host's"
        );
        assert_eq!(
            reasons[3],
            "the kernel has no sch_netem (PROBE); the userspace wire carries the link; the wire translates the client's address to the link host's itself (the kernel's masquerade, which carried the baseline, is removed first)"
        );
        let rec = link(&installed(true, true), "lan100");
        assert_eq!(rec.backend, "kernel-netem");
        assert_eq!(rec.installed["profile"], "lan100");
    }
}
