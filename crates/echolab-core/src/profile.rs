//! Link profiles (`netem/*.yaml`): the network condition a run is made under, and what
//! calibration must measure for the condition to count as in effect.
//!
//! A profile names a topology (`loopback`, `link`, or `native`: separate machines of a lab file,
//! nothing added), gives one [`LinkSpec`] per direction
//! (uplink = client to server, downlink = server to client; docs/architecture.md,
//! "Topologies") and the [`Expected`] calibration figures with their tolerances. Unknown keys
//! are an error, and every error names the file, the field and the bad value (serde_yaml adds
//! the field path, line and column; [`Profile::validate`] adds the checks that span fields).
//!
//! ```yaml
//! name: crossnet
//! description: a cross-network path
//! source: why these numbers
//! topology: link
//! uplink:   { delay: 10ms, jitter: 1ms, distribution: normal, rate: 50mbit, limit: 500 }
//! downlink: { delay: 10ms, jitter: 1ms, distribution: normal, rate: 50mbit, limit: 500 }
//! expected:
//!   rtt: { value: 20.1ms, minus: 1.5ms, plus: 2ms }
//!   goodput: { value: 47.07mbit, tolerance: 6% }
//! ```

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::units::{BitRate, Dur, Percent, RATE_UNITS};

/// Packet size used to turn a rate × delay product into a packet count: a full Ethernet
/// payload (RFC 894 MTU of 1500 bytes).
pub const MTU_BYTES: u64 = 1500;

/// Payload of one full-size TCP segment, bytes: an [`MTU_BYTES`] IP packet less the IPv4 (20)
/// and TCP (20) headers and the 12-byte timestamps option Linux sends by default.
pub const FULL_SEGMENT_PAYLOAD: u64 = MTU_BYTES - 20 - 20 - 12;

/// netem's default queue limit in packets (tc-netem(8), "limit").
pub const NETEM_DEFAULT_LIMIT: u32 = 1000;

/// How hosts are connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Topology {
    /// Client and server share one network namespace and talk over 127.0.0.1; no link.
    Loopback,
    /// Client network, link host, server network; the link host impairs both directions.
    Link,
    /// Client and server on separate machines (a lab file, echolab-up's `--lab`), over the
    /// real network between them with nothing added: calibration measures the path (RTT,
    /// goodput each way) and records it.
    Native,
}

impl Topology {
    /// The name profiles give it (`loopback`, `link`, `native`).
    pub fn name(self) -> &'static str {
        match self {
            Topology::Loopback => "loopback",
            Topology::Link => "link",
            Topology::Native => "native",
        }
    }
}

/// The shape of the random jitter added to each packet's delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JitterDistribution {
    /// Normal with standard deviation `jitter`, cut at ±4 σ as by iproute2's `normal.dist`
    /// table (iproute2 netem/normal.c).
    #[default]
    Normal,
    /// Uniform in `[delay - jitter, delay + jitter)`, netem's behaviour without a table
    /// (tc-netem(8)).
    Uniform,
}

/// The impairment of one direction of a link.
///
/// Times are one-way. The rate models serialization: a packet of `n` bytes occupies the link
/// for `(n + overhead) × 8 / rate` seconds, after which it travels for `delay` (± jitter).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    /// Added one-way delay (`"10ms"`); default 0.
    #[serde(default)]
    pub delay: Dur,
    /// Random variation of the delay (`"1ms"`): σ for `normal`, half-width for `uniform`.
    #[serde(default)]
    pub jitter: Dur,
    /// Shape of the jitter; default `normal`.
    #[serde(default)]
    pub distribution: JitterDistribution,
    /// Independent (Bernoulli) packet loss (`"0.1%"`); default 0%.
    #[serde(default)]
    pub loss: Percent,
    /// Link rate in bits per second (`"100mbit"`); absent means not rate-limited.
    #[serde(default)]
    pub rate: Option<BitRate>,
    /// Bytes added to each IP packet when computing serialization time, e.g. 38 for Ethernet
    /// (14 header + 4 FCS + 8 preamble + 12 inter-frame gap, IEEE 802.3). Default 0.
    #[serde(default)]
    pub overhead: u32,
    /// Most packets held by the link at once (queued and in flight), as netem's `limit`.
    /// Default: [`LinkSpec::default_limit`].
    #[serde(default)]
    pub limit: Option<u32>,
    /// Let jitter reorder packets (a later packet may overtake an earlier one). Default false:
    /// a packet never leaves before the one that arrived before it.
    #[serde(default)]
    pub reorder: bool,
}

