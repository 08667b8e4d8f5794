//! The CPU plan: which CPUs each role (server, client, link) may run on, applied as the
//! host container's cpuset (`docker run --cpuset-cpus`) and recorded in the manifest.
//!
//! Client and server on the same cores measure each other: every microsecond of client CPU
//! is taken from the server under test, and the scheduler decides who runs, which moves a
//! figure from one repetition to the next. Mininet-HiFi (Handigol et al., "Reproducible
//! Network Experiments Using Container-Based Emulation", CoNEXT 2012) isolates each host's
//! CPU for this reason. The automatic plan gives the server and the client disjoint CPUs
//! whenever the machine has two or more, and puts the link (which carries both directions and
//! has no core of its own on a 2-core machine) beside the client, whose load it is part of.

use echolab_core::results::CpuPlanRecord;
use echolab_runtime::deploy::Placement;

/// What `--cpu-plan` asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CpuPlanChoice {
    /// Disjoint CPUs for server and client from the machine's count ([`auto`]).
    Auto,
    /// No pinning: every host may run on every CPU (the scheduler decides).
    Shared,
    /// Explicit cpuset lists per role.
    Explicit {
        /// The server's CPUs.
        server: String,
        /// The client's CPUs.
        client: String,
        /// The link's CPUs (default: the client's).
        link: Option<String>,
    },
}

/// Parses `--cpu-plan`: `auto`, `shared`, or `server=LIST,client=LIST[,link=LIST]` where
/// LIST is a cpuset list such as `0`, `1-3` or `0+2` (`+` joins CPUs, since `,` separates the
/// roles).
///
/// # Errors
/// A role that is missing, unknown or repeated, or a list that is not CPU numbers, naming it.
pub(crate) fn parse_choice(text: &str) -> Result<CpuPlanChoice, String> {
    match text {
        "auto" => return Ok(CpuPlanChoice::Auto),
        "shared" => return Ok(CpuPlanChoice::Shared),
        _ => {}
    }
    let (mut server, mut client, mut link) = (None, None, None);
    for part in text.split(',') {
        let (role, list) = part.split_once('=').ok_or_else(|| {
            format!(
                "{part:?} is not ROLE=CPUS; expected auto, shared or server=0,client=1[,link=1]"
            )
        })?;
        let list = cpuset_list(list).map_err(|e| format!("{role}={list}: {e}"))?;
        let slot = match role {
            "server" => &mut server,
            "client" => &mut client,
            "link" => &mut link,
            other => return Err(format!("unknown role {other:?} (server, client, link)")),
        };
        if slot.replace(list).is_some() {
            return Err(format!("{role} is given twice"));
        }
    }
    match (server, client) {
        (Some(server), Some(client)) => Ok(CpuPlanChoice::Explicit {
            server,
            client,
            link,
        }),
        _ => Err("an explicit plan names both server= and client=".into()),
    }
}

/// Checks a cpuset list written with `+` between items (`0+2`, `1-3`) and returns it in the
/// kernel's form (`0,2`, `1-3`).
fn cpuset_list(list: &str) -> Result<String, String> {
    let mut items = Vec::new();
    for item in list.split('+') {
        let ok = match item.split_once('-') {
            Some((a, b)) => {
                matches!((a.parse::<u32>(), b.parse::<u32>()), (Ok(a), Ok(b)) if a <= b)
            }
            None => item.parse::<u32>().is_ok(),
        };
        if !ok {
            return Err(format!("{item:?} is not a CPU number or range a-b"));
        }
        items.push(item);
    }
    Ok(items.join(","))
}

/// The automatic plan for a machine with `cpus` CPUs; `has_link` when the topology has a link
/// host.
///
/// - 1 CPU: nothing to separate; shared, and said so.
/// - 2 CPUs: server on CPU 0, client on CPU 1, the link (if any) with the client.
/// - 3 CPUs: server 0, client 1, link 2 (without a link: server 0, client 1-2).
/// - 4 or more: the link (if any) gets the last CPU, the rest is halved between server (the
///   lower half) and client.
pub(crate) fn auto(cpus: u64, has_link: bool) -> CpuPlanRecord {
    let list = |a: u64, b: u64| {
        if a == b {
            a.to_string()
        } else {
            format!("{a}-{b}")
        }
    };
    let mode = "auto".to_string();
    if cpus < 2 {
        return CpuPlanRecord {
            mode,
            machine_cpus: cpus,
            note: "one CPU: server, client and link share it".into(),
            ..Default::default()
        };
    }
    let (server, client, link, note) = match (cpus, has_link) {
        (2, true) => (list(0, 0), list(1, 1), Some(list(1, 1)), "server alone on CPU 0; client and link share CPU 1 (the link's work is part of the client's path)"),
        (2, false) => (list(0, 0), list(1, 1), None, "server alone on CPU 0, client alone on CPU 1"),
        (3, true) => (list(0, 0), list(1, 1), Some(list(2, 2)), "server, client and link on a CPU each"),
        (n, true) => {
            let half = (n - 1) / 2;
            (list(0, half - 1), list(half, n - 2), Some(list(n - 1, n - 1)), "server and client on disjoint halves, the link on the last CPU")
        }
        (n, false) => {
            let half = n / 2;
            (list(0, half - 1), list(half, n - 1), None, "server and client on disjoint halves")
        }
    };
    CpuPlanRecord {
        mode,
        server: Some(server),
        client: Some(client),
        link,
        machine_cpus: cpus,
        note: note.into(),
    }
}

