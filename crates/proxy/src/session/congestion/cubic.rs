//! CUBIC congestion control, RFC 9438.
//!
//! Windows are kept in bytes; the RFC's segment-based formulas are scaled by the maximum datagram
//! size (one segment). With `C = 0.4` and `β_cubic = 0.7` (§4.1):
//!
//! - Slow start, the recovery period and persistent congestion behave as in NewReno
//!   (RFC 9002 §7; RFC 9438 §4.8 for the timeout case, where the window restarts from the
//!   minimum window), slow start with HyStart++ (RFC 9406, [`HyStart`]; RFC 9438 §4.10): once
//!   the RTT rises, a quarter of the growth for five rounds, then congestion avoidance from
//!   `W_max` = `cwnd`.
//! - Window increase (§4.2, eq. 1–2): `W_cubic(t) = C (t - K)^3 + W_max` with
//!   `K = cbrt((W_max - cwnd_epoch) / C)`, `t` measured from the first ACK of the current
//!   congestion avoidance stage. Each ACK of `n` segments moves `cwnd` by
//!   `n * (target - cwnd) / cwnd` toward `target = W_cubic(t + srtt)`, clamped to
//!   `[cwnd, 1.5 cwnd]` (§4.4, §4.5).
//! - Reno-friendly region (§4.3, eq. 4): `W_est` grows by `α_cubic * n / cwnd` per ACK with
//!   `α_cubic = 3 (1 - β) / (1 + β)`, and by `n / cwnd` once `W_est >= cwnd_prior`; while
//!   `W_cubic(t) < W_est`, `cwnd` follows `W_est`.
//! - Multiplicative decrease (§4.6): `ssthresh = cwnd * β`, `cwnd = ssthresh`
//!   (the window stands in for flight size, as in most implementations).
//! - Fast convergence (§4.7): a loss below the previous `W_max` sets
//!   `W_max = cwnd * (1 + β) / 2` instead of `cwnd`.
//! - Application-limited (§5.8): app-limited ACKs do not grow the window, and the time spent
//!   app-limited is excluded from `t` by moving the epoch start forward.

use std::time::Duration;

use braid_sched_core::Timestamp;

use super::{Controller, HyStart, RttEstimator, WindowParams};

/// `C` of RFC 9438 §4.1 (segments / s³).
pub const C: f64 = 0.4;
/// `β_cubic` of RFC 9438 §4.1, the multiplicative decrease factor.
pub const BETA: f64 = 0.7;
/// `β_cubic` as an exact fraction for the window reduction (numerator, denominator).
const BETA_FRACTION: (u128, u128) = (7, 10);
/// `α_cubic` of RFC 9438 §4.3, the Reno-friendly additive increase per RTT (segments).
const ALPHA_CUBIC: f64 = 3.0 * (1.0 - BETA) / (1.0 + BETA);
/// The window is capped here (2^53 bytes, the largest integer `f64` holds exactly), far above
/// any real path, so the arithmetic stays finite whatever the input.
const MAX_WINDOW: f64 = 9_007_199_254_740_992.0;

/// One congestion avoidance stage (RFC 9438 §4.2), all windows in bytes.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Epoch {
    /// `t_epoch`, moved forward by app-limited time.
    start: Timestamp,
    /// `K`, seconds.
    k: f64,
    /// `W_max`, bytes.
    w_max: f64,
    /// `cwnd_prior`, bytes.
    cwnd_prior: f64,
    /// `W_est`, bytes.
    w_est: f64,
    /// `C` scaled to bytes / s³.
    c_bytes: f64,
}

impl Epoch {
    fn new(start: Timestamp, cwnd: f64, w_max: f64, cwnd_prior: f64, mds: f64) -> Self {
        let c_bytes = C * mds;
        Epoch {
            start,
            k: ((w_max - cwnd) / c_bytes).cbrt(),
            w_max,
            cwnd_prior,
            w_est: cwnd,
            c_bytes,
        }
    }

    /// `W_cubic(t)` in bytes, `t` in seconds since the epoch start (RFC 9438 eq. 1).
    fn w_cubic(&self, t: f64) -> f64 {
        self.c_bytes * (t - self.k).powi(3) + self.w_max
    }
}

