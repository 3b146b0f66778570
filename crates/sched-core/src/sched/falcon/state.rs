//! FALCON's learning elements (§IV-B) and meta-model ranges (§V-A): the state vector, the
//! coarse network-condition classes that index the meta-models, the weight set the learner
//! publishes, and the experience the scheduler sends to it.
//!
//! - **State** (§IV-B): per path, CWND, in-flight bytes and the send window, each normalised by
//!   the path's RTT (so each is a rate, "tightly connected to the throughput"), and the RTT
//!   itself. The send window is the connection-level window the peer still admits
//!   ([`PacketMeta::send_window`]), capped at [`SEND_WINDOW_CAP`]. Rates are in units of
//!   10 MB/s (bytes/µs ÷ 10), the RTT in units of 100 ms, all clamped to `[0, 100]`.
//! - **Slots**: the network sees [`SLOTS`] paths (the paper uses two; §IV-B says the action set
//!   extends to more). They are the first [`SLOTS`] usable paths of the admitted tier, in view
//!   order; empty slots are zeros and are never chosen.
//! - **Classes** (§V-A): loss `[0,1)`, `[1,5)`, `[5,100]` %; mean RTT `[0,50)`, `[50,200)`,
//!   `[200,∞)` ms; RTT deviation / mean `[0,40)`, `[40,80)`, `[80,∞)` % — 27 per path.

use std::sync::Arc;

use crate::nn::{Activation, Linear, Mlp, NnError};
use crate::packet::PacketMeta;
use crate::path::{PathId, PathView};
use crate::time::Timestamp;

/// Paths the network sees at once (its action count).
pub const SLOTS: usize = 4;
/// Features per path (§IV-B: CWND/RTT, in-flight/RTT, SWND/RTT, RTT).
pub const FEATURES: usize = 4;
/// Width of the network's input.
pub const INPUTS: usize = SLOTS * FEATURES;
/// Width of each of the three hidden layers (§V-A gives three ReLU layers but no width; 32 is
/// our choice, small enough for a sub-microsecond decision).
pub const HIDDEN: usize = 32;
/// Coarse condition classes per path (§V-A: 3 loss × 3 RTT × 3 deviation ranges).
pub const CLASSES: usize = 27;
/// Largest send window the state distinguishes, bytes.
pub const SEND_WINDOW_CAP: u64 = 64 << 20;

/// The widths of FALCON's DQN: input, three hidden layers, one Q-value per slot.
pub const WIDTHS: [usize; 5] = [INPUTS, HIDDEN, HIDDEN, HIDDEN, SLOTS];

/// One state vector.
pub type State = [f32; INPUTS];

/// The state features of one path (§IV-B), for a connection send window of `send_window` bytes.
pub fn path_features(path: &PathView, send_window: u64) -> [f32; FEATURES] {
    // No RTT sample yet reads as 1 ms, so the rates stay finite.
    let rtt_us = f64::from(path.srtt_us.max(1_000));
    let rate = |bytes: u64| ((bytes as f64 / rtt_us) / 10.0).clamp(0.0, 100.0) as f32;
    [
        rate(path.cwnd),
        rate(path.bytes_in_flight),
        rate(send_window.min(SEND_WINDOW_CAP)),
        (f64::from(path.srtt_us) / 100_000.0).clamp(0.0, 100.0) as f32,
    ]
}

/// The paths filling the network's slots and the state built from them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Slots {
    /// The path in each slot.
    pub ids: [Option<PathId>; SLOTS],
    /// Whether each slot's path can take the packet now.
    pub sendable: [bool; SLOTS],
    /// The state vector.
    pub state: State,
}

