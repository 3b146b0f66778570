//! One path of the session: its packet-number spaces (sent packets awaiting acknowledgement,
//! received packet numbers awaiting an ACK), its congestion controller, RTT estimator, pacer and
//! rate cap, its one-way-delay estimate and its liveness (probe timeouts, failure, recovery).
//!
//! Loss detection follows RFC 9002 §6: a packet is lost when a packet sent at least
//! [`PACKET_THRESHOLD`] later was acknowledged, or when it is older than 9/8 of the RTT at the
//! time a later packet was acknowledged; both thresholds grow on a path that reorders, and a
//! window reduction all of whose losses prove spurious is undone (`reorder.rs`). A probe
//! timeout (§6.2) sends a PING, hands the stream bytes in flight back for reinjection on any
//! path and closes the path's window until its next ACK ([`Path::reinject_in_flight`]), and
//! `failure_probe_timeouts` consecutive timeouts declare the path failed.

use std::collections::VecDeque;
use std::time::Duration;

use braid_sched_core::{PathId, PathState, PathView, Timestamp};

use super::config::{PathConfig, SessionConfig, Tier};
use super::congestion::{
    AnyController, CongestionAlgorithm, CongestionConfig, Controller, CouplingInput, DeliveryRate,
    GRANULARITY, MAX_BURST_DATAGRAMS, MIN_BURST_DATAGRAMS, Pacer, RttEstimator, TokenBucket,
};
use super::error::SessionError;
use super::frame::AckFrame;
use super::ranges::RangeSet;
use super::reorder::LossHistory;
use super::sent::{Payload, SentPacket};

#[cfg(doc)]
use super::reorder::PACKET_THRESHOLD;
pub use super::reorder::Reordering;
/// Weight of one packet in the loss-rate moving average.
const LOSS_RATE_GAIN: f32 = 1.0 / 64.0;
/// How long a path must stay busy below [`SessionConfig::backup_below_rate`] before it counts
/// as degraded: longer than a fresh path's slow start takes to pass the floor (a few round
/// trips), so that every transfer does not begin on the backups.
pub const DEGRADED_AFTER: Duration = Duration::from_secs(1);
/// A rate-capped path may send this many datagrams at once.
const RATE_CAP_BURST_DATAGRAMS: u64 = 4;

/// What one ACK frame did to a path.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct AckOutcome {
    pub acked_bytes: u64,
    pub lost_bytes: u64,
    pub rtt_sample: Option<Duration>,
    /// The path was failed and this ACK brought it back.
    pub recovered: bool,
}

/// Per-path state.
#[derive(Debug)]
pub(crate) struct Path {
    pub id: PathId,
    pub config: PathConfig,
    pub state: PathState,
    /// The controller's configuration for the datagram size the path joined with (later sizes
    /// are derived from it, see [`Path::set_max_datagram_size`]).
    congestion_config: CongestionConfig,
    pub cc: AnyController,
    pub rtt: RttEstimator,
    /// Delivery-rate samples for the controller (BBR's bandwidth model).
    delivery: DeliveryRate,
    pacer: Pacer,
    bucket: Option<TokenBucket>,
    // Sending.
    pub next_pn: u64,
    sent: VecDeque<SentPacket>,
    max_sent: usize,
    max_ack_delay: Duration,
    pub bytes_in_flight: u64,
    ack_eliciting_in_flight: u32,
    largest_acked: Option<u64>,
    loss_time: Option<Timestamp>,
    pto_count: u32,
    last_ack_eliciting_sent: Timestamp,
    /// When the peer's last ack-eliciting packet arrived (see [`Heartbeat::due`]).
    last_ack_eliciting_heard: Timestamp,
    last_ack_received: Timestamp,
    /// A PING must go out on this path (probe timeout, heartbeat, or failed-path probe).
    pub probe_due: bool,
    next_failed_probe: Timestamp,
    pub failed_since: Option<Timestamp>,
    // Receiving.
    pub received: RangeSet,
    max_ack_ranges: usize,
    largest_received_at: Timestamp,
    ack_pending: bool,
    ack_immediate: bool,
    ack_deadline: Option<Timestamp>,
    unacked_eliciting: u32,
    // Estimates.
    owd_min_relative: Option<i64>,
    pub owd_us: u32,
    pub datagram_min_relative: Option<i64>,
    loss_rate: f32,
    delivery_rate: u64,
    rate_window_start: Timestamp,
    rate_window_bytes: u64,
    /// The path had window room and nothing to send at some time in the current rate window.
    idle_in_rate_window: bool,
    /// [`SessionConfig::backup_below_rate`].
    degraded_below: u64,
    /// When the window was last cut by [`Path::penalise`].
    penalised_at: Option<Timestamp>,
    /// Since when the path, kept busy, has delivered less than `degraded_below` (see
    /// [`Path::is_degraded`]).
    slow_since: Option<Timestamp>,
    /// Recent losses, and what they taught about the path's reordering.
    losses: LossHistory,
    // Counters for status displays.
    pub stats: PathStats,
}

