//! Experiment files: the matrix, its cells, and the reference's claims, from YAML.

use super::*;

const EXP31: &str = r#"
name: exp31
question: How much QPS do long connections gain over short ones?
repetitions: 3
matrix:
  - servers: [epoll-lt, epoll-et]
    modes: [short, long]
    conns: [100]
    rounds: [10]
reference:
  source: seed 000 §5
  claims:
    - name: long/short gain, ET
      metric: qps
      numerator: {server: epoll-et, mode: long}
      denominator: {server: epoll-et, mode: short}
      seed_ratio: 2.15
      kind: magnitude
      tolerance: 15%
"#;

#[test]
fn matrix_expands_to_cells() {
    let e = Experiment::parse(EXP31, "exp31.yaml").unwrap();
    let cells = e.cells();
    assert_eq!(cells.len(), 4);
    assert_eq!(cells[0].id(), "epoll-lt_short_c100_r10");
    assert_eq!(cells[3].id(), "epoll-et_long_c100_r10");
    let claim = &e.reference.claims[0];
    assert!(claim.numerator.matches(&cells[3]) && !claim.numerator.matches(&cells[2]));
}

#[test]
fn errors_name_file_field_and_position() {
    let bad = EXP31.replace("repetitions: 3", "repetitions: 3\nrepetitons: 4");
    let msg = Experiment::parse(&bad, "exp31.yaml")
        .unwrap_err()
        .to_string();
    assert!(
        msg.starts_with("exp31.yaml:") && msg.contains("repetitons") && msg.contains("line"),
        "{msg}"
    );
    let bad = EXP31.replace("rounds: [10]", "rounds: []");
    let msg = Experiment::parse(&bad, "x.yaml").unwrap_err().to_string();
    assert!(
        msg.contains("matrix[0].rounds") && msg.contains("short"),
        "{msg}"
    );
    let bad = EXP31.replace(
        "server: epoll-et, mode: long}",
        "server: epoll-ett, mode: long}",
    );
    let msg = Experiment::parse(&bad, "x.yaml").unwrap_err().to_string();
    assert!(
        msg.contains("reference.claims[0].numerator: server=epoll-ett mode=long matches no cell"),
        "{msg}"
    );
    // Without its mode, the numerator names both epoll-et cells (short and long).
    let bad = EXP31.replace("server: epoll-et, mode: long}", "server: epoll-et}");
    let msg = Experiment::parse(&bad, "x.yaml").unwrap_err().to_string();
    assert!(
        msg.contains("reference.claims[0].numerator: server=epoll-et matches 2 cells (epoll-et_short_c100_r10, epoll-et_long_c100_r10)"),
        "{msg}"
    );
    let bad = EXP31.replace(
        "servers: [epoll-lt, epoll-et]",
        "servers: [epoll-lt, epoll-zz]",
    );
    let msg = Experiment::parse(&bad, "x.yaml").unwrap_err().to_string();
    assert!(
        msg.contains("matrix[0].servers: unknown server model \"epoll-zz\""),
        "{msg}"
    );
    let bad = EXP31.replace("modes: [short, long]", "modes: [shorty]");
    let msg = Experiment::parse(&bad, "x.yaml").unwrap_err().to_string();
    assert!(msg.contains("shorty") && msg.contains("line 7"), "{msg}");
}

#[test]
fn options_the_client_cannot_take_are_caught_at_load() {
    let sustain = "name: s\nquestion: q\nrepetitions: 1\nmatrix:\n  - servers: [select]\n    modes: [sustain]\n    conns: [100]\n    duration: 2s\n    reply_bytes: 1024\n";
    assert!(Experiment::parse(sustain, "s.yaml").is_ok());
    let msg = Experiment::parse(&format!("{sustain}    payload: 64\n"), "s.yaml")
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("matrix[0].payload: mode sustain always sends the seed's 12-byte request"),
        "{msg}"
    );
    let msg = Experiment::parse(&format!("{sustain}bench: {{engine: threads}}\n"), "s.yaml")
        .unwrap_err()
        .to_string();
    assert!(msg.contains("threads") && msg.contains("thread"), "{msg}");
    let e = Experiment::parse(&format!("{sustain}bench: {{engine: thread}}\n"), "s.yaml").unwrap();
    assert_eq!(e.bench.engine, BenchEngine::Thread);
    assert_eq!(e.cells()[0].model(), Ok(ServerModel::Select));
}

