//! Hostile inputs: any `f64` (NaN, infinities, negatives, subnormals, huge values) and any `L`
//! give `Ok` or a typed error, never a panic. For valid inputs the fast solvers never report
//! `LpError::Solver`, and whatever they return is feasible.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use braid_lp::{BandwidthProblem, BatchProblem, LpError, MaxRttProblem, dependent_round};
use proptest::prelude::*;
use rand::SeedableRng;
use rand::rngs::StdRng;

/// Mostly valid numbers across many magnitudes, sometimes hostile ones.
fn number() -> impl Strategy<Value = f64> {
    prop_oneof![
        8 => 0.0..=1.0f64,
        2 => (0.0..=1.0f64, -300i32..=300).prop_map(|(m, e)| m * 10f64.powi(e)),
        1 => Just(0.0),
        1 => prop::num::f64::ANY,
    ]
}

fn valid(values: &[f64]) -> bool {
    values.iter().all(|v| v.is_finite() && *v >= 0.0)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10_000, ..ProptestConfig::default() })]

    #[test]
    fn olms_solvers_never_panic(
        b in prop::collection::vec(number(), 0..=17),
        r in prop::collection::vec(number(), 0..=17),
        limit in number(),
        choose in 0usize..=18,
        seed in any::<u64>(),
    ) {
        let all_valid = valid(&b) && valid(&r) && valid(&[limit]);
        let max_rtt = MaxRttProblem { bandwidth: &b, rtt: &r, rtt_limit: limit, choose };
        let bandwidth = BandwidthProblem { bandwidth: &b, rtt: &r, bandwidth_limit: limit, choose };
        for result in [max_rtt.solve(), bandwidth.solve()] {
            match result {
                Ok(schedule) => {
                    prop_assert!(all_valid);
                    let sum: f64 = schedule.weights().iter().sum();
                    prop_assert!((sum - choose as f64).abs() <= 1e-9 * choose as f64, "{sum}");
                    let mut rng = StdRng::seed_from_u64(seed);
                    prop_assert_eq!(dependent_round(schedule.weights(), &mut rng).unwrap().len(), choose);
                }
                Err(LpError::Solver { .. }) => prop_assert!(false, "fast solver gave up"),
                Err(_) => {}
            }
        }
    }

    #[test]
    fn damps_solver_never_panics(
        d in prop::collection::vec(prop_oneof![4 => -100.0..100.0f64, 1 => prop::num::f64::ANY], 0..=17),
        tau in prop::collection::vec(number(), 0..=17),
        c in prop::collection::vec(number(), 0..=17),
    ) {
        let p = BatchProblem { deadlines: &d, delays: &tau, capacities: &c };
        if let Ok(s) = p.solve() {
            prop_assert!(s.delivered() <= d.len() as f64 + 1e-9);
            prop_assert!(s.delivered() <= c.iter().sum::<f64>() + 1e-9);
        }
    }

    #[test]
    fn rounding_never_panics(
        v in prop::collection::vec(prop_oneof![4 => 0.0..=1.0f64, 1 => prop::num::f64::ANY], 0..=17),
        seed in any::<u64>(),
    ) {
        let mut rng = StdRng::seed_from_u64(seed);
        if let Ok(mask) = dependent_round(&v, &mut rng) {
            prop_assert_eq!(mask.len() as f64, v.iter().sum::<f64>().round());
        }
    }
}
