//! EdAR's per-decision cost (DESIGN.md budget: edar inference ≤ 1 µs), beside the tch forward
//! pass on the same input, and one DQN training step.
//!
//! - `sched/select/edar/{2,4}`: one `Scheduler::select` that closes an interval and runs the full
//!   Q-network (six LSTM1 over 6 intervals per path, LSTM2 across paths, 128/32 core) with
//!   trained-size weights: `now` advances past the interval on every call, so every call decides.
//!   No packet comes between two decisions, so the next decision's prefix (the part of the pass
//!   that reads only older intervals, computed a unit per `select` inside the interval) never
//!   gets a unit done and every decision runs the full pass.
//! - `sched/select/edar_boundary/{2,4}`: the decision at an interval boundary after seven packets
//!   in the interval (a steady stream): the prefix is ready and only the rest of the pass runs.
//!   Each decision is timed alone (the seven selects before it are not timed), so the row includes
//!   one clock read pair: `sched/select/clock_only` is that pair alone.
//! - `sched/select/edar_slice/4`: a `select` inside an interval that runs one unit of the
//!   prefix (unit 4, a whole LSTM1 step at K = 4: with units 1-3 the most expensive), timed
//!   alone the same way.
//! - `sched/select/edar_interval/{2,4}`: one whole interval, the decision plus the seven selects
//!   that compute the next prefix (the total work per interval).
//! - `sched/select/edar_in_interval/4`: a `select` inside an interval with no prefix work left
//!   (the mode is already chosen: what most packets cost).
//! - `learned/rust/edar_forward/{2,4}`: the Q-network alone (the packed pass `select` uses, the
//!   fastest build this CPU runs); `learned/rust/edar_forward_{avx2,portable}/{2,4}`: the same
//!   pass in the slower builds this CPU also runs (what CPUs without AVX-512, or without AVX2,
//!   run);
//!   `learned/rust/edar_forward_reference/{2,4}`: the same network evaluated layer by layer with
//!   the `nn` parts (the pass before the re-layout), on the same state.
//! - `learned/tch/edar_forward/{2,4}` (feature `torch`): the tch twin on the same state, one
//!   sample, one thread.
//! - `learned/train_step/edar_cpu` (feature `torch`): one DQN step (batch 32, 2 paths) on CPU,
//!   one thread; `learned/train_step/edar_cuda`: the same step on the GPU, where libtorch sees
//!   one (the row is left out, with a line on stderr, where it does not).
//! - `cpu/…` (Linux): every `sched/select/…` row and the Rust forward passes
//!   again (with `EdarNetwork::initial(1)`, the same shapes), and with `torch` the tch forward
//!   passes (`cpu/learned/tch/edar_forward/{2,4}`, one thread), timed in this thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`) instead of wall-clock
//!   time: on a machine shared with other work, time spent descheduled is not counted, so these
//!   medians stay the cost of the code itself (wall-clock medians grow with the machine's load).
//!
//! Run: `cargo bench -p braid-benches --bench learned_edar` (add `--features torch` after
//! `source scripts/setup-torch.sh` for the tch side).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::Duration;

use braid_sched_core::sched::edar::{
    Edar, EdarConfig, EdarKernel, EdarNetwork, EdarState, SplitMix64,
};
use braid_sched_core::slot::weight_slot;
use braid_sched_core::{PacketMeta, PathId, PathView, Scheduler, Timestamp};
use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

fn paths(k: usize) -> Vec<PathView> {
    (0..k)
        .map(|i| {
            let mut p = PathView::new(PathId(i as u8), 20_000 + 10_000 * i as u32, 200_000);
            p.bytes_in_flight = 50_000;
            p.loss_rate = 0.001 * i as f32;
            p
        })
        .collect()
}

fn scheduler(network: &EdarNetwork) -> Edar {
    let (_writer, reader) = weight_slot(network.clone());
    Edar::new(&EdarConfig {
        weights: Some(reader),
        ..EdarConfig::default()
    })
}

fn state(k: u8) -> EdarState {
    let mut rng = SplitMix64(3);
    let mut s = EdarState::EMPTY;
    s.path_count = k;
    s.connection = [1.0, 0.5, 0.3];
    for p in s.paths.iter_mut() {
        for v in p.iter_mut() {
            *v = rng.unit() as f32;
        }
    }
    s
}

/// Selects inside an interval after a decision: enough for the next decision's prefix (seven
/// units, one per call) to be complete.
const UNITS: usize = 7;

/// `iters` boundary decisions of `s` with the prefix ready, each timed alone (the `UNITS`
/// selects inside the interval before it are not timed): a steady stream of packets.
fn boundaries<M: Measurement>(
    m: &M,
    s: &mut Edar,
    views: &[PathView],
    now: &mut Timestamp,
    iters: u64,
) -> M::Value {
    let packet = PacketMeta::bulk(1_200);
    let mut total = m.zero();
    for _ in 0..iters {
        for _ in 0..UNITS {
            *now += Duration::from_micros(100);
            black_box(s.select(views, &packet, *now));
        }
        // Past the interval (≤ 50 ms).
        *now += Duration::from_millis(60);
        let t = m.start();
        black_box(s.select(black_box(views), black_box(&packet), *now));
        total = m.add(&total, &m.end(t));
    }
    total
}

