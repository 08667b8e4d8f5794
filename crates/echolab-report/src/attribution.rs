//! Attribution of the gap to the seed: the cells of every refuted or inconclusive claim run
//! again under the seed's setting, one difference at a time and all together
//! (`echolab-up --explain`), and the claim's ratio under each setting set beside the ratio
//! here (docs/methodology.md, "Attribution").
//!
//! `echolab-up --explain` writes `explain/index.yaml` ([`ExplainIndex`]) in the run's results
//! directory and, per setting, one ordinary results directory per round under
//! `explain/<setting>/`, pooled here ([`pooled`]); this module reads them. A setting's
//! **change** is the ratio of its ratio to the ratio of the same cells rerun as here (the
//! `here` variant, run in the same rounds), with a 95% interval ([`ratio_of_ratios`]). Against
//! the band 1 ± the index's `margin` (the experiment's target half-width), that interval says
//! one of three things ([`Move`]): it lies wholly outside the band, and the setting **moves**
//! the ratio by more than the margin; wholly inside, and it does not move it by more than the
//! margin; across one of the band's edges, and the change is **unsettled**, whether or not it
//! excludes 1: the claims' own settle rule, applied to the change, so that a move too small to
//! matter at the precision the experiment asks is never named one run and missed the next.
//! A setting that moves the ratio moves it **toward** the seed's figure when the distance to
//! that figure (in log ratio) shrinks, and the share of the gap it closes is
//! (ln here − ln setting) / (ln here − ln seed). Where a sample has a 0 and the change has no
//! interval, the two ratios' own intervals decide: moved when they do not overlap and the
//! change's point lies outside the band, unsettled otherwise. `--explain`
//! reruns the unsettled. What no setting of this machine can vary (the kernel, more CPUs than
//! the machine has) is named as the part left unexplained.

use std::path::Path;

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

/// One batch of repetitions of a variant: one `echolab-up` run into its own results directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Batch {
    /// echolab-up's arguments for the rerun.
    pub args: Vec<String>,
    /// Its results directory, relative to [`EXPLAIN_DIR`]; absent when it made none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
    /// How it ended: `complete`, or the reason it did not.
    pub outcome: String,
}

/// The claims' cells rerun under a setting, in batches (one per round it ran in) whose
/// repetitions are pooled ([`pooled`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Variant {
    /// `here`, a setting's name in kebab case (`cpu-plan`), or [`ALL_SEED`].
    pub name: String,
    /// The settings (as the "Setting: seed vs here" table names them) run as the seed's.
    pub settings: Vec<String>,
    /// Its batches, in the order they ran.
    pub batches: Vec<Batch>,
}

/// `explain/index.yaml`: what `--explain` ran and why.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExplainIndex {
    /// The claims explained (refuted or inconclusive in the main run), by name.
    pub claims: Vec<String>,
    /// The variants, in the order of the first round.
    pub variants: Vec<Variant>,
    /// The settle margin m, a fraction (0.05 for 5%): a change whose 95% interval lies outside
    /// [1/(1+m), 1+m] moves the claim by more than m, one within it does not, one across an
    /// edge is unsettled ([`Move`]). The experiment's `target_halfwidth`, the precision it asks
    /// of every cell.
    pub margin: f64,
    /// Why the rounds of reruns stopped (every change settled, the maximum repetitions, the
    /// time budget), as the report says it.
    #[serde(default)]
    pub ended: String,
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

/// What one setting did to a claim's ratio, against the same cells rerun as here, at the
/// index's margin m (a fraction).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Move {
    /// The change's 95% interval lies within [1/(1+m), 1+m]: it does not move the ratio by
    /// more than m.
    Within,
    /// The change's interval reaches across an edge of that band (or, without a change
    /// interval, the two ratios' intervals overlap): more repetitions could still tell a move
    /// of more than m from a smaller one.
    Unsettled,
    /// Wholly outside the band, toward the seed's figure, closing this share of the log gap
    /// (above 1: past it).
    Toward(f64),
    /// Wholly outside the band, away from it.
    Away,
    /// A side has no interval.
    Unknown,
}

