//! The per-path round-trip time estimator of RFC 9002 §5.
//!
//! It keeps the latest sample, the minimum (§5.2), and the exponentially weighted smoothed RTT and
//! RTT variation (§5.3). The ACK delay the peer reports is subtracted from a sample only when the
//! result stays at or above the minimum RTT, so a peer cannot talk the estimate below what the
//! path has shown. Capping `ack_delay` at the peer's `max_ack_delay` (§5.3) is the caller's job.

use std::time::Duration;

/// Timer granularity (`kGranularity`, RFC 9002 §6.1.2): the floor on the variance term of the PTO.
pub const GRANULARITY: Duration = Duration::from_millis(1);

/// RTT estimate of one path (RFC 9002 §5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RttEstimator {
    latest: Duration,
    smoothed: Duration,
    variation: Duration,
    min: Duration,
    has_sample: bool,
}

impl RttEstimator {
    /// An estimator with no samples yet: `srtt = initial_rtt`, `rttvar = initial_rtt / 2`
    /// (RFC 9002 §5.3, where `kInitialRtt` is 333 ms). `min_rtt` and `latest` also report
    /// `initial_rtt` until the first sample arrives.
    pub fn new(initial_rtt: Duration) -> Self {
        RttEstimator {
            latest: initial_rtt,
            smoothed: initial_rtt,
            variation: initial_rtt / 2,
            min: initial_rtt,
            has_sample: false,
        }
    }

    /// Folds in one RTT `sample` (time from sending the largest newly acknowledged packet to
    /// receiving its ACK) whose ACK frame reported `ack_delay`.
    ///
    /// First sample (§5.3): `min_rtt = srtt = sample`, `rttvar = sample / 2`; `ack_delay` is
    /// ignored. Later samples: `min_rtt = min(min_rtt, sample)` (§5.2, unadjusted);
    /// `adjusted = sample - ack_delay` if that is still `>= min_rtt`, else `sample`;
    /// `rttvar = 3/4 rttvar + 1/4 |srtt - adjusted|`; `srtt = 7/8 srtt + 1/8 adjusted`.
    pub fn update(&mut self, ack_delay: Duration, sample: Duration) {
        self.latest = sample;
        if !self.has_sample {
            self.has_sample = true;
            self.min = sample;
            self.smoothed = sample;
            self.variation = sample / 2;
            return;
        }
        self.min = self.min.min(sample);
        let adjusted = match sample.checked_sub(ack_delay) {
            Some(without_delay) if without_delay >= self.min => without_delay,
            _ => sample,
        };
        let deviation = self.smoothed.abs_diff(adjusted);
        self.variation = (self.variation / 4)
            .saturating_mul(3)
            .saturating_add(deviation / 4);
        self.smoothed = (self.smoothed / 8)
            .saturating_mul(7)
            .saturating_add(adjusted / 8);
    }

    /// Takes `sample` as the first sample when there is none yet (a round trip measured
    /// before the path carried packets, e.g. its transport's handshake) and returns true; does
    /// nothing and returns false once a sample was folded in, or for a zero `sample`.
    pub fn seed(&mut self, sample: Duration) -> bool {
        if self.has_sample || sample.is_zero() {
            return false;
        }
        self.update(Duration::ZERO, sample);
        true
    }

    /// Smoothed RTT (`smoothed_rtt`).
    pub fn srtt(&self) -> Duration {
        self.smoothed
    }

    /// RTT variation (`rttvar`).
    pub fn rttvar(&self) -> Duration {
        self.variation
    }

    /// Minimum RTT seen (`min_rtt`), or the initial RTT before the first sample.
    pub fn min_rtt(&self) -> Duration {
        self.min
    }

    /// The most recent sample (`latest_rtt`), or the initial RTT before the first sample.
    pub fn latest(&self) -> Duration {
        self.latest
    }

    /// `srtt + max(4 * rttvar, kGranularity)`: the probe timeout of RFC 9002 §6.2.1 without the
    /// peer's `max_ack_delay`, which the caller adds for application-data packets.
    pub fn pto_base(&self) -> Duration {
        self.smoothed
            .saturating_add(self.variation.saturating_mul(4).max(GRANULARITY))
    }

