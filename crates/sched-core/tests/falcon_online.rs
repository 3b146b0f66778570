//! FALCON with a learner attached, as the daemon runs it: zero allocation per decision and per
//! change-detector sample even while exploring and sending experience, and the same decisions
//! for the same seed (determinism).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use braid_sched_core::changepoint::{ChangeDetector, ChangeDetectorConfig};
use braid_sched_core::sched::falcon::{Falcon, FalconConfig, FalconLink, FalconWeights};
use braid_sched_core::slot::{experience_queue, weight_slot};
use braid_sched_core::{
    AckInfo, Decision, PacketMeta, PathId, PathView, ReceiverReport, Scheduler, Timestamp,
};

struct CountingAllocator;

thread_local! {
    static ALLOCATIONS: Cell<Option<u64>> = const { Cell::new(None) };
}

fn counting<T>(f: impl FnOnce() -> T) -> (T, u64) {
    ALLOCATIONS.with(|c| c.set(Some(0)));
    let out = f();
    (out, ALLOCATIONS.with(|c| c.replace(None)).unwrap_or(0))
}

// SAFETY: every call is forwarded unchanged to the system allocator; counting has no effect on
// the memory handed out.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get().map(|n| n + 1)));
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// Drives `falcon` over two paths whose RTT steps up halfway; returns its decisions.
fn drive(falcon: &mut Falcon, decisions: &mut Vec<Decision>) {
    let mut paths = [
        PathView::new(PathId(0), 20_000, 60_000),
        PathView::new(PathId(1), 30_000, 60_000),
    ];
    let packet = PacketMeta::bulk(1_200);
    for i in 0..20_000u64 {
        let now = Timestamp::from_micros(100 * i);
        if i == 10_000 {
            paths[0].srtt_us = 120_000;
        }
        let d = falcon.select(&paths, &packet, now);
        if let Decision::Send(id) = d {
            falcon.on_sent(id, &packet, now);
        }
        decisions.push(d);
        let rtt_us = paths[(i % 2) as usize].srtt_us + (i % 5) as u32 * 300;
        let ack = AckInfo {
            bytes: 1_200,
            rtt_us,
            owd_us: rtt_us / 2,
        };
        falcon.on_ack(PathId((i % 2) as u8), &ack, now);
        if i % 97 == 0 {
            falcon.on_loss(PathId(1), 1_200, now);
        }
        if i % 1_000 == 0 {
            let report = ReceiverReport {
                interval_us: 100_000,
                delivered_bytes: 1_000_000,
                ..ReceiverReport::default()
            };
            falcon.on_report(&report, now);
        }
    }
}

fn learning_falcon(seed: u64) -> Falcon {
    let (_writer, reader) = weight_slot(FalconWeights::minrtt());
    let (sender, _receiver) = experience_queue(1 << 10).unwrap();
    Falcon::new(&FalconConfig {
        seed,
        learner: Some(FalconLink {
            weights: reader,
            experience: sender,
        }),
        ..FalconConfig::default()
    })
}

#[test]
fn learning_falcon_allocates_nothing_per_decision() {
    let mut falcon = learning_falcon(3);
    let mut decisions = Vec::with_capacity(20_000);
    let ((), allocations) = counting(|| drive(&mut falcon, &mut decisions));
    assert_eq!(allocations, 0);
    let stats = falcon.stats();
    assert!(stats.explored > 1_000, "{stats:?}");
    assert!(stats.changes >= 1, "{stats:?}");
}

#[test]
fn change_detector_allocates_nothing_per_sample() {
    let mut detector = ChangeDetector::new(ChangeDetectorConfig::default());
    let (fired, allocations) = counting(|| {
        (0..10_000)
            .filter(|i| detector.observe(if *i < 5_000 { 30.0 } else { 90.0 } + f64::from(i % 7)))
            .count()
    });
    assert_eq!(allocations, 0);
    assert_eq!(fired, 1);
}

#[test]
fn same_seed_same_decisions() {
    let run = |seed| {
        let mut falcon = learning_falcon(seed);
        let mut decisions = Vec::with_capacity(20_000);
        drive(&mut falcon, &mut decisions);
        decisions
    };
    assert_eq!(run(5), run(5));
    assert_ne!(run(5), run(6));
}
