//! Property tests: every fast solver against good_lp/microlp on 10,000 random instances each,
//! equal objective within 1e-6 (or both infeasible), and the fast point feasible. Half of the
//! instances draw their numbers from a coarse grid (multiples of 0.1) so ties, degenerate
//! vertices and constraints met with equality are common; the other half are continuous.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use braid_lp::{BandwidthProblem, BatchProblem, LpError, MaxRttProblem, Schedule};
use proptest::prelude::*;

const CASES: u32 = 10_000;
const OBJECTIVE_TOL: f64 = 1e-6;
const FEASIBILITY_TOL: f64 = 1e-9;

/// A number in `[0, 1]`, either continuous or a multiple of 0.1.
fn unit(grid: bool) -> BoxedStrategy<f64> {
    if grid {
        (0u8..=10).prop_map(|t| f64::from(t) / 10.0).boxed()
    } else {
        (0.0..=1.0f64).boxed()
    }
}

/// `(bandwidth, rtt, limit, choose)` with `2 <= K <= 16` and `1 <= L < K`.
fn olms_instance() -> impl Strategy<Value = (Vec<f64>, Vec<f64>, f64, usize)> {
    (any::<bool>(), 2usize..=16).prop_flat_map(|(grid, k)| {
        (
            prop::collection::vec(unit(grid), k),
            prop::collection::vec(unit(grid), k),
            unit(grid),
            1..k,
        )
    })
}

fn assert_in_chi(s: &Schedule, choose: usize) {
    let sum: f64 = s.weights().iter().sum();
    assert!(
        (sum - choose as f64).abs() <= FEASIBILITY_TOL,
        "sum {sum} != {choose}"
    );
    for &v in s.weights() {
        assert!(
            (-FEASIBILITY_TOL..=1.0 + FEASIBILITY_TOL).contains(&v),
            "{v} outside [0, 1]"
        );
    }
}

fn both_infeasible<T: std::fmt::Debug>(fast: &Result<T, LpError>, reference: &Result<T, LpError>) {
    assert!(
        matches!(fast, Err(LpError::Infeasible { .. }))
            && matches!(reference, Err(LpError::Infeasible { .. })),
        "fast {fast:?} vs good_lp {reference:?}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, ..ProptestConfig::default() })]

    #[test]
    fn olms_max_rtt_fast_equals_good_lp((b, r, limit, choose) in olms_instance()) {
        let p = MaxRttProblem { bandwidth: &b, rtt: &r, rtt_limit: limit, choose };
        match (p.solve(), p.solve_good_lp()) {
            (Ok(fast), Ok(reference)) => {
                prop_assert!((fast.objective() - reference.objective()).abs() <= OBJECTIVE_TOL,
                    "fast {fast:?} good_lp {reference:?}");
                assert_in_chi(&fast, choose);
                for (v, r) in fast.weights().iter().zip(&r) {
                    prop_assert!(v * r <= limit + FEASIBILITY_TOL);
                }
                let recomputed: f64 = fast.weights().iter().zip(&b).map(|(v, b)| v * b).sum();
                prop_assert!((recomputed - fast.objective()).abs() <= FEASIBILITY_TOL);
            }
            (fast, reference) => both_infeasible(&fast, &reference),
        }
    }

    #[test]
    fn olms_bandwidth_fast_equals_good_lp((b, r, limit, choose) in olms_instance()) {
        let p = BandwidthProblem { bandwidth: &b, rtt: &r, bandwidth_limit: limit, choose };
        match (p.solve(), p.solve_good_lp()) {
            (Ok(fast), Ok(reference)) => {
                prop_assert!((fast.objective() - reference.objective()).abs() <= OBJECTIVE_TOL,
                    "fast {fast:?} good_lp {reference:?}");
                assert_in_chi(&fast, choose);
                let spent: f64 = fast.weights().iter().zip(&b).map(|(v, b)| v * b).sum();
                prop_assert!(spent <= limit + FEASIBILITY_TOL, "spent {spent} > {limit}");
                let level = fast.weights().iter().zip(&r).map(|(v, r)| v * r).fold(0.0, f64::max);
                prop_assert!((level - fast.objective()).abs() <= FEASIBILITY_TOL);
            }
            (fast, reference) => both_infeasible(&fast, &reference),
        }
    }

    /// Two paths, one pick: the closed form of `BandwidthProblem::solve` (every other size
    /// takes the level search above).
    #[test]
    fn olms_bandwidth_pair_equals_good_lp(
        (b, r, limit) in any::<bool>().prop_flat_map(|grid| (
            prop::collection::vec(unit(grid), 2),
            prop::collection::vec(unit(grid), 2),
            unit(grid),
        ))
    ) {
        let p = BandwidthProblem { bandwidth: &b, rtt: &r, bandwidth_limit: limit, choose: 1 };
        match (p.solve(), p.solve_good_lp()) {
            (Ok(fast), Ok(reference)) => {
                prop_assert!((fast.objective() - reference.objective()).abs() <= OBJECTIVE_TOL,
                    "fast {fast:?} good_lp {reference:?}");
                assert_in_chi(&fast, 1);
                let spent: f64 = fast.weights().iter().zip(&b).map(|(v, b)| v * b).sum();
                prop_assert!(spent <= limit + FEASIBILITY_TOL, "spent {spent} > {limit}");
                let level = fast.weights().iter().zip(&r).map(|(v, r)| v * r).fold(0.0, f64::max);
                prop_assert!((level - fast.objective()).abs() <= FEASIBILITY_TOL);
            }
            (fast, reference) => both_infeasible(&fast, &reference),
        }
    }

    #[test]
    fn damps_batch_fast_equals_good_lp(
        (deadlines, delays, capacities) in (1usize..=16, 1usize..=8, any::<bool>())
            .prop_flat_map(|(m, n, integral)| {
                let capacity = if integral {
                    (0u8..=6).prop_map(f64::from).boxed()
                } else {
                    (0.0..=6.0f64).boxed()
                };
                (
                    prop::collection::vec((-10i32..=60).prop_map(f64::from), m),
                    prop::collection::vec((0i32..=50).prop_map(f64::from), n),
                    prop::collection::vec(capacity, n),
                )
            })
    ) {
        let p = BatchProblem { deadlines: &deadlines, delays: &delays, capacities: &capacities };
        let fast = p.solve().unwrap();
        let reference = p.solve_good_lp().unwrap();
        prop_assert!((fast.delivered() - reference.delivered()).abs() <= OBJECTIVE_TOL,
            "fast {} good_lp {}", fast.delivered(), reference.delivered());
        for (j, &c) in capacities.iter().enumerate() {
            let column: f64 = (0..deadlines.len()).map(|i| fast.share(i, j)).sum();
            prop_assert!(column <= c + FEASIBILITY_TOL);
        }
        for (i, &d) in deadlines.iter().enumerate() {
            let row = fast.row(i);
            prop_assert!(row.iter().sum::<f64>() <= 1.0 + FEASIBILITY_TOL);
            for (j, &s) in row.iter().enumerate() {
                prop_assert!((0.0..=1.0).contains(&s));
                prop_assert!(s == 0.0 || delays[j] < d, "mass on a late path");
            }
        }
        if capacities.iter().all(|c| c.fract() == 0.0) {
            for i in 0..deadlines.len() {
                prop_assert!(fast.row(i).iter().all(|&s| s == 0.0 || s == 1.0), "not integral");
            }
        }
    }
}