impl Slots {
    /// Fills the slots from `paths` for `packet`: usable paths whose tier `admits`, in order.
    pub fn fill(
        paths: &[PathView],
        packet: &PacketMeta,
        admits: impl Fn(&PathView) -> bool,
    ) -> Self {
        let mut slots = Slots::default();
        let usable = paths.iter().filter(|p| p.is_usable() && admits(p));
        for (n, p) in usable.take(SLOTS).enumerate() {
            slots.ids[n] = Some(p.id);
            slots.sendable[n] = p.can_send(packet.len);
            slots.state[n * FEATURES..(n + 1) * FEATURES]
                .copy_from_slice(&path_features(p, packet.send_window));
        }
        slots
    }

    /// The slots that hold a path (whether or not it has room).
    pub fn present(&self) -> [bool; SLOTS] {
        self.ids.map(|id| id.is_some())
    }

    /// The sendable slot with the largest Q-value (first on ties); `None` when no slot can send
    /// or the values are not finite.
    pub fn best(&self, q: &[f32]) -> Option<usize> {
        self.best_of(q, &self.sendable)
    }

    /// The slot among `candidates` with the largest Q-value (first on ties); `None` when there
    /// is none or the values are not finite.
    pub fn best_of(&self, q: &[f32], candidates: &[bool; SLOTS]) -> Option<usize> {
        let mut best: Option<(usize, f32)> = None;
        for (slot, &value) in q.iter().enumerate().take(SLOTS) {
            if !candidates[slot] || !value.is_finite() {
                continue;
            }
            if best.is_none_or(|(_, v)| value > v) {
                best = Some((slot, value));
            }
        }
        best.map(|(slot, _)| slot)
    }
}

/// The coarse condition class (0..27) of a path with this loss rate (fraction), smoothed RTT
/// and RTT variation (§V-A): `9·loss_range + 3·rtt_range + deviation_range`.
pub fn condition_class(loss_rate: f32, srtt_us: u32, rttvar_us: u32) -> u8 {
    let loss = f64::from(loss_rate) * 100.0;
    let loss_range = if loss.is_nan() || loss < 1.0 {
        0
    } else if loss < 5.0 {
        1
    } else {
        2
    };
    let rtt_ms = f64::from(srtt_us) / 1_000.0;
    let rtt_range = if rtt_ms < 50.0 {
        0
    } else if rtt_ms < 200.0 {
        1
    } else {
        2
    };
    let deviation = f64::from(rttvar_us) / f64::from(srtt_us.max(1)) * 100.0;
    let deviation_range = if deviation < 40.0 {
        0
    } else if deviation < 80.0 {
        1
    } else {
        2
    };
    9 * loss_range + 3 * rtt_range + deviation_range
}

/// Why a weight set does not fit FALCON's network.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum FalconWeightsError {
    /// A network's widths differ from [`WIDTHS`].
    #[error("FALCON network `{network}` has widths {found:?}, expected {expected:?}")]
    Widths {
        /// `policy` or `meta-<class>`.
        network: String,
        /// Its widths.
        found: Vec<usize>,
        /// [`WIDTHS`].
        expected: Vec<usize>,
    },
    /// More meta-models than classes.
    #[error("{found} meta-models given, at most {CLASSES} (one per condition class)")]
    TooManyMetaModels {
        /// How many were given.
        found: usize,
    },
}

/// What the learner publishes: the deployed policy and the meta-models per condition class.
#[derive(Clone, Debug, PartialEq)]
pub struct FalconWeights {
    policy: Mlp,
    meta: Arc<[Option<Mlp>]>,
}

impl FalconWeights {
    /// A weight set; `meta[c]` is the meta-model of class `c` (missing classes use `policy`).
    pub fn new(policy: Mlp, meta: Vec<Option<Mlp>>) -> Result<Self, FalconWeightsError> {
        check_widths("policy", &policy)?;
        if meta.len() > CLASSES {
            return Err(FalconWeightsError::TooManyMetaModels { found: meta.len() });
        }
        for (class, model) in meta.iter().enumerate() {
            if let Some(model) = model {
                check_widths(&format!("meta-{class}"), model)?;
            }
        }
        Ok(FalconWeights {
            policy,
            meta: meta.into(),
        })
    }

