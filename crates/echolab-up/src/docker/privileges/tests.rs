use super::*;

fn experiment(yaml: &str) -> Experiment {
    Experiment::parse(yaml, "t.yaml").unwrap()
}

fn profile(yaml: &str) -> Profile {
    Profile::from_yaml(yaml, "p.yaml").unwrap()
}

const LINK_PROFILE: &str = "name: p\ndescription: d\nsource: s\ntopology: link\nuplink: { delay: 1ms, limit: 100 }\ndownlink: { delay: 1ms, limit: 300 }\nexpected:\n  rtt: { value: 2ms, minus: 1ms, plus: 1ms }\n";
const LOOPBACK_PROFILE: &str = "name: l\ndescription: d\nsource: s\ntopology: loopback\nexpected:\n  rtt: { value: 50us, minus: 49us, plus: 1ms }\n";

#[test]
fn endpoint_memory_grows_with_the_largest_cells_connections() {
    // exp33's scan: 100 to 5000 connections of the 12-byte payload, default 16 KiB read buffer.
    let exp = experiment(
        "name: t\nquestion: q\nrepetitions: 1\nmatrix:\n  - servers: [epoll-et]\n    modes: [short, long]\n    conns: [100, 5000]\n    rounds: [10]\n",
    );
    let l = endpoint_limits(&exp, 2);
    // Per connection: 131072 + 16384 (socket buffers) + 131072 (stack) + 16384 (read buffer)
    // + 12 + 12 (request, reply) = 294936 B; 5000 of them on top of 256 MiB.
    assert_eq!(l.memory_bytes, 268_435_456 + 5000 * 294_936);
    assert_eq!(l.memory_bytes, 1_743_115_456);
    // 256 + 5000 connections + 2 CPUs' worth of client threads.
    assert_eq!(l.pids, 5258);
    assert!(
        l.basis.contains("5000 connections × 294936 B"),
        "{}",
        l.basis
    );
}

#[test]
fn a_cell_with_fewer_but_larger_connections_can_set_the_memory() {
    // With a 4 KiB read buffer: 1000 × (278528 + 4096 + 12 + 12) B = 282,648,000 B, against
    // 100 × (278528 + 4096 + 4194304 + 4194304) B = 867,123,200 B for the 4 MiB payload.
    let exp = experiment(
        "name: t\nquestion: q\nrepetitions: 1\nmatrix:\n  - servers: [epoll-et]\n    modes: [long]\n    conns: [1000]\n    rounds: [1]\n  - servers: [thread]\n    modes: [long]\n    conns: [100]\n    rounds: [1]\n    payload: 4MiB\nserver:\n  read_buf: 4KiB\n  workers: 8\nbench:\n  threads: 4\n",
    );
    let l = endpoint_limits(&exp, 2);
    assert_eq!(l.memory_bytes, 268_435_456 + 867_123_200);
    // 256 + 1000 (the most connections of any cell) + 8 workers (more than 4 threads, 2 CPUs).
    assert_eq!(l.pids, 1264);
}

#[test]
fn a_sustain_cell_counts_its_reply_size() {
    let exp = experiment(
        "name: t\nquestion: q\nrepetitions: 1\nmatrix:\n  - servers: [epoll-et]\n    modes: [sustain]\n    conns: [10]\n    duration: 1s\n    reply_bytes: 1MiB\n",
    );
    // 10 × (147456 + 131072 + 16384 + 12 + 1048576) = 10 × 1343500 B.
    assert_eq!(
        endpoint_limits(&exp, 4).memory_bytes,
        268_435_456 + 13_435_000
    );
    assert_eq!(endpoint_limits(&exp, 4).pids, 256 + 10 + 4);
}

#[test]
fn link_memory_holds_both_queues_of_largest_packets() {
    let l = link_limits(&profile(LINK_PROFILE));
    // 128 MiB + (100 + 300) packets × 65535 B.
    assert_eq!(l.memory_bytes, 134_217_728 + 26_214_000);
    assert_eq!(l.pids, 128);
}

fn created(p: &Privileges) -> ContainerCreateBody {
    let mut body = ContainerCreateBody::default();
    p.apply(&mut body);
    body
}

