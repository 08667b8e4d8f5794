//! Every command line the launcher can build, parsed by the binary it is for with that binary's
//! own clap definition (`echo_server::cli::Args`, `echolab_core::cmd::BenchCli`,
//! `echolab_netem::cli::Cli`), and each parsed value compared with what the builder was given.
//! A flag renamed or removed in a binary, or spelled differently in `echolab_core::cmd`, fails
//! here instead of inside a container.
//!
//! Coverage: every cell of every `experiments/*.yaml`; an experiment that sets every server
//! and client option the experiment format has, for every model and mode; every field of
//! every builder set at once (struct literals without `..`, so a new field does not compile
//! until it is covered here; echo-bench's in `echolab_core::cmd::bench_cli`'s tests, since
//! its builder is its clap definition); every variant of every builder (an exhaustive
//! `match`), with the project's profiles handed over as `--profile-json`; the calibration
//! probe's commands.

use std::iter::once;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use clap::Parser as _;
use echolab_core::cmd::{
    BenchCli, BenchCmd, BenchEngine, ClientOpts, CustomServerCmd, NetemCmd, ServerCmd, ServerCpus,
    ServerLaunch, ServerModel, ServerOpts,
};
use echolab_core::experiment::{BenchMode, Experiment, MatrixBlock};
use echolab_core::profile::Profile;
use echolab_core::units::{ByteSize, Dur};
use echolab_netem::cli::{Cmd as NetemParsed, ProfileArg};
use echolab_up::commands::{bench_cmd, server_cmd};
use echolab_up::rtt_probe::{probe_bench_cmd, probe_server_cmd};

fn argv_of(program: &str, args: &[String]) -> Vec<String> {
    once(program.to_string())
        .chain(args.iter().cloned())
        .collect()
}

fn dur(s: &str) -> Dur {
    s.parse().unwrap()
}

/// Parses `cmd` with echo-server's clap and checks that each flag landed on its field.
/// An echo-server command line, or a custom server's under the launcher's `__serve` job, whose
/// arguments end with the command as the experiment gives it.
fn check_launch(launch: &ServerLaunch) {
    match launch {
        ServerLaunch::Model(cmd) => check_server(cmd),
        ServerLaunch::Custom(c) => {
            let args = c.argv();
            assert_eq!(args[0], CustomServerCmd::JOB);
            let dashes = args.iter().position(|a| a == "--").expect("a `--`");
            assert_eq!(args[dashes + 1..], c.command[..], "{args:?}");
        }
    }
}

fn check_server(cmd: &ServerCmd) {
    let args = cmd.argv();
    let a = echo_server::cli::Args::try_parse_from(argv_of(ServerCmd::PROGRAM, &args))
        .unwrap_or_else(|e| panic!("echo-server {}: {}", args.join(" "), e.render()));
    let line = args.join(" ");
    assert_eq!(a.model, cmd.model, "{line}");
    assert_eq!((a.bind, a.port), (cmd.bind, cmd.port), "{line}");
    assert_eq!(a.reply_bytes.map(|r| r as u64), cmd.reply_bytes, "{line}");
    assert_eq!(a.stats_interval, cmd.stats_interval.map(|d| d.0), "{line}");
    // The same type on both sides: one comparison covers every option an experiment sets.
    assert_eq!(a.opts, cmd.opts, "{line}");
}

/// Parses `cmd` with echo-bench's clap: the same structs the launcher filled
/// (`echolab_core::cmd::BenchCli`), so one comparison covers every field; `strace` is the
/// launcher's and never on the line.
fn check_bench(cmd: &BenchCmd) {
    let args = cmd.argv();
    let line = args.join(" ");
    let parsed = BenchCli::try_parse_from(argv_of(BenchCmd::PROGRAM, &args))
        .unwrap_or_else(|e| panic!("echo-bench {line}: {}", e.render()))
        .into_cmd();
    let mut sent = cmd.clone();
    sent.shared_mut().client.strace = false;
    assert_eq!(parsed, sent, "echo-bench {line}");
}

/// The profile a parsed echolab-netem command carries: the launcher always hands over the
/// resolved profile itself (`--profile-json`), never a name for netem to look up again.
fn handed_over(arg: &ProfileArg, line: &str) -> Profile {
    assert_eq!(arg.profile, None, "{line}");
    arg.profile_json
        .clone()
        .unwrap_or_else(|| panic!("no --profile-json: {line}"))
}

