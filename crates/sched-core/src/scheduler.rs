//! The scheduler contract: the [`Scheduler`] trait, its feedback types, the name-selectable
//! [`SchedulerKind`], per-scheduler configuration and the statically dispatched
//! [`AnyScheduler`].

use std::fmt;
use std::str::FromStr;

use crate::decision::Decision;
use crate::packet::PacketMeta;
use crate::path::{MAX_PATHS, PathId, PathState, PathView};
use crate::sched::blest::{Blest, BlestConfig};
use crate::sched::damps::{Damps, DampsConfig};
use crate::sched::ecf::{Ecf, EcfConfig};
use crate::sched::edar::{Edar, EdarConfig};
use crate::sched::edf::{Edf, EdfConfig};
use crate::sched::falcon::{Falcon, FalconConfig};
use crate::sched::minrtt::{MinRtt, MinRttConfig};
use crate::sched::olms::{Olms, OlmsConfig};
use crate::sched::peekaboo::{Peekaboo, PeekabooConfig};
use crate::sched::redundant::{Redundant, RedundantConfig};
use crate::sched::rr::{RoundRobin, RoundRobinConfig};
use crate::sched::wrr::{WeightedRoundRobin, WeightedRoundRobinConfig};
use crate::time::Timestamp;

/// What the session learns when a packet sent on a path is acknowledged.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AckInfo {
    /// Payload bytes newly acknowledged by this ACK on this path.
    pub bytes: u64,
    /// The RTT sample the ACK yielded, µs (ACK delay already subtracted).
    pub rtt_us: u32,
    /// The one-way delay estimate after this ACK, µs (see [`PathView::owd_us`]).
    pub owd_us: u32,
}

/// Deadline counts of the datagrams that arrived on one path, in a [`ReceiverReport`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PathDeadlines {
    /// Deadline-carrying packets that arrived on the path within their budget.
    pub met: u32,
    /// Deadline-carrying packets that arrived on the path.
    pub total: u32,
}

impl PathDeadlines {
    /// Counts one arrival, met or missed (saturating).
    pub fn count(&mut self, met: bool) {
        self.total = self.total.saturating_add(1);
        if met {
            self.met = self.met.saturating_add(1);
        }
    }
}

/// The receiver's periodic report, carried back in ACK frames: what actually arrived and how
/// useful it was. Learning schedulers turn it into rewards (EdAR's G − αV_w − βV_o, DaMPS's
/// deadline meeting ratio).
///
/// The deadline counts come twice: session-wide (`deadline_met` / `deadline_total`, which the
/// sender also grows by the datagrams it dropped itself before any path carried them) and per
/// path of arrival (`path_deadlines`, receiver counts only), because DaMPS's reward (eq. 3, 5)
/// is a per-path deadline meeting ratio.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ReceiverReport {
    /// Length of the interval the report covers, µs.
    pub interval_us: u32,
    /// Flow bytes delivered in order to the application in the interval (goodput).
    pub delivered_bytes: u64,
    /// Bytes that arrived more than once (wasted redundancy).
    pub duplicate_bytes: u64,
    /// Packets that arrived out of order.
    pub ooo_packets: u32,
    /// Deadline-carrying packets that arrived within their budget.
    pub deadline_met: u32,
    /// Deadline-carrying packets received or known dropped in the interval.
    pub deadline_total: u32,
    /// Per path id (indexed by [`PathId::index`]): deadline-carrying packets that arrived on
    /// that path in the interval, met and total. Drops at the sender are in no path's count.
    pub path_deadlines: [PathDeadlines; MAX_PATHS],
}

impl ReceiverReport {
    /// The deadline counts of packets that arrived on `path` (zero for an id out of range).
    pub fn path_deadlines(&self, path: PathId) -> PathDeadlines {
        self.path_deadlines
            .get(path.index())
            .copied()
            .unwrap_or_default()
    }

    /// Counts a deadline-carrying packet that arrived on `path`, met or missed: the
    /// session-wide counts and, for an id below [`MAX_PATHS`], the path's own.
    pub fn count_deadline(&mut self, path: PathId, met: bool) {
        self.deadline_total = self.deadline_total.saturating_add(1);
        self.deadline_met = self.deadline_met.saturating_add(u32::from(met));
        if let Some(p) = self.path_deadlines.get_mut(path.index()) {
            p.count(met);
        }
    }
}

