//! Latency histograms: recorded in nanoseconds, exchanged as HdrHistogram V2 (base64), summarised
//! in microseconds.
//!
//! The V2 encoding is the one of HdrHistogram's reference implementations
//! (<https://hdrhistogram.github.io/HdrHistogram/>), so a histogram written by `echo-bench
//! --json` can be decoded by any HdrHistogram library and merged across repetitions without
//! losing the tail, which averaging percentiles would.

use base64::Engine as _;
use hdrhistogram::serialization::{Deserializer, Serializer as _, V2Serializer};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Highest latency a histogram tracks: 1 hour in nanoseconds. Larger values saturate.
pub const MAX_TRACKABLE_NS: u64 = 3_600_000_000_000;
/// Significant decimal digits kept per value (relative error at most 0.1%).
pub const SIGFIG: u8 = 3;

/// A new, empty latency histogram of nanoseconds, 1 ns to [`MAX_TRACKABLE_NS`], 3 significant
/// figures.
pub fn new_latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_TRACKABLE_NS, SIGFIG).expect("constant bounds are valid")
}

/// Records `ns` into `h`, clamping to the trackable range instead of failing.
#[inline]
pub fn record_ns(h: &mut Histogram<u64>, ns: u64) {
    h.saturating_record(ns.clamp(1, MAX_TRACKABLE_NS));
}

/// Errors from decoding a histogram string.
#[derive(Debug, thiserror::Error)]
pub enum HistError {
    /// Not valid base64.
    #[error("histogram is not valid base64: {0}")]
    Base64(#[from] base64::DecodeError),
    /// Valid base64 but not an HdrHistogram V2 payload.
    #[error("histogram is not an HdrHistogram V2 payload: {0}")]
    Format(String),
    /// Two histograms could not be added (different ranges).
    #[error("histograms cannot be merged: {0}")]
    Merge(String),
}

/// Encodes `h` as HdrHistogram V2 (uncompressed), then standard base64.
pub fn encode(h: &Histogram<u64>) -> String {
    let mut buf = Vec::new();
    V2Serializer::new()
        .serialize(h, &mut buf)
        .expect("serializing into a Vec cannot fail");
    base64::engine::general_purpose::STANDARD.encode(buf)
}

/// Decodes a string produced by [`encode`] (or by any HdrHistogram V2 writer, compressed or not).
///
/// # Errors
/// [`HistError::Base64`] or [`HistError::Format`] when the text is not such a histogram.
pub fn decode(text: &str) -> Result<Histogram<u64>, HistError> {
    let bytes = base64::engine::general_purpose::STANDARD.decode(text.trim())?;
    Deserializer::new()
        .deserialize(&mut bytes.as_slice())
        .map_err(|e| HistError::Format(format!("{e:?}")))
}

/// Merges several encoded histograms (e.g. the repetitions of one cell) into one.
///
/// # Errors
/// Any input that does not decode, or histograms whose ranges cannot be added.
pub fn merge<'a>(encoded: impl IntoIterator<Item = &'a str>) -> Result<Histogram<u64>, HistError> {
    let mut total = new_latency_histogram();
    for text in encoded {
        let h = decode(text)?;
        total
            .add(&h)
            .map_err(|e| HistError::Merge(format!("{e:?}")))?;
    }
    Ok(total)
}

/// Percentile summary of a latency distribution, in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    /// Smallest value recorded.
    pub min: f64,
    /// Arithmetic mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest value recorded.
    pub max: f64,
}

impl LatencySummary {
    /// Summarises a histogram of nanoseconds into microseconds; all zeros when it is empty.
    pub fn from_histogram(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        Self {
            min: us(h.min()),
            mean: h.mean() / 1000.0,
            p50: us(h.value_at_quantile(0.50)),
            p90: us(h.value_at_quantile(0.90)),
            p99: us(h.value_at_quantile(0.99)),
            p999: us(h.value_at_quantile(0.999)),
            max: us(h.max()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_decode_round_trip_keeps_every_count() {
        let mut h = new_latency_histogram();
        for ns in [1_000u64, 2_000, 2_000, 50_000, 1_000_000, 7_000_000_000] {
            record_ns(&mut h, ns);
        }
        let back = decode(&encode(&h)).unwrap();
        assert_eq!(back.len(), 6);
        assert_eq!(back.max(), h.max());
        assert_eq!(back.value_at_quantile(0.5), h.value_at_quantile(0.5));
    }

    #[test]
    fn merge_adds_repetitions() {
        let mut a = new_latency_histogram();
        let mut b = new_latency_histogram();
        (0..100).for_each(|_| record_ns(&mut a, 10_000));
        (0..300).for_each(|_| record_ns(&mut b, 30_000));
        let (ea, eb) = (encode(&a), encode(&b));
        let m = merge([ea.as_str(), eb.as_str()]).unwrap();
        assert_eq!(m.len(), 400);
        let s = LatencySummary::from_histogram(&m);
        assert!((s.p50 - 30.0).abs() < 0.1, "{s:?}");
        assert!((s.min - 10.0).abs() < 0.1, "{s:?}");
    }

    #[test]
    fn bad_histogram_text_is_an_error_not_a_panic() {
        assert!(matches!(decode("not base64 !!"), Err(HistError::Base64(_))));
        assert!(matches!(decode("aGVsbG8="), Err(HistError::Format(_))));
    }

    #[test]
    fn summary_is_in_microseconds() {
        let mut h = new_latency_histogram();
        record_ns(&mut h, 1_500_000);
        let s = LatencySummary::from_histogram(&h);
        assert!((s.p99 - 1500.0).abs() / 1500.0 < 0.001, "{s:?}");
        assert_eq!(
            LatencySummary::from_histogram(&new_latency_histogram()),
            LatencySummary::default()
        );
    }
}