/// Counters of one path, for status displays.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PathStats {
    /// Packets sent.
    pub packets_sent: u64,
    /// Bytes sent (datagram payloads).
    pub bytes_sent: u64,
    /// Packets received.
    pub packets_received: u64,
    /// Packets declared lost.
    pub packets_lost: u64,
    /// Times the path was declared failed.
    pub failures: u32,
    /// Packets sent as copies from the redundant buffer (counted in `packets_sent` too).
    pub redundant_copies: u64,
    /// Times the window was cut because the path's queue held stream bytes back behind flow
    /// control while a much faster path had room ([`Path::penalise`]).
    pub penalties: u64,
}

/// When an idle live path sends its heartbeat PING: [`SessionConfig::heartbeat_interval`]
/// after its last ack-eliciting packet while the session is busy, and
/// [`SessionConfig::quiet_heartbeat_interval`] after it once the session is quiet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Heartbeat {
    /// The interval while the session is busy.
    pub busy: Duration,
    /// The interval once it is quiet (at least `busy`).
    pub quiet: Duration,
    /// When the session is (or was) quiet from: its last application data plus
    /// [`SessionConfig::quiet_after`]; [`Timestamp::MAX`]: never.
    pub quiet_from: Timestamp,
}

impl Heartbeat {
    /// The heartbeats of `config` for a session whose last application data was at `busy_at`.
    pub fn new(config: &SessionConfig, busy_at: Timestamp) -> Self {
        Heartbeat {
            busy: config.heartbeat_interval,
            quiet: config
                .quiet_heartbeat_interval
                .max(config.heartbeat_interval),
            quiet_from: busy_at + config.quiet_after,
        }
    }

    /// When the heartbeat of a path whose last ack-eliciting packet went at `last_sent`, and
    /// came from the peer at `last_heard`, is due: the busy interval after `last_sent` while
    /// that falls before the session went quiet, else the quiet interval after the later of
    /// the two. A quiet path's two ends thus share one exchange per interval (the first to
    /// send a PING puts the other's off), one radio wake-up instead of two. Data again moves
    /// `quiet_from` on, and a path whose busy heartbeat has then passed sends one at once: each
    /// path is checked as traffic resumes.
    pub fn due(self, last_sent: Timestamp, last_heard: Timestamp) -> Timestamp {
        let busy = last_sent + self.busy;
        if busy < self.quiet_from {
            busy
        } else {
            last_sent.max(last_heard) + self.quiet
        }
    }
}

impl Path {
    pub fn new(id: PathId, config: PathConfig, session: &SessionConfig, now: Timestamp) -> Self {
        let congestion_config = CongestionConfig {
            max_datagram_size: u64::from(config.max_datagram_size),
            ..session.congestion
        };
        Path {
            id,
            config,
            state: tier_state(config.tier),
            congestion_config,
            cc: congestion_config.build(),
            rtt: RttEstimator::new(session.initial_rtt),
            delivery: DeliveryRate::new(),
            // Bursts of 2 ms of the window, 10 to 256 datagrams (see `Pacer`).
            pacer: Pacer::new(u64::from(config.max_datagram_size)),
            bucket: config.rate_cap.map(|r| {
                TokenBucket::new(
                    r,
                    u64::from(config.max_datagram_size) * RATE_CAP_BURST_DATAGRAMS,
                )
            }),
            next_pn: 0,
            sent: VecDeque::with_capacity(session.max_sent_packets),
            max_sent: session.max_sent_packets,
            max_ack_delay: session.max_ack_delay,
            bytes_in_flight: 0,
            ack_eliciting_in_flight: 0,
            largest_acked: None,
            loss_time: None,
            pto_count: 0,
            last_ack_eliciting_sent: now,
            last_ack_eliciting_heard: now,
            last_ack_received: now,
            probe_due: false,
            next_failed_probe: now,
            failed_since: None,
            received: RangeSet::with_capacity(session.max_ack_ranges + 2),
            max_ack_ranges: session.max_ack_ranges,
            largest_received_at: now,
            ack_pending: false,
            ack_immediate: false,
            ack_deadline: None,
            unacked_eliciting: 0,
            owd_min_relative: None,
            owd_us: 0,
            datagram_min_relative: None,
            loss_rate: 0.0,
            delivery_rate: 0,
            rate_window_start: now,
            rate_window_bytes: 0,
            idle_in_rate_window: false,
            degraded_below: session.backup_below_rate,
            penalised_at: None,
            slow_since: None,
            losses: LossHistory::default(),
            stats: PathStats::default(),
        }
    }

    pub fn is_failed(&self) -> bool {
        self.state == PathState::Failed
    }

    /// What this path contributes to its session's [`Coupling`] (LIA, OLIA): `None` when its
    /// controller is not coupled, when it failed, or when it is a backup path carrying nothing
    /// (an idle standby must not make the paths in use timid).
    pub fn coupling_input(&self) -> Option<CouplingInput> {
        if self.is_failed() || (self.state == PathState::Backup && self.bytes_in_flight == 0) {
            return None;
        }
        self.cc.coupling_input(self.rtt.srtt())
    }

