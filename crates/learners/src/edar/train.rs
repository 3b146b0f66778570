//! EdAR's DQN with tch (feature `torch`; Han et al. §V-A, Algs. 1–2, §VI settings).
//!
//! - [`TchEdar`]: the Q-network of §IV-C built from [`TchLstm`] and [`TchMlp`], mirroring
//!   [`EdarNetwork`] exactly ([`TchEdar::export`] gives the pure-Rust twin, the parity test checks
//!   both agree to 1e-5);
//! - [`EdarDqn`]: the shared [`DqnCore`] (main and target networks, Adam) with a
//!   [`ReplayBuffer`] of [`EdarTransition`]s, Adam (lr 1e-4), loss `(y − Q(s, a))²` with `y = r + γ max_a' Q'(s', a')` (γ = 0.6; `y = r` for a
//!   terminal transition) and the soft target update `θ' ← τθ + (1 − τ)θ'` (τ = 0.01) after every
//!   step. Minibatches hold transitions with the same number of paths (the representation network
//!   takes any number, but one batch runs as one tensor).
//!
//! [`EdarDqn`] is a [`TrainStep`]: a [`crate::Learner`] feeds it the scheduler's transitions and
//! publishes the exported network (Alg. 2's "synchronize θ to the scheduler").

use braid_sched_core::nn::Activation;
use braid_sched_core::sched::edar::network::{ACROSS_HIDDEN, CORE_WIDTHS, FEATURE_HIDDEN};
use braid_sched_core::sched::edar::{
    CONNECTION_FEATURES, EdarNetwork, EdarNetworkError, EdarState, EdarTransition, FEATURES,
    HISTORY, SplitMix64,
};
use tch::nn::{self, Module};
use tch::{Device, Kind, Tensor};

use crate::dqn::{DqnCore, ReplayBuffer, TdLoss, TdSample};
use crate::learner::TrainStep;
use crate::torch::{ExportError, TchLstm, TchMlp};

