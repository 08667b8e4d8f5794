//! Profiles read, refused and recorded.
use super::*;

#[test]
fn a_recorded_profile_is_its_file_plus_path_and_reads_its_units() {
    let yaml = "name: lossy\ndescription: d\nsource: s\ntopology: link\n\
                uplink: { delay: 10ms, loss: 0.5% }\ndownlink: { delay: 10ms }\n\
                expected: { rtt: { value: 20ms, minus: 1ms, plus: 2ms } }\n";
    let recorded = RecordedProfile {
        profile: Profile::from_yaml(yaml, "lossy.yaml").unwrap(),
        path: "netem/lossy.yaml".into(),
    };
    let json = serde_json::to_value(&recorded).unwrap();
    assert_eq!(json["path"], "netem/lossy.yaml");
    assert_eq!(json["name"], "lossy");
    // Units stay as the profile file writes them; typed, the loss reads as a number again.
    assert_eq!(json["uplink"]["loss"], "0.5%");
    let back: RecordedProfile = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(back, recorded);
    assert_eq!(back.profile.uplink.unwrap().loss.0, 0.5);
    let mut no_path = json;
    no_path.as_object_mut().unwrap().remove("path");
    let back: RecordedProfile = serde_json::from_value(no_path).unwrap();
    assert_eq!(back.path, "");
    let mut unknown = serde_json::to_value(&recorded).unwrap();
    unknown["colour"] = "red".into();
    let e = serde_json::from_value::<RecordedProfile>(unknown)
        .unwrap_err()
        .to_string();
    assert!(e.contains("colour"), "{e}");
}

const CROSSNET: &str = "
name: t
description: d
source: s
topology: link
uplink: { delay: 10ms, jitter: 1ms, rate: 50mbit, limit: 500 }
downlink: { delay: 10ms, jitter: 1ms, distribution: uniform, loss: 0.5%, limit: 500 }
expected:
  rtt: { value: 20.1ms, minus: 1.5ms, plus: 2ms }
";

fn err(text: &str) -> String {
    Profile::from_yaml(text, "x.yaml").unwrap_err().to_string()
}

#[test]
fn a_link_profile_parses() {
    let p = Profile::from_yaml(CROSSNET, "x.yaml").unwrap();
    let up = p.uplink.as_ref().unwrap();
    assert_eq!(up.delay.0, Duration::from_millis(10));
    assert_eq!(up.distribution, JitterDistribution::Normal);
    assert_eq!(up.rate.unwrap().0, 50_000_000);
    let down = p.downlink.as_ref().unwrap();
    assert_eq!(down.distribution, JitterDistribution::Uniform);
    assert_eq!(down.loss.0, 0.5);
    assert_eq!(p.added_rtt(), Duration::from_millis(20));
    let (lo, hi) = p.expected.rtt.range();
    assert_eq!(
        (lo, hi),
        (Duration::from_micros(18_600), Duration::from_micros(22_100))
    );
}

#[test]
fn unknown_keys_name_the_key() {
    let e = err(&CROSSNET.replace("jitter: 1ms, rate", "jiter: 1ms, rate"));
    assert!(
        e.contains("x.yaml") && e.contains("uplink") && e.contains("jiter"),
        "{e}"
    );
    let e = err(&format!("{CROSSNET}colour: blue\n"));
    assert!(e.contains("colour"), "{e}");
}

#[test]
fn bad_units_name_the_field_and_value() {
    let e = err(&CROSSNET.replace(
        "delay: 10ms, jitter: 1ms, rate",
        "delay: 10 parsecs, jitter: 1ms, rate",
    ));
    assert!(
        e.contains("uplink.delay") && e.contains("10 parsecs"),
        "{e}"
    );
    let e = err(&CROSSNET.replace("rate: 50mbit", "rate: 50 furlongs"));
    assert!(
        e.contains("uplink.rate") && e.contains("50 furlongs"),
        "{e}"
    );
    let e = err(&CROSSNET.replace("loss: 0.5%", "loss: 0.5"));
    assert!(e.contains("downlink.loss") && e.contains("0.5"), "{e}");
    let e = err(&CROSSNET.replace("distribution: uniform", "distribution: pareto"));
    assert!(
        e.contains("downlink.distribution") && e.contains("pareto"),
        "{e}"
    );
}