fn err(text: &str) -> String {
    Experiment::parse(text, "x.yaml").unwrap_err().to_string()
}

#[test]
fn adaptive_repetitions_default_to_a_fixed_count_and_are_validated() {
    let e = Experiment::parse(EXP31, "exp31.yaml").unwrap();
    assert_eq!(
        (e.max_repetitions(), e.target_halfwidth(), e.is_adaptive()),
        (3, 0.05, false)
    );
    let text = EXP31.replace(
        "repetitions: 3",
        "repetitions: 3\nmax_repetitions: 10\ntarget_halfwidth: 2.5%",
    );
    let e = Experiment::parse(&text, "x.yaml").unwrap();
    assert_eq!(
        (e.max_repetitions(), e.target_halfwidth(), e.is_adaptive()),
        (10, 0.025, true)
    );
    // It survives a manifest round trip.
    let back: Experiment = serde_yaml::from_str(&serde_yaml::to_string(&e).unwrap()).unwrap();
    assert_eq!(back, e);
    let msg = err(&EXP31.replace("repetitions: 3", "repetitions: 3\nmax_repetitions: 2"));
    assert!(
        msg.contains("max_repetitions: 2 is below repetitions (3)"),
        "{msg}"
    );
    for bad in ["0%", "100%"] {
        let msg = err(&EXP31.replace(
            "repetitions: 3",
            &format!("repetitions: 3\ntarget_halfwidth: {bad}"),
        ));
        assert!(msg.contains("target_halfwidth:"), "{msg}");
    }
    let msg = err(&EXP31.replace("repetitions: 3", "repetitions: 3\ntarget_halfwidth: 5"));
    assert!(
        msg.contains("target_halfwidth") && msg.contains("percentage"),
        "{msg}"
    );
}

#[test]
fn claims_state_kind_and_band() {
    let e = Experiment::parse(EXP31, "exp31.yaml").unwrap();
    let band = e.reference.claims[0].band().unwrap();
    // 2.15 within a factor 1.15 either way = 1.869565 .. 2.4725, closed.
    assert!((band.low - 2.15 / 1.15).abs() < 1e-12 && (band.high - 2.4725).abs() < 1e-12);
    assert!(band.contains(2.15 / 1.15) && !band.contains(1.86) && !band.open);
    assert_eq!(band.to_string(), "1.87–2.47×");

    let absolute = EXP31.replace("tolerance: 15%", "tolerance: 0.02");
    let b = Experiment::parse(&absolute, "x.yaml")
        .unwrap()
        .reference
        .claims[0]
        .band()
        .unwrap();
    assert!((b.low - 2.13).abs() < 1e-12 && (b.high - 2.17).abs() < 1e-12);

    let direction = EXP31.replace(
        "kind: magnitude\n      tolerance: 15%",
        "kind: direction\n      direction: higher",
    );
    let b = Experiment::parse(&direction, "x.yaml")
        .unwrap()
        .reference
        .claims[0]
        .band()
        .unwrap();
    assert!(b.open && !b.contains(1.0) && b.contains(1.0001) && b.high.is_infinite());
    assert_eq!(b.to_string(), "above 1×");

    let shape = EXP31.replace(
        "kind: magnitude\n      tolerance: 15%",
        "kind: shape\n      bound: {below: 0.5}",
    );
    let b = Experiment::parse(&shape, "x.yaml")
        .unwrap()
        .reference
        .claims[0]
        .band()
        .unwrap();
    assert!(b.contains(0.49) && !b.contains(0.5) && b.low == 0.0);
    assert_eq!(b.to_string(), "below 0.5×");

    let msg = err(&EXP31.replace("      kind: magnitude\n", ""));
    assert!(msg.contains("reference.claims[0].kind: missing"), "{msg}");
    let msg = err(&EXP31.replace("      tolerance: 15%\n", ""));
    assert!(
        msg.contains("reference.claims[0].tolerance: a magnitude claim needs one"),
        "{msg}"
    );
    let msg = err(&EXP31.replace("tolerance: 15%", "tolerance: 150%"));
    assert!(
        msg.contains("must be between 0% and 100%") || msg.contains("below 100%"),
        "{msg}"
    );
    let msg = err(&EXP31.replace("tolerance: 15%", "tolerance: 15%\n      direction: higher"));
    assert!(
        msg.contains("reference.claims[0].direction: not used by a magnitude claim"),
        "{msg}"
    );
    let halved = EXP31.replace("tolerance: 15%", "tolerance: 20%\n      expect: 0.5");
    let b = Experiment::parse(&halved, "x.yaml")
        .unwrap()
        .reference
        .claims[0]
        .band()
        .unwrap();
    assert!(
        (b.low - 0.5 / 1.2).abs() < 1e-12 && (b.high - 0.6).abs() < 1e-12,
        "{b:?}"
    );
    let msg = err(&direction.replace("direction: higher", "direction: higher\n      expect: 2"));
    assert!(
        msg.contains("reference.claims[0].expect: not used by a direction claim"),
        "{msg}"
    );
    let msg = err(&EXP31.replace("tolerance: 15%", "tolerance: abc"));
    assert!(msg.contains("invalid tolerance \"abc\""), "{msg}");
    let msg = err(&shape.replace("{below: 0.5}", "{}"));
    assert!(
        msg.contains("reference.claims[0].bound: a shape claim needs"),
        "{msg}"
    );
}

