//! FALCON (Wu, Alay, Brunstrom, Caso, Ferlin, "FALCON: Fast and Accurate Multipath Scheduling
//! using Offline and Online Learning"): a DQN over paths whose weights start from offline
//! meta-models and are fine-tuned online after each detected change of network condition.
//!
//! The hot-path half of Alg. 1's online learning module lives here:
//! - **Execute(CurrentPolicy)**: the deployed MLP (§V-A: three ReLU hidden layers) scores each
//!   slot's path from the §IV-B state ([`state`]); the best sendable slot wins. With a learner
//!   attached, a fixed ε-greedy exploration (§IV-B, ε_s = 0.1 by default) picks a random
//!   sendable slot instead, from a seeded generator. With `choose_congested` (opt-in) the
//!   action space is §IV-B's, "appointing the path … regardless of the path's current congested
//!   status": the best (or random) slot among all usable paths, and a packet appointed to a path
//!   without room waits for it ([`Decision::Wait`], as ECF waits for its fast path) while that
//!   path has bytes in flight to free its window. Restricted to paths with room (the default),
//!   a policy can differ from minRTT only at the decisions where two paths have room
//!   ([`FalconStats::choices`]).
//! - **ChangeDetect()**: Bayesian online change-point detection ([`crate::changepoint`]) on each
//!   path's RTT samples and on its loss counts over groups of `loss_group` packets (§IV-A).
//!   With `start_change` (opt-in), the first path to collect [`START_CHANGE_SAMPLES`] RTT
//!   samples on a connection also declares a change, so that a learner fine-tunes the
//!   meta-model of the condition the connection starts in.
//! - **SelectMetaModel(R_S, Θ_S)**: on a change on a path, that path's coarse condition class
//!   (§V-A, 27 per path) picks the meta-model, which is deployed at once; the learner is told
//!   (a transition flagged `change`) and, after its K = 16-step fine-tuning from that
//!   meta-model, publishes the new policy through the weight slot (latest wins, never waits).
//!   The paper keys meta-models by the joint class of both paths (27² = 729); we key them by the
//!   class of the path whose condition changed (27), a choice that keeps offline training within
//!   this project's CPU budget and works for any number of paths.
//! - **Reward** (§IV-B: the throughput obtained): the bytes acknowledged on all paths per unit of
//!   time, measured over windows of at least 1 ms and smoothed, in units of 100 Mbit/s; when the
//!   receiver's reports arrive, the in-order goodput they carry replaces it.
//!
//! Safety: a decision whose chosen slot cannot send (or whose Q-values are not finite) falls
//! back to minRTT, so tiers, failed paths and rate caps are always honoured. Without trained
//! weights the built-in network decides exactly as minRTT ([`FalconWeights::minrtt`]).
//! Everything is allocated when the scheduler is built; a decision allocates nothing.

pub mod state;

use std::sync::Arc;

use crate::changepoint::{ChangeDetector, ChangeDetectorConfig};
use crate::decision::Decision;
use crate::nn::MlpScratch;
use crate::packet::PacketMeta;
use crate::path::{MAX_PATHS, PathId, PathView};
use crate::sched::minrtt::lowest_rtt_with_room;
use crate::scheduler::{
    AckInfo, ParamError, ParamInfo, ReceiverReport, Scheduler, SchedulerInfo, SchedulerKind,
    in_range,
};
use crate::slot::{ExperienceSender, SlotReader, weight_slot};
use crate::tier::TierGate;
use crate::time::Timestamp;

pub use state::{
    CLASSES, FEATURES, FalconTransition, FalconWeights, FalconWeightsError, HIDDEN, INPUTS, SLOTS,
    Slots, State, WIDTHS, condition_class, path_features,
};

