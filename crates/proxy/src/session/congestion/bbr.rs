//! BBR (version 1) congestion control, from draft-cardwell-iccrg-bbr-congestion-control-00.
//!
//! BBR models the path instead of reacting to loss: `BtlBw`, the largest delivery rate of the
//! last 10 round trips ([`super::delivery`] measures one per ACK), and `RTprop`, the smallest
//! RTT of the last 10 s. It paces at `pacing_gain * BtlBw` and caps the data in flight at
//! `cwnd_gain * BtlBw * RTprop` (plus three send quanta), so it fills the path without filling its
//! queue: on a link with a deep buffer the RTT stays near the propagation delay where loss-based
//! controllers (NewReno, CUBIC) keep the buffer full. Its phases (§4.3):
//!
//! - **Startup**: pacing and window gain `2/ln 2` (≈ 2.885), doubling the rate each round, until
//!   three rounds in a row raise `BtlBw` by less than 25 % (the pipe is full).
//! - **Drain**: pacing gain `1/2.885` until the data in flight is down to one `BtlBw * RTprop`.
//! - **ProbeBW**: window gain 2 and a cycle of eight pacing gains, one `RTprop` each:
//!   1.25 (probe for more bandwidth), 0.75 (drain what that queued), then 1 six times. The
//!   cycle starts at a random phase other than 0.75.
//! - **ProbeRTT**: when `RTprop` was not lowered for 10 s, the window drops to four datagrams for
//!   200 ms and one round trip, so the queue empties and a fresh `RTprop` is measured.
//!
//! Sending again after an idle spell (nothing in flight) paces ProbeBW at `BtlBw` itself and
//! does not take the `RTprop` that expired meanwhile for a reason to enter ProbeRTT (§4.3.4.4).
//!
//! Loss (§4.2.3): on a new loss episode the window falls to the data in flight plus what the ACK
//! delivered (packet conservation, for one round trip), each lost byte comes off the window, and
//! leaving recovery restores the window saved on entering it. Persistent congestion drops the
//! window to the floor. The gains and filter lengths are the draft's constants.
//!
//! The per-packet hooks do nothing but count: the model is updated once per ACK in
//! [`Controller::on_ack_event`], and the rate it paces at is [`Controller::pacing_rate`]. Plain
//! numbers, no allocation, no clock.

use std::time::Duration;

use braid_sched_core::Timestamp;

use super::delivery::RateSample;
use super::{Controller, RttEstimator, WindowParams};

/// `BBRHighGain`, `2 / ln 2`: Startup's pacing and window gain.
pub const HIGH_GAIN: f64 = 2.885;
/// ProbeBW's pacing gains, one phase per `RTprop` (`BBRGainCycleLen` = 8).
pub const PROBE_BW_GAINS: [f64; 8] = [1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
/// ProbeBW's window gain.
const PROBE_BW_CWND_GAIN: f64 = 2.0;
/// `BtlBwFilterLen`: the bandwidth filter's window, in round trips.
pub const BTL_BW_FILTER_ROUNDS: u64 = 10;
/// `RTpropFilterLen`: how long an `RTprop` sample counts.
pub const RT_PROP_FILTER: Duration = Duration::from_secs(10);
/// `ProbeRTTDuration`: how long ProbeRTT holds the window at its floor (at least one round too).
pub const PROBE_RTT_DURATION: Duration = Duration::from_millis(200);
/// `BBRMinPipeCwnd`, in datagrams: the window floor, and the window in ProbeRTT.
const MIN_PIPE_DATAGRAMS: u64 = 4;
/// Send quanta added to the target window (`BBRAddQuantaToCwnd`), so that a window is never
/// too small for ACKs that come late or bunched together.
const QUANTA: u64 = 3;
/// The largest send quantum (`BBRSetSendQuantum`), bytes.
const MAX_SEND_QUANTUM: u64 = 64 * 1024;
/// Startup is over when three rounds in a row raise `BtlBw` by less than this factor.
const FULL_BW_GROWTH: f64 = 1.25;
const FULL_BW_ROUNDS: u32 = 3;

/// BBR's state machine (§4.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BbrMode {
    /// Doubling the rate each round until the pipe is full.
    Startup,
    /// Draining the queue Startup built.
    Drain,
    /// Cruising at `BtlBw`, probing for more once per cycle.
    ProbeBw,
    /// Emptying the queue to measure `RTprop`.
    ProbeRtt,
}

