//! Parity of sched-core's pure-Rust forward passes with tch's (feature `torch`): the same
//! networks, exported through the `braid-model` file format, on 1,000 random inputs each; the
//! largest absolute difference must be at most 1e-5.
//!
//! Run: `source scripts/setup-torch.sh && cargo test -p braid-learners --features torch --test parity -- --nocapture`.
#![cfg(feature = "torch")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use braid_learners::torch::{TchLstm, TchMlp};
use braid_learners::{Component, Model, Provenance};
use braid_sched_core::nn::Activation;
use tch::nn::{self, Module};
use tch::{Device, Kind, Tensor};

const SAMPLES: i64 = 1_000;
const TOLERANCE: f32 = 1e-5;

/// Uniform values in [-1, 1).
fn uniform(shape: &[i64]) -> Tensor {
    Tensor::rand(shape, (Kind::Float, Device::Cpu)) * 2.0 - 1.0
}

fn to_vec(t: &Tensor) -> Vec<f32> {
    Vec::<f32>::try_from(&t.contiguous().view(-1)).unwrap()
}

/// Through the file format and back, as a shipped model would travel.
fn via_file(model: Model) -> Model {
    Model::from_bytes(&model.to_bytes().unwrap()).unwrap()
}

#[test]
fn mlp_matches_tch_on_1000_inputs() {
    tch::manual_seed(11);
    let vs = nn::VarStore::new(Device::Cpu);
    // FALCON-size DQN: 4 paths × 4 features in, three hidden layers of 64, one Q-value per path.
    let widths = [16, 64, 64, 64, 4];
    let net = TchMlp::new(&(vs.root() / "q"), &widths, Activation::Relu).unwrap();
    let model = Model::new("falcon-dqn", Provenance::new(0, "parity test, seed 11"))
        .unwrap()
        .with("q", Component::Mlp(net.export().unwrap()))
        .unwrap();
    let model = via_file(model);
    let mlp = model.mlp("q").unwrap();

    let inputs = uniform(&[SAMPLES, 16]);
    let expected = to_vec(&tch::no_grad(|| net.forward(&inputs)));
    let inputs = to_vec(&inputs);
    let mut scratch = mlp.scratch();
    let mut max_diff = 0.0f32;
    for (x, want) in inputs.chunks_exact(16).zip(expected.chunks_exact(4)) {
        let got = mlp.forward(x, &mut scratch).unwrap();
        for (g, w) in got.iter().zip(want) {
            max_diff = max_diff.max((g - w).abs());
        }
    }
    println!("mlp {widths:?}: max |rust - tch| over {SAMPLES} inputs = {max_diff:e}");
    assert!(max_diff <= TOLERANCE, "max abs difference {max_diff:e}");
}

#[test]
fn lstm_matches_tch_on_1000_sequences() {
    tch::manual_seed(12);
    let vs = nn::VarStore::new(Device::Cpu);
    let (input, hidden, steps) = (8usize, 32usize, 5i64);
    let net = TchLstm::new(&(vs.root() / "repr"), input, hidden).unwrap();
    // tch starts LSTM biases at zero; give them values so that they are tested too.
    tch::no_grad(|| {
        for t in &net.tensors()[2..] {
            let mut variable = t.shallow_clone();
            variable.copy_(&(uniform(&t.size()) * 0.5));
        }
    });
    let model = Model::new("edar-repr", Provenance::new(0, "parity test, seed 12"))
        .unwrap()
        .with("repr", Component::Lstm(net.export().unwrap()))
        .unwrap();
    let model = via_file(model);
    let lstm = model.lstm("repr").unwrap();

    let inputs = uniform(&[SAMPLES, steps, input as i64]);
    let expected = to_vec(&tch::no_grad(|| net.forward_sequence(&inputs)));
    let inputs = to_vec(&inputs);
    let (mut state, mut scratch) = (lstm.state(), lstm.scratch());
    let per_sample = steps as usize * input;
    let mut max_diff = 0.0f32;
    for (xs, want) in inputs
        .chunks_exact(per_sample)
        .zip(expected.chunks_exact(hidden))
    {
        state.reset();
        let got = lstm.forward_sequence(xs, &mut state, &mut scratch).unwrap();
        for (g, w) in got.iter().zip(want) {
            max_diff = max_diff.max((g - w).abs());
        }
    }
    println!(
        "lstm in {input} hidden {hidden} × {steps} steps: max |rust - tch| over {SAMPLES} \
         sequences = {max_diff:e}"
    );
    assert!(max_diff <= TOLERANCE, "max abs difference {max_diff:e}");
}

#[test]
fn lstm_then_mlp_head_matches_tch() {
    // The shape of EdAR's network: a recurrent representation feeding a 128/32 core.
    tch::manual_seed(13);
    let vs = nn::VarStore::new(Device::Cpu);
    let repr = TchLstm::new(&(vs.root() / "repr"), 4, 16).unwrap();
    let core = TchMlp::new(&(vs.root() / "core"), &[16, 128, 32, 2], Activation::Relu).unwrap();
    let model = Model::new("edar-dqn", Provenance::new(0, "parity test, seed 13"))
        .unwrap()
        .with("repr", Component::Lstm(repr.export().unwrap()))
        .unwrap()
        .with("core", Component::Mlp(core.export().unwrap()))
        .unwrap();
    let model = via_file(model);
    let (lstm, mlp) = (model.lstm("repr").unwrap(), model.mlp("core").unwrap());

    let inputs = uniform(&[SAMPLES, 5, 4]);
    let expected = to_vec(&tch::no_grad(|| {
        core.forward(&repr.forward_sequence(&inputs))
    }));
    let inputs = to_vec(&inputs);
    let (mut state, mut lstm_scratch, mut mlp_scratch) =
        (lstm.state(), lstm.scratch(), mlp.scratch());
    let mut max_diff = 0.0f32;
    for (xs, want) in inputs.chunks_exact(20).zip(expected.chunks_exact(2)) {
        state.reset();
        let h = lstm
            .forward_sequence(xs, &mut state, &mut lstm_scratch)
            .unwrap();
        let q = mlp.forward(h, &mut mlp_scratch).unwrap();
        for (g, w) in q.iter().zip(want) {
            max_diff = max_diff.max((g - w).abs());
        }
    }
    println!("lstm → mlp: max |rust - tch| over {SAMPLES} sequences = {max_diff:e}");
    assert!(max_diff <= TOLERANCE, "max abs difference {max_diff:e}");
}