/// Why training or export failed.
#[derive(Debug, thiserror::Error)]
pub enum EdarTrainError {
    /// tch refused an operation.
    #[error("tch: {0}")]
    Tch(#[from] tch::TchError),
    /// A network could not be built or exported.
    #[error(transparent)]
    Export(#[from] ExportError),
    /// The exported parts are not an EdAR network.
    #[error(transparent)]
    Network(#[from] EdarNetworkError),
    /// A hyper-parameter is out of range.
    #[error("EdAR training parameter `{name}` = {value}: {expected}")]
    Parameter {
        /// The parameter.
        name: &'static str,
        /// Its value.
        value: f64,
        /// What is accepted.
        expected: &'static str,
    },
}

/// DQN hyper-parameters; the defaults are §VI's.
#[derive(Clone, Debug, PartialEq)]
pub struct EdarHyper {
    /// Adam learning rate (1e-4).
    pub learning_rate: f64,
    /// Discount γ (0.6).
    pub gamma: f64,
    /// Soft target update rate τ (0.01).
    pub tau: f64,
    /// Minibatch size H.
    pub batch: usize,
    /// Replay buffer capacity (oldest dropped first).
    pub replay_capacity: usize,
    /// Training steps per batch of new experience when used as a [`TrainStep`].
    pub steps_per_batch: usize,
    /// Seed of tch's initialisation and of minibatch sampling.
    pub seed: u64,
}

impl Default for EdarHyper {
    fn default() -> Self {
        EdarHyper {
            learning_rate: 1e-4,
            gamma: 0.6,
            tau: 0.01,
            batch: 32,
            replay_capacity: 100_000,
            steps_per_batch: 4,
            seed: 0,
        }
    }
}

impl EdarHyper {
    fn validate(&self) -> Result<(), EdarTrainError> {
        let check = |name, value: f64, ok: bool, expected| {
            if ok && value.is_finite() {
                Ok(())
            } else {
                Err(EdarTrainError::Parameter {
                    name,
                    value,
                    expected,
                })
            }
        };
        let lr = self.learning_rate;
        check("learning_rate", lr, lr > 0.0 && lr < 1.0, "in (0, 1)")?;
        check(
            "gamma",
            self.gamma,
            (0.0..1.0).contains(&self.gamma),
            "in [0, 1)",
        )?;
        check(
            "tau",
            self.tau,
            self.tau > 0.0 && self.tau <= 1.0,
            "in (0, 1]",
        )?;
        check(
            "batch",
            self.batch as f64,
            (1..=65_536).contains(&self.batch),
            "1..=65536",
        )?;
        let cap = self.replay_capacity;
        check(
            "replay_capacity",
            cap as f64,
            cap >= self.batch,
            "at least `batch`",
        )
    }
}

/// The §IV-C Q-network in tch.
#[derive(Debug)]
pub struct TchEdar {
    features: Vec<TchLstm>,
    across: TchLstm,
    core: TchMlp,
}

/// A minibatch of states with the same path count, as tensors.
struct StateBatch {
    connection: Tensor,
    /// `[B, n, FEATURES, HISTORY]`.
    paths: Tensor,
    batch: i64,
    paths_per_state: i64,
}

fn i64_of(v: usize) -> i64 {
    // Batch sizes and widths here are at most 2^16.
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl StateBatch {
    fn new<'a>(states: impl Iterator<Item = &'a EdarState>, device: Device) -> Self {
        let mut connection = Vec::new();
        let mut paths = Vec::new();
        let mut batch = 0usize;
        let mut n = 0usize;
        for s in states {
            batch += 1;
            n = s.used_paths().len();
            connection.extend_from_slice(&s.connection);
            for p in s.used_paths() {
                paths.extend_from_slice(p);
            }
        }
        let (b, n64) = (i64_of(batch), i64_of(n));
        StateBatch {
            connection: Tensor::from_slice(&connection)
                .view([b, i64_of(CONNECTION_FEATURES)])
                .to_device(device),
            paths: Tensor::from_slice(&paths)
                .view([b, n64, i64_of(FEATURES), i64_of(HISTORY)])
                .to_device(device),
            batch: b,
            paths_per_state: n64,
        }
    }
}

impl TchEdar {
    /// Creates the variables under `path`: `feature0..5`, `across`, `core`.
    pub fn new(path: &nn::Path<'_>) -> Result<Self, EdarTrainError> {
        let features = (0..FEATURES)
            .map(|i| TchLstm::new(&(path / format!("feature{i}")), 1, FEATURE_HIDDEN))
            .collect::<Result<Vec<_>, _>>()?;
        let across = TchLstm::new(
            &(path / "across"),
            FEATURES * 2 * FEATURE_HIDDEN,
            ACROSS_HIDDEN,
        )?;
        let core = TchMlp::new(&(path / "core"), &CORE_WIDTHS, Activation::Relu)?;
        Ok(TchEdar {
            features,
            across,
            core,
        })
    }

    fn forward_batch(&self, states: &StateBatch) -> Tensor {
        let (b, n) = (states.batch, states.paths_per_state);
        let representation = if n == 0 {
            Tensor::zeros(
                [b, i64_of(ACROSS_HIDDEN)],
                (Kind::Float, states.connection.device()),
            )
        } else {
            let (steps, f, h) = (i64_of(HISTORY), i64_of(FEATURES), i64_of(FEATURE_HIDDEN));
            // The six feature LSTMs run as one LSTM over [B·n, steps, FEATURES] (see
            // `merged_features`); its hidden unit `h·f + j` is unit j of feature f's LSTM.
            let xs = states
                .paths
                .reshape([b * n, f, steps])
                .transpose(1, 2)
                .contiguous();
            let zeros = Tensor::zeros([1, b * n, f * h], (Kind::Float, xs.device()));
            let (outputs, _, _) = xs.lstm(
                &[&zeros, &zeros],
                &self.merged_features().each_ref(),
                true,
                1,
                0.0,
                true,
                false,
                true,
            );
            // Per path, per feature: the hidden state before last, then the last
            // ([B, n, FEATURES · 2 · hidden], feature-major, as LSTM2 reads them).
            let per_path = outputs
                .narrow(1, steps - 2, 2)
                .reshape([b * n, 2, f, h])
                .transpose(1, 2)
                .reshape([b, n, -1]);
            self.across.forward_sequence(&per_path)
        };
        self.core.forward(&Tensor::cat(
            &[states.connection.shallow_clone(), representation],
            1,
        ))
    }

    /// The six feature LSTMs (input 1, hidden `H` each) as the weights of one LSTM of input
    /// `FEATURES` and hidden `FEATURES · H`: `weight_ih`, `weight_hh` block-diagonal within each
    /// gate (unit `H·f + j` reads only feature f's input and feature f's units), biases
    /// concatenated. One LSTM call instead of six (and one backward): the per-call overhead of
    /// libtorch's RNN kernels, not the arithmetic, is most of a training step's time. Built
    /// from the six layers' own variables on every call, so gradients reach them and the zeros
    /// outside the blocks stay zeros.
    fn merged_features(&self) -> [Tensor; 4] {
        let h = i64_of(FEATURE_HIDDEN);
        let gates = |variable: usize, merge: &dyn Fn(&[Tensor]) -> Tensor| -> Tensor {
            let per_gate: Vec<Tensor> = (0..4)
                .map(|gate| {
                    let blocks: Vec<Tensor> = self
                        .features
                        .iter()
                        .map(|lstm| lstm.tensors()[variable].narrow(0, gate * h, h))
                        .collect();
                    merge(&blocks)
                })
                .collect();
            Tensor::cat(&per_gate, 0)
        };
        let block_diag = |blocks: &[Tensor]| Tensor::block_diag(blocks);
        let concat = |blocks: &[Tensor]| Tensor::cat(blocks, 0);
        [
            gates(0, &block_diag),
            gates(1, &block_diag),
            gates(2, &concat),
            gates(3, &concat),
        ]
    }

    /// Q-values `[B, 2]` of `states` (all with the same number of paths).
    pub fn q_values(&self, states: &[EdarState], device: Device) -> Tensor {
        self.forward_batch(&StateBatch::new(states.iter(), device))
    }

    /// The same network as sched-core's [`EdarNetwork`].
    pub fn export(&self) -> Result<EdarNetwork, EdarTrainError> {
        let features = self
            .features
            .iter()
            .map(TchLstm::export)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(EdarNetwork::new(
            features,
            self.across.export()?,
            self.core.export()?,
        )?)
    }

    /// Overwrites the variables with `network`'s weights (start online learning from a
    /// pre-trained model, Alg. 2 line 2).
    pub fn load(&self, network: &EdarNetwork) {
        tch::no_grad(|| {
            for (tch_lstm, lstm) in self.features.iter().zip(network.features()) {
                tch_lstm.load(lstm);
            }
            self.across.load(network.across());
            self.core.load(network.core());
        });
    }
}

/// DQN over EdAR's Q-network ([`DqnCore`] with a [`ReplayBuffer`]; squared TD error).
pub struct EdarDqn {
    hyper: EdarHyper,
    core: DqnCore<TchEdar>,
    replay: ReplayBuffer<EdarTransition>,
    rng: SplitMix64,
}

impl std::fmt::Debug for EdarDqn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EdarDqn")
            .field("hyper", &self.hyper)
            .field("core", &self.core)
            .field("replay", &self.replay.len())
            .finish()
    }
}

impl EdarDqn {
    /// A fresh agent on `device` (Alg. 1 lines 11–12: random main network, target = main).
    ///
    /// On a CUDA device this turns libtorch's cuDNN off for the process: the feature LSTMs run
    /// as one LSTM whose weights are assembled on every call (`TchEdar::merged_features`), which
    /// cuDNN would re-pack on every call with a warning each time; libtorch's own CUDA LSTM
    /// runs them as they are. (EdAR's networks are its only users of cuDNN in braid.)
    pub fn new(hyper: EdarHyper, device: Device) -> Result<Self, EdarTrainError> {
        hyper.validate()?;
        if device.is_cuda() {
            tch::Cuda::set_user_enabled_cudnn(false);
        }
        let core = DqnCore::new(
            device,
            hyper.seed,
            hyper.learning_rate,
            hyper.tau,
            TchEdar::new,
        )?;
        Ok(EdarDqn {
            rng: SplitMix64(hyper.seed ^ 0x5EED_EDA2),
            replay: ReplayBuffer::new(hyper.replay_capacity),
            hyper,
            core,
        })
    }

