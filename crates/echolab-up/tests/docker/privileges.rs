//! Least privilege in a running lab: what `docker inspect` shows for each role of a kept
//! crossnet run, and what a client host cannot do. A submodule of tests/docker.rs, for its
//! helpers.

use std::path::{Path, PathBuf};
use std::time::Duration;

use echolab_runtime::docker::cleanup;
use echolab_testkit::TempDir;

use super::common::*;

/// Removes every object labelled with its run id on drop (never `--down`), even when the
/// test fails.
struct RemoveRun(String);

impl Drop for RemoveRun {
    fn drop(&mut self) {
        let e = engine();
        let _ = runtime().block_on(cleanup::remove_labelled(&e.docker, Some(&self.0)));
    }
}

/// A run kept up with `--keep`, removed when dropped.
struct KeptRun {
    run_id: String,
    manifest: echolab_core::results::Manifest,
    _remove: RemoveRun,
}

/// crossnet as shipped, written into `base`, but asking of calibration only that the link
/// carries at least 25.9 Mbit/s each way (47.07 +-45%) instead of 44.25: these tests look at
/// the containers' privileges, and need a link host with its link in effect, not the rate held
/// to 6%. Beside the suite's other tests a CI run on a 2-core VM measured this profile's
/// goodput at 34-43 Mbit/s in all three attempts of one of them (and 46-47 by hand, alone);
/// the rate's precision is the wire's own tests' and CI's main job's (`.ci/run`, smoke on the
/// shipped crossnet) to hold.
fn crossnet_for_privileges(base: &TempDir) -> PathBuf {
    let shipped = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../netem/crossnet.yaml"),
    )
    .unwrap();
    let line = "goodput: { value: 47.07mbit, tolerance: 6% }";
    assert!(shipped.contains(line), "crossnet's goodput line changed");
    write_input(
        base,
        "crossnet-any-rate.yaml",
        shipped.replace(line, "goodput: { value: 47.07mbit, tolerance: 45% }"),
    )
}

/// One long-connection cell of `conns` connections on crossnet (its goodput checked loosely,
/// [`crossnet_for_privileges`]), kept up afterwards.
fn kept_crossnet_run(base: &TempDir, conns: u64) -> KeptRun {
    let exp = write_input(base, "one-cell.yaml", format!("name: one-cell\nquestion: q\nrepetitions: 1\nmatrix:\n  - servers: [epoll-et]\n    modes: [long]\n    conns: [{conns}]\n    rounds: [2]\n"));
    let out = base.path().join("results");
    let bins = snapshot_bins(base);
    let profile = crossnet_for_privileges(base);
    let mut args = profile_experiment(profile.to_str().unwrap(), exp.to_str().unwrap()).to_vec();
    args.push("--keep");
    let o = run(&out, &bins, &args);
    let r = results(&out);
    let kept = KeptRun {
        run_id: r.manifest.run_id.clone(),
        _remove: RemoveRun(r.manifest.run_id.clone()),
        manifest: r.manifest,
    };
    assert!(o.status.success(), "echolab-up failed: {}", stderr(&o));
    kept
}

/// A kept crossnet run's container of `role`, as `docker inspect` shows it.
fn inspect(kept: &KeptRun, role: &str) -> bollard::models::ContainerInspectResponse {
    let name = echolab_runtime::docker::object_name(&kept.run_id, role);
    runtime()
        .block_on(engine().docker.inspect_container(&name, None))
        .unwrap_or_else(|e| panic!("inspect {name}: {e}"))
}

