//! The attribution under `explain/`: synthetic reruns whose answer is known (a setting that
//! moves a claim's ratio, one that does not, one too noisy to tell) and batches of one
//! variant pooled without dropping or repeating a repetition.

mod common;

use common::{closed_loop_runs, exp31_qps, manifest, row, section, shipped, temp_dir, write_dir};
use echolab_core::experiment::BenchMode;
use echolab_core::results::{RunRecord, RunStatus};
use echolab_report::attribution::{Batch, ExplainIndex, Variant, EXPLAIN_DIR, HERE};

/// A variant under `explain/<name>/` with one results directory per entry of `long_factors`,
/// whose long cells run at that factor of the main run's QPS.
fn variant(root: &std::path::Path, name: &str, settings: &[&str], long_factors: &[f64]) -> Variant {
    let e = shipped("exp31");
    let batches = long_factors
        .iter()
        .enumerate()
        .map(|(i, &factor)| {
            let runs: Vec<RunRecord> = closed_loop_runs(
                &e,
                |c| {
                    let f = if c.mode == BenchMode::Long {
                        factor
                    } else {
                        1.0
                    };
                    exp31_qps(c).into_iter().map(|q| q * f).collect()
                },
                |c, q| c.conns as f64 / q * 1e6,
            );
            let rel = format!("{name}/20261205T00000{i}Z-exp31-loopback");
            write_dir(
                &root.join(EXPLAIN_DIR).join(&rel),
                &manifest(e.clone(), RunStatus::Complete, 12),
                &runs,
            );
            Batch {
                args: vec![],
                dir: Some(rel),
                outcome: "complete".into(),
            }
        })
        .collect();
    Variant {
        name: name.into(),
        settings: settings.iter().map(|s| s.to_string()).collect(),
        batches,
    }
}

/// The main run's directory (exp31 with the shared QPS figures) and an index over `variants`
/// for `claim`, with the settle `margin`.
fn explained(
    tag: &str,
    claim: &str,
    margin: f64,
    variants: impl Fn(&std::path::Path) -> Vec<Variant>,
) -> echolab_testkit::TempDir {
    explained_design(tag, claim, margin, &[], variants)
}

/// [`explained`] with the index naming `factors` as a two-level factorial's (none: an index of
/// one setting at a time), looks after 3 repetitions.
fn explained_design(
    tag: &str,
    claim: &str,
    margin: f64,
    factors: &[&str],
    variants: impl Fn(&std::path::Path) -> Vec<Variant>,
) -> echolab_testkit::TempDir {
    let tmp = temp_dir(tag);
    let e = shipped("exp31");
    let runs = closed_loop_runs(&e, exp31_qps, |c, q| c.conns as f64 / q * 1e6);
    write_dir(tmp.path(), &manifest(e, RunStatus::Complete, 12), &runs);
    ExplainIndex {
        claims: vec![claim.into()],
        variants: variants(tmp.path()),
        margin,
        ended: "Every change settled. Rounds run: 1.".into(),
        cannot_vary: vec!["kernel: 3.10 in the seed, 6.1 here".into()],
        factors: factors.iter().map(|f| f.to_string()).collect(),
        looks: if factors.is_empty() { vec![] } else { vec![3] },
    }
    .save(tmp.path())
    .unwrap();
    tmp
}

const LT: &str = "long/short QPS gain, LT server";

/// Here, a setting that moves the long cells to 60% (LT's gain 3.09× → 1.86×, toward the
/// seed's 1.48×) and one that changes nothing.
fn moved_and_unmoved(root: &std::path::Path) -> Vec<Variant> {
    vec![
        variant(root, HERE, &[], &[1.0]),
        variant(root, "cpu-plan", &["CPU plan"], &[0.6]),
        variant(root, "hosts", &["hosts"], &[1.0]),
    ]
}