/// The largest value seen in each of the last [`BTL_BW_FILTER_ROUNDS`] rounds (one slot per
/// round: an exact windowed maximum).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct MaxFilter {
    /// `(round, largest value in that round)`.
    slots: [(u64, u64); BTL_BW_FILTER_ROUNDS as usize],
    best: u64,
}

impl MaxFilter {
    fn update(&mut self, round: u64, value: u64) {
        let slot = &mut self.slots[(round % BTL_BW_FILTER_ROUNDS) as usize];
        if slot.0 != round {
            *slot = (round, value);
        } else {
            slot.1 = slot.1.max(value);
        }
        self.best = self
            .slots
            .iter()
            .filter(|(r, _)| r + BTL_BW_FILTER_ROUNDS > round)
            .map(|&(_, v)| v)
            .max()
            .unwrap_or(0);
    }
}

/// BBR state for one path.
#[derive(Clone, Debug, PartialEq)]
pub struct Bbr {
    params: WindowParams,
    mode: BbrMode,
    cwnd: u64,
    /// Bytes per second; 0 until the first ACK.
    pacing_rate: u64,
    pacing_gain: f64,
    cwnd_gain: f64,
    btl_bw: MaxFilter,
    rt_prop: Option<Duration>,
    rt_prop_stamp: Timestamp,
    rt_prop_expired: bool,
    round_count: u64,
    next_round_delivered: u64,
    round_start: bool,
    filled_pipe: bool,
    full_bw: u64,
    full_bw_count: u32,
    cycle_index: usize,
    cycle_stamp: Timestamp,
    probe_rtt_done: Option<Timestamp>,
    probe_rtt_round_done: bool,
    /// The window saved on entering recovery or ProbeRTT.
    prior_cwnd: u64,
    /// The start of the current loss episode, while in recovery.
    recovery_start: Option<Timestamp>,
    /// A loss episode began since the last ACK: the window falls to the data in flight then.
    entering_recovery: bool,
    /// Packet conservation lasts until this round.
    conservation_until_round: Option<u64>,
    /// Bytes declared lost since the last ACK.
    pending_losses: u64,
    /// Sending restarted from idle (nothing in flight): the next ACK does not take the
    /// `RTprop` that expired while idle for a reason to enter ProbeRTT.
    idle_restart: bool,
    rng: u64,
}

impl Bbr {
    pub(crate) fn new(params: WindowParams) -> Self {
        Bbr {
            params,
            mode: BbrMode::Startup,
            cwnd: params.initial_window,
            pacing_rate: 0,
            pacing_gain: HIGH_GAIN,
            cwnd_gain: HIGH_GAIN,
            btl_bw: MaxFilter::default(),
            rt_prop: None,
            rt_prop_stamp: Timestamp::ZERO,
            rt_prop_expired: false,
            round_count: 0,
            next_round_delivered: 0,
            round_start: false,
            filled_pipe: false,
            full_bw: 0,
            full_bw_count: 0,
            cycle_index: 0,
            cycle_stamp: Timestamp::ZERO,
            probe_rtt_done: None,
            probe_rtt_round_done: false,
            prior_cwnd: 0,
            recovery_start: None,
            entering_recovery: false,
            conservation_until_round: None,
            pending_losses: 0,
            idle_restart: false,
            rng: 0x9e37_79b9_7f4a_7c15,
        }
    }

    /// The phase BBR is in.
    pub fn mode(&self) -> BbrMode {
        self.mode
    }

    /// `BtlBw`, bytes per second (0 before the first sample).
    pub fn btl_bw(&self) -> u64 {
        self.btl_bw.best
    }

