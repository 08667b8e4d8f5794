//! Arbitrary values in every numeric input, and nothing panics: each binary's own clap
//! definition (`echolab_core::cmd::BenchCli`, `echo_server::cli::Args`, `echolab_netem::cli::Cli`,
//! `echolab_up::cli::parse`) and the experiment, profile and lab-file loaders either take a
//! value into its range (`echolab_core::limits`) or return an error. An experiment that
//! loads also gives only command lines its binaries accept, so no cell can fail inside a
//! container for a number its file could have been refused for.
//!
//! The values: any f64 (NaN, infinities, subnormals), any u64 and i64, the edges of each
//! range and just past them, 1e-300, and arbitrary short strings, in flags and YAML alike.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use clap::Parser as _;
use echolab_core::cmd::{BenchCmd, ServerCmd, ServerCpus, ServerLaunch};
use echolab_core::experiment::Experiment;
use echolab_core::lab_file::Lab;
use echolab_core::limits::{
    MAX_CONNS, MAX_MESSAGE_BYTES, MAX_RATE, MAX_REPETITIONS, MAX_ROUNDS, MAX_RUN, MAX_WORKERS,
    MIN_RATE,
};
use echolab_core::profile::Profile;
use echolab_up::commands::{bench_cmd, server_cmd};
use proptest::prelude::*;

/// Modest: the whole file runs in a few seconds in a debug build.
const CASES: u32 = 256;

/// A value for a numeric field: any number in any spelling, the edges of echolab's ranges and
/// just past them, or any short text.
fn value() -> impl Strategy<Value = String> {
    let edges = prop::sample::select(vec![
        "0",
        "-0",
        "1",
        "-1",
        "0.5",
        "1e-300",
        "1e-17",
        "5e-324",
        "1e300",
        "NaN",
        "nan",
        "inf",
        "-inf",
        ".nan",
        ".inf",
        "-.inf",
        "1e7",
        "10000001",
        "1000000",
        "1000001",
        "1000000000",
        "1000000001",
        "1000",
        "1001",
        "1024",
        "1025",
        "20",
        "19",
        "10000",
        "10001",
        "32665",
        "32666",
        "252",
        "255",
        "2701",
        "4294967295",
        "4294967296",
        "18446744073709551615",
        "18446744073709551616",
        "0s",
        "1ns",
        "24h",
        "86401s",
        "1e30s",
        "-1s",
        "5ms",
        "NaNs",
        "infms",
        "64MiB",
        "67108865",
        "1KiB",
        "0%",
        "100%",
        "101%",
        "5%",
        "NaN%",
        "",
        " ",
        "0x10",
        "1_000",
        "+5",
        "--",
        "-",
    ])
    .prop_map(str::to_string);
    prop_oneof![
        3 => edges,
        1 => any::<f64>().prop_map(|v| v.to_string()),
        1 => any::<f64>().prop_map(|v| format!("{v:e}")),
        1 => any::<u64>().prop_map(|v| v.to_string()),
        1 => any::<i64>().prop_map(|v| v.to_string()),
        1 => (any::<u32>(), prop::sample::select(vec!["ns", "us", "ms", "s", "m", "h", "%", "mbit", "KiB"]))
            .prop_map(|(v, u)| format!("{v}{u}")),
        1 => "\\PC{0,10}",
    ]
}

/// An optional value: `None` leaves the flag or key out (or gives it a valid value).
fn maybe() -> impl Strategy<Value = Option<String>> {
    prop::option::weighted(0.5, value())
}

/// Values for `N` fields: mostly one arbitrary value with the others left out, so that the
/// value reaches its field's check with nothing else refused first (with every field arbitrary
/// a case nearly always fails on one of the others); sometimes each field arbitrary or left
/// out, for values that only combine badly.
fn fields<const N: usize>() -> impl Strategy<Value = [Option<String>; N]> {
    let one = (0..N, value()).prop_map(|(i, v)| {
        let mut a: [Option<String>; N] = std::array::from_fn(|_| None);
        a[i] = Some(v);
        a
    });
    prop_oneof![3 => one, 1 => prop::array::uniform(maybe())]
}

