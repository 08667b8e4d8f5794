//! Attribution of the gap to the seed: the cells of every refuted or inconclusive claim run
//! again as a two-level factorial over the seed's settings that this machine can vary
//! (`echolab-up --explain`, [`crate::factorial`]), each setting's main effect, each pair's
//! interaction and the share of the gap each closes read from the runs (docs/methodology.md,
//! "Attribution").
//!
//! `echolab-up --explain` writes `explain/index.yaml` ([`ExplainIndex`]: the variants, the
//! factors, the planned looks) in the run's results directory and, per variant, one ordinary
//! results directory per round under `explain/<variant>/`, pooled here ([`pooled`]); this
//! module reads them. An effect's change, and each variant's **change** from the rerun as here
//! (the ratio of the two ratios with a Welch interval, [`ratio_of_ratios`]), are set against
//! the band `[1/(1+m), 1+m]`, m the index's `margin` (the experiment's target half-width),
//! with the claims' band rule ([`Move`]): wholly outside, the setting **moves** the ratio by
//! more than m, **toward** the seed's figure or away; wholly inside, it does not; across an
//! edge, **unsettled**, whether or not it excludes 1, so that a move too small to matter at the
//! precision the experiment asks is never named one run and missed the next; `--explain` runs
//! another round while any term is unsettled. Where a sample has a 0 and a change has no
//! interval, the two ratios' own intervals decide. An index written before the factorial (one
//! setting at a time, no factors) still reads, its moves judged variant by variant. What no
//! setting of this machine can vary (the kernel, more CPUs than the machine has) is named as
//! the part left unexplained.

use std::path::Path;

use echolab_core::results::ResultsDir;
use serde::{Deserialize, Serialize};

use crate::claims::{self, ClaimCheck};
use crate::dataset::Dataset;
use crate::factorial::{estimate, Estimate, Plan, Response};
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
    /// The factors of the two-level design the variants form ([`crate::factorial::Plan`]),
    /// by setting name; empty in an index written before the design (one setting at a time).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub factors: Vec<String>,
    /// The planned looks, in repetitions per variant, that the rounds stop at
    /// ([`crate::sequential::Design`]): every interval of the effects is a repeated one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub looks: Vec<u64>,
}

impl ExplainIndex {
    /// The confidence of the effects' intervals: Pocock's level over the planned looks.
    pub fn confidence(&self) -> crate::sequential::Confidence {
        crate::sequential::Confidence::pocock(self.looks.len().max(1))
    }

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
    let band = echolab_core::experiment::ClaimBand::relative(1.0, margin);
    let (low_edge, high_edge) = (band.low, band.high);
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
                "does not move it by more than {m} (the change's 95% interval lies within [1/(1 + {m}), 1 + {m}])"
            ),
            Move::Unsettled => format!(
                "unsettled: the change's 95% interval reaches across an edge of [1/(1 + {m}), 1 + {m}], so it may \
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
    /// The factorial's terms, main effects first, each with how it moves the ratio; empty
    /// without a design or when a run has no response.
    pub effects: Vec<Effect>,
    /// The design the effects come from, when the index names one.
    pub plan: Option<Plan>,
}

/// One term of the factorial for one claim.
#[derive(Debug, Clone)]
pub struct Effect {
    /// The term's name ([`Plan::name`]).
    pub name: String,
    /// The estimate.
    pub estimate: Estimate,
    /// How it moves the ratio at the index's margin: for a main effect toward or away from the
    /// seed's figure; for an interaction [`Move::Toward`] and [`Move::Away`] say only that the
    /// pair's joint change differs from the product of their separate ones by more than it.
    pub movement: Move,
}

impl Effect {
    /// The share of the gap with its interval, `40.0% (31.0% to 49.0%)`, or `—`.
    pub fn share_text(&self) -> String {
        self.estimate.share.map_or_else(
            || "—".into(),
            |(s, i)| {
                format!(
                    "{} ({} to {})",
                    format::pct(s),
                    format::pct(i.low),
                    format::pct(i.high)
                )
            },
        )
    }