/// Parses `cmd` with echolab-netem's clap and checks that each flag landed on its field.
fn check_netem(cmd: &NetemCmd) {
    let args = cmd.argv();
    let line = args.join(" ");
    let cli = echolab_netem::cli::Cli::try_parse_from(argv_of(NetemCmd::PROGRAM, &args))
        .unwrap_or_else(|e| panic!("echolab-netem {line}: {}", e.render()));
    match (cmd, &cli.command) {
        (NetemCmd::Probe, NetemParsed::Probe) => {}
        (NetemCmd::Show { dev }, NetemParsed::Show { dev: parsed }) => {
            assert_eq!(dev, parsed, "{line}")
        }
        (
            NetemCmd::Apply {
                profile,
                uplink_dev,
                downlink_dev,
            },
            NetemParsed::Apply {
                profile: p,
                uplink_dev: u,
                downlink_dev: d,
            },
        ) => {
            assert_eq!(handed_over(p, &line), *profile, "{line}");
            assert_eq!((u, d), (uplink_dev, downlink_dev), "{line}");
        }
        (
            NetemCmd::Wire {
                profile,
                client_side,
                server_side,
                stats_interval,
                masquerade,
            },
            NetemParsed::Wire {
                profile: p,
                client_side: c,
                server_side: s,
                stats_interval: i,
                masquerade_client: mc,
                masquerade_as: ma,
                ..
            },
        ) => {
            assert_eq!(handed_over(p, &line), *profile, "{line}");
            assert_eq!((c, s), (client_side, server_side), "{line}");
            assert_eq!(*i, stats_interval.map(|d| d.0), "{line}");
            assert_eq!(*mc, masquerade.map(|m| m.client), "{line}");
            assert_eq!(*ma, masquerade.map(|m| m.shared), "{line}");
        }
        (
            NetemCmd::Calibrate {
                target,
                profile,
                json,
                baseline_rtt,
                across_machines,
            },
            NetemParsed::Calibrate {
                target: t,
                profile: p,
                json: j,
                baseline_rtt: b,
                across_machines: m,
                ..
            },
        ) => {
            assert_eq!(handed_over(p, &line), *profile, "{line}");
            assert_eq!((t, j), (target, json), "{line}");
            assert_eq!(*b, baseline_rtt.map(|d| d.0), "{line}");
            assert_eq!(m, across_machines, "{line}");
        }
        (
            NetemCmd::Rtt { target, pace },
            NetemParsed::Rtt {
                target: t, pace: p, ..
            },
        ) => {
            assert_eq!(t, target, "{line}");
            assert_eq!(
                *p,
                pace.map_or(std::time::Duration::ZERO, |d| d.0),
                "{line}"
            );
        }
        (NetemCmd::CalibServer { port, bind }, NetemParsed::CalibServer { port: p, bind: b }) => {
            assert_eq!((p, b), (port, bind), "{line}")
        }
        (NetemCmd::Route { dst, via }, NetemParsed::Route { dst: d, via: v }) => {
            assert_eq!((d, v), (dst, via), "{line}")
        }
        (NetemCmd::Ifname { address }, NetemParsed::Ifname { address: a }) => {
            assert_eq!(a, address, "{line}")
        }
        (
            NetemCmd::Masquerade { install },
            NetemParsed::Masquerade {
                client,
                out,
                remove,
            },
        ) => {
            let parsed = client.zip(out.clone());
            assert_eq!(parsed, *install, "{line}");
            assert_eq!(*remove, install.is_none(), "{line}");
        }
        (c, parsed) => panic!("echolab-netem {line}: {c:?} parsed as {parsed:?}"),
    }
}

/// The server and client commands of every cell of `exp`, for both hosts' bind addresses.
fn check_experiment(exp: &Experiment) -> Vec<BenchMode> {
    let target: SocketAddr = "10.77.72.10:41234".parse().unwrap();
    let mut modes = Vec::new();
    for cell in exp.cells() {
        for bind in ["127.0.0.1", "0.0.0.0"] {
            let bind: IpAddr = bind.parse().unwrap();
            check_launch(&server_cmd(exp, &cell, bind).unwrap());
        }
        for server_cpus in [ServerCpus::Shared, ServerCpus::Separate] {
            check_bench(&bench_cmd(exp, &cell, target, server_cpus));
        }
        modes.push(cell.mode);
    }
    modes
}

fn experiments_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments")
}

