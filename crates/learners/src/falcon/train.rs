//! FALCON's training with tch (feature `torch`): the DQN of §IV-B (MLP with three ReLU hidden
//! layers, Adam with learning rate 1e-3, minibatches of 32, §V-A), Reptile meta-training of one
//! meta-model per condition class (§IV-A's procedure: K steps of minibatch gradient descent on a
//! sampled task from Θ, then `Θ ← Θ + λ(W − Θ)`), and the online module's few-shot learning: on a
//! change, start from the matching meta-model, take K = 16 steps and deploy (Alg. 1 lines 9-13).
//!
//! Choices where the paper is silent (documented in `docs/models.md`): discount γ = 0.9, a target
//! network softly updated with τ = 0.01, Huber loss, Reptile step λ = 0.1, and one fine-tuning
//! step per 32 fresh transitions after a change (so K steps cost K × 32 packets, the paper's
//! "learning overhead", §VIII-A1).

use std::collections::HashMap;

use braid_sched_core::nn::{Activation, Mlp};
use braid_sched_core::sched::edar::SplitMix64;
use braid_sched_core::sched::falcon::{FalconTransition, FalconWeights, INPUTS, WIDTHS};
use tch::nn::{self, Module};
use tch::{Device, Tensor};

use crate::dqn::{DqnCore, ReplayBuffer, TdLoss, TdSample, below};
use crate::learner::TrainStep;
use crate::torch::{ExportError, TchMlp};

/// Hyper-parameters of FALCON's DQN, Reptile and fine-tuning.
#[derive(Clone, Debug, PartialEq)]
pub struct FalconHyper {
    /// Adam learning rate (§V-A: 1e-3).
    pub learning_rate: f64,
    /// Minibatch size (§V-A: 32).
    pub batch: usize,
    /// Discount γ.
    pub gamma: f64,
    /// Soft target update τ.
    pub tau: f64,
    /// Gradient steps per task or per change (§V-A: K = 16).
    pub k: usize,
    /// Reptile's outer step λ (§IV-A, 0 < λ ≤ 1).
    pub reptile_lambda: f64,
    /// Seed of sampling and initialisation.
    pub seed: u64,
}

impl Default for FalconHyper {
    fn default() -> Self {
        FalconHyper {
            learning_rate: 1e-3,
            batch: 32,
            gamma: 0.9,
            tau: 0.01,
            k: 16,
            reptile_lambda: 0.1,
            seed: 1,
        }
    }
}