#[test]
fn cross_field_checks_name_the_field() {
    let e = err(&CROSSNET.replace("rate: 50mbit, limit: 500", "rate: 50mbit, limit: 10"));
    assert!(
        e.contains("uplink.limit") && e.contains("10 packets"),
        "{e}"
    );
    let e = err(&CROSSNET.replace(
        "delay: 10ms, jitter: 1ms, rate",
        "delay: 1ms, jitter: 2ms, rate",
    ));
    assert!(e.contains("uplink.jitter"), "{e}");
    let e = err(&CROSSNET.replace("topology: link", "topology: loopback"));
    assert!(e.contains("loopback"), "{e}");
    let e = err(&format!(
        "{CROSSNET}  goodput: {{ value: 47mbit, tolerance: 5% }}\n"
    ));
    assert!(e.contains("expected.goodput"), "{e}");
}

/// CROSSNET with a rate on both directions and `goodput` as its expected goodput.
fn with_goodput(rate: &str, goodput: &str) -> String {
    let text = CROSSNET
        .replace(
            "rate: 50mbit, limit: 500",
            &format!("rate: {rate}, limit: 500"),
        )
        .replace(
            "loss: 0.5%, limit: 500",
            &format!("rate: {rate}, limit: 500"),
        );
    format!("{text}  goodput: {{ value: {goodput}, tolerance: 6% }}\n")
}

#[test]
fn an_expected_block_the_link_cannot_meet_is_refused_naming_both_values() {
    // 10 ms + 10 ms of one-way delay; an RTT accepted only up to 6 ms can never be measured.
    let e = err(&CROSSNET.replace(
        "rtt: { value: 20.1ms, minus: 1.5ms, plus: 2ms }",
        "rtt: { value: 5ms, minus: 1ms, plus: 1ms }",
    ));
    assert!(
        e.contains("expected.rtt") && e.contains("at most 6ms") && e.contains("add 20ms"),
        "{e}"
    );
    // 94 Mbit/s expected (at least 88.36 with 6%) through a 50 Mbit/s link.
    let e = err(&with_goodput("50mbit", "94mbit"));
    assert!(
        e.contains("expected.goodput: 94mbit")
            && e.contains("88.36mbit")
            && e.contains("rate 50mbit")
            && e.contains("mbit = megabits/s"),
        "{e}"
    );
    // At the rate itself, after the tolerance, is possible.
    assert!(Profile::from_yaml(&with_goodput("50mbit", "53mbit"), "x").is_ok());
}

#[test]
fn a_rate_in_megabytes_where_megabits_were_meant_is_warned_about() {
    // tc(8): 50mbps is 50 megabytes/s = 400 Mbit/s, eight times the 47 Mbit/s expected.
    let p = Profile::from_yaml(&with_goodput("50mbps", "47.07mbit"), "x").unwrap();
    let w = p.warnings();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains("47.07mbit")
            && w[0].contains("rate 400mbit")
            && w[0].contains("mbps = MBps = megabytes/s"),
        "{w:?}"
    );
    let meant = Profile::from_yaml(&with_goodput("50mbit", "47.07mbit"), "x").unwrap();
    assert_eq!(meant.warnings(), Vec::<String>::new());
}

#[test]
fn the_shipped_profiles_load_without_warnings() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../netem");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let p = Profile::load(&path).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(p.warnings(), Vec::<String>::new(), "{}", path.display());
            seen += 1;
        }
    }
    assert_eq!(seen, 4, "loopback, lan100, crossnet, native");
}

#[test]
fn json_hands_over_an_equal_profile() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../netem");
    let names = crate::inputs::available(&dir);
    assert!(names.len() >= 3, "{names:?}");
    let mut profiles: Vec<Profile> = names
        .iter()
        .map(|n| Profile::resolve(n, &dir).unwrap().1)
        .collect();
    // Values that a short unit spelling could round: sub-microsecond times, odd rates.
    profiles.push(
        Profile::from_yaml(
            &CROSSNET
                .replace(
                    "delay: 10ms, jitter: 1ms, rate",
                    "delay: 10000123ns, jitter: 1ms, rate",
                )
                .replace("rate: 50mbit", "rate: 50000001bit")
                .replace("loss: 0.5%", "loss: 0.125%"),
            "x.yaml",
        )
        .unwrap(),
    );
    for p in profiles {
        let back = Profile::from_json(&p.to_json(), "json").unwrap();
        assert_eq!(back, p, "{}", p.to_json());
    }
    let e = Profile::from_json(r#"{"name":"x"}"#, "--profile-json").unwrap_err();
    assert!(
        e.to_string()
            .starts_with("profile --profile-json: missing field"),
        "{e}"
    );
}

