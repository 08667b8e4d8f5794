//! The plan of every shipped experiment on every shipped profile, on containers and on local
//! processes, and across the machines of a two-engine and a three-engine lab file, built
//! without an engine: which hosts and networks each run needs, and which runs are refused
//! before anything is contacted.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use echolab_core::experiment::Experiment;
use echolab_core::lab_file::Lab;
use echolab_core::lab_plan::{Attachment, Backend, LabPlan, PlanRefusal, Role, Shape};
use echolab_core::profile::{Profile, Topology};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn yaml_files(dir: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
}

fn experiments() -> Vec<Experiment> {
    let all: Vec<Experiment> = yaml_files("experiments")
        .iter()
        .map(|p| Experiment::load(p).unwrap())
        .collect();
    assert!(all.len() >= 7, "experiments/ holds {} files", all.len());
    all
}

fn profiles() -> Vec<Profile> {
    let all: Vec<Profile> = yaml_files("netem")
        .iter()
        .map(|p| Profile::load(p).unwrap())
        .collect();
    for t in [Topology::Loopback, Topology::Link, Topology::Native] {
        assert!(
            all.iter().any(|p| p.topology == t),
            "no shipped profile of topology {t:?}"
        );
    }
    all
}

/// Two engines (server `a`, client `b`), or three with client machines `b` and `c`.
fn lab(clients: &[&str]) -> Lab {
    let text = format!(
        "engines:\n  a: {{ endpoint: \"ssh://lab@10.0.0.1\" }}\n  b: {{ endpoint: \"ssh://lab@10.0.0.2\" }}\n  c: {{ endpoint: \"ssh://lab@10.0.0.3\" }}\nroles: {{ server: a, client: [{}] }}\n",
        clients.join(", ")
    );
    Lab::from_yaml(&text, Path::new("lab.yaml")).unwrap()
}

fn names(plan: &LabPlan) -> Vec<&str> {
    let mut n: Vec<&str> = plan.hosts.iter().map(|h| h.name.as_str()).collect();
    n.sort();
    n
}

fn attachment<'a>(plan: &'a LabPlan, host: &str) -> &'a Attachment {
    &plan
        .hosts
        .iter()
        .find(|h| h.name == host)
        .unwrap()
        .attachment
}

/// What holds in every plan: host names are unique; every network a host is attached to is
/// made on that host's engine; a shared namespace belongs to a host of the plan; the path
/// from client to server crosses a link host exactly when the profile has a link.
fn check_consistent(plan: &LabPlan, profile: &Profile, what: &str) {
    let unique: BTreeSet<&str> = plan.hosts.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(unique.len(), plan.hosts.len(), "{what}: {plan:#?}");
    for h in &plan.hosts {
        match &h.attachment {
            Attachment::Networks(nets) => {
                for n in nets {
                    assert!(
                        plan.networks
                            .iter()
                            .any(|net| &net.name == n && net.engine == h.engine),
                        "{what}: host {} is on network {n}, which is not made on its engine: {plan:#?}",
                        h.name
                    );
                }
            }
            Attachment::NamespaceOf(other) => {
                assert!(unique.contains(other.as_str()), "{what}: {plan:#?}")
            }
            _ => {}
        }
    }
    for net in &plan.networks {
        let used = plan
            .hosts
            .iter()
            .any(|h| matches!(&h.attachment, Attachment::Networks(n) if n.contains(&net.name) && h.engine == net.engine));
        assert!(used, "{what}: network {} has no host: {plan:#?}", net.name);
    }
    let links = plan.hosts_of(Role::Link).count();
    let clients = plan.hosts_of(Role::Client).count();
    match profile.topology {
        Topology::Link => assert_eq!(links, clients, "{what}: a link host per client machine"),
        _ => assert_eq!(links, 0, "{what}: {plan:#?}"),
    }
    assert_eq!(plan.hosts_of(Role::Server).count(), 1, "{what}");
}