/// `iters` selects that each run the prefix's unit `unit` (1-4: a whole LSTM1 step, the most
/// expensive units), timed alone.
fn slices<M: Measurement>(
    m: &M,
    s: &mut Edar,
    views: &[PathView],
    now: &mut Timestamp,
    unit: usize,
    iters: u64,
) -> M::Value {
    let packet = PacketMeta::bulk(1_200);
    let mut total = m.zero();
    for _ in 0..iters {
        *now += Duration::from_millis(60);
        black_box(s.select(views, &packet, *now));
        for u in 0..UNITS {
            *now += Duration::from_micros(100);
            if u == unit {
                let t = m.start();
                black_box(s.select(black_box(views), black_box(&packet), *now));
                total = m.add(&total, &m.end(t));
            } else {
                black_box(s.select(views, &packet, *now));
            }
        }
    }
    total
}

/// `iters` empty timed sections (what one clock read pair adds to the rows timed call by call).
fn clock_only<M: Measurement>(m: &M, iters: u64) -> M::Value {
    let mut total = m.zero();
    for _ in 0..iters {
        let t = m.start();
        total = m.add(&total, &m.end(t));
    }
    total
}

fn bench_rust<M: Measurement>(
    c: &mut Criterion<M>,
    m: &'static M,
    prefix: &str,
    network: &EdarNetwork,
) {
    let mut group = c.benchmark_group(format!("{prefix}sched/select"));
    let packet = PacketMeta::bulk(1_200);
    for k in [2usize, 4] {
        let views = paths(k);
        let mut s = scheduler(network);
        let mut now = Timestamp::from_millis(1);
        group.bench_function(format!("edar/{k}"), |b| {
            b.iter(|| {
                // Past the interval (≤ 50 ms) every call: every call decides.
                now += Duration::from_millis(60);
                black_box(s.select(black_box(&views), black_box(&packet), now))
            })
        });
    }
    for k in [2usize, 4] {
        let views = paths(k);
        let mut s = scheduler(network);
        let mut now = Timestamp::from_millis(1);
        // The rows time what they say: the decisions after seven packets use a ready prefix.
        boundaries(m, &mut s, &views, &mut now, 10);
        let stats = s.prefix_stats();
        assert!(
            stats.ready >= 9 && stats.finished == 0 && stats.continued == stats.ready,
            "{stats:?}"
        );
        group.bench_function(format!("edar_boundary/{k}"), |b| {
            b.iter_custom(|iters| boundaries(m, &mut s, &views, &mut now, iters))
        });
        let mut s = scheduler(network);
        let mut now = Timestamp::from_millis(1);
        group.bench_function(format!("edar_interval/{k}"), |b| {
            b.iter(|| {
                // One interval: the decision, then seven packets that compute the next prefix.
                now += Duration::from_millis(60);
                black_box(s.select(black_box(&views), black_box(&packet), now));
                for _ in 0..UNITS {
                    now += Duration::from_micros(100);
                    black_box(s.select(black_box(&views), black_box(&packet), now));
                }
            })
        });
    }
    let views = paths(4);
    let mut s = scheduler(network);
    let mut now = Timestamp::from_millis(1);
    group.bench_function("edar_slice/4", |b| {
        b.iter_custom(|iters| slices(m, &mut s, &views, &mut now, 4, iters))
    });
    group.bench_function("clock_only", |b| {
        b.iter_custom(|iters| clock_only(m, iters))
    });
    let views = paths(4);
    let mut s = scheduler(network);
    s.select(&views, &packet, Timestamp::from_millis(1));
    group.bench_function("edar_in_interval/4", |b| {
        b.iter(|| {
            black_box(s.select(
                black_box(&views),
                black_box(&packet),
                Timestamp::from_millis(2),
            ))
        })
    });
    group.finish();
    let mut group = c.benchmark_group(format!("{prefix}learned/rust"));
    for k in [2u8, 4] {
        let st = state(k);
        let mut scratch = network.scratch();
        group.bench_function(format!("edar_forward/{k}"), |b| {
            b.iter(|| black_box(network.q_values(black_box(&st), &mut scratch).unwrap()))
        });
        // The other builds this CPU runs (`edar_forward` is the fastest, the one `select` uses).
        for kernel in EdarKernel::available() {
            if kernel != EdarKernel::best() {
                let name = format!("edar_forward_{}/{k}", kernel.name());
                group.bench_function(name, |b| {
                    b.iter(|| black_box(network.q_values_with_kernel(kernel, black_box(&st))))
                });
            }
        }
        group.bench_function(format!("edar_forward_reference/{k}"), |b| {
            b.iter(|| {
                black_box(
                    network
                        .q_values_reference(black_box(&st), &mut scratch)
                        .unwrap(),
                )
            })
        });
    }
    group.finish();
}

#[cfg(not(feature = "torch"))]
fn learned(c: &mut Criterion) {
    bench_rust(c, &WallTime, "", &EdarNetwork::initial(1));
}