    /// Bytes of memory this path holds.
    pub fn allocated(&self) -> u64 {
        (self.sent.capacity() * std::mem::size_of::<SentPacket>()) as u64
            + self.received.capacity_bytes() as u64
    }

    /// True when the packet-tracking table has room for another packet.
    pub fn can_track(&self) -> bool {
        self.sent.len() < self.max_sent
    }

    /// The scheduler's view of this path; `wakeup` learns when a rate-capped path frees up.
    /// Pacing is not part of the view (it is applied after the scheduler chose the path, see
    /// [`Path::pacing_delay`]): `rate_limited` means the configured rate cap, as the contract
    /// says, so pacing gaps neither spill traffic to slower paths nor open backup tiers.
    pub fn view(&mut self, now: Timestamp, wakeup: &mut Option<Timestamp>) -> PathView {
        let mds = u64::from(self.config.max_datagram_size);
        let window = self.cc.window();
        let mut rate_limited = false;
        if !self.is_failed()
            && let Some(bucket) = self.bucket.as_mut()
            && !bucket.has_tokens(now, mds)
        {
            rate_limited = true;
            let at = bucket.ready_at(mds);
            *wakeup = Some(wakeup.map_or(at, |w| w.min(at)));
        }
        // A controller that sets its own pacing rate (BBR) paces at what it measured the path to
        // carry: a path its pacer holds back is full, as one whose window is, so the scheduler
        // may place the packet elsewhere. (A window-based controller's pacer runs 1.25 times
        // faster than its window, only smoothing it: its gaps must not spill traffic.)
        if !rate_limited
            && !self.is_failed()
            && let Some(rate) = self.cc.pacing_rate()
            && let Some(at) = self.pacer.delay_at_rate(now, mds, rate)
        {
            rate_limited = true;
            *wakeup = Some(wakeup.map_or(at, |w| w.min(at)));
        }
        // No room while the table is full, or while a probe timeout waits for an ACK (see
        // `reinject_in_flight`).
        let cwnd = if self.can_track() && self.pto_count == 0 {
            window
        } else {
            self.bytes_in_flight
        };
        PathView {
            id: self.id,
            state: self.state,
            weight: self.config.weight.max(1),
            srtt_us: micros32(self.rtt.srtt()),
            rttvar_us: micros32(self.rtt.rttvar()),
            min_rtt_us: micros32(self.rtt.min_rtt()),
            owd_us: if self.owd_us == 0 {
                micros32(self.rtt.min_rtt()) / 2
            } else {
                self.owd_us
            },
            cwnd,
            bytes_in_flight: self.bytes_in_flight,
            loss_rate: self.loss_rate,
            delivery_rate: self.delivery_rate,
            rate_limited,
            max_datagram_size: self.config.max_datagram_size,
            potentially_failed: self.pto_count > 0 && !self.is_failed(),
            degraded: self.state == PathState::Active && self.is_degraded(now),
        }
    }

    /// When the pacer lets the next full-size packet go, if not now.
    pub fn pacing_delay(&mut self, now: Timestamp) -> Option<Timestamp> {
        let mds = u64::from(self.config.max_datagram_size);
        match self.cc.pacing_rate() {
            Some(rate) => self.pacer.delay_at_rate(now, mds, rate),
            None => self
                .pacer
                .delay(now, mds, self.cc.window(), self.rtt.srtt()),
        }
    }

    /// The sender has nothing to send: if the window has room, the packets sent until what is in
    /// flight now is delivered measure the application, not the path (their rate samples are
    /// application-limited).
    pub fn on_app_limited(&mut self) {
        if self.bytes_in_flight < self.cc.window() {
            self.delivery.on_app_limited(self.bytes_in_flight);
            self.idle_in_rate_window = true;
        }
    }

    /// Records a packet handed to the driver.
    pub fn on_sent(&mut self, mut packet: SentPacket, now: Timestamp) {
        self.next_pn = packet.pn + 1;
        self.stats.packets_sent += 1;
        self.stats.bytes_sent += u64::from(packet.size);
        self.stats.redundant_copies += u64::from(packet.copy);
        if !packet.ack_eliciting {
            return;
        }
        if packet.in_flight {
            packet.delivery = self.delivery.on_sent(now, self.bytes_in_flight);
            self.cc
                .on_sent(now, u64::from(packet.size), self.bytes_in_flight);
            self.bytes_in_flight += u64::from(packet.size);
            self.pacer.on_sent(now, u64::from(packet.size));
            if let Some(bucket) = self.bucket.as_mut() {
                bucket.consume(u64::from(packet.size));
            }
        }
        self.ack_eliciting_in_flight += 1;
        self.last_ack_eliciting_sent = now;
        if self.sent.len() >= self.max_sent {
            // Only failed-path probes get here (live paths show no window when full): forget
            // the oldest probe.
            if let Some(old) = self.sent.pop_front() {
                self.forget(&old);
            }
        }
        self.sent.push_back(packet);
    }

