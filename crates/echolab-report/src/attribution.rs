//! Attribution of the gap to the seed: the cells of every refuted or inconclusive claim run
//! again under the seed's setting, one difference at a time and all together
//! (`echolab-up --explain`), and the claim's ratio under each setting set beside the ratio
//! here (docs/methodology.md, "Attribution").
//!
//! `echolab-up --explain` writes `explain/index.yaml` ([`ExplainIndex`]) in the run's results
//! directory and one ordinary results directory per setting under `explain/<setting>/`; this
//! module reads them. A setting **moves** a claim's ratio when the ratio of its ratio to the
//! ratio of the same cells rerun as here (the `here` variant, run in the same sequence) has a
//! 95% interval that excludes 1 ([`ratio_of_ratios`]; where a sample has a
//! 0, when the two intervals do not overlap); it moves it **toward** the seed's figure when the distance to that figure
//! (in log ratio) shrinks, and the share of the gap it closes is
//! (ln here − ln setting) / (ln here − ln seed). What no setting of this machine can vary
//! (the kernel, more CPUs than the machine has) is named as the part left unexplained.

use std::path::{Path, PathBuf};

use echolab_core::results::ResultsDir;
use serde::{Deserialize, Serialize};

use crate::claims::{self, ClaimCheck};
use crate::dataset::Dataset;
use crate::format::{self, Table};
use crate::inference::{Interval, Method, Ratio};

/// The directory under a run's results directory that `--explain` writes.
pub const EXPLAIN_DIR: &str = "explain";
/// The index file in [`EXPLAIN_DIR`].
pub const INDEX_FILE: &str = "index.yaml";
/// The variant that reruns the cells as the main run had them.
pub const HERE: &str = "here";
/// The variant with every setting of the seed's that this machine can run.
pub const ALL_SEED: &str = "all-seed-settings";

/// One rerun of the claims' cells under a setting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Variant {
    /// `here`, a setting's name in kebab case (`cpu-plan`), or [`ALL_SEED`].
    pub name: String,
    /// The settings (as the "Setting: seed vs here" table names them) run as the seed's.
    pub settings: Vec<String>,
    /// echolab-up's arguments for the rerun.
    pub args: Vec<String>,
    /// Its results directory, relative to [`EXPLAIN_DIR`]; absent when it made none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
    /// How it ended: `complete`, or the reason it did not.
    pub outcome: String,
}

/// `explain/index.yaml`: what `--explain` ran and why.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExplainIndex {
    /// The claims explained (refuted or inconclusive in the main run), by name.
    pub claims: Vec<String>,
    /// The reruns, in the order they ran.
    pub variants: Vec<Variant>,
    /// Settings that differ from the seed's but cannot vary on this machine, each with why.
    pub cannot_vary: Vec<String>,
}

impl ExplainIndex {
    /// Reads `<dir>/explain/index.yaml`; `Ok(None)` when there is none.
    ///
    /// # Errors
    /// It exists but cannot be read or parsed (the message names the file).
    pub fn load(dir: &Path) -> Result<Option<Self>, String> {
        let path = dir.join(EXPLAIN_DIR).join(INDEX_FILE);
        if !path.exists() {
            return Ok(None);
        }
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        serde_yaml::from_str(&text)
            .map(Some)
            .map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Writes it to `<dir>/explain/index.yaml`.
    ///
    /// # Errors
    /// The file cannot be written.
    pub fn save(&self, dir: &Path) -> Result<(), String> {
        let path = dir.join(EXPLAIN_DIR).join(INDEX_FILE);
        let text = serde_yaml::to_string(self).map_err(|e| e.to_string())?;
        echolab_core::results::write_atomic(&path, text.as_bytes()).map_err(|e| e.to_string())
    }
}

/// What one setting did to a claim's ratio, against the same cells rerun as here.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Move {
    /// The intervals overlap: no measurable move.
    None,
    /// Toward the seed's figure, closing this share of the log gap (above 1: past it).
    Toward(f64),
    /// Away from it.
    Away,
    /// A side has no interval.
    Unknown,
}