#[test]
fn every_experiment_on_every_profile_on_one_machine_has_its_hosts_and_networks() {
    for exp in experiments() {
        for profile in profiles() {
            let what = format!("{} on {}", exp.name, profile.name);
            let containers = LabPlan::new(&profile, &exp, None, Backend::Containers, false);
            let processes = LabPlan::new(&profile, &exp, None, Backend::Processes, false);
            match profile.topology {
                Topology::Loopback => {
                    let plan = containers.unwrap();
                    check_consistent(&plan, &profile, &what);
                    assert_eq!(plan.shape, Shape::Loopback, "{what}");
                    assert_eq!(names(&plan), ["client", "server"], "{what}");
                    assert_eq!(
                        attachment(&plan, "client"),
                        &Attachment::NamespaceOf("server".into()),
                        "{what}: the client talks to 127.0.0.1 in the server's namespace"
                    );
                    assert!(plan.networks.is_empty(), "{what}");
                    let local = processes.unwrap();
                    assert_eq!(local.shape, Shape::Local, "{what}");
                    assert_eq!(names(&local), ["client", "server"], "{what}");
                }
                Topology::Link => {
                    let plan = containers.unwrap();
                    check_consistent(&plan, &profile, &what);
                    let q = plan.queue.as_ref().expect("a link's queue is sized");
                    for s in [&q.uplink, &q.downlink] {
                        assert!(u64::from(s.limit) >= q.packets_in_flight, "{what}: {q:?}");
                    }
                    assert_eq!(plan.shape, Shape::Link, "{what}");
                    assert_eq!(names(&plan), ["client", "link", "server"], "{what}");
                    let nets: Vec<&str> = plan.networks.iter().map(|n| n.name.as_str()).collect();
                    assert_eq!(nets, ["client-net", "server-net"], "{what}");
                    assert!(plan.networks.iter().all(|n| !n.masquerade), "{what}");
                    let (Attachment::Networks(c), Attachment::Networks(s)) =
                        (attachment(&plan, "client"), attachment(&plan, "server"))
                    else {
                        panic!("{what}: {plan:#?}")
                    };
                    assert!(
                        c.iter().all(|n| !s.contains(n)),
                        "{what}: client and server share no network, so every packet crosses the link host"
                    );
                    let PlanRefusal::Unsupported(e) = processes.unwrap_err() else {
                        panic!("{what}: a link on local processes is unsupported, not bad usage")
                    };
                    assert!(
                        e.contains(&profile.name) && e.contains("Docker backend"),
                        "{what}: {e}"
                    );
                }
                Topology::Native => {
                    for e in [containers.unwrap_err(), processes.unwrap_err()] {
                        let PlanRefusal::Usage(e) = e else {
                            panic!("{what}: {e}")
                        };
                        assert!(e.contains("--lab LAB.yaml"), "{what}: {e}");
                    }
                }
            }
        }
    }
}

#[test]
fn every_experiment_a_lab_can_run_gets_the_server_on_its_machine_and_each_client_machine_its_hosts()
{
    let mut planned = 0;
    for clients in [&["b"][..], &["b", "c"][..]] {
        let lab = lab(clients);
        for exp in experiments() {
            for profile in profiles() {
                if profile.topology == Topology::Loopback {
                    continue;
                }
                let what = format!("{} on {} across {clients:?}", exp.name, profile.name);
                let plan =
                    match LabPlan::new(&profile, &exp, Some(&lab), Backend::Containers, false) {
                        Ok(p) => p,
                        Err(e) => {
                            // Only a split the lab file cannot make is refused, with its reason.
                            assert!(clients.len() > 1, "{what}: {e}");
                            assert_eq!(Err(e.to_string()), lab.check_experiment(&exp), "{what}");
                            assert!(matches!(e, PlanRefusal::Usage(_)), "{what}");
                            continue;
                        }
                    };
                planned += 1;
                check_consistent(&plan, &profile, &what);
                let link = profile.topology == Topology::Link;
                assert_eq!(
                    plan.shape,
                    Shape::Across {
                        clients: clients.len(),
                        link
                    },
                    "{what}"
                );
                let server = plan.hosts_of(Role::Server).next().unwrap();
                assert_eq!(server.engine.as_deref(), Some("a"), "{what}");
                assert_eq!(server.attachment, Attachment::MachineNetwork, "{what}");
                let mut expected = vec!["server".to_string()];
                for (i, engine) in clients.iter().enumerate() {
                    let suffix = if i == 0 {
                        String::new()
                    } else {
                        format!("-{}", i + 1)
                    };
                    expected.push(format!("client{suffix}"));
                    let client = plan
                        .hosts
                        .iter()
                        .find(|h| h.name == format!("client{suffix}"))
                        .unwrap();
                    assert_eq!(client.engine.as_deref(), Some(*engine), "{what}");
                    if link {
                        expected.push(format!("link{suffix}"));
                        let egress = plan
                            .networks
                            .iter()
                            .find(|n| {
                                n.name == "egress-net" && n.engine.as_deref() == Some(*engine)
                            })
                            .unwrap();
                        assert!(
                            egress.masquerade,
                            "{what}: the link host's way out is masqueraded"
                        );
                    } else {
                        assert_eq!(client.attachment, Attachment::MachineNetwork, "{what}");
                    }
                }
                expected.sort();
                assert_eq!(names(&plan), expected, "{what}");
                assert_eq!(
                    plan.networks.len(),
                    if link { 2 * clients.len() } else { 0 }
                );
            }
        }
    }
    assert!(planned >= 20, "only {planned} lab plans were built");
}