    /// Starts both networks from `network` (a pre-trained model).
    pub fn load(&mut self, network: &EdarNetwork) -> Result<(), EdarTrainError> {
        self.core.net().load(network);
        self.core.sync_target()?;
        Ok(())
    }

    /// Adds a transition to the replay buffer, replacing the oldest when full.
    pub fn push(&mut self, transition: EdarTransition) {
        self.replay.push(transition);
    }

    /// Transitions held.
    pub fn replay_len(&self) -> usize {
        self.replay.len()
    }

    /// Training steps taken.
    pub fn steps(&self) -> u64 {
        self.core.steps()
    }

    /// The loss of the latest step.
    pub fn last_loss(&self) -> Option<f64> {
        self.core.last_loss()
    }

    /// The main network.
    pub fn network(&self) -> &TchEdar {
        self.core.net()
    }

    /// A minibatch of up to `batch` transitions sharing the path counts of a random first one.
    fn sample(&mut self) -> Vec<EdarTransition> {
        let mut batch = Vec::with_capacity(self.hyper.batch);
        let Some(first) = self.replay.draw(&mut self.rng) else {
            return batch;
        };
        let key = (first.state.path_count, first.next_state.path_count);
        batch.push(first);
        for _ in 0..8 * self.hyper.batch {
            if batch.len() == self.hyper.batch {
                break;
            }
            let Some(t) = self.replay.draw(&mut self.rng) else {
                break;
            };
            if (t.state.path_count, t.next_state.path_count) == key {
                batch.push(t);
            }
        }
        batch
    }

