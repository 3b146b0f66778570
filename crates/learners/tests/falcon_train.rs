//! FALCON training with tch (feature `torch`): DQN update sanity on a toy problem, the soft
//! target update and Reptile's outer step as arithmetic, export → pure-Rust parity of the full
//! network through the model file, and the online module's K-step fine-tuning from the matching
//! meta-model feeding a running scheduler.
//!
//! Run: `source scripts/setup-torch.sh && cargo test -p braid-learners --features torch --test falcon_train`.
#![cfg(feature = "torch")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;

use braid_learners::falcon::train::{
    FalconDqn, FalconHyper, FalconOnline, meta_train, reptile_interpolate,
};
use braid_learners::falcon::{from_model, to_model};
use braid_learners::{Learner, LearnerConfig, Model, Provenance, TrainStep};
use braid_sched_core::sched::falcon::{
    CLASSES, Falcon, FalconConfig, FalconTransition, FalconWeights, INPUTS,
};
use braid_sched_core::slot::{experience_queue, weight_slot};
use braid_sched_core::{Decision, PacketMeta, PathId, PathView, Scheduler, Timestamp};
use tch::{Device, Kind, Tensor};

/// Deterministic pseudo-random values in [0, 1).
struct Values(u64);

impl Values {
    fn next(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        ((self.0 >> 40) as f32) / (1u64 << 24) as f32
    }

    fn state(&mut self) -> [f32; INPUTS] {
        std::array::from_fn(|_| self.next())
    }
}

/// A contextual-bandit toy: the reward of slot `a` is `state[4a + 3]` (the slot's RTT feature)
/// negated, so the best action is the lowest RTT; next states are independent.
fn toy_transitions(n: usize, seed: u64, best_bonus: f32) -> Vec<FalconTransition> {
    let mut v = Values(seed);
    (0..n)
        .map(|i| {
            let state = v.state();
            let action = (i % 4) as u8;
            let reward = -state[4 * usize::from(action) + 3] + best_bonus * f32::from(action == 2);
            FalconTransition {
                at: Timestamp::from_micros(i as u64),
                state,
                action,
                reward,
                next_state: v.state(),
                condition: 0,
                change: false,
            }
        })
        .collect()
}

#[test]
fn dqn_loss_decreases_on_a_toy_problem() {
    let data = toy_transitions(512, 3, 0.0);
    let mut dqn = FalconDqn::new(FalconHyper::default(), Device::Cpu).unwrap();
    let before = dqn.loss(&data).double_value(&[]);
    for _ in 0..300 {
        dqn.step_on(&data);
    }
    let after = dqn.loss(&data).double_value(&[]);
    assert!(after < 0.5 * before, "loss {before} -> {after}");
    assert_eq!(dqn.steps(), 300);
}

#[test]
fn soft_update_blends_with_tau() {
    let hyper = FalconHyper {
        tau: 0.25,
        ..FalconHyper::default()
    };
    let mut dqn = FalconDqn::new(hyper, Device::Cpu).unwrap();
    let target_before: HashMap<String, Tensor> = dqn
        .target_variables()
        .into_iter()
        .map(|(n, t)| (n, t.detach().copy()))
        .collect();
    // Move the main network away from the target, then blend once.
    tch::no_grad(|| {
        for (_, t) in dqn.main_variables() {
            let _ = t.shallow_clone().g_add_scalar_(1.0);
        }
    });
    let main = dqn.main_variables();
    dqn.soft_update();
    for (name, after) in dqn.target_variables() {
        let expected = &target_before[&name] * 0.75 + &main[&name] * 0.25;
        let diff = (after - expected).abs().max().double_value(&[]);
        assert!(diff < 1e-6, "{name}: {diff}");
    }
}

#[test]
fn reptile_outer_step_is_theta_plus_lambda_times_difference() {
    let theta: HashMap<String, Tensor> =
        HashMap::from([("w".to_owned(), Tensor::from_slice(&[1.0f32, 2.0, -4.0]))]);
    let adapted: HashMap<String, Tensor> =
        HashMap::from([("w".to_owned(), Tensor::from_slice(&[3.0f32, 2.0, 0.0]))]);
    reptile_interpolate(&adapted, &theta, 0.25);
    let w = Vec::<f32>::try_from(&adapted["w"]).unwrap();
    assert_eq!(w, vec![1.5, 2.0, -3.0]);
}

#[test]
fn reptile_moves_the_meta_model_towards_the_tasks() {
    // Two tasks that differ only in a bonus for slot 2; the meta-model's loss on both falls.
    let tasks = vec![toy_transitions(256, 5, 0.0), toy_transitions(256, 6, 0.5)];
    let mut dqn = FalconDqn::new(FalconHyper::default(), Device::Cpu).unwrap();
    let loss =
        |dqn: &FalconDqn| -> f64 { tasks.iter().map(|t| dqn.loss(t).double_value(&[])).sum() };
    let before = loss(&dqn);
    meta_train(&mut dqn, &tasks, 20).unwrap();
    let after = loss(&dqn);
    assert!(after < before, "meta loss {before} -> {after}");
    assert_eq!(dqn.steps(), 20 * 16);
}