impl LinkSpec {
    /// Worst-case one-way delay the spec adds on purpose: delay plus four jitter widths (the
    /// normal table's cut-off).
    pub fn max_added_delay(&self) -> Duration {
        self.delay.0 + self.jitter.0 * 4
    }

    /// Packets of [`MTU_BYTES`] that the link holds in flight at full rate: rate × (delay +
    /// 4 × jitter) / packet size, rounded up. 0 when there is no rate.
    pub fn bdp_packets(&self) -> u64 {
        let Some(rate) = self.rate else { return 0 };
        let bits = rate.0 as f64 * self.max_added_delay().as_secs_f64();
        (bits / (8.0 * MTU_BYTES as f64)).ceil() as u64
    }

    /// The limit used when the profile gives none: netem's 1000, or twice the bandwidth-delay
    /// product in packets when that is larger, so that the limit never drops packets that a
    /// saturated link holds in flight (netem's fixed default does at high rate × delay).
    pub fn default_limit(&self) -> u32 {
        let twice_bdp = self.bdp_packets().saturating_mul(2).min(u32::MAX as u64) as u32;
        NETEM_DEFAULT_LIMIT.max(twice_bdp)
    }

    /// The limit in force: the profile's, or [`LinkSpec::default_limit`].
    pub fn effective_limit(&self) -> u32 {
        self.limit.unwrap_or_else(|| self.default_limit())
    }

    /// Checks that span fields; `field` is the spec's path in the profile (e.g. `"uplink"`).
    ///
    /// # Errors
    /// A limit of 0 or below the bandwidth-delay product, jitter without delay to vary, or a
    /// value outside its range in [`crate::limits`] (delay plus four jitter widths above
    /// [`crate::limits::MAX_LINK_DELAY`], an overhead above
    /// [`crate::limits::MAX_LINK_OVERHEAD`], a rate above [`crate::limits::MAX_LINK_RATE`]).
    pub fn validate(&self, field: &str) -> Result<(), String> {
        use crate::limits::{MAX_LINK_DELAY, MAX_LINK_OVERHEAD, MAX_LINK_RATE};
        if self.max_added_delay() > MAX_LINK_DELAY {
            return Err(format!(
                "{field}.delay: {} plus 4 x jitter {} is above {}, half of TCP's largest \
                 retransmission timeout; no connection would survive the link",
                self.delay,
                self.jitter,
                Dur(MAX_LINK_DELAY)
            ));
        }
        if self.overhead > MAX_LINK_OVERHEAD {
            return Err(format!(
                "{field}.overhead: {} is not in 0..={MAX_LINK_OVERHEAD} bytes",
                self.overhead
            ));
        }
        if let Some(rate) = self.rate.filter(|r| r.0 > MAX_LINK_RATE) {
            return Err(format!(
                "{field}.rate: {rate} is above {}, faster than any Ethernet",
                BitRate(MAX_LINK_RATE)
            ));
        }
        if let Some(limit) = self.limit {
            if limit == 0 {
                return Err(format!("{field}.limit: 0 holds no packet; give at least 1"));
            }
            let bdp = self.bdp_packets();
            if u64::from(limit) < bdp {
                return Err(format!(
                    "{field}.limit: {limit} packets is below rate x delay = {bdp} packets of {MTU_BYTES} bytes; \
                     the link would drop packets it holds in flight"
                ));
            }
        }
        if !self.jitter.0.is_zero() && self.jitter.0 > self.delay.0 {
            return Err(format!(
                "{field}.jitter: {} is larger than delay {}; a delay cannot go below zero",
                self.jitter, self.delay
            ));
        }
        Ok(())
    }
}

/// An expected RTT with an asymmetric tolerance: the measured median must lie in
/// `[value - minus, value + plus]`. Asymmetric because host overhead only ever adds delay,
/// while anything below the sum of the one-way delays means the link is not in effect.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RttExpectation {
    /// The predicted median RTT.
    pub value: Dur,
    /// How far below `value` the median may be.
    pub minus: Dur,
    /// How far above `value` the median may be.
    pub plus: Dur,
}

impl RttExpectation {
    /// The accepted range `(low, high)`.
    pub fn range(&self) -> (Duration, Duration) {
        (
            self.value.0.saturating_sub(self.minus.0),
            self.value.0 + self.plus.0,
        )
    }
}