/// Why FALCON training failed.
#[derive(Debug, thiserror::Error)]
pub enum FalconTrainError {
    /// A hyper-parameter is out of range.
    #[error("FALCON hyper-parameter `{name}` = {value}: {expected}")]
    Hyper {
        /// The parameter.
        name: &'static str,
        /// Its value.
        value: f64,
        /// What is accepted.
        expected: &'static str,
    },
    /// tch failed.
    #[error("tch: {0}")]
    Tch(#[from] tch::TchError),
    /// The network could not be built or exported.
    #[error(transparent)]
    Export(#[from] ExportError),
    /// The exported network does not fit FALCON.
    #[error(transparent)]
    Weights(#[from] braid_sched_core::sched::falcon::FalconWeightsError),
}

impl FalconHyper {
    fn validate(&self) -> Result<(), FalconTrainError> {
        let bad = |name, value: f64, expected| FalconTrainError::Hyper {
            name,
            value,
            expected,
        };
        if !(self.learning_rate > 0.0 && self.learning_rate < 1.0) {
            return Err(bad("learning_rate", self.learning_rate, "in (0, 1)"));
        }
        if self.batch == 0 || self.batch > 1 << 16 {
            return Err(bad("batch", self.batch as f64, "in 1..=65536"));
        }
        if !(0.0..1.0).contains(&self.gamma) {
            return Err(bad("gamma", self.gamma, "in [0, 1)"));
        }
        if !(self.tau > 0.0 && self.tau <= 1.0) {
            return Err(bad("tau", self.tau, "in (0, 1]"));
        }
        if self.k == 0 || self.k > 1 << 16 {
            return Err(bad("k", self.k as f64, "in 1..=65536"));
        }
        if !(self.reptile_lambda > 0.0 && self.reptile_lambda <= 1.0) {
            return Err(bad("reptile_lambda", self.reptile_lambda, "in (0, 1]"));
        }
        Ok(())
    }
}

/// FALCON's DQN: the shared [`DqnCore`] (main and target MLPs, Adam) with Huber TD loss and
/// minibatches drawn with replacement from the data at hand.
#[derive(Debug)]
pub struct FalconDqn {
    hyper: FalconHyper,
    core: DqnCore<TchMlp>,
    rng: SplitMix64,
}

impl FalconDqn {
    /// A freshly initialised agent on `device`, target = main.
    pub fn new(hyper: FalconHyper, device: Device) -> Result<Self, FalconTrainError> {
        hyper.validate()?;
        let core = DqnCore::new(
            device,
            hyper.seed,
            hyper.learning_rate,
            hyper.tau,
            |path: &nn::Path<'_>| -> Result<TchMlp, FalconTrainError> {
                Ok(TchMlp::new(path, &WIDTHS, Activation::Relu)?)
            },
        )?;
        Ok(FalconDqn {
            rng: SplitMix64(hyper.seed ^ 0xFA1C_0000),
            hyper,
            core,
        })
    }

    /// The hyper-parameters.
    pub fn hyper(&self) -> &FalconHyper {
        &self.hyper
    }

    /// Gradient steps taken.
    pub fn steps(&self) -> u64 {
        self.core.steps()
    }

    /// The loss of the latest step.
    pub fn last_loss(&self) -> Option<f64> {
        self.core.last_loss()
    }

    /// Sets both networks to `mlp` (a meta-model or a shipped policy) and restarts Adam's
    /// moments, as a fresh fine-tuning from that model.
    pub fn load(&mut self, mlp: &Mlp) -> Result<(), FalconTrainError> {
        self.core.net().load(mlp);
        self.core.sync_target()?;
        self.core.restart_optimizer()?;
        Ok(())
    }

    /// The main network as sched-core's [`Mlp`].
    pub fn export(&self) -> Result<Mlp, FalconTrainError> {
        Ok(self.core.net().export()?)
    }

    /// Q-values of `states` (`[n, INPUTS]`) from the main network.
    pub fn q_values(&self, states: &[[f32; INPUTS]]) -> Tensor {
        self.core.net().forward(&self.states(states.iter()))
    }

    fn states<'a>(&self, states: impl Iterator<Item = &'a [f32; INPUTS]>) -> Tensor {
        let flat: Vec<f32> = states.flat_map(|s| s.iter().copied()).collect();
        let rows = (flat.len() / INPUTS) as i64;
        self.core.tensor_f32(&flat).view([rows, INPUTS as i64])
    }

    /// The DQN loss on `batch`: Huber between `Q(s, a)` and `r + γ max_a' Q_target(s', a')`.
    pub fn loss(&self, batch: &[FalconTransition]) -> Tensor {
        self.core.batch_loss(
            batch,
            |net, states| net.forward(&self.states(states.iter().copied())),
            self.hyper.gamma,
            TdLoss::Huber,
            false,
        )
    }

    /// One gradient step on `batch` (never empty), then the soft target update; the loss.
    pub fn step(&mut self, batch: &[FalconTransition]) -> f64 {
        let loss = self.loss(batch);
        self.core.step(&loss)
    }

    /// One step on a minibatch drawn (with replacement) from `data` (never empty).
    pub fn step_on(&mut self, data: &[FalconTransition]) -> f64 {
        let batch: Vec<FalconTransition> = (0..self.hyper.batch)
            .map(|_| data[below(&mut self.rng, data.len())])
            .collect();
        self.step(&batch)
    }

    /// `θ' ← τθ + (1 − τ)θ'`.
    pub fn soft_update(&mut self) {
        self.core.soft_update();
    }

    /// The main network's variables, by name.
    pub fn main_variables(&self) -> HashMap<String, Tensor> {
        self.core.main_variables()
    }

    /// The target network's variables, by name.
    pub fn target_variables(&self) -> HashMap<String, Tensor> {
        self.core.target_variables()
    }

    /// One Reptile iteration (§IV-A steps 3-4) on `task` (never empty): K steps from the current
    /// weights Θ give W, then the weights become `Θ + λ(W − Θ)`. Returns the last inner loss.
    pub fn reptile_step(&mut self, task: &[FalconTransition]) -> Result<f64, FalconTrainError> {
        let theta: HashMap<String, Tensor> = self
            .core
            .main_variables()
            .into_iter()
            .map(|(name, t)| (name, t.detach().copy()))
            .collect();
        self.core.sync_target()?;
        self.core.restart_optimizer()?;
        let mut loss = 0.0;
        for _ in 0..self.hyper.k {
            loss = self.step_on(task);
        }
        reptile_interpolate(
            &self.core.main_variables(),
            &theta,
            self.hyper.reptile_lambda,
        );
        self.core.sync_target()?;
        Ok(loss)
    }
}

/// Reptile's outer update in place: each variable `w` of `adapted` becomes `θ + λ(w − θ)` with
/// `θ` the same-named tensor of `meta`.
pub fn reptile_interpolate(
    adapted: &HashMap<String, Tensor>,
    meta: &HashMap<String, Tensor>,
    lambda: f64,
) {
    tch::no_grad(|| {
        for (name, w) in adapted {
            if let Some(theta) = meta.get(name) {
                let updated = theta + (w - theta) * lambda;
                w.shallow_clone().copy_(&updated);
            }
        }
    });
}

/// Builds the meta-model of one group of tasks with Reptile: `iterations` times, sample a task
/// and take a Reptile step. Returns the loss of the last inner step.
pub fn meta_train(
    dqn: &mut FalconDqn,
    tasks: &[Vec<FalconTransition>],
    iterations: usize,
) -> Result<f64, FalconTrainError> {
    let tasks: Vec<&Vec<FalconTransition>> = tasks.iter().filter(|t| !t.is_empty()).collect();
    let mut loss = 0.0;
    if tasks.is_empty() {
        return Ok(loss);
    }
    for _ in 0..iterations {
        let task = tasks[below(&mut dqn.rng, tasks.len())];
        loss = dqn.reptile_step(task)?;
    }
    Ok(loss)
}

/// The online learning module (Alg. 1 lines 6-15) as a [`TrainStep`] for a [`crate::Learner`]:
/// on a transition flagged `change`, it loads the meta-model of the transition's condition class
/// (or the deployed policy if that class has none), takes one step per `batch` fresh transitions
/// until K steps are done, and then publishes the fine-tuned policy beside the unchanged
/// meta-models.
#[derive(Debug)]
pub struct FalconOnline {
    dqn: FalconDqn,
    weights: FalconWeights,
    fresh: Vec<FalconTransition>,
    steps_left: usize,
    fine_tunings: u64,
}

impl FalconOnline {
    /// Starts from `weights` (shipped meta-models and policy).
    pub fn new(hyper: FalconHyper, weights: FalconWeights) -> Result<Self, FalconTrainError> {
        let mut dqn = FalconDqn::new(hyper, Device::Cpu)?;
        dqn.load(weights.policy())?;
        Ok(FalconOnline {
            dqn,
            weights,
            fresh: Vec::new(),
            steps_left: 0,
            fine_tunings: 0,
        })
    }