/// CUBIC state for one path (RFC 9438).
#[derive(Clone, Debug, PartialEq)]
pub struct Cubic {
    /// `cwnd`, bytes (fractional growth is kept).
    cwnd: f64,
    ssthresh: u64,
    recovery_start: Option<Timestamp>,
    /// `W_max` and `cwnd_prior` of the last congestion event, bytes.
    last_reduction: Option<(f64, f64)>,
    epoch: Option<Epoch>,
    /// When the current run of app-limited ACKs began.
    app_limited_since: Option<Timestamp>,
    /// Slow start's HyStart++ (RFC 9406).
    hystart: HyStart,
    params: WindowParams,
}

impl Cubic {
    pub(crate) fn new(params: WindowParams) -> Self {
        Cubic {
            cwnd: params.initial_window as f64,
            ssthresh: u64::MAX,
            recovery_start: None,
            last_reduction: None,
            epoch: None,
            app_limited_since: None,
            hystart: HyStart::default(),
            params,
        }
    }

    /// The slow-start threshold, bytes (`u64::MAX` until the first congestion event).
    pub fn ssthresh(&self) -> u64 {
        self.ssthresh
    }

    /// Continues from another controller's `window` and slow-start threshold (see
    /// [`super::AnyController::take_over`]): past slow start, the window is the plateau of a
    /// new curve (`W_max` = `cwnd`, so `K` = 0), as when slow start ends (RFC 9438 §4.10).
    pub(crate) fn resume(&mut self, window: u64, ssthresh: u64) {
        self.cwnd = (window.max(self.params.minimum_window) as f64).min(MAX_WINDOW);
        self.ssthresh = ssthresh;
        self.recovery_start = None;
        self.last_reduction = (ssthresh != u64::MAX).then_some((self.cwnd, self.cwnd));
        self.epoch = None;
        self.app_limited_since = None;
        self.hystart.restart();
    }

    /// Whether slow start is in HyStart++'s conservative phase (RFC 9406 §4.2).
    pub fn in_css(&self) -> bool {
        self.hystart.in_css()
    }

    /// Whether a packet sent at `sent_time` belongs to the current recovery period.
    pub fn in_recovery(&self, sent_time: Timestamp) -> bool {
        self.recovery_start.is_some_and(|start| sent_time <= start)
    }

    /// The window floor, bytes.
    pub fn minimum_window(&self) -> u64 {
        self.params.minimum_window
    }

    /// `W_max`, bytes: the window the cubic curve plateaus at (after fast convergence), if a
    /// congestion event or the end of slow start has set it.
    pub fn w_max(&self) -> Option<u64> {
        self.last_reduction.map(|(w_max, _)| w_max as u64)
    }

    /// Grows the window in congestion avoidance for `bytes` newly acknowledged (RFC 9438 §4.2–4.5).
    fn avoid_congestion(&mut self, now: Timestamp, bytes: u64, rtt: &RttEstimator) {
        let mds = self.params.max_datagram_size as f64;
        let cwnd = self.cwnd;
        let epoch = match &mut self.epoch {
            Some(epoch) => epoch,
            None => {
                // After a congestion event `last_reduction` is set; after HyStart++ ended slow
                // start it is not, and the curve starts flat at the current window (RFC 9438
                // §4.10: `W_max` = `cwnd_prior` = `cwnd`).
                let (w_max, cwnd_prior) = *self.last_reduction.get_or_insert((cwnd, cwnd));
                self.epoch
                    .insert(Epoch::new(now, cwnd, w_max, cwnd_prior, mds))
            }
        };
        let acked = bytes as f64;
        let alpha = if epoch.w_est >= epoch.cwnd_prior {
            1.0
        } else {
            ALPHA_CUBIC
        };
        epoch.w_est += alpha * mds * acked / cwnd;
        let t = (now - epoch.start).as_secs_f64();
        let grown = if epoch.w_cubic(t) < epoch.w_est {
            epoch.w_est
        } else {
            let target = epoch
                .w_cubic(t + rtt.srtt().as_secs_f64())
                .clamp(cwnd, 1.5 * cwnd);
            cwnd + (target - cwnd) * acked / cwnd
        };
        self.cwnd = grown.clamp(cwnd, MAX_WINDOW);
    }
}