/// How `setting` moved the ratio from `here`, given the seed's figure `seed` and, where the
/// four samples allow it, the ratio of the two ratios with its interval
/// ([`ratio_of_ratios`]): moved when that interval excludes 1; without it,
/// when the two ratios' own intervals do not overlap (see the module doc).
pub fn movement(here: &Ratio, setting: &Ratio, change: Option<&Ratio>, seed: f64) -> Move {
    let (Some(a), Some(b)) = (here.ci95, setting.ci95) else {
        return Move::Unknown;
    };
    let unmoved = match change.and_then(|c| c.ci95) {
        Some(c) => c.low <= 1.0 && 1.0 <= c.high,
        None => a.high >= b.low && b.high >= a.low,
    };
    if unmoved {
        return Move::None;
    }
    let gap = here.value.ln() - seed.ln();
    let (d_here, d_setting) = (gap.abs(), (setting.value.ln() - seed.ln()).abs());
    if d_setting < d_here {
        Move::Toward((here.value.ln() - setting.value.ln()) / gap)
    } else {
        Move::Away
    }
}

impl Move {
    /// How the report says it.
    pub fn text(self) -> String {
        match self {
            Move::None => "does not move it (the change's 95% interval holds 1×)".into(),
            Move::Toward(share) => format!(
                "moves it toward the seed's figure, closing {} of the gap",
                format::pct(share)
            ),
            Move::Away => "moves it away from the seed's figure".into(),
            Move::Unknown => "no interval to compare".into(),
        }
    }
}

/// One claim under one variant.
#[derive(Debug, Clone)]
pub struct VariantResult {
    /// The variant.
    pub variant: Variant,
    /// The claim checked on the variant's directory, when it has one.
    pub check: Option<ClaimCheck>,
    /// Against the `here` rerun (none for `here` itself).
    pub movement: Option<Move>,
    /// This ratio over the `here` rerun's, with its 95% interval, where the samples allow it.
    pub change: Option<Ratio>,
}

/// One claim's attribution.
#[derive(Debug, Clone)]
pub struct ClaimAttribution {
    /// The claim's name.
    pub claim: String,
    /// The seed's figure the gap is measured to (`expect`, else `seed_ratio`).
    pub seed: Option<f64>,
    /// Each variant, in the index's order.
    pub results: Vec<VariantResult>,
}

impl ClaimAttribution {
    /// The single settings that move the ratio toward the seed's figure, by name.
    pub fn toward(&self) -> Vec<String> {
        self.results
            .iter()
            .filter(|r| r.variant.settings.len() == 1)
            .filter(|r| matches!(r.movement, Some(Move::Toward(_))))
            .map(|r| r.variant.settings[0].clone())
            .collect()
    }
}

/// The results directory a variant made, under `explain/`.
fn variant_dir(root: &Path, v: &Variant) -> Option<PathBuf> {
    v.dir.as_ref().map(|d| root.join(EXPLAIN_DIR).join(d))
}

/// Reads the attribution of the run in `dir`; `Ok(None)` when `--explain` did not run there.
///
/// # Errors
/// The index does not parse (a variant directory that does not load is reported in its row).
pub fn load(dir: &Path) -> Result<Option<Vec<ClaimAttribution>>, String> {
    let Some(index) = ExplainIndex::load(dir)? else {
        return Ok(None);
    };
    let loaded: Vec<(Variant, Option<ResultsDir>)> = index
        .variants
        .iter()
        .map(|v| {
            let results = variant_dir(dir, v).and_then(|d| ResultsDir::load(&d).ok());
            (v.clone(), results)
        })
        .collect();
    let check_of = |results: &Option<ResultsDir>, claim: &str| {
        let r = results.as_ref()?;
        let ds = Dataset::new(r);
        let c = r
            .manifest
            .experiment
            .reference
            .claims
            .iter()
            .find(|c| c.name == claim)?;
        let values = |sel| match ds.select(sel).as_slice() {
            [one] => one.values(&c.metric),
            _ => Vec::new(),
        };
        let samples = [values(&c.numerator), values(&c.denominator)];
        Some((claims::check(&ds, &r.manifest, c), samples))
    };
    let mut out = Vec::new();
    for claim in &index.claims {
        let checks: Vec<Option<(ClaimCheck, [Vec<f64>; 2])>> =
            loaded.iter().map(|(_, r)| check_of(r, claim)).collect();
        let here = loaded
            .iter()
            .zip(&checks)
            .find(|((v, _), _)| v.name == HERE)
            .and_then(|(_, c)| c.clone());
        let seed = checks
            .iter()
            .flatten()
            .next()
            .and_then(|(c, _)| c.claim.expect.or(c.claim.seed_ratio));
        let results = loaded
            .iter()
            .zip(checks)
            .map(|((variant, _), found)| {
                let (check, samples) = match found {
                    Some((c, s)) => (Some(c), Some(s)),
                    None => (None, None),
                };
                let change = match (&here, &samples) {
                    (Some((_, h)), Some(s)) if variant.name != HERE => {
                        ratio_of_ratios([&s[0], &s[1]], [&h[0], &h[1]])
                    }
                    _ => None,
                };
                let mine = check.as_ref().and_then(|c| c.ours.as_ref());
                let movement = match (&here, mine, seed) {
                    (Some((h, _)), Some(o), Some(s)) if variant.name != HERE => h
                        .ours
                        .as_ref()
                        .map(|hr| movement(hr, o, change.as_ref(), s)),
                    _ => None,
                };
                VariantResult {
                    variant: variant.clone(),
                    check,
                    movement,
                    change,
                }
            })
            .collect();
        out.push(ClaimAttribution {
            claim: claim.clone(),
            seed,
            results,
        });
    }
    Ok(Some(out))
}

