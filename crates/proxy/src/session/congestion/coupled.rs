//! Coupled congestion control over the paths of one session: LIA (RFC 6356) and OLIA
//! (Khalili, Gast, Popovic and Le Boudec, "MPTCP is not Pareto-optimal", CoNEXT 2012;
//! draft-khalili-mptcp-congestion-control-05).
//!
//! Both run NewReno on each path (per-path slow start, recovery period, halving on a congestion
//! event, persistent congestion: [`NewReno`]) with a congestion-avoidance increase linked to the
//! session's other paths, so that the session as a whole takes no more than one single-path flow
//! would at a bottleneck its paths share, and moves its traffic towards its less congested paths.
//!
//! Windows `w_p` in bytes, `rtt_p` the smoothed RTT in seconds, `mss` the datagram size; per ACK
//! of `n` bytes on path `r` in congestion avoidance:
//!
//! - LIA (RFC 6356 §3, byte counting): `w_r += min(α n mss / w_total, n mss / w_r)` with
//!   `α = w_total · max_p(w_p / rtt_p²) / (Σ_p w_p / rtt_p)²`.
//! - OLIA (draft §3): `w_r += n mss · ((w_r / rtt_r²) / (Σ_p w_p / rtt_p)² + α_r / w_r)`. With
//!   `ℓ_p` the larger of the bytes acknowledged between the path's last two losses and since its
//!   last loss, `M` the paths with the largest window, `B` the paths with the largest
//!   `ℓ_p / rtt_p²` (the best paths: a single-path flow's rate on a path goes as `√ℓ / rtt`) and
//!   `N` the number of paths: `α_r = 1 / (N |B \ M|)` for `r` in `B \ M`, `-1 / (N |M|)` for `r`
//!   in `M` when `B \ M` is not empty, and 0 otherwise. The window never drops below its floor.
//!
//! With one path both are NewReno: one datagram per window of acknowledged bytes.
//!
//! The session builds a [`Coupling`] from every coupled path's [`CouplingInput`] before it
//! reports an ACK of a path to that path's controller ([`super::Controller::on_coupling`]).

use std::time::Duration;

use braid_sched_core::Timestamp;

use super::{Controller, NewReno, RttEstimator, WindowParams};

/// The smallest RTT the coupling divides by, seconds (1 µs: a path's smoothed RTT is never
/// zero once sampled, but the formulas must stay finite for any input).
const MIN_RTT_SECS: f64 = 1e-6;

/// Which coupled increase a [`Coupled`] controller runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CoupledKind {
    /// The Linked Increases Algorithm of RFC 6356.
    Lia,
    /// The Opportunistic Linked Increases Algorithm.
    Olia,
}

/// One coupled path, as the session reads it when it builds a [`Coupling`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CouplingInput {
    /// The path's congestion window, bytes.
    pub window: u64,
    /// Its smoothed RTT.
    pub srtt: Duration,
    /// OLIA's `ℓ`: the larger of the bytes acknowledged between its last two losses and since
    /// its last loss.
    pub loss_interval: u64,
}

impl CouplingInput {
    fn rtt_secs(&self) -> f64 {
        self.srtt.as_secs_f64().max(MIN_RTT_SECS)
    }

    /// `w / rtt`, bytes per second.
    fn rate(&self) -> f64 {
        self.window as f64 / self.rtt_secs()
    }

    /// `w / rtt²`.
    fn rate_per_rtt(&self) -> f64 {
        self.rate() / self.rtt_secs()
    }

    /// `ℓ / rtt²`: how good the path is for OLIA.
    fn quality(&self) -> f64 {
        self.loss_interval as f64 / (self.rtt_secs() * self.rtt_secs())
    }
}

/// What a coupled controller knows of its session's coupled paths (its own included), taken
/// before each ACK of its path.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Coupling {
    /// Coupled paths counted; 0 or 1 leaves the controller plain NewReno.
    pub paths: u32,
    /// `Σ w_p`, bytes.
    pub total_window: f64,
    /// `Σ w_p / rtt_p`, bytes per second.
    pub total_rate: f64,
    /// `max_p w_p / rtt_p²` (LIA).
    pub max_rate_per_rtt: f64,
    /// OLIA's `α_r` for the path the coupling was built for.
    pub olia_alpha: f64,
}