    /// Whether at least one sample has been folded in.
    pub fn has_sample(&self) -> bool {
        self.has_sample
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    fn us(v: u64) -> Duration {
        Duration::from_micros(v)
    }

    #[test]
    fn before_any_sample_reports_the_initial_rtt() {
        let rtt = RttEstimator::new(ms(333));
        assert!(!rtt.has_sample());
        assert_eq!(rtt.srtt(), ms(333));
        assert_eq!(rtt.rttvar(), us(166_500));
        assert_eq!(rtt.min_rtt(), ms(333));
        assert_eq!(rtt.latest(), ms(333));
        // 333 + 4 * 166.5 = 999 ms
        assert_eq!(rtt.pto_base(), ms(999));
    }

    #[test]
    fn a_seed_is_the_first_sample_only_when_there_is_none() {
        let mut rtt = RttEstimator::new(ms(100));
        assert!(!rtt.seed(Duration::ZERO), "a zero seed is ignored");
        assert!(!rtt.has_sample());
        assert!(rtt.seed(ms(400)));
        assert_eq!(
            (rtt.srtt(), rtt.rttvar(), rtt.min_rtt()),
            (ms(400), ms(200), ms(400))
        );
        // A second seed changes nothing; the next real sample is folded in as a second one.
        assert!(!rtt.seed(ms(10)));
        assert_eq!(rtt.srtt(), ms(400));
        rtt.update(Duration::ZERO, ms(480));
        assert_eq!(rtt.srtt(), ms(410));
        assert_eq!(rtt.min_rtt(), ms(400));
    }

    #[test]
    fn first_sample_replaces_the_initial_values_and_ignores_ack_delay() {
        let mut rtt = RttEstimator::new(ms(333));
        rtt.update(ms(10), ms(100));
        assert!(rtt.has_sample());
        assert_eq!(rtt.srtt(), ms(100));
        assert_eq!(rtt.rttvar(), ms(50));
        assert_eq!(rtt.min_rtt(), ms(100));
        assert_eq!(rtt.latest(), ms(100));
        assert_eq!(rtt.pto_base(), ms(300));
    }

    #[test]
    fn later_samples_follow_the_ewma_with_ack_delay_subtracted() {
        let mut rtt = RttEstimator::new(ms(333));
        rtt.update(Duration::ZERO, ms(100));
        // 120 - 10 = 110 >= min 100: adjusted = 110.
        rtt.update(ms(10), ms(120));
        // rttvar = 3/4 * 50 + 1/4 * |100 - 110| = 37.5 + 2.5 = 40 ms
        assert_eq!(rtt.rttvar(), ms(40));
        // srtt = 7/8 * 100 + 1/8 * 110 = 87.5 + 13.75 = 101.25 ms
        assert_eq!(rtt.srtt(), us(101_250));
        assert_eq!(rtt.latest(), ms(120));
        assert_eq!(rtt.min_rtt(), ms(100));
        assert_eq!(rtt.pto_base(), us(101_250 + 160_000));
    }

    #[test]
    fn ack_delay_is_kept_when_subtracting_it_would_undercut_min_rtt() {
        let mut rtt = RttEstimator::new(ms(333));
        rtt.update(Duration::ZERO, ms(100));
        // 105 - 10 = 95 < min 100: the sample is used unadjusted.
        rtt.update(ms(10), ms(105));
        // rttvar = 37.5 + 1/4 * 5 = 38.75 ms; srtt = 87.5 + 13.125 = 100.625 ms
        assert_eq!(rtt.rttvar(), us(38_750));
        assert_eq!(rtt.srtt(), us(100_625));
        // An ack_delay larger than the sample itself is ignored too.
        let mut rtt2 = RttEstimator::new(ms(333));
        rtt2.update(Duration::ZERO, ms(100));
        rtt2.update(ms(500), ms(105));
        assert_eq!(rtt2, rtt);
    }

    #[test]
    fn min_rtt_uses_the_unadjusted_sample() {
        let mut rtt = RttEstimator::new(ms(333));
        rtt.update(Duration::ZERO, ms(100));
        rtt.update(ms(30), ms(80));
        assert_eq!(rtt.min_rtt(), ms(80));
        // 80 - 30 = 50 < 80, so adjusted = 80; srtt = 87.5 + 10 = 97.5 ms
        assert_eq!(rtt.srtt(), us(97_500));
        // rttvar = 37.5 + 1/4 * 20 = 42.5 ms
        assert_eq!(rtt.rttvar(), us(42_500));
    }

    #[test]
    fn pto_base_has_a_granularity_floor() {
        let mut rtt = RttEstimator::new(ms(333));
        for _ in 0..200 {
            rtt.update(Duration::ZERO, ms(20));
        }
        assert_eq!(rtt.srtt(), ms(20));
        assert!(rtt.rttvar() < us(250));
        assert_eq!(rtt.pto_base(), ms(21));
    }

    #[test]
    fn extreme_samples_saturate_instead_of_panicking() {
        let mut rtt = RttEstimator::new(Duration::MAX);
        assert_eq!(rtt.pto_base(), Duration::MAX);
        rtt.update(Duration::MAX, Duration::MAX);
        rtt.update(Duration::MAX, Duration::ZERO);
        rtt.update(Duration::ZERO, Duration::MAX);
        assert_eq!(rtt.min_rtt(), Duration::ZERO);
        assert_eq!(rtt.latest(), Duration::MAX);
    }
}
