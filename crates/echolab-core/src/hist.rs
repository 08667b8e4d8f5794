//! Latency histograms: recorded in nanoseconds, exchanged as compressed HdrHistogram V2
//! (base64), summarised in microseconds.
//!
//! The compressed V2 encoding (cookie `0x1c849314`: a zlib stream around the V2 payload) is
//! the one every reference implementation reads and writes
//! (<https://hdrhistogram.github.io/HdrHistogram/>, the Java `encodeIntoCompressedByteBuffer`),
//! so a histogram written by `echo-bench --json` decodes in Python's `hdrhistogram`, Java, Go
//! or C, and merges across repetitions without losing the tail, which averaging percentiles
//! would. Records written before the switch hold uncompressed V2 (cookie `0x1c849313`), which
//! Python's library refuses; [`decode`] reads both.

use base64::Engine as _;
use hdrhistogram::serialization::{Deserializer, Serializer as _, V2DeflateSerializer};
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

/// Records `ns` into `h`, at the nearest bound of the trackable range (1 ns to
/// [`MAX_TRACKABLE_NS`]) when it lies outside. Returns whether it did: a caller counts those
/// values ([`crate::stats::BenchReport::latency_out_of_range`]) so that a clamped figure is
/// never passed off as measured.
#[inline]
#[must_use = "a value outside the range is clamped; count it"]
pub fn record_ns(h: &mut Histogram<u64>, ns: u64) -> bool {
    let clamped = ns.clamp(1, MAX_TRACKABLE_NS);
    h.saturating_record(clamped);
    clamped != ns
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

/// Encodes `h` as compressed HdrHistogram V2 (the Rust crate's [`V2DeflateSerializer`]), then
/// standard base64 with padding: the text form HdrHistogram's libraries decode (Python's
/// `HdrHistogram.decode`, Java's `Histogram.fromString`-style base64 of the compressed buffer).
pub fn encode(h: &Histogram<u64>) -> String {
    let mut buf = Vec::new();
    V2DeflateSerializer::new()
        .serialize(h, &mut buf)
        .expect("serializing into a Vec cannot fail");
    base64::engine::general_purpose::STANDARD.encode(buf)
}

/// Decodes a string produced by [`encode`], by the uncompressed V2 encoder of older records, or
/// by any other HdrHistogram V2 writer, compressed or not (the cookie says which).
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
    /// Summarises a histogram of nanoseconds into microseconds; `None` when it is empty: no
    /// sample, no number (an all-zero summary would read as the fastest run there is).
    pub fn from_histogram(h: &Histogram<u64>) -> Option<Self> {
        if h.is_empty() {
            return None;
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        Some(Self {
            min: us(h.min()),
            mean: h.mean() / 1000.0,
            p50: us(h.value_at_quantile(0.50)),
            p90: us(h.value_at_quantile(0.90)),
            p99: us(h.value_at_quantile(0.99)),
            p999: us(h.value_at_quantile(0.999)),
            max: us(h.max()),
        })
    }
}

/// Serde's reader for an optional [`LatencySummary`] (`#[serde(deserialize_with)]`): `null`,
/// absent, or an object. An object whose every field is 0 is read as `None`: records written
/// before empty runs were printed as `null` hold an all-zero summary for them, and no measured
/// summary can be all zero (the histogram's lowest value is 1 ns).
///
/// # Errors
/// The value is neither `null` nor a summary object.
pub fn de_optional_summary<'de, D>(d: D) -> Result<Option<LatencySummary>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let s: Option<LatencySummary> = Option::deserialize(d)?;
    Ok(s.filter(|s| *s != LatencySummary::default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_decode_round_trip_keeps_every_count() {
        let mut h = new_latency_histogram();
        for ns in [1_000u64, 2_000, 2_000, 50_000, 1_000_000, 7_000_000_000] {
            assert!(!record_ns(&mut h, ns));
        }
        let back = decode(&encode(&h)).unwrap();
        assert_eq!(back.len(), 6);
        assert_eq!(back.max(), h.max());
        assert_eq!(back.value_at_quantile(0.5), h.value_at_quantile(0.5));
    }

    /// A record written before histograms were compressed: uncompressed V2 (cookie
    /// `0x1c849313`), as the runs' records and `--json` held it. Written here by the crate's
    /// uncompressed serializer, which is what produced those records.
    fn old_uncompressed(h: &Histogram<u64>) -> String {
        use hdrhistogram::serialization::V2Serializer;
        let mut buf = Vec::new();
        V2Serializer::new().serialize(h, &mut buf).unwrap();
        base64::engine::general_purpose::STANDARD.encode(buf)
    }

    /// The 4-byte big-endian cookie at the head of an encoded histogram.
    fn cookie(text: &str) -> u32 {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text)
            .unwrap();
        u32::from_be_bytes(bytes[..4].try_into().unwrap())
    }

    #[test]
    fn encode_writes_compressed_v2_and_old_uncompressed_records_still_load() {
        let mut h = new_latency_histogram();
        for ns in [3_000u64, 4_000, 4_000, 9_000_000] {
            assert!(!record_ns(&mut h, ns));
        }
        let new = encode(&h);
        // The cookies of HdrHistogram's V2 encodings as written (the base, 0x1c849304 or
        // 0x1c849303, with bit 0x10 set): compressed and plain.
        assert_eq!(cookie(&new), 0x1c84_9314, "encode must write compressed V2");
        let old = old_uncompressed(&h);
        assert_eq!(cookie(&old), 0x1c84_9313);
        for text in [&new, &old] {
            let back = decode(text).unwrap();
            assert_eq!(back.len(), h.len());
            assert_eq!(back.max(), h.max());
            assert_eq!(back.value_at_quantile(0.5), h.value_at_quantile(0.5));
        }
        // Repetitions of an old run and of a new one merge into one cell.
        assert_eq!(merge([new.as_str(), old.as_str()]).unwrap().len(), 8);
    }

    #[test]
    fn merge_adds_repetitions() {
        let mut a = new_latency_histogram();
        let mut b = new_latency_histogram();
        (0..100).for_each(|_| assert!(!record_ns(&mut a, 10_000)));
        (0..300).for_each(|_| assert!(!record_ns(&mut b, 30_000)));
        let (ea, eb) = (encode(&a), encode(&b));
        let m = merge([ea.as_str(), eb.as_str()]).unwrap();
        assert_eq!(m.len(), 400);
        let s = LatencySummary::from_histogram(&m).unwrap();
        assert!((s.p50 - 30.0).abs() < 0.1, "{s:?}");
        assert!((s.min - 10.0).abs() < 0.1, "{s:?}");
    }

    #[test]
    fn bad_histogram_text_is_an_error_not_a_panic() {
        assert!(matches!(decode("not base64 !!"), Err(HistError::Base64(_))));
        assert!(matches!(decode("aGVsbG8="), Err(HistError::Format(_))));
    }

    #[test]
    fn summary_percentiles_match_hand_computed_ranks() {
        // 1, 2, ..., 1000 us, each once. Nearest rank (HdrHistogram's definition): the q-quantile
        // is the ceil(q x 1000)-th smallest value, so p50 = 500 us, p90 = 900, p99 = 990,
        // p99.9 = 999; the mean is 1001 / 2 = 500.5 us. Every field is distinct, so a summary
        // that mixes two of them up fails. The histogram keeps 3 significant digits: each value
        // is exact to 0.1%.
        let mut h = new_latency_histogram();
        for us in 1..=1000u64 {
            assert!(!record_ns(&mut h, us * 1000));
        }
        let s = LatencySummary::from_histogram(&h).unwrap();
        let expected = [
            ("min", s.min, 1.0),
            ("mean", s.mean, 500.5),
            ("p50", s.p50, 500.0),
            ("p90", s.p90, 900.0),
            ("p99", s.p99, 990.0),
            ("p999", s.p999, 999.0),
            ("max", s.max, 1000.0),
        ];
        for (name, got, want) in expected {
            assert!(
                (got - want).abs() <= want * 0.001,
                "{name}: {got} us, expected {want} us; {s:?}"
            );
        }
    }

    #[test]
    fn summary_is_in_microseconds() {
        let mut h = new_latency_histogram();
        assert!(!record_ns(&mut h, 1_500_000));
        let s = LatencySummary::from_histogram(&h).unwrap();
        assert!((s.p99 - 1500.0).abs() / 1500.0 < 0.001, "{s:?}");
    }

    #[test]
    fn an_empty_histogram_has_no_summary() {
        assert_eq!(
            LatencySummary::from_histogram(&new_latency_histogram()),
            None
        );
    }

    #[test]
    fn values_outside_the_range_are_recorded_at_its_bounds_and_reported() {
        let mut h = new_latency_histogram();
        assert!(record_ns(&mut h, 0), "0 ns is below the 1 ns floor");
        assert!(record_ns(&mut h, MAX_TRACKABLE_NS + 1));
        assert!(!record_ns(&mut h, MAX_TRACKABLE_NS));
        assert_eq!(h.len(), 3);
        assert_eq!(h.min(), 1);
    }

    #[test]
    fn an_all_zero_summary_of_an_old_record_reads_as_none() {
        #[derive(serde::Deserialize)]
        struct R {
            #[serde(default, deserialize_with = "de_optional_summary")]
            l: Option<LatencySummary>,
        }
        let zero =
            r#"{"l":{"min":0.0,"mean":0.0,"p50":0.0,"p90":0.0,"p99":0.0,"p999":0.0,"max":0.0}}"#;
        assert_eq!(serde_json::from_str::<R>(zero).unwrap().l, None);
        assert_eq!(serde_json::from_str::<R>(r#"{"l":null}"#).unwrap().l, None);
        assert_eq!(serde_json::from_str::<R>("{}").unwrap().l, None);
        let real =
            r#"{"l":{"min":1.0,"mean":2.0,"p50":2.0,"p90":3.0,"p99":3.0,"p999":3.0,"max":3.0}}"#;
        assert_eq!(serde_json::from_str::<R>(real).unwrap().l.unwrap().p50, 2.0);
    }
}