    /// `RTprop` (`None` before the first sample).
    pub fn rt_prop(&self) -> Option<Duration> {
        self.rt_prop
    }

    /// Whether a packet sent at `sent_time` belongs to the current loss episode.
    pub fn in_recovery(&self, sent_time: Timestamp) -> bool {
        self.recovery_start.is_some_and(|start| sent_time <= start)
    }

    /// The window floor, bytes: four datagrams, or the configured minimum if larger.
    pub fn minimum_window(&self) -> u64 {
        self.min_pipe_cwnd()
    }

    fn min_pipe_cwnd(&self) -> u64 {
        (MIN_PIPE_DATAGRAMS * self.params.max_datagram_size).max(self.params.minimum_window)
    }

    /// `BBRInflight(gain)`: `gain` bandwidth-delay products, or the initial window while either
    /// estimate is missing.
    fn inflight(&self, gain: f64) -> u64 {
        match self.rt_prop {
            Some(rt_prop) if self.btl_bw.best > 0 => {
                let bdp = self.btl_bw.best as f64 * rt_prop.as_secs_f64();
                (bdp * gain) as u64
            }
            _ => self.params.initial_window,
        }
    }

    fn random_below(&mut self, n: u64) -> u64 {
        // xorshift64: a fixed seed keeps runs reproducible.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng % n
    }

    fn enter_startup(&mut self) {
        self.mode = BbrMode::Startup;
        self.pacing_gain = HIGH_GAIN;
        self.cwnd_gain = HIGH_GAIN;
    }

    fn enter_probe_bw(&mut self, now: Timestamp) {
        self.mode = BbrMode::ProbeBw;
        self.pacing_gain = 1.0;
        self.cwnd_gain = PROBE_BW_CWND_GAIN;
        // Any phase but the draining 0.75 one comes next.
        let len = PROBE_BW_GAINS.len() as u64;
        self.cycle_index = (len - 1 - self.random_below(len - 1)) as usize;
        self.advance_cycle_phase(now);
    }

    fn advance_cycle_phase(&mut self, now: Timestamp) {
        self.cycle_stamp = now;
        self.cycle_index = (self.cycle_index + 1) % PROBE_BW_GAINS.len();
        self.pacing_gain = PROBE_BW_GAINS[self.cycle_index];
    }

    fn update_round(&mut self, rs: &RateSample) {
        self.round_start = rs.prior_delivered >= self.next_round_delivered;
        if self.round_start {
            self.next_round_delivered = rs.delivered;
            self.round_count += 1;
        }
    }

    fn update_btl_bw(&mut self, rs: &RateSample) {
        if let Some(rate) = rs.delivery_rate
            && (rate >= self.btl_bw.best || !rs.app_limited)
        {
            self.btl_bw.update(self.round_count, rate);
        }
    }

    fn check_cycle_phase(&mut self, now: Timestamp, rs: &RateSample, losses: u64) {
        if self.mode != BbrMode::ProbeBw {
            return;
        }
        let full_length = self
            .rt_prop
            .is_some_and(|rt_prop| now.saturating_duration_since(self.cycle_stamp) > rt_prop);
        let next = if self.pacing_gain > 1.0 {
            full_length && (losses > 0 || rs.prior_in_flight >= self.inflight(self.pacing_gain))
        } else if self.pacing_gain < 1.0 {
            full_length || rs.prior_in_flight <= self.inflight(1.0)
        } else {
            full_length
        };
        if next {
            self.advance_cycle_phase(now);
        }
    }

    fn check_full_pipe(&mut self, rs: &RateSample) {
        if self.filled_pipe || !self.round_start || rs.app_limited {
            return;
        }
        if self.btl_bw.best as f64 >= self.full_bw as f64 * FULL_BW_GROWTH {
            self.full_bw = self.btl_bw.best;
            self.full_bw_count = 0;
            return;
        }
        self.full_bw_count += 1;
        if self.full_bw_count >= FULL_BW_ROUNDS {
            self.filled_pipe = true;
        }
    }