    fn forget(&mut self, p: &SentPacket) {
        if p.in_flight {
            self.bytes_in_flight = self.bytes_in_flight.saturating_sub(u64::from(p.size));
        }
        self.ack_eliciting_in_flight = self.ack_eliciting_in_flight.saturating_sub(1);
    }

    /// Processes an ACK of this path's packets; newly acknowledged and newly lost packets are
    /// appended to `acked` and `lost` (preallocated by the session).
    pub fn on_ack(
        &mut self,
        ack: &AckFrame<'_>,
        now: Timestamp,
        max_ack_delay: Duration,
        acked: &mut Vec<SentPacket>,
        lost: &mut Vec<SentPacket>,
    ) -> Result<AckOutcome, SessionError> {
        if ack.largest >= self.next_pn {
            return Err(SessionError::AckOfUnsent {
                path: self.id,
                packet: ack.largest,
            });
        }
        let first_new = acked.len();
        let in_flight_before = self.bytes_in_flight;
        let largest_newly_acked = self.mark_acked(ack, acked);
        let (srtt, forget_after) = (self.rtt.srtt(), self.rtt.pto_base() * 2);
        self.losses
            .on_ack(ack, now, srtt, forget_after, &mut self.cc);
        let mut out = AckOutcome::default();
        let Some(largest) = largest_newly_acked else {
            return Ok(out);
        };
        self.largest_acked = Some(
            self.largest_acked
                .map_or(ack.largest, |l| l.max(ack.largest)),
        );
        if largest.pn == ack.largest && largest.ack_eliciting {
            let sample = now - largest.time_sent;
            let delay = Duration::from_micros(ack.ack_delay_us).min(max_ack_delay);
            self.rtt.update(delay, sample);
            self.cc.on_rtt_sample(now, largest.time_sent, sample);
            out.rtt_sample = Some(sample);
            self.update_owd(ack.receiver_time_us, largest.time_sent);
        }
        let app_limited = in_flight_before < self.cc.window() / 2;
        for p in &acked[first_new..] {
            self.forget(p);
            if p.in_flight {
                out.acked_bytes += u64::from(p.size);
                self.cc
                    .on_ack(now, p.time_sent, u64::from(p.size), &self.rtt, app_limited);
                self.delivery
                    .on_acked(now, &p.delivery, p.time_sent, u64::from(p.size));
            }
            self.loss_rate *= 1.0 - LOSS_RATE_GAIN;
        }
        self.update_delivery_rate(now, out.acked_bytes);
        self.pto_count = 0;
        self.last_ack_received = now;
        let recovered = self.is_failed();
        if recovered {
            self.recover(now);
            out.recovered = true;
        }
        out.lost_bytes = self.detect_lost(now, lost);
        if let Some(sample) = self.delivery.take_sample(
            now,
            self.rtt.min_rtt(),
            in_flight_before,
            self.bytes_in_flight,
        ) && !recovered
        {
            self.cc.on_ack_event(now, &sample, &self.rtt);
        }
        self.pop_done();
        Ok(out)
    }

    /// Marks every packet the ACK covers as done, appends the newly acknowledged ones to
    /// `acked`, and returns the largest of them.
    fn mark_acked(
        &mut self,
        ack: &AckFrame<'_>,
        acked: &mut Vec<SentPacket>,
    ) -> Option<SentPacket> {
        let mut largest: Option<SentPacket> = None;
        for (lo, hi) in ack.ranges() {
            // Ranges come highest first: once one ends below the oldest packet still tracked,
            // so do all the rest (an ACK repeats ranges long settled).
            if self.sent.front().is_none_or(|p| p.pn > hi) {
                break;
            }
            let mut i = self.sent.partition_point(|p| p.pn < lo);
            while let Some(p) = self.sent.get_mut(i) {
                if p.pn > hi {
                    break;
                }
                if !p.done {
                    p.done = true;
                    let copy = *p;
                    if largest.is_none_or(|l| l.pn < copy.pn) {
                        largest = Some(copy);
                    }
                    acked.push(copy);
                }
                i += 1;
            }
        }
        largest
    }

    /// How much the path reorders, as its loss detection has learned it.
    pub fn reordering(&self) -> Reordering {
        self.losses.reordering()
    }

    fn update_owd(&mut self, receiver_time_us: u64, sent: Timestamp) {
        let relative = receiver_time_us as i64 - sent.as_micros() as i64;
        let min = self.owd_min_relative.map_or(relative, |m| m.min(relative));
        self.owd_min_relative = Some(min);
        let queueing = u32::try_from(relative - min).unwrap_or(u32::MAX);
        self.owd_us = (micros32(self.rtt.min_rtt()) / 2).saturating_add(queueing);
    }