#[test]
fn a_running_labs_containers_hold_only_what_they_need() {
    let base = TempDir::new("up-docker-privs");
    let kept = kept_crossnet_run(&base, 40);
    let cpus = std::thread::available_parallelism().unwrap().get() as i64;
    assert_eq!(kept.manifest.environment.cpus as i64, cpus);
    // Client and server: 256 MiB + 40 connections × (131072 + 16384 socket buffers + 131072
    // stack + 16384 read buffer + 12 + 12 bytes of request and reply); 256 tasks + 40 + one
    // per CPU. The link: 128 MiB + 1000 + 1000 queued packets × 65535 B (crossnet gives no
    // limit and 40 connections need fewer than netem's default 1000); 128 tasks.
    let endpoint_memory = 268_435_456 + 40 * 294_936;
    let link_memory = 134_217_728 + 2000 * 65_535;
    let expected = [
        (
            "server",
            "65534:65534",
            vec![],
            endpoint_memory,
            256 + 40 + cpus,
            false,
        ),
        (
            "client",
            "65534:65534",
            vec![],
            endpoint_memory,
            256 + 40 + cpus,
            true,
        ),
        (
            "link",
            "0:0",
            vec!["NET_ADMIN", "NET_RAW", "SYS_NICE"],
            link_memory,
            128,
            true,
        ),
    ];
    for (role, user, cap_add, memory, pids, profile_volume) in expected {
        let c = inspect(&kept, role);
        let hc = c.host_config.unwrap();
        assert_eq!(c.config.unwrap().user.as_deref(), Some(user), "{role}");
        assert_eq!(hc.cap_drop, Some(vec!["ALL".to_string()]), "{role}");
        assert_eq!(hc.cap_add.unwrap_or_default(), cap_add, "{role}");
        assert_eq!(hc.privileged, Some(false), "{role}");
        assert_eq!(hc.readonly_rootfs, Some(true), "{role}");
        assert_eq!(
            hc.security_opt,
            Some(vec!["no-new-privileges:true".to_string()]),
            "{role}: the engine's default seccomp profile (smoke has no uring cell)"
        );
        assert_eq!(
            (hc.memory, hc.memory_swap, hc.pids_limit),
            (Some(memory), Some(memory), Some(pids)),
            "{role}"
        );
        let devices: Vec<_> = hc
            .devices
            .unwrap_or_default()
            .into_iter()
            .filter_map(|d| d.path_in_container)
            .collect();
        assert_eq!(
            devices,
            if role == "link" {
                vec!["/dev/net/tun"]
            } else {
                vec![]
            },
            "{role}"
        );
        let mounts: Vec<_> = c
            .mounts
            .unwrap_or_default()
            .into_iter()
            .map(|m| (m.destination.unwrap_or_default(), m.rw))
            .collect();
        let want = if profile_volume {
            vec![("/etc/echolab".to_string(), Some(true))]
        } else {
            vec![]
        };
        assert_eq!(
            mounts, want,
            "{role}: the only writable path is the profile volume"
        );
        let p = &kept.manifest.privileges[role];
        assert_eq!(
            (p.user.as_str(), p.memory_bytes, p.pids_limit),
            (user, memory, pids),
            "{role}"
        );
        assert!(p.read_only_rootfs && p.no_new_privileges, "{role}: {p:?}");
    }
    // The route helpers exited and were removed; their record says what they held.
    let helper = &kept.manifest.privileges["route-helper"];
    assert_eq!(helper.cap_add.keys().collect::<Vec<_>>(), ["NET_ADMIN"]);
    assert_eq!(
        (helper.user.as_str(), helper.cap_drop.clone()),
        ("0:0", vec!["ALL".to_string()])
    );
    let set_by = &kept.manifest.hosts["client"]["routes"][0]["set_by"];
    assert_eq!(set_by["cap_add"], serde_json::json!(["NET_ADMIN"]));
    let left = runtime()
        .block_on(cleanup::list_labelled(&engine().docker, Some(&kept.run_id)))
        .unwrap();
    let mut names = left.containers.clone();
    names.sort();
    let name = |role| {
        format!(
            "/{}",
            echolab_runtime::docker::object_name(&kept.run_id, role)
        )
    };
    assert_eq!(
        names,
        [name("client"), name("link"), name("server")],
        "no helper is left"
    );
}