impl Coupling {
    /// The coupling of the path marked `true` among `paths` (every coupled path of the session,
    /// that one included).
    pub fn compute<I>(paths: I) -> Coupling
    where
        I: IntoIterator<Item = (bool, CouplingInput)>,
        I::IntoIter: Clone,
    {
        let paths = paths.into_iter();
        let mut c = Coupling::default();
        let mut max_window = 0u64;
        let mut best = 0.0f64;
        for (_, p) in paths.clone() {
            c.paths += 1;
            c.total_window += p.window as f64;
            c.total_rate += p.rate();
            c.max_rate_per_rtt = c.max_rate_per_rtt.max(p.rate_per_rtt());
            max_window = max_window.max(p.window);
            best = best.max(p.quality());
        }
        let (mut largest, mut best_not_largest) = (0u32, 0u32);
        let (mut target_largest, mut target_best_not_largest) = (false, false);
        for (target, p) in paths {
            let in_m = p.window == max_window;
            let in_b_not_m = !in_m && p.quality() == best;
            largest += u32::from(in_m);
            best_not_largest += u32::from(in_b_not_m);
            if target {
                (target_largest, target_best_not_largest) = (in_m, in_b_not_m);
            }
        }
        let n = f64::from(c.paths.max(1));
        c.olia_alpha = if best_not_largest == 0 {
            0.0
        } else if target_best_not_largest {
            1.0 / (n * f64::from(best_not_largest))
        } else if target_largest {
            -1.0 / (n * f64::from(largest))
        } else {
            0.0
        };
        c
    }
}

/// A coupled controller for one path (LIA or OLIA).
#[derive(Clone, Debug, PartialEq)]
pub struct Coupled {
    kind: CoupledKind,
    reno: NewReno,
    coupling: Coupling,
    /// The part of the increase (bytes, may be negative under OLIA) not yet applied: windows
    /// move in whole bytes.
    carry: f64,
    /// Bytes acknowledged between the last two congestion events.
    between_losses: u64,
    /// Bytes acknowledged since the last congestion event.
    since_loss: u64,
}

impl Coupled {
    pub(crate) fn new(kind: CoupledKind, params: WindowParams) -> Self {
        Coupled {
            kind,
            reno: NewReno::new(params),
            coupling: Coupling::default(),
            carry: 0.0,
            between_losses: 0,
            since_loss: 0,
        }
    }

    /// This controller put back as `before`, a copy taken before a window reduction whose
    /// losses all proved spurious (`session::reorder`): as if the reduction had not happened,
    /// the bytes acknowledged since count towards OLIA's `ℓ` as bytes since `before`'s last
    /// loss, and the coupling is the latest.
    pub(crate) fn undone_to(&self, before: &Coupled) -> Coupled {
        Coupled {
            coupling: self.coupling,
            since_loss: before.since_loss.saturating_add(self.since_loss),
            ..before.clone()
        }
    }

    /// LIA or OLIA.
    pub fn kind(&self) -> CoupledKind {
        self.kind
    }

    /// The slow-start threshold, bytes (`u64::MAX` until the first congestion event).
    pub fn ssthresh(&self) -> u64 {
        self.reno.ssthresh()
    }

    /// Continues from another controller's `window` and slow-start threshold (see
    /// [`super::AnyController::take_over`]).
    pub(crate) fn resume(&mut self, window: u64, ssthresh: u64) {
        self.reno.resume(window, ssthresh);
        self.carry = 0.0;
    }

    /// Whether a packet sent at `sent_time` belongs to the current recovery period.
    pub fn in_recovery(&self, sent_time: Timestamp) -> bool {
        self.reno.in_recovery(sent_time)
    }

    /// The window floor, bytes.
    pub fn minimum_window(&self) -> u64 {
        self.reno.minimum_window()
    }

    /// OLIA's `ℓ` for this path, bytes.
    pub fn loss_interval(&self) -> u64 {
        self.between_losses.max(self.since_loss)
    }

    /// The coupling the session last reported.
    pub fn coupling(&self) -> &Coupling {
        &self.coupling
    }

    /// The `α` in force for this path: LIA's, RFC 6356's session-wide aggressiveness (1 for a
    /// path alone), or OLIA's `α_r` (0 alone), from the last coupling reported.
    pub fn alpha(&self) -> f64 {
        let c = &self.coupling;
        match self.kind {
            CoupledKind::Lia if c.paths > 1 && c.total_rate > 0.0 => {
                c.total_window * c.max_rate_per_rtt / (c.total_rate * c.total_rate)
            }
            CoupledKind::Lia => 1.0,
            CoupledKind::Olia => c.olia_alpha,
        }
    }