#[test]
fn the_attribution_names_the_setting_that_moves_a_claim_and_not_the_one_that_does_not() {
    let tmp = explained("attribution", LT, 0.10, moved_and_unmoved);
    let summary = echolab_report::render(tmp.path()).unwrap();
    assert!(summary.complete);
    let md = std::fs::read_to_string(tmp.path().join("report.md")).unwrap();
    let s = section(&md, "Attribution: the gap to the seed, setting by setting");
    assert!(
        s.contains("Settings that move it toward the seed by more than 10.0%: CPU plan."),
        "{s}"
    );
    assert!(!s.contains("Unsettled at"), "{s}");
    let hosts = row(s, "hosts (`hosts`)");
    assert_eq!(hosts[1], "3", "{s}");
    // The same QPS as the rerun as here: a change of exactly 1× whose interval (about ±6%
    // over the four cells' spread) lies within the 10% margin.
    assert!(hosts[4].starts_with("1.00× (95% CI "), "{s}");
    assert!(
        hosts[5].starts_with("does not move it by more than 10.0%"),
        "{s}"
    );
    // Long cells at 60%: the change is 0.600× whatever the repetitions' spread.
    assert!(
        row(s, "CPU plan (`cpu-plan`)")[4].starts_with("0.600× (95% CI "),
        "{s}"
    );
    assert!(s.contains("Left unexplained"), "{s}");
    assert_eq!(
        echolab_report::attribution::text(tmp.path()),
        format!("  {LT}: Settings that move it toward the seed by more than 10.0%: CPU plan.\n")
    );
}

/// A 2×2 factorial over the CPU plan and the hosts: the CPU plan takes the long cells to 60%
/// whatever the hosts, the hosts change nothing, so the main effects are 0.600× and 1×, the
/// interaction 1×, and the CPU plan closes ln 0.6 / ln(seed / here) of the gap.
#[test]
fn a_factorial_gives_main_effects_an_interaction_and_shares_of_the_gap() {
    let tmp = explained_design("factorial", LT, 0.10, &["CPU plan", "hosts"], |root| {
        vec![
            variant(root, HERE, &[], &[1.0]),
            variant(root, "cpu-plan", &["CPU plan"], &[0.6]),
            variant(root, "hosts", &["hosts"], &[1.0]),
            variant(root, "all-seed-settings", &["CPU plan", "hosts"], &[0.6]),
        ]
    });
    let md = {
        echolab_report::render(tmp.path()).unwrap();
        std::fs::read_to_string(tmp.path().join("report.md")).unwrap()
    };
    let s = section(&md, "Attribution: the gap to the seed, setting by setting");
    assert!(s.contains("as a two-level factorial"), "{s}");
    let cpu = row(s, "CPU plan");
    assert!(cpu[1].starts_with("0.600× (95% CI "), "{s}");
    assert!(
        cpu[3].starts_with("moves it toward the seed's figure"),
        "{s}"
    );
    let all = echolab_report::attribution::load(tmp.path())
        .unwrap()
        .unwrap();
    let (share, ci) = all[0].effects[0].estimate.share.unwrap();
    let here = all[0].results[0]
        .check
        .as_ref()
        .unwrap()
        .ours
        .as_ref()
        .unwrap()
        .value;
    let expected = 0.6f64.ln() / (all[0].seed.unwrap() / here).ln();
    assert!((share - expected).abs() < 1e-3, "{share} vs {expected}");
    assert!(ci.low < share && share < ci.high, "{ci:?}");
    let hosts = row(s, "hosts");
    assert!(hosts[1].starts_with("1.00× (95% CI "), "{s}");
    assert!(hosts[3].starts_with("does not move it"), "{s}");
    let pair = row(s, "CPU plan × hosts");
    assert!(pair[1].starts_with("1.00× (95% CI "), "{s}");
    assert_eq!(pair[2], "—", "an interaction gets no share");
    assert!(
        s.contains("Settings that move it toward the seed by more than 10.0%: CPU plan."),
        "{s}"
    );
}

/// The same reruns against a 3% margin, and a setting whose long cells run at 93%: the
/// unchanged setting's interval (about ±6%) holds 1× but reaches past the margin; the 93% one's
/// excludes 1× but reaches inside 1× − 3%, so it may move the gain by less than the margin.
/// Both are unsettled, neither is named as a move, and another round would rerun both.
#[test]
fn a_change_across_the_margins_edge_is_unsettled_and_named_for_another_round() {
    let tmp = explained("unsettled", LT, 0.03, |root| {
        let mut v = moved_and_unmoved(root);
        v.push(variant(root, "cell-measures", &["cell measures"], &[0.93]));
        v
    });
    let all = echolab_report::attribution::load(tmp.path())
        .unwrap()
        .unwrap();
    let small = all[0].results[3].change.as_ref().unwrap().ci95.unwrap();
    assert!(small.high < 1.0 && small.high > 1.0 / 1.03, "{small:?}");
    assert_eq!(
        echolab_report::attribution::unsettled_variants(&all),
        ["hosts", "cell-measures"]
    );
    assert_eq!(
        echolab_report::attribution::text(tmp.path()),
        format!(
            "  {LT}: Settings that move it toward the seed by more than 3.0%: CPU plan. Unsettled at the repetitions run: hosts, cell measures.\n"
        )
    );
}

