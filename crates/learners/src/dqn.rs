//! The DQN core that EdAR's and FALCON's tch trainers share (feature `torch`): a main network and
//! a target network in their own variable stores, Adam on the main one, the temporal-difference
//! loss `Q(s, a)` against `y = r + γ max_a' Q'(s', a')` (`y = r` for a terminal transition), the
//! soft target update `θ' ← τθ + (1 − τ)θ'` after every gradient step, and a fixed-capacity
//! replay buffer. What differs between the two schedulers stays with them: the network and how a
//! batch of states becomes a tensor ([`crate::edar::train`], [`crate::falcon::train`]), how
//! minibatches are drawn, and the loss (EdAR: squared error, FALCON: Huber).
//!
//! ε-greedy exploration is the schedulers' own (sched-core's `EdarConfig::epsilon`,
//! `FalconConfig::epsilon`): the learners only consume the transitions it produces.

use std::collections::HashMap;

use braid_sched_core::sched::edar::SplitMix64;
use tch::nn::{self, OptimizerConfig};
use tch::{Device, Reduction, Tensor};

/// The regression loss between `Q(s, a)` and the TD target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TdLoss {
    /// Mean squared error (EdAR, §V-A: `(y − Q(s, a))²`).
    Squared,
    /// Mean Huber loss with δ = 1 (FALCON).
    Huber,
}

/// One minibatch's actions, rewards and terminal flags for [`DqnCore::td_loss`].
#[derive(Clone, Copy, Debug)]
pub struct TdBatch<'a> {
    /// The action taken in each transition (a column index of the Q-values).
    pub actions: &'a [i64],
    /// The reward of each transition.
    pub rewards: &'a [f32],
    /// 1.0 where the next state continues the episode, 0.0 where it is terminal; `None` when no
    /// transition is ever terminal.
    pub live: Option<&'a [f32]>,
    /// Discount γ.
    pub gamma: f64,
    /// The loss.
    pub loss: TdLoss,
}

/// What the TD loss reads of one transition ([`DqnCore::batch_loss`]).
pub trait TdSample {
    /// The state type the networks read.
    type State;
    /// The state decided on.
    fn state(&self) -> &Self::State;
    /// The state after the action.
    fn next_state(&self) -> &Self::State;
    /// The action taken (a column index of the Q-values).
    fn action_index(&self) -> i64;
    /// The reward.
    fn reward(&self) -> f32;
    /// Whether the next state ends the episode (`y = r`).
    fn terminal(&self) -> bool;
}

/// Main and target networks of type `N`, Adam on the main network, and the step counters.
pub struct DqnCore<N> {
    device: Device,
    vs: nn::VarStore,
    net: N,
    target_vs: nn::VarStore,
    target: N,
    optimizer: nn::Optimizer,
    learning_rate: f64,
    tau: f64,
    steps: u64,
    last_loss: Option<f64>,
}

impl<N> std::fmt::Debug for DqnCore<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DqnCore")
            .field("device", &self.device)
            .field("learning_rate", &self.learning_rate)
            .field("tau", &self.tau)
            .field("steps", &self.steps)
            .field("last_loss", &self.last_loss)
            .finish()
    }
}