    fn update_delivery_rate(&mut self, now: Timestamp, bytes: u64) {
        self.rate_window_bytes += bytes;
        let elapsed = now - self.rate_window_start;
        if elapsed >= self.rtt.srtt().max(Duration::from_millis(10)) {
            let rate = self.rate_window_bytes as f64 / elapsed.as_secs_f64();
            self.delivery_rate = rate as u64;
            self.note_rate_window(self.rate_window_start);
            self.rate_window_start = now;
            self.rate_window_bytes = 0;
        }
    }

    /// Follows whether the path stays busy below [`SessionConfig::backup_below_rate`], at the
    /// end of a rate window that began at `start`: a window in which it was kept busy and
    /// delivered less starts (or continues) a slow spell; one in which it was idle at some time,
    /// or delivered a quarter more than the floor, ends it (in between, the spell goes on as it
    /// was, so that a rate near the floor does not flap).
    fn note_rate_window(&mut self, start: Timestamp) {
        let floor = self.degraded_below;
        let idle = std::mem::take(&mut self.idle_in_rate_window);
        if floor == 0 {
            return;
        }
        if idle || self.delivery_rate >= floor + floor / 4 {
            self.slow_since = None;
        } else if self.delivery_rate < floor && self.slow_since.is_none() {
            self.slow_since = Some(start);
        }
    }

    /// Takes a new floor ([`SessionConfig::backup_below_rate`]): a slow spell begun under the
    /// old one ends, and the next rate windows judge the path anew.
    pub fn set_degraded_below(&mut self, rate: u64) {
        self.degraded_below = rate;
        self.slow_since = None;
    }

    /// A primary path that is neither failed, potentially failed nor degraded at `now`: while
    /// one is, backup paths carry nothing ([`PathView::is_live_primary`]).
    pub fn is_live_primary(&self, now: Timestamp) -> bool {
        self.state == PathState::Active && self.pto_count == 0 && !self.is_degraded(now)
    }

    /// Whether the path has been kept busy below [`SessionConfig::backup_below_rate`] for
    /// [`DEGRADED_AFTER`] by `now` (never while it is failed or a probe timeout waits).
    pub fn is_degraded(&self, now: Timestamp) -> bool {
        self.pto_count == 0
            && !self.is_failed()
            && self
                .slow_since
                .is_some_and(|since| now - since >= DEGRADED_AFTER)
    }

    fn pop_done(&mut self) {
        while self.sent.front().is_some_and(|p| p.done) {
            self.sent.pop_front();
        }
    }

    /// RFC 9002 §6.1: declares lost what the thresholds say is lost; returns the lost bytes.
    /// Persistent congestion (§7.6) is established when a run of consecutive packets declared
    /// lost together spans three probe timeouts (conservatively: packets settled earlier break
    /// the run).
    pub fn detect_lost(&mut self, now: Timestamp, lost: &mut Vec<SentPacket>) -> u64 {
        self.loss_time = None;
        let Some(largest_acked) = self.largest_acked else {
            return 0;
        };
        let rtt = self.rtt.srtt().max(self.rtt.latest());
        let loss_delay = self.losses.loss_delay(rtt).max(GRANULARITY);
        let packet_threshold = self.losses.reordering().packet_threshold;
        let persistent_span = (self.rtt.pto_base() + self.max_ack_delay) * 3;
        let first = lost.len();
        let mut lost_bytes = 0;
        let mut newest_lost = None;
        let mut run_start: Option<Timestamp> = None;
        let mut persistent = false;
        for i in 0..self.sent.len() {
            let p = self.sent[i];
            if p.pn >= largest_acked {
                break;
            }
            if p.done {
                run_start = None;
                continue;
            }
            if now.saturating_duration_since(p.time_sent) >= loss_delay
                || largest_acked >= p.pn + packet_threshold
            {
                self.sent[i].done = true;
                self.forget(&p);
                if p.in_flight {
                    self.losses.record_lost(p.pn, p.time_sent, largest_acked);
                    lost_bytes += u64::from(p.size);
                    newest_lost = Some(p.time_sent);
                    let start = *run_start.get_or_insert(p.time_sent);
                    persistent |= self.rtt.has_sample() && p.time_sent - start >= persistent_span;
                }
                lost.push(p);
            } else {
                run_start = None;
                let at = p.time_sent + loss_delay;
                self.loss_time = Some(self.loss_time.map_or(at, |t| t.min(at)));
            }
        }
        let count = (lost.len() - first) as u64;
        self.stats.packets_lost += count;
        for _ in 0..count {
            self.loss_rate = self.loss_rate * (1.0 - LOSS_RATE_GAIN) + LOSS_RATE_GAIN;
        }
        if let Some(sent_time) = newest_lost {
            // Only the loss-based window controllers are undone (BBR barely answers a loss).
            // A coupled one's window is its own: the session's other paths read it afresh at
            // their next ACK.
            let before = matches!(
                self.cc,
                AnyController::NewReno(_) | AnyController::Cubic(_) | AnyController::Coupled(_)
            )
            .then(|| self.cc.clone());
            let window = self.cc.window();
            self.cc
                .on_congestion_event(now, sent_time, persistent, lost_bytes);
            self.losses
                .after_congestion_event(before, window, persistent, &self.cc);
        }
        self.pop_done();
        lost_bytes
    }