/// Not a test of its own: what `a_client_host_cannot_change_routes_or_open_raw_sockets` runs
/// inside a client host (this very test binary, copied into the host's profile volume). Prints
/// the errno of a raw socket (0: it opened), and whether the soft nofile limit, once lowered,
/// can be raised back to the hard limit.
#[test]
#[ignore = "runs inside a lab host, started by a_client_host_cannot_change_routes_or_open_raw_sockets"]
fn in_host_raw_socket_and_nofile() {
    // SAFETY: socket(2) with constant arguments; a descriptor it returns is closed at exit.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_ICMP) };
    let errno = if fd >= 0 {
        0
    } else {
        std::io::Error::last_os_error().raw_os_error().unwrap()
    };
    println!("raw socket errno {errno}");
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    setrlimit(Resource::RLIMIT_NOFILE, 64, hard).unwrap();
    let raised = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    println!("nofile raised to hard {hard}: {raised:?}");
}

#[test]
fn a_client_host_cannot_change_routes_or_open_raw_sockets() {
    let base = TempDir::new("up-docker-noroute");
    let kept = kept_crossnet_run(&base, 2);
    let e = engine();
    let rt = runtime();
    let client = echolab_runtime::docker::object_name(&kept.run_id, "client");
    // Runs `cmd` in the client host as its own user, or as `user`; exit code and output.
    let exec = |cmd: &[&str], user: Option<&str>| {
        let opts = bollard::exec::CreateExecOptions {
            cmd: Some(cmd.iter().map(|s| s.to_string()).collect()),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            user: user.map(str::to_string),
            ..Default::default()
        };
        rt.block_on(async {
            let id = e.docker.create_exec(&client, opts).await.unwrap().id;
            let mut text = String::new();
            if let bollard::exec::StartExecResults::Attached { mut output, .. } =
                e.docker.start_exec(&id, None).await.unwrap()
            {
                while let Some(Ok(chunk)) = futures_util::StreamExt::next(&mut output).await {
                    text.push_str(&chunk.to_string());
                }
            }
            let code = e.docker.inspect_exec(&id).await.unwrap().exit_code;
            (code, text)
        })
    };
    // The command the client's route helper ran with NET_ADMIN, for another destination.
    let via = kept.manifest.hosts["link"]["addresses"]["client_net"]
        .as_str()
        .unwrap();
    let set = kept.manifest.hosts["client"]["routes"][0]["route"]
        .as_str()
        .unwrap();
    assert!(set.ends_with(&format!(" via {via}")), "{set}");
    let route = [
        "echolab-netem",
        "route",
        "--dst",
        "10.250.0.0/16",
        "--via",
        via,
    ];
    // This test binary, into the client's profile volume, to run its in-host part there.
    let data = std::fs::read(std::env::current_exe().unwrap()).unwrap();
    let mut tar = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_ustar();
    h.set_path("probe").unwrap();
    h.set_mode(0o755);
    h.set_size(data.len() as u64);
    h.set_cksum();
    tar.append(&h, &data[..]).unwrap();
    let body = bollard::body_full(tar.into_inner().unwrap().into());
    let opts = bollard::query_parameters::UploadToContainerOptions {
        path: "/etc/echolab".into(),
        ..Default::default()
    };
    rt.block_on(e.docker.upload_to_container(&client, Some(opts), body))
        .unwrap();
    let probe = [
        "/etc/echolab/probe",
        "privileges::in_host_raw_socket_and_nofile",
        "--exact",
        "--ignored",
        "--nocapture",
    ];
    // As the client's user, and even as root inside it: no capability either way.
    for user in [None, Some("0")] {
        let (code, text) = exec(&route, user);
        assert_eq!(code, Some(1), "{user:?}: {text}");
        assert!(text.contains("Operation not permitted"), "{user:?}: {text}");
        let (code, text) = exec(&probe, user);
        assert_eq!(code, Some(0), "{user:?}: {text}");
        assert!(
            text.contains("raw socket errno 1\n"),
            "{user:?}: EPERM: {text}"
        );
        assert!(
            text.contains(": Ok(())"),
            "{user:?}: the soft nofile limit goes back up to the hard one: {text}"
        );
    }
}