    /// Fine-tunings completed (policies published).
    pub fn fine_tunings(&self) -> u64 {
        self.fine_tunings
    }

    /// The agent.
    pub fn dqn(&self) -> &FalconDqn {
        &self.dqn
    }
}

impl TrainStep<FalconTransition, FalconWeights> for FalconOnline {
    type Error = FalconTrainError;

    fn train(&mut self, batch: &[FalconTransition]) -> Result<Option<FalconWeights>, Self::Error> {
        let k = self.dqn.hyper.k;
        let size = self.dqn.hyper.batch;
        let mut publish = None;
        for t in batch {
            if t.change {
                let start = self
                    .weights
                    .meta(t.condition)
                    .unwrap_or(self.weights.policy())
                    .clone();
                self.dqn.load(&start)?;
                self.fresh.clear();
                self.steps_left = k;
            }
            if self.steps_left == 0 {
                continue;
            }
            self.fresh.push(*t);
            let done = k - self.steps_left;
            if self.fresh.len() >= size * (done + 1) {
                self.dqn.step_on(&self.fresh);
                self.steps_left -= 1;
                if self.steps_left == 0 {
                    self.weights = self.weights.with_policy(self.dqn.export()?)?;
                    self.fine_tunings += 1;
                    publish = Some(self.weights.clone());
                }
            }
        }
        Ok(publish)
    }
}

/// The plain online DQN of FALCON §VI (DQN-On): the same network, state, actions and reward as
/// FALCON, learning continuously without meta-models or change detection. Every `batch` fresh
/// transitions it takes one step on a minibatch drawn from a replay buffer of recent
/// transitions, and publishes the policy every `publish_every` steps. It starts from a given
/// network (the deployed policy, "from one model"), or, with [`DqnOnline::from_scratch`], from
/// a fresh initialisation (DQN-On(Z), §VI-B1).
#[derive(Debug)]
pub struct DqnOnline {
    dqn: FalconDqn,
    weights: FalconWeights,
    replay: ReplayBuffer<FalconTransition>,
    fresh: usize,
    publish_every: u64,
    published: u64,
}

/// Transitions the online DQN's replay buffer holds.
pub const DQN_ONLINE_REPLAY: usize = 10_000;

impl DqnOnline {
    /// Starts from `weights`' deployed policy; the meta-models are dropped (DQN-On has none).
    pub fn new(
        hyper: FalconHyper,
        weights: &FalconWeights,
        publish_every: u64,
    ) -> Result<Self, FalconTrainError> {
        let mut dqn = FalconDqn::new(hyper, Device::Cpu)?;
        dqn.load(weights.policy())?;
        Self::with(dqn, publish_every)
    }

