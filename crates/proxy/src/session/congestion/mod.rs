//! Per-path congestion control for the session core: one authoritative controller per path.
//!
//! quinn-proto's controllers cannot be driven from outside quinn (its `RttEstimator::new` is
//! `pub(crate)`), so braid carries its own, shaped the same way: a small [`Controller`] trait of
//! `on_*` hooks with no-op defaults, a [`CongestionConfig`] that builds an [`AnyController`]
//! (one enum, static dispatch per packet), and the algorithm chosen by name through
//! [`CongestionAlgorithm`]. Everything is sans-IO: time is a `now: Timestamp` argument, nothing
//! allocates. See `docs/congestion.md`.
//!
//! - [`RttEstimator`]: RFC 9002 §5 (min, smoothed and variation of the RTT, ACK delay).
//! - [`NewReno`]: RFC 9002 §7 and Appendix B (slow start, congestion avoidance, recovery).
//! - [`Cubic`]: RFC 9438 §4 (W_cubic, Reno-friendly region, fast convergence, β = 0.7).
//! - [`Bbr`]: BBR version 1 (draft-cardwell-iccrg-bbr-congestion-control-00): a model of the
//!   path's bottleneck bandwidth and propagation RTT, paced at the bandwidth.
//! - [`Coupled`]: LIA (RFC 6356) and OLIA, NewReno per path with the congestion-avoidance
//!   increase coupled across the session's paths through a [`Coupling`].
//! - [`DeliveryRate`]: draft-cheng-iccrg-delivery-rate-estimation, one rate sample per ACK.
//! - [`Pacer`]: RFC 9002 §7.7 (rate `1.25 * cwnd / srtt`, bursts of 2 ms of the window).
//! - [`TokenBucket`]: a configured rate cap per path, independent of congestion control.
//!
//! Call order for one path: [`Controller::on_sent`] for every packet sent; for every newly
//! acknowledged packet, first [`RttEstimator::update`] (once per ACK frame) then
//! [`Controller::on_ack`]; for every loss batch [`Controller::on_congestion_event`] with the send
//! time of the newest lost packet; after the packets of one ACK, [`Controller::on_ack_event`]
//! with the ACK's [`RateSample`]. [`Controller::window`] bounds the bytes in flight, and
//! [`Controller::pacing_rate`], where a controller sets one (BBR), the rate packets leave at.

mod bbr;
mod coupled;
mod cubic;
mod delivery;
mod hystart;
mod new_reno;
mod pacer;
mod rtt;
mod token_bucket;

#[cfg(test)]
mod model_tests;

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use braid_sched_core::Timestamp;

pub use bbr::{Bbr, BbrMode};
pub use coupled::{Coupled, CoupledKind, Coupling, CouplingInput};
pub use cubic::{BETA as CUBIC_BETA, C as CUBIC_C, Cubic};
pub use delivery::{DeliveryRate, PacketDelivery, RateSample};
pub use hystart::HyStart;
pub use new_reno::NewReno;
pub use pacer::{MAX_BURST_DATAGRAMS, MIN_BURST_DATAGRAMS, Pacer};
pub use rtt::{GRANULARITY, RttEstimator};
pub use token_bucket::TokenBucket;

/// The default maximum datagram size the windows are counted in (bytes).
pub const DEFAULT_MAX_DATAGRAM_SIZE: u64 = 1200;

/// A congestion controller: the session reports sends, ACKs and losses of one path; the
/// controller answers with the number of bytes that may be in flight on it.
pub trait Controller {
    /// A packet of `bytes` bytes was sent, with `bytes_in_flight` bytes already in flight.
    #[allow(unused_variables)]
    fn on_sent(&mut self, now: Timestamp, bytes: u64, bytes_in_flight: u64) {}

    /// A packet of `bytes` bytes sent at `sent_time` was acknowledged. `app_limited` is true
    /// when the path was not using its window (the sender had nothing to send, or was held back
    /// by something other than this controller) before the ACK; the window does not grow then.
    fn on_ack(
        &mut self,
        now: Timestamp,
        sent_time: Timestamp,
        bytes: u64,
        rtt: &RttEstimator,
        app_limited: bool,
    );

