//! The link model of one direction, without I/O: given a packet's arrival time and size, decide
//! whether it is lost, dropped for lack of queue space, or when it leaves.
//!
//! Model (the physical order, and netem's result in steady state): a packet waits until the
//! link is free, occupies it for its serialization time `(size + overhead) × 8 / rate`, then
//! propagates for `delay + jitter`. Jitter is drawn from the spec's distribution; unless the
//! spec allows reordering, a packet never leaves before its predecessor (its release time is
//! raised to the predecessor's, as netem does when a rate is set). Loss is Bernoulli at
//! arrival, like netem's default loss model. The limit bounds the packets held (waiting and in
//! flight), as netem's `limit` does.

use std::time::Duration;

use echolab_core::profile::{JitterDistribution, LinkSpec};

use super::rng::Rng;

/// What happens to an arriving packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Leaves at this time (ns on the caller's clock).
    Release(u64),
    /// Lost on the link (Bernoulli loss).
    Lost,
    /// Dropped because `limit` packets are already held.
    QueueFull,
}

/// Scheduling state of one direction.
#[derive(Debug, Clone)]
pub(crate) struct Shaper {
    delay_ns: i64,
    jitter_ns: i64,
    distribution: JitterDistribution,
    loss_probability: f64,
    /// Nanoseconds per byte on the wire, 0 when the rate is unlimited.
    ns_per_byte: f64,
    overhead: u64,
    limit: usize,
    reorder: bool,
    link_free_at: u64,
    last_release: u64,
    /// Fractional nanoseconds of serialization carried over, so rounding does not drift the rate.
    serialization_carry: f64,
    /// The wire's own overhead per pass, subtracted from each packet's propagation delay.
    compensation_ns: i64,
    rng: Rng,
}

/// Cut-off of the normal jitter in standard deviations, as iproute2's `normal.dist` table
/// (its extreme entries are ±4 σ).
const NORMAL_CUTOFF_SIGMA: f64 = 4.0;

impl Shaper {
    /// A shaper for `spec`, drawing loss and jitter from a generator seeded with `seed`.
    pub(crate) fn new(spec: &LinkSpec, seed: u64) -> Self {
        let ns_per_byte = spec.rate.map(|r| 8e9 / r.0 as f64).unwrap_or(0.0);
        Self {
            delay_ns: spec.delay.0.as_nanos() as i64,
            jitter_ns: spec.jitter.0.as_nanos() as i64,
            distribution: spec.distribution,
            loss_probability: spec.loss.0 / 100.0,
            ns_per_byte,
            overhead: spec.overhead as u64,
            limit: spec.effective_limit() as usize,
            reorder: spec.reorder,
            link_free_at: 0,
            last_release: 0,
            serialization_carry: 0.0,
            compensation_ns: 0,
            rng: Rng::new(seed),
        }
    }

    /// The queue limit in packets.
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// Subtracts `overhead` (the wire's measured per-pass cost, [`super::probe`]) from the
    /// propagation delay (delay + jitter) of every later packet, never making it negative.
    /// Serialization is left alone, so the rate stays exact; a profile without delay gets no
    /// compensation at all.
    pub(crate) fn set_compensation(&mut self, overhead: Duration) {
        self.compensation_ns = overhead.as_nanos().min(i64::MAX as u128) as i64;
    }

    fn jitter_sample(&mut self) -> i64 {
        if self.jitter_ns == 0 {
            return 0;
        }
        let j = self.jitter_ns as f64;
        let x = match self.distribution {
            JitterDistribution::Uniform => (self.rng.next_f64() * 2.0 - 1.0) * j,
            JitterDistribution::Normal => {
                self.rng
                    .next_normal()
                    .clamp(-NORMAL_CUTOFF_SIGMA, NORMAL_CUTOFF_SIGMA)
                    * j
            }
        };
        x.round() as i64
    }

    /// Decides the fate of a packet of `bytes` arriving at `now_ns` while `held` packets are in
    /// the direction's queue.
    pub(crate) fn admit(&mut self, now_ns: u64, bytes: usize, held: usize) -> Verdict {
        if self.loss_probability > 0.0 && self.rng.next_f64() < self.loss_probability {
            return Verdict::Lost;
        }
        if held >= self.limit {
            return Verdict::QueueFull;
        }
        let mut departs = now_ns;
        if self.ns_per_byte > 0.0 {
            let exact =
                (bytes as u64 + self.overhead) as f64 * self.ns_per_byte + self.serialization_carry;
            let whole = exact.floor();
            self.serialization_carry = exact - whole;
            self.link_free_at = self.link_free_at.max(now_ns) + whole as u64;
            departs = self.link_free_at;
        }
        let propagation =
            (self.delay_ns + self.jitter_sample() - self.compensation_ns).max(0) as u64;
        let mut release = departs + propagation;
        if !self.reorder {
            release = release.max(self.last_release);
        }
        self.last_release = self.last_release.max(release);
        Verdict::Release(release)
    }