impl Controller for Cubic {
    fn on_ack(
        &mut self,
        now: Timestamp,
        sent_time: Timestamp,
        bytes: u64,
        rtt: &RttEstimator,
        app_limited: bool,
    ) {
        if self.in_recovery(sent_time) {
            return;
        }
        if app_limited {
            self.app_limited_since.get_or_insert(now);
            return;
        }
        if let (Some(since), Some(epoch)) = (self.app_limited_since.take(), &mut self.epoch) {
            epoch.start += now - since;
        }
        let mut bytes = bytes as f64;
        let ssthresh = self.ssthresh as f64;
        if self.cwnd < ssthresh {
            let slow_start = bytes.min(ssthresh - self.cwnd);
            let divisor = self.hystart.growth_divisor() as f64;
            self.cwnd = (self.cwnd + slow_start / divisor).min(MAX_WINDOW);
            bytes -= slow_start;
        }
        if bytes > 0.0 {
            self.avoid_congestion(now, bytes as u64, rtt);
        }
    }

    fn on_rtt_sample(&mut self, now: Timestamp, largest_sent: Timestamp, sample: Duration) {
        if self.cwnd < self.ssthresh as f64
            && !self.in_recovery(largest_sent)
            && self.hystart.on_rtt_sample(now, largest_sent, sample)
        {
            self.ssthresh = self.window();
        }
    }

    fn on_congestion_event(
        &mut self,
        now: Timestamp,
        sent_time: Timestamp,
        persistent: bool,
        _lost_bytes: u64,
    ) {
        self.hystart.restart();
        if !self.in_recovery(sent_time) {
            self.recovery_start = Some(now);
            let cwnd_prior = self.cwnd;
            let w_max = match self.last_reduction {
                Some((previous_w_max, _)) if cwnd_prior < previous_w_max => {
                    cwnd_prior * (1.0 + BETA) / 2.0
                }
                _ => cwnd_prior,
            };
            self.last_reduction = Some((w_max, cwnd_prior));
            let (num, den) = BETA_FRACTION;
            let reduced = u128::from(self.window()) * num / den;
            self.ssthresh = u64::try_from(reduced)
                .unwrap_or(u64::MAX)
                .max(self.params.minimum_window);
            self.cwnd = self.ssthresh as f64;
            self.epoch = None;
        }
        if persistent {
            self.cwnd = self.params.minimum_window as f64;
            self.recovery_start = None;
            self.epoch = None;
        }
    }

    fn window(&self) -> u64 {
        // `cwnd` is finite and positive; the cast is exact below 2^53 (every window growth is
        // capped there) and saturating above (only for absurd configured windows).
        self.cwnd as u64
    }

