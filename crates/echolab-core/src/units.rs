//! Physical units as they appear in profiles, experiments and on the command line.
//!
//! Spellings follow tc(8) ("PARAMETERS" section) so that a value copied from a `tc qdisc`
//! command means the same thing here:
//!
//! - durations: `ns`, `us` (or `µs`), `ms`, `s`, `m`/`min`, `h`; a bare `0` is allowed, any other
//!   bare number is rejected because its unit would be a guess;
//! - rates: `bit` (or a bare number), `kbit`, `mbit`, `gbit`, `tbit` (SI, powers of 1000) and
//!   `kibit`, `mibit`, `gibit` (powers of 1024) are bits per second; `bps`, `kbps`, `mbps`,
//!   `gbps` are **bytes** per second as in tc, and `KBps`/`MBps`/`GBps` are accepted as the
//!   unambiguous spellings of the same;
//! - loss and other ratios: a percentage such as `0.1%` (0 to 100);
//! - sizes: bytes, optionally with `B`, `KiB`, `MiB`, `GiB` (powers of 1024) or `kB`, `MB`, `GB`
//!   (powers of 1000).
//!
//! Every parser returns a [`UnitError`] that quotes the value and says what was expected; the
//! serde wrappers ([`Dur`], [`BitRate`], [`Percent`], [`ByteSize`]) carry that message into
//! serde_yaml's error, which adds the field path, line and column.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

/// A value that could not be read as the unit it was meant to be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {kind} {value:?}: {reason}")]
pub struct UnitError {
    /// What was being parsed: "duration", "rate", "percentage" or "size".
    pub kind: &'static str,
    /// The text as given.
    pub value: String,
    /// What was wrong, and what was expected instead.
    pub reason: String,
}

fn err(kind: &'static str, value: &str, reason: impl Into<String>) -> UnitError {
    UnitError {
        kind,
        value: value.to_string(),
        reason: reason.into(),
    }
}

/// Splits `"12.5ms"` into `(12.5, "ms")`; rejects NaN, infinities and negative numbers.
fn split_number<'a>(kind: &'static str, s: &'a str) -> Result<(f64, &'a str), UnitError> {
    let t = s.trim();
    let end = t
        .char_indices()
        .find(|&(_, c)| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
        .map(|(i, _)| i)
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(end);
    if num.is_empty() {
        return Err(err(kind, s, "expected a number followed by a unit"));
    }
    let v: f64 = num
        .parse()
        .map_err(|_| err(kind, s, format!("{num:?} is not a number")))?;
    if !v.is_finite() || v < 0.0 {
        return Err(err(kind, s, "must be a finite, non-negative number"));
    }
    Ok((v, unit.trim()))
}

/// Parses a duration such as `"250us"`, `"5ms"`, `"1.5s"` or `"2m"`.
///
/// # Errors
/// A missing or unknown unit, a negative or non-numeric value, or a value too large for
/// [`Duration`].
pub fn parse_duration(s: &str) -> Result<Duration, UnitError> {
    const K: &str = "duration";
    let (v, unit) = split_number(K, s)?;
    let ns_per_unit: f64 = match unit {
        "ns" => 1.0,
        "us" | "µs" | "usec" => 1e3,
        "ms" | "msec" => 1e6,
        "s" | "sec" | "secs" => 1e9,
        "m" | "min" => 60e9,
        "h" => 3600e9,
        "" if v == 0.0 => 1.0,
        "" => {
            return Err(err(
                K,
                s,
                "missing unit (use ns, us, ms, s, m or h, e.g. \"5ms\")",
            ))
        }
        other => {
            return Err(err(
                K,
                s,
                format!("unknown unit {other:?} (use ns, us, ms, s, m or h)"),
            ))
        }
    };
    let ns = v * ns_per_unit;
    if ns > u64::MAX as f64 {
        return Err(err(K, s, "too large"));
    }
    Ok(Duration::from_nanos(ns.round() as u64))
}

/// Formats a duration the way [`parse_duration`] reads it back: the largest unit that keeps
/// the value whole or short (`"10ms"`, `"250us"`, `"1.5s"`).
pub fn format_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        return "0s".into();
    }
    // The largest unit in which the value is at least 1 and exact to three decimals.
    for (div, unit) in [(1_000_000_000u128, "s"), (1_000_000, "ms"), (1_000, "us")] {
        if ns >= div && ns % (div / 1000) == 0 {
            return format!("{}{unit}", trim_float(ns as f64 / div as f64));
        }
    }
    format!("{ns}ns")
}