    /// The delay the spec adds to an isolated packet of `bytes` without jitter: serialization
    /// plus delay. For the end-to-end measurement (`wire::endtoend`) and tests.
    #[cfg(any(test, feature = "testbed"))]
    pub(crate) fn nominal_delay(&self, bytes: usize) -> Duration {
        let ser = (bytes as u64 + self.overhead) as f64 * self.ns_per_byte;
        Duration::from_nanos(self.delay_ns as u64 + ser.round() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::super::rng::Rng;
    use super::*;
    use echolab_core::units::{BitRate, Dur, Percent};

    fn spec() -> LinkSpec {
        LinkSpec {
            delay: Dur(Duration::from_millis(10)),
            limit: Some(100),
            ..LinkSpec::default()
        }
    }

    #[test]
    fn plain_delay_is_exact() {
        let mut s = Shaper::new(&spec(), 1);
        assert_eq!(s.admit(1_000, 100, 0), Verdict::Release(10_001_000));
    }

    #[test]
    fn rate_serializes_back_to_back_packets() {
        let mut sp = spec();
        sp.delay = Dur(Duration::ZERO);
        sp.rate = Some(BitRate(100_000_000));
        sp.overhead = 38;
        let mut s = Shaper::new(&sp, 1);
        // 1500 + 38 bytes at 100 Mbit/s = 123.04 us each; 1000 packets arriving at once.
        let mut last = 0;
        for _ in 0..1000 {
            if let Verdict::Release(t) = s.admit(0, 1500, 0) {
                last = t;
            }
        }
        assert_eq!(
            last, 123_040_000,
            "no drift from rounding over 1000 packets"
        );
        // An idle link sends at once.
        assert_eq!(
            s.admit(1_000_000_000, 1500, 0),
            Verdict::Release(1_000_123_040)
        );
    }

    #[test]
    fn jitter_does_not_reorder_unless_asked() {
        let mut sp = spec();
        sp.jitter = Dur(Duration::from_millis(5));
        let mut s = Shaper::new(&sp, 7);
        let mut prev = 0;
        for i in 0..10_000u64 {
            let Verdict::Release(t) = s.admit(i * 10_000, 100, 0) else {
                panic!()
            };
            assert!(t >= prev, "packet {i} overtook its predecessor");
            prev = t;
        }
        sp.reorder = true;
        let mut s = Shaper::new(&sp, 7);
        let releases: Vec<u64> = (0..1000u64)
            .map(|i| match s.admit(i * 10_000, 100, 0) {
                Verdict::Release(t) => t,
                v => panic!("{v:?}"),
            })
            .collect();
        assert!(
            releases.windows(2).any(|w| w[1] < w[0]),
            "with reorder allowed, 5 ms jitter at 10 us spacing reorders"
        );
    }

    #[test]
    fn normal_jitter_has_the_asked_sigma() {
        let mut sp = spec();
        sp.jitter = Dur(Duration::from_millis(1));
        sp.reorder = true;
        let mut s = Shaper::new(&sp, 3);
        let n = 20_000;
        let samples: Vec<f64> = (0..n)
            .map(|_| match s.admit(0, 100, 0) {
                Verdict::Release(t) => t as f64 - 10e6,
                v => panic!("{v:?}"),
            })
            .collect();
        let mean = samples.iter().sum::<f64>() / n as f64;
        let sd = (samples.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64).sqrt();
        assert!(mean.abs() < 30e3, "mean offset {mean} ns");
        assert!((sd - 1e6).abs() < 0.03e6, "sigma {sd} ns");
        assert!(
            samples.iter().all(|x| x.abs() <= 4e6 + 1.0),
            "cut at 4 sigma"
        );
    }

    #[test]
    fn compensation_shortens_propagation_only_and_never_below_zero() {
        let mut sp = spec();
        sp.delay = Dur(Duration::from_micros(100));
        sp.rate = Some(BitRate(100_000_000));
        sp.overhead = 38;
        let mut s = Shaper::new(&sp, 1);
        s.set_compensation(Duration::from_micros(30));
        // 62 + 38 bytes at 100 Mbit/s = 8 us serialization, then 100 - 30 us propagation.
        assert_eq!(s.admit(0, 62, 0), Verdict::Release(8_000 + 70_000));
        // Back to back: the second still waits its serialization slot behind the first.
        assert_eq!(s.admit(0, 62, 0), Verdict::Release(16_000 + 70_000));
        s.set_compensation(Duration::from_millis(1));
        assert_eq!(
            s.admit(1_000_000, 62, 0),
            Verdict::Release(1_008_000),
            "compensation larger than the delay leaves serialization only"
        );
    }

    #[test]
    fn loss_and_limit_drop() {
        let mut sp = spec();
        sp.loss = Percent(10.0);
        let mut s = Shaper::new(&sp, 11);
        let lost = (0..100_000)
            .filter(|_| s.admit(0, 100, 0) == Verdict::Lost)
            .count();
        assert!(
            (9_000..11_000).contains(&lost),
            "{lost} of 100000 lost at 10%"
        );
        let mut s = Shaper::new(&spec(), 1);
        assert_eq!(s.admit(0, 100, 100), Verdict::QueueFull);
        assert!(matches!(s.admit(0, 100, 99), Verdict::Release(_)));
    }

    #[test]
    fn the_limit_is_the_specs_or_netems_default() {
        assert_eq!(Shaper::new(&spec(), 1).limit(), 100);
        let mut sp = spec();
        sp.limit = None;
        // No rate: netem's default of 1000 packets (tc-netem(8)).
        assert_eq!(Shaper::new(&sp, 1).limit(), 1000);
    }

    /// Uniform jitter, seed 5, no loss: each packet's added delay is exactly the delay plus
    /// (2u - 1) × jitter for the generator's next u, drawn here from the same generator, so a
    /// draw spent on a loss test that cannot lose, or a wrong formula, shows at once.
    #[test]
    fn uniform_jitter_is_the_generators_draws_in_order() {
        let mut sp = spec();
        sp.jitter = Dur(Duration::from_millis(2));
        sp.distribution = JitterDistribution::Uniform;
        sp.reorder = true;
        let mut s = Shaper::new(&sp, 5);
        let mut rng = Rng::new(5);
        let (mut low, mut high) = (i64::MAX, i64::MIN);
        for i in 0..2000u64 {
            let at = i * 1_000_000_000;
            let expected_jitter = ((rng.next_f64() * 2.0 - 1.0) * 2e6).round() as i64;
            assert_eq!(
                s.admit(at, 100, 0),
                Verdict::Release(at + (10_000_000 + expected_jitter) as u64),
                "packet {i}"
            );
            low = low.min(expected_jitter);
            high = high.max(expected_jitter);
        }
        // Both halves of ±2 ms are reached.
        assert!(low < -1_900_000 && high > 1_900_000, "{low}..{high}");
    }

    #[test]
    fn rounding_carries_so_a_fractional_rate_does_not_drift() {
        let mut sp = spec();
        sp.delay = Dur(Duration::ZERO);
        sp.rate = Some(BitRate(3_000_000));
        let mut s = Shaper::new(&sp, 1);
        // 1 byte at 3 Mbit/s is 2666.67 ns: 3000 of them back to back take 8 ms, to within the
        // one nanosecond of floating-point error the carry may leave (whole nanoseconds
        // without it would lose 2 µs).
        let mut last = 0;
        for _ in 0..3000 {
            if let Verdict::Release(t) = s.admit(0, 1, 0) {
                last = t;
            }
        }
        assert!((7_999_999..=8_000_000).contains(&last), "{last} ns");
    }

    #[test]
    fn without_a_rate_nothing_waits_for_the_link() {
        let mut sp = spec();
        sp.reorder = true;
        let mut s = Shaper::new(&sp, 1);
        assert_eq!(s.admit(5_000, 1500, 0), Verdict::Release(10_005_000));
        // An earlier arrival (another sender's clock) is not held behind the later one.
        assert_eq!(s.admit(1_000, 1500, 0), Verdict::Release(10_001_000));
    }

    #[test]
    fn nominal_delay_is_delay_plus_serialization() {
        let mut sp = spec();
        sp.delay = Dur(Duration::from_micros(100));
        sp.rate = Some(BitRate(100_000_000));
        sp.overhead = 38;
        // (62 + 38) bytes × 80 ns per byte at 100 Mbit/s = 8 µs, plus 100 µs.
        assert_eq!(
            Shaper::new(&sp, 1).nominal_delay(62),
            Duration::from_micros(108)
        );
        assert_eq!(
            Shaper::new(&spec(), 1).nominal_delay(62),
            Duration::from_millis(10)
        );
    }
}