/// How `setting` moved the ratio from `here`, given the seed's figure `seed`, the settle
/// `margin` m (a fraction) and, where the four samples allow it, the ratio of the two ratios
/// with its interval ([`ratio_of_ratios`]): moved when that interval lies outside
/// [1/(1+m), 1+m], within the margin when it lies inside, unsettled when it reaches across an
/// edge; without it, moved when the two ratios' own intervals do not overlap and their ratio
/// lies outside that band, unsettled otherwise (see the module doc).
pub fn movement(
    here: &Ratio,
    setting: &Ratio,
    change: Option<&Ratio>,
    seed: f64,
    margin: f64,
) -> Move {
    let (Some(a), Some(b)) = (here.ci95, setting.ci95) else {
        return Move::Unknown;
    };
    let (low_edge, high_edge) = (1.0 / (1.0 + margin), 1.0 + margin);
    match change.and_then(|c| c.ci95) {
        Some(c) if low_edge <= c.low && c.high <= high_edge => return Move::Within,
        Some(c) if c.low <= high_edge && low_edge <= c.high => return Move::Unsettled,
        None if a.high >= b.low && b.high >= a.low => return Move::Unsettled,
        // Apart, but by less than the margin at their points: a move that may be smaller.
        None if (low_edge..=high_edge).contains(&(setting.value / here.value)) => {
            return Move::Unsettled
        }
        _ => {}
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
    /// How the report says it, at the margin `margin` (a fraction).
    pub fn text(self, margin: f64) -> String {
        let m = format::pct(margin);
        match self {
            Move::Within => format!(
                "does not move it by more than {m} (the change's 95% interval lies within 1× ± {m})"
            ),
            Move::Unsettled => format!(
                "unsettled: the change's 95% interval reaches across an edge of 1× ± {m}, so it may \
                 move it by more than {m} or by less"
            ),
            Move::Toward(share) => format!(
                "moves it toward the seed's figure by more than {m}, closing {} of the gap",
                format::pct(share)
            ),
            Move::Away => format!("moves it away from the seed's figure by more than {m}"),
            Move::Unknown => "no interval to compare".into(),
        }
    }
}

/// One claim under one variant.
#[derive(Debug, Clone)]
pub struct VariantResult {
    /// The variant.
    pub variant: Variant,
    /// The claim checked on the variant's pooled batches, when it has any.
    pub check: Option<ClaimCheck>,
    /// Against the `here` rerun (none for `here` itself).
    pub movement: Option<Move>,
    /// This ratio over the `here` rerun's, with its 95% interval, where the samples allow it.
    pub change: Option<Ratio>,
    /// Usable repetitions behind the ratio: the fewer of its two cells'.
    pub repetitions: usize,
}

/// One claim's attribution.
#[derive(Debug, Clone)]
pub struct ClaimAttribution {
    /// The claim's name.
    pub claim: String,
    /// The seed's figure the gap is measured to (`expect`, else `seed_ratio`).
    pub seed: Option<f64>,
    /// The settle margin the moves were judged at ([`ExplainIndex::margin`]).
    pub margin: f64,
    /// Each variant, in the index's order.
    pub results: Vec<VariantResult>,
}

impl ClaimAttribution {
    /// The single settings that move the ratio toward the seed's figure by more than the
    /// margin, by name.
    pub fn toward(&self) -> Vec<String> {
        self.single_settings(|m| matches!(m, Move::Toward(_)))
    }

    /// The single settings whose move is still unsettled, by name.
    pub fn unsettled(&self) -> Vec<String> {
        self.single_settings(|m| m == Move::Unsettled)
    }

    fn single_settings(&self, pick: impl Fn(Move) -> bool) -> Vec<String> {
        self.results
            .iter()
            .filter(|r| r.variant.settings.len() == 1)
            .filter(|r| r.movement.is_some_and(&pick))
            .map(|r| r.variant.settings[0].clone())
            .collect()
    }

    /// "Settings that move it toward the seed by more than 5.0%: …" with the unsettled ones
    /// after, one sentence each, for the report and the terminal alike.
    pub fn summary(&self) -> String {
        let toward = self.toward();
        let unsettled = self.unsettled();
        let mut s = format!(
            "Settings that move it toward the seed by more than {}: {}.",
            format::pct(self.margin),
            if toward.is_empty() {
                "none".to_string()
            } else {
                toward.join(", ")
            }
        );
        if !unsettled.is_empty() {
            s.push_str(&format!(
                " Unsettled at the repetitions run: {}.",
                unsettled.join(", ")
            ));
        }
        s
    }
}

/// The variants (by name) whose change from `here` is still unsettled for some claim: those
/// another round of repetitions could settle.
pub fn unsettled_variants(attributions: &[ClaimAttribution]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for r in attributions.iter().flat_map(|a| &a.results) {
        if r.movement == Some(Move::Unsettled) && !names.contains(&r.variant.name) {
            names.push(r.variant.name.clone());
        }
    }
    names
}

/// A variant's batches read back and pooled into one results directory: the first batch's
/// manifest and every batch's run records, each cell's repetitions numbered on from the
/// previous batch's highest, so that no repetition is dropped or counted twice. `None` when no
/// batch left a directory that loads. `dir` is the main run's results directory.
pub fn pooled(dir: &Path, v: &Variant) -> Option<ResultsDir> {
    let mut out: Option<ResultsDir> = None;
    for b in &v.batches {
        let Some(rel) = &b.dir else { continue };
        let Ok(batch) = ResultsDir::load(&dir.join(EXPLAIN_DIR).join(rel)) else {
            continue;
        };
        match &mut out {
            None => out = Some(batch),
            Some(all) => {
                // Each cell's highest repetition before this batch, so that a batch's own
                // records do not shift each other.
                let before = |cell: &echolab_core::experiment::Cell| {
                    all.runs
                        .iter()
                        .filter(|r| r.cell == *cell)
                        .map(|r| r.repetition)
                        .max()
                        .unwrap_or(0)
                };
                let offsets: Vec<u64> = batch.runs.iter().map(|r| before(&r.cell)).collect();
                for (mut run, offset) in batch.runs.into_iter().zip(offsets) {
                    run.repetition += offset;
                    all.runs.push(run);
                }
                all.unreadable.extend(batch.unreadable);
            }
        }
    }
    out
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
        .map(|v| (v.clone(), pooled(dir, v)))
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
                let repetitions = samples.as_ref().map_or(0, |s| s[0].len().min(s[1].len()));
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
                        .map(|hr| movement(hr, o, change.as_ref(), s, index.margin)),
                    _ => None,
                };
                VariantResult {
                    variant: variant.clone(),
                    check,
                    movement,
                    change,
                    repetitions,
                }
            })
            .collect();
        out.push(ClaimAttribution {
            claim: claim.clone(),
            seed,
            margin: index.margin,
            results,
        });
    }
    Ok(Some(out))
}