fn trim_float(v: f64) -> String {
    let s = format!("{v:.6}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// tc(8)'s rate units, in words, for messages about a rate that may have been meant in the
/// other unit.
pub const RATE_UNITS: &str = "rates follow tc(8): mbit = megabits/s, mbps = MBps = megabytes/s";

/// Parses a rate in tc(8) spelling into bits per second, e.g. `"100mbit"` → 100_000_000.
///
/// # Errors
/// An unknown unit, a negative or non-numeric value, or a zero rate.
pub fn parse_rate(s: &str) -> Result<u64, UnitError> {
    const K: &str = "rate";
    let (v, unit) = split_number(K, s)?;
    let bits_per_unit: f64 = match unit {
        "" | "bit" => 1.0,
        "kbit" | "Kbit" => 1e3,
        "mbit" | "Mbit" => 1e6,
        "gbit" | "Gbit" => 1e9,
        "tbit" | "Tbit" => 1e12,
        "kibit" | "Kibit" => 1024.0,
        "mibit" | "Mibit" => 1024.0 * 1024.0,
        "gibit" | "Gibit" => 1024.0 * 1024.0 * 1024.0,
        "bps" | "Bps" => 8.0,
        "kbps" | "KBps" => 8e3,
        "mbps" | "MBps" => 8e6,
        "gbps" | "GBps" => 8e9,
        other => {
            return Err(err(
                K,
                s,
                format!("unknown unit {other:?} (use bit, kbit, mbit, gbit for bits/s or Bps, KBps, MBps, GBps for bytes/s, as in tc)"),
            ))
        }
    };
    let bps = (v * bits_per_unit).round();
    if bps < 1.0 {
        return Err(err(K, s, "a rate must be at least 1bit"));
    }
    if bps > u64::MAX as f64 {
        return Err(err(K, s, "too large"));
    }
    Ok(bps as u64)
}

/// Formats bits per second as tc would print it: `"100mbit"`, `"1500kbit"`, `"12bit"`.
pub fn format_rate(bits_per_s: u64) -> String {
    for (div, unit) in [
        (1_000_000_000_000u64, "tbit"),
        (1_000_000_000, "gbit"),
        (1_000_000, "mbit"),
        (1_000, "kbit"),
    ] {
        if bits_per_s >= div && bits_per_s % (div / 1000).max(1) == 0 {
            return format!("{}{unit}", trim_float(bits_per_s as f64 / div as f64));
        }
    }
    format!("{bits_per_s}bit")
}

/// Parses a percentage such as `"0.1%"` or `"10%"` into a number from 0 to 100.
///
/// # Errors
/// A missing `%`, a non-numeric value, or a value above 100.
pub fn parse_percent(s: &str) -> Result<f64, UnitError> {
    const K: &str = "percentage";
    let (v, unit) = split_number(K, s)?;
    if unit != "%" {
        return Err(err(K, s, "expected a percentage such as \"0.1%\""));
    }
    if v > 100.0 {
        return Err(err(K, s, "must be between 0% and 100%"));
    }
    Ok(v)
}

/// Parses a byte size: `"4096"`, `"4KiB"`, `"1MiB"`, `"1500B"`, `"64kB"`.
///
/// # Errors
/// An unknown unit, a fraction of a byte, or a non-numeric value.
pub fn parse_size(s: &str) -> Result<u64, UnitError> {
    const K: &str = "size";
    let (v, unit) = split_number(K, s)?;
    let mult: f64 = match unit {
        "" | "B" => 1.0,
        "KiB" | "K" | "k" => 1024.0,
        "MiB" | "M" => 1024.0 * 1024.0,
        "GiB" | "G" => 1024.0 * 1024.0 * 1024.0,
        "kB" | "KB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        other => {
            return Err(err(
                K,
                s,
                format!("unknown unit {other:?} (use B, KiB, MiB, GiB, kB, MB or GB)"),
            ))
        }
    };
    let bytes = v * mult;
    if bytes.fract() != 0.0 {
        return Err(err(K, s, "not a whole number of bytes"));
    }
    if bytes > u64::MAX as f64 {
        return Err(err(K, s, "too large"));
    }
    Ok(bytes as u64)
}

macro_rules! unit_wrapper {
    ($(#[$doc:meta])* $name:ident($inner:ty), $parse:path, $format:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default)]
        pub struct $name(pub $inner);

        impl FromStr for $name {
            type Err = UnitError;
            fn from_str(s: &str) -> Result<Self, UnitError> {
                $parse(s).map($name)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let format: fn(&$inner) -> String = $format;
                f.write_str(&format(&self.0))
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                d.deserialize_any(UnitVisitor::<$name>(std::marker::PhantomData))
            }
        }
    };
}

/// Reads a unit value from a string, or from a bare number (YAML `limit: 1000`) as its decimal
/// text. A visitor rather than an untagged enum, so that serde_yaml keeps the error's location.
struct UnitVisitor<T>(std::marker::PhantomData<T>);

impl<'de, T: FromStr<Err = UnitError>> de::Visitor<'de> for UnitVisitor<T> {
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a value with a unit, such as \"10ms\", \"100mbit\" or \"0.1%\"")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        v.parse().map_err(E::custom)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        self.visit_str(&v.to_string())
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        self.visit_str(&v.to_string())
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<T, E> {
        self.visit_str(&v.to_string())
    }
}

unit_wrapper!(
    /// A duration read with [`parse_duration`]; serializes as e.g. `"10ms"`.
    Dur(Duration), parse_duration, |d| format_duration(*d)
);
unit_wrapper!(
    /// A rate in bits per second read with [`parse_rate`]; serializes as e.g. `"100mbit"`.
    BitRate(u64), parse_rate, |r| format_rate(*r)
);
unit_wrapper!(
    /// A percentage (0 to 100) read with [`parse_percent`]; serializes as e.g. `"0.1%"`.
    Percent(f64), parse_percent, |p| format!("{}%", trim_float(*p))
);
unit_wrapper!(
    /// A byte count read with [`parse_size`]; serializes as a plain number of bytes.
    ByteSize(u64), parse_size, |b| b.to_string()
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_in_every_unit() {
        assert_eq!(parse_duration("250us").unwrap(), Duration::from_micros(250));
        assert_eq!(parse_duration("5ms").unwrap(), Duration::from_millis(5));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("100ns").unwrap(), Duration::from_nanos(100));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert_eq!(parse_duration(" 10ms ").unwrap(), Duration::from_millis(10));
    }

    #[test]
    fn bad_durations_name_the_value_and_the_problem() {
        let e = parse_duration("5").unwrap_err();
        assert!(
            e.to_string().contains("\"5\"") && e.reason.contains("missing unit"),
            "{e}"
        );
        let e = parse_duration("5 parsecs").unwrap_err();
        assert!(e.reason.contains("unknown unit \"parsecs\""), "{e}");
        assert!(parse_duration("-1ms").is_err());
        assert!(parse_duration("ms").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("nanms").is_err());
    }

    #[test]
    fn durations_round_trip_through_format() {
        for s in ["10ms", "250us", "1.5s", "100ns", "0s", "60s", "12.345ms"] {
            let d = parse_duration(s).unwrap();
            assert_eq!(parse_duration(&format_duration(d)).unwrap(), d, "{s}");
        }
        assert_eq!(format_duration(Duration::from_millis(10)), "10ms");
        assert_eq!(format_duration(Duration::from_micros(1500)), "1.5ms");
    }

    #[test]
    fn rates_follow_tc_units() {
        assert_eq!(parse_rate("100mbit").unwrap(), 100_000_000);
        assert_eq!(parse_rate("1gbit").unwrap(), 1_000_000_000);
        assert_eq!(parse_rate("12.5MBps").unwrap(), 100_000_000);
        assert_eq!(
            parse_rate("1mbps").unwrap(),
            8_000_000,
            "tc: mbps is megabytes per second"
        );
        assert_eq!(parse_rate("1mibit").unwrap(), 1_048_576);
        assert_eq!(parse_rate("9600").unwrap(), 9600);
        assert_eq!(format_rate(100_000_000), "100mbit");
        assert_eq!(format_rate(1_500_000), "1.5mbit");
        assert!(parse_rate("100 furlongs")
            .unwrap_err()
            .reason
            .contains("furlongs"));
        assert!(parse_rate("0mbit").is_err());
    }

    #[test]
    fn percentages_and_sizes() {
        assert_eq!(parse_percent("0.1%").unwrap(), 0.1);
        assert_eq!(parse_percent("10%").unwrap(), 10.0);
        assert!(parse_percent("10").is_err());
        assert!(parse_percent("101%").is_err());
        assert_eq!(parse_size("4KiB").unwrap(), 4096);
        assert_eq!(parse_size("64kB").unwrap(), 64_000);
        assert_eq!(parse_size("1500").unwrap(), 1500);
        assert!(parse_size("1.5B").is_err());
    }

    #[test]
    fn wrappers_read_yaml_and_name_the_field() {
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Link {
            delay: Dur,
            rate: BitRate,
            loss: Percent,
            limit: ByteSize,
        }
        let ok: Link =
            serde_yaml::from_str("delay: 10ms\nrate: 100mbit\nloss: 0.1%\nlimit: 1000\n").unwrap();
        assert_eq!(ok.delay.0, Duration::from_millis(10));
        assert_eq!(ok.rate.0, 100_000_000);
        assert_eq!(ok.loss.0, 0.1);
        assert_eq!(ok.limit.0, 1000);
        let bad =
            serde_yaml::from_str::<Link>("delay: 10 parsecs\nrate: 1mbit\nloss: 1%\nlimit: 1\n")
                .unwrap_err();
        let msg = bad.to_string();
        assert!(
            msg.contains("delay") && msg.contains("10 parsecs") && msg.contains("line 1"),
            "{msg}"
        );
        assert_eq!(serde_json::to_string(&ok.delay).unwrap(), "\"10ms\"");
    }
}