#[test]
fn the_io_uring_profile_lets_the_uring_server_run_and_without_its_rule_it_cannot() {
    use echolab_core::cmd::{ServerCmd, ServerModel};
    use echolab_runtime::docker::privileges::{Privileges, Seccomp, DEFAULT_WITH_URING};
    let e = engine();
    let rt = runtime();
    let base = TempDir::new("up-docker-uring");
    let bins = snapshot_bins(&base);
    let image = rt
        .block_on(echolab_runtime::docker::image::ensure(
            &e.docker,
            &bins,
            &[],
            None,
        ))
        .unwrap()
        .id;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let run = RemoveRun(format!("it-uring-{}-{nanos}", std::process::id()));
    let (ready, said) = rt
        .block_on(echolab_runtime::docker::uring::probe_under(
            &e.docker,
            &run.0,
            &image,
            Seccomp::DefaultWithUring,
        ))
        .unwrap();
    assert!(ready, "{said}");
    // The control: the same profile without its last rule, the one that allows io_uring, in a
    // server-like host made the same way.
    let mut profile: serde_json::Value = serde_json::from_str(DEFAULT_WITH_URING).unwrap();
    let rule = profile["syscalls"].as_array_mut().unwrap().pop().unwrap();
    assert_eq!(rule["names"][0], "io_uring_enter");
    let mut body = bollard::models::ContainerCreateBody {
        image: Some(image),
        cmd: Some(vec!["echolab-up".into(), "__hold".into()]),
        labels: Some(echolab_runtime::docker::labels(&run.0, "no-uring")),
        host_config: Some(bollard::models::HostConfig {
            network_mode: Some("none".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    Privileges::default().apply(&mut body);
    body.host_config.as_mut().unwrap().security_opt = Some(vec![
        "no-new-privileges:true".into(),
        format!("seccomp={profile}"),
    ]);
    let name = echolab_runtime::docker::object_name(&run.0, "no-uring");
    let options = bollard::query_parameters::CreateContainerOptionsBuilder::default()
        .name(&name)
        .build();
    let out = rt.block_on(async {
        let id = e
            .docker
            .create_container(Some(options), body)
            .await
            .unwrap()
            .id;
        e.docker.start_container(&id, None).await.unwrap();
        let mut cmd = vec![ServerCmd::PROGRAM.to_string()];
        cmd.extend(ServerCmd::new(ServerModel::Uring, [127, 0, 0, 1].into(), 0).argv());
        echolab_runtime::docker::exec::run(&e.docker, &id, &cmd, Duration::from_secs(60))
            .await
            .unwrap()
    });
    assert_ne!(out.exit_code, Some(0), "{}", out.describe());
    assert!(
        out.stderr.contains("io_uring is not available here"),
        "{}",
        out.describe()
    );
}

/// `bench.engine: uring`: echo-bench's ring engine in the client's container, which gets the
/// io_uring profile the probe allowed, while the server keeps the engine's default.
#[test]
fn an_experiment_can_choose_the_ring_engine_for_its_client() {
    let e = engine();
    let base = TempDir::new("up-docker-ring-client");
    let (mut cmd, out) = loopback_experiment(
        &base,
        "ring.yaml",
        "name: ring\nquestion: q\nrepetitions: 1\nwarmup: 100ms\nwindow: 300ms\nmatrix:\n  - servers: [epoll-et]\n    modes: [long]\n    conns: [10]\n    rounds: [10]\nbench: {engine: uring}\n",
    );
    let r = completed(&mut cmd, &out);
    let run = &r.runs[0];
    assert_eq!(run.error, None);
    let bench = run.bench.as_ref().expect("measured");
    assert_eq!(bench.engine, "uring");
    assert!(
        bench.requests_ok > 0 && bench.requests_failed == 0,
        "{bench:?}"
    );
    // The probe ran for the client, and the client got the profile it chose: the engine's
    // default where that allows io_uring (Docker before v25), else moby's plus io_uring.
    let probe = &r.manifest.hosts["io_uring"];
    let p = &r.manifest.privileges;
    assert_eq!(
        Some(p["client"].seccomp.as_str()),
        probe["server_seccomp"].as_str(),
        "{probe}"
    );
    assert_eq!(
        p["server"].seccomp, "docker default",
        "epoll-et needs no io_uring"
    );
    assert_nothing_left(&e, &r.manifest.run_id);
}