#[test]
fn rules_that_join_two_inputs_are_refused_before_any_engine() {
    let exp = experiments()
        .into_iter()
        .find(|e| e.name == "smoke")
        .unwrap();
    let native = profiles()
        .into_iter()
        .find(|p| p.topology == Topology::Native)
        .unwrap();
    let e = LabPlan::new(&native, &exp, Some(&lab(&["b"])), Backend::Containers, true)
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("--cpu-plan: with --lab"), "{e}");
    assert!(LabPlan::new(
        &native,
        &exp,
        Some(&lab(&["b"])),
        Backend::Containers,
        false
    )
    .is_ok());
}

#[test]
fn the_plan_round_trips_through_the_manifest() {
    let exp = experiments()
        .into_iter()
        .find(|e| e.name == "smoke")
        .unwrap();
    for profile in profiles() {
        let lab = (profile.topology == Topology::Native).then(|| lab(&["b", "c"]));
        let plan = LabPlan::new(&profile, &exp, lab.as_ref(), Backend::Containers, false).unwrap();
        let text = serde_yaml::to_string(&plan).unwrap();
        assert_eq!(
            serde_yaml::from_str::<LabPlan>(&text).unwrap(),
            plan,
            "{text}"
        );
    }
}

#[test]
fn crossnet_holds_what_exp33s_5000_connections_put_in_flight_or_the_plan_says_what_it_needs() {
    let exp33 = Experiment::load(&root().join("experiments/exp33.yaml")).unwrap();
    let crossnet = Profile::load(&root().join("netem/crossnet.yaml")).unwrap();
    let plan = LabPlan::new(&crossnet, &exp33, None, Backend::Containers, false).unwrap();
    let q = plan.queue.clone().unwrap();
    // 5000 short connections: a request, an ACK and a SYN or FIN each, per direction.
    assert_eq!(
        (q.packets_in_flight, q.uplink.limit, q.downlink.limit),
        (15_000, 15_000, 15_000)
    );
    assert!(
        q.reason
            .starts_with("experiment exp33 puts up to 15000 packets"),
        "{}",
        q.reason
    );
    let sized = q.apply(&crossnet);
    assert_eq!(sized.uplink.unwrap().limit, Some(15_000));
    // The same profile with an access router's 500 packets is refused, naming what it needs.
    let mut narrow = crossnet.clone();
    narrow.downlink.as_mut().unwrap().limit = Some(500);
    let PlanRefusal::Usage(e) =
        LabPlan::new(&narrow, &exp33, None, Backend::Containers, false).unwrap_err()
    else {
        panic!("a usage error")
    };
    assert!(
        e.starts_with("profile crossnet: downlink.limit: 500 packets is below the 15000"),
        "{e}"
    );
    // The plan in the manifest keeps the sizing and its reason.
    let text = serde_yaml::to_string(&plan).unwrap();
    assert!(text.contains("packets_in_flight: 15000"), "{text}");
}
