//! The ranges of echolab's numeric inputs, defined once: the binaries' clap value parsers and
//! the experiment and profile checks both read them from here, so that a flag and the YAML key
//! that becomes it refuse the same values with the same words.
//!
//! Each bound says where it comes from. A value outside its range is refused when it is read
//! (exit status 2 for a flag, an error naming the field for a file), never carried into a run
//! where it would panic a worker or run for longer than anyone means to wait.
//!
//! Counts that clap reads use `clap::value_parser!(u64).range(1..=MAX)` with the maxima here;
//! its message names the flag, the value and the range ("invalid value '0' for '--threads
//! <THREADS>': 0 is not in 1..=1024"). Durations and rates use the parsers below, whose
//! errors clap wraps the same way.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

use crate::units::{self, Dur};

/// The longest duration any option takes (a run's `--duration`, a warm-up, an experiment's
/// `window`, an interval, a deadline): one day. A cell is repeated and shuffled among
/// others, so a cell longer than a day is a typo for a shorter unit, and with this bound
/// every instant a run computes (start + duration, a pacer's slots) stays far from the
/// clock's limits.
pub const MAX_RUN: Duration = Duration::from_secs(24 * 3600);

/// The most concurrent connections echo-bench opens (`CONNS`, connect-storm's and sustain's
/// `N`, an experiment's `conns`): 1,000,000, the kernel's default `fs.nr_open` (1,048,576
/// descriptors per process) less headroom, and what echo-bench's 16 loopback source
/// addresses give at 65,535 ports each; `--processes` spreads them when one process's
/// descriptor limit is lower.
pub const MAX_CONNS: u64 = 1_000_000;

/// The most requests per connection (`ROUNDS`, an experiment's `rounds`): 10^9, so that
/// CONNS × ROUNDS (at most 10^15) and the request counters cannot overflow, and a
/// connection's rounds last at most 100 s at echo-bench's highest rate.
pub const MAX_ROUNDS: u64 = 1_000_000_000;

/// The largest request or reply, bytes (`--payload-size`, `--reply-bytes`, `--read-buf`,
/// an experiment's `payload` and `reply_bytes`): 64 MiB, far above any socket buffer, so that
/// a typo cannot make every connection allocate gigabytes.
pub const MAX_MESSAGE_BYTES: u64 = 64 << 20;

/// The most worker threads or processes (echo-bench's `--threads`, echo-server's
/// `--workers`): 1024, well above any machine echolab runs on (the workers beyond the CPU
/// count only add context switches) and below the default per-user process limits.
pub const MAX_WORKERS: u64 = 1024;

/// The most repetitions of a cell (an experiment's `repetitions` and `max_repetitions`,
/// echolab-up's `--reps`): 1000. The report's intervals narrow as 1/√n, so a thousand
/// repetitions already make a 1% spread 0.03%; more is a typo that would keep the lab busy
/// for days.
pub const MAX_REPETITIONS: u64 = 1000;

/// The longest one-way delay of a profile's direction, delay plus four jitter widths
/// (`uplink`/`downlink`): 60 s, half of Linux's largest TCP retransmission timeout
/// (`TCP_RTO_MAX`, 120 s). A longer round trip is retransmitted before it can be answered,
/// so no connection across it measures anything.
pub const MAX_LINK_DELAY: Duration = Duration::from_secs(60);

/// The largest per-packet overhead of a profile's direction (`overhead`), bytes: 65,535, the
/// largest IPv4 packet; framing larger than any packet it carries is not framing.
pub const MAX_LINK_OVERHEAD: u32 = 65_535;

/// The highest link rate of a profile's direction (`rate`), bits per second: 1 Tbit/s, above
/// the fastest Ethernet (800 Gbit/s, IEEE 802.3df); a 1500-byte packet then takes 12 ns to
/// serialize, about the resolution of the clocks that pace the link.
pub const MAX_LINK_RATE: u64 = 1_000_000_000_000;