/// A packet scheduler: picks the path(s) for each packet and learns from feedback.
///
/// Implementations must not allocate, log, read a clock or block in any method.
pub trait Scheduler {
    /// Decides where the packet goes. `paths` holds one view per joined path.
    fn select(&mut self, paths: &[PathView], packet: &PacketMeta, now: Timestamp) -> Decision;

    /// Decides for a batch of packets at once (DaMPS); `decisions[i]` answers `packets[i]`.
    /// The default decides packet by packet on the same views.
    fn select_batch(
        &mut self,
        paths: &[PathView],
        packets: &[PacketMeta],
        decisions: &mut [Decision],
        now: Timestamp,
    ) {
        for (packet, decision) in packets.iter().zip(decisions.iter_mut()) {
            *decision = self.select(paths, packet, now);
        }
    }

    /// A packet was handed to `path` (once per copy).
    fn on_sent(&mut self, _path: PathId, _packet: &PacketMeta, _now: Timestamp) {}

    /// Packets on `path` were acknowledged.
    fn on_ack(&mut self, _path: PathId, _ack: &AckInfo, _now: Timestamp) {}

    /// `bytes` sent on `path` were declared lost.
    fn on_loss(&mut self, _path: PathId, _bytes: u64, _now: Timestamp) {}

    /// `path` joined, failed, came back or changed tier.
    fn on_path_state(&mut self, _path: PathId, _state: PathState, _now: Timestamp) {}

    /// The receiver's periodic report arrived.
    fn on_report(&mut self, _report: &ReceiverReport, _now: Timestamp) {}

    /// True while the scheduler wants the session's redundant buffer linked (EdAR's redundant
    /// mode, §IV-A): whenever a path has window room, before new data, the session sends on it a
    /// copy of the oldest stream packet still in flight on another path and not yet copied onto
    /// it (each packet at most once per path; copies are never copied). The session asks before
    /// each packet it builds; the answer may change at any call. Default: never.
    fn link_redundant_buffer(&self) -> bool {
        false
    }
}

/// One tunable parameter of a scheduler, for `braid schedulers` and config validation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ParamInfo {
    /// Name as written in config.
    pub name: &'static str,
    /// Default value.
    pub default: f64,
    /// What it does, with its unit.
    pub description: &'static str,
}

/// A scheduler's entry in the catalogue.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SchedulerInfo {
    /// The scheduler.
    pub kind: SchedulerKind,
    /// One line on what it does.
    pub summary: &'static str,
    /// Where the algorithm comes from.
    pub source: &'static str,
    /// Its parameters (empty when it has none).
    pub params: &'static [ParamInfo],
}

/// A parameter name or value a scheduler does not accept.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ParamError {
    /// The scheduler has no parameter of this name.
    #[error("scheduler `{scheduler}` has no parameter `{name}` (known: {known})")]
    Unknown {
        /// The scheduler.
        scheduler: &'static str,
        /// The offending name.
        name: String,
        /// The accepted names, comma-separated.
        known: String,
    },
    /// The value is outside the parameter's range.
    #[error("scheduler parameter `{name}` = {value}: {expected}")]
    OutOfRange {
        /// The parameter.
        name: &'static str,
        /// The offending value.
        value: f64,
        /// What is accepted.
        expected: &'static str,
    },
}

/// The built-in schedulers, selectable by name (case-insensitive) in config and on the CLI.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SchedulerKind {
    /// Lowest smoothed RTT among paths with window headroom.
    MinRtt,
    /// Round-robin over paths with window headroom.
    RoundRobin,
    /// Smooth weighted round-robin by each link's configured weight.
    WeightedRoundRobin,
    /// Earliest Completion First (Linux MPTCP v0.95 `mptcp_ecf.c`).
    Ecf,
    /// Blocking estimation (Linux MPTCP v0.95 `mptcp_blest.c`).
    Blest,
    /// Every packet on every path with room (ReMP).
    Redundant,
    /// Tightest deadline first on the lowest-RTT path that meets it.
    Edf,
    /// LinUCB wait-or-send bandit with stochastic adjustment (Peekaboo).
    Peekaboo,
    /// Thompson sampling + constrained LP + dependent rounding (OLMS).
    Olms,
    /// Batch deadline LP + UCB fluctuation monitor + EDF fail-safe (DaMPS).
    Damps,
    /// DQN choosing normal or redundant transmission per min-RTT interval (EdAR).
    Edar,
    /// DQN over paths from offline meta-models, fine-tuned after detected changes (FALCON).
    Falcon,
}