    fn check_drain(&mut self, now: Timestamp, rs: &RateSample) {
        if self.mode == BbrMode::Startup && self.filled_pipe {
            self.mode = BbrMode::Drain;
            self.pacing_gain = 1.0 / HIGH_GAIN;
            self.cwnd_gain = HIGH_GAIN;
        }
        if self.mode == BbrMode::Drain && rs.bytes_in_flight <= self.inflight(1.0) {
            self.enter_probe_bw(now);
        }
    }

    fn update_rt_prop(&mut self, now: Timestamp, rs: &RateSample) {
        self.rt_prop_expired = now > self.rt_prop_stamp + RT_PROP_FILTER;
        if self
            .rt_prop
            .is_none_or(|rt_prop| rs.rtt <= rt_prop || self.rt_prop_expired)
        {
            self.rt_prop = Some(rs.rtt);
            self.rt_prop_stamp = now;
        }
    }

    fn save_cwnd(&self) -> u64 {
        if self.recovery_start.is_none() && self.mode != BbrMode::ProbeRtt {
            self.cwnd
        } else {
            self.prior_cwnd.max(self.cwnd)
        }
    }

    fn check_probe_rtt(&mut self, now: Timestamp, rs: &RateSample) {
        if self.mode != BbrMode::ProbeRtt && self.rt_prop_expired && !self.idle_restart {
            self.prior_cwnd = self.save_cwnd();
            self.mode = BbrMode::ProbeRtt;
            self.pacing_gain = 1.0;
            self.cwnd_gain = 1.0;
            self.probe_rtt_done = None;
        }
        if self.mode != BbrMode::ProbeRtt {
            return;
        }
        match self.probe_rtt_done {
            None if rs.bytes_in_flight <= self.min_pipe_cwnd() => {
                self.probe_rtt_done = Some(now + PROBE_RTT_DURATION);
                self.probe_rtt_round_done = false;
                self.next_round_delivered = rs.delivered;
            }
            None => {}
            Some(done) => {
                if self.round_start {
                    self.probe_rtt_round_done = true;
                }
                if self.probe_rtt_round_done && now > done {
                    self.rt_prop_stamp = now;
                    self.cwnd = self.cwnd.max(self.prior_cwnd);
                    if self.filled_pipe {
                        self.enter_probe_bw(now);
                    } else {
                        self.enter_startup();
                    }
                }
            }
        }
    }

    fn set_pacing_rate(&mut self, rtt: &RttEstimator) {
        let bw = self.btl_bw.best;
        if bw == 0 {
            // No bandwidth estimate yet: the initial window per smoothed RTT, at Startup's gain.
            if self.pacing_rate == 0 && rtt.has_sample() {
                let srtt = rtt.srtt().as_secs_f64().max(1e-6);
                self.pacing_rate = (HIGH_GAIN * self.params.initial_window as f64 / srtt) as u64;
            }
            return;
        }
        let rate = (self.pacing_gain * bw as f64) as u64;
        if self.filled_pipe || rate > self.pacing_rate {
            self.pacing_rate = rate.max(1);
        }
    }

    /// `BBR.send_quantum` (§4.2.2 of the draft): one datagram below 1.2 Mbit/s, two below
    /// 24 Mbit/s, else a millisecond of the pacing rate up to 64 KiB.
    fn send_quantum(&self) -> u64 {
        let mds = self.params.max_datagram_size;
        match self.pacing_rate {
            r if r < 150_000 => mds,
            r if r < 3_000_000 => 2 * mds,
            r => (r / 1000).clamp(2 * mds, MAX_SEND_QUANTUM.max(2 * mds)),
        }
    }