    /// The same meta-models with a new deployed policy (what the learner publishes after a
    /// K-step fine-tuning).
    pub fn with_policy(&self, policy: Mlp) -> Result<Self, FalconWeightsError> {
        check_widths("policy", &policy)?;
        Ok(FalconWeights {
            policy,
            meta: Arc::clone(&self.meta),
        })
    }

    /// The built-in weights: a network of the real size whose Q-values are `−RTT` of each slot,
    /// so that it decides exactly as minRTT does. It is the documented safe default when no
    /// trained weights are loaded.
    pub fn minrtt() -> Self {
        let policy = minrtt_network();
        FalconWeights {
            policy,
            meta: Arc::from(Vec::new()),
        }
    }

    /// The deployed policy.
    pub fn policy(&self) -> &Mlp {
        &self.policy
    }

    /// The meta-model of `class`, if there is one.
    pub fn meta(&self, class: u8) -> Option<&Mlp> {
        self.meta.get(usize::from(class)).and_then(Option::as_ref)
    }

    /// The meta-models, indexed by class.
    pub fn meta_models(&self) -> &[Option<Mlp>] {
        &self.meta
    }
}

fn check_widths(network: &str, mlp: &Mlp) -> Result<(), FalconWeightsError> {
    let found: Vec<usize> = mlp.widths().collect();
    if found != WIDTHS {
        return Err(FalconWeightsError::Widths {
            network: network.to_owned(),
            found,
            expected: WIDTHS.to_vec(),
        });
    }
    Ok(())
}

/// The minRTT-equivalent network of [`FalconWeights::minrtt`]: the first layer copies each slot's
/// RTT feature to one hidden unit (ReLU keeps it: RTTs are ≥ 0), the next two pass it on, and
/// the output negates it.
fn minrtt_network() -> Mlp {
    let mut layers = Vec::with_capacity(WIDTHS.len() - 1);
    for (index, pair) in WIDTHS.windows(2).enumerate() {
        let (inputs, outputs) = (pair[0], pair[1]);
        let mut weight = vec![0.0f32; inputs * outputs];
        for slot in 0..SLOTS {
            let (row, col, value) = match index {
                0 => (slot, slot * FEATURES + FEATURES - 1, 1.0),
                3 => (slot, slot, -1.0),
                _ => (slot, slot, 1.0),
            };
            weight[row * inputs + col] = value;
        }
        let layer = Linear::new(
            &format!("layer {index}"),
            inputs,
            outputs,
            weight,
            vec![0.0; outputs],
        );
        layers.push(layer);
    }
    let built: Result<Vec<Linear>, NnError> = layers.into_iter().collect();
    match built.and_then(|layers| Mlp::new(layers, Activation::Relu)) {
        Ok(mlp) => mlp,
        // The shapes above are constants that chain; this arm cannot be reached.
        Err(e) => unreachable!("built-in FALCON network: {e}"),
    }
}