    /// An ACK gave an RTT sample: `sample`, for its largest newly acknowledged packet, sent at
    /// `largest_sent` (called once per such ACK, after [`RttEstimator::update`] and before the
    /// ACK's packets are reported through [`Controller::on_ack`]). NewReno and CUBIC (and the
    /// coupled controllers' NewReno) feed their slow start's HyStart++ with it.
    #[allow(unused_variables)]
    fn on_rtt_sample(&mut self, now: Timestamp, largest_sent: Timestamp, sample: Duration) {}

    /// Packets were declared lost (or ECN-CE marked); `sent_time` is the send time of the newest
    /// of them. `persistent` means RFC 9002 §7.6 persistent congestion was established.
    fn on_congestion_event(
        &mut self,
        now: Timestamp,
        sent_time: Timestamp,
        persistent: bool,
        lost_bytes: u64,
    );

    /// The packets one ACK frame newly acknowledged were all reported through
    /// [`Controller::on_ack`]: `sample` is the ACK's delivery-rate sample (after the losses the
    /// ACK revealed were reported).
    #[allow(unused_variables)]
    fn on_ack_event(&mut self, now: Timestamp, sample: &RateSample, rtt: &RttEstimator) {}

    /// Before an ACK of this path is reported, a coupled controller (LIA, OLIA) is told what
    /// the session's coupled paths look like; the others ignore it.
    #[allow(unused_variables)]
    fn on_coupling(&mut self, coupling: &Coupling) {}

    /// Bytes that may be in flight (the congestion window).
    fn window(&self) -> u64;

    /// The rate the controller wants packets to leave at, bytes per second; `None` (the
    /// window-based controllers) lets the pacer derive one from the window and the RTT.
    fn pacing_rate(&self) -> Option<u64> {
        None
    }

    /// The path's maximum datagram size changed to `max_datagram_size` bytes, and the window
    /// floor with it to `minimum_window` bytes (RFC 9002 §7.2 counts both in datagrams). The
    /// window stays in bytes, raised to the new floor if below it; later growth is counted in
    /// the new datagrams (as quinn's `on_mtu_update`).
    #[allow(unused_variables)]
    fn on_max_datagram_size(&mut self, max_datagram_size: u64, minimum_window: u64) {}
}

/// The congestion control algorithms braid implements, selectable by name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CongestionAlgorithm {
    /// NewReno, RFC 9002 §7.
    NewReno,
    /// CUBIC, RFC 9438.
    #[default]
    Cubic,
    /// BBR version 1 (draft-cardwell-iccrg-bbr-congestion-control-00).
    Bbr,
    /// LIA, RFC 6356: NewReno per path, increases coupled across the session's paths.
    Lia,
    /// OLIA (draft-khalili-mptcp-congestion-control-05): as LIA, and moves window from the
    /// most to the least congested paths.
    Olia,
}

impl CongestionAlgorithm {
    /// Every algorithm, in the order they are listed to users.
    pub const ALL: [CongestionAlgorithm; 5] = [
        CongestionAlgorithm::NewReno,
        CongestionAlgorithm::Cubic,
        CongestionAlgorithm::Bbr,
        CongestionAlgorithm::Lia,
        CongestionAlgorithm::Olia,
    ];

    /// The canonical name used in config files and on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            CongestionAlgorithm::NewReno => "newreno",
            CongestionAlgorithm::Cubic => "cubic",
            CongestionAlgorithm::Bbr => "bbr",
            CongestionAlgorithm::Lia => "lia",
            CongestionAlgorithm::Olia => "olia",
        }
    }

    /// Whether the paths of a session running this algorithm are coupled (LIA, OLIA).
    pub const fn is_coupled(self) -> bool {
        matches!(self, CongestionAlgorithm::Lia | CongestionAlgorithm::Olia)
    }
}

impl fmt::Display for CongestionAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A congestion control algorithm name that braid does not implement.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown congestion algorithm `{name}` (expected `newreno`, `cubic`, `bbr`, `lia` or `olia`)"
)]
pub struct UnknownCongestionAlgorithm {
    /// The offending name.
    pub name: String,
}

impl FromStr for CongestionAlgorithm {
    type Err = UnknownCongestionAlgorithm;

    /// Case-insensitive; `new_reno`, `new-reno` and `reno` are accepted for NewReno, `bbr1`
    /// and `bbrv1` for BBR.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.trim();
        let is = |name: &str| wanted.eq_ignore_ascii_case(name);
        if is("newreno") || is("new_reno") || is("new-reno") || is("reno") {
            Ok(CongestionAlgorithm::NewReno)
        } else if is("cubic") {
            Ok(CongestionAlgorithm::Cubic)
        } else if is("bbr") || is("bbr1") || is("bbrv1") {
            Ok(CongestionAlgorithm::Bbr)
        } else if is("lia") {
            Ok(CongestionAlgorithm::Lia)
        } else if is("olia") {
            Ok(CongestionAlgorithm::Olia)
        } else {
            Err(UnknownCongestionAlgorithm { name: s.to_owned() })
        }
    }
}