fn limits() -> Limits {
    Limits {
        pids: 300,
        memory_bytes: 1 << 30,
        basis: "test".into(),
    }
}

#[test]
fn client_and_server_drop_everything_and_run_as_nobody() {
    let run = RunPrivileges::new(
        &experiment("name: t\nquestion: q\nrepetitions: 1\nmatrix:\n  - servers: [epoll-et]\n    modes: [long]\n    conns: [10]\n    rounds: [1]\n"),
        &profile(LOOPBACK_PROFILE),
        2,
        Seccomp::EngineDefault,
    );
    for p in [&run.server, &run.client] {
        let body = created(p);
        assert_eq!(body.user.as_deref(), Some("65534:65534"));
        let hc = body.host_config.unwrap();
        assert_eq!(hc.cap_drop, Some(vec!["ALL".to_string()]));
        assert_eq!(hc.cap_add, None);
        assert_eq!(hc.devices, None);
        assert_eq!(hc.privileged, Some(false));
        assert_eq!(hc.readonly_rootfs, Some(true));
        assert_eq!(hc.mounts, None, "loopback: no profile volume");
        assert_eq!(
            hc.security_opt,
            Some(vec!["no-new-privileges:true".to_string()])
        );
        // 256 + 10 + 2; 256 MiB + 10 × 294936 B.
        assert_eq!(hc.pids_limit, Some(268));
        assert_eq!(hc.memory, Some(268_435_456 + 2_949_360));
        assert_eq!(hc.memory_swap, hc.memory, "no swap beyond the limit");
    }
    let recorded = run.record(false);
    assert_eq!(
        recorded.keys().collect::<Vec<_>>(),
        ["client", "server"],
        "no link roles on loopback"
    );
    assert_eq!(recorded["server"].user, "65534:65534");
    assert!(recorded["server"].cap_add.is_empty() && recorded["server"].writable.is_empty());
}

#[test]
fn the_link_keeps_net_admin_and_the_tun_device_with_reasons() {
    let run = RunPrivileges::new(
        &experiment("name: t\nquestion: q\nrepetitions: 1\nmatrix:\n  - servers: [epoll-et]\n    modes: [long]\n    conns: [10]\n    rounds: [1]\n"),
        &profile(LINK_PROFILE),
        2,
        Seccomp::EngineDefault,
    );
    let body = created(&run.link);
    assert_eq!(body.user.as_deref(), Some("0:0"));
    let hc = body.host_config.unwrap();
    assert_eq!(hc.cap_drop, Some(vec!["ALL".to_string()]));
    assert_eq!(hc.cap_add, Some(vec!["NET_ADMIN".to_string()]));
    let dev = &hc.devices.unwrap()[0];
    assert_eq!(
        (
            dev.path_on_host.as_deref(),
            dev.path_in_container.as_deref()
        ),
        (Some("/dev/net/tun"), Some("/dev/net/tun"))
    );
    assert_eq!(hc.readonly_rootfs, Some(true));
    let mounts = hc.mounts.unwrap();
    assert_eq!(mounts.len(), 1);
    assert_eq!(mounts[0].target.as_deref(), Some("/etc/echolab"));
    assert_eq!(mounts[0].typ, Some(MountType::VOLUME));
    assert_eq!(
        mounts[0].source, None,
        "anonymous: removed with the container"
    );
    assert_eq!(
        hc.security_opt,
        Some(vec!["no-new-privileges:true".to_string()])
    );
    assert_eq!(hc.memory, Some(134_217_728 + 26_214_000));
    // Behind a link the client gets the profile volume, the server does not.
    assert!(created(&run.client).host_config.unwrap().mounts.is_some());
    assert!(created(&run.server).host_config.unwrap().mounts.is_none());
    let rec = run.record(true);
    assert_eq!(
        rec.keys().collect::<Vec<_>>(),
        ["client", "link", "route-helper", "server"]
    );
    let link = &rec["link"];
    assert_eq!(link.cap_add.keys().collect::<Vec<_>>(), ["NET_ADMIN"]);
    assert!(link.cap_add["NET_ADMIN"].contains("TUN"), "{link:?}");
    assert!(link.devices["/dev/net/tun"].contains("wire"), "{link:?}");
    assert!(link.read_only_rootfs && link.no_new_privileges);
}