    /// The earliest timer of this path (called for every path after every packet, so the
    /// probe and failure deadlines share one computation of the probe period).
    pub fn next_timeout(&self, config: &SessionConfig, heartbeat: Heartbeat) -> Option<Timestamp> {
        let mut t = self.loss_time;
        let mut take = |x: Option<Timestamp>| {
            if let Some(x) = x {
                t = Some(t.map_or(x, |y| y.min(x)));
            }
        };
        take(self.ack_deadline.filter(|_| self.ack_pending));
        if self.is_failed() {
            take(Some(self.next_failed_probe));
        } else if self.ack_eliciting_in_flight == 0 {
            take(Some(heartbeat.due(
                self.last_ack_eliciting_sent,
                self.last_ack_eliciting_heard,
            )));
        } else {
            let base = self.probe_period_ns(config);
            take(Some(self.pto_at(base)));
            take(self.failure_at(base, config));
            if self.pto_count > 0 {
                take(Some(
                    self.last_ack_eliciting_sent + config.failed_probe_interval,
                ));
            }
        }
        t
    }

    /// One probe period (`pto_base + max_ack_delay`) in nanoseconds: the deadlines below are
    /// computed in integer nanoseconds, truncated to the microsecond like `Timestamp + Duration`.
    fn probe_period_ns(&self, config: &SessionConfig) -> u64 {
        duration_nanos(self.rtt.pto_base()).saturating_add(duration_nanos(config.max_ack_delay))
    }

    /// The probe timeout (while ack-eliciting packets are out): RFC 9002 §6.2.1, backed off.
    fn pto_at(&self, period_ns: u64) -> Timestamp {
        after(
            self.last_ack_eliciting_sent,
            period_ns,
            1u64 << self.pto_count.min(16),
        )
    }

    /// When the path is declared failed if nothing is acknowledged (while ack-eliciting packets
    /// are out): the oldest unacknowledged packet (or the last ACK, if later) plus as long as
    /// `failure_probe_timeouts` consecutive probe timeouts take. Unlike the probe timer, new
    /// packets sent into a dead path do not postpone it.
    fn failure_at(&self, period_ns: u64, config: &SessionConfig) -> Option<Timestamp> {
        // Settled packets leave the front at once (`pop_done`), so this finds the front one
        // unless failed-path probes (not in flight) are still waiting there.
        let oldest = self.sent.iter().find(|p| !p.done && p.in_flight)?.time_sent;
        let since = oldest.max(self.last_ack_received);
        let rounds = (1u64 << config.failure_probe_timeouts.min(16)) - 1;
        Some(after(since, period_ns, rounds))
    }

    /// Runs the path's expired timers. Returns true when the path just failed. Packets declared
    /// lost go to `lost`; on a probe timeout, copies of the packets still in flight that carry
    /// stream bytes or control frames go to `reinject` (once per packet; see
    /// [`Path::reinject_in_flight`]).
    pub fn on_timeout(
        &mut self,
        now: Timestamp,
        config: &SessionConfig,
        heartbeat: Heartbeat,
        lost: &mut Vec<SentPacket>,
        reinject: &mut Vec<SentPacket>,
    ) -> bool {
        if self.ack_pending && self.ack_deadline.is_some_and(|d| d <= now) {
            self.ack_immediate = true;
        }
        if self.loss_time.is_some_and(|t| t <= now) {
            self.detect_lost(now, lost);
        }
        if self.is_failed() {
            if self.next_failed_probe <= now {
                self.probe_due = true;
                self.next_failed_probe = now + config.failed_probe_interval;
            }
            return false;
        }
        // One probe period for both deadlines (they exist while ack-eliciting packets are out).
        let period = (self.ack_eliciting_in_flight > 0).then(|| self.probe_period_ns(config));
        if period
            .and_then(|base| self.failure_at(base, config))
            .is_some_and(|d| d <= now)
        {
            self.fail(now, lost);
            return true;
        }
        if period.is_some_and(|base| self.pto_at(base) <= now) {
            self.pto_count += 1;
            if self.pto_count >= config.failure_probe_timeouts {
                self.fail(now, lost);
                return true;
            }
            self.probe_due = true;
            // Restart the timer from now so that one expiry counts once.
            self.last_ack_eliciting_sent = now;
            self.reinject_in_flight(reinject);
        } else if self.pto_count > 0
            && now - self.last_ack_eliciting_sent >= config.failed_probe_interval
        {
            // The window is closed until an ACK (see `reinject_in_flight`): probe at the failed
            // path's cadence instead of waiting out the backed-off probe timeout, so a path whose
            // outage ends is back within one probe interval plus its RTT. The failure deadline
            // does not move (it counts from the oldest packet in flight), nor does the count.
            self.probe_due = true;
            self.last_ack_eliciting_sent = now;
        } else if self.ack_eliciting_in_flight == 0
            && heartbeat.due(self.last_ack_eliciting_sent, self.last_ack_eliciting_heard) <= now
        {
            self.probe_due = true;
            self.last_ack_eliciting_sent = now;
        }
        false
    }

