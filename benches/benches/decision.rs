//! `sched/select/<scheduler>/<K>`: one scheduling decision over K paths, for every built-in
//! scheduler (minrtt is the baseline the others read against).
//!
//! Inputs are replayed from a [`DecisionTrace`] recorded with the same scheduler: path states
//! with RTT jitter and bytes in flight growing and draining with ACKs fed through `on_ack`, so
//! consecutive decisions see different, realistic states. Only `select` is timed.
#![allow(missing_docs)]

use std::hint::black_box;

use braid_benches::DecisionTrace;
use braid_sched_core::{AnyScheduler, Scheduler, SchedulerKind};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

/// Recorded decisions per trace (a power of two; K = 4 fits in L2).
const TRACE_LEN: usize = 512;

fn decision(c: &mut Criterion) {
    let mut group = c.benchmark_group("sched/select");
    for &kind in SchedulerKind::ALL {
        for k in [2usize, 4, 8, 16] {
            let mut scheduler = AnyScheduler::with_defaults(kind);
            let trace = DecisionTrace::record(&mut scheduler, k, TRACE_LEN, 7);
            let mut i = 0usize;
            group.bench_with_input(BenchmarkId::new(kind.name(), k), &k, |b, _| {
                b.iter(|| {
                    i = i.wrapping_add(1);
                    let (paths, packet, now) = trace.input(i);
                    black_box(scheduler.select(black_box(paths), black_box(packet), black_box(now)))
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, decision);
criterion_main!(benches);