    /// Starts from a fresh initialisation (seeded by `hyper.seed`).
    pub fn from_scratch(hyper: FalconHyper, publish_every: u64) -> Result<Self, FalconTrainError> {
        Self::with(FalconDqn::new(hyper, Device::Cpu)?, publish_every)
    }

    fn with(dqn: FalconDqn, publish_every: u64) -> Result<Self, FalconTrainError> {
        let policy = dqn.export()?;
        let weights =
            FalconWeights::new(policy, vec![None; braid_sched_core::sched::falcon::CLASSES])?;
        Ok(DqnOnline {
            dqn,
            weights,
            replay: ReplayBuffer::new(DQN_ONLINE_REPLAY),
            fresh: 0,
            publish_every: publish_every.max(1),
            published: 0,
        })
    }

    /// The weights it starts from and publishes (policy only).
    pub fn weights(&self) -> &FalconWeights {
        &self.weights
    }

    /// Policies published.
    pub fn published(&self) -> u64 {
        self.published
    }

    /// The agent.
    pub fn dqn(&self) -> &FalconDqn {
        &self.dqn
    }
}

impl TrainStep<FalconTransition, FalconWeights> for DqnOnline {
    type Error = FalconTrainError;

    fn train(&mut self, batch: &[FalconTransition]) -> Result<Option<FalconWeights>, Self::Error> {
        let size = self.dqn.hyper.batch;
        let mut publish = None;
        for t in batch {
            self.replay.push(*t);
            self.fresh += 1;
            if self.fresh < size {
                continue;
            }
            self.fresh = 0;
            let minibatch: Vec<FalconTransition> = (0..size)
                .filter_map(|_| self.replay.draw(&mut self.dqn.rng))
                .collect();
            self.dqn.step(&minibatch);
            if self.dqn.steps().is_multiple_of(self.publish_every) {
                self.weights = self.weights.with_policy(self.dqn.export()?)?;
                self.published += 1;
                publish = Some(self.weights.clone());
            }
        }
        Ok(publish)
    }
}

impl TdSample for FalconTransition {
    type State = [f32; INPUTS];

    fn state(&self) -> &[f32; INPUTS] {
        &self.state
    }

    fn next_state(&self) -> &[f32; INPUTS] {
        &self.next_state
    }

    fn action_index(&self) -> i64 {
        i64::from(self.action)
    }

    fn reward(&self) -> f32 {
        self.reward
    }

    fn terminal(&self) -> bool {
        false
    }
}
