//! FALCON's per-decision cost with its trained weights, beside the tch forward pass on the same
//! input, and one training step (FALCON §IV-B DQN, §V-A minibatch 32) on CPU.
//!
//! - `sched/select/falcon-shipped/4`: one `Falcon::select` over 4 paths with the shipped weights
//!   (`models/falcon/falcon.safetensors`; the built-in minRTT network of the same size if the
//!   file is missing): state construction, the MLP forward pass, the choice, the fallback check.
//!   (`sched/select/falcon/4` in the `decision` bench is the same with the built-in weights.)
//! - `learned/tch/falcon-forward`: the same policy and the same state through tch (one sample,
//!   one intra-op thread, no autograd) — feature `torch`.
//! - `learned/train/falcon-step`: one DQN gradient step on a minibatch of 32 plus the soft target
//!   update, CPU — feature `torch`; `learned/train/falcon-step-cuda`: the same step on the GPU,
//!   where libtorch sees one (the row is left out, with a line on stderr, where it does not).
#![allow(missing_docs)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;

use braid_sched_core::sched::falcon::{Falcon, FalconConfig, FalconWeights, Slots};
use braid_sched_core::{PacketMeta, PathId, PathView, Scheduler, Timestamp};
use criterion::{Criterion, criterion_group, criterion_main};

fn shipped() -> FalconWeights {
    let path = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../models/falcon/falcon.safetensors"
    ));
    match braid_learners::falcon::load(&path) {
        Ok(weights) => weights,
        Err(e) => {
            eprintln!(
                "learned_falcon: {}: {e}; using the built-in network",
                path.display()
            );
            FalconWeights::minrtt()
        }
    }
}

fn paths() -> Vec<PathView> {
    (0..4u8)
        .map(|i| {
            let mut p = PathView::new(PathId(i), 10_000 + 7_000 * u32::from(i), 200_000);
            p.bytes_in_flight = 20_000 * u64::from(i);
            p.loss_rate = 0.001 * f32::from(i);
            p
        })
        .collect()
}

fn learned_falcon(c: &mut Criterion) {
    let weights = shipped();
    let config = FalconConfig {
        weights: Some(Arc::new(weights.clone())),
        ..FalconConfig::default()
    };
    let mut falcon = Falcon::new(&config);
    let paths = paths();
    let packet = PacketMeta::bulk(1_200);
    let mut group = c.benchmark_group("sched/select");
    let mut now = 0u64;
    group.bench_function("falcon-shipped/4", |b| {
        b.iter(|| {
            now += 1;
            black_box(falcon.select(black_box(&paths), &packet, Timestamp::from_micros(now)))
        })
    });
    group.finish();
    torch_side(c, &weights, &Slots::fill(&paths, &packet, |_| true));
}

#[cfg(not(feature = "torch"))]
fn torch_side(_c: &mut Criterion, _weights: &FalconWeights, _slots: &Slots) {}

#[cfg(feature = "torch")]
fn torch_side(c: &mut Criterion, weights: &FalconWeights, slots: &Slots) {
    use braid_learners::falcon::train::{FalconDqn, FalconHyper};
    use braid_learners::torch::tch::{self, Device};
    use braid_sched_core::sched::falcon::FalconTransition;

    tch::set_num_threads(1);
    let mut dqn = FalconDqn::new(FalconHyper::default(), Device::Cpu).unwrap();
    dqn.load(weights.policy()).unwrap();
    let state = slots.state;
    let mut group = c.benchmark_group("learned/tch");
    group.bench_function("falcon-forward", |b| {
        b.iter(|| tch::no_grad(|| black_box(dqn.q_values(black_box(&[state])))))
    });
    group.finish();
    let batch: Vec<FalconTransition> = (0..32u8)
        .map(|i| FalconTransition {
            at: Timestamp::from_micros(u64::from(i)),
            state,
            action: i % 4,
            reward: f32::from(i) / 32.0,
            next_state: state,
            condition: 0,
            change: false,
        })
        .collect();
    let mut group = c.benchmark_group("learned/train");
    group.bench_function("falcon-step", |b| {
        b.iter(|| black_box(dqn.step(black_box(&batch))))
    });
    if tch::Cuda::is_available() {
        let mut gpu = FalconDqn::new(FalconHyper::default(), Device::Cuda(0)).unwrap();
        gpu.load(weights.policy()).unwrap();
        // `step` returns the loss read back to the host, so each step is timed to its end.
        group.bench_function("falcon-step-cuda", |b| {
            b.iter(|| black_box(gpu.step(black_box(&batch))))
        });
    } else {
        eprintln!("learned/train/falcon-step-cuda: libtorch sees no CUDA device, row not run");
    }
    group.finish();
}

criterion_group!(benches, learned_falcon);
criterion_main!(benches);
