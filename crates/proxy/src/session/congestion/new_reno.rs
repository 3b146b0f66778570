//! NewReno congestion control as specified for QUIC in RFC 9002 §7 and Appendix B.
//!
//! - Slow start (§7.3.1): while `cwnd < ssthresh` the window grows by every acknowledged byte,
//!   doubling once per round trip, with HyStart++ (RFC 9406, [`HyStart`]): once the RTT rises,
//!   by a quarter of them for five rounds, then congestion avoidance (`ssthresh` = `cwnd`).
//! - Congestion avoidance (§7.3.3): the window grows by one maximum datagram per window of
//!   acknowledged bytes (counted exactly, so ~1 datagram per RTT).
//! - Recovery (§7.3.2, B.6): on a congestion event the window and `ssthresh` drop to
//!   `cwnd * kLossReductionFactor` (0.5), never below the minimum window, and a recovery period
//!   starts at `now`. Losses and ACKs of packets sent at or before that instant neither reduce nor
//!   grow the window again; the first ACK of a later packet ends recovery.
//! - Persistent congestion (§7.6.2, B.8): the window collapses to the minimum window and the
//!   recovery period is cleared.
//! - Under-utilisation (§7.8): an app-limited ACK does not grow the window.

use std::time::Duration;

use braid_sched_core::Timestamp;

use super::{Controller, HyStart, RttEstimator, WindowParams};

/// `kLossReductionFactor` of RFC 9002 §7.2, as a fraction (numerator, denominator).
const LOSS_REDUCTION: (u64, u64) = (1, 2);

/// NewReno state for one path (RFC 9002 §7).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewReno {
    window: u64,
    ssthresh: u64,
    /// Bytes acknowledged in congestion avoidance since the window last grew.
    acked_in_avoidance: u64,
    recovery_start: Option<Timestamp>,
    /// Slow start's HyStart++ (RFC 9406).
    hystart: HyStart,
    /// Bytes acknowledged in HyStart++'s conservative phase not yet grown by (it grows by a
    /// quarter of them).
    css_carry: u64,
    params: WindowParams,
}

impl NewReno {
    pub(crate) fn new(params: WindowParams) -> Self {
        NewReno {
            window: params.initial_window,
            ssthresh: u64::MAX,
            acked_in_avoidance: 0,
            recovery_start: None,
            hystart: HyStart::default(),
            css_carry: 0,
            params,
        }
    }

    /// The slow-start threshold, bytes (`u64::MAX` until the first congestion event).
    pub fn ssthresh(&self) -> u64 {
        self.ssthresh
    }

    /// Continues from another controller's `window` and slow-start threshold (see
    /// [`super::AnyController::take_over`]); the window is kept at least the floor.
    pub(crate) fn resume(&mut self, window: u64, ssthresh: u64) {
        self.window = window.max(self.params.minimum_window);
        self.ssthresh = ssthresh;
        self.acked_in_avoidance = 0;
        self.recovery_start = None;
        self.hystart.restart();
        self.css_carry = 0;
    }

    /// Whether a packet sent at `sent_time` belongs to the current recovery period
    /// (`InCongestionRecovery` of RFC 9002 B.5).
    pub fn in_recovery(&self, sent_time: Timestamp) -> bool {
        self.recovery_start.is_some_and(|start| sent_time <= start)
    }

    /// The window floor, bytes.
    pub fn minimum_window(&self) -> u64 {
        self.params.minimum_window
    }

    /// The datagram size the window grows in, bytes.
    pub(crate) fn max_datagram_size(&self) -> u64 {
        self.params.max_datagram_size
    }

    /// Slow start's part of an ACK of `bytes` (§7.3.1): the window grows by as many of them as
    /// fit below `ssthresh`; returns the bytes left for congestion avoidance.
    pub(crate) fn slow_start(&mut self, bytes: u64) -> u64 {
        if self.window >= self.ssthresh {
            return bytes;
        }
        let taken = bytes.min(self.ssthresh - self.window);
        let divisor = self.hystart.growth_divisor();
        self.css_carry += taken;
        self.window += self.css_carry / divisor;
        self.css_carry %= divisor;
        bytes - taken
    }