/// Configuration of [`Falcon`].
#[derive(Clone, Debug, PartialEq)]
pub struct FalconConfig {
    /// ε of the ε-greedy exploration while a learner is attached (§V-A: ε_s = 0.1).
    pub epsilon: f64,
    /// Seed of the exploration's random generator.
    pub seed: u64,
    /// Packets per group whose loss count feeds the loss change detector (§IV-A).
    pub loss_group: u32,
    /// Window of the propagation-delay signal the RTT change detector reads, in ms: each
    /// observation is the minimum RTT of the path over the last `rtt_window_ms` (0: the mean
    /// of each group of ACKs' RTT samples, as before). See
    /// [`ChangeDetectorConfig::propagation_delay`].
    pub rtt_window_ms: f64,
    /// The action space. `false` (the default): the network chooses among the paths whose
    /// window has room now. `true`: it appoints any usable path "regardless of the path's
    /// current congested status" (§IV-B); a packet appointed to a path without room waits for
    /// it (as ECF waits for the fast path), unless that path has nothing in flight to free its
    /// window (then the best path with room is used).
    pub choose_congested: bool,
    /// Declare a change on a path once it has [`START_CHANGE_SAMPLES`] RTT samples on a new
    /// connection, so that a learner fine-tunes the meta-model of the condition a connection
    /// starts in (a condition the learner has not seen). Off by default.
    pub start_change: bool,
    /// Weights to start from (trained ones loaded by the caller); `None`: the built-in
    /// minRTT-equivalent network.
    pub weights: Option<Arc<FalconWeights>>,
    /// A learner to attach when built (online learning, offline data collection in the
    /// simulator); every scheduler built from this config shares it.
    pub learner: Option<FalconLink>,
}

/// The hot path's ends of a learner: its weight slot and its experience queue.
#[derive(Clone, Debug)]
pub struct FalconLink {
    /// Where the learner publishes.
    pub weights: SlotReader<FalconWeights>,
    /// Where the scheduler sends its transitions.
    pub experience: ExperienceSender<FalconTransition>,
}

/// Links are connections, not values: two links are never equal (so a config carrying one
/// differs from every other config).
impl PartialEq for FalconLink {
    fn eq(&self, _other: &Self) -> bool {
        false
    }
}

impl Default for FalconConfig {
    fn default() -> Self {
        FalconConfig {
            epsilon: 0.1,
            seed: 1,
            loss_group: 32,
            rtt_window_ms: DEFAULT_RTT_WINDOW_MS,
            choose_congested: false,
            start_change: false,
            weights: None,
            learner: None,
        }
    }
}