#[test]
fn every_cell_of_every_experiment_file_parses() {
    let mut files = 0;
    let mut modes = Vec::new();
    for entry in std::fs::read_dir(experiments_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let exp = Experiment::load(&path).unwrap_or_else(|e| panic!("{e}"));
            modes.extend(check_experiment(&exp));
            files += 1;
        }
    }
    assert!(files >= 6, "only {files} experiment files found");
    for m in [
        BenchMode::Short,
        BenchMode::Long,
        BenchMode::ConnectStorm,
        BenchMode::Sustain,
    ] {
        assert!(modes.contains(&m), "no experiment file has a {m:?} cell");
    }
}

#[test]
fn every_experiment_option_parses_for_every_model_and_mode() {
    let base = "name: all\nquestion: q\nrepetitions: 1\nmatrix:\n  - servers: [epoll-et]\n    modes: [long]\n    conns: [1]\n    rounds: [1]\n";
    for (engine, linger0) in [(BenchEngine::Thread, true), (BenchEngine::Event, false)] {
        let mut exp = Experiment::parse(base, "all.yaml").unwrap();
        let servers: Vec<String> = ServerModel::all().iter().map(|m| m.to_string()).collect();
        let block = |modes: Vec<BenchMode>, rounds: Vec<u64>, duration: Option<&str>| MatrixBlock {
            servers: servers.iter().map(|s| s.as_str().into()).collect(),
            modes,
            conns: vec![1, 5000],
            rounds,
            duration: duration.map(dur),
            payload: None,
            reply_bytes: None,
            hist: true,
            rate: None,
            time_syscalls: false,
        };
        exp.matrix = vec![
            block(vec![BenchMode::Short, BenchMode::Long], vec![1, 10], None),
            MatrixBlock {
                payload: Some(ByteSize(64)),
                ..block(vec![BenchMode::Short, BenchMode::Long], vec![], Some("2s"))
            },
            MatrixBlock {
                reply_bytes: Some(ByteSize(1024)),
                ..block(
                    vec![BenchMode::ConnectStorm, BenchMode::Sustain],
                    vec![],
                    Some("3s"),
                )
            },
        ];
        exp.warmup = Some(dur("1s"));
        exp.server = ServerOpts {
            read_buf: ByteSize(4096),
            workers: Some(2),
            backlog: 128,
            exclusive: true,
            nodelay: false,
            time_syscalls: false,
        };
        exp.bench = ClientOpts {
            threads: Some(1),
            timeout: dur("3s"),
            engine,
            nodelay: false,
            linger0,
            strace: true,
        };
        let modes = check_experiment(&exp);
        assert_eq!(
            modes.len(),
            ServerModel::all().len() * 2 * (4 + 2 + 2),
            "every model × conns × (2 modes × 2 rounds + 2 timed modes + storm + sustain)"
        );
    }
}

