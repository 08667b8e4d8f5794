//! A mechanism's verdict and the record of one check, and the agreement rule of a prediction
//! measured apart from the effect it predicts: shared by [`crate::mechanisms`] and the checks
//! it calls ([`crate::syscall_cost`]), which is why they live apart from both.

use echolab_core::experiment::{Mechanism, MechanismKind};

use crate::format;
use crate::inference::{Interval, Ratio};
use crate::sequential::Confidence;
use crate::welch::{welch, LogSample};

/// A mechanism's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MechanismVerdict {
    /// See the module doc.
    Holds,
    /// See the module doc.
    DoesNotHold,
    /// See the module doc.
    Inconclusive,
    /// See the module doc.
    NotTestable,
    /// See the module doc: an identity that agrees with the measurement.
    Consistent,
    /// See the module doc: an identity that does not, so a measurement is off.
    Inconsistent,
}

impl MechanismVerdict {
    /// The words the report prints.
    pub fn word(self) -> &'static str {
        match self {
            MechanismVerdict::Holds => "holds here",
            MechanismVerdict::DoesNotHold => "does not hold here",
            MechanismVerdict::Inconclusive => "inconclusive",
            MechanismVerdict::NotTestable => "not testable here",
            MechanismVerdict::Consistent => "consistent (an identity, not a test)",
            MechanismVerdict::Inconsistent => "inconsistent (an identity: a measurement is off)",
        }
    }
}

/// One mechanism checked.
#[derive(Debug, Clone)]
pub struct MechanismCheck {
    /// The mechanism as the experiment states it.
    pub mechanism: Mechanism,
    /// The predicted value of the effect, when every input was there.
    pub predicted: Option<f64>,
    /// The prediction with its 95% interval over repetitions, where it has one.
    pub prediction: Option<Ratio>,
    /// Where the prediction's inputs come from, and whether they are measured apart from the
    /// effect it predicts.
    pub source: String,
    /// Measured over predicted with the interval that carries both uncertainties
    /// ([`agreement`]), for the mechanisms judged that way.
    pub agreement: Option<Agreement>,
    /// The measured effect with its interval.
    pub measured: Option<Ratio>,
    /// The verdict.
    pub verdict: MechanismVerdict,
    /// How the prediction was computed, with its inputs (one or two sentences).
    pub how: String,
    /// What the prediction leaves out on this run, when its cells are bound by something the
    /// mechanism does not count; empty otherwise.
    pub leaves_out: String,
    /// Another mechanism's prediction of the same effect, judged the same way, where one
    /// applies (round trips: queueing by Little's law); empty otherwise.
    pub alternative: String,
}

impl MechanismCheck {
    /// `predicts 4.3×, measured 4.9× (95% CI …): holds here`.
    pub fn short(&self) -> String {
        if self.mechanism.kind == MechanismKind::Knee {
            return format!("{}: {}", self.how, self.verdict.word());
        }
        if self.predicted.is_none() {
            return format!("no prediction ({}): {}", self.how, self.verdict.word());
        }
        let predicted = match (&self.prediction, self.predicted) {
            (Some(p), _) => format::ratio(p),
            (None, Some(v)) => format::times(v),
            (None, None) => "—".into(),
        };
        let measured = self
            .measured
            .as_ref()
            .map(format::ratio)
            .unwrap_or_else(|| "—".into());
        let alternative = if self.alternative.is_empty() {
            String::new()
        } else {
            format!("; {}", self.alternative)
        };
        let agreement = self.agreement.as_ref().map_or(String::new(), |a| {
            format!(
                ", measured/predicted {}{}",
                format::times(a.value),
                a.ci95.map_or(String::new(), |ci| format!(
                    " (95% CI {})",
                    format::ratio_interval(ci)
                ))
            )
        });
        format!(
            "predicts {predicted}, measured {measured}{agreement}: {}{alternative}",
            self.verdict.word()
        )
    }

    /// Whether [`MechanismCheck::short`] already gives [`MechanismCheck::how`]: a knee's
    /// verdict is its figures, and a missing prediction says why in its place.
    pub(crate) fn short_says_how(&self) -> bool {
        self.mechanism.kind == MechanismKind::Knee || self.predicted.is_none()
    }
}

/// The agreement of a measured with a predicted ratio, both estimated from independent
/// samples on the log scale: `A` = measured / predicted, its 95% interval (see the module
/// doc), at `confidence` (the run's design), and the verdict against the band
/// `[1/(1 + a), 1 + a]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Agreement {
    /// Measured over predicted (geometric means).
    pub value: f64,
    /// Its 95% interval; `None` when a side has fewer than 2 values.
    pub ci95: Option<Interval>,
    /// The verdict.
    pub verdict: MechanismVerdict,
}

/// Judges measured `mn / md` against predicted `pn / pd` (each a sample of positive values,
/// one per repetition) within agreement `a` (0.25 for ±25%). See the module doc for the
/// rule. `None` when a value is not positive and finite or a sample is empty.
pub fn agreement(
    mn: &[f64],
    md: &[f64],
    pn: &[f64],
    pd: &[f64],
    a: f64,
    confidence: Confidence,
) -> Option<Agreement> {
    let samples = [mn, md, pn, pd];
    if samples
        .iter()
        .any(|s| s.is_empty() || s.iter().any(|v| !(v.is_finite() && *v > 0.0)))
    {
        return None;
    }
    let logs: Vec<LogSample> = samples.iter().map(|s| LogSample::of(s)).collect();
    let d = (logs[0].mean - logs[1].mean) - (logs[2].mean - logs[3].mean);
    let value = d.exp();
    let few = logs.iter().any(|l| l.n < 2);
    let ci95 = (!few).then(|| {
        let (se, df) = welch(&logs);
        let t = confidence.t(df).unwrap_or(1.96);
        Interval {
            low: (d - t * se).exp(),
            high: (d + t * se).exp(),
        }
    });
    let band = echolab_core::experiment::ClaimBand::relative(1.0, a);
    let verdict = match ci95 {
        Some(ci) if band.contains(ci.low) && band.contains(ci.high) => MechanismVerdict::Holds,
        Some(ci) if ci.high < band.low || ci.low > band.high => MechanismVerdict::DoesNotHold,
        _ => MechanismVerdict::Inconclusive,
    };
    Some(Agreement {
        value,
        ci95,
        verdict,
    })
}