/// The longest RTT a profile may expect (`expected.rtt`'s value and tolerances,
/// `expected.added_rtt.at_least`): 120 s, Linux's largest TCP retransmission timeout
/// (`TCP_RTO_MAX`); calibration's TCP probes cannot measure a longer one.
pub const MAX_EXPECTED_RTT: Duration = Duration::from_secs(120);

/// The highest `--rate`, requests per second: 10,000,000. Above the few hundred thousand
/// one client machine sends on loopback, and one request per 100 ns, the resolution at which
/// Linux's high-resolution timers still fire on time; an unsent schedule, each slot counted
/// as a timeout at the end of a run, then stays seconds of work rather than minutes.
pub const MAX_RATE: f64 = 10_000_000.0;

/// The lowest `--rate`, requests per second: one request in [`MAX_RUN`], the longest window
/// a run has. A lower rate cannot send a single request in any run echo-bench takes, and its
/// schedule (CONNS / rate seconds between a connection's requests) would leave the range of
/// the clock.
pub const MIN_RATE: f64 = 1.0 / (24.0 * 3600.0);

/// An open-loop request rate in requests per second (echo-bench's `--rate`): finite and in
/// [`MIN_RATE`]..=[`MAX_RATE`]. Reads from a flag (`FromStr`) and from YAML or JSON (a number
/// or its text) with the same check.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Rate(f64);

impl Rate {
    /// A rate, checked.
    ///
    /// # Errors
    /// NaN, an infinity, or a value outside [`MIN_RATE`]..=[`MAX_RATE`]; the message quotes
    /// `r` and gives the range.
    pub fn new(r: f64) -> Result<Self, String> {
        Self::check(&r.to_string(), r)
    }

    fn check(text: &str, r: f64) -> Result<Self, String> {
        if r.is_finite() && (MIN_RATE..=MAX_RATE).contains(&r) {
            Ok(Self(r))
        } else {
            Err(format!(
                "invalid rate {text:?}: must be from {MIN_RATE:.7} (one a day) \
                 to {MAX_RATE:.0} requests per second"
            ))
        }
    }

    /// Requests per second.
    pub fn get(self) -> f64 {
        self.0
    }
}

impl FromStr for Rate {
    type Err = String;

    /// Parses requests per second (`"20000"`, `"0.5"`, `"1e4"`).
    ///
    /// # Errors
    /// Not a number, or as [`Rate::new`].
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().parse::<f64>() {
            Ok(r) => Self::check(s, r),
            Err(_) => Self::check(s, f64::NAN),
        }
    }
}

impl fmt::Display for Rate {
    /// The number as [`Rate::from_str`] reads it back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl Serialize for Rate {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.0)
    }
}

impl<'de> Deserialize<'de> for Rate {
    /// A number or its text, checked as [`Rate::from_str`].
    ///
    /// # Errors
    /// The message of [`Rate::new`], which serde places at the field.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = Rate;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("requests per second, a number")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Rate, E> {
                v.parse().map_err(E::custom)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Rate, E> {
                Rate::new(v).map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Rate, E> {
                self.visit_f64(v as f64)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Rate, E> {
                self.visit_f64(v as f64)
            }
        }
        d.deserialize_any(V)
    }
}

/// Checks a duration against `0..=MAX_RUN` (or `nonzero` and at most [`MAX_RUN`]); `text`
/// is the value as given, quoted in the message.
///
/// # Errors
/// A zero duration when `nonzero`, or one above [`MAX_RUN`].
pub fn check_duration(text: &str, d: Duration, nonzero: bool) -> Result<(), String> {
    if (nonzero && d.is_zero()) || d > MAX_RUN {
        let range = if nonzero {
            "greater than zero and at most 24h"
        } else {
            "from 0s to 24h"
        };
        return Err(format!("invalid duration {text:?}: must be {range}"));
    }
    Ok(())
}