    fn set_cwnd(&mut self, rs: &RateSample, losses: u64) {
        let mds = self.params.max_datagram_size;
        let target = self
            .inflight(self.cwnd_gain)
            .saturating_add(QUANTA * self.send_quantum());
        if self.entering_recovery {
            self.entering_recovery = false;
            self.cwnd = rs.bytes_in_flight + rs.newly_acked.max(mds);
            self.conservation_until_round = Some(self.round_count + 1);
        } else if losses > 0 {
            self.cwnd = self.cwnd.saturating_sub(losses).max(mds);
        }
        let conserving = self
            .conservation_until_round
            .is_some_and(|round| self.round_count < round);
        if conserving {
            self.cwnd = self.cwnd.max(rs.bytes_in_flight + rs.newly_acked);
        } else {
            self.conservation_until_round = None;
            if self.filled_pipe {
                self.cwnd = (self.cwnd + rs.newly_acked).min(target);
            } else if self.cwnd < target || rs.delivered < self.params.initial_window {
                self.cwnd += rs.newly_acked;
            }
            self.cwnd = self.cwnd.max(self.min_pipe_cwnd());
        }
        if self.mode == BbrMode::ProbeRtt {
            self.cwnd = self.cwnd.min(self.min_pipe_cwnd());
        }
    }
}

impl Controller for Bbr {
    fn on_sent(&mut self, _: Timestamp, _: u64, bytes_in_flight: u64) {
        if bytes_in_flight == 0 {
            // Restarting from idle (§4.3.4.4 of the draft): in ProbeBW at the bandwidth
            // itself, not at a probing or draining gain.
            self.idle_restart = true;
            if self.mode == BbrMode::ProbeBw && self.btl_bw.best > 0 {
                self.pacing_rate = self.btl_bw.best;
            }
        }
    }

    fn on_ack(&mut self, _: Timestamp, _: Timestamp, _: u64, _: &RttEstimator, _: bool) {
        // The model moves once per ACK, in `on_ack_event`.
    }

    fn on_ack_event(&mut self, now: Timestamp, rs: &RateSample, rtt: &RttEstimator) {
        let losses = std::mem::take(&mut self.pending_losses);
        self.update_round(rs);
        self.update_btl_bw(rs);
        self.check_cycle_phase(now, rs, losses);
        self.check_full_pipe(rs);
        self.check_drain(now, rs);
        self.update_rt_prop(now, rs);
        self.check_probe_rtt(now, rs);
        self.idle_restart = false;
        if self
            .recovery_start
            .is_some_and(|start| rs.newest_sent_time > start)
        {
            // A packet sent after the episode began arrived: recovery is over.
            self.recovery_start = None;
            self.entering_recovery = false;
            self.conservation_until_round = None;
            self.cwnd = self.cwnd.max(self.prior_cwnd);
        }
        self.set_pacing_rate(rtt);
        self.set_cwnd(rs, losses);
    }

    fn on_congestion_event(
        &mut self,
        now: Timestamp,
        sent_time: Timestamp,
        persistent: bool,
        lost_bytes: u64,
    ) {
        self.pending_losses = self.pending_losses.saturating_add(lost_bytes);
        if persistent {
            self.prior_cwnd = self.save_cwnd();
            self.cwnd = self.min_pipe_cwnd();
            self.recovery_start = Some(now);
            self.entering_recovery = false;
            self.conservation_until_round = None;
            return;
        }
        if !self.in_recovery(sent_time) {
            self.prior_cwnd = self.save_cwnd();
            self.recovery_start = Some(now);
            self.entering_recovery = true;
        }
    }

    fn window(&self) -> u64 {
        self.cwnd
    }

    fn pacing_rate(&self) -> Option<u64> {
        (self.pacing_rate > 0).then_some(self.pacing_rate)
    }