#[test]
fn a_route_helper_has_only_net_admin() {
    let body = created(&Privileges::route_helper());
    assert_eq!(body.user.as_deref(), Some("0:0"));
    let hc = body.host_config.unwrap();
    assert_eq!(hc.cap_drop, Some(vec!["ALL".to_string()]));
    assert_eq!(hc.cap_add, Some(vec!["NET_ADMIN".to_string()]));
    assert_eq!((hc.devices, hc.mounts), (None, None));
    assert_eq!((hc.pids_limit, hc.memory), (Some(16), Some(64 << 20)));
}

#[test]
fn the_io_uring_profile_is_the_default_plus_three_calls() {
    let opts = created(&Privileges::endpoint(&limits(), Seccomp::DefaultWithUring))
        .host_config
        .unwrap()
        .security_opt
        .unwrap();
    assert_eq!(opts.len(), 2);
    assert_eq!(opts[0], "no-new-privileges:true");
    let json = opts[1].strip_prefix("seccomp=").unwrap();
    let profile: serde_json::Value = serde_json::from_str(json).unwrap();
    assert_eq!(profile["defaultAction"], "SCMP_ACT_ERRNO");
    let rules = profile["syscalls"].as_array().unwrap();
    // moby v28.5.2's default has 31 rules; the copy appends one.
    assert_eq!(rules.len(), 32);
    let naming_uring: Vec<_> = rules
        .iter()
        .filter(|r| {
            r["names"]
                .as_array()
                .unwrap()
                .iter()
                .any(|n| n.as_str().unwrap().starts_with("io_uring"))
        })
        .collect();
    assert_eq!(
        naming_uring.len(),
        1,
        "only the appended rule names io_uring"
    );
    let rule = naming_uring[0];
    assert_eq!(
        rule["names"],
        serde_json::json!(["io_uring_enter", "io_uring_register", "io_uring_setup"])
    );
    assert_eq!(rule["action"], "SCMP_ACT_ALLOW");
    assert!(
        rule.get("args").is_none() && rule.get("includes").is_none(),
        "unconditional: {rule}"
    );
    assert_eq!(rules.last(), Some(rule));
    assert_eq!(
        Seccomp::Unconfined.security_opt().as_deref(),
        Some("seccomp=unconfined")
    );
    assert_eq!(Seccomp::EngineDefault.security_opt(), None);
}

#[test]
fn the_profile_is_copied_into_the_profile_volume() {
    assert_eq!(
        crate::docker::link::PROFILE_IN_HOST,
        format!("{PROFILE_DIR}/profile.yaml")
    );
}

#[test]
fn the_manifest_keeps_the_records_and_reads_manifests_without_them() {
    let exp = experiment("name: t\nquestion: q\nrepetitions: 1\nmatrix:\n  - servers: [epoll-et]\n    modes: [long]\n    conns: [10]\n    rounds: [1]\n");
    let mut m = crate::plan::new_manifest(
        "run-1",
        vec![],
        "docker",
        exp.clone(),
        serde_json::json!({}),
        Default::default(),
        1,
    );
    // A manifest written before the field existed has no `privileges` key at all.
    let old = serde_yaml::to_string(&m).unwrap();
    assert!(!old.contains("privileges"), "{old}");
    let back: echolab_core::results::Manifest = serde_yaml::from_str(&old).unwrap();
    assert!(back.privileges.is_empty());
    m.privileges =
        RunPrivileges::new(&exp, &profile(LINK_PROFILE), 2, Seccomp::DefaultWithUring).record(true);
    let text = serde_yaml::to_string(&m).unwrap();
    let back: echolab_core::results::Manifest = serde_yaml::from_str(&text).unwrap();
    assert_eq!(back, m);
    assert_eq!(
        back.privileges["server"].memory_bytes,
        268_435_456 + 10 * 294_936
    );
    assert!(back.privileges["server"]
        .seccomp
        .starts_with("moby v28.5.2 default plus io_uring_setup"));
    assert_eq!(back.privileges["client"].seccomp, "docker default");
}