/// A duration flag from 0 to [`MAX_RUN`] (a warm-up, a pause), as clap's value parser.
///
/// # Errors
/// As [`units::parse_duration`] and [`check_duration`].
pub fn duration(s: &str) -> Result<Duration, String> {
    let d = units::parse_duration(s).map_err(|e| e.to_string())?;
    check_duration(s, d, false)?;
    Ok(d)
}

/// A duration flag above zero and at most [`MAX_RUN`] (a run's length, an interval, a
/// deadline), as clap's value parser.
///
/// # Errors
/// As [`units::parse_duration`] and [`check_duration`].
pub fn nonzero_duration(s: &str) -> Result<Duration, String> {
    let d = units::parse_duration(s).map_err(|e| e.to_string())?;
    check_duration(s, d, true)?;
    Ok(d)
}

/// [`nonzero_duration`] as a [`Dur`], for option structs that serialize it.
///
/// # Errors
/// As [`nonzero_duration`].
pub fn nonzero_dur(s: &str) -> Result<Dur, String> {
    nonzero_duration(s).map(Dur)
}

/// Checks a count against `min..=max`, naming `field` (an experiment's key, e.g.
/// `"matrix[0].conns"`) in the message as clap names a flag.
///
/// # Errors
/// `v` outside the range: `"<field>: 0 is not in 1..=1000000"`.
pub fn check_count(field: &str, v: u64, min: u64, max: u64) -> Result<(), String> {
    if (min..=max).contains(&v) {
        Ok(())
    } else {
        Err(format!("{field}: {v} is not in {min}..={max}"))
    }
}

/// [`check_duration`] naming `field` (an experiment's or profile's key).
///
/// # Errors
/// As [`check_duration`], prefixed with `field`.
pub fn check_field_duration(field: &str, d: Dur, nonzero: bool) -> Result<(), String> {
    check_duration(&d.to_string(), d.0, nonzero).map_err(|e| format!("{field}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_outside_one_a_day_to_ten_million_are_refused_with_the_range() {
        assert_eq!("0.5".parse::<Rate>().unwrap().get(), 0.5);
        assert_eq!("1e7".parse::<Rate>().unwrap().get(), MAX_RATE);
        assert_eq!(Rate::new(MIN_RATE).unwrap().get(), MIN_RATE);
        for bad in [
            "0",
            "-3",
            "inf",
            "NaN",
            "fast",
            "1e-300",
            "1e-17",
            "1.0000001e7",
            "",
        ] {
            let e = bad.parse::<Rate>().unwrap_err();
            assert!(
                e.contains(&format!("{bad:?}"))
                    && e.contains("from 0.0000116")
                    && e.contains("to 10000000"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn rates_read_from_yaml_numbers_and_text_with_the_same_check() {
        assert_eq!(
            serde_yaml::from_str::<Rate>("2500.5").unwrap().get(),
            2500.5
        );
        assert_eq!(serde_yaml::from_str::<Rate>("'20'").unwrap().get(), 20.0);
        for bad in ["1e-300", ".nan", ".inf", "-1", "0"] {
            let e = serde_yaml::from_str::<Rate>(bad).unwrap_err().to_string();
            assert!(e.contains("must be from 0.0000116"), "{bad}: {e}");
        }
    }

    #[test]
    fn durations_are_bounded_by_a_day() {
        assert_eq!(duration("0s"), Ok(Duration::ZERO));
        assert_eq!(nonzero_duration("24h"), Ok(MAX_RUN));
        assert!(nonzero_duration("0s")
            .unwrap_err()
            .contains("greater than zero"));
        let e = duration("25h").unwrap_err();
        assert_eq!(e, "invalid duration \"25h\": must be from 0s to 24h");
        assert!(nonzero_duration("1e30s").is_err());
    }

    #[test]
    fn counts_name_the_field_the_value_and_the_range() {
        assert_eq!(check_count("conns", 1, 1, MAX_CONNS), Ok(()));
        assert_eq!(
            check_count("matrix[0].conns", 0, 1, MAX_CONNS),
            Err("matrix[0].conns: 0 is not in 1..=1000000".into())
        );
    }
}