#[test]
fn resolve_names_the_unknown_profile() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../netem");
    let (path, p) = Profile::resolve("crossnet", &dir).unwrap();
    assert_eq!(
        (path, p.name.as_str()),
        (dir.join("crossnet.yaml"), "crossnet")
    );
    let e = Profile::resolve("mars", &dir).unwrap_err();
    assert!(
        e.starts_with("unknown profile 'mars'") && e.contains("crossnet"),
        "{e}"
    );
}

#[test]
fn default_limit_covers_twice_the_bdp() {
    let spec = LinkSpec {
        delay: Dur(Duration::from_millis(100)),
        rate: Some(BitRate(1_000_000_000)),
        ..LinkSpec::default()
    };
    // 1 Gbit/s × 100 ms = 12.5 MB = 8334 packets of 1500 bytes.
    assert_eq!(spec.bdp_packets(), 8334);
    assert_eq!(spec.effective_limit(), 16_668);
    assert_eq!(LinkSpec::default().effective_limit(), NETEM_DEFAULT_LIMIT);
}

#[test]
fn native_adds_nothing_and_expects_no_goodput() {
    let native = "name: n\ndescription: d\nsource: s\ntopology: native\nexpected:\n  rtt: { value: 0s, minus: 0s, plus: 5ms }\n";
    let p = Profile::from_yaml(native, "n.yaml").unwrap();
    assert_eq!(p.topology, Topology::Native);
    assert_eq!(
        serde_json::to_value(p.topology).unwrap(),
        serde_json::json!(p.topology.name())
    );
    assert_eq!(p.added_rtt(), Duration::ZERO);
    for link in [
        "uplink: { delay: 1ms }\n",
        "downlink: { delay: 1ms }\n",
        "uplink: { delay: 1ms }\ndownlink: { delay: 1ms }\n",
    ] {
        let e = err(&format!("{native}{link}"));
        assert!(e.contains("native") && e.contains("uplink"), "{e}");
        let lo = native.replace("native", "loopback");
        let e = err(&format!("{lo}{link}"));
        assert!(e.contains("loopback") && e.contains("uplink"), "{e}");
    }
    let e = err(&format!(
        "{native}  goodput: {{ value: 94mbit, tolerance: 3% }}\n"
    ));
    assert!(e.contains("expected.goodput"), "{e}");
}

#[test]
fn added_rtt_tolerance_is_a_link_only_key_with_a_documented_default() {
    let lo = "name: lo\ndescription: d\nsource: s\ntopology: loopback\nexpected:\n  rtt: { value: 0s, minus: 0s, plus: 1ms }\n";
    let e = err(&format!(
        "{lo}  added_rtt: {{ relative: 5%, at_least: 10us }}\n"
    ));
    assert!(
        e.contains("expected.added_rtt") && e.contains("loopback"),
        "{e}"
    );
    let e = err(&format!("{CROSSNET}  added_rtt: {{ relative: 5% }}\n"));
    assert!(e.contains("at_least"), "{e}");
    let p = Profile::from_yaml(CROSSNET, "x.yaml").unwrap();
    assert_eq!(p.added_rtt_tolerance(), AddedRttTolerance::default());
    assert_eq!(
        AddedRttTolerance::default().range(Duration::from_micros(200)),
        (Duration::from_micros(150), Duration::from_micros(250))
    );
    // Jitter does not move the expected value; no rate on the downlink, no serialization.
    // Uplink: 10 ms + (100 + 0) x 8 bits at 50 Mbit/s = 16 us.
    assert_eq!(p.expected_added_rtt(100), Duration::from_micros(20_016));
    let json = Profile::from_json(&p.to_json(), "j").unwrap();
    assert_eq!(json, p, "an absent key stays absent through JSON");
}