impl<N> DqnCore<N> {
    /// Seeds tch with `seed`, builds the main network with `build` under the variable path `q`,
    /// a second one as the target (then a copy of the main network), and Adam with
    /// `learning_rate` (Alg. 1 lines 11–12 in EdAR's terms). `tau` is the soft update rate.
    pub fn new<E: From<tch::TchError>>(
        device: Device,
        seed: u64,
        learning_rate: f64,
        tau: f64,
        build: impl Fn(&nn::Path<'_>) -> Result<N, E>,
    ) -> Result<Self, E> {
        tch::manual_seed(i64::from_ne_bytes(seed.to_ne_bytes()));
        let vs = nn::VarStore::new(device);
        let net = build(&(vs.root() / "q"))?;
        let mut target_vs = nn::VarStore::new(device);
        let target = build(&(target_vs.root() / "q"))?;
        target_vs.copy(&vs)?;
        let optimizer = nn::Adam::default().build(&vs, learning_rate)?;
        Ok(DqnCore {
            device,
            vs,
            net,
            target_vs,
            target,
            optimizer,
            learning_rate,
            tau,
            steps: 0,
            last_loss: None,
        })
    }

    /// The device the networks live on.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The main network.
    pub fn net(&self) -> &N {
        &self.net
    }

    /// The target network.
    pub fn target(&self) -> &N {
        &self.target
    }

    /// Gradient steps taken.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// The loss of the latest step.
    pub fn last_loss(&self) -> Option<f64> {
        self.last_loss
    }

    /// Sets the target network to a copy of the main network.
    pub fn sync_target(&mut self) -> Result<(), tch::TchError> {
        self.target_vs.copy(&self.vs)
    }

    /// A fresh Adam (zero moments) on the main network.
    pub fn restart_optimizer(&mut self) -> Result<(), tch::TchError> {
        self.optimizer = nn::Adam::default().build(&self.vs, self.learning_rate)?;
        Ok(())
    }

    /// `f32` values as a tensor on the device.
    pub fn tensor_f32(&self, values: &[f32]) -> Tensor {
        Tensor::from_slice(values).to_device(self.device)
    }

    /// The TD loss of a minibatch: `q` holds the main network's Q-values of the states
    /// (`[B, actions]`, with gradients), `next_q` the target network's of the next states
    /// (computed without gradients).
    pub fn td_loss(&self, q: &Tensor, next_q: &Tensor, batch: TdBatch<'_>) -> Tensor {
        let actions = Tensor::from_slice(batch.actions)
            .to_device(self.device)
            .unsqueeze(1);
        let rewards = self.tensor_f32(batch.rewards);
        let q = q.gather(1, &actions, false).squeeze_dim(1);
        let target = tch::no_grad(|| {
            let (best_next, _) = next_q.max_dim(1, false);
            match batch.live {
                Some(live) => rewards + self.tensor_f32(live) * best_next * batch.gamma,
                None => rewards + best_next * batch.gamma,
            }
        });
        match batch.loss {
            TdLoss::Squared => q.mse_loss(&target, Reduction::Mean),
            TdLoss::Huber => q.huber_loss(&target, Reduction::Mean, 1.0),
        }
    }

    /// The TD loss of `batch`: `forward` turns the batch's states into Q-values (the main
    /// network's with gradients, the target network's of the next states without), and the
    /// actions, rewards and, when `terminal_flags`, the terminal flags become the [`TdBatch`].
    pub fn batch_loss<T: TdSample>(
        &self,
        batch: &[T],
        forward: impl Fn(&N, &[&T::State]) -> Tensor,
        gamma: f64,
        loss: TdLoss,
        terminal_flags: bool,
    ) -> Tensor {
        let states: Vec<&T::State> = batch.iter().map(TdSample::state).collect();
        let next: Vec<&T::State> = batch.iter().map(TdSample::next_state).collect();
        let actions: Vec<i64> = batch.iter().map(TdSample::action_index).collect();
        let rewards: Vec<f32> = batch.iter().map(TdSample::reward).collect();
        let live: Option<Vec<f32>> = terminal_flags.then(|| {
            batch
                .iter()
                .map(|t| if t.terminal() { 0.0 } else { 1.0 })
                .collect()
        });
        let q = forward(&self.net, &states);
        let next_q = tch::no_grad(|| forward(&self.target, &next));
        self.td_loss(
            &q,
            &next_q,
            TdBatch {
                actions: &actions,
                rewards: &rewards,
                live: live.as_deref(),
                gamma,
                loss,
            },
        )
    }

    /// One gradient step on `loss`, then the soft target update; returns the loss's value.
    pub fn step(&mut self, loss: &Tensor) -> f64 {
        self.optimizer.backward_step(loss);
        self.soft_update();
        self.steps += 1;
        let value = loss.double_value(&[]);
        self.last_loss = Some(value);
        value
    }

    /// `θ' ← τθ + (1 − τ)θ'`.
    pub fn soft_update(&mut self) {
        let tau = self.tau;
        let source = self.vs.variables();
        tch::no_grad(|| {
            for (name, mut t) in self.target_vs.variables() {
                if let Some(s) = source.get(&name) {
                    // θ' + τ(θ − θ'): one operation per variable, in place.
                    let _ = t.lerp_(s, tau);
                }
            }
        });
    }

    /// The main network's variables, by name (shallow: writing them changes the network).
    pub fn main_variables(&self) -> HashMap<String, Tensor> {
        self.vs.variables()
    }

    /// The target network's variables, by name.
    pub fn target_variables(&self) -> HashMap<String, Tensor> {
        self.target_vs.variables()
    }
}

/// A replay buffer of at most `capacity` transitions; when full, each new one replaces the
/// oldest.
#[derive(Clone, Debug)]
pub struct ReplayBuffer<T> {
    items: Vec<T>,
    next: usize,
    capacity: usize,
}

impl<T: Copy> ReplayBuffer<T> {
    /// An empty buffer (`capacity` ≥ 1; it reserves at most 2^20 entries up front).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        ReplayBuffer {
            items: Vec::with_capacity(capacity.min(1 << 20)),
            next: 0,
            capacity,
        }
    }

    /// Adds `item`, replacing the oldest when full.
    pub fn push(&mut self, item: T) {
        if self.items.len() < self.capacity {
            self.items.push(item);
        } else {
            self.items[self.next] = item;
            self.next = (self.next + 1) % self.capacity;
        }
    }

    /// Transitions held.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// A uniformly drawn transition (`None` while empty).
    pub fn draw(&self, rng: &mut SplitMix64) -> Option<T> {
        if self.items.is_empty() {
            return None;
        }
        Some(self.items[below(rng, self.items.len())])
    }
}

/// Uniform in `0..n` (0 when `n` is 0), by `next_u64() % n` as both trainers have always drawn.
pub fn below(rng: &mut SplitMix64, n: usize) -> usize {
    (rng.next_u64() % n.max(1) as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_buffer_replaces_the_oldest_when_full() {
        let mut replay = ReplayBuffer::new(3);
        assert!(replay.is_empty());
        assert_eq!(replay.draw(&mut SplitMix64(1)), None);
        for i in 0..5 {
            replay.push(i);
        }
        assert_eq!(replay.len(), 3);
        // 0 and 1 were replaced by 3 and 4.
        let mut rng = SplitMix64(2);
        let mut seen = [false; 5];
        for _ in 0..200 {
            seen[replay.draw(&mut rng).unwrap()] = true;
        }
        assert_eq!(seen, [false, false, true, true, true]);
    }

    #[test]
    fn below_stays_in_range() {
        let mut rng = SplitMix64(9);
        assert_eq!(below(&mut rng, 0), 0);
        assert!((0..1000).all(|_| below(&mut rng, 7) < 7));
    }
}
