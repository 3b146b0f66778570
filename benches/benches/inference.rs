//! `nn/forward/<impl>/<model>`: one forward pass of a learned scheduler's network, as done once
//! per decision. `rust/*` is sched-core's allocation-free inference; with `--features torch`,
//! `tch/*` runs the same network, with the same weights and input, through tch (one sample, one
//! intra-op thread, no autograd), so the ratio comes from one run.
//!
//! - `mlp`: FALCON-size DQN, 16 inputs (4 paths × 4 features) → 64 → 64 → 64 → 4, ReLU.
//! - `lstm`: one LSTM layer, 8 inputs, 32 hidden units, over a k = 5 history (EdAR's
//!   representation), from a zero state.
#![allow(missing_docs)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use braid_sched_core::nn::{Lstm, Mlp};
use criterion::{Criterion, criterion_group, criterion_main};

const MLP_WIDTHS: [usize; 5] = [16, 64, 64, 64, 4];
const LSTM_INPUT: usize = 8;
const LSTM_HIDDEN: usize = 32;
const LSTM_STEPS: usize = 5;

fn inputs() -> (Vec<f32>, Vec<f32>) {
    let mlp = (0..MLP_WIDTHS[0]).map(|i| (i as f32 * 0.7).sin()).collect();
    let lstm = (0..LSTM_STEPS * LSTM_INPUT)
        .map(|i| (i as f32 * 0.3).cos())
        .collect();
    (mlp, lstm)
}

fn bench_rust(c: &mut Criterion, mlp: &Mlp, lstm: &Lstm) {
    let (mlp_input, lstm_input) = inputs();
    let mut group = c.benchmark_group("nn/forward");
    let mut scratch = mlp.scratch();
    group.bench_function("rust/mlp", |b| {
        b.iter(|| {
            let out = mlp.forward(black_box(&mlp_input), &mut scratch).unwrap();
            black_box(out[0])
        })
    });
    let (mut state, mut scratch) = (lstm.state(), lstm.scratch());
    group.bench_function("rust/lstm", |b| {
        b.iter(|| {
            state.reset();
            let h = lstm
                .forward_sequence(black_box(&lstm_input), &mut state, &mut scratch)
                .unwrap();
            black_box(h[0])
        })
    });
    group.finish();
}

#[cfg(not(feature = "torch"))]
fn inference(c: &mut Criterion) {
    use braid_sched_core::nn::{Activation, Linear};
    let value = |i: usize, fan_in: usize| (i as f32 * 0.618).sin() / (fan_in as f32).sqrt();
    let layers = MLP_WIDTHS
        .windows(2)
        .map(|w| {
            let weight = (0..w[0] * w[1]).map(|i| value(i, w[0])).collect();
            let bias = (0..w[1]).map(|i| value(i + 7, w[0])).collect();
            Linear::new("layer", w[0], w[1], weight, bias).unwrap()
        })
        .collect();
    let mlp = Mlp::new(layers, Activation::Relu).unwrap();
    let gates = 4 * LSTM_HIDDEN;
    let w = |n: usize| (0..n).map(|i| value(i, LSTM_HIDDEN)).collect::<Vec<_>>();
    let lstm = Lstm::new(
        LSTM_INPUT,
        LSTM_HIDDEN,
        &w(gates * LSTM_INPUT),
        &w(gates * LSTM_HIDDEN),
        &w(gates),
        &w(gates),
    )
    .unwrap();
    bench_rust(c, &mlp, &lstm);
}

#[cfg(feature = "torch")]
fn inference(c: &mut Criterion) {
    use braid_learners::torch::tch::nn::{self, Module};
    use braid_learners::torch::tch::{self, Device, Tensor};
    use braid_learners::torch::{TchLstm, TchMlp};
    use braid_sched_core::nn::Activation;

    tch::set_num_threads(1);
    tch::manual_seed(5);
    let vs = nn::VarStore::new(Device::Cpu);
    let tch_mlp = TchMlp::new(&(vs.root() / "q"), &MLP_WIDTHS, Activation::Relu).unwrap();
    let tch_lstm = TchLstm::new(&(vs.root() / "repr"), LSTM_INPUT, LSTM_HIDDEN).unwrap();
    let (mlp, lstm) = (tch_mlp.export().unwrap(), tch_lstm.export().unwrap());
    bench_rust(c, &mlp, &lstm);

    let (mlp_input, lstm_input) = inputs();
    let mlp_x = Tensor::from_slice(&mlp_input).view([1, MLP_WIDTHS[0] as i64]);
    let lstm_x = Tensor::from_slice(&lstm_input).view([1, LSTM_STEPS as i64, LSTM_INPUT as i64]);
    let mut group = c.benchmark_group("nn/forward");
    group.bench_function("tch/mlp", |b| {
        b.iter(|| tch::no_grad(|| black_box(tch_mlp.forward(black_box(&mlp_x)))))
    });
    group.bench_function("tch/lstm", |b| {
        b.iter(|| tch::no_grad(|| black_box(tch_lstm.forward_sequence(black_box(&lstm_x)))))
    });
    group.finish();
}

criterion_group!(benches, inference);
criterion_main!(benches);