#[test]
fn exported_network_matches_tch_through_the_model_file() {
    let mut dqn = FalconDqn::new(FalconHyper::default(), Device::Cpu).unwrap();
    dqn.step_on(&toy_transitions(64, 8, 0.0));
    let mut meta = vec![None; CLASSES];
    meta[9] = Some(dqn.export().unwrap());
    let weights = FalconWeights::new(dqn.export().unwrap(), meta).unwrap();
    let bytes = to_model(&weights, Provenance::new(0, "parity"))
        .unwrap()
        .to_bytes()
        .unwrap();
    let loaded = from_model(&Model::from_bytes(&bytes).unwrap()).unwrap();
    let mut scratch = loaded.policy().scratch();
    let mut v = Values(99);
    let states: Vec<[f32; INPUTS]> = (0..1_000).map(|_| v.state()).collect();
    let tch_q = dqn.q_values(&states).to_kind(Kind::Float);
    let tch_q = Vec::<f32>::try_from(&tch_q.contiguous().view(-1)).unwrap();
    let mut worst = 0.0f32;
    for (i, s) in states.iter().enumerate() {
        let q = loaded.policy().forward(s, &mut scratch).unwrap();
        for (a, value) in q.iter().enumerate() {
            worst = worst.max((value - tch_q[i * 4 + a]).abs());
        }
    }
    assert!(worst <= 1e-5, "max abs diff {worst}");
}

#[test]
fn fine_tuning_starts_from_the_meta_model_and_publishes_after_k_steps() {
    // Meta-model for class 5 trained on the toy; the deployed policy is the minRTT network.
    let mut dqn = FalconDqn::new(FalconHyper::default(), Device::Cpu).unwrap();
    for _ in 0..50 {
        dqn.step_on(&toy_transitions(128, 4, 0.0));
    }
    let meta_model = dqn.export().unwrap();
    let mut meta = vec![None; CLASSES];
    meta[5] = Some(meta_model.clone());
    let weights = FalconWeights::new(FalconWeights::minrtt().policy().clone(), meta).unwrap();
    let mut online = FalconOnline::new(FalconHyper::default(), weights).unwrap();
    let mut data = toy_transitions(16 * 32, 11, 0.0);
    data[0].change = true;
    data[0].condition = 5;
    // Everything but the last transition: 15 steps, nothing published yet.
    assert!(online.train(&data[..data.len() - 1]).unwrap().is_none());
    assert_eq!(online.dqn().steps(), 15);
    let published = online.train(&data[data.len() - 1..]).unwrap().unwrap();
    assert_eq!(online.dqn().steps(), 16);
    assert_eq!(online.fine_tunings(), 1);
    assert_eq!(published.meta(5), Some(&meta_model));
    assert_ne!(published.policy(), &meta_model);
    assert_ne!(published.policy(), FalconWeights::minrtt().policy());
    // Without a change, nothing more is learned.
    assert!(
        online
            .train(&toy_transitions(64, 12, 0.0))
            .unwrap()
            .is_none()
    );
}

#[test]
fn learner_thread_hot_swaps_the_running_scheduler() {
    let weights = FalconWeights::minrtt();
    let (writer, reader) = weight_slot(weights.clone());
    let (sender, receiver) = experience_queue::<FalconTransition>(1 << 12).unwrap();
    let online = FalconOnline::new(FalconHyper::default(), weights).unwrap();
    let learner = Learner::spawn(LearnerConfig::default(), receiver, writer, online).unwrap();
    let config = FalconConfig {
        epsilon: 0.0,
        ..FalconConfig::default()
    };
    let mut falcon = Falcon::with_reader(&config, reader.clone());
    falcon.attach_learner(reader, sender.clone());
    let mut data = toy_transitions(16 * 32, 21, 0.0);
    data[0].change = true;
    for t in data {
        assert!(sender.send(t));
    }
    let stats = learner.stop().unwrap();
    assert_eq!(stats.published, 1);
    let paths = [
        PathView::new(PathId(0), 40_000, 20_000),
        PathView::new(PathId(1), 10_000, 20_000),
    ];
    let d = falcon.select(&paths, &PacketMeta::bulk(1_200), Timestamp::ZERO);
    assert!(matches!(d, Decision::Send(_)));
    assert_eq!(falcon.stats().model_version, 1);
    assert_ne!(falcon.weights().policy(), FalconWeights::minrtt().policy());
}

#[test]
fn online_dqn_learns_continuously_without_meta_models() {
    use braid_learners::falcon::train::DqnOnline;
    let shipped = FalconWeights::minrtt();
    let mut online = DqnOnline::new(FalconHyper::default(), &shipped, 4).unwrap();
    assert_eq!(online.weights().policy(), shipped.policy());
    assert!(online.weights().meta_models().iter().all(Option::is_none));
    // 3 steps (96 transitions): nothing published yet; the 4th step publishes.
    let data = toy_transitions(4 * 32, 31, 0.0);
    assert!(online.train(&data[..96]).unwrap().is_none());
    assert_eq!(online.dqn().steps(), 3);
    let published = online.train(&data[96..]).unwrap().unwrap();
    assert_eq!(online.dqn().steps(), 4);
    assert_eq!(online.published(), 1);
    assert_ne!(published.policy(), shipped.policy());
    // No change flag is needed: it keeps learning.
    assert!(
        online
            .train(&toy_transitions(4 * 32, 32, 0.0))
            .unwrap()
            .is_some()
    );
    assert_eq!(online.dqn().steps(), 8);
    // From scratch: a different, seeded start.
    let a = DqnOnline::from_scratch(FalconHyper::default(), 1).unwrap();
    let b = DqnOnline::from_scratch(FalconHyper::default(), 1).unwrap();
    assert_eq!(a.weights(), b.weights());
    assert_ne!(a.weights().policy(), shipped.policy());
}