    /// The congestion-avoidance increase for `bytes` newly acknowledged on a path whose
    /// smoothed RTT is `srtt`, bytes (negative when OLIA moves window off this path).
    fn increase(&self, bytes: u64, srtt: Duration) -> f64 {
        let w = self.reno.window() as f64;
        let mss = self.reno.max_datagram_size() as f64;
        let n = bytes as f64;
        let reno = n * mss / w;
        let c = &self.coupling;
        if c.paths <= 1 || c.total_rate <= 0.0 || c.total_window <= 0.0 {
            return reno;
        }
        let increase = match self.kind {
            CoupledKind::Lia => (self.alpha() * n * mss / c.total_window).min(reno),
            CoupledKind::Olia => {
                let rtt = srtt.as_secs_f64().max(MIN_RTT_SECS);
                let own = w / (rtt * rtt) / (c.total_rate * c.total_rate);
                n * mss * (own + self.alpha() / w)
            }
        };
        if increase.is_finite() { increase } else { 0.0 }
    }
}

impl Controller for Coupled {
    fn on_ack(
        &mut self,
        _now: Timestamp,
        sent_time: Timestamp,
        bytes: u64,
        rtt: &RttEstimator,
        app_limited: bool,
    ) {
        self.since_loss = self.since_loss.saturating_add(bytes);
        if app_limited || self.reno.in_recovery(sent_time) {
            return;
        }
        let bytes = self.reno.slow_start(bytes);
        if bytes == 0 {
            return;
        }
        self.carry += self.increase(bytes, rtt.srtt());
        let whole = self.carry.trunc();
        if whole != 0.0 {
            // `as` saturates: a finite increase beyond i64 cannot happen with real windows.
            self.reno.adjust_window(whole as i64);
            self.carry -= whole;
        }
        if self.carry < 0.0 && self.reno.window() == self.reno.minimum_window() {
            self.carry = 0.0;
        }
    }

    fn on_rtt_sample(&mut self, now: Timestamp, largest_sent: Timestamp, sample: Duration) {
        self.reno.hystart_sample(now, largest_sent, sample);
    }

    fn on_congestion_event(
        &mut self,
        now: Timestamp,
        sent_time: Timestamp,
        persistent: bool,
        lost_bytes: u64,
    ) {
        if !self.reno.in_recovery(sent_time) {
            self.between_losses = self.since_loss;
            self.since_loss = 0;
            self.carry = 0.0;
        }
        self.reno
            .on_congestion_event(now, sent_time, persistent, lost_bytes);
    }

    fn on_coupling(&mut self, coupling: &Coupling) {
        self.coupling = *coupling;
    }

    fn window(&self) -> u64 {
        self.reno.window()
    }