/// An expected goodput (application bytes per second, in bits per second) per direction, with
/// a symmetric relative tolerance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GoodputExpectation {
    /// The predicted goodput of one bulk TCP transfer, e.g. rate × MSS / (MTU + overhead).
    pub value: BitRate,
    /// Accepted relative deviation, e.g. `"3%"`.
    pub tolerance: Percent,
}

impl GoodputExpectation {
    /// The accepted range `(low, high)` in bits per second.
    pub fn range(&self) -> (f64, f64) {
        let v = self.value.0 as f64;
        let t = self.tolerance.0 / 100.0;
        (v * (1.0 - t), v * (1.0 + t))
    }
}

/// What calibration must measure for the profile to be in effect.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expected {
    /// Median RTT of small TCP round trips.
    pub rtt: RttExpectation,
    /// Goodput of a bulk transfer, each direction; absent when the link sets no rate.
    #[serde(default)]
    pub goodput: Option<GoodputExpectation>,
    /// How far the RTT the link adds (median RTT through it minus the median RTT of the same
    /// path forwarded plainly) may be from [`Profile::expected_added_rtt`]; absent:
    /// [`AddedRttTolerance::default`]. Only `link` profiles add RTT.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub added_rtt: Option<AddedRttTolerance>,
}

/// The accepted deviation of the measured added RTT from the expected one: `relative` of
/// the expected value or `at_least`, whichever is larger (a small added RTT, such as
/// lan100's 217 µs, would otherwise get a tolerance below the host's own noise).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddedRttTolerance {
    /// Relative tolerance, e.g. `"10%"`.
    pub relative: Percent,
    /// The smallest tolerance, e.g. `"50us"`.
    pub at_least: Dur,
}

impl Default for AddedRttTolerance {
    /// ±10% or ±50 µs, whichever is larger: what a userspace link can hold on a 2-core host
    /// (`cargo run --release -p echolab-netem --example wire_perf`), and what a reader of a
    /// 200 µs or a 20 ms link needs.
    fn default() -> Self {
        Self {
            relative: Percent(10.0),
            at_least: Dur(Duration::from_micros(50)),
        }
    }
}

impl AddedRttTolerance {
    /// The accepted range `(low, high)` around `expected`.
    pub fn range(&self, expected: Duration) -> (Duration, Duration) {
        let relative = expected.mul_f64(self.relative.0 / 100.0);
        let t = relative.max(self.at_least.0);
        (expected.saturating_sub(t), expected + t)
    }
}

/// One `netem/*.yaml` file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Short name, the file's stem by convention (`lan100`).
    pub name: String,
    /// One line for humans.
    pub description: String,
    /// Where the values come from (seed document, measurement, standard).
    pub source: String,
    /// How hosts are connected.
    pub topology: Topology,
    /// Client-to-server impairment; required for `link`, absent for `loopback`.
    #[serde(default)]
    pub uplink: Option<LinkSpec>,
    /// Server-to-client impairment; required for `link`, absent for `loopback`.
    #[serde(default)]
    pub downlink: Option<LinkSpec>,
    /// Calibration targets.
    pub expected: Expected,
}

/// A profile that could not be read, with the file it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileError {
    /// The file (or `"<string>"`).
    pub origin: String,
    /// What was wrong, naming the field and the value.
    pub message: String,
}

impl fmt::Display for ProfileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "profile {}: {}", self.origin, self.message)
    }
}

impl std::error::Error for ProfileError {}