    /// A probe timeout: nothing sent on the path was acknowledged for a whole probe period, so
    /// it may be dark (an outage begins as exactly this). What it has in flight may be what the
    /// receiver's flow-control window waits for, and without ACKs on this path nothing would
    /// declare it lost until the path is failed (several backed-off probe periods, seconds when
    /// queueing inflated the RTT) or comes back: a stream hole that pins every flow window
    /// while the other paths idle. So the stream bytes and control frames of every packet in
    /// flight are queued again at once (copies go to `reinject`, each packet once) for the
    /// scheduler to place on any path, as MPTCP reinjects a subflow's data on a retransmission
    /// timeout; the packets stay in flight here (an ACK may still come). Until this path's next
    /// ACK its view shows no room ([`Path::view`]), so new data and the reinjected bytes go to
    /// the other paths while only probes go out on it.
    fn reinject_in_flight(&mut self, reinject: &mut Vec<SentPacket>) {
        for p in self.sent.iter_mut() {
            let carries = !matches!(p.payload, Payload::None) || p.controls[0].is_some();
            if !p.done && p.in_flight && !p.reinjected && carries {
                p.reinjected = true;
                reinject.push(*p);
            }
        }
    }

    /// The redundant buffer's next candidate on this path: the oldest packet numbered `from` or
    /// later that is in flight (neither acknowledged nor declared lost), carries stream bytes,
    /// is not itself a copy (from the buffer or from a placement) and was not reinjected (its
    /// bytes are queued again already).
    pub fn next_to_copy(&self, from: u64) -> Option<SentPacket> {
        if self.is_failed() {
            return None;
        }
        let start = self.sent.partition_point(|p| p.pn < from);
        self.sent
            .range(start..)
            .find(|p| {
                !p.done
                    && p.in_flight
                    && !p.copy
                    && !p.placement_copy
                    && !p.reinjected
                    && matches!(p.payload, Payload::Stream { .. })
            })
            .copied()
    }

    /// When the oldest stream packet in flight on the path (neither acknowledged nor declared
    /// lost) was sent.
    pub fn oldest_stream_in_flight(&self) -> Option<Timestamp> {
        self.sent
            .iter()
            .find(|p| !p.done && p.in_flight && matches!(p.payload, Payload::Stream { .. }))
            .map(|p| p.time_sent)
    }

    /// The window was cut by [`Path::penalise`] less than a smoothed RTT before `now`.
    pub fn penalised_recently(&self, now: Timestamp) -> bool {
        self.penalised_at
            .is_some_and(|at| now - at < self.rtt.srtt())
    }

    /// Cuts the congestion window as a congestion event does, at most once per smoothed RTT
    /// (MPTCP's penalisation, [`Session::penalise_blocking_path`]); returns whether it did. A
    /// reduction waiting to be undone (`reorder.rs`) is forgotten: this cut is not a loss.
    pub fn penalise(&mut self, now: Timestamp) -> bool {
        if self.penalised_recently(now) {
            return false;
        }
        self.penalised_at = Some(now);
        self.losses.forget_undo();
        self.cc.on_congestion_event(now, now, false, 0);
        self.stats.penalties += 1;
        true
    }

    /// The packets the path still tracks (sent, not yet forgotten), oldest first.
    #[cfg(test)]
    pub(crate) fn sent_packets(&self) -> impl Iterator<Item = &SentPacket> {
        self.sent.iter()
    }

    /// Declares the path failed; everything in flight on it goes to `lost` for reinjection.
    pub fn fail(&mut self, now: Timestamp, lost: &mut Vec<SentPacket>) {
        for p in self.sent.drain(..) {
            if !p.done {
                lost.push(p);
            }
        }
        self.bytes_in_flight = 0;
        self.ack_eliciting_in_flight = 0;
        self.loss_time = None;
        self.pto_count = 0;
        self.probe_due = false;
        self.state = PathState::Failed;
        self.failed_since = Some(now);
        self.slow_since = None;
        self.next_failed_probe = now;
        self.stats.failures += 1;
    }

    /// See [`RttEstimator::seed`].
    pub fn seed_rtt(&mut self, sample: Duration) -> bool {
        self.rtt.seed(sample)
    }

    fn recover(&mut self, now: Timestamp) {
        self.state = tier_state(self.config.tier);
        self.last_ack_received = now;
        self.failed_since = None;
        self.cc = self
            .congestion_config
            .resized(u64::from(self.config.max_datagram_size))
            .build();
        let srtt = self.rtt.srtt();
        self.rtt = RttEstimator::new(srtt);
        self.last_ack_eliciting_sent = now;
        self.owd_min_relative = None;
    }