/// This thread's CPU time, ns (Linux `CLOCK_THREAD_CPUTIME_ID`).
#[derive(Clone, Copy, Debug)]
struct ThreadCpuTime;

#[repr(C)]
struct Timespec {
    tv_sec: i64,
    tv_nsec: i64,
}

unsafe extern "C" {
    fn clock_gettime(clock: i32, time: *mut Timespec) -> i32;
}

const CLOCK_THREAD_CPUTIME_ID: i32 = 3;

fn thread_cpu_ns() -> u64 {
    let mut t = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable timespec; the clock id is Linux's thread CPU clock.
    let rc = unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut t) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

impl Measurement for ThreadCpuTime {
    type Intermediate = u64;
    type Value = u64;
    fn start(&self) -> u64 {
        thread_cpu_ns()
    }
    fn end(&self, start: u64) -> u64 {
        thread_cpu_ns().saturating_sub(start)
    }
    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }
    fn zero(&self) -> u64 {
        0
    }
    fn to_f64(&self, value: &u64) -> f64 {
        *value as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        self
    }
}

impl ValueFormatter for ThreadCpuTime {
    fn scale_values(&self, ns: f64, values: &mut [f64]) -> &'static str {
        let (factor, unit) = if ns < 1e3 {
            (1.0, "ns")
        } else if ns < 1e6 {
            (1e-3, "µs")
        } else {
            (1e-6, "ms")
        };
        values.iter_mut().for_each(|v| *v *= factor);
        unit
    }
    fn scale_throughputs(&self, _: f64, _: &Throughput, _: &mut [f64]) -> &'static str {
        ""
    }
    fn scale_for_machines(&self, _: &mut [f64]) -> &'static str {
        "ns"
    }
}

fn cpu_time(c: &mut Criterion<ThreadCpuTime>) {
    bench_rust(c, &ThreadCpuTime, "cpu/", &EdarNetwork::initial(1));
    #[cfg(feature = "torch")]
    {
        use braid_learners::edar::train::{EdarDqn, EdarHyper};
        use braid_learners::torch::tch::{self, Device};

        tch::set_num_threads(1);
        let dqn = EdarDqn::new(EdarHyper::default(), Device::Cpu).unwrap();
        let mut group = c.benchmark_group("cpu/learned/tch");
        for k in [2u8, 4] {
            let st = [state(k)];
            group.bench_function(format!("edar_forward/{k}"), |b| {
                b.iter(|| {
                    tch::no_grad(|| black_box(dqn.network().q_values(black_box(&st), Device::Cpu)))
                })
            });
        }
        group.finish();
    }
}

#[cfg(feature = "torch")]
fn learned(c: &mut Criterion) {
    use braid_learners::edar::train::{EdarDqn, EdarHyper};
    use braid_learners::torch::tch::{self, Device};

    tch::set_num_threads(1);
    let mut dqn = EdarDqn::new(EdarHyper::default(), Device::Cpu).unwrap();
    let network = dqn.export().unwrap();
    bench_rust(c, &WallTime, "", &network);
    let mut group = c.benchmark_group("learned/tch");
    for k in [2u8, 4] {
        let st = [state(k)];
        group.bench_function(format!("edar_forward/{k}"), |b| {
            b.iter(|| {
                tch::no_grad(|| black_box(dqn.network().q_values(black_box(&st), Device::Cpu)))
            })
        });
    }
    group.finish();
    fill_replay(&mut dqn);
    let mut group = c.benchmark_group("learned/train_step");
    group.sample_size(20);
    group.bench_function("edar_cpu", |b| {
        b.iter(|| black_box(dqn.train_step().unwrap()))
    });
    if tch::Cuda::is_available() {
        let mut gpu = EdarDqn::new(EdarHyper::default(), Device::Cuda(0)).unwrap();
        fill_replay(&mut gpu);
        // `train_step` reads the loss back to the host, so each step is timed to its end.
        group.bench_function("edar_cuda", |b| {
            b.iter(|| black_box(gpu.train_step().unwrap()))
        });
    } else {
        eprintln!("learned/train_step/edar_cuda: libtorch sees no CUDA device, row not run");
    }
    group.finish();
}

/// 1,000 transitions of two-path states with random connection states, actions alternating.
#[cfg(feature = "torch")]
fn fill_replay(dqn: &mut braid_learners::edar::train::EdarDqn) {
    use braid_sched_core::sched::edar::{EdarAction, EdarTransition};

    let mut rng = SplitMix64(8);
    for i in 0..1_000 {
        let mut s = state(2);
        s.connection[2] = rng.unit() as f32;
        dqn.push(EdarTransition {
            state: s,
            action: if i % 2 == 0 {
                EdarAction::Normal
            } else {
                EdarAction::Redundant
            },
            reward: rng.unit() as f32,
            next_state: s,
            terminal: false,
        });
    }
}

criterion_group!(benches, learned);
criterion_group! {
    name = cpu;
    config = Criterion::default().with_measurement(ThreadCpuTime);
    targets = cpu_time
}
criterion_main!(benches, cpu);