/// A [`CongestionConfig`] whose values cannot work together.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CongestionConfigError {
    /// `max_datagram_size` is zero.
    #[error("congestion max_datagram_size must be at least 1 byte, got {0}")]
    ZeroDatagramSize(u64),
    /// `minimum_window` is smaller than one datagram.
    #[error(
        "congestion minimum_window {minimum_window} is below one datagram ({max_datagram_size} bytes)"
    )]
    MinimumBelowDatagram {
        /// The offending minimum window.
        minimum_window: u64,
        /// The datagram size it is compared with.
        max_datagram_size: u64,
    },
    /// `initial_window` is smaller than `minimum_window`.
    #[error("congestion initial_window {initial_window} is below minimum_window {minimum_window}")]
    InitialBelowMinimum {
        /// The offending initial window.
        initial_window: u64,
        /// The minimum window it is compared with.
        minimum_window: u64,
    },
}

/// How a path's congestion controller is built; its own factory ([`CongestionConfig::build`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CongestionConfig {
    /// Which algorithm.
    pub algorithm: CongestionAlgorithm,
    /// Window at start, bytes.
    pub initial_window: u64,
    /// Window floor after persistent congestion, bytes.
    pub minimum_window: u64,
    /// The datagram size windows are counted in, bytes (one "segment").
    pub max_datagram_size: u64,
}

impl CongestionConfig {
    /// RFC 9002 §7.2 defaults for `algorithm` and datagrams of `max_datagram_size` bytes:
    /// initial window `min(10 * mds, max(14720, 2 * mds))`, minimum window `2 * mds`.
    pub fn with_datagram_size(algorithm: CongestionAlgorithm, max_datagram_size: u64) -> Self {
        let mds = max_datagram_size;
        CongestionConfig {
            algorithm,
            initial_window: mds
                .saturating_mul(10)
                .min(mds.saturating_mul(2).max(14_720)),
            minimum_window: mds.saturating_mul(2),
            max_datagram_size: mds,
        }
    }

    /// The configuration for datagrams of `max_datagram_size` bytes instead of
    /// `self.max_datagram_size`: the initial and minimum windows keep their size in datagrams
    /// (scaled in proportion, rounded down; the minimum at least one datagram, the initial at
    /// least the minimum).
    pub fn resized(&self, max_datagram_size: u64) -> CongestionConfig {
        let from = u128::from(self.max_datagram_size.max(1));
        let to = u128::from(max_datagram_size);
        let scale = |w: u64| u64::try_from(u128::from(w) * to / from).unwrap_or(u64::MAX);
        let minimum_window = scale(self.minimum_window).max(max_datagram_size);
        CongestionConfig {
            algorithm: self.algorithm,
            initial_window: scale(self.initial_window).max(minimum_window),
            minimum_window,
            max_datagram_size,
        }
    }

    /// Checks that the values can work together; config loaders call this to report bad input.
    pub fn validate(&self) -> Result<(), CongestionConfigError> {
        if self.max_datagram_size == 0 {
            return Err(CongestionConfigError::ZeroDatagramSize(0));
        }
        if self.minimum_window < self.max_datagram_size {
            return Err(CongestionConfigError::MinimumBelowDatagram {
                minimum_window: self.minimum_window,
                max_datagram_size: self.max_datagram_size,
            });
        }
        if self.initial_window < self.minimum_window {
            return Err(CongestionConfigError::InitialBelowMinimum {
                initial_window: self.initial_window,
                minimum_window: self.minimum_window,
            });
        }
        Ok(())
    }

    /// Builds a controller. Values that [`validate`](Self::validate) would reject are clamped
    /// (datagram size and minimum window at least 1 byte, initial window at least the minimum)
    /// so that building never fails or panics.
    pub fn build(&self) -> AnyController {
        let params = WindowParams::from_config(self);
        match self.algorithm {
            CongestionAlgorithm::NewReno => AnyController::NewReno(NewReno::new(params)),
            CongestionAlgorithm::Cubic => AnyController::Cubic(Cubic::new(params)),
            CongestionAlgorithm::Bbr => AnyController::Bbr(Box::new(Bbr::new(params))),
            CongestionAlgorithm::Lia => {
                AnyController::Coupled(Coupled::new(CoupledKind::Lia, params))
            }
            CongestionAlgorithm::Olia => {
                AnyController::Coupled(Coupled::new(CoupledKind::Olia, params))
            }
        }
    }
}

