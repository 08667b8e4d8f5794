//! Tests of echo-bench's command line: every form survives its own argv.

use super::*;
use crate::cli::one_line_error;
use crate::cmd::BenchEngine;

fn parse(args: &[&str]) -> Result<BenchCmd, clap::Error> {
    BenchCli::try_parse_from(std::iter::once("echo-bench").chain(args.iter().copied()))
        .map(BenchCli::into_cmd)
}

fn target() -> SocketAddr {
    "10.0.0.2:9988".parse().unwrap()
}

fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(a, b, c, d))
}

/// Every field of the shared groups away from its default. Literals without `..`: a field
/// added to a group does not compile until it is set here, so the round trips cover it.
fn every_shared_set() -> SharedArgs {
    SharedArgs {
        client: crate::cmd::bench::tests::every_option_set(),
        sock: SocketArgs {
            server_cpus: ServerCpus::Separate,
            source_addrs: SourceChoice::List(vec![v4(10, 0, 0, 2), "::1".parse().unwrap()]),
            short_sockets: ShortSockets::Fresh,
        },
        out: OutputArgs {
            json: true,
            hist: true,
            syscalls: true,
            fail_on_error: true,
        },
    }
}

fn every_pacing_set() -> Pacing {
    Pacing {
        rate: Some(Rate::new(2500.5).unwrap()),
        warmup: Duration::from_millis(1500),
    }
}

/// Each form with every field away from its default, and at its defaults.
fn every_form() -> Vec<BenchCmd> {
    let run = RunArgs {
        host: Some("10.0.0.2".into()),
        port: Some(9988),
        conns: Some(100),
        rounds: Some(10),
        mode: RunMode::Short,
        payload_size: 64,
        duration: None,
        processes: 4,
        shard: Some(Shard { index: 1, count: 4 }),
        pacing: every_pacing_set(),
        shared: every_shared_set(),
    };
    let timed = RunArgs {
        rounds: None,
        duration: Some(Duration::from_secs(10)),
        ..run.clone()
    };
    let storm = StormArgs {
        host: "10.0.0.2".into(),
        port: 9988,
        n: 300,
        shared: every_shared_set(),
    };
    let sustain = SustainArgs {
        host: "10.0.0.2".into(),
        port: 9988,
        n: 800,
        reply_bytes: 4096,
        duration: Duration::from_secs(5),
        interval: Duration::from_millis(250),
        pacing: every_pacing_set(),
        shared: every_shared_set(),
    };
    let plain_run = RunArgs {
        rounds: Some(10),
        ..RunArgs::new(target(), 100, RunMode::Long)
    };
    vec![
        BenchCmd::Run(run),
        BenchCmd::Run(timed),
        BenchCmd::ConnectStorm(storm),
        BenchCmd::Sustain(sustain),
        BenchCmd::Run(plain_run),
        BenchCmd::ConnectStorm(StormArgs::new(target(), 300)),
        BenchCmd::Sustain(SustainArgs::new(target(), 800)),
    ]
}

#[test]
fn every_form_survives_its_own_argv() {
    for cmd in every_form() {
        let argv = cmd.argv();
        let back = parse(&argv.iter().map(String::as_str).collect::<Vec<_>>())
            .unwrap_or_else(|e| panic!("{argv:?}: {e}"));
        assert_eq!(back, cmd, "{argv:?}");
    }
}

#[test]
fn each_form_spells_its_positionals_and_only_the_flags_away_from_defaults() {
    let mut run = RunArgs::new(target(), 100, RunMode::Short);
    run.rounds = Some(10);
    run.payload_size = 64;
    run.pacing.rate = Some(Rate::new(2500.5).unwrap());
    run.pacing.warmup = Duration::from_secs(1);
    run.shared.sock.server_cpus = ServerCpus::Shared;
    run.shared.client.threads = Some(1);
    run.shared.client.linger0 = true;
    run.shared.out.json = true;
    assert_eq!(
        BenchCmd::Run(run).argv().join(" "),
        "10.0.0.2 9988 100 10 --mode short --payload-size 64 --rate 2500.5 --warmup 1s \
         --server-cpus shared --threads 1 --linger0 --json"
    );
    let storm = BenchCmd::ConnectStorm(StormArgs::new(target(), 300));
    assert_eq!(storm.argv().join(" "), "connect-storm 10.0.0.2 9988 300");
    let mut sustain = SustainArgs::new(target(), 800);
    sustain.shared.out.json = true;
    assert_eq!(
        BenchCmd::Sustain(sustain).argv().join(" "),
        "sustain 10.0.0.2 9988 800 --duration 60s --json"
    );
}

#[test]
fn a_shard_is_the_run_as_json_with_its_index() {
    let mut run = RunArgs::new(target(), 10, RunMode::Long);
    run.rounds = Some(5);
    let argv = BenchCmd::Run(run.clone())
        .shard_argv(Shard { index: 2, count: 3 })
        .unwrap();
    assert_eq!(
        argv.join(" "),
        "10.0.0.2 9988 10 5 --mode long --shard 2/3 --json"
    );
    let storm = BenchCmd::ConnectStorm(StormArgs::new(target(), 3));
    assert!(storm.shard_argv(Shard { index: 0, count: 2 }).is_err());
}