/// The plan for `choice` on a machine with `cpus` CPUs.
///
/// # Errors
/// An explicit plan names a CPU the machine does not have.
pub(crate) fn resolve(
    choice: &CpuPlanChoice,
    cpus: u64,
    has_link: bool,
) -> Result<CpuPlanRecord, String> {
    match choice {
        CpuPlanChoice::Auto => Ok(auto(cpus, has_link)),
        CpuPlanChoice::Shared => Ok(CpuPlanRecord {
            mode: "shared".into(),
            machine_cpus: cpus,
            note: "--cpu-plan shared: no pinning; server, client and link float over every CPU"
                .into(),
            ..Default::default()
        }),
        CpuPlanChoice::Explicit {
            server,
            client,
            link,
        } => {
            for (role, l) in [
                ("server", Some(server)),
                ("client", Some(client)),
                ("link", link.as_ref()),
            ] {
                if let Some(max) = l.and_then(|l| highest_cpu(l)).filter(|&m| m >= cpus) {
                    return Err(format!(
                        "--cpu-plan: {role} names CPU {max}, but this machine has CPUs 0-{}",
                        cpus.saturating_sub(1)
                    ));
                }
            }
            let mut plan = CpuPlanRecord {
                mode: "explicit".into(),
                server: Some(server.clone()),
                client: Some(client.clone()),
                link: has_link.then(|| link.clone().unwrap_or_else(|| client.clone())),
                machine_cpus: cpus,
                note: "--cpu-plan as given".into(),
            };
            let shared = plan.shared_by_server_and_client();
            if !shared.is_empty() {
                let list: Vec<String> = shared.iter().map(u32::to_string).collect();
                plan.note = format!(
                    "--cpu-plan as given; server and client share CPU {}, so they compete for it",
                    list.join(",")
                );
            }
            Ok(plan)
        }
    }
}

/// The CPU plan of a run whose hosts are at `placement`: a lab's machines are not pinned (the
/// note names each), one engine's containers follow `choice` over this machine's `cpus`, and
/// local processes are not pinned.
///
/// # Errors
/// An explicit plan names a CPU the machine does not have ([`resolve`]).
pub(crate) fn for_run(
    choice: &CpuPlanChoice,
    placement: &Placement<'_>,
    cpus: u64,
    has_link: bool,
) -> Result<CpuPlanRecord, String> {
    match placement {
        Placement::Machines { server, clients } => {
            let named: Vec<String> = clients
                .iter()
                .map(|(name, cpus)| format!("engine {name}'s ({cpus} CPUs)"))
                .collect();
            Ok(CpuPlanRecord {
                mode: CpuPlanRecord::MACHINES.into(),
                machine_cpus: clients.first().map_or(0, |c| c.1),
                note: format!(
                    "server on engine {}'s machine ({} CPUs), client on {}; nothing pinned",
                    server.0,
                    server.1,
                    named.join(", ")
                ),
                ..Default::default()
            })
        }
        Placement::OneEngine => resolve(choice, cpus, has_link),
        Placement::ThisMachine => Ok(CpuPlanRecord {
            mode: "shared".into(),
            machine_cpus: cpus,
            note: "local backend: processes on this machine, not pinned".into(),
            ..Default::default()
        }),
    }
}

fn highest_cpu(list: &str) -> Option<u64> {
    list.split([',', '-'])
        .filter_map(|n| n.parse::<u64>().ok())
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_cpus_separate_server_from_client() {
        let p = auto(2, false);
        assert_eq!(
            (p.server.as_deref(), p.client.as_deref(), p.link.as_deref()),
            (Some("0"), Some("1"), None)
        );
        let p = auto(2, true);
        assert_eq!(
            (p.server.as_deref(), p.client.as_deref(), p.link.as_deref()),
            (Some("0"), Some("1"), Some("1"))
        );
    }

    #[test]
    fn larger_machines_split_disjointly() {
        let p = auto(8, true);
        assert_eq!(
            (p.server.as_deref(), p.client.as_deref(), p.link.as_deref()),
            (Some("0-2"), Some("3-6"), Some("7"))
        );
        let p = auto(4, false);
        assert_eq!(
            (p.server.as_deref(), p.client.as_deref()),
            (Some("0-1"), Some("2-3"))
        );
        let p = auto(3, true);
        assert_eq!(
            (p.server.as_deref(), p.client.as_deref(), p.link.as_deref()),
            (Some("0"), Some("1"), Some("2"))
        );
        let p = auto(1, true);
        assert_eq!((p.server, p.client, p.link), (None, None, None));
        assert!(p.note.contains("share"));
    }

    #[test]
    fn explicit_plans_parse_and_are_checked_against_the_machine() {
        let c = parse_choice("server=0+2,client=1-3").unwrap();
        assert_eq!(
            c,
            CpuPlanChoice::Explicit {
                server: "0,2".into(),
                client: "1-3".into(),
                link: None
            }
        );
        let p = resolve(&c, 4, true).unwrap();
        assert_eq!(
            p.note,
            "--cpu-plan as given; server and client share CPU 2, so they compete for it"
        );
        let apart = resolve(&parse_choice("server=0,client=1").unwrap(), 2, false).unwrap();
        assert_eq!(apart.note, "--cpu-plan as given");
        assert_eq!(
            p.link.as_deref(),
            Some("1-3"),
            "the link defaults to the client's CPUs"
        );
        let e = resolve(&c, 2, false).unwrap_err();
        assert!(e.contains("server names CPU 2") && e.contains("0-1"), "{e}");
        for bad in [
            "server=0",
            "server=x,client=1",
            "gpu=0,server=0,client=1",
            "server=0,server=1,client=1",
            "server=3-1,client=0",
        ] {
            assert!(parse_choice(bad).is_err(), "{bad} was accepted");
        }
        assert_eq!(parse_choice("shared").unwrap(), CpuPlanChoice::Shared);
        assert!(resolve(&CpuPlanChoice::Shared, 2, true)
            .unwrap()
            .server
            .is_none());
    }
}
