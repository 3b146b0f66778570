//! `Link::enqueue` never allocates (STYLE rule 5), counted with a per-thread counting
//! allocator; and a rough figure of its speed (run with `--ignored --nocapture`, release).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use braid_sched_core::Timestamp;
use braid_testbed::link::{JitterDistribution, Link, LinkChange, LinkConfig, Verdict};
use braid_testbed::trace::Trace;

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded unchanged to the system allocator; the counter is a
// thread-local `Cell` that never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

fn busy_configs() -> Vec<LinkConfig> {
    let mut rate = LinkConfig::with_rate(50.0);
    rate.delay_ms = 20.0;
    rate.jitter_ms = 3.0;
    rate.loss = 0.01;
    rate.queue_packets = 200;
    rate.outages = vec![(0.5, 0.6)];
    rate.outages_period_s = Some(1.0);
    rate.changes = vec![
        LinkChange {
            at_s: 0.0,
            rate_mbps: Some(50.0),
            ..Default::default()
        },
        LinkChange {
            at_s: 0.25,
            rate_mbps: Some(5.0),
            delay_ms: Some(40.0),
            ..Default::default()
        },
    ];
    rate.changes_period_s = Some(0.5);
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/traces");
    let trace = Arc::new(Trace::load(&dir.join("mahimahi-Verizon-LTE-short.down")).unwrap());
    let mut traced = LinkConfig::with_trace(trace);
    traced.delay_variation = 0.1;
    traced.delay_ms = 15.0;
    traced.jitter_distribution = JitterDistribution::Uniform;
    traced.queue_packets = 200;
    vec![rate, traced]
}

#[test]
fn enqueue_never_allocates() {
    for config in busy_configs() {
        let mut link = Link::new(&config, 9).unwrap();
        let before = allocations();
        let mut delivered = 0u64;
        for i in 0..200_000u64 {
            if let Verdict::Deliver { .. } = link.enqueue(Timestamp::from_micros(i * 50), 1200) {
                delivered += 1;
            }
        }
        assert_eq!(allocations() - before, 0, "allocations during enqueue");
        assert!(
            delivered > 5_000,
            "the test exercised deliveries: {delivered}"
        );
    }
}

#[test]
#[ignore = "timing figure; run in release with --ignored --nocapture"]
fn enqueue_rate() {
    let mut unsaturated = LinkConfig::with_rate(1000.0);
    unsaturated.delay_ms = 20.0;
    unsaturated.jitter_ms = 3.0;
    unsaturated.loss = 0.01;
    let mut configs = busy_configs();
    configs.push(unsaturated);
    let names = [
        "saturated rate link with changes, outages, jitter, loss",
        "saturated mahimahi trace link",
        "unsaturated 1 Gbit/s link with jitter and loss",
    ];
    for (name, config) in names.iter().zip(configs) {
        let mut link = Link::new(&config, 9).unwrap();
        let n = 5_000_000u64;
        let start = Instant::now();
        let mut delivered = 0u64;
        for i in 0..n {
            if let Verdict::Deliver { .. } = link.enqueue(Timestamp::from_micros(i * 20), 1200) {
                delivered += 1;
            }
        }
        let secs = start.elapsed().as_secs_f64();
        println!(
            "{name}: {:.1} M enqueues/s ({:.1} ns each), {delivered} delivered",
            n as f64 / secs / 1e6,
            secs * 1e9 / n as f64
        );
        assert!(delivered > 0);
    }
}