impl Profile {
    /// Reads and validates a profile file.
    ///
    /// # Errors
    /// The file cannot be read, is not valid YAML for a profile, or fails [`Profile::validate`].
    pub fn load(path: &Path) -> Result<Self, ProfileError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ProfileError {
            origin: origin.clone(),
            message: format!("cannot read: {e}"),
        })?;
        Self::from_yaml(&text, &origin)
    }

    /// Parses and validates profile text; `origin` names it in errors.
    ///
    /// # Errors
    /// Unknown keys, bad units (the message names the field path and value), or
    /// [`Profile::validate`] failures.
    pub fn from_yaml(text: &str, origin: &str) -> Result<Self, ProfileError> {
        let fail = |message: String| ProfileError {
            origin: origin.to_string(),
            message,
        };
        let profile: Profile = serde_yaml::from_str(text).map_err(|e| fail(e.to_string()))?;
        profile.validate().map_err(fail)?;
        Ok(profile)
    }

    /// Resolves a `--profile` argument (a NAME looked up in `dir`, or a PATH; see
    /// [`crate::inputs::resolve`]) and loads it: the one way every binary finds a profile.
    ///
    /// # Errors
    /// One line: the unknown name with the available ones, a missing file, or the profile's
    /// parse error (file, field, line and column).
    pub fn resolve(arg: &str, dir: &Path) -> Result<(PathBuf, Self), String> {
        let path = crate::inputs::resolve("profile", arg, dir)?;
        let profile = Self::load(&path).map_err(|e| e.to_string())?;
        Ok((path, profile))
    }

    /// The profile as one line of JSON: how the launcher hands an already resolved profile to
    /// echolab-netem (`--profile-json`), so that no host looks a name up or reads a file again.
    /// [`Profile::from_json`] reads it back to an equal profile.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a profile is strings, numbers and unit strings")
    }

    /// Parses and validates a profile given as JSON ([`Profile::to_json`]); `origin` names it
    /// in errors.
    ///
    /// # Errors
    /// Malformed JSON, unknown keys, bad units, or [`Profile::validate`] failures.
    pub fn from_json(text: &str, origin: &str) -> Result<Self, ProfileError> {
        let fail = |message: String| ProfileError {
            origin: origin.to_string(),
            message,
        };
        let profile: Profile = serde_json::from_str(text).map_err(|e| fail(e.to_string()))?;
        profile.validate().map_err(fail)?;
        Ok(profile)
    }

    /// Checks that span fields: a `link` has both directions and a `loopback` neither; each
    /// [`LinkSpec::validate`]; a goodput expectation needs a rate on both directions.
    ///
    /// # Errors
    /// A message naming the field and the value.
    pub fn validate(&self) -> Result<(), String> {
        self.check_expected_ranges()?;
        match self.topology {
            Topology::Loopback => {
                if self.uplink.is_some() || self.downlink.is_some() {
                    return Err(
                        "topology: loopback has no link, so uplink/downlink must be absent".into(),
                    );
                }
                if self.expected.goodput.is_some() {
                    return Err(
                        "expected.goodput: loopback sets no rate, so no goodput can be expected"
                            .into(),
                    );
                }
                if self.expected.added_rtt.is_some() {
                    return Err(
                        "expected.added_rtt: loopback has no link, so it adds no RTT to check"
                            .into(),
                    );
                }
            }
            Topology::Native => {
                if self.uplink.is_some() || self.downlink.is_some() {
                    return Err(
                        "topology: native adds nothing to the real path, so uplink/downlink must be absent"
                            .into(),
                    );
                }
                if self.expected.goodput.is_some() || self.expected.added_rtt.is_some() {
                    return Err(
                        "expected: native measures the real path's goodput and adds no RTT, so expected.goodput and expected.added_rtt must be absent"
                            .into(),
                    );
                }
            }
            Topology::Link => {
                let (Some(up), Some(down)) = (&self.uplink, &self.downlink) else {
                    return Err("topology: link needs both uplink and downlink".into());
                };
                up.validate("uplink")?;
                down.validate("downlink")?;
                if self.expected.goodput.is_some() && (up.rate.is_none() || down.rate.is_none()) {
                    return Err("expected.goodput: needs a rate on both uplink and downlink".into());
                }
            }
        }
        self.check_expected_against_link()
    }

    /// The expected RTT figures within [`crate::limits::MAX_EXPECTED_RTT`].
    fn check_expected_ranges(&self) -> Result<(), String> {
        use crate::limits::MAX_EXPECTED_RTT;
        let rtt = &self.expected.rtt;
        let mut figures = vec![
            ("expected.rtt.value", rtt.value),
            ("expected.rtt.minus", rtt.minus),
            ("expected.rtt.plus", rtt.plus),
        ];
        if let Some(a) = &self.expected.added_rtt {
            figures.push(("expected.added_rtt.at_least", a.at_least));
        }
        for (field, d) in figures {
            if d.0 > MAX_EXPECTED_RTT {
                return Err(format!(
                    "{field}: {d} is not in 0s..={}, TCP's largest retransmission timeout",
                    Dur(MAX_EXPECTED_RTT)
                ));
            }
        }
        Ok(())
    }

    /// The `expected:` block must be possible on the profile's own link: the accepted RTT
    /// reaches the sum of the one-way delays, and the accepted goodput's low end is not above
    /// the slower direction's rate (TCP cannot carry more than the link).
    fn check_expected_against_link(&self) -> Result<(), String> {
        let added = self.added_rtt();
        let (_, rtt_high) = self.expected.rtt.range();
        if rtt_high < added {
            return Err(format!(
                "expected.rtt: accepts at most {}, but the link's one-way delays add {} (uplink.delay + downlink.delay); calibration could never pass",
                Dur(rtt_high),
                Dur(added)
            ));
        }
        if let (Some(g), Some(rate)) = (&self.expected.goodput, self.slowest_rate()) {
            let (low, _) = g.range();
            if low > rate as f64 {
                return Err(format!(
                    "expected.goodput: {} (at least {} with its tolerance) is above the link's rate {}; {RATE_UNITS}",
                    g.value,
                    BitRate(low as u64),
                    BitRate(rate)
                ));
            }
        }
        Ok(())
    }

    /// The lower of the two directions' rates, bits/s (`None` without a rate on both).
    fn slowest_rate(&self) -> Option<u64> {
        let rate = |s: &Option<LinkSpec>| s.as_ref().and_then(|s| s.rate).map(|r| r.0);
        Some(rate(&self.uplink)?.min(rate(&self.downlink)?))
    }

    /// Things that are possible but unlikely to be meant, one message each, for the launcher
    /// to print when the profile loads: an expected goodput below half the link's rate
    /// (TCP over Ethernet carries about 94% of it: MSS 1448 of 1538 byte times), which is
    /// what a rate written in megabytes/s (`mbps`) where megabits/s was meant looks like.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let (Some(g), Some(rate)) = (&self.expected.goodput, self.slowest_rate()) {
            let (_, high) = g.range();
            if high < rate as f64 / 2.0 {
                out.push(format!(
                    "expected.goodput {} is less than half the link's rate {}: was the rate meant in other units? ({RATE_UNITS})",
                    g.value,
                    BitRate(rate)
                ));
            }
        }
        out
    }

    /// Sum of the one-way delays of both directions: the RTT the link adds before host overhead
    /// and serialization (RTT = base + uplink delay + downlink delay; docs/architecture.md,
    /// "Topologies").
    pub fn added_rtt(&self) -> Duration {
        let d = |s: &Option<LinkSpec>| s.as_ref().map(|s| s.delay.0).unwrap_or_default();
        d(&self.uplink) + d(&self.downlink)
    }

    /// The RTT the link adds to one exchange of two isolated `ip_bytes`-byte IP packets (one
    /// each way, the calibration probe): per direction, the delay plus the serialization of
    /// `ip_bytes + overhead` at the rate (none without a rate). Jitter is left out: it is
    /// symmetric, so the median of many exchanges is not moved by it. Zero for `loopback`.
    pub fn expected_added_rtt(&self, ip_bytes: usize) -> Duration {
        let one_way = |s: &Option<LinkSpec>| {
            s.as_ref().map_or(Duration::ZERO, |s| {
                let ser = s.rate.map_or(Duration::ZERO, |r| {
                    let bits = (ip_bytes as u64 + u64::from(s.overhead)) * 8;
                    Duration::from_secs_f64(bits as f64 / r.0 as f64)
                });
                s.delay.0 + ser
            })
        };
        one_way(&self.uplink) + one_way(&self.downlink)
    }

    /// The added-RTT tolerance in force: the profile's, or [`AddedRttTolerance::default`].
    pub fn added_rtt_tolerance(&self) -> AddedRttTolerance {
        self.expected.added_rtt.clone().unwrap_or_default()
    }
}

/// The profile a run used and the file it was read from: in the manifest, the profile's own
/// fields (as its YAML file has them) plus `"path"`.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedProfile {
    /// The profile, typed.
    pub profile: Profile,
    /// The file it was read from, as given on the command line.
    pub path: String,
}

impl Serialize for RecordedProfile {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut v = serde_json::to_value(&self.profile).map_err(serde::ser::Error::custom)?;
        v["path"] = serde_json::Value::String(self.path.clone());
        v.serialize(s)
    }
}

impl<'de> Deserialize<'de> for RecordedProfile {
    /// The profile's fields beside `"path"` (a manifest written without it reads with an
    /// empty path).
    ///
    /// # Errors
    /// A profile field that the profile format does not have or a value it refuses.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut v = serde_json::Value::deserialize(d)?;
        let path = match v.as_object_mut().and_then(|o| o.remove("path")) {
            Some(serde_json::Value::String(p)) => p,
            _ => String::new(),
        };
        let profile = serde_json::from_value(v).map_err(serde::de::Error::custom)?;
        Ok(Self { profile, path })
    }
}

#[cfg(test)]
#[path = "profile_tests.rs"]
mod tests;