    /// Feeds HyStart++ an ACK's RTT sample while in slow start (see
    /// [`Controller::on_rtt_sample`]); when its conservative phase ends, so does slow start.
    pub(crate) fn hystart_sample(
        &mut self,
        now: Timestamp,
        largest_sent: Timestamp,
        sample: Duration,
    ) {
        if self.window < self.ssthresh
            && !self.in_recovery(largest_sent)
            && self.hystart.on_rtt_sample(now, largest_sent, sample)
        {
            self.ssthresh = self.window;
        }
    }

    /// Moves the window by `delta` bytes (a coupled controller's congestion avoidance), never
    /// below the minimum window. A decrease takes `ssthresh` down with the window, so that the
    /// path stays in congestion avoidance instead of slow-starting straight back.
    pub(crate) fn adjust_window(&mut self, delta: i64) {
        self.window = self
            .window
            .saturating_add_signed(delta)
            .max(self.params.minimum_window);
        if delta < 0 {
            self.ssthresh = self.ssthresh.min(self.window);
        }
    }
}

impl Controller for NewReno {
    fn on_ack(
        &mut self,
        _now: Timestamp,
        sent_time: Timestamp,
        bytes: u64,
        _rtt: &RttEstimator,
        app_limited: bool,
    ) {
        if app_limited || self.in_recovery(sent_time) {
            return;
        }
        let bytes = self.slow_start(bytes);
        if bytes == 0 {
            return;
        }
        // Congestion avoidance: one datagram per window's worth of acknowledged bytes.
        self.acked_in_avoidance = self.acked_in_avoidance.saturating_add(bytes);
        while self.acked_in_avoidance >= self.window {
            self.acked_in_avoidance -= self.window;
            self.window = self.window.saturating_add(self.params.max_datagram_size);
        }
    }

    fn on_rtt_sample(&mut self, now: Timestamp, largest_sent: Timestamp, sample: Duration) {
        self.hystart_sample(now, largest_sent, sample);
    }

    fn on_congestion_event(
        &mut self,
        now: Timestamp,
        sent_time: Timestamp,
        persistent: bool,
        _lost_bytes: u64,
    ) {
        self.hystart.restart();
        self.css_carry = 0;
        if !self.in_recovery(sent_time) {
            self.recovery_start = Some(now);
            let (num, den) = LOSS_REDUCTION;
            let reduced =
                u64::try_from(u128::from(self.window) * u128::from(num) / u128::from(den))
                    .unwrap_or(u64::MAX);
            self.ssthresh = reduced.max(self.params.minimum_window);
            self.window = self.ssthresh;
            self.acked_in_avoidance = 0;
        }
        if persistent {
            self.window = self.params.minimum_window;
            self.acked_in_avoidance = 0;
            self.recovery_start = None;
        }
    }

    fn window(&self) -> u64 {
        self.window
    }