#[test]
fn a_claim_without_kind_from_an_old_manifest_reads_as_a_legacy_magnitude() {
    let old = "name: x\nmetric: qps\nnumerator: {mode: long}\ndenominator: {mode: short}\nseed_ratio: 2.0\n";
    let c: ReferenceClaim = serde_yaml::from_str(old).unwrap();
    assert_eq!(c.effective_kind(), ClaimKind::Magnitude);
    let b = c.band().unwrap();
    assert!((b.low - 2.0 / 1.15).abs() < 1e-12 && (b.high - 2.3).abs() < 1e-12);
}

const OWN: &str = "name: own\nquestion: q\nrepetitions: 1\nwindow: 1s\nmatrix:\n  - servers:\n      - epoll-et\n      - {name: socat-pipe, command: [socat, \"TCP-LISTEN:7000,fork,reuseaddr\", PIPE], port: 7000}\n    modes: [short, long]\n    conns: [10]\n    rounds: [10]\n";

#[test]
fn a_server_of_your_own_is_a_command_and_a_port() {
    let e = Experiment::parse(OWN, "own.yaml").unwrap();
    let cells = e.cells();
    let servers: Vec<&str> = cells.iter().map(|c| c.server.as_str()).collect();
    assert_eq!(
        servers,
        ["epoll-et", "epoll-et", "socat-pipe", "socat-pipe"]
    );
    let own = e.custom_server("socat-pipe").expect("defined");
    assert_eq!((own.port, own.program()), (7000, "socat"));
    assert!(e.custom_server("epoll-et").is_none());
    assert_eq!(e.custom_servers().len(), 1);
    // A model stays a model; a custom cell has none.
    assert_eq!(e.cells()[0].model(), Ok(ServerModel::EpollEt));
    assert!(e.cells()[2].model().is_err());
    // The manifest keeps the definition and reads it back.
    let back: Experiment = serde_yaml::from_str(&serde_yaml::to_string(&e).unwrap()).unwrap();
    assert_eq!(back, e);
}

#[test]
fn a_bad_server_of_your_own_is_named_with_its_field() {
    let err = |text: String| {
        Experiment::parse(&text, "own.yaml")
            .unwrap_err()
            .to_string()
    };
    let m = err(OWN.replace("port: 7000", "port: 0"));
    assert!(
        m.contains("matrix[0].servers[1].port: server \"socat-pipe\""),
        "{m}"
    );
    let m = err(OWN.replace("name: socat-pipe", "name: epoll-lt"));
    assert!(
        m.contains("servers[1].name: \"epoll-lt\" is an echo-server model's name"),
        "{m}"
    );
    let m = err(OWN.replace("name: socat-pipe", "name: Socat Pipe"));
    assert!(
        m.contains("servers[1].name: \"Socat Pipe\" must be lowercase"),
        "{m}"
    );
    let m = err(OWN.replace(
        "command: [socat, \"TCP-LISTEN:7000,fork,reuseaddr\", PIPE]",
        "command: []",
    ));
    assert!(
        m.contains("servers[1].command: server \"socat-pipe\" needs a program"),
        "{m}"
    );
    let m = err(OWN.replace("port: 7000}", "port: 7000, image: my/echo}"));
    assert!(
        m.contains("servers[1].image: server \"socat-pipe\" names image \"my/echo\""),
        "{m}"
    );
    let m = err(OWN.replace("port: 7000}", "port: 7000, cmd: x}"));
    assert!(m.contains("unknown field `cmd`"), "{m}");
    let m = err(OWN.replace(
        "modes: [short, long]",
        "modes: [sustain]\n    duration: 1s\n    reply_bytes: 1024",
    ));
    assert!(
        m.contains("servers[1]: server \"socat-pipe\" is not an echo-server model"),
        "{m}"
    );
    let twice = format!(
        "{OWN}  - servers: [{{name: socat-pipe, command: [socat], port: 7001}}]\n    modes: [long]\n    conns: [10]\n    rounds: [10]\n"
    );
    let m = err(twice);
    assert!(m.contains("is defined twice, differently"), "{m}");
}