/// Two batches of `here`, the second's long cells at 57/54 of the first's. The gain is the
/// ratio of geometric means over six repetitions (the log-t ratio of
/// `echolab_report::inference::ratio`): long 53000, 54000, 55000 and those × 57/54, over
/// short 24000, 25000, 26000 twice, = 2.22012× (python3: `g(L+L2)/g(S+S)`). Dropping the
/// second batch gives 2.16091×, counting the first twice 2.20020×, and a second batch that
/// overwrote the first's repetition numbers 2.16091× or 2.28096×.
#[test]
fn a_variants_batches_pool_every_repetition_once() {
    let et = "long/short QPS gain, ET server";
    let tmp = explained("pooled", et, 0.05, |root| {
        vec![
            variant(root, HERE, &[], &[1.0, 57.0 / 54.0]),
            variant(root, "hosts", &["hosts"], &[1.0]),
        ]
    });
    let all = echolab_report::attribution::load(tmp.path())
        .unwrap()
        .unwrap();
    let here = &all[0].results[0];
    assert_eq!(here.repetitions, 6);
    let ratio = here.check.as_ref().unwrap().ours.as_ref().unwrap().value;
    assert!((ratio - 2.22012).abs() < 1e-5, "{ratio}");
    // The rerun under `hosts` has 3 repetitions, compared with here's 6.
    assert_eq!(all[0].results[1].repetitions, 3);
    let pooled = echolab_report::attribution::pooled(
        tmp.path(),
        &ExplainIndex::load(tmp.path()).unwrap().unwrap().variants[0],
    )
    .unwrap();
    let mut reps: Vec<u64> = pooled
        .runs
        .iter()
        .filter(|r| r.cell.server == "epoll-et" && r.cell.mode == BenchMode::Long)
        .filter(|r| r.cell.rate.is_none())
        .map(|r| r.repetition)
        .collect();
    reps.sort();
    assert_eq!(reps, [1, 2, 3, 4, 5, 6]);
}

/// "Reading a verdict" walks one claim through to its attribution: every variant with its
/// repetitions, its ratio, its change from here and what that change says, then the settings
/// named, why the rounds ended and what could not vary; a claim the run does not have is
/// refused with the names it has.
#[test]
fn the_walkthrough_ends_with_the_claims_attribution() {
    let tmp = explained("walkthrough", LT, 0.10, moved_and_unmoved);
    let md = echolab_report::walkthrough::render(tmp.path(), LT).unwrap();
    let part = &md[md.find("### 4. Attribution").expect("section 4")..];
    let line = |start: &str| {
        part.lines()
            .find(|l| l.starts_with(start))
            .unwrap_or_else(|| panic!("no line {start:?} in {part}"))
    };
    assert!(
        line("- rerun as here, 3 repetitions: ").contains("× (95% CI "),
        "{part}"
    );
    // ln(1 / 0.6) / ln(3.0941 / 1.48): the long cells at 60% close 69.3% of the log gap
    // from here's 3.0941× (geometric means of 80–84k over 26–27k) to the seed's 1.48×.
    let cpu = line("- as the seed's CPU plan, 3 repetitions: ");
    assert!(
        cpu.contains("; change from here 0.600× (95% CI ")
            && cpu.ends_with(
                "moves it toward the seed's figure by more than 10.0%, closing 69.3% of the gap"
            ),
        "{cpu}"
    );
    assert!(
        line("- as the seed's hosts, 3 repetitions: ")
            .contains("; change from here 1.00× (95% CI "),
        "{part}"
    );
    assert!(
        part.contains("\nSettings that move it toward the seed by more than 10.0%: CPU plan.\n"),
        "{part}"
    );
    assert!(
        part.contains("\nEvery change settled. Rounds run: 1.\n"),
        "{part}"
    );
    assert!(
        part.contains("Left unexplained, because this machine cannot vary them: kernel"),
        "{part}"
    );
    let err = echolab_report::walkthrough::render(tmp.path(), "no such claim").unwrap_err();
    assert!(err.to_string().contains(LT), "{err}");
}