    fn on_max_datagram_size(&mut self, max_datagram_size: u64, minimum_window: u64) {
        self.params = self.params.resized(max_datagram_size, minimum_window);
        self.window = self.window.max(self.params.minimum_window);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const MDS: u64 = 1200;

    fn reno() -> NewReno {
        NewReno::new(WindowParams::of_datagrams(MDS))
    }

    fn ms(v: u64) -> Timestamp {
        Timestamp::from_millis(v)
    }

    fn rtt() -> RttEstimator {
        RttEstimator::new(Duration::from_millis(100))
    }

    /// Acknowledges one full window in datagram-sized ACKs for packets sent at `sent`.
    fn ack_window(cc: &mut NewReno, now: Timestamp, sent: Timestamp) {
        let packets = cc.window() / MDS;
        for _ in 0..packets {
            cc.on_ack(now, sent, MDS, &rtt(), false);
        }
    }

    #[test]
    fn slow_start_doubles_the_window_each_round_trip() {
        let mut cc = reno();
        let mut expected = 10 * MDS;
        for round in 1..=5 {
            ack_window(&mut cc, ms(100 * round), ms(100 * (round - 1)));
            expected *= 2;
            assert_eq!(cc.window(), expected, "round {round}");
        }
        assert_eq!(cc.window(), 384_000);
    }

    #[test]
    fn loss_halves_the_window_once_per_recovery_period() {
        let mut cc = reno();
        ack_window(&mut cc, ms(100), ms(0)); // 24000
        cc.on_congestion_event(ms(150), ms(120), false, MDS);
        assert_eq!(cc.window(), 12_000);
        assert_eq!(cc.ssthresh(), 12_000);
        assert!(cc.in_recovery(ms(150)));
        assert!(!cc.in_recovery(ms(151)));
        // More losses of packets sent before recovery started: no second reduction.
        cc.on_congestion_event(ms(160), ms(140), false, MDS);
        cc.on_congestion_event(ms(170), ms(150), false, MDS);
        assert_eq!(cc.window(), 12_000);
        // ACKs of packets sent before recovery started do not grow the window.
        cc.on_ack(ms(180), ms(149), 6 * MDS, &rtt(), false);
        assert_eq!(cc.window(), 12_000);
        // A loss of a packet sent after recovery started is a new congestion event.
        cc.on_congestion_event(ms(200), ms(151), false, MDS);
        assert_eq!(cc.window(), 6_000);
        assert_eq!(cc.ssthresh(), 6_000);
    }

    #[test]
    fn congestion_avoidance_grows_one_datagram_per_window() {
        let mut cc = reno();
        ack_window(&mut cc, ms(100), ms(0)); // 24000
        cc.on_congestion_event(ms(150), ms(120), false, MDS); // 12000, recovery until t=150
        let mut now = 200;
        for round in 1..=10u64 {
            ack_window(&mut cc, ms(now + 100), ms(now));
            now += 100;
            assert_eq!(cc.window(), 12_000 + round * MDS, "round {round}");
        }
        // Partial windows accumulate: 19 of 20 datagrams acknowledged do not grow the window yet.
        assert_eq!(cc.window(), 24_000);
        for _ in 0..19 {
            cc.on_ack(ms(now + 50), ms(now), MDS, &rtt(), false);
        }
        assert_eq!(cc.window(), 24_000);
        cc.on_ack(ms(now + 60), ms(now), MDS, &rtt(), false);
        assert_eq!(cc.window(), 25_200);
    }

    #[test]
    fn slow_start_stops_at_ssthresh_and_carries_the_rest_into_avoidance() {
        let mut cc = reno();
        ack_window(&mut cc, ms(100), ms(0)); // 24000
        cc.on_congestion_event(ms(150), ms(120), false, MDS); // ssthresh 12000
        cc.on_congestion_event(ms(400), ms(300), true, MDS); // persistent: 2400
        assert_eq!(cc.window(), 2_400);
        assert_eq!(cc.ssthresh(), 6_000);
        // 6000 - 2400 = 3600 bytes of slow start; the remaining 4800 count towards avoidance.
        cc.on_ack(ms(500), ms(450), 8_400, &rtt(), false);
        assert_eq!(cc.window(), 6_000);
        cc.on_ack(ms(510), ms(450), 1_200, &rtt(), false);
        assert_eq!(cc.window(), 7_200);
    }

    #[test]
    fn persistent_congestion_collapses_to_the_minimum_window() {
        let mut cc = reno();
        ack_window(&mut cc, ms(100), ms(0));
        ack_window(&mut cc, ms(200), ms(100)); // 48000
        cc.on_congestion_event(ms(900), ms(300), true, 20 * MDS);
        assert_eq!(cc.window(), 2_400);
        assert_eq!(cc.ssthresh(), 24_000);
        // Recovery is cleared: an ACK of a packet sent before the event grows the window again.
        assert!(!cc.in_recovery(ms(300)));
        cc.on_ack(ms(950), ms(800), MDS, &rtt(), false);
        assert_eq!(cc.window(), 3_600);
        // Persistent congestion inside a recovery period still collapses the window.
        cc.on_congestion_event(ms(1000), ms(960), false, MDS);
        assert_eq!(cc.window(), 2_400);
        cc.on_congestion_event(ms(1010), ms(990), true, MDS);
        assert_eq!(cc.window(), 2_400);
        assert!(!cc.in_recovery(ms(990)));
    }

    #[test]
    fn window_never_drops_below_the_minimum() {
        let mut cc = reno();
        for i in 0..10 {
            cc.on_congestion_event(ms(100 * (i + 1)), ms(100 * (i + 1) - 1), false, MDS);
        }
        assert_eq!(cc.window(), 2_400);
        assert_eq!(cc.ssthresh(), 2_400);
    }

    #[test]
    fn app_limited_acks_do_not_grow_the_window() {
        let mut cc = reno();
        cc.on_ack(ms(100), ms(0), 10 * MDS, &rtt(), true);
        assert_eq!(cc.window(), 12_000);
        cc.on_ack(ms(100), ms(0), 10 * MDS, &rtt(), false);
        assert_eq!(cc.window(), 24_000);
    }
}