#[test]
fn the_ring_engine_is_chosen_for_long_connections_only() {
    let long = "name: r\nquestion: q\nrepetitions: 1\nmatrix:\n  - servers: [epoll-et]\n    modes: [long]\n    conns: [10]\n    rounds: [10]\nbench: {engine: uring}\n";
    let e = Experiment::parse(long, "r.yaml").unwrap();
    assert_eq!(e.bench.engine, BenchEngine::Uring);
    assert_eq!(BenchEngine::Uring.to_string(), "uring");
    let msg = Experiment::parse(&long.replace("[long]", "[short, long]"), "r.yaml")
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("bench.engine: uring runs long connections only")
            && msg.contains("matrix[0].modes"),
        "{msg}"
    );
}

#[test]
fn a_knee_mechanism_names_a_series_and_nothing_a_pair_uses() {
    let scan = EXP31
        .replace("conns: [100]", "conns: [100, 500, 1000]")
        .replace(
            "numerator: {server: epoll-et, mode: long}",
            "numerator: {server: epoll-et, mode: long, conns: 100}",
        )
        .replace(
            "denominator: {server: epoll-et, mode: short}",
            "denominator: {server: epoll-et, mode: short, conns: 100}",
        );
    let knee = |extra: &str| {
        format!("{scan}  mechanisms:\n    - name: k\n      kind: knee\n      source: s\n{extra}")
    };
    Experiment::parse(
        &knee("      series: {server: epoll-et, mode: long}\n"),
        "ok.yaml",
    )
    .unwrap();
    for (extra, field) in [
        ("", "series: a knee mechanism names its scan"),
        ("      series: {server: epoll-et}\n", "series: server=epoll-et must name server and mode"),
        (
            "      series: {server: epoll-et, mode: long}\n      numerator: {server: epoll-et, mode: long, conns: 100}\n",
            "numerator: not used by a knee mechanism",
        ),
        (
            "      series: {server: epoll-et, mode: long}\n      tolerance: 25%\n",
            "tolerance: not used by a knee mechanism",
        ),
    ] {
        let msg = err(&knee(extra));
        assert!(msg.contains(&format!("reference.mechanisms[0].{field}")), "{msg}");
    }
    // A series that is not a scan: one cell.
    let one = EXP31.to_string()
        + "  mechanisms:\n    - name: k\n      kind: knee\n      source: s\n      series: {server: epoll-et, mode: long}\n";
    let msg = err(&one);
    assert!(msg.contains("reference.mechanisms[0].series: server=epoll-et mode=long matches 1 cells of the matrix; a scan needs at least 2"), "{msg}");
}

const ONE_CELL: &str = "name: c\nquestion: q\nrepetitions: 1\nmatrix:\n  - servers: [epoll-et]\n    modes: [long]\n    conns: [10]\n    rounds: [10]\n";

#[test]
fn server_options_are_checked_by_echo_server_s_rules_when_the_file_loads() {
    let base = ONE_CELL;
    let e = Experiment::parse(
        &format!("{base}server: {{backlog: 128, read_buf: 4KiB}}\n"),
        "c.yaml",
    )
    .unwrap();
    assert_eq!((e.server.backlog, e.server.read_buf.0), (128, 4096));
    let msg = err(&format!("{base}server: {{backlog: 0}}\n"));
    assert!(
        msg.contains("server: ") && msg.contains("--backlog"),
        "{msg}"
    );
    // exclusive concerns prefork only: set where no cell runs prefork, it would do nothing.
    let msg = err(&format!("{base}server: {{exclusive: true}}\n"));
    assert!(
        msg.contains("server.exclusive") && msg.contains("prefork"),
        "{msg}"
    );
    let prefork = base.replace("[epoll-et]", "[epoll-et, prefork]");
    let e =
        Experiment::parse(&format!("{prefork}server: {{exclusive: true}}\n"), "c.yaml").unwrap();
    assert!(e.server.exclusive);
}