    fn on_max_datagram_size(&mut self, max_datagram_size: u64, minimum_window: u64) {
        self.params = self.params.resized(max_datagram_size, minimum_window);
        self.cwnd = self.cwnd.max(self.min_pipe_cwnd());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::congestion::delivery::{DeliveryRate, PacketDelivery};
    use crate::session::congestion::{AnyController, CongestionAlgorithm, CongestionConfig};
    use std::collections::VecDeque;

    /// A fluid model of one bottleneck: `rate` bytes/s, `base_rtt` of propagation, a FIFO of
    /// unbounded size in front of it. The controller sends 1200-byte packets as its window and
    /// pacing rate allow; returns the largest RTT seen in the last second and the goodput
    /// (bytes/s) over it.
    fn run(
        algorithm: CongestionAlgorithm,
        rate: u64,
        base_rtt: Duration,
        secs: u64,
    ) -> (Duration, f64, AnyController) {
        let config = CongestionConfig::with_datagram_size(algorithm, 1200);
        let mut cc = config.build();
        let mut rtt = RttEstimator::new(base_rtt);
        let mut delivery = DeliveryRate::new();
        let mut in_flight = 0u64;
        // (arrival of the ACK, sent time, snapshot)
        let mut flight: VecDeque<(Timestamp, Timestamp, PacketDelivery)> = VecDeque::new();
        let mut link_free = Timestamp::ZERO;
        let mut next_send = Timestamp::ZERO;
        let step = Duration::from_micros(100);
        let end = Timestamp::from_secs_f64(secs as f64);
        let measure_from = Timestamp::from_secs_f64(secs as f64 - 1.0);
        let mut now = Timestamp::ZERO;
        let (mut max_rtt, mut bytes) = (Duration::ZERO, 0u64);
        let serialise = Duration::from_secs_f64(1200.0 / rate as f64);
        while now < end {
            let prior = in_flight;
            let mut acked_any = false;
            let mut newest_sent = None;
            while flight.front().is_some_and(|f| f.0 <= now) {
                let (_, sent, p) = flight.pop_front().unwrap();
                delivery.on_acked(now, &p, sent, 1200);
                in_flight -= 1200;
                cc.on_ack(now, sent, 1200, &rtt, false);
                acked_any = true;
                newest_sent = Some(sent);
                if now >= measure_from {
                    bytes += 1200;
                    max_rtt = max_rtt.max(now - sent);
                }
            }
            if let Some(sent) = newest_sent {
                rtt.update(Duration::ZERO, now - sent);
            }
            if acked_any
                && let Some(rs) = delivery.take_sample(now, rtt.min_rtt(), prior, in_flight)
            {
                cc.on_ack_event(now, &rs, &rtt);
            }
            while in_flight + 1200 <= cc.window() && next_send <= now {
                let p = delivery.on_sent(now, in_flight);
                in_flight += 1200;
                cc.on_sent(now, 1200, in_flight - 1200);
                let start = link_free.max(now);
                link_free = start + serialise;
                flight.push_back((link_free + base_rtt, now, p));
                let pace = cc.pacing_rate().unwrap_or(u64::MAX / 2);
                next_send = now + Duration::from_secs_f64(1200.0 / pace as f64);
            }
            now += step;
        }
        (max_rtt, bytes as f64, cc)
    }

    #[test]
    fn bbr_fills_a_deep_buffered_link_without_filling_its_queue() {
        // 10 Mbit/s, 40 ms: a BDP of 50 kB; the FIFO is unbounded, so a loss-based controller
        // never sees a loss and its queue grows without end.
        let rate = 1_250_000;
        let (rtt, goodput, cc) = run(
            CongestionAlgorithm::Bbr,
            rate,
            Duration::from_millis(40),
            12,
        );
        let AnyController::Bbr(bbr) = &cc else {
            panic!("not bbr");
        };
        println!(
            "bbr: {:?}, BtlBw {} B/s, RTprop {:?}, max RTT {rtt:?}, goodput {goodput:.0} B/s",
            bbr.mode(),
            bbr.btl_bw(),
            bbr.rt_prop()
        );
        assert!(goodput >= 0.9 * rate as f64, "goodput {goodput}");
        // ProbeBW's 1.25 phase queues a quarter of a BDP for one RTprop: 50 ms at most.
        assert!(rtt <= Duration::from_millis(60), "max RTT {rtt:?}");
        let bw = bbr.btl_bw() as f64;
        assert!((0.95..=1.1).contains(&(bw / rate as f64)), "BtlBw {bw}");
        // The propagation RTT plus one packet's serialisation (0.96 ms).
        let rt_prop = bbr.rt_prop().unwrap();
        assert!(rt_prop >= Duration::from_millis(40) && rt_prop <= Duration::from_millis(42));
        // The same link with CUBIC: the window grows into the queue.
        let (rtt, goodput, _) = run(
            CongestionAlgorithm::Cubic,
            rate,
            Duration::from_millis(40),
            12,
        );
        println!("cubic: max RTT {rtt:?}, goodput {goodput:.0} B/s");
        assert!(rtt >= Duration::from_millis(200), "cubic max RTT {rtt:?}");
    }

    /// RFC 9002's windows for 1200-byte datagrams.
    const PARAMS: WindowParams = WindowParams {
        initial_window: 12_000,
        minimum_window: 2_400,
        max_datagram_size: 1200,
    };

    fn sample(delivered: u64, prior_delivered: u64, rate: u64, rtt_ms: u64) -> RateSample {
        RateSample {
            delivery_rate: Some(rate),
            app_limited: false,
            interval: Duration::from_millis(rtt_ms),
            delivered,
            prior_delivered,
            newly_acked: 1200,
            newest_sent_time: Timestamp::ZERO,
            rtt: Duration::from_millis(rtt_ms),
            prior_in_flight: 0,
            bytes_in_flight: 0,
        }
    }

    #[test]
    fn startup_ends_after_three_rounds_without_growth_and_drain_hands_over_to_probe_bw() {
        let mut bbr = Bbr::new(PARAMS);
        let rtt = RttEstimator::new(Duration::from_millis(40));
        let mut delivered = 0;
        let mut now = Timestamp::ZERO;
        for round in 0..6 {
            now += Duration::from_millis(40);
            let prior = delivered;
            delivered += 12_000;
            // Every ACK starts a new round; the rate stops growing after round 2.
            let rate = 1_000_000 * (round.min(2) + 1);
            let mut rs = sample(delivered, prior, rate, 40);
            rs.bytes_in_flight = 200_000;
            bbr.on_ack_event(now, &rs, &rtt);
        }
        assert_eq!(bbr.mode(), BbrMode::Drain);
        assert_eq!(bbr.btl_bw(), 3_000_000);
        // Drain paces below the bandwidth until the flight is down to one BDP (120 kB).
        assert_eq!(bbr.pacing_rate(), Some((3_000_000.0 / HIGH_GAIN) as u64));
        let mut rs = sample(delivered + 1200, delivered, 3_000_000, 40);
        rs.bytes_in_flight = 100_000;
        bbr.on_ack_event(now + Duration::from_millis(1), &rs, &rtt);
        assert_eq!(bbr.mode(), BbrMode::ProbeBw);
        assert_ne!(bbr.pacing_gain, 0.75);
        // ProbeBW's window: two BDPs plus three send quanta (at 24 Mbit/s, 3 kB each), reached
        // as ACKs arrive.
        assert!(bbr.window() <= 2 * 120_000 + 9_000, "{}", bbr.window());
    }

    #[test]
    fn a_loss_episode_conserves_packets_and_leaving_it_restores_the_window() {
        let mut bbr = Bbr::new(PARAMS);
        let rtt = RttEstimator::new(Duration::from_millis(40));
        let t = |ms| Timestamp::from_millis(ms);
        let mut rs = sample(12_000, 0, 1_000_000, 40);
        rs.bytes_in_flight = 20_000;
        bbr.on_ack_event(t(40), &rs, &rtt);
        let before = bbr.window();
        assert!(before > 12_000);
        bbr.on_congestion_event(t(50), t(20), false, 1200);
        assert!(bbr.in_recovery(t(20)));
        let mut rs = sample(13_200, 1200, 1_000_000, 40);
        rs.bytes_in_flight = 6_000;
        rs.newest_sent_time = t(10);
        bbr.on_ack_event(t(51), &rs, &rtt);
        // In flight plus what the ACK delivered.
        assert_eq!(bbr.window(), 7_200);
        // A second loss in the same episode does not start another.
        bbr.on_congestion_event(t(52), t(30), false, 1200);
        // An ACK of a packet sent after the episode began ends it: the saved window is back.
        let mut rs = sample(60_000, 14_400, 1_000_000, 40);
        rs.bytes_in_flight = 6_000;
        rs.newest_sent_time = t(55);
        bbr.on_ack_event(t(95), &rs, &rtt);
        assert!(!bbr.in_recovery(t(30)));
        assert!(bbr.window() >= before, "{} < {before}", bbr.window());
        // Persistent congestion: the floor of four datagrams.
        bbr.on_congestion_event(t(200), t(150), true, 12_000);
        assert_eq!(bbr.window(), 4_800);
    }

    #[test]
    fn sending_again_after_an_idle_spell_is_no_reason_for_probe_rtt() {
        let rtt = RttEstimator::new(Duration::from_millis(40));
        for idle in [true, false] {
            let mut bbr = Bbr::new(PARAMS);
            bbr.on_sent(Timestamp::ZERO, 12_000, 0);
            let mut rs = sample(12_000, 0, 1_000_000, 40);
            // All delivered: nothing in flight, or (not idle) 12 kB still out.
            rs.bytes_in_flight = if idle { 0 } else { 12_000 };

            bbr.on_ack_event(Timestamp::from_millis(40), &rs, &rtt);
            // 15 s later the application sends again; RTprop (40 ms, 15 s old) has expired.
            let in_flight = if idle { 0 } else { 12_000 };
            bbr.on_sent(Timestamp::from_secs_f64(15.0), 1200, in_flight);
            let mut rs = sample(13_200, 12_000, 1_000_000, 45);
            rs.bytes_in_flight = 0;
            bbr.on_ack_event(Timestamp::from_secs_f64(15.045), &rs, &rtt);
            let probing = bbr.mode() == BbrMode::ProbeRtt;
            assert_eq!(probing, !idle, "idle {idle}: {:?}", bbr.mode());
            // Either way the expired RTprop took the new sample.
            assert_eq!(bbr.rt_prop(), Some(Duration::from_millis(45)));
        }
    }

    #[test]
    fn rtprop_not_lowered_for_ten_seconds_sends_bbr_to_probe_rtt_for_200_ms_and_a_round() {
        let mut bbr = Bbr::new(PARAMS);
        let rtt = RttEstimator::new(Duration::from_millis(40));
        let mut delivered = 0u64;
        let mut ack = |bbr: &mut Bbr, ms: u64, rtt_ms: u64, in_flight: u64| {
            let prior = delivered;
            delivered += 12_000;
            let mut rs = sample(delivered, prior, 1_000_000, rtt_ms);
            rs.bytes_in_flight = in_flight;
            bbr.on_ack_event(Timestamp::from_millis(ms), &rs, &rtt);
        };
        ack(&mut bbr, 40, 40, 50_000);
        // RTTs above 40 ms for more than 10 s.
        let mut ms = 40;
        while ms < 10_100 {
            ms += 50;
            ack(&mut bbr, ms, 50, 50_000);
            if bbr.mode() == BbrMode::ProbeRtt {
                break;
            }
        }
        assert_eq!(bbr.mode(), BbrMode::ProbeRtt);
        assert!(ms > 10_040, "entered ProbeRTT at {ms} ms");
        assert_eq!(bbr.window(), 4_800);
        assert_eq!(bbr.rt_prop(), Some(Duration::from_millis(50)));
        // The flight drains to the floor: 200 ms and a round later ProbeRTT ends.
        ack(&mut bbr, ms + 10, 45, 4_800);
        let entered = ms + 10;
        ack(&mut bbr, ms + 100, 45, 4_800);
        assert_eq!(bbr.mode(), BbrMode::ProbeRtt);
        ack(&mut bbr, entered + 250, 45, 4_800);
        assert_ne!(bbr.mode(), BbrMode::ProbeRtt);
        assert_eq!(bbr.rt_prop(), Some(Duration::from_millis(45)));
        assert!(bbr.window() > 4_800);
    }
}