/// The section "Attribution: the gap to the seed, setting by setting".
pub fn section(dir: &Path) -> String {
    let (attributions, index) = match (load(dir), ExplainIndex::load(dir)) {
        (Ok(Some(a)), Ok(Some(i))) => (a, i),
        (Err(e), _) | (_, Err(e)) => return format!("## Attribution\n\n⚠ {e}\n\n"),
        _ => return String::new(),
    };
    let mut out = format!(
        "## Attribution: the gap to the seed, setting by setting\n\n`echolab-up --explain` ran the cells of every refuted or \
         inconclusive claim again: as here, under each of the seed's settings that this machine can run, and under all of \
         them together. It ran them in rounds, each round a batch of the experiment's minimum repetitions per variant, \
         the variants in alternating order (ABBA) so that the machine's drift falls on all of them alike; a round after \
         the first reruns `here` and the variants whose change is still unsettled (each up to the experiment's maximum \
         repetitions), and each variant's batches are pooled. \
         A setting moves a ratio by more than {m} (the experiment's target half-width) when the change from the \
         rerun-as-here ratio (their ratio, with a Welch 95% interval over the four cells' repetitions) lies wholly \
         outside 1× ± {m}; it does not move it by more than {m} when that interval lies wholly inside; an interval \
         across either edge is unsettled, whether or not it excludes 1×. {ended}\n\n",
        m = format::pct(index.margin),
        ended = index.ended,
    );
    for a in &attributions {
        out.push_str(&format!(
            "### {}\n\nSeed's figure: {}.\n\n",
            a.claim,
            a.seed.map(format::times).unwrap_or_else(|| "—".into())
        ));
        let mut t = Table::new([
            "Setting",
            "Repetitions",
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
                None => (
                    "—".into(),
                    r.variant
                        .batches
                        .iter()
                        .map(|b| b.outcome.as_str())
                        .collect::<Vec<_>>()
                        .join("; "),
                ),
            };
            t.row([
                format!("{label} (`{}`)", r.variant.name),
                r.repetitions.to_string(),
                ratio,
                verdict,
                r.change
                    .as_ref()
                    .map(format::ratio)
                    .unwrap_or_else(|| "—".into()),
                r.movement
                    .map(|m| m.text(index.margin))
                    .unwrap_or_else(|| "—".into()),
            ]);
        }
        out.push_str(&t.to_markdown());
        out.push_str(&format!("\n{}\n\n", a.summary()));
    }
    if !index.cannot_vary.is_empty() {
        out.push_str(&format!(
            "Left unexplained (these settings differ from the seed's but cannot vary on this machine): {}.\n\n",
            index.cannot_vary.join("; ")
        ));
    }
    out
}

/// One line per claim for a terminal: the settings that move it toward the seed.
pub fn text(dir: &Path) -> String {
    match load(dir) {
        Ok(Some(all)) => all
            .iter()
            .map(|a| format!("  {}: {}\n", a.claim, a.summary()))
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
        };
        index.save(&dir).unwrap();
        assert_eq!(ExplainIndex::load(&dir).unwrap(), Some(index));
        std::fs::write(dir.join(EXPLAIN_DIR).join(INDEX_FILE), "claims: [").unwrap();
        let err = ExplainIndex::load(&dir).unwrap_err();
        assert!(err.contains("index.yaml"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