    /// What the effect says at `margin`, as the report words it.
    pub fn reading(&self, margin: f64) -> String {
        let main = self.estimate.term.factors.len() == 1;
        match (main, self.movement) {
            (false, Move::Toward(_) | Move::Away) => format!(
                "the pair's joint change differs from the product of their separate ones by more than {}",
                format::pct(margin)
            ),
            (_, m) => m.text(margin),
        }
    }
}

/// How the change `change` moves a ratio at `margin`: within 1 ± m, across an edge
/// (unsettled), or wholly outside, toward the seed when its log has the sign of `gap`
/// (`ln seed − ln here`), with the share given.
fn effect_move(change: &Ratio, margin: f64, gap: Option<f64>, share: Option<f64>) -> Move {
    let Some(c) = change.ci95 else {
        return Move::Unknown;
    };
    let band = echolab_core::experiment::ClaimBand::relative(1.0, margin);
    match claims::judge(&band, change).0 {
        claims::Verdict::Reproduced => Move::Within,
        claims::Verdict::Refuted => {
            let toward = gap.is_some_and(|g| (c.low.ln() + c.high.ln()) * g > 0.0);
            if toward {
                Move::Toward(share.unwrap_or(f64::NAN))
            } else {
                Move::Away
            }
        }
        _ => Move::Unsettled,
    }
}

/// The factorial's effects for one claim, from each variant's two samples (`samples[i]` for
/// `index.variants[i]`).
fn effects(
    index: &ExplainIndex,
    samples: &[Option<[Vec<f64>; 2]>],
    seed: Option<f64>,
) -> (Option<Plan>, Vec<Effect>) {
    if index.factors.is_empty() {
        return (None, Vec::new());
    }
    let plan = Plan::new(index.factors.clone());
    let responses: Vec<Option<Response>> = plan
        .runs
        .iter()
        .map(|run| {
            let wanted: Vec<&String> = index
                .factors
                .iter()
                .zip(run)
                .filter(|(_, high)| **high)
                .map(|(f, _)| f)
                .collect();
            let i = index.variants.iter().position(|v| {
                v.settings.len() == wanted.len() && wanted.iter().all(|w| v.settings.contains(w))
            })?;
            let s = samples.get(i)?.as_ref()?;
            Response::of(&s[0], &s[1])
        })
        .collect();
    let here_y = plan
        .here_run()
        .and_then(|h| responses[h].as_ref())
        .map(|r| r.y);
    let gap = seed.zip(here_y).map(|(s, y)| s.ln() - y);
    let out = plan
        .terms()
        .iter()
        .filter_map(|t| {
            let e = estimate(&plan, &responses, t, index.confidence(), seed)?;
            let movement = effect_move(&e.change, index.margin, gap, e.share.map(|s| s.0));
            Some(Effect {
                name: plan.name(t),
                estimate: e,
                movement,
            })
        })
        .collect();
    (Some(plan), out)
}

impl ClaimAttribution {
    /// The single settings that move the ratio toward the seed's figure by more than the
    /// margin, by name.
    pub fn toward(&self) -> Vec<String> {
        self.single_settings(|m| matches!(m, Move::Toward(_)))
    }

    /// The single settings whose move is still unsettled, by name; with a factorial, its terms
    /// (main effects and interactions) whose change is still unsettled.
    pub fn unsettled(&self) -> Vec<String> {
        if !self.effects.is_empty() {
            return self
                .effects
                .iter()
                .filter(|e| e.movement == Move::Unsettled)
                .map(|e| e.name.clone())
                .collect();
        }
        self.single_settings(|m| m == Move::Unsettled)
    }