    /// The DQN loss on `batch` (all with the same path counts).
    pub fn loss(&self, batch: &[EdarTransition]) -> Tensor {
        let device = self.core.device();
        self.core.batch_loss(
            batch,
            |net, states| net.forward_batch(&StateBatch::new(states.iter().copied(), device)),
            self.hyper.gamma,
            TdLoss::Squared,
            true,
        )
    }

    /// One step of Alg. 1/2 lines 14–20: sample, minimise the loss, soft-update the target.
    /// Returns the loss, or `None` while the replay buffer is empty.
    pub fn train_step(&mut self) -> Result<Option<f64>, EdarTrainError> {
        let batch = self.sample();
        if batch.is_empty() {
            return Ok(None);
        }
        let loss = self.loss(&batch);
        Ok(Some(self.core.step(&loss)))
    }

    /// `θ' ← τθ + (1 − τ)θ'`.
    pub fn soft_update(&mut self) {
        self.core.soft_update();
    }

    /// The target network's variables, by name (for tests of the soft update).
    pub fn target_variables(&self) -> std::collections::HashMap<String, Tensor> {
        self.core.target_variables()
    }

    /// The main network's variables, by name.
    pub fn main_variables(&self) -> std::collections::HashMap<String, Tensor> {
        self.core.main_variables()
    }

    /// The main network as sched-core's [`EdarNetwork`].
    pub fn export(&self) -> Result<EdarNetwork, EdarTrainError> {
        self.core.net().export()
    }
}

impl TrainStep<EdarTransition, EdarNetwork> for EdarDqn {
    type Error = EdarTrainError;

    fn train(&mut self, batch: &[EdarTransition]) -> Result<Option<EdarNetwork>, Self::Error> {
        for t in batch {
            self.push(*t);
        }
        for _ in 0..self.hyper.steps_per_batch.max(1) {
            self.train_step()?;
        }
        Ok(Some(self.export()?))
    }
}

impl TdSample for EdarTransition {
    type State = EdarState;

    fn state(&self) -> &EdarState {
        &self.state
    }

    fn next_state(&self) -> &EdarState {
        &self.next_state
    }

    fn action_index(&self) -> i64 {
        i64_of(self.action.index())
    }

    fn reward(&self) -> f32 {
        self.reward
    }

    fn terminal(&self) -> bool {
        self.terminal
    }
}