impl Default for CongestionConfig {
    /// CUBIC with 1200-byte datagrams: initial window 12000 bytes, minimum 2400 bytes.
    fn default() -> Self {
        CongestionConfig::with_datagram_size(CongestionAlgorithm::Cubic, DEFAULT_MAX_DATAGRAM_SIZE)
    }
}

/// The sanitised window parameters every controller starts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WindowParams {
    pub(crate) initial_window: u64,
    pub(crate) minimum_window: u64,
    pub(crate) max_datagram_size: u64,
}

impl WindowParams {
    /// Ten datagrams of `mds` bytes to start with and two at least (the tests' usual set-up).
    #[cfg(test)]
    pub(crate) fn of_datagrams(mds: u64) -> Self {
        WindowParams {
            initial_window: 10 * mds,
            minimum_window: 2 * mds,
            max_datagram_size: mds,
        }
    }

    /// The parameters for a new datagram size and window floor (sanitised like a config's).
    pub(crate) fn resized(self, max_datagram_size: u64, minimum_window: u64) -> Self {
        WindowParams {
            initial_window: self.initial_window,
            minimum_window: minimum_window.max(1),
            max_datagram_size: max_datagram_size.max(1),
        }
    }

    fn from_config(config: &CongestionConfig) -> Self {
        let max_datagram_size = config.max_datagram_size.max(1);
        let minimum_window = config.minimum_window.max(1);
        WindowParams {
            initial_window: config.initial_window.max(minimum_window),
            minimum_window,
            max_datagram_size,
        }
    }
}

/// One of braid's controllers; the session holds one per path and dispatches statically.
#[derive(Clone, Debug)]
pub enum AnyController {
    /// NewReno.
    NewReno(NewReno),
    /// CUBIC.
    Cubic(Cubic),
    /// BBR (boxed: its filters make it several times larger than the others).
    Bbr(Box<Bbr>),
    /// LIA or OLIA.
    Coupled(Coupled),
}

impl AnyController {
    /// Puts back `before`, a copy of this controller taken before a window reduction whose
    /// losses all proved spurious (`session::reorder`). A coupled controller keeps the bytes
    /// acknowledged since, and its latest coupling ([`Coupled::undone_to`]).
    pub(crate) fn undo_to(&mut self, before: &AnyController) {
        *self = match (&*self, before) {
            (AnyController::Coupled(now), AnyController::Coupled(then)) => {
                AnyController::Coupled(now.undone_to(then))
            }
            _ => before.clone(),
        };
    }

    /// Which algorithm this is.
    pub fn algorithm(&self) -> CongestionAlgorithm {
        match self {
            AnyController::NewReno(_) => CongestionAlgorithm::NewReno,
            AnyController::Cubic(_) => CongestionAlgorithm::Cubic,
            AnyController::Bbr(_) => CongestionAlgorithm::Bbr,
            AnyController::Coupled(c) => match c.kind() {
                CoupledKind::Lia => CongestionAlgorithm::Lia,
                CoupledKind::Olia => CongestionAlgorithm::Olia,
            },
        }
    }

    /// What a coupled controller contributes to its session's [`Coupling`], given its path's
    /// smoothed RTT; `None` for the uncoupled controllers.
    pub fn coupling_input(&self, srtt: std::time::Duration) -> Option<CouplingInput> {
        match self {
            AnyController::Coupled(c) => Some(CouplingInput {
                window: c.window(),
                srtt,
                loss_interval: c.loss_interval(),
            }),
            _ => None,
        }
    }

    /// The slow-start threshold, bytes (`u64::MAX` until the first congestion event; always for
    /// BBR, which has none).
    pub fn ssthresh(&self) -> u64 {
        match self {
            AnyController::NewReno(c) => c.ssthresh(),
            AnyController::Cubic(c) => c.ssthresh(),
            AnyController::Bbr(_) => u64::MAX,
            AnyController::Coupled(c) => c.ssthresh(),
        }
    }

