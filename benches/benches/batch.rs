//! `sched/batch/<scheduler>/<K>`: one decision interval of a batch of 6 deadline packets over K
//! paths through `select_batch` (DaMPS's entry point, Alg. 1), beside EDF (which decides the
//! batch packet by packet) as the baseline.
//!
//! Inputs are a ring of seeded states: per path a base one-way delay of 10·(j+1) ms with jitter
//! and a window admitting 0 to 5 packets; per packet a deadline budget uniform in 20-50 ms (the
//! DaMPS evaluation's synthetic trace, §IV-A). Only `select_batch` is timed.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::Duration;

use braid_sched_core::{
    AckInfo, AnyScheduler, Decision, PacketMeta, PathId, PathView, Scheduler, SchedulerKind,
    Timestamp, TrafficClass,
};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

const BATCH: usize = 6;
const STATES: usize = 256;
const LEN: u32 = 1_200;

struct State {
    paths: Vec<PathView>,
    packets: [PacketMeta; BATCH],
    now: Timestamp,
}

fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn states(k: usize) -> Vec<State> {
    let mut seed = 7u64;
    (0..STATES)
        .map(|s| {
            let now = Timestamp::from_millis(1_000 + 5 * s as u64);
            let paths = (0..k)
                .map(|j| {
                    let owd = 10_000 * (j as u32 + 1) + (splitmix(&mut seed) % 4_000) as u32;
                    let mut p = PathView::new(PathId(j as u8), 2 * owd, u64::from(LEN) * 8);
                    p.owd_us = owd;
                    p.bytes_in_flight = u64::from(LEN) * (3 + splitmix(&mut seed) % 6);
                    p
                })
                .collect();
            let packets = std::array::from_fn(|_| PacketMeta {
                class: TrafficClass::Realtime,
                deadline: Some(now + Duration::from_millis(20 + splitmix(&mut seed) % 31)),
                ..PacketMeta::bulk(LEN)
            });
            State {
                paths,
                packets,
                now,
            }
        })
        .collect()
}

fn batch(c: &mut Criterion) {
    let mut group = c.benchmark_group("sched/batch");
    for kind in [SchedulerKind::Edf, SchedulerKind::Damps] {
        for k in [2usize, 4] {
            let inputs = states(k);
            let mut scheduler = AnyScheduler::with_defaults(kind);
            // Past the cold start: every path has been acknowledged.
            for j in 0..k {
                scheduler.on_ack(PathId(j as u8), &AckInfo::default(), Timestamp::ZERO);
            }
            let mut out = [Decision::Wait; BATCH];
            let mut i = 0usize;
            group.bench_with_input(BenchmarkId::new(kind.name(), k), &k, |b, _| {
                b.iter(|| {
                    i = (i + 1) % STATES;
                    let s = &inputs[i];
                    scheduler.select_batch(
                        black_box(&s.paths),
                        black_box(&s.packets),
                        &mut out,
                        black_box(s.now),
                    );
                    black_box(out)
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, batch);
criterion_main!(benches);