#[test]
fn every_field_of_every_builder_parses() {
    let target: SocketAddr = "10.0.0.2:9988".parse().unwrap();
    for &model in ServerModel::all() {
        check_server(&ServerCmd {
            model,
            bind: "::1".parse().unwrap(),
            port: 9988,
            reply_bytes: Some(1024),
            stats_interval: Some(dur("500ms")),
            opts: ServerOpts {
                read_buf: ByteSize(65536),
                workers: Some(3),
                backlog: 64,
                exclusive: true,
                nodelay: false,
                time_syscalls: true,
            },
        });
        check_server(&ServerCmd::new(model, "0.0.0.0".parse().unwrap(), 0));
    }
    // echo-bench's forms, each with every field set, survive their own argv in
    // echolab_core::cmd::bench_cli's tests: the launcher fills the structs echo-bench parses.

    let netem_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../netem");
    let profile = |name: &str| Profile::resolve(name, &netem_dir).unwrap().1;
    let mut variants = [false; 10];
    let netem = [
        NetemCmd::Probe,
        NetemCmd::Apply {
            profile: profile("lan100"),
            uplink_dev: "10.77.72.2".into(),
            downlink_dev: "eth0".into(),
        },
        NetemCmd::Wire {
            profile: profile("crossnet"),
            client_side: "10.77.71.2".into(),
            server_side: "10.77.72.2".into(),
            stats_interval: Some(dur("10s")),
            masquerade: None,
        },
        NetemCmd::Wire {
            profile: profile("lan100"),
            client_side: "eth0".into(),
            server_side: "eth1".into(),
            stats_interval: None,
            masquerade: None,
        },
        NetemCmd::Wire {
            profile: profile("lan100"),
            client_side: "eth0".into(),
            server_side: "eth1".into(),
            stats_interval: None,
            masquerade: Some(echolab_core::cmd::Masquerade {
                client: [172, 19, 0, 3].into(),
                shared: [172, 20, 0, 2].into(),
            }),
        },
        NetemCmd::Calibrate {
            target,
            profile: profile("crossnet"),
            json: true,
            baseline_rtt: None,
            across_machines: false,
        },
        NetemCmd::Calibrate {
            target,
            profile: profile("lan100"),
            json: true,
            // A measured median, not a round number: it must survive the trip through argv.
            baseline_rtt: Some(Dur(std::time::Duration::from_nanos(31_417))),
            across_machines: false,
        },
        NetemCmd::Calibrate {
            target,
            profile: profile("lan100"),
            json: true,
            baseline_rtt: Some(Dur(std::time::Duration::from_nanos(412_003))),
            across_machines: true,
        },
        NetemCmd::Calibrate {
            target,
            profile: profile("loopback"),
            json: false,
            baseline_rtt: None,
            across_machines: false,
        },
        NetemCmd::Rtt { target, pace: None },
        // The pace of a profile with serialization: 3.088 ms, not a round number of ms.
        NetemCmd::Rtt {
            target,
            pace: Some(Dur(std::time::Duration::from_micros(3_088))),
        },
        NetemCmd::CalibServer {
            port: 0,
            bind: "0.0.0.0".parse().unwrap(),
        },
        NetemCmd::Route {
            dst: "10.77.72.0/24".parse().unwrap(),
            via: "10.77.71.2".parse().unwrap(),
        },
        NetemCmd::Ifname {
            address: "10.77.71.2".parse().unwrap(),
        },
        NetemCmd::Masquerade {
            install: Some(("10.77.71.3".parse().unwrap(), "eth1".into())),
        },
        NetemCmd::Masquerade { install: None },
        NetemCmd::Show { dev: "eth1".into() },
    ];
    for c in &netem {
        variants[match c {
            NetemCmd::Probe => 0,
            NetemCmd::Apply { .. } => 1,
            NetemCmd::Wire { .. } => 2,
            NetemCmd::Calibrate { .. } => 3,
            NetemCmd::CalibServer { .. } => 4,
            NetemCmd::Route { .. } => 5,
            NetemCmd::Ifname { .. } => 6,
            NetemCmd::Rtt { .. } => 7,
            NetemCmd::Masquerade { .. } => 8,
            NetemCmd::Show { .. } => 9,
        }] = true;
        check_netem(c);
    }
    assert_eq!(
        variants, [true; 10],
        "every echolab-netem subcommand is checked"
    );
}

#[test]
fn the_calibration_probe_parses() {
    for bind in ["127.0.0.1", "0.0.0.0"] {
        check_server(&probe_server_cmd(bind.parse().unwrap()));
    }
    for rounds in [100, 2000] {
        check_bench(&probe_bench_cmd(
            "172.17.0.3:40001".parse().unwrap(),
            rounds,
        ));
    }
}

#[test]
fn a_misspelled_flag_is_caught() {
    // The checker itself must fail on a flag the binary does not have, or it proves nothing.
    let words = |program: &str, line: &str| {
        argv_of(
            program,
            &line.split(' ').map(String::from).collect::<Vec<_>>(),
        )
    };
    let bad = words(ServerCmd::PROGRAM, "--model poll --readbuf 4096");
    assert!(echo_server::cli::Args::try_parse_from(bad).is_err());
    let bad = words(BenchCmd::PROGRAM, "h 1 1 1 --payload 64");
    assert!(BenchCli::try_parse_from(bad).is_err());
    let bad = words(NetemCmd::PROGRAM, "wire --client eth0");
    assert!(echolab_netem::cli::Cli::try_parse_from(bad).is_err());
    let bad = words(NetemCmd::PROGRAM, "route --dest 10.0.0.0/8 --via 10.0.0.1");
    assert!(echolab_netem::cli::Cli::try_parse_from(bad).is_err());
    // A profile given both ways, or as JSON that is not a profile, is refused.
    let both = words(
        NetemCmd::PROGRAM,
        "calibrate --target 10.0.0.2:7070 --profile crossnet --profile-json {}",
    );
    assert!(echolab_netem::cli::Cli::try_parse_from(both).is_err());
    let bad_json = words(
        NetemCmd::PROGRAM,
        r#"calibrate --target 10.0.0.2:7070 --profile-json {"name":"x"}"#,
    );
    assert!(echolab_netem::cli::Cli::try_parse_from(bad_json).is_err());
}