impl FalconConfig {
    /// Sets parameter `name`; `Ok(false)` when FALCON has no such parameter.
    pub fn set(&mut self, name: &str, value: f64) -> Result<bool, ParamError> {
        match name {
            "epsilon" => {
                self.epsilon = in_range("epsilon", value, 0.0, 1.0, "a probability in [0, 1]")?
            }
            "seed" => {
                const SEED: &str = "an integer in [0, 2^53]";
                let seed = in_range("seed", value, 0.0, 9_007_199_254_740_992.0, SEED)?;
                if seed.fract() != 0.0 {
                    return Err(ParamError::OutOfRange {
                        name: "seed",
                        value,
                        expected: SEED,
                    });
                }
                self.seed = seed as u64;
            }
            "loss_group" => {
                const GROUP: &str = "an integer number of packets in [1, 100000]";
                let group = in_range("loss_group", value, 1.0, 100_000.0, GROUP)?;
                if group.fract() != 0.0 {
                    return Err(ParamError::OutOfRange {
                        name: "loss_group",
                        value,
                        expected: GROUP,
                    });
                }
                self.loss_group = group as u32;
            }
            "rtt_window_ms" => {
                self.rtt_window_ms = in_range(
                    "rtt_window_ms",
                    value,
                    0.0,
                    60_000.0,
                    "a window in ms in [0, 60000] (0: group means)",
                )?;
            }
            "choose_congested" => {
                self.choose_congested = flag("choose_congested", value)?;
            }
            "start_change" => self.start_change = flag("start_change", value)?,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// A 0/1 parameter.
fn flag(name: &'static str, value: f64) -> Result<bool, ParamError> {
    if value == 0.0 || value == 1.0 {
        Ok(value == 1.0)
    } else {
        Err(ParamError::OutOfRange {
            name,
            value,
            expected: "0 or 1",
        })
    }
}

/// RTT samples a path needs on a new connection before [`FalconConfig::start_change`] declares
/// a change on it (enough for its smoothed RTT and deviation to name a condition class).
pub const START_CHANGE_SAMPLES: u32 = 16;

/// Default of [`FalconConfig::rtt_window_ms`]: group means. A windowed minimum (500 ms) declared
/// more changes on the daemon-check links (30 against 28 in 30 s, 4 true delay steps) and found
/// fewer true steps on a Reno-like series (docs/schedulers.md, falcon), so it is opt-in.
pub const DEFAULT_RTT_WINDOW_MS: f64 = 0.0;

/// Which network decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Active {
    /// The published policy.
    Policy,
    /// The meta-model of a condition class, deployed on a change until the fine-tuned policy
    /// arrives.
    Meta(u8),
}

/// Change detectors and loss grouping of one path.
#[derive(Clone, Debug)]
struct PathMonitor {
    rtt: ChangeDetector,
    loss: ChangeDetector,
    sent: u32,
    lost: u32,
    rtt_samples: u32,
}

/// Counters FALCON keeps (for `braid status` and experiments).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FalconStats {
    /// Decisions taken.
    pub decisions: u64,
    /// Decisions that fell back to minRTT.
    pub fallbacks: u64,
    /// Decisions taken at random (exploration).
    pub explored: u64,
    /// Changes detected (RTT or loss, any path).
    pub changes: u64,
    /// Version of the weights in use (0: the initial set).
    pub model_version: u64,
    /// Decisions at which at least two slots could send (the only ones at which a policy
    /// restricted to paths with room can differ from minRTT).
    pub choices: u64,
    /// Greedy decisions that did not do what minRTT would (send on the lowest-RTT path with
    /// room): another path, or waiting for a path without room.
    pub not_minrtt: u64,
    /// Decisions that waited for a chosen path without room ([`FalconConfig::choose_congested`]).
    pub waits: u64,
}

/// The pending transition: the state decided on and the action taken.
#[derive(Clone, Copy, Debug)]
struct Last {
    at: Timestamp,
    state: State,
    action: u8,
}

/// The FALCON scheduler.
#[derive(Clone, Debug)]
pub struct Falcon {
    weights: SlotReader<FalconWeights>,
    active: Active,
    scratch: MlpScratch,
    experience: Option<ExperienceSender<FalconTransition>>,
    epsilon: f64,
    loss_group: u32,
    choose_congested: bool,
    start_change: bool,
    started: bool,
    monitors: Box<[PathMonitor]>,
    changed: Option<PathId>,
    change_pending: bool,
    condition: u8,
    last: Option<Last>,
    acked_bytes: u64,
    window_start: Option<Timestamp>,
    rate: f32,
    reports_seen: bool,
    rng: u64,
    stats: FalconStats,
}

impl Falcon {
    /// Catalogue entry.
    pub const INFO: SchedulerInfo = SchedulerInfo {
        kind: SchedulerKind::Falcon,
        summary: "DQN over paths from offline meta-models, fine-tuned online after Bayesian change detection",
        source: "Wu et al., FALCON (meta-learning + DQN + BOCPD), §IV-§V-A",
        params: &[
            ParamInfo {
                name: "epsilon",
                default: 0.1,
                description: "ε-greedy exploration while a learner is attached, in [0, 1]",
            },
            ParamInfo {
                name: "seed",
                default: 1.0,
                description: "seed of the exploration, integer in [0, 2^53]",
            },
            ParamInfo {
                name: "loss_group",
                default: 32.0,
                description: "packets per loss count fed to the change detector, in [1, 100000]",
            },
            ParamInfo {
                name: "rtt_window_ms",
                default: DEFAULT_RTT_WINDOW_MS,
                description: "window of the minimum RTT fed to the change detector, ms (0: group means)",
            },
            ParamInfo {
                name: "choose_congested",
                default: 0.0,
                description: "1: appoint any usable path, waiting for one without room (§IV-B); 0: only paths with room",
            },
            ParamInfo {
                name: "start_change",
                default: 0.0,
                description: "1: declare a change once a path has 16 RTT samples on a new connection",
            },
        ],
    };

    /// Builds the scheduler from the configured weights (or the built-in minRTT network).
    pub fn new(config: &FalconConfig) -> Self {
        let initial = match &config.weights {
            Some(weights) => FalconWeights::clone(weights),
            None => FalconWeights::minrtt(),
        };
        let (_, reader) = weight_slot(initial);
        let mut falcon = Self::with_reader(config, reader);
        if let Some(link) = &config.learner {
            falcon.attach_learner(link.weights.clone(), link.experience.clone());
        }
        falcon
    }

