//! The fast solvers and dependent rounding run on the hot path: a counting global allocator
//! proves they allocate nothing, for feasible, infeasible and invalid inputs alike.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use braid_lp::{BandwidthProblem, BatchProblem, MaxRttProblem, dependent_round};
use rand::SeedableRng;
use rand::rngs::StdRng;

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::SeqCst);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations_during(f: impl FnOnce()) -> usize {
    let before = ALLOCATIONS.load(Ordering::SeqCst);
    f();
    ALLOCATIONS.load(Ordering::SeqCst) - before
}

#[test]
fn fast_solvers_and_rounding_do_not_allocate() {
    let b = [0.3, 0.2, 0.6, 0.4];
    let r = [0.2, 0.3, 0.5, 0.6];
    let mut rng = StdRng::seed_from_u64(1);
    let count = allocations_during(|| {
        for limit in [0.05, 0.5, 1.0] {
            let p = MaxRttProblem {
                bandwidth: &b,
                rtt: &r,
                rtt_limit: limit,
                choose: 2,
            };
            if let Ok(s) = std::hint::black_box(p.solve()) {
                std::hint::black_box(dependent_round(s.weights(), &mut rng).unwrap());
            }
            let q = BandwidthProblem {
                bandwidth: &b,
                rtt: &r,
                bandwidth_limit: limit,
                choose: 2,
            };
            if let Ok(s) = std::hint::black_box(q.solve()) {
                std::hint::black_box(dependent_round(s.weights(), &mut rng).unwrap());
            }
        }
        let bad = MaxRttProblem {
            bandwidth: &b,
            rtt: &[0.1, f64::NAN, 0.1, 0.1],
            rtt_limit: 0.5,
            choose: 2,
        };
        std::hint::black_box(bad.solve().unwrap_err());
        let batch = BatchProblem {
            deadlines: &[20.0, 25.0, 35.0, 45.0, 50.0, 12.0],
            delays: &[10.0, 40.0],
            capacities: &[3.0, 2.0],
        };
        std::hint::black_box(batch.solve().unwrap());
        let mut out = braid_lp::BatchSchedule::default();
        batch.solve_into(&mut out).unwrap();
        std::hint::black_box(&out);
    });
    assert_eq!(count, 0, "the hot-path solvers allocated {count} times");
    // The counter works: good_lp allocates.
    let p = MaxRttProblem {
        bandwidth: &b,
        rtt: &r,
        rtt_limit: 0.5,
        choose: 2,
    };
    assert!(allocations_during(|| _ = std::hint::black_box(p.solve_good_lp())) > 0);
}