    /// Continues where `from`, the path's previous controller, left off: a window-based
    /// controller takes its window (at least its own floor) and its slow-start threshold (BBR's
    /// window counts as one: congestion avoidance from there, not slow start above two BDPs);
    /// BBR starts afresh (its model is measured, not inherited). So a controller switched
    /// mid-transfer neither drops the path to the initial window nor slow-starts again.
    pub fn take_over(&mut self, from: &AnyController) {
        let window = from.window();
        let ssthresh = match from {
            AnyController::Bbr(_) => window,
            other => other.ssthresh(),
        };
        match self {
            AnyController::NewReno(c) => c.resume(window, ssthresh),
            AnyController::Cubic(c) => c.resume(window, ssthresh),
            AnyController::Coupled(c) => c.resume(window, ssthresh),
            AnyController::Bbr(_) => {}
        }
    }

    /// Whether an ACK for a packet sent at `sent_time` falls in the current recovery period
    /// (and so neither grows nor shrinks the window).
    pub fn in_recovery(&self, sent_time: Timestamp) -> bool {
        match self {
            AnyController::NewReno(c) => c.in_recovery(sent_time),
            AnyController::Cubic(c) => c.in_recovery(sent_time),
            AnyController::Bbr(c) => c.in_recovery(sent_time),
            AnyController::Coupled(c) => c.in_recovery(sent_time),
        }
    }

    /// The window floor this controller was built with, bytes.
    pub fn minimum_window(&self) -> u64 {
        match self {
            AnyController::NewReno(c) => c.minimum_window(),
            AnyController::Cubic(c) => c.minimum_window(),
            AnyController::Bbr(c) => c.minimum_window(),
            AnyController::Coupled(c) => c.minimum_window(),
        }
    }
}

impl Controller for AnyController {
    fn on_sent(&mut self, now: Timestamp, bytes: u64, bytes_in_flight: u64) {
        match self {
            AnyController::NewReno(c) => c.on_sent(now, bytes, bytes_in_flight),
            AnyController::Cubic(c) => c.on_sent(now, bytes, bytes_in_flight),
            AnyController::Bbr(c) => c.on_sent(now, bytes, bytes_in_flight),
            AnyController::Coupled(c) => c.on_sent(now, bytes, bytes_in_flight),
        }
    }

    fn on_ack(
        &mut self,
        now: Timestamp,
        sent_time: Timestamp,
        bytes: u64,
        rtt: &RttEstimator,
        app_limited: bool,
    ) {
        match self {
            AnyController::NewReno(c) => c.on_ack(now, sent_time, bytes, rtt, app_limited),
            AnyController::Cubic(c) => c.on_ack(now, sent_time, bytes, rtt, app_limited),
            AnyController::Bbr(c) => c.on_ack(now, sent_time, bytes, rtt, app_limited),
            AnyController::Coupled(c) => c.on_ack(now, sent_time, bytes, rtt, app_limited),
        }
    }

    fn on_rtt_sample(&mut self, now: Timestamp, largest_sent: Timestamp, sample: Duration) {
        match self {
            AnyController::NewReno(c) => c.on_rtt_sample(now, largest_sent, sample),
            AnyController::Cubic(c) => c.on_rtt_sample(now, largest_sent, sample),
            AnyController::Bbr(c) => c.on_rtt_sample(now, largest_sent, sample),
            AnyController::Coupled(c) => c.on_rtt_sample(now, largest_sent, sample),
        }
    }

    fn on_ack_event(&mut self, now: Timestamp, sample: &RateSample, rtt: &RttEstimator) {
        match self {
            AnyController::NewReno(c) => c.on_ack_event(now, sample, rtt),
            AnyController::Cubic(c) => c.on_ack_event(now, sample, rtt),
            AnyController::Bbr(c) => c.on_ack_event(now, sample, rtt),
            AnyController::Coupled(c) => c.on_ack_event(now, sample, rtt),
        }
    }

    fn on_coupling(&mut self, coupling: &Coupling) {
        if let AnyController::Coupled(c) = self {
            c.on_coupling(coupling);
        }
    }

    fn on_congestion_event(
        &mut self,
        now: Timestamp,
        sent_time: Timestamp,
        persistent: bool,
        lost_bytes: u64,
    ) {
        match self {
            AnyController::NewReno(c) => {
                c.on_congestion_event(now, sent_time, persistent, lost_bytes)
            }
            AnyController::Cubic(c) => {
                c.on_congestion_event(now, sent_time, persistent, lost_bytes)
            }
            AnyController::Bbr(c) => c.on_congestion_event(now, sent_time, persistent, lost_bytes),
            AnyController::Coupled(c) => {
                c.on_congestion_event(now, sent_time, persistent, lost_bytes)
            }
        }
    }