impl SchedulerKind {
    /// Every built-in scheduler, in catalogue order.
    pub const ALL: &'static [SchedulerKind] = &[
        SchedulerKind::MinRtt,
        SchedulerKind::RoundRobin,
        SchedulerKind::WeightedRoundRobin,
        SchedulerKind::Ecf,
        SchedulerKind::Blest,
        SchedulerKind::Redundant,
        SchedulerKind::Edf,
        SchedulerKind::Peekaboo,
        SchedulerKind::Olms,
        SchedulerKind::Damps,
        SchedulerKind::Edar,
        SchedulerKind::Falcon,
    ];

    /// The name used in config and on the CLI.
    pub fn name(self) -> &'static str {
        match self {
            SchedulerKind::MinRtt => "minrtt",
            SchedulerKind::RoundRobin => "rr",
            SchedulerKind::WeightedRoundRobin => "wrr",
            SchedulerKind::Ecf => "ecf",
            SchedulerKind::Blest => "blest",
            SchedulerKind::Redundant => "redundant",
            SchedulerKind::Edf => "edf",
            SchedulerKind::Peekaboo => "peekaboo",
            SchedulerKind::Olms => "olms",
            SchedulerKind::Damps => "damps",
            SchedulerKind::Edar => "edar",
            SchedulerKind::Falcon => "falcon",
        }
    }

    /// The scheduler's catalogue entry.
    pub fn info(self) -> SchedulerInfo {
        match self {
            SchedulerKind::MinRtt => MinRtt::INFO,
            SchedulerKind::RoundRobin => RoundRobin::INFO,
            SchedulerKind::WeightedRoundRobin => WeightedRoundRobin::INFO,
            SchedulerKind::Ecf => Ecf::INFO,
            SchedulerKind::Blest => Blest::INFO,
            SchedulerKind::Redundant => Redundant::INFO,
            SchedulerKind::Edf => Edf::INFO,
            SchedulerKind::Peekaboo => Peekaboo::INFO,
            SchedulerKind::Olms => Olms::INFO,
            SchedulerKind::Damps => Damps::INFO,
            SchedulerKind::Edar => Edar::INFO,
            SchedulerKind::Falcon => Falcon::INFO,
        }
    }
}

impl fmt::Display for SchedulerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A scheduler name that is not built in.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown scheduler `{name}` (expected one of: {known})")]
pub struct UnknownScheduler {
    /// The offending name.
    pub name: String,
    /// The accepted names, comma-separated.
    pub known: String,
}

impl FromStr for SchedulerKind {
    type Err = UnknownScheduler;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.trim();
        SchedulerKind::ALL
            .iter()
            .copied()
            .find(|k| k.name().eq_ignore_ascii_case(wanted))
            .ok_or_else(|| UnknownScheduler {
                name: s.to_owned(),
                known: known_names(),
            })
    }
}

