//! Attribution's rules on synthetic repetitions.

use super::*;
use crate::inference::{ratio, Summary};

/// The QPS ratio long/short of synthetic repetitions.
fn gain(long: &[f64], short: &[f64]) -> Ratio {
    ratio(&Summary::of(long).unwrap(), &Summary::of(short).unwrap()).unwrap()
}

/// A setting that halves the long cells' QPS moves a 5× gain toward a 2× seed; one that
/// changes nothing does not move it; one that raises it moves it away.
#[test]
fn a_setting_that_moves_the_ratio_and_one_that_does_not() {
    let short = [10_000.0, 10_200.0, 9_800.0];
    let here = gain(&[50_000.0, 51_000.0, 49_000.0], &short);
    let halved = gain(&[25_000.0, 25_500.0, 24_500.0], &short);
    let same = gain(&[50_500.0, 49_500.0, 50_000.0], &short);
    let higher = gain(&[80_000.0, 81_000.0, 79_000.0], &short);
    match movement(&here, &halved, None, 2.0, 0.05) {
        // ln 5 − ln 2.5 over ln 5 − ln 2: 75.6% of the gap.
        Move::Toward(share) => assert!(
            (share - (2.0f64).ln() / 2.5f64.ln()).abs() < 0.01,
            "{share}"
        ),
        m => panic!("{m:?}"),
    }
    // Without a change interval, overlapping intervals cannot tell "within 5%" from a
    // move too small for them: unsettled.
    assert_eq!(movement(&here, &same, None, 2.0, 0.05), Move::Unsettled);
    assert_eq!(movement(&here, &higher, None, 2.0, 0.05), Move::Away);
    // Apart (intervals a hundredth of a percent wide) but 2% higher: not more than 5%.
    let steady = [10_000.0, 10_001.0, 9_999.0];
    let a = gain(&[50_000.0, 50_001.0, 49_999.0], &steady);
    let b = gain(&[51_000.0, 51_001.0, 50_999.0], &steady);
    assert!(a.ci95.unwrap().high < b.ci95.unwrap().low);
    assert_eq!(movement(&a, &b, None, 2.0, 0.05), Move::Unsettled);
    // Past the seed's figure but closer to it in log ratio: still toward, share above 1.
    let past = gain(&[17_000.0, 17_500.0, 16_500.0], &short);
    assert!(matches!(movement(&here, &past, None, 2.0, 0.05), Move::Toward(s) if s > 1.0));
}

/// Two gains whose own intervals overlap but whose change, tested on the four cells'
/// repetitions, excludes 1: the sharper test decides, and the band decides what it says.
/// A 0.9× change whose interval reaches past 1/(1+m) is unsettled at a 5% margin (it may
/// move the gain by less than 5%) and a move toward the seed at a 2% margin.
#[test]
fn the_change_decides_where_the_intervals_overlap() {
    let short = [10_000.0, 10_400.0, 9_600.0, 10_200.0, 9_800.0];
    let long_here = [50_000.0, 53_000.0, 47_000.0, 51_500.0, 48_500.0];
    let long_set = [45_000.0, 47_700.0, 42_300.0, 46_350.0, 43_650.0];
    let here = gain(&long_here, &short);
    let set = gain(&long_set, &short);
    let (a, b) = (here.ci95.unwrap(), set.ci95.unwrap());
    assert!(a.low <= b.high, "the intervals overlap: {a:?} {b:?}");
    let change = ratio_of_ratios([&long_set, &short], [&long_here, &short]).unwrap();
    // 0.9× by construction (every long value at 90%), interval below 1 and across 1/1.05.
    let c = change.ci95.unwrap();
    assert!((change.value - 0.9).abs() < 0.01, "{change:?}");
    assert!(
        c.high < 1.0 && c.high > 1.0 / 1.05 && c.high < 1.0 / 1.02,
        "{c:?}"
    );
    assert_eq!(
        movement(&here, &set, Some(&change), 2.0, 0.05),
        Move::Unsettled
    );
    assert!(matches!(
        movement(&here, &set, Some(&change), 2.0, 0.02),
        Move::Toward(_)
    ));
    // The same samples on both sides: a change of 1× whose interval is about ±8%
    // (the four samples' spread), within a 15% margin, unsettled against a 5% one.
    let nothing = ratio_of_ratios([&long_here, &short], [&long_here, &short]).unwrap();
    let c = nothing.ci95.unwrap();
    assert!(c.high > 1.05 && c.high < 1.15, "{c:?}");
    assert_eq!(
        movement(&here, &here, Some(&nothing), 2.0, 0.15),
        Move::Within
    );
    assert_eq!(
        movement(&here, &here, Some(&nothing), 2.0, 0.05),
        Move::Unsettled
    );
    // A sample with a 0 has no log interval: None, and the overlap rule decides.
    assert!(ratio_of_ratios([&[0.0, 1.0], &short], [&long_here, &short]).is_none());
}

#[test]
fn without_an_interval_nothing_is_said() {
    let short = [10_000.0, 10_200.0, 9_800.0];
    let one = ratio(
        &Summary::of(&[50_000.0]).unwrap(),
        &Summary::of(&short).unwrap(),
    )
    .unwrap();
    let here = gain(&[50_000.0, 51_000.0, 49_000.0], &short);
    assert_eq!(movement(&here, &one, None, 2.0, 0.05), Move::Unknown);
}

#[test]
fn the_index_round_trips_and_a_missing_one_is_none() {
    let dir = std::env::temp_dir().join(format!("echolab-explain-{}", std::process::id()));
    std::fs::create_dir_all(dir.join(EXPLAIN_DIR)).unwrap();
    assert_eq!(ExplainIndex::load(&dir.join("nowhere")).unwrap(), None);
    let index = ExplainIndex {
        claims: vec!["gain".into()],
        variants: vec![Variant {
            name: HERE.into(),
            settings: vec![],
            batches: vec![Batch {
                args: vec!["--experiment".into(), "x.yaml".into()],
                dir: Some("here/20261205T000000Z-exp31-loopback".into()),
                outcome: "complete".into(),
            }],
        }],
        margin: 0.05,
        ended: "Every change settled. Rounds run: 1.".into(),
        cannot_vary: vec!["kernel: 3.10 in the seed".into()],
        factors: vec!["hosts".into()],
        looks: vec![3, 7, 10],
    };
    index.save(&dir).unwrap();
    assert_eq!(ExplainIndex::load(&dir).unwrap(), Some(index));
    std::fs::write(dir.join(EXPLAIN_DIR).join(INDEX_FILE), "claims: [").unwrap();
    let err = ExplainIndex::load(&dir).unwrap_err();
    assert!(err.contains("index.yaml"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