    fn window(&self) -> u64 {
        match self {
            AnyController::NewReno(c) => c.window(),
            AnyController::Cubic(c) => c.window(),
            AnyController::Bbr(c) => c.window(),
            AnyController::Coupled(c) => c.window(),
        }
    }

    fn pacing_rate(&self) -> Option<u64> {
        match self {
            AnyController::NewReno(_) | AnyController::Cubic(_) | AnyController::Coupled(_) => None,
            AnyController::Bbr(c) => c.pacing_rate(),
        }
    }

    fn on_max_datagram_size(&mut self, max_datagram_size: u64, minimum_window: u64) {
        match self {
            AnyController::NewReno(c) => c.on_max_datagram_size(max_datagram_size, minimum_window),
            AnyController::Cubic(c) => c.on_max_datagram_size(max_datagram_size, minimum_window),
            AnyController::Bbr(c) => c.on_max_datagram_size(max_datagram_size, minimum_window),
            AnyController::Coupled(c) => c.on_max_datagram_size(max_datagram_size, minimum_window),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `take_over`: window and slow-start threshold carried into every window-based controller;
    /// BBR's window counts as a threshold; BBR itself starts afresh; the floor holds.
    #[test]
    fn a_controller_takes_over_the_window_and_threshold_of_the_one_before() {
        let of = |a: CongestionAlgorithm| CongestionConfig::with_datagram_size(a, 1200).build();
        let mut reno = of(CongestionAlgorithm::NewReno);
        let AnyController::NewReno(r) = &mut reno else {
            unreachable!()
        };
        r.resume(60_000, 48_000);
        for to in [
            CongestionAlgorithm::Cubic,
            CongestionAlgorithm::NewReno,
            CongestionAlgorithm::Lia,
            CongestionAlgorithm::Olia,
        ] {
            let mut cc = of(to);
            cc.take_over(&reno);
            assert_eq!((cc.window(), cc.ssthresh()), (60_000, 48_000), "{to}");
        }
        let mut cubic = of(CongestionAlgorithm::Cubic);
        cubic.take_over(&reno);
        let AnyController::Cubic(c) = &cubic else {
            unreachable!()
        };
        // CUBIC's new curve has its plateau at the window taken over.
        assert_eq!(c.w_max(), Some(60_000));
        // In slow start still: it stays there, with no plateau.
        let fresh = of(CongestionAlgorithm::NewReno);
        let mut cubic = of(CongestionAlgorithm::Cubic);
        cubic.take_over(&fresh);
        let AnyController::Cubic(c) = &cubic else {
            unreachable!()
        };
        assert_eq!((c.ssthresh(), c.w_max()), (u64::MAX, None));
        // From BBR: its window, as the threshold too.
        let bbr = of(CongestionAlgorithm::Bbr);
        let mut cc = of(CongestionAlgorithm::NewReno);
        cc.take_over(&bbr);
        assert_eq!((cc.window(), cc.ssthresh()), (bbr.window(), bbr.window()));
        // Into BBR: nothing taken.
        let mut into = of(CongestionAlgorithm::Bbr);
        into.take_over(&reno);
        assert_eq!(into.window(), bbr.window());
        // The floor holds.
        let AnyController::NewReno(r) = &mut reno else {
            unreachable!()
        };
        r.resume(1, 1);
        assert_eq!(reno.window(), 2400);
    }

    #[test]
    fn algorithm_names_parse_case_insensitively_and_round_trip() {
        for algorithm in CongestionAlgorithm::ALL {
            assert_eq!(algorithm.to_string().parse(), Ok(algorithm));
            assert_eq!(algorithm.name().to_uppercase().parse(), Ok(algorithm));
        }
        assert_eq!(" NewReno ".parse(), Ok(CongestionAlgorithm::NewReno));
        assert_eq!("new-reno".parse(), Ok(CongestionAlgorithm::NewReno));
        assert_eq!("CUBIC".parse(), Ok(CongestionAlgorithm::Cubic));
        assert_eq!("OLIA".parse(), Ok(CongestionAlgorithm::Olia));
        assert!(CongestionAlgorithm::Lia.is_coupled() && !CongestionAlgorithm::Cubic.is_coupled());
    }

    #[test]
    fn unknown_algorithm_error_names_the_input() {
        let err = "bbr2".parse::<CongestionAlgorithm>().unwrap_err();
        assert_eq!(err.name, "bbr2");
        assert!(err.to_string().contains("`bbr2`"), "{err}");
        assert!(err.to_string().contains("cubic"), "{err}");
    }

    #[test]
    fn defaults_follow_rfc_9002() {
        let config = CongestionConfig::default();
        assert_eq!(config.algorithm, CongestionAlgorithm::Cubic);
        assert_eq!(config.max_datagram_size, 1200);
        assert_eq!(config.initial_window, 12_000);
        assert_eq!(config.minimum_window, 2_400);
        assert_eq!(config.validate(), Ok(()));
        // Large datagrams: the 14720-byte cap wins over 10 * mds.
        let jumbo = CongestionConfig::with_datagram_size(CongestionAlgorithm::NewReno, 1500);
        assert_eq!(jumbo.initial_window, 14_720);
        assert_eq!(jumbo.minimum_window, 3_000);
        // Huge datagrams: 2 * mds wins.
        let huge = CongestionConfig::with_datagram_size(CongestionAlgorithm::NewReno, 9000);
        assert_eq!(huge.initial_window, 18_000);
    }

    #[test]
    fn resized_keeps_the_windows_in_datagrams() {
        let config = CongestionConfig::default();
        let small = config.resized(400);
        assert_eq!(small.max_datagram_size, 400);
        assert_eq!(small.minimum_window, 800);
        assert_eq!(small.initial_window, 4_000);
        assert_eq!(small.validate(), Ok(()));
        let large = small.resized(1500);
        assert_eq!(
            (large.minimum_window, large.initial_window),
            (3_000, 15_000)
        );
        // Back to where it started, exactly.
        assert_eq!(large.resized(1200), config);
        // A floor below one datagram is raised to one.
        let odd = CongestionConfig {
            minimum_window: 1,
            initial_window: 1,
            ..config
        };
        assert_eq!(odd.resized(1500).validate(), Ok(()));
    }

    #[test]
    fn build_picks_the_algorithm_and_starts_at_the_initial_window() {
        for algorithm in CongestionAlgorithm::ALL {
            let config = CongestionConfig::with_datagram_size(algorithm, 1200);
            let controller = config.build();
            assert_eq!(controller.algorithm(), algorithm);
            assert_eq!(controller.window(), 12_000);
            // BBR's floor is four datagrams (BBRMinPipeCwnd), the others' two.
            let floor = if algorithm == CongestionAlgorithm::Bbr {
                4_800
            } else {
                2_400
            };
            assert_eq!(controller.minimum_window(), floor);
            assert_eq!(controller.ssthresh(), u64::MAX);
            assert_eq!(controller.pacing_rate(), None);
            assert!(!controller.in_recovery(Timestamp::ZERO));
        }
    }

    #[test]
    fn validate_names_the_bad_field_and_build_clamps_it() {
        let mut config = CongestionConfig {
            max_datagram_size: 0,
            ..CongestionConfig::default()
        };
        assert_eq!(
            config.validate(),
            Err(CongestionConfigError::ZeroDatagramSize(0))
        );
        config.max_datagram_size = 1200;
        config.minimum_window = 100;
        let err = config.validate().unwrap_err();
        assert!(err.to_string().contains("minimum_window 100"), "{err}");
        config.minimum_window = 2400;
        config.initial_window = 1000;
        let err = config.validate().unwrap_err();
        assert!(err.to_string().contains("initial_window 1000"), "{err}");
        assert_eq!(config.build().window(), 2400);
        let zero = CongestionConfig {
            algorithm: CongestionAlgorithm::Cubic,
            initial_window: 0,
            minimum_window: 0,
            max_datagram_size: 0,
        };
        let mut controller = zero.build();
        assert_eq!(controller.window(), 1);
        let rtt = RttEstimator::new(std::time::Duration::from_millis(10));
        controller.on_congestion_event(Timestamp::ZERO, Timestamp::ZERO, false, 1);
        controller.on_ack(
            Timestamp::from_secs_f64(1.0),
            Timestamp::from_millis(1),
            1,
            &rtt,
            false,
        );
        assert!(controller.window() >= 1);
    }
}