    /// The curve keeps its plateau (`W_max` at `K`) and is scaled by the new segment size from
    /// now on; `W_est` stays in bytes.
    fn on_max_datagram_size(&mut self, max_datagram_size: u64, minimum_window: u64) {
        self.params = self.params.resized(max_datagram_size, minimum_window);
        if let Some(epoch) = &mut self.epoch {
            epoch.c_bytes = C * self.params.max_datagram_size as f64;
        }
        self.cwnd = self.cwnd.max(self.params.minimum_window as f64);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const MDS: u64 = 1200;

    fn cubic() -> Cubic {
        Cubic::new(WindowParams::of_datagrams(MDS))
    }

    fn at(secs: f64) -> Timestamp {
        Timestamp::from_secs_f64(secs)
    }

    fn rtt(millis: u64) -> RttEstimator {
        let mut rtt = RttEstimator::new(Duration::from_millis(333));
        rtt.update(Duration::ZERO, Duration::from_millis(millis));
        rtt
    }

    fn assert_near(actual: u64, expected: f64, tolerance: f64, what: &str) {
        assert!(
            (actual as f64 - expected).abs() <= tolerance,
            "{what}: window {actual}, expected {expected} ± {tolerance}"
        );
    }

    /// Slow start to 43200 bytes (36 segments), then a loss at t = 1 s: W_max = 36 segments,
    /// cwnd = ssthresh = 0.7 * 36 = 25.2 segments = 30240 bytes, K = cbrt(36 * 0.3 / 0.4) = 3 s.
    /// Returns the controller with its epoch started by a 1-byte ACK at t = 1.1 s.
    fn after_loss_at_36_segments(rtt: &RttEstimator) -> Cubic {
        let mut cc = cubic();
        cc.on_ack(at(0.5), at(0.0), 31_200, rtt, false);
        assert_eq!(cc.window(), 43_200);
        cc.on_congestion_event(at(1.0), at(0.9), false, MDS);
        assert_eq!(cc.window(), 30_240);
        assert_eq!(cc.ssthresh(), 30_240);
        assert_eq!(cc.w_max(), Some(43_200));
        cc.on_ack(at(1.1), at(1.05), 1, rtt, false);
        let epoch = cc
            .epoch
            .expect("the first ACK after recovery starts the epoch");
        assert!((epoch.k - 3.0).abs() < 1e-9, "K = {}", epoch.k);
        cc
    }

    #[test]
    fn w_cubic_matches_hand_computed_values() {
        // W_max = 36 segments, cwnd_epoch = 25.2 segments, K = 3 s.
        let epoch = Epoch::new(Timestamp::ZERO, 30_240.0, 43_200.0, 43_200.0, 1200.0);
        assert!((epoch.k - 3.0).abs() < 1e-9);
        // W_cubic(t) = 0.4 (t - 3)^3 + 36 segments.
        let cases = [
            (0.0, 25.2), // 0.4 * -27 + 36
            (1.0, 32.8), // 0.4 * -8 + 36
            (2.0, 35.6), // 0.4 * -1 + 36
            (3.0, 36.0), // the plateau at W_max
            (4.0, 36.4), // 0.4 * 1 + 36
            (5.0, 39.2), // 0.4 * 8 + 36
        ];
        for (t, segments) in cases {
            let bytes = segments * 1200.0;
            assert!((epoch.w_cubic(t) - bytes).abs() < 1e-6, "t = {t}");
        }
    }

    #[test]
    fn window_follows_w_cubic_after_a_loss() {
        let rtt = rtt(100);
        let mut cc = after_loss_at_36_segments(&rtt);
        // Acknowledging a whole window at epoch time t moves cwnd to W_cubic(t + srtt).
        // Epoch start is t = 1.1 s, srtt = 0.1 s.
        let cases = [(0.9, 32.8), (2.9, 36.0), (3.9, 36.4), (4.9, 39.2)];
        for (epoch_time, segments) in cases {
            let window = cc.window();
            cc.on_ack(
                at(1.1 + epoch_time),
                at(1.0 + epoch_time),
                window,
                &rtt,
                false,
            );
            assert_near(
                cc.window(),
                segments * 1200.0,
                1.0,
                &format!("t = {epoch_time}"),
            );
        }
    }

    #[test]
    fn growth_per_ack_is_capped_at_one_and_a_half_windows() {
        let rtt = rtt(100);
        let mut cc = after_loss_at_36_segments(&rtt);
        // W_cubic(10 s) = 0.4 * 343 + 36 = 173.2 segments, far above 1.5 * 30240 = 45360.
        let window = cc.window();
        cc.on_ack(at(1.1 + 9.9), at(10.0), window, &rtt, false);
        assert_near(cc.window(), 45_360.0, 1.0, "capped target");
    }

    #[test]
    fn reno_friendly_region_follows_w_est() {
        // With a 1 ms RTT, Reno's estimate outgrows the cubic curve near its start.
        let rtt = rtt(1);
        let mut cc = after_loss_at_36_segments(&rtt);
        // Each ACK of a whole window adds α_cubic = 0.9 / 1.7 segments to W_est until it
        // reaches cwnd_prior = 43200 bytes, then 1 segment.
        for _ in 0..10 {
            let window = cc.window();
            cc.on_ack(at(1.101), at(1.1005), window, &rtt, false);
        }
        // 30240 + 10 * 0.529412 * 1200 = 36592.9 bytes
        assert_near(cc.window(), 36_592.9, 2.0, "10 ACKed windows");
        for _ in 0..11 {
            let window = cc.window();
            cc.on_ack(at(1.101), at(1.1005), window, &rtt, false);
        }
        // 30240 + 21 * 635.294 = 43581.2 bytes: past cwnd_prior, so α becomes 1.
        assert_near(cc.window(), 43_581.2, 2.0, "21 ACKed windows");
        let window = cc.window();
        cc.on_ack(at(1.101), at(1.1005), window, &rtt, false);
        assert_near(cc.window(), 44_781.2, 2.0, "22 ACKed windows");
    }

    #[test]
    fn fast_convergence_lowers_w_max_when_losing_below_it() {
        let rtt = rtt(100);
        let mut cc = after_loss_at_36_segments(&rtt);
        let window = cc.window();
        cc.on_ack(at(2.0), at(1.9), window, &rtt, false); // W_cubic(1.0) = 39360 bytes
        assert_near(cc.window(), 39_360.0, 1.0, "before the second loss");
        let before = cc.window();
        cc.on_congestion_event(at(2.1), at(2.05), false, MDS);
        // 39360 < W_max 43200: W_max = 39360 * 1.7 / 2 = 33456 bytes; cwnd = 0.7 * 39360.
        assert_near(cc.w_max().unwrap_or(0), 33_456.0, 1.0, "W_max");
        assert_eq!(cc.window(), before * 7 / 10);
        // Losing above W_max does not apply fast convergence.
        let mut cc = cubic();
        cc.on_congestion_event(at(0.1), at(0.05), false, MDS);
        assert_eq!(cc.w_max(), Some(12_000));
        cc.on_ack(at(0.2), at(0.15), 1, &rtt, false);
        let window = cc.window();
        cc.on_ack(at(20.0), at(19.9), window, &rtt, false);
        assert!(cc.window() > 12_000);
        let before = cc.window();
        cc.on_congestion_event(at(20.5), at(20.4), false, MDS);
        assert_eq!(cc.w_max(), Some(before));
    }

    #[test]
    fn one_reduction_per_recovery_period_and_no_growth_inside_it() {
        let rtt = rtt(100);
        let mut cc = cubic();
        cc.on_congestion_event(at(1.0), at(0.9), false, MDS);
        assert_eq!(cc.window(), 8_400);
        cc.on_congestion_event(at(1.05), at(0.95), false, MDS);
        cc.on_congestion_event(at(1.10), at(1.0), false, MDS);
        assert_eq!(cc.window(), 8_400);
        cc.on_ack(at(1.2), at(1.0), 8_400, &rtt, false);
        assert_eq!(cc.window(), 8_400);
        cc.on_congestion_event(at(1.3), at(1.01), false, MDS);
        assert_eq!(cc.window(), 5_880);
    }

    #[test]
    fn persistent_congestion_restarts_from_the_minimum_window() {
        let rtt = rtt(100);
        let mut cc = after_loss_at_36_segments(&rtt);
        cc.on_congestion_event(at(5.0), at(2.0), true, 10 * MDS);
        assert_eq!(cc.window(), 2_400);
        assert!(cc.epoch.is_none());
        assert!(!cc.in_recovery(at(2.0)));
        // Slow start again, up to the reduced ssthresh (0.7 * 30240 = 21168).
        assert_eq!(cc.ssthresh(), 21_168);
        cc.on_ack(at(5.1), at(5.0), 2_400, &rtt, false);
        assert_eq!(cc.window(), 4_800);
    }

    #[test]
    fn app_limited_acks_neither_grow_the_window_nor_count_as_epoch_time() {
        let rtt = rtt(100);
        let mut cc = cubic();
        cc.on_ack(at(0.1), at(0.0), 12_000, &rtt, true);
        assert_eq!(cc.window(), 12_000);
        let mut limited = after_loss_at_36_segments(&rtt);
        let reference = limited.clone();
        // App-limited from t = 1.5 s until 3.5 s: two seconds that must not count.
        limited.on_ack(at(1.5), at(1.4), 30_000, &rtt, true);
        limited.on_ack(at(2.5), at(2.4), 30_000, &rtt, true);
        assert_eq!(limited.window(), reference.window());
        let window = limited.window();
        limited.on_ack(at(3.5), at(3.4), window, &rtt, false);
        // The first non-limited ACK at 3.5 s sees epoch time 3.5 - 1.1 - 2.0 = 0.4 s, so the
        // window heads for W_cubic(0.5) = 0.4 * (0.5 - 3)^3 + 36 = 29.75 segments (35700 bytes)
        // instead of W_cubic(2.5) = 35.95 segments (43140 bytes).
        let mut reference = reference;
        reference.on_ack(at(1.5), at(1.4), window, &rtt, false);
        assert_eq!(limited.window(), reference.window());
        assert_near(limited.window(), 35_700.0, 1.0, "after the app-limited gap");
    }

    #[test]
    fn congestion_avoidance_after_slow_start_uses_the_last_w_max() {
        let rtt = rtt(100);
        let mut cc = cubic();
        cc.on_congestion_event(at(0.0), at(0.0), true, MDS); // ssthresh 8400, cwnd 2400
        cc.on_ack(at(0.2), at(0.1), 6_000, &rtt, false);
        assert_eq!(cc.window(), 8_400);
        assert_eq!(cc.epoch, None);
        cc.on_ack(at(0.3), at(0.2), 1, &rtt, false);
        let epoch = cc.epoch.expect("congestion avoidance started");
        // W_max stays the 12000 of the loss; K = cbrt((12000 - 8400) / 480) = cbrt(7.5).
        assert!((epoch.k - 7.5f64.cbrt()).abs() < 1e-9);
    }

    /// HyStart++: a round whose smallest RTT rose by the threshold starts the conservative
    /// phase (a quarter of the growth); five rounds later slow start ends with `ssthresh` at
    /// the window and the curve's plateau there (no loss, so no reduction).
    #[test]
    fn a_rising_rtt_slows_slow_start_then_ends_it_without_a_loss() {
        let mut cc = cubic();
        let rtt = rtt(50);
        // One round per 100 ms: ten ACKs of one datagram, each with an RTT sample.
        let round = |cc: &mut Cubic, start_ms: u64, sample_ms: u64| {
            for i in 0..10 {
                let now = Timestamp::from_millis(start_ms + i);
                let sent = Timestamp::from_millis(start_ms + i - 50);
                cc.on_rtt_sample(now, sent, Duration::from_millis(sample_ms));
                cc.on_ack(now, sent, MDS, &rtt, false);
            }
        };
        round(&mut cc, 1000, 50);
        round(&mut cc, 1100, 50);
        assert_eq!(cc.window(), 12_000 + 20 * MDS, "standard slow start");
        assert!(!cc.in_css());
        round(&mut cc, 1200, 57);
        assert!(cc.in_css(), "57 ms >= 50 + 50/8 ms");
        let before = cc.window();
        round(&mut cc, 1300, 57);
        assert!(cc.in_css());
        assert_eq!(
            cc.window(),
            before + 10 * MDS / 4,
            "a quarter of the ACKed bytes"
        );
        for k in 0..3 {
            round(&mut cc, 1400 + 100 * k, 57);
        }
        assert!(cc.in_css());
        assert_eq!(cc.ssthresh(), u64::MAX);
        // The fifth round's first sample ends the phase; its ACKs then grow the window in
        // congestion avoidance, on a curve whose plateau is the window slow start ended at.
        let window = cc.window();
        round(&mut cc, 1700, 57);
        assert!(!cc.in_css());
        assert_eq!(cc.ssthresh(), window, "slow start ended at the window");
        assert_eq!(cc.w_max(), Some(window), "the curve's plateau");
        assert!(cc.window() > window && cc.window() < window + 10 * MDS / 4);
    }
}