    /// With a factorial, the main effects picked by `pick`; otherwise the single-setting
    /// variants' moves.
    fn single_settings(&self, pick: impl Fn(Move) -> bool) -> Vec<String> {
        if !self.effects.is_empty() {
            return self
                .effects
                .iter()
                .filter(|e| e.estimate.term.factors.len() == 1 && pick(e.movement))
                .map(|e| e.name.clone())
                .collect();
        }
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

/// What is still unsettled for some claim, by name: the factorial's terms (the variants whose
/// change from `here` is, without a design); another round of repetitions could settle them.
pub fn unsettled_variants(attributions: &[ClaimAttribution]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for a in attributions {
        let these = if a.effects.is_empty() {
            a.results
                .iter()
                .filter(|r| r.movement == Some(Move::Unsettled))
                .map(|r| r.variant.name.clone())
                .collect()
        } else {
            a.unsettled()
        };
        for n in these {
            if !names.contains(&n) {
                names.push(n);
            }
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
        let samples: Vec<Option<[Vec<f64>; 2]>> = checks
            .iter()
            .map(|c| c.as_ref().map(|(_, s)| s.clone()))
            .collect();
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
            .collect::<Vec<VariantResult>>();
        let (plan, effects) = effects(&index, &samples, seed);
        out.push(ClaimAttribution {
            claim: claim.clone(),
            seed,
            margin: index.margin,
            results,
            effects,
            plan,
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
        "## Attribution: the gap to the seed, setting by setting\n\n{design}{m} is the experiment's target \
         half-width: a change moves a ratio by more than {m} when its interval lies wholly outside [1/(1 + {m}), 1 + {m}], does not \
         when it lies wholly inside, and is unsettled across either edge, whether or not it excludes 1×. {ended}\n\n",
        design = design_text(&index),
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
        out.push_str(&effects_table(a));
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

/// How the reruns were designed, for the section's first paragraph.
fn design_text(index: &ExplainIndex) -> String {
    if index.factors.is_empty() {
        return "`echolab-up --explain` ran the cells of every refuted or inconclusive claim again: as here, under each \
                of the seed's settings that this machine can run, and under all of them together, one setting at a time \
                against the rerun as here. "
            .into();
    }
    let plan = Plan::new(index.factors.clone());
    format!(
        "`echolab-up --explain` ran the cells of every refuted or inconclusive claim again as a two-level factorial \
         over the seed's settings that this machine can run ({factors}): {runs} runs, {kind}, every run in every \
         round (blocked by round: a shift of the machine between rounds cancels in every effect), the order \
         alternating between rounds, rounds stopping at the planned looks after {looks} repetitions per run. Each \
         effect is the change of the claim's ratio when a setting goes from here's level to the seed's, averaged over \
         the other settings' levels, with a {label} (Welch–Satterthwaite over every cell's repetitions; Montgomery, \
         *Design and Analysis of Experiments*, ch. 6 and 8); a main effect's share of the gap is its log change over \
         ln(seed / here). ",
        factors = index.factors.join(", "),
        runs = plan.runs.len(),
        kind = if plan.half_fraction {
            "the resolution IV half fraction (two-factor interactions aliased in pairs)"
        } else {
            "every combination"
        },
        looks = index
            .looks
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        label = index.confidence().label(),
    )
}

/// The factorial's table for one claim: each term's change, share of the gap and reading.
fn effects_table(a: &ClaimAttribution) -> String {
    if a.effects.is_empty() {
        return match &a.plan {
            Some(_) => {
                "\nNo effects: a run of the design has no usable repetitions of both cells.\n"
                    .into()
            }
            None => String::new(),
        };
    }
    let mut t = Table::new([
        "Effect",
        "Change of the ratio (CI)",
        "Share of the gap (CI)",
        "Reading",
    ]);
    for e in &a.effects {
        t.row([
            e.name.clone(),
            format::ratio(&e.estimate.change),
            e.share_text(),
            e.reading(a.margin),
        ]);
    }
    format!("\nEffects of the factorial:\n\n{}", t.to_markdown())
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
#[path = "attribution_tests.rs"]
mod tests;
