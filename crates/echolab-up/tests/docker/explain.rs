//! `echolab-up --explain` end to end, on a small experiment: after the run, one round of
//! reruns, each variant under exactly the seed's settings it names (read back from its own
//! manifest, as the report's "Setting: seed vs here" table reads them), the kernel named as
//! left unexplained, the attribution in the report, and nothing left on the engine.

use echolab_core::results::ResultsDir;
use echolab_report::attribution::{ExplainIndex, ALL_SEED, EXPLAIN_DIR, HERE};
use echolab_report::setting::{self, Setting};
use echolab_testkit::TempDir;

use super::common::*;

/// exp31's ET cells (100 connections, so that they are server-bound and the claim is judged),
/// in short windows, with one claim and the seed's setup. The seed's figure is one no
/// run gives (long connections at half the short ones' QPS), so that the claim is refuted and
/// explained whatever this machine measures; two repetitions, the minimum and the maximum, so
/// that one round ends the reruns.
const SMALL_EXP31: &str = r#"name: small31
question: q
repetitions: 2
max_repetitions: 2
target_halfwidth: 5%
warmup: 100ms
window: 300ms
matrix:
  - servers: [epoll-et]
    modes: [short, long]
    conns: [100]
    rounds: [10]
reference:
  source: "seed 000, experiment 3.1 (a made-up figure, for the test)"
  title: "t"
  environment: "4-core CVM, kernel 3.10"
  figures: []
  setup: {topology: loopback, profile: loopback, cores: 4, kernel: "3.10", timing: bench-clock, client: thread}
  claims:
    - name: "long/short QPS gain, ET server"
      metric: qps
      numerator: {server: epoll-et, mode: long}
      denominator: {server: epoll-et, mode: short}
      seed_ratio: 0.5
      kind: magnitude
      tolerance: 15%
"#;

/// The settings a results directory's manifest has as the seed had them.
fn as_seed(r: &ResultsDir) -> Vec<Setting> {
    setting::rows(&r.manifest)
        .into_iter()
        .filter(|row| !row.differs)
        .map(|row| row.setting)
        .collect()
}

#[test]
fn explain_reruns_each_variant_under_the_settings_it_names() {
    let e = engine();
    let base = TempDir::new("up-docker-explain");
    let (mut cmd, out) = loopback_experiment(&base, "small31.yaml", SMALL_EXP31);
    let main = completed(cmd.arg("--explain"), &out);
    let index = ExplainIndex::load(&main.path)
        .unwrap()
        .expect("--explain wrote explain/index.yaml");
    // Four settings vary: the resolution IV half fraction of their two-level factorial, 8
    // runs, each with an even number of the seed's settings (I = ABCD), `here` and all four
    // among them, and every pair of settings once.
    assert_eq!(
        index.factors,
        ["CPU plan", "client", "cell measures", "hosts"],
        "{index:?}"
    );
    let names: Vec<&str> = index.variants.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names.len(), 8, "{names:?}");
    assert!(
        names.contains(&HERE) && names.contains(&ALL_SEED),
        "{names:?}"
    );
    assert!(
        index.variants.iter().all(|v| v.settings.len() % 2 == 0),
        "{:?}",
        index.variants
    );
    for pair in ["cpu-plan+client", "cell-measures+hosts", "client+hosts"] {
        assert!(names.contains(&pair), "{pair} in {names:?}");
    }
    assert!(
        index.ended.ends_with("Rounds run: 1."),
        "two repetitions are the maximum: {}",
        index.ended
    );
    assert!(
        index
            .cannot_vary
            .iter()
            .any(|l| l.starts_with("kernel: 3.10")),
        "{:?}",
        index.cannot_vary
    );
    let here_as_seed = as_seed(&main);
    for v in &index.variants {
        assert_eq!(v.batches.len(), 1, "{}: {:?}", v.name, v.batches);
        let batch = &v.batches[0];
        assert_eq!(batch.outcome, "complete", "{}", v.name);
        let dir = main
            .path
            .join(EXPLAIN_DIR)
            .join(batch.dir.as_ref().expect("a results directory"));
        let r = ResultsDir::load(&dir).unwrap_or_else(|err| panic!("{}: {err}", v.name));
        assert_eq!(r.runs.len(), 4, "{}: 2 cells × 2 repetitions", v.name);
        assert!(r.runs.iter().all(|x| x.error.is_none()), "{}", v.name);
        // The rerun has the seed's setting for exactly the settings it names, on top of
        // those the main run already shared with the seed.
        let mut expected: Vec<Setting> = here_as_seed.clone();
        for name in &v.settings {
            let s = setting::rows(&r.manifest)
                .into_iter()
                .map(|row| row.setting)
                .find(|s| s.name() == name)
                .unwrap_or_else(|| panic!("{}: no setting named {name}", v.name));
            expected.push(s);
        }
        let mut got = as_seed(&r);
        got.sort_by_key(|s| s.name());
        expected.sort_by_key(|s| s.name());
        assert_eq!(got, expected, "{}", v.name);
        assert_nothing_left(&e, &r.manifest.run_id);
    }
    let report = std::fs::read_to_string(main.path.join("report.md")).unwrap();
    let section = report
        .split("## Attribution: the gap to the seed, setting by setting")
        .nth(1)
        .unwrap_or_else(|| panic!("no attribution in {report}"));
    for v in &index.variants {
        assert!(
            section.contains(&format!("(`{}`) | 2 |", v.name)),
            "{}: {section}",
            v.name
        );
    }
    assert!(
        section.contains("Settings that move it toward the seed by more than 5.0%: "),
        "{section}"
    );
    // Main effects and the aliased pairs, each with its interval.
    assert!(section.contains("Effects of the factorial"), "{section}");
    assert!(
        section.contains("| CPU plan × client (= cell measures × hosts, aliased) |"),
        "{section}"
    );
    assert_nothing_left(&e, &main.manifest.run_id);
}