fn known_names() -> String {
    SchedulerKind::ALL
        .iter()
        .map(|k| k.name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Configuration of one scheduler; builds it with [`SchedulerConfig::build`].
#[derive(Clone, Debug, PartialEq)]
pub enum SchedulerConfig {
    /// See [`MinRtt`].
    MinRtt(MinRttConfig),
    /// See [`RoundRobin`].
    RoundRobin(RoundRobinConfig),
    /// See [`WeightedRoundRobin`].
    WeightedRoundRobin(WeightedRoundRobinConfig),
    /// See [`Ecf`].
    Ecf(EcfConfig),
    /// See [`Blest`].
    Blest(BlestConfig),
    /// See [`Redundant`].
    Redundant(RedundantConfig),
    /// See [`Edf`].
    Edf(EdfConfig),
    /// See [`Peekaboo`].
    Peekaboo(PeekabooConfig),
    /// See [`Olms`].
    Olms(OlmsConfig),
    /// See [`Damps`].
    Damps(DampsConfig),
    /// See [`Edar`].
    Edar(EdarConfig),
    /// See [`Falcon`].
    Falcon(FalconConfig),
}

impl SchedulerConfig {
    /// The default configuration of `kind`.
    pub fn new(kind: SchedulerKind) -> Self {
        match kind {
            SchedulerKind::MinRtt => SchedulerConfig::MinRtt(MinRttConfig::default()),
            SchedulerKind::RoundRobin => SchedulerConfig::RoundRobin(RoundRobinConfig::default()),
            SchedulerKind::WeightedRoundRobin => {
                SchedulerConfig::WeightedRoundRobin(WeightedRoundRobinConfig::default())
            }
            SchedulerKind::Ecf => SchedulerConfig::Ecf(EcfConfig::default()),
            SchedulerKind::Blest => SchedulerConfig::Blest(BlestConfig::default()),
            SchedulerKind::Redundant => SchedulerConfig::Redundant(RedundantConfig::default()),
            SchedulerKind::Edf => SchedulerConfig::Edf(EdfConfig::default()),
            SchedulerKind::Peekaboo => SchedulerConfig::Peekaboo(PeekabooConfig::default()),
            SchedulerKind::Olms => SchedulerConfig::Olms(OlmsConfig::default()),
            SchedulerKind::Damps => SchedulerConfig::Damps(DampsConfig::default()),
            SchedulerKind::Edar => SchedulerConfig::Edar(EdarConfig::default()),
            SchedulerKind::Falcon => SchedulerConfig::Falcon(FalconConfig::default()),
        }
    }

    /// Which scheduler this configures.
    pub fn kind(&self) -> SchedulerKind {
        match self {
            SchedulerConfig::MinRtt(_) => SchedulerKind::MinRtt,
            SchedulerConfig::RoundRobin(_) => SchedulerKind::RoundRobin,
            SchedulerConfig::WeightedRoundRobin(_) => SchedulerKind::WeightedRoundRobin,
            SchedulerConfig::Ecf(_) => SchedulerKind::Ecf,
            SchedulerConfig::Blest(_) => SchedulerKind::Blest,
            SchedulerConfig::Redundant(_) => SchedulerKind::Redundant,
            SchedulerConfig::Edf(_) => SchedulerKind::Edf,
            SchedulerConfig::Peekaboo(_) => SchedulerKind::Peekaboo,
            SchedulerConfig::Olms(_) => SchedulerKind::Olms,
            SchedulerConfig::Damps(_) => SchedulerKind::Damps,
            SchedulerConfig::Edar(_) => SchedulerKind::Edar,
            SchedulerConfig::Falcon(_) => SchedulerKind::Falcon,
        }
    }

    /// Sets the parameter `name` (as listed in [`SchedulerInfo::params`]) to `value`.
    pub fn set(&mut self, name: &str, value: f64) -> Result<(), ParamError> {
        let info = self.kind().info();
        let unknown = || ParamError::Unknown {
            scheduler: info.kind.name(),
            name: name.to_owned(),
            known: info
                .params
                .iter()
                .map(|p| p.name)
                .collect::<Vec<_>>()
                .join(", "),
        };
        let known = match self {
            SchedulerConfig::Ecf(c) => c.set(name, value)?,
            SchedulerConfig::Blest(c) => c.set(name, value)?,
            SchedulerConfig::Peekaboo(c) => c.set(name, value)?,
            SchedulerConfig::Olms(c) => c.set(name, value)?,
            SchedulerConfig::Damps(c) => c.set(name, value)?,
            SchedulerConfig::Edar(c) => c.set(name, value)?,
            SchedulerConfig::Falcon(c) => c.set(name, value)?,
            SchedulerConfig::MinRtt(_)
            | SchedulerConfig::RoundRobin(_)
            | SchedulerConfig::WeightedRoundRobin(_)
            | SchedulerConfig::Redundant(_)
            | SchedulerConfig::Edf(_) => false,
        };
        if known { Ok(()) } else { Err(unknown()) }
    }

    /// Checks the parameters together, once all are set (a pair that must be ordered, say);
    /// [`SchedulerConfig::set`] checks each alone.
    pub fn validate(&self) -> Result<(), ParamError> {
        match self {
            SchedulerConfig::Blest(c) => c.validate(),
            _ => Ok(()),
        }
    }

    /// Builds the scheduler. Allocation happens here, never per packet.
    pub fn build(&self) -> AnyScheduler {
        match self {
            SchedulerConfig::MinRtt(c) => AnyScheduler::MinRtt(MinRtt::new(c)),
            SchedulerConfig::RoundRobin(c) => AnyScheduler::RoundRobin(RoundRobin::new(c)),
            SchedulerConfig::WeightedRoundRobin(c) => {
                AnyScheduler::WeightedRoundRobin(WeightedRoundRobin::new(c))
            }
            SchedulerConfig::Ecf(c) => AnyScheduler::Ecf(Ecf::new(c)),
            SchedulerConfig::Blest(c) => AnyScheduler::Blest(Blest::new(c)),
            SchedulerConfig::Redundant(c) => AnyScheduler::Redundant(Redundant::new(c)),
            SchedulerConfig::Edf(c) => AnyScheduler::Edf(Edf::new(c)),
            SchedulerConfig::Peekaboo(c) => AnyScheduler::Peekaboo(Box::new(Peekaboo::new(c))),
            SchedulerConfig::Olms(c) => AnyScheduler::Olms(Box::new(Olms::new(c))),
            SchedulerConfig::Damps(c) => AnyScheduler::Damps(Box::new(Damps::new(c))),
            SchedulerConfig::Edar(c) => AnyScheduler::Edar(Box::new(Edar::new(c))),
            SchedulerConfig::Falcon(c) => AnyScheduler::Falcon(Box::new(Falcon::new(c))),
        }
    }
}

/// `value` when it is finite and within `[low, high]`, else the error naming `name`.
pub(crate) fn in_range(
    name: &'static str,
    value: f64,
    low: f64,
    high: f64,
    expected: &'static str,
) -> Result<f64, ParamError> {
    if value.is_finite() && (low..=high).contains(&value) {
        Ok(value)
    } else {
        Err(ParamError::OutOfRange {
            name,
            value,
            expected,
        })
    }
}

/// Every built-in scheduler behind one enum, so the per-packet call is a `match`, not a
/// virtual call.
#[derive(Clone, Debug)]
pub enum AnyScheduler {
    /// See [`MinRtt`].
    MinRtt(MinRtt),
    /// See [`RoundRobin`].
    RoundRobin(RoundRobin),
    /// See [`WeightedRoundRobin`].
    WeightedRoundRobin(WeightedRoundRobin),
    /// See [`Ecf`].
    Ecf(Ecf),
    /// See [`Blest`].
    Blest(Blest),
    /// See [`Redundant`].
    Redundant(Redundant),
    /// See [`Edf`].
    Edf(Edf),
    /// See [`Peekaboo`] (boxed: its learned matrices and pending decisions are a few kB, and
    /// the box is allocated once when the scheduler is built).
    Peekaboo(Box<Peekaboo>),
    /// See [`Olms`] (boxed: its posteriors are a few kB, allocated once when built).
    Olms(Box<Olms>),
    /// See [`Damps`] (boxed: its bandits and LP buffer are a few kB, allocated once when built).
    Damps(Box<Damps>),
    /// See [`Edar`] (boxed: its state history and network scratch are a few kB).
    Edar(Box<Edar>),
    /// See [`Falcon`] (boxed: its change detectors and network scratch are allocated once).
    Falcon(Box<Falcon>),
}

impl AnyScheduler {
    /// Builds `kind` with its default configuration.
    pub fn with_defaults(kind: SchedulerKind) -> Self {
        SchedulerConfig::new(kind).build()
    }

    /// Which scheduler this is.
    pub fn kind(&self) -> SchedulerKind {
        match self {
            AnyScheduler::MinRtt(_) => SchedulerKind::MinRtt,
            AnyScheduler::RoundRobin(_) => SchedulerKind::RoundRobin,
            AnyScheduler::WeightedRoundRobin(_) => SchedulerKind::WeightedRoundRobin,
            AnyScheduler::Ecf(_) => SchedulerKind::Ecf,
            AnyScheduler::Blest(_) => SchedulerKind::Blest,
            AnyScheduler::Redundant(_) => SchedulerKind::Redundant,
            AnyScheduler::Edf(_) => SchedulerKind::Edf,
            AnyScheduler::Peekaboo(_) => SchedulerKind::Peekaboo,
            AnyScheduler::Olms(_) => SchedulerKind::Olms,
            AnyScheduler::Damps(_) => SchedulerKind::Damps,
            AnyScheduler::Edar(_) => SchedulerKind::Edar,
            AnyScheduler::Falcon(_) => SchedulerKind::Falcon,
        }
    }

    /// The version of the learned weights a learned scheduler decides with (`None` for the
    /// others, and for a learned one without a weight slot); `braid status` shows it.
    pub fn model_version(&self) -> Option<u64> {
        match self {
            AnyScheduler::Edar(s) => s.weights_version(),
            AnyScheduler::Falcon(s) => s.weights_version(),
            _ => None,
        }
    }
}

/// Forwards one `Scheduler` method to whichever variant is inside.
macro_rules! dispatch {
    ($self:ident, $s:ident => $call:expr) => {
        match $self {
            AnyScheduler::MinRtt($s) => $call,
            AnyScheduler::RoundRobin($s) => $call,
            AnyScheduler::WeightedRoundRobin($s) => $call,
            AnyScheduler::Ecf($s) => $call,
            AnyScheduler::Blest($s) => $call,
            AnyScheduler::Redundant($s) => $call,
            AnyScheduler::Edf($s) => $call,
            AnyScheduler::Peekaboo($s) => $call,
            AnyScheduler::Olms($s) => $call,
            AnyScheduler::Damps($s) => $call,
            AnyScheduler::Edar($s) => $call,
            AnyScheduler::Falcon($s) => $call,
        }
    };
}

impl Scheduler for AnyScheduler {
    #[inline]
    fn select(&mut self, paths: &[PathView], packet: &PacketMeta, now: Timestamp) -> Decision {
        dispatch!(self, s => s.select(paths, packet, now))
    }

    fn select_batch(
        &mut self,
        paths: &[PathView],
        packets: &[PacketMeta],
        decisions: &mut [Decision],
        now: Timestamp,
    ) {
        dispatch!(self, s => s.select_batch(paths, packets, decisions, now))
    }

    fn on_sent(&mut self, path: PathId, packet: &PacketMeta, now: Timestamp) {
        dispatch!(self, s => s.on_sent(path, packet, now))
    }

    fn on_ack(&mut self, path: PathId, ack: &AckInfo, now: Timestamp) {
        dispatch!(self, s => s.on_ack(path, ack, now))
    }

    fn on_loss(&mut self, path: PathId, bytes: u64, now: Timestamp) {
        dispatch!(self, s => s.on_loss(path, bytes, now))
    }

    fn on_path_state(&mut self, path: PathId, state: PathState, now: Timestamp) {
        dispatch!(self, s => s.on_path_state(path, state, now))
    }

    fn on_report(&mut self, report: &ReceiverReport, now: Timestamp) {
        dispatch!(self, s => s.on_report(report, now))
    }

    #[inline]
    fn link_redundant_buffer(&self) -> bool {
        dispatch!(self, s => s.link_redundant_buffer())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_case_insensitively() {
        for &kind in SchedulerKind::ALL {
            assert_eq!(kind.name().parse::<SchedulerKind>(), Ok(kind));
            assert_eq!(
                kind.name().to_uppercase().parse::<SchedulerKind>(),
                Ok(kind)
            );
            assert_eq!(kind.info().kind, kind);
            assert_eq!(SchedulerConfig::new(kind).build().kind(), kind);
        }
        let err = "fastest".parse::<SchedulerKind>().unwrap_err();
        assert!(err.to_string().contains("fastest"));
        assert!(err.to_string().contains("minrtt"));
    }

    #[test]
    fn every_listed_parameter_is_settable_to_its_default() {
        for &kind in SchedulerKind::ALL {
            let mut config = SchedulerConfig::new(kind);
            for p in kind.info().params {
                config.set(p.name, p.default).unwrap();
            }
            assert_eq!(config, SchedulerConfig::new(kind), "{kind}");
        }
    }

    #[test]
    fn parameters_are_validated() {
        let mut ecf = SchedulerConfig::new(SchedulerKind::Ecf);
        ecf.set("beta", 0.5).unwrap();
        assert_eq!(ecf, SchedulerConfig::Ecf(EcfConfig { beta: 0.5 }));
        let err = ecf.set("beta", 1.5).unwrap_err();
        assert!(err.to_string().contains("beta") && err.to_string().contains("1.5"));
        assert!(ecf.set("beta", f64::NAN).is_err());
        let mut blest = SchedulerConfig::new(SchedulerKind::Blest);
        blest.set("max_lambda", 1.5).unwrap();
        assert!(blest.set("lambda", -1.0).is_err());
        let mut peekaboo = SchedulerConfig::new(SchedulerKind::Peekaboo);
        peekaboo.set("seed", 7.0).unwrap();
        assert!(peekaboo.set("seed", 7.5).is_err());
        let err = peekaboo.set("beta", 0.1).unwrap_err();
        assert!(err.to_string().contains("alpha, margin"));
    }

    #[test]
    fn unknown_parameter_is_named() {
        let mut config = SchedulerConfig::new(SchedulerKind::MinRtt);
        let err = config.set("beta", 0.25).unwrap_err();
        assert!(err.to_string().contains("beta"));
    }
}
