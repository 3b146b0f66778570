//! Zero allocation per packet (STYLE rule 5): a counting global allocator watches 100,000
//! decisions of every built-in scheduler, with path state changing between decisions and every
//! feedback hook (`on_sent`, `on_ack`, `on_loss`, `on_path_state`, `on_report`) interleaved.
//!
//! The allocator counts only on the thread that asked for counting, so the test runner's own threads
//! do not disturb the count. Everything the loop needs is built before counting starts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::Duration;

use braid_sched_core::{
    AckInfo, AnyScheduler, Decision, PacketMeta, PathId, PathState, PathView, ReceiverReport,
    Scheduler, SchedulerKind, Timestamp, TrafficClass,
};

struct CountingAllocator;

thread_local! {
    /// Allocations on this thread while counting; `None` while not counting.
    static ALLOCATIONS: Cell<Option<u64>> = const { Cell::new(None) };
}

fn note_allocation() {
    let _ = ALLOCATIONS.try_with(|c| c.set(c.get().map(|n| n + 1)));
}

/// Runs `f` and returns its result with the allocations it made on this thread.
fn counting<T>(f: impl FnOnce() -> T) -> (T, u64) {
    ALLOCATIONS.with(|c| c.set(Some(0)));
    let out = f();
    let n = ALLOCATIONS.with(|c| c.replace(None)).unwrap_or(0);
    (out, n)
}

// SAFETY: every call is forwarded unchanged to the system allocator; counting has no effect on
// the memory handed out.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_allocation();
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

const DECISIONS: u64 = 100_000;
const K: usize = 4;

/// Runs `DECISIONS` decisions of `scheduler` with varying state and all hooks; returns how many
/// decisions sent something (so the loop cannot be optimised into nothing).
fn drive(scheduler: &mut AnyScheduler, paths: &mut [PathView; K]) -> u64 {
    let mut sent = 0;
    let mut now = Timestamp::ZERO;
    for i in 0..DECISIONS {
        now += Duration::from_micros(250);
        let packet = PacketMeta {
            len: 200 + (i % 1_000) as u32,
            class: if i % 3 == 0 {
                TrafficClass::Realtime
            } else {
                TrafficClass::Bulk
            },
            deadline: (i % 2 == 0).then(|| now + Duration::from_micros(i % 60_000)),
            retransmit: i % 17 == 0,
            backlog_bytes: 1_200 * (i % 500),
            send_window: if i % 5 == 0 { 40_000 } else { u64::MAX },
            ..PacketMeta::default()
        };
        let decision = scheduler.select(paths, &packet, now);
        for id in decision.paths().iter() {
            paths[id.index()].bytes_in_flight += u64::from(packet.len);
            scheduler.on_sent(id, &packet, now);
        }
        if decision != Decision::Wait && decision != Decision::Drop {
            sent += 1;
        }
        let j = (i as usize) % K;
        let p = &mut paths[j];
        p.srtt_us = 10_000 + 7_000 * j as u32 + ((i * 37) % 5_000) as u32;
        if i % 3 == 0 && p.bytes_in_flight > 0 {
            let bytes = p.bytes_in_flight.min(3_000);
            p.bytes_in_flight -= bytes;
            let ack = AckInfo {
                bytes,
                rtt_us: p.srtt_us,
                owd_us: p.srtt_us / 2,
            };
            scheduler.on_ack(p.id, &ack, now);
        }
        if i % 101 == 0 && p.bytes_in_flight > 0 {
            let bytes = p.bytes_in_flight.min(1_200);
            p.bytes_in_flight -= bytes;
            scheduler.on_loss(p.id, bytes, now);
        }
        if i % 997 == 0 {
            let state = match (i / 997) % 3 {
                0 => PathState::Failed,
                1 => PathState::Backup,
                _ => PathState::Active,
            };
            p.state = state;
            scheduler.on_path_state(p.id, state, now);
        }
        p.rate_limited = i % 89 == 0;
        if i % 400 == 0 {
            let report = ReceiverReport {
                interval_us: 100_000,
                delivered_bytes: 100_000 + i,
                ooo_packets: (i % 7) as u32,
                ..ReceiverReport::default()
            };
            scheduler.on_report(&report, now);
        }
    }
    sent
}

#[test]
fn no_allocation_in_100k_decisions_of_every_scheduler() {
    for &kind in SchedulerKind::ALL {
        let mut scheduler = AnyScheduler::with_defaults(kind);
        let mut paths: [PathView; K] = std::array::from_fn(|i| {
            PathView::new(PathId(i as u8), 10_000 + 7_000 * i as u32, 30_000)
        });
        let (sent, allocations) = counting(|| drive(&mut scheduler, &mut paths));
        assert!(sent > 0, "{kind} never sent");
        assert_eq!(
            allocations, 0,
            "{kind} allocated {allocations} times in {DECISIONS} decisions"
        );
    }
}

#[test]
fn the_counter_sees_allocations() {
    // Guards the test above: counting must notice an allocation when one happens.
    let (v, allocations) = counting(|| std::hint::black_box(vec![1u8; 64]));
    drop(v);
    assert!(allocations >= 1);
}