/// One step of experience: the state FALCON decided on, the slot it chose, the reward that
/// followed and the next state (DQN's transition, §IV-B), plus the condition class of the
/// network at the time and whether a change had just been detected (FALCON §IV-A: the learner
/// then fine-tunes the class's meta-model).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FalconTransition {
    /// When the decision was made.
    pub at: Timestamp,
    /// The state decided on.
    pub state: State,
    /// The slot chosen (`0..SLOTS`).
    pub action: u8,
    /// The throughput that followed, in units of 100 Mbit/s.
    pub reward: f32,
    /// The state at the next decision.
    pub next_state: State,
    /// The condition class that selects the meta-model (`0..CLASSES`).
    pub condition: u8,
    /// True on the first transition after a detected change.
    pub change: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::PathState;

    #[test]
    fn features_are_normalised_by_rtt() {
        let mut p = PathView::new(PathId(0), 50_000, 500_000);
        p.bytes_in_flight = 250_000;
        let f = path_features(&p, 1_000_000);
        assert!((f[0] - 1.0).abs() < 1e-6, "{f:?}"); // 500 kB / 50 ms = 10 MB/s
        assert!((f[1] - 0.5).abs() < 1e-6);
        assert!((f[2] - 2.0).abs() < 1e-6);
        assert!((f[3] - 0.5).abs() < 1e-6);
        let unbounded = path_features(&p, u64::MAX);
        assert!(unbounded.iter().all(|v| v.is_finite() && *v <= 100.0));
        let fresh = path_features(&PathView::new(PathId(1), 0, 10_000), 0);
        assert!(fresh.iter().all(|v| v.is_finite()));
    }

    #[test]
    fn classes_follow_the_paper_ranges() {
        assert_eq!(condition_class(0.0, 20_000, 1_000), 0);
        assert_eq!(condition_class(0.02, 20_000, 1_000), 9);
        assert_eq!(condition_class(0.5, 20_000, 1_000), 18);
        assert_eq!(condition_class(0.0, 50_000, 1_000), 3);
        assert_eq!(condition_class(0.0, 250_000, 1_000), 6);
        assert_eq!(condition_class(0.0, 100_000, 50_000), 4);
        assert_eq!(condition_class(0.0, 100_000, 90_000), 5);
        assert_eq!(condition_class(1.0, 300_000, 300_000), 26);
        assert_eq!(condition_class(f32::NAN, 0, 0), 0);
    }

    #[test]
    fn slots_skip_failed_paths_and_mark_full_ones() {
        let mut a = PathView::new(PathId(3), 30_000, 10_000);
        a.bytes_in_flight = 10_000;
        let mut b = PathView::new(PathId(5), 20_000, 10_000);
        b.state = PathState::Failed;
        let c = PathView::new(PathId(7), 40_000, 10_000);
        let slots = Slots::fill(&[a, b, c], &PacketMeta::bulk(1_200), |_| true);
        assert_eq!(slots.ids, [Some(PathId(3)), Some(PathId(7)), None, None]);
        assert_eq!(slots.sendable, [false, true, false, false]);
        assert_eq!(slots.best(&[9.0, 1.0, 5.0, 5.0]), Some(1));
        assert_eq!(slots.best(&[9.0, f32::NAN, 5.0, 5.0]), None);
    }

    #[test]
    fn builtin_network_ranks_by_rtt() {
        let weights = FalconWeights::minrtt();
        let mut scratch = weights.policy().scratch();
        let paths = [
            PathView::new(PathId(0), 40_000, 10_000),
            PathView::new(PathId(1), 10_000, 10_000),
            PathView::new(PathId(2), 20_000, 10_000),
        ];
        let slots = Slots::fill(&paths, &PacketMeta::bulk(1_200), |_| true);
        let q = weights
            .policy()
            .forward(&slots.state, &mut scratch)
            .unwrap();
        assert_eq!(slots.best(q), Some(1));
        assert!((q[1] + 0.1).abs() < 1e-6);
    }

    #[test]
    fn weights_of_the_wrong_shape_are_refused() {
        let small = Mlp::new(
            vec![Linear::new("l", 2, 2, vec![0.0; 4], vec![0.0; 2]).unwrap()],
            Activation::Relu,
        )
        .unwrap();
        let err = FalconWeights::new(small.clone(), Vec::new()).unwrap_err();
        assert!(err.to_string().contains("policy"));
        let good = FalconWeights::minrtt().policy().clone();
        let err = FalconWeights::new(good.clone(), vec![None, Some(small)]).unwrap_err();
        assert!(err.to_string().contains("meta-1"));
        let err = FalconWeights::new(good, vec![None; 28]).unwrap_err();
        assert!(err.to_string().contains("28"));
    }
}