    fn on_max_datagram_size(&mut self, max_datagram_size: u64, minimum_window: u64) {
        self.reno
            .on_max_datagram_size(max_datagram_size, minimum_window);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MDS: u64 = 1200;

    fn coupled(kind: CoupledKind) -> Coupled {
        Coupled::new(kind, WindowParams::of_datagrams(MDS))
    }

    fn ms(v: u64) -> Timestamp {
        Timestamp::from_millis(v)
    }

    fn rtt(millis: u64) -> RttEstimator {
        let mut rtt = RttEstimator::new(Duration::from_millis(millis));
        rtt.update(Duration::ZERO, Duration::from_millis(millis));
        rtt
    }

    fn input(window: u64, rtt_ms: u64, loss_interval: u64) -> CouplingInput {
        CouplingInput {
            window,
            srtt: Duration::from_millis(rtt_ms),
            loss_interval,
        }
    }

    /// Leaves slow start with the window at `window` bytes (a loss at 2 `window`, then the
    /// recovery period ended by an ACK of a later packet).
    fn in_avoidance(kind: CoupledKind, window: u64) -> Coupled {
        let mut cc = coupled(kind);
        cc.reno
            .adjust_window(2 * window as i64 - cc.window() as i64);
        cc.on_congestion_event(ms(100), ms(90), false, MDS);
        assert_eq!((cc.window(), cc.ssthresh()), (window, window));
        cc
    }

    /// Acknowledges `bytes` in `MDS`-byte ACKs (all sent after the recovery period began).
    fn ack(cc: &mut Coupled, bytes: u64, rtt: &RttEstimator) {
        for _ in 0..bytes / MDS {
            cc.on_ack(ms(300), ms(200), MDS, rtt, false);
        }
    }

    #[test]
    fn alone_both_grow_like_new_reno() {
        let rtt = rtt(50);
        for kind in [CoupledKind::Lia, CoupledKind::Olia] {
            let mut cc = in_avoidance(kind, 24 * MDS);
            let mut reno = NewReno::new(WindowParams {
                initial_window: 48 * MDS,
                minimum_window: 2 * MDS,
                max_datagram_size: MDS,
            });
            reno.on_congestion_event(ms(100), ms(90), false, MDS);
            // Not told of any other path, then told of itself alone: NewReno either way.
            for coupling in [None, Some(input(24 * MDS, 50, 0))] {
                if let Some(me) = coupling {
                    cc.on_coupling(&Coupling::compute([(true, me)]));
                }
                for _ in 0..200 {
                    cc.on_ack(ms(300), ms(200), MDS, &rtt, false);
                    reno.on_ack(ms(300), ms(200), MDS, &rtt, false);
                }
                // One datagram per window: NewReno adds whole datagrams, the coupled
                // controllers mss/w per byte, so they differ by less than one datagram.
                assert!(
                    cc.window().abs_diff(reno.window()) < MDS,
                    "{kind:?}: {} vs {}",
                    cc.window(),
                    reno.window()
                );
                assert!(reno.window() > 24 * MDS + 5 * MDS);
            }
        }
    }

    #[test]
    fn lia_alpha_matches_rfc_6356_for_two_equal_paths() {
        // Two paths of window w and the same RTT: α = 2w · (w/r²) / (2w/r)² = 1/2, so each path
        // grows by α mss / w_total = mss / 4w per byte: a quarter datagram per window, half of
        // one for the pair (one single-path flow with the pair's total window grows by one).
        let w = 20 * MDS;
        let c = Coupling::compute([(true, input(w, 40, 0)), (false, input(w, 40, 0))]);
        assert_eq!(c.paths, 2);
        let mut cc = in_avoidance(CoupledKind::Lia, w);
        assert_eq!(cc.alpha(), 1.0, "alone");
        cc.on_coupling(&c);
        assert!((cc.alpha() - 0.5).abs() < 1e-12, "{}", cc.alpha());
        ack(&mut cc, w, &rtt(40));
        assert!(cc.window().abs_diff(w + MDS / 4) <= 1, "{}", cc.window());
    }

    #[test]
    fn lia_never_grows_faster_than_new_reno_on_the_path() {
        // A fast short path beside a slow one: α is large (the fast path dominates), but the
        // increase is capped at NewReno's one datagram per window of this path.
        let c = Coupling::compute([
            (true, input(10 * MDS, 10, 0)),
            (false, input(100 * MDS, 200, 0)),
        ]);
        let mut cc = in_avoidance(CoupledKind::Lia, 10 * MDS);
        cc.on_coupling(&c);
        ack(&mut cc, 10 * MDS, &rtt(10));
        assert!(cc.window() <= 11 * MDS, "{}", cc.window());
        assert!(cc.window() > 10 * MDS, "{}", cc.window());
    }

    #[test]
    fn olia_alpha_moves_window_from_the_largest_to_the_best_path() {
        // Path 0 has the largest window but loses often (short ℓ); path 1 loses rarely: it is
        // the best path and not a largest one, so it gets +1/(N |B\M|) and path 0 gets
        // -1/(N |M|).
        let big_lossy = input(40 * MDS, 50, 100 * MDS);
        let small_clean = input(10 * MDS, 50, 10_000 * MDS);
        let to_big = Coupling::compute([(true, big_lossy), (false, small_clean)]);
        let to_small = Coupling::compute([(false, big_lossy), (true, small_clean)]);
        assert_eq!(to_big.olia_alpha, -0.5);
        assert_eq!(to_small.olia_alpha, 0.5);
        // When the largest window is also on the best path, nothing is moved.
        let both = Coupling::compute([(true, small_clean), (false, input(5 * MDS, 50, 0))]);
        assert_eq!(both.olia_alpha, 0.0);
        // Three paths, two of them best and not largest: 1 / (3 · 2) each.
        let three = Coupling::compute([
            (false, big_lossy),
            (true, small_clean),
            (false, small_clean),
        ]);
        assert!((three.olia_alpha - 1.0 / 6.0).abs() < 1e-12);

        // Applied over one window of ACKs (same RTTs): the coupled share of a path is
        // (w_r / Σ w)² datagrams, 0.64 for the large path and 0.04 for the small one; α moves
        // half a datagram from the first to the second.
        let grown = |window: u64, coupling: &Coupling| {
            let mut cc = in_avoidance(CoupledKind::Olia, window);
            cc.on_coupling(coupling);
            ack(&mut cc, window, &rtt(50));
            cc.window() - window
        };
        let unbiased = |c: &Coupling| Coupling {
            olia_alpha: 0.0,
            ..*c
        };
        let (big, big_share) = (
            grown(40 * MDS, &to_big),
            grown(40 * MDS, &unbiased(&to_big)),
        );
        assert!(big_share.abs_diff(MDS * 64 / 100) <= 24, "{big_share}");
        assert!(big.abs_diff(MDS * 14 / 100) <= 24, "{big}");
        let small = grown(10 * MDS, &to_small);
        let small_share = grown(10 * MDS, &unbiased(&to_small));
        assert!(small_share.abs_diff(MDS * 4 / 100) <= 24, "{small_share}");
        assert!(small.abs_diff(MDS * 54 / 100) <= 24, "{small}");
    }

    #[test]
    fn olia_counts_the_bytes_between_losses() {
        let mut cc = in_avoidance(CoupledKind::Olia, 10 * MDS);
        let rtt = rtt(50);
        assert_eq!(cc.loss_interval(), 0);
        ack(&mut cc, 30 * MDS, &rtt);
        assert_eq!(cc.loss_interval(), 30 * MDS);
        cc.on_congestion_event(ms(400), ms(350), false, MDS);
        // Between the last two losses: 30 datagrams; since: none yet.
        assert_eq!(cc.loss_interval(), 30 * MDS);
        for _ in 0..40 {
            cc.on_ack(ms(500), ms(450), MDS, &rtt, false);
        }
        assert_eq!(cc.loss_interval(), 40 * MDS);
        // A loss inside the same recovery period does not start a new interval.
        cc.on_congestion_event(ms(600), ms(550), false, MDS);
        cc.on_congestion_event(ms(610), ms(560), false, MDS);
        assert_eq!(cc.loss_interval(), 40 * MDS);
    }

    #[test]
    fn an_undone_reduction_keeps_the_bytes_acknowledged_since_in_olias_interval() {
        let mut cc = in_avoidance(CoupledKind::Olia, 10 * MDS);
        let rtt = rtt(50);
        ack(&mut cc, 20 * MDS, &rtt);
        cc.on_congestion_event(ms(400), ms(350), false, MDS);
        ack(&mut cc, 30 * MDS, &rtt);
        let before = cc.clone();
        let coupling = Coupling {
            paths: 2,
            total_window: 7e4,
            total_rate: 1e6,
            max_rate_per_rtt: 2e5,
            olia_alpha: 0.25,
        };
        // A reduction, 12 datagrams acknowledged after it, then all its losses prove spurious.
        cc.on_congestion_event(ms(500), ms(450), false, MDS);
        assert!(cc.window() < before.window());
        cc.on_coupling(&coupling);
        ack(&mut cc, 12 * MDS, &rtt);
        let undone = cc.undone_to(&before);
        assert_eq!(undone.window(), before.window());
        assert_eq!(undone.ssthresh(), before.ssthresh());
        // As if no loss had been: 30 + 12 datagrams since the last one, 20 before it.
        assert_eq!(undone.since_loss, 42 * MDS);
        assert_eq!(undone.between_losses, 20 * MDS);
        assert_eq!(undone.loss_interval(), 42 * MDS);
        assert_eq!(undone.coupling, coupling);
    }

    #[test]
    fn a_shrinking_olia_window_stops_at_its_floor_and_the_formulas_stay_finite() {
        let mut cc = in_avoidance(CoupledKind::Olia, 3 * MDS);
        cc.on_coupling(&Coupling {
            paths: 2,
            total_window: 1e3,
            total_rate: 1e30,
            max_rate_per_rtt: 0.0,
            olia_alpha: -0.5,
        });
        ack(&mut cc, 1000 * MDS, &rtt(50));
        assert_eq!(cc.window(), cc.minimum_window());
        // It stayed in congestion avoidance: no slow start undid the decrease.
        assert_eq!(cc.ssthresh(), cc.minimum_window());
        // Zero RTTs and windows: nothing divides by zero.
        let c = Coupling::compute([(true, input(0, 0, 0)), (false, input(0, 0, 0))]);
        assert!(c.total_rate == 0.0 && c.olia_alpha == 0.0);
        cc.on_coupling(&c);
        ack(&mut cc, 10 * MDS, &rtt(50));
        assert!(cc.window() >= cc.minimum_window());
    }

    #[test]
    fn losses_halve_the_window_once_per_recovery_period() {
        for kind in [CoupledKind::Lia, CoupledKind::Olia] {
            let mut cc = in_avoidance(kind, 20 * MDS);
            cc.on_congestion_event(ms(400), ms(350), false, MDS);
            assert_eq!(cc.window(), 10 * MDS);
            cc.on_congestion_event(ms(410), ms(360), false, MDS);
            assert_eq!(cc.window(), 10 * MDS);
            cc.on_congestion_event(ms(420), ms(370), true, MDS);
            assert_eq!(cc.window(), cc.minimum_window());
        }
    }
}