#[test]
fn a_timed_run_is_planned_as_warmup_and_window_a_counted_one_not_at_all() {
    let run = |rounds, duration: Option<u64>, warmup_ms: u64| {
        let mut r = RunArgs::new(target(), 10, RunMode::Long);
        r.rounds = rounds;
        r.duration = duration.map(Duration::from_secs);
        r.pacing.warmup = Duration::from_millis(warmup_ms);
        BenchCmd::Run(r)
    };
    let ms = Duration::from_millis;
    assert_eq!(run(None, Some(1), 500).planned(), Some(ms(1500)));
    assert_eq!(run(None, Some(2), 0).planned(), Some(ms(2000)));
    assert_eq!(run(Some(20), None, 1000).planned(), None);
    let sustain = BenchCmd::Sustain(SustainArgs::new(target(), 8));
    assert_eq!(sustain.planned(), Some(ms(60_000)));
    let storm = BenchCmd::ConnectStorm(StormArgs::new(target(), 300));
    assert_eq!(storm.planned(), None);
}

#[test]
fn seed_form_and_subcommands_parse() {
    let Ok(BenchCmd::Run(r)) = parse(&["127.0.0.1", "9988", "100", "10", "--mode", "short"]) else {
        panic!("the main form")
    };
    assert_eq!(
        (r.conns, r.rounds, r.mode),
        (Some(100), Some(10), RunMode::Short)
    );
    assert!(r.shared.client.nodelay);
    assert!(matches!(
        parse(&["connect-storm", "127.0.0.1", "9988", "200"]),
        Ok(BenchCmd::ConnectStorm(StormArgs { n: 200, .. }))
    ));
    let sustain = parse(&[
        "sustain",
        "h",
        "1",
        "5",
        "--duration",
        "2s",
        "--nodelay=false",
    ]);
    let Ok(BenchCmd::Sustain(s)) = sustain else {
        panic!("{sustain:?}")
    };
    assert_eq!(
        (s.reply_bytes, s.duration, s.shared.client.nodelay),
        (1024, Duration::from_secs(2), false)
    );
    assert_eq!(s.shared.client.engine, BenchEngine::Event);
}

#[test]
fn rounds_or_duration_but_not_both() {
    assert!(parse(&["h", "1", "10", "--duration", "1s"]).is_ok());
    assert!(parse(&["h", "1", "10"]).is_err());
    assert!(parse(&["h", "1", "10", "5", "--duration", "1s"]).is_err());
}

#[test]
fn bad_values_give_one_line_naming_flag_and_value() {
    let e = parse(&["h", "1", "10", "--duration", "10x"]).unwrap_err();
    let line = one_line_error(&e.render().to_string());
    assert!(
        line.contains("--duration") && line.contains("10x"),
        "{line}"
    );
    assert!(!line.contains('\n'));
    let line = one_line_error(&parse(&["h", "1"]).unwrap_err().render().to_string());
    assert!(line.contains("<CONNS>"), "{line}");
}

#[test]
fn lists_and_ranges_expand_in_order() {
    assert_eq!(parse_source_choice("auto"), Ok(SourceChoice::Auto));
    assert_eq!(parse_source_choice("kernel"), Ok(SourceChoice::Kernel));
    assert_eq!(
        parse_source_choice("127.0.0.254-127.0.1.1, ::1"),
        Ok(SourceChoice::List(vec![
            v4(127, 0, 0, 254),
            v4(127, 0, 0, 255),
            v4(127, 0, 1, 0),
            v4(127, 0, 1, 1),
            "::1".parse().unwrap(),
        ]))
    );
}

#[test]
fn lists_and_ranges_stop_at_4096_addresses_exactly() {
    assert_eq!(
        parse_source_choice("127.0.0.5-127.0.0.5"),
        Ok(SourceChoice::List(vec![v4(127, 0, 0, 5)]))
    );
    // 10.0.0.0-10.0.15.255 is 4096 addresses; one more is refused, naming the range.
    let SourceChoice::List(l) = parse_source_choice("10.0.0.0-10.0.15.255").unwrap() else {
        panic!("a list")
    };
    assert_eq!(l.len(), 4096);
    let e = parse_source_choice("10.0.0.0-10.0.16.0").unwrap_err();
    assert!(
        e.starts_with("\"10.0.0.0-10.0.16.0\" in --source-addrs: more than 4096"),
        "{e}"
    );
    let exactly = vec!["127.0.0.1"; MAX_SOURCE_ADDRS].join(",");
    assert!(parse_source_choice(&exactly).is_ok());
}

#[test]
fn bad_items_are_named() {
    for (text, says) in [
        ("127.0.0.9-127.0.0.2", "backwards"),
        ("10.0.0.1-::1", "two IPv4"),
        ("localhost", "expected auto"),
        ("10.0.0.0-10.0.255.255", "more than 4096"),
    ] {
        let e = parse_source_choice(text).unwrap_err();
        assert!(e.contains(says), "{text}: {e}");
    }
    let many = vec!["127.0.0.1"; MAX_SOURCE_ADDRS + 1].join(",");
    assert!(parse_source_choice(&many)
        .unwrap_err()
        .contains("more than 4096"));
}