    /// Changes the largest datagram the path carries, from the next packet on: the congestion
    /// controller counts its windows in the new size (its floor keeps its size in datagrams),
    /// and the pacer's and rate cap's bursts keep their sizes in datagrams. Packets already
    /// sent keep their sizes in the accounting.
    pub fn set_max_datagram_size(&mut self, size: u16) {
        if size == self.config.max_datagram_size {
            return;
        }
        self.config.max_datagram_size = size;
        self.losses.forget_undo();
        let mds = u64::from(size);
        let congestion = self.congestion_config.resized(mds);
        self.cc.on_max_datagram_size(mds, congestion.minimum_window);
        self.pacer.set_burst_range(
            mds.saturating_mul(MIN_BURST_DATAGRAMS),
            mds.saturating_mul(MAX_BURST_DATAGRAMS),
        );
        if let Some(bucket) = self.bucket.as_mut() {
            bucket.set_burst(mds * RATE_CAP_BURST_DATAGRAMS);
        }
    }

    /// Replaces the congestion controller with a new one running `algorithm`, built as at join
    /// for the path's current datagram size (and again so after a failure), which continues
    /// from the old one's window ([`AnyController::take_over`]).
    pub fn set_congestion(&mut self, algorithm: CongestionAlgorithm) {
        self.congestion_config.algorithm = algorithm;
        self.losses.forget_undo();
        let mut cc = self
            .congestion_config
            .resized(u64::from(self.config.max_datagram_size))
            .build();
        cc.take_over(&self.cc);
        self.cc = cc;
    }

    /// Changes the rate cap (bytes per second; `None`: no cap). A new cap starts with a full
    /// burst, as at join.
    pub fn set_rate_cap(&mut self, rate_cap: Option<u64>) {
        if rate_cap == self.config.rate_cap {
            return;
        }
        self.config.rate_cap = rate_cap;
        let burst = u64::from(self.config.max_datagram_size) * RATE_CAP_BURST_DATAGRAMS;
        self.bucket = rate_cap.map(|r| TokenBucket::new(r, burst));
    }

    /// Changes the tier (keeps a failed path failed).
    pub fn set_tier(&mut self, tier: Tier) {
        self.config.tier = tier;
        if !self.is_failed() {
            self.state = tier_state(tier);
        }
    }

    /// Records a received packet number; returns false for a duplicate.
    pub fn on_received(&mut self, pn: u64, now: Timestamp) -> bool {
        if self.received.contains(pn) {
            return false;
        }
        let largest = self.received.max_end();
        if largest.is_none_or(|l| pn >= l) {
            self.largest_received_at = now;
        } else {
            self.ack_immediate = true;
        }
        if largest.is_some_and(|l| pn > l) {
            self.ack_immediate = true;
        }
        self.received.insert(pn..pn + 1);
        self.received.keep_highest(self.max_ack_ranges);
        self.stats.packets_received += 1;
        true
    }

    /// The packet just recorded was ack-eliciting.
    pub fn on_ack_eliciting(&mut self, now: Timestamp, max_ack_delay: Duration) {
        self.last_ack_eliciting_heard = self.last_ack_eliciting_heard.max(now);
        self.ack_pending = true;
        self.unacked_eliciting += 1;
        if self.unacked_eliciting >= 2 {
            self.ack_immediate = true;
        }
        if self.ack_deadline.is_none() {
            self.ack_deadline = Some(now + max_ack_delay);
        }
    }

    /// An ACK must be sent now.
    pub fn ack_due(&self) -> bool {
        self.ack_pending && self.ack_immediate
    }

    /// An ACK could be piggybacked.
    pub fn ack_pending(&self) -> bool {
        self.ack_pending
    }

    /// Delay to report in an ACK sent now, and the receive time of the largest packet.
    pub fn ack_timing(&self, now: Timestamp) -> (u64, u64) {
        (
            (now - self.largest_received_at).as_micros() as u64,
            self.largest_received_at.as_micros(),
        )
    }

    /// An ACK was written.
    pub fn on_ack_sent(&mut self) {
        self.ack_pending = false;
        self.ack_immediate = false;
        self.ack_deadline = None;
        self.unacked_eliciting = 0;
    }
}

fn tier_state(tier: Tier) -> PathState {
    match tier {
        Tier::Primary => PathState::Active,
        Tier::Backup => PathState::Backup,
    }
}

fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// `t + period × factor` (period in ns), the product truncated to whole microseconds, as
/// `Timestamp + Duration` does.
fn after(t: Timestamp, period_ns: u64, factor: u64) -> Timestamp {
    Timestamp::from_micros(
        t.as_micros()
            .saturating_add(period_ns.saturating_mul(factor) / 1_000),
    )
}

fn micros32(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

#[cfg(test)]
#[path = "path_tests.rs"]
mod tests;