#[test]
fn client_options_are_checked_by_echo_bench_s_rules_when_the_file_loads() {
    let base = ONE_CELL;
    let e = Experiment::parse(&format!("{base}bench: {{nodelay: false}}\n"), "c.yaml").unwrap();
    assert!(!e.bench.nodelay);
    let msg = err(&format!("{base}bench: {{threads: 0}}\n"));
    assert!(
        msg.contains("bench: ") && msg.contains("--threads"),
        "{msg}"
    );
    let storm = base.replace("[long]", "[connect-storm]");
    let msg = err(&format!("{storm}bench: {{engine: thread}}\n"));
    assert!(
        msg.contains("connect-storm, which runs on the event engine only"),
        "{msg}"
    );
}

#[test]
fn probe_blocks_are_open_loop_timed_and_kept_out_of_other_selectors() {
    let probe = "  - servers: [epoll-et]\n    modes: [long]\n    conns: [10]\n    rounds: [10]\n    rate: 500\n    time_syscalls: true\n";
    let e = Experiment::parse(&format!("{ONE_CELL}{probe}"), "p.yaml").unwrap();
    let cells = e.cells();
    assert_eq!(cells.len(), 2, "the probe is a cell of its own");
    assert_eq!(cells[1].id(), "epoll-et_long_c10_r10_rate500_timed");
    let closed = CellSelector {
        server: Some("epoll-et".into()),
        ..Default::default()
    };
    let open = CellSelector {
        open_loop: true,
        ..closed.clone()
    };
    assert_eq!(
        cells
            .iter()
            .map(|c| (closed.matches(c), open.matches(c)))
            .collect::<Vec<_>>(),
        [(true, false), (false, true)]
    );
    // Timing only on an open-loop probe, of a model that times its calls.
    let msg = err(&format!(
        "{ONE_CELL}{}",
        probe.replace("    rate: 500\n", "")
    ));
    assert!(
        msg.contains("matrix[1].time_syscalls") && msg.contains("rate"),
        "{msg}"
    );
    let msg = err(&format!(
        "{ONE_CELL}{}",
        probe.replace("[epoll-et]", "[thread]")
    ));
    assert!(
        msg.contains("time_syscalls") && msg.contains("\"thread\""),
        "{msg}"
    );
    let msg = err(&format!(
        "{ONE_CELL}{}",
        probe.replace("[long]", "[connect-storm]")
    ));
    assert!(msg.contains("matrix[1].rate"), "{msg}");
    let msg = err(&format!("{ONE_CELL}server: {{time_syscalls: true}}\n"));
    assert!(msg.contains("server.time_syscalls"), "{msg}");
    let msg = err(&format!(
        "{ONE_CELL}{}",
        probe.replace("rate: 500", "rate: -1")
    ));
    assert!(msg.contains("rate"), "{msg}");
}

#[test]
fn a_syscall_cost_mechanism_names_timed_probes() {
    let probe = "  - servers: [epoll-et]\n    modes: [short, long]\n    conns: [10]\n    rounds: [10]\n    rate: 500\n    time_syscalls: true\n";
    let base = format!("{}{probe}", ONE_CELL.replace("[long]", "[short, long]"));
    let mech = |extra: &str| {
        format!(
            "{base}reference:\n  source: s\n  mechanisms:\n    - name: m\n      kind: syscall-cost\n      source: s\n      numerator: {{mode: long}}\n      denominator: {{mode: short}}\n{extra}"
        )
    };
    let both = "      probe_numerator: {mode: long, open_loop: true}\n      probe_denominator: {mode: short, open_loop: true}\n";
    let e = Experiment::parse(&mech(both), "m.yaml").unwrap();
    assert_eq!(e.reference.mechanisms[0].kind, MechanismKind::SyscallCost);
    let msg = err(&mech(
        "      probe_numerator: {mode: long, open_loop: true}\n",
    ));
    assert!(msg.contains("probe_denominator"), "{msg}");
    let msg = err(&mech(
        &both.replace("{mode: long, open_loop: true}", "{mode: long}"),
    ));
    assert!(
        msg.contains("probe_numerator") && msg.contains("open_loop: true"),
        "{msg}"
    );
    let untimed = mech(both).replace("    time_syscalls: true\n", "");
    let msg = err(&untimed);
    assert!(
        msg.contains("time_syscalls") || msg.contains("does not time"),
        "{msg}"
    );
}
