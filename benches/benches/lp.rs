//! `lp/solve/{good_lp,fast}/<lp>/<K>`: one LP solved by good_lp/microlp and by the exact fast
//! solver on the same instance, so the speed-up reads as a ratio from one run;
//! `lp/round/dependent/<K>`: one dependent rounding of a vector with every entry fractional.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use braid_lp::{BandwidthProblem, BatchProblem, BatchSchedule, MaxRttProblem, dependent_round};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};

const PATH_COUNTS: [usize; 4] = [2, 4, 8, 16];

/// OLMS path counts: the phone's two, the 3 to 8 a multihomed host has, and the most.
const OLMS_PATH_COUNTS: [usize; 6] = [2, 3, 4, 6, 8, 16];

/// Normalised bandwidths and RTTs for `k` paths, fixed per `k`.
fn paths(k: usize) -> (Vec<f64>, Vec<f64>) {
    let mut rng = SmallRng::seed_from_u64(k as u64);
    let b = (0..k).map(|_| rng.random_range(0.05..1.0)).collect();
    let r = (0..k).map(|_| rng.random_range(0.05..1.0)).collect();
    (b, r)
}

/// A budget between the `L` cheapest and the `L` dearest paths, so eq. (8) is feasible and binds.
fn budget(b: &[f64], choose: usize) -> f64 {
    let mut sorted = b.to_vec();
    sorted.sort_by(f64::total_cmp);
    let floor: f64 = sorted[..choose].iter().sum();
    let ceiling: f64 = sorted[sorted.len() - choose..].iter().sum();
    floor + 0.3 * (ceiling - floor)
}

fn olms(c: &mut Criterion) {
    let mut group = c.benchmark_group("lp/solve");
    for k in OLMS_PATH_COUNTS {
        let (b, r) = paths(k);
        let choose = (k / 2).max(1);
        let max_rtt = MaxRttProblem {
            bandwidth: &b,
            rtt: &r,
            rtt_limit: 0.8,
            choose,
        };
        let bandwidth = BandwidthProblem {
            bandwidth: &b,
            rtt: &r,
            bandwidth_limit: budget(&b, choose),
            choose,
        };
        let (fast, reference) = (max_rtt.solve().unwrap(), max_rtt.solve_good_lp().unwrap());
        assert!((fast.objective() - reference.objective()).abs() < 1e-6);
        let (fast, reference) = (
            bandwidth.solve().unwrap(),
            bandwidth.solve_good_lp().unwrap(),
        );
        assert!((fast.objective() - reference.objective()).abs() < 1e-6);
        group.bench_with_input(
            BenchmarkId::new("good_lp/olms-maxrtt", k),
            &max_rtt,
            |bench, p| bench.iter(|| black_box(black_box(p).solve_good_lp())),
        );
        group.bench_with_input(
            BenchmarkId::new("fast/olms-maxrtt", k),
            &max_rtt,
            |bench, p| bench.iter(|| black_box(black_box(p).solve())),
        );
        group.bench_with_input(
            BenchmarkId::new("good_lp/olms-bandwidth", k),
            &bandwidth,
            |bench, p| bench.iter(|| black_box(black_box(p).solve_good_lp())),
        );
        group.bench_with_input(
            BenchmarkId::new("fast/olms-bandwidth", k),
            &bandwidth,
            |bench, p| bench.iter(|| black_box(black_box(p).solve())),
        );
    }
    group.finish();
}

fn damps(c: &mut Criterion) {
    let mut group = c.benchmark_group("lp/solve");
    // DaMPS §IV: batches of M = 6 packets, deadlines 20-50 ms; paths 10-60 ms one way.
    let deadlines = [20.0, 43.0, 27.0, 50.0, 35.0, 31.0];
    for n in [2usize, 3, 4] {
        let delays: Vec<f64> = (0..n).map(|j| 10.0 + 50.0 * j as f64 / n as f64).collect();
        let capacities: Vec<f64> = (0..n).map(|j| (2 + j % 3) as f64).collect();
        let batch = BatchProblem {
            deadlines: &deadlines,
            delays: &delays,
            capacities: &capacities,
        };
        let (fast, reference) = (batch.solve().unwrap(), batch.solve_good_lp().unwrap());
        assert!((fast.delivered() - reference.delivered()).abs() < 1e-6);
        group.bench_with_input(
            BenchmarkId::new("good_lp/damps-batch", n),
            &batch,
            |bench, p| bench.iter(|| black_box(black_box(p).solve_good_lp())),
        );
        // The hot path reuses one schedule buffer across batches.
        let mut out = BatchSchedule::default();
        group.bench_with_input(
            BenchmarkId::new("fast/damps-batch", n),
            &batch,
            |bench, p| {
                bench.iter(|| {
                    black_box(p).solve_into(&mut out).unwrap();
                    black_box(out.delivered())
                })
            },
        );
    }
    group.finish();
}

fn rounding(c: &mut Criterion) {
    let mut group = c.benchmark_group("lp/round");
    let mut rng = SmallRng::seed_from_u64(42);
    for k in PATH_COUNTS {
        let choose = (k / 2).max(1);
        // Every entry fractional: the most pair steps rounding can take.
        let weights: Vec<f64> = (0..k).map(|_| choose as f64 / k as f64).collect();
        let weights = if k == 2 { vec![0.3, 0.7] } else { weights };
        group.bench_with_input(BenchmarkId::new("dependent", k), &weights, |bench, w| {
            bench.iter(|| black_box(dependent_round(black_box(w), &mut rng)))
        });
    }
    group.finish();
}

criterion_group!(benches, olms, damps, rounding);
criterion_main!(benches);