fn with_flags(mut argv: Vec<String>, flags: &[(&str, &Option<String>)]) -> Vec<String> {
    for (flag, v) in flags {
        if let Some(v) = v {
            // `--flag=VALUE`: a value starting with '-' stays the flag's value.
            argv.push(format!("--{flag}={v}"));
        }
    }
    argv
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

fn duration_in_range(d: Duration, nonzero: bool) -> bool {
    d <= MAX_RUN && (!nonzero || !d.is_zero())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn echo_bench_run_takes_values_in_range_or_refuses_them(
        [conns, rounds, rate, duration, payload, warmup, processes, threads, timeout] in fields::<9>(),
    ) {
        let mut argv = strings(&["echo-bench", "127.0.0.1", "9"]);
        argv.push(conns.unwrap_or_else(|| "10".into()));
        argv.extend(rounds);
        let argv = with_flags(argv, &[
            ("rate", &rate), ("duration", &duration), ("payload-size", &payload),
            ("warmup", &warmup), ("processes", &processes), ("threads", &threads),
            ("timeout", &timeout),
        ]);
        if let Ok(cli) = echolab_core::cmd::BenchCli::try_parse_from(&argv) {
            let r = &cli.run;
            prop_assert!(r.conns.is_some_and(|c| (1..=MAX_CONNS).contains(&c)), "{argv:?}");
            prop_assert!(r.rounds.is_none_or(|n| (1..=MAX_ROUNDS).contains(&n)), "{argv:?}");
            prop_assert!(r.pacing.rate.is_none_or(|x| (MIN_RATE..=MAX_RATE).contains(&x.get())), "{argv:?}");
            prop_assert!(r.duration.is_none_or(|d| duration_in_range(d, true)), "{argv:?}");
            prop_assert!((1..=MAX_MESSAGE_BYTES).contains(&r.payload_size), "{argv:?}");
            prop_assert!(duration_in_range(r.pacing.warmup, false), "{argv:?}");
            prop_assert!((1..=256).contains(&r.processes), "{argv:?}");
            prop_assert!(r.shared.client.threads.is_none_or(|t| (1..=MAX_WORKERS).contains(&t)), "{argv:?}");
            prop_assert!(duration_in_range(r.shared.client.timeout.0, true), "{argv:?}");
        }
    }

    #[test]
    fn echo_bench_subcommands_take_values_in_range_or_refuse_them(
        storm in any::<bool>(), [n, reply, duration, interval, rate] in fields::<5>(),
    ) {
        use echolab_core::cmd::BenchCmd;
        let sub = if storm { "connect-storm" } else { "sustain" };
        let mut argv = strings(&["echo-bench", sub, "127.0.0.1", "9"]);
        argv.push(n.unwrap_or_else(|| "10".into()));
        let flags: &[(&str, &Option<String>)] = if storm {
            &[]
        } else {
            &[("reply-bytes", &reply), ("duration", &duration), ("interval", &interval), ("rate", &rate)]
        };
        let argv = with_flags(argv, flags);
        match echolab_core::cmd::BenchCli::try_parse_from(&argv).map(|c| c.into_cmd()) {
            Ok(BenchCmd::ConnectStorm(s)) => {
                prop_assert!((1..=MAX_CONNS).contains(&s.n), "{argv:?}");
            }
            Ok(BenchCmd::Sustain(s)) => {
                prop_assert!((1..=MAX_CONNS).contains(&s.n), "{argv:?}");
                prop_assert!((1..=MAX_MESSAGE_BYTES).contains(&s.reply_bytes), "{argv:?}");
                prop_assert!(duration_in_range(s.duration, true), "{argv:?}");
                prop_assert!(duration_in_range(s.interval, true), "{argv:?}");
                prop_assert!(s.pacing.rate.is_none_or(|x| (MIN_RATE..=MAX_RATE).contains(&x.get())), "{argv:?}");
            }
            Ok(BenchCmd::Run(_)) => prop_assert!(false, "{argv:?} parsed as the short/long form"),
            Err(_) => {}
        }
    }

    #[test]
    fn echo_server_takes_values_in_range_or_refuses_them(
        [workers, backlog, read_buf, reply, stats, port] in fields::<6>(),
    ) {
        let argv = with_flags(strings(&["echo-server", "--model", "poll"]), &[
            ("workers", &workers), ("backlog", &backlog), ("read-buf", &read_buf),
            ("reply-bytes", &reply), ("stats-interval", &stats), ("port", &port),
        ]);
        if let Ok(a) = echo_server::cli::Args::try_parse_from(&argv) {
            prop_assert!(a.opts.workers.is_none_or(|w| (1..=MAX_WORKERS).contains(&w)), "{argv:?}");
            prop_assert!((1..=i32::MAX as u64).contains(&a.opts.backlog), "{argv:?}");
            prop_assert!((1..=MAX_MESSAGE_BYTES).contains(&a.opts.read_buf.0), "{argv:?}");
            prop_assert!(a.reply_bytes.is_none_or(|r| (1..=MAX_MESSAGE_BYTES).contains(&(r as u64))), "{argv:?}");
            prop_assert!(a.stats_interval.is_none_or(|d| duration_in_range(d, false)), "{argv:?}");
        }
    }

    #[test]
    fn echolab_netem_takes_values_in_range_or_refuses_them(
        which in 0..3u8,
        [probes, rounds, pace, attempts, measure, baseline, stats, table, priority, seed] in fields::<10>(),
    ) {
        use echolab_netem::cli::{Cli, Cmd};
        let argv = match which {
            0 => with_flags(strings(&["echolab-netem", "rtt", "--target", "127.0.0.1:9"]), &[
                ("probes", &probes), ("rounds", &rounds), ("pace", &pace),
            ]),
            1 => with_flags(strings(&["echolab-netem", "calibrate", "--target", "127.0.0.1:9", "--profile", "lan100"]), &[
                ("probes", &probes), ("attempts", &attempts), ("measure", &measure),
                ("baseline-rtt", &baseline),
            ]),
            _ => with_flags(strings(&["echolab-netem", "wire", "--profile", "lan100", "--client-side", "a", "--server-side", "b"]), &[
                ("stats-interval", &stats), ("table", &table), ("rule-priority", &priority),
                ("seed", &seed),
            ]),
        };
        let probes_ok = |p: usize| (20..=10_000).contains(&p);
        match Cli::try_parse_from(&argv).map(|c| c.command) {
            Ok(Cmd::Rtt { probes, rounds, pace, .. }) => {
                prop_assert!(probes_ok(probes) && (1..=10).contains(&rounds), "{argv:?}");
                prop_assert!(duration_in_range(pace, false), "{argv:?}");
            }
            Ok(Cmd::Calibrate { probes, attempts, measure, baseline_rtt, .. }) => {
                prop_assert!(probes_ok(probes) && (1..=10).contains(&attempts), "{argv:?}");
                prop_assert!(duration_in_range(measure, true), "{argv:?}");
                prop_assert!(baseline_rtt.is_none_or(|d| duration_in_range(d, false)), "{argv:?}");
            }
            Ok(Cmd::Wire { stats_interval, table, rule_priority, .. }) => {
                prop_assert!(stats_interval.is_none_or(|d| duration_in_range(d, true)), "{argv:?}");
                for t in [table, table.wrapping_add(1)] {
                    prop_assert!(t != 0 && !(253..=255).contains(&t), "{argv:?}");
                }
                prop_assert!((1..=32_665).contains(&rule_priority), "{argv:?}");
            }
            Ok(other) => prop_assert!(false, "{argv:?} parsed as {other:?}"),
            Err(_) => {}
        }
    }

    #[test]
    fn echolab_up_takes_repetitions_in_range_or_refuses_them(reps in value()) {
        let argv = vec!["echolab-up".to_string(), format!("--reps={reps}")];
        let in_range = reps.parse::<u64>().is_ok_and(|r| (1..=MAX_REPETITIONS).contains(&r));
        prop_assert_eq!(echolab_up::cli::parse(argv).is_ok(), in_range, "--reps={}", reps);
    }

    #[test]
    fn experiments_load_only_with_numbers_their_binaries_take(
        [reps, max_reps, halfwidth, warmup, window, conns, rounds, duration, payload, reply,
         backlog, read_buf, workers, threads, timeout] in fields::<15>(),
    ) {
        let text = experiment_yaml(&[
            ("repetitions", reps.as_deref().unwrap_or("3")),
            ("max_repetitions", max_reps.as_deref().unwrap_or("5")),
            ("target_halfwidth", halfwidth.as_deref().unwrap_or("5%")),
            ("warmup", warmup.as_deref().unwrap_or("1s")),
            ("window", window.as_deref().unwrap_or("2s")),
            ("conns", conns.as_deref().unwrap_or("10")),
            ("rounds", rounds.as_deref().unwrap_or("20")),
            ("duration", duration.as_deref().unwrap_or("3s")),
            ("payload", payload.as_deref().unwrap_or("64")),
            ("reply_bytes", reply.as_deref().unwrap_or("1024")),
            ("backlog", backlog.as_deref().unwrap_or("128")),
            ("read_buf", read_buf.as_deref().unwrap_or("4096")),
            ("workers", workers.as_deref().unwrap_or("2")),
            ("threads", threads.as_deref().unwrap_or("2")),
            ("timeout", timeout.as_deref().unwrap_or("5s")),
        ]);
        let Ok(exp) = Experiment::parse(&text, "arbitrary.yaml") else { return Ok(()) };
        prop_assert!((1..=MAX_REPETITIONS).contains(&exp.max_repetitions()), "{text}");
        prop_assert!(exp.warmup.is_none_or(|w| duration_in_range(w.0, false)), "{text}");
        prop_assert!(exp.window.is_none_or(|w| duration_in_range(w.0, true)), "{text}");
        let target: SocketAddr = "10.0.0.2:9988".parse().unwrap();
        for cell in exp.cells() {
            let bench = bench_cmd(&exp, &cell, target, ServerCpus::Separate);
            let argv: Vec<String> = std::iter::once(BenchCmd::PROGRAM.to_string()).chain(bench.argv()).collect();
            let parsed = echolab_core::cmd::BenchCli::try_parse_from(&argv);
            prop_assert!(parsed.is_ok(), "{text}\n{argv:?}: {}", parsed.unwrap_err());
            if let ServerLaunch::Model(cmd) = server_cmd(&exp, &cell, "0.0.0.0".parse().unwrap()).unwrap() {
                let argv: Vec<String> = std::iter::once(ServerCmd::PROGRAM.to_string()).chain(cmd.argv()).collect();
                let parsed = echo_server::cli::Args::try_parse_from(&argv);
                prop_assert!(parsed.is_ok(), "{text}\n{argv:?}: {}", parsed.unwrap_err());
            }
        }
    }

    #[test]
    fn profiles_load_with_link_figures_in_range_or_refuse_them(
        [delay, jitter, loss, rate, overhead, limit, rtt, minus, plus, goodput, tolerance,
         at_least] in fields::<12>(),
    ) {
        let text = profile_yaml(&[
            delay.as_deref().unwrap_or("10ms"),
            jitter.as_deref().unwrap_or("1ms"),
            loss.as_deref().unwrap_or("0.1%"),
            rate.as_deref().unwrap_or("100mbit"),
            overhead.as_deref().unwrap_or("38"),
            limit.as_deref().unwrap_or("1000"),
            rtt.as_deref().unwrap_or("20ms"),
            minus.as_deref().unwrap_or("1ms"),
            plus.as_deref().unwrap_or("5ms"),
            goodput.as_deref().unwrap_or("94mbit"),
            tolerance.as_deref().unwrap_or("5%"),
            at_least.as_deref().unwrap_or("50us"),
        ]);
        let Ok(p) = Profile::from_yaml(&text, "arbitrary.yaml") else { return Ok(()) };
        for spec in [&p.uplink, &p.downlink].into_iter().flatten() {
            prop_assert!(spec.max_added_delay() <= Duration::from_secs(60), "{text}");
            prop_assert!((0.0..=100.0).contains(&spec.loss.0), "{text}");
            prop_assert!(spec.rate.is_none_or(|r| (1..=1_000_000_000_000).contains(&r.0)), "{text}");
            prop_assert!(spec.effective_limit() >= 1, "{text}");
        }
        // What the launcher and the link compute from a profile stays on the clock.
        let _ = (p.expected_added_rtt(68), p.expected.rtt.range(), p.warnings(), p.to_json());
        prop_assert_eq!(Profile::from_json(&p.to_json(), "json").ok(), Some(p));
    }

    #[test]
    fn lab_files_load_or_refuse_arbitrary_endpoints_and_addresses(
        endpoint in value(), address in value(), port in value(), engine in "\\PC{0,6}",
    ) {
        for ep in [endpoint.clone(), format!("ssh://lab@10.0.0.3:{port}"), format!("unix://{endpoint}")] {
            let text = format!(
                "engines:\n  a: {{ endpoint: {}, address: {} }}\n  {}: {{ endpoint: {} }}\nroles: {{ server: a, client: {} }}\n",
                yaml("unix:///var/run/docker.sock"), yaml(&address), yaml(&engine), yaml(&ep), yaml(&engine),
            );
            let _ = Lab::from_yaml(&text, Path::new("/nonexistent/lab.yaml"));
        }
    }
}

/// `v` as a YAML scalar: as written when it is a plain number or unit value, else quoted, so
/// that arbitrary text reaches the field as a string instead of breaking the document.
fn yaml(v: &str) -> String {
    let plain = !v.is_empty()
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-._%".contains(c));
    if plain {
        v.to_string()
    } else {
        serde_json::to_string(v).unwrap()
    }
}

/// A link profile with both directions alike; `v` holds delay, jitter, loss, rate, overhead
/// and limit, then the expected RTT's value, minus and plus, goodput and its tolerance, and
/// the added RTT's `at_least`.
fn profile_yaml(v: &[&str; 12]) -> String {
    let link = format!(
        "{{ delay: {}, jitter: {}, loss: {}, rate: {}, overhead: {}, limit: {} }}",
        yaml(v[0]),
        yaml(v[1]),
        yaml(v[2]),
        yaml(v[3]),
        yaml(v[4]),
        yaml(v[5]),
    );
    format!(
        "name: t\ndescription: d\nsource: s\ntopology: link\nuplink: {link}\ndownlink: {link}\n\
         expected:\n  rtt: {{ value: {}, minus: {}, plus: {} }}\n  \
         goodput: {{ value: {}, tolerance: {} }}\n  added_rtt: {{ relative: 10%, at_least: {} }}\n",
        yaml(v[6]),
        yaml(v[7]),
        yaml(v[8]),
        yaml(v[9]),
        yaml(v[10]),
        yaml(v[11]),
    )
}

/// An experiment with every numeric key given by `fields` (key, value).
fn experiment_yaml(fields: &[(&str, &str)]) -> String {
    let f = |k: &str| yaml(fields.iter().find(|(n, _)| *n == k).map_or("", |(_, v)| v));
    format!(
        "name: t\nquestion: q\nrepetitions: {}\nmax_repetitions: {}\ntarget_halfwidth: {}\n\
         warmup: {}\nwindow: {}\nmatrix:\n\
         \x20 - {{ servers: [epoll-et, prefork], modes: [long, short], conns: [{}], rounds: [{}], payload: {} }}\n\
         \x20 - {{ servers: [poll], modes: [sustain], conns: [{}], duration: {}, reply_bytes: {} }}\n\
         server: {{ backlog: {}, read_buf: {}, workers: {} }}\nbench: {{ threads: {}, timeout: {} }}\n",
        f("repetitions"), f("max_repetitions"), f("target_halfwidth"), f("warmup"), f("window"),
        f("conns"), f("rounds"), f("payload"), f("conns"), f("duration"), f("reply_bytes"),
        f("backlog"), f("read_buf"), f("workers"), f("threads"), f("timeout"),
    )
}

#[test]
fn the_defaults_of_the_generators_load() {
    // The fallbacks above make a valid experiment and profile, so that an arbitrary value in
    // one field is what decides whether a case loads.
    let text = experiment_yaml(&[
        ("repetitions", "3"),
        ("max_repetitions", "5"),
        ("target_halfwidth", "5%"),
        ("warmup", "1s"),
        ("window", "2s"),
        ("conns", "10"),
        ("rounds", "20"),
        ("duration", "3s"),
        ("payload", "64"),
        ("reply_bytes", "1024"),
        ("backlog", "128"),
        ("read_buf", "4096"),
        ("workers", "2"),
        ("threads", "2"),
        ("timeout", "5s"),
    ]);
    Experiment::parse(&text, "t.yaml").unwrap_or_else(|e| panic!("{e}\n{text}"));
    let text = profile_yaml(&[
        "10ms", "1ms", "0.1%", "100mbit", "38", "1000", "20ms", "1ms", "5ms", "94mbit", "5%",
        "50us",
    ]);
    Profile::from_yaml(&text, "t.yaml").unwrap_or_else(|e| panic!("{e}\n{text}"));
}