/// The section "Attribution: the gap to the seed, setting by setting".
pub fn section(dir: &Path) -> String {
    let (attributions, cannot) = match (load(dir), ExplainIndex::load(dir)) {
        (Ok(Some(a)), Ok(Some(i))) => (a, i.cannot_vary),
        (Err(e), _) | (_, Err(e)) => return format!("## Attribution\n\n⚠ {e}\n\n"),
        _ => return String::new(),
    };
    let mut out = String::from(
        "## Attribution: the gap to the seed, setting by setting\n\n`echolab-up --explain` ran the cells of every refuted or \
         inconclusive claim again: as here, under each of the seed's settings that this machine can run, and under all of \
         them together, one after the other with the experiment's own rules (shuffled rounds, repetitions until the CI is \
         narrow). A setting moves a ratio when the change from the rerun-as-here ratio (their ratio, with a Welch 95% \
         interval over the four cells' repetitions) excludes 1×.\n\n",
    );
    for a in &attributions {
        out.push_str(&format!(
            "### {}\n\nSeed's figure: {}.\n\n",
            a.claim,
            a.seed.map(format::times).unwrap_or_else(|| "—".into())
        ));
        let mut t = Table::new([
            "Setting",
            "Ratio (95% CI)",
            "Verdict",
            "Change from here (95% CI)",
            "Against here",
        ]);
        for r in &a.results {
            let label = if r.variant.settings.is_empty() {
                "as here (rerun)".to_string()
            } else {
                r.variant.settings.join(" + ")
            };
            let (ratio, verdict) = match &r.check {
                Some(c) => (
                    c.ours
                        .as_ref()
                        .map(format::ratio)
                        .unwrap_or_else(|| "—".into()),
                    c.verdict.word().to_string(),
                ),
                None => ("—".into(), r.variant.outcome.clone()),
            };
            t.row([
                format!("{label} (`{}`)", r.variant.name),
                ratio,
                verdict,
                r.change
                    .as_ref()
                    .map(format::ratio)
                    .unwrap_or_else(|| "—".into()),
                r.movement.map(Move::text).unwrap_or_else(|| "—".into()),
            ]);
        }
        out.push_str(&t.to_markdown());
        let toward = a.toward();
        out.push_str(&format!(
            "\nSettings that move it toward the seed: {}.\n\n",
            if toward.is_empty() {
                "none".to_string()
            } else {
                toward.join(", ")
            }
        ));
    }
    if !cannot.is_empty() {
        out.push_str(&format!(
            "Left unexplained (these settings differ from the seed's but cannot vary on this machine): {}.\n\n",
            cannot.join("; ")
        ));
    }
    out
}

/// One line per claim for a terminal: the settings that move it toward the seed.
pub fn text(dir: &Path) -> String {
    match load(dir) {
        Ok(Some(all)) => all
            .iter()
            .map(|a| {
                let toward = a.toward();
                format!(
                    "  {}: {}\n",
                    a.claim,
                    if toward.is_empty() {
                        "no setting moves it toward the seed".to_string()
                    } else {
                        format!("toward the seed under {}", toward.join(", "))
                    }
                )
            })
            .collect(),
        Ok(None) => String::new(),
        Err(e) => format!("  {e}\n"),
    }
}

