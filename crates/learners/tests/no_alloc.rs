//! The hot-path side of the learner hand-off and of inference allocates nothing (STYLE rule 5):
//! forward passes, sending experience (also when the queue is full), and refreshing weights
//! (also when a new version is taken), counted by a global allocator wrapper, per thread.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use braid_sched_core::nn::{Activation, Linear, Lstm, Mlp};
use braid_sched_core::slot::{experience_queue, weight_slot};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: defers every call to the system allocator; only counts on the side.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations made by this thread while running `f`.
fn allocations(f: impl FnOnce()) -> u64 {
    let before = ALLOCATIONS.with(Cell::get);
    f();
    ALLOCATIONS.with(Cell::get) - before
}

fn mlp() -> Mlp {
    let layers = [16, 64, 64, 64, 4]
        .windows(2)
        .map(|w| Linear::new("l", w[0], w[1], vec![0.01; w[0] * w[1]], vec![0.1; w[1]]).unwrap())
        .collect();
    Mlp::new(layers, Activation::Relu).unwrap()
}

#[test]
fn forward_passes_do_not_allocate() {
    let mlp = mlp();
    let mut scratch = mlp.scratch();
    let input = [0.5f32; 16];
    let lstm = Lstm::new(
        8,
        32,
        &[0.01; 1024],
        &[0.02; 4096],
        &[0.1; 128],
        &[0.0; 128],
    )
    .unwrap();
    let (mut state, mut lstm_scratch) = (lstm.state(), lstm.scratch());
    let sequence = [0.25f32; 40];
    let n = allocations(|| {
        for _ in 0..100 {
            std::hint::black_box(mlp.forward(&input, &mut scratch).unwrap());
            state.reset();
            std::hint::black_box(
                lstm.forward_sequence(&sequence, &mut state, &mut lstm_scratch)
                    .unwrap(),
            );
        }
    });
    assert_eq!(n, 0);
}

#[test]
fn queue_send_and_slot_refresh_do_not_allocate() {
    let (tx, mut rx) = experience_queue::<[f32; 8]>(16).unwrap();
    let (mut writer, mut reader) = weight_slot(vec![0.0f32; 100]);
    let n = allocations(|| {
        for i in 0..64 {
            // The ring holds 16: most of these are dropped and counted, still without allocating.
            tx.send([i as f32; 8]);
            std::hint::black_box(reader.refresh());
        }
        while rx.recv().is_some() {}
    });
    assert_eq!(n, 0);
    assert_eq!((tx.sent(), tx.dropped()), (16, 48));

    writer.publish(vec![1.0; 100]); // the learner allocates; that is its thread's business
    let n = allocations(|| assert!(reader.refresh()));
    assert_eq!(n, 0, "taking a new version allocates nothing");
    assert_eq!(reader.weights()[0], 1.0);
}
