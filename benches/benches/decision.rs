//! `sched/select/<scheduler>/<K>`: one scheduling decision over K paths.
#![allow(missing_docs)]

use std::hint::black_box;

use braid_sched_core::{
    AnyScheduler, PacketMeta, PathId, PathView, Scheduler, SchedulerKind, Timestamp,
};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

fn decision(c: &mut Criterion) {
    let mut group = c.benchmark_group("sched/select");
    for &kind in SchedulerKind::ALL {
        for k in [2usize, 4, 8, 16] {
            let mut scheduler = AnyScheduler::with_defaults(kind);
            let mut paths: Vec<PathView> = (0..k)
                .map(|i| PathView::new(PathId(i as u8), 10_000 + 7_000 * i as u32, 60_000))
                .collect();
            let packet = PacketMeta::bulk(1_200);
            let mut tick = 0u64;
            group.bench_with_input(BenchmarkId::new(kind.name(), k), &k, |b, _| {
                b.iter(|| {
                    tick = tick.wrapping_add(1);
                    let p = &mut paths[(tick as usize) % k];
                    p.bytes_in_flight = (tick * 1_200) % 64_000;
                    p.srtt_us = 10_000 + ((tick * 37) % 20_000) as u32;
                    black_box(scheduler.select(
                        black_box(&paths),
                        black_box(&packet),
                        Timestamp::from_micros(tick),
                    ))
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, decision);
criterion_main!(benches);