/// The ratio of two ratios, (a_num / a_den) / (b_num / b_den), of four independent samples
/// of positive values, with its 95% interval: the difference of the log ratios of geometric
/// means, exp(d ± t·se), the standard error summed over the four samples and the degrees of
/// freedom by Welch–Satterthwaite, as [`crate::inference::ratio`] does for two. It says whether a ratio changed
/// between two runs of the same cells (`--explain`'s attribution), a sharper test than two
/// intervals that do not overlap. `None` when a sample has a value of 0 or fewer than 2 values.
pub fn ratio_of_ratios(a: [&[f64]; 2], b: [&[f64]; 2]) -> Option<Ratio> {
    let samples = [a[0], a[1], b[0], b[1]];
    if samples
        .iter()
        .any(|s| s.len() < 2 || s.iter().any(|v| *v <= 0.0))
    {
        return None;
    }
    let stats: Vec<(f64, f64, f64)> = samples
        .iter()
        .map(|s| {
            let logs: Vec<f64> = s.iter().map(|v| v.ln()).collect();
            let m = logs.iter().sum::<f64>() / logs.len() as f64;
            let sd = (logs.iter().map(|x| (x - m).powi(2)).sum::<f64>()
                / (logs.len() as f64 - 1.0))
                .sqrt();
            (m, sd * sd / s.len() as f64, s.len() as f64)
        })
        .collect();
    let d = (stats[0].0 - stats[1].0) - (stats[2].0 - stats[3].0);
    let var: f64 = stats.iter().map(|s| s.1).sum();
    let denom: f64 = stats
        .iter()
        .filter(|s| s.1 > 0.0)
        .map(|s| s.1 * s.1 / (s.2 - 1.0))
        .sum();
    let value = d.exp();
    if var == 0.0 {
        return Some(Ratio {
            value,
            method: Method::Exact,
            ci95: Some(Interval {
                low: value,
                high: value,
            }),
            no_ci: None,
        });
    }
    let df = (var * var / denom).floor().max(1.0) as u64;
    let t = crate::inference::t_975(df).unwrap_or(1.960);
    let se = var.sqrt();
    Some(Ratio {
        value,
        method: Method::LogT,
        ci95: Some(Interval {
            low: (d - t * se).exp(),
            high: (d + t * se).exp(),
        }),
        no_ci: None,
    })
}

#[cfg(test)]
mod tests {
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
        match movement(&here, &halved, None, 2.0) {
            // ln 5 − ln 2.5 over ln 5 − ln 2: 75.6% of the gap.
            Move::Toward(share) => assert!(
                (share - (2.0f64).ln() / 2.5f64.ln()).abs() < 0.01,
                "{share}"
            ),
            m => panic!("{m:?}"),
        }
        assert_eq!(movement(&here, &same, None, 2.0), Move::None);
        assert_eq!(movement(&here, &higher, None, 2.0), Move::Away);
        // Past the seed's figure but closer to it in log ratio: still toward, share above 1.
        let past = gain(&[17_000.0, 17_500.0, 16_500.0], &short);
        assert!(matches!(movement(&here, &past, None, 2.0), Move::Toward(s) if s > 1.0));
    }

    /// Two gains whose own intervals overlap but whose change, tested on the four cells'
    /// repetitions, excludes 1: the sharper test says moved; a change that holds 1 does not.
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
        // 0.9× by construction (every long value at 90%), interval below 1.
        assert!(
            (change.value - 0.9).abs() < 0.01 && change.ci95.unwrap().high < 1.0,
            "{change:?}"
        );
        assert!(matches!(
            movement(&here, &set, Some(&change), 2.0),
            Move::Toward(_)
        ));
        let nothing = ratio_of_ratios([&long_here, &short], [&long_here, &short]).unwrap();
        assert_eq!(movement(&here, &here, Some(&nothing), 2.0), Move::None);
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
        assert_eq!(movement(&here, &one, None, 2.0), Move::Unknown);
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
                args: vec!["--experiment".into(), "x.yaml".into()],
                dir: Some("here/20261205T000000Z-exp31-loopback".into()),
                outcome: "complete".into(),
            }],
            cannot_vary: vec!["kernel: 3.10 in the seed".into()],
        };
        index.save(&dir).unwrap();
        assert_eq!(ExplainIndex::load(&dir).unwrap(), Some(index));
        std::fs::write(dir.join(EXPLAIN_DIR).join(INDEX_FILE), "claims: [").unwrap();
        let err = ExplainIndex::load(&dir).unwrap_err();
        assert!(err.contains("index.yaml"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