    /// Builds the scheduler reading its weights from `reader` (a learner's slot).
    pub fn with_reader(config: &FalconConfig, reader: SlotReader<FalconWeights>) -> Self {
        let scratch = reader.weights().policy().scratch();
        let monitor = PathMonitor {
            // The path's propagation delay in ms: its windowed minimum RTT, one observation
            // per group of ACKs (see `propagation_delay`); group means without a window.
            rtt: ChangeDetector::new(if config.rtt_window_ms > 0.0 {
                ChangeDetectorConfig::propagation_delay((config.rtt_window_ms * 1_000.0) as u64)
            } else {
                ChangeDetectorConfig::per_ack_rtt()
            }),
            // Lost packets per group, spread at least one packet (see `loss_counts`).
            loss: ChangeDetector::new(ChangeDetectorConfig::loss_counts()),
            sent: 0,
            lost: 0,
            rtt_samples: 0,
        };
        let model_version = reader.version();
        Falcon {
            weights: reader,
            active: Active::Policy,
            scratch,
            experience: None,
            epsilon: config.epsilon,
            loss_group: config.loss_group.max(1),
            choose_congested: config.choose_congested,
            start_change: config.start_change,
            started: false,
            monitors: vec![monitor; MAX_PATHS].into_boxed_slice(),
            changed: None,
            change_pending: false,
            condition: 0,
            last: None,
            acked_bytes: 0,
            window_start: None,
            rate: 0.0,
            reports_seen: false,
            // splitmix64 of the seed, never zero (xorshift must not start at zero)
            rng: splitmix64(config.seed) | 1,
            stats: FalconStats {
                model_version,
                ..FalconStats::default()
            },
        }
    }

    /// Attaches a learner: weights come from `reader`, experience goes to `experience`, and
    /// ε-greedy exploration starts.
    pub fn attach_learner(
        &mut self,
        reader: SlotReader<FalconWeights>,
        experience: ExperienceSender<FalconTransition>,
    ) {
        self.scratch = reader.weights().policy().scratch();
        self.stats.model_version = reader.version();
        self.weights = reader;
        self.active = Active::Policy;
        self.experience = Some(experience);
    }

    /// The version of the weights decided with (0: the initial set); `braid status` shows it.
    pub fn weights_version(&self) -> Option<u64> {
        Some(self.weights.version())
    }

    /// Counters.
    pub fn stats(&self) -> FalconStats {
        self.stats
    }

    /// The weights in use.
    pub fn weights(&self) -> &FalconWeights {
        self.weights.weights()
    }

    /// Picks up new weights, and deploys the meta-model after a detected change.
    fn refresh(&mut self, paths: &[PathView]) {
        if self.weights.refresh() {
            self.stats.model_version = self.weights.version();
            self.active = Active::Policy;
        }
        if let Some(changed) = self.changed.take()
            && let Some(view) = paths.iter().find(|p| p.id == changed)
        {
            self.condition = condition_class(view.loss_rate, view.srtt_us, view.rttvar_us);
            if self.weights.weights().meta(self.condition).is_some() {
                self.active = Active::Meta(self.condition);
            }
            self.change_pending = true;
        }
    }

    fn next_random(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    /// A random candidate slot (ε-greedy exploration): a sendable one, or with
    /// `choose_congested` any path's.
    fn random_slot(&mut self, slots: &Slots) -> Option<usize> {
        let candidates = if self.choose_congested {
            slots.present()
        } else {
            slots.sendable
        };
        let count = candidates.iter().filter(|s| **s).count();
        if count == 0 {
            return None;
        }
        let pick = (self.next_random() % count as u64) as usize;
        candidates
            .iter()
            .enumerate()
            .filter(|(_, s)| **s)
            .nth(pick)
            .map(|(i, _)| i)
    }

    /// Sends the previous decision's transition, now that its next state is known.
    fn record(&mut self, next_state: &State) {
        let (Some(sender), Some(last)) = (&self.experience, self.last) else {
            return;
        };
        let sent = sender.send(FalconTransition {
            at: last.at,
            state: last.state,
            action: last.action,
            reward: self.rate,
            next_state: *next_state,
            condition: self.condition,
            change: self.change_pending,
        });
        if sent {
            self.change_pending = false;
        }
    }

    /// Updates the ack-based throughput estimate (the reward while no reports arrive).
    fn update_rate(&mut self, now: Timestamp) {
        let start = *self.window_start.get_or_insert(now);
        let elapsed = now.as_micros().saturating_sub(start.as_micros());
        if elapsed < 1_000 || self.reports_seen {
            return;
        }
        // bytes/µs × 8 = Mbit/s; ÷ 100 → units of 100 Mbit/s.
        let sample = (self.acked_bytes as f64 * 8.0 / elapsed as f64 / 100.0) as f32;
        self.rate = if self.rate == 0.0 {
            sample
        } else {
            0.8 * self.rate + 0.2 * sample
        };
        self.acked_bytes = 0;
        self.window_start = Some(now);
    }

    fn note_change(&mut self, path: PathId) {
        self.stats.changes += 1;
        self.changed = Some(path);
    }
}

impl Scheduler for Falcon {
    fn select(&mut self, paths: &[PathView], packet: &PacketMeta, now: Timestamp) -> Decision {
        self.refresh(paths);
        self.stats.decisions += 1;
        let gate = TierGate::new(paths);
        let slots = Slots::fill(paths, packet, |p| gate.admits(p));
        let explore = self.experience.is_some()
            && self.epsilon > 0.0
            && (self.next_random() >> 11) as f64 / (1u64 << 53) as f64 <= self.epsilon;
        let chosen = if explore {
            self.stats.explored += 1;
            self.random_slot(&slots)
        } else {
            let weights = self.weights.weights();
            let network = match self.active {
                Active::Meta(class) => weights.meta(class).unwrap_or(weights.policy()),
                Active::Policy => weights.policy(),
            };
            match network.forward(&slots.state, &mut self.scratch) {
                Ok(q) if self.choose_congested => slots.best_of(q, &slots.present()),
                Ok(q) => slots.best(q),
                Err(_) => None,
            }
        };
        if slots.sendable.iter().filter(|s| **s).count() >= 2 {
            self.stats.choices += 1;
        }
        self.update_rate(now);
        self.record(&slots.state);
        let chosen = chosen.and_then(|slot| slots.ids[slot].map(|id| (slot, id)));
        // A path without room is waited for only while something in flight can free it.
        let chosen = chosen.filter(|&(slot, id)| {
            slots.sendable[slot]
                || paths
                    .iter()
                    .any(|p| p.id == id && p.bytes_in_flight >= u64::from(packet.len))
        });
        if !explore {
            let minrtt = lowest_rtt_with_room(paths, packet.len).map(|p| p.id);
            if chosen.is_some_and(|(_, id)| Some(id) != minrtt) {
                self.stats.not_minrtt += 1;
            }
        }
        match chosen {
            Some((slot, id)) => {
                self.last = Some(Last {
                    at: now,
                    state: slots.state,
                    action: slot as u8,
                });
                if slots.sendable[slot] {
                    Decision::Send(id)
                } else {
                    self.stats.waits += 1;
                    Decision::Wait
                }
            }
            None => {
                self.last = None;
                self.stats.fallbacks += 1;
                match lowest_rtt_with_room(paths, packet.len) {
                    Some(p) => Decision::Send(p.id),
                    None => Decision::Wait,
                }
            }
        }
    }

    fn on_sent(&mut self, path: PathId, _packet: &PacketMeta, _now: Timestamp) {
        let group = self.loss_group;
        let Some(monitor) = self.monitors.get_mut(path.index()) else {
            return;
        };
        monitor.sent += 1;
        if monitor.sent >= group {
            let lost = f64::from(monitor.lost.min(group));
            monitor.sent = 0;
            monitor.lost = 0;
            if monitor.loss.observe(lost) {
                self.note_change(path);
            }
        }
    }

    fn on_ack(&mut self, path: PathId, ack: &AckInfo, now: Timestamp) {
        self.acked_bytes = self.acked_bytes.saturating_add(ack.bytes);
        let Some(monitor) = self.monitors.get_mut(path.index()) else {
            return;
        };
        if ack.rtt_us == 0 {
            return;
        }
        monitor.rtt_samples = monitor.rtt_samples.saturating_add(1);
        let first_condition =
            self.start_change && !self.started && monitor.rtt_samples >= START_CHANGE_SAMPLES;
        if monitor
            .rtt
            .observe_at(f64::from(ack.rtt_us) / 1_000.0, now.as_micros())
            || first_condition
        {
            self.started = true;
            self.note_change(path);
        }
    }

    fn on_loss(&mut self, path: PathId, bytes: u64, _now: Timestamp) {
        if let Some(monitor) = self.monitors.get_mut(path.index()) {
            let packets = bytes.div_ceil(1_200).max(1);
            monitor.lost = monitor
                .lost
                .saturating_add(u32::try_from(packets).unwrap_or(u32::MAX));
        }
    }

    fn on_report(&mut self, report: &ReceiverReport, now: Timestamp) {
        if report.interval_us == 0 {
            return;
        }
        self.reports_seen = true;
        let goodput = report.delivered_bytes as f64 * 8.0 / f64::from(report.interval_us) / 100.0;
        self.rate = goodput as f32;
        self.window_start = Some(now);
    }
}

/// One splitmix64 step: spreads a small seed over all bits.
fn splitmix64(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests;
