//! Dependent rounding on the fast solvers' own outputs: every draw has exactly `L` paths, never
//! a path with `v_i = 0` and always one with `v_i = 1`, and over many draws the empirical
//! marginals match `v` (within 4.5 standard deviations per entry, fixed seeds).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use braid_lp::{BandwidthProblem, MaxRttProblem, dependent_round};
use proptest::prelude::*;
use rand::SeedableRng;
use rand::rngs::StdRng;

fn instance() -> impl Strategy<Value = (Vec<f64>, Vec<f64>, f64, usize)> {
    (2usize..=16).prop_flat_map(|k| {
        (
            prop::collection::vec(0.0..=1.0f64, k),
            prop::collection::vec(0.0..=1.0f64, k),
            0.0..=1.0f64,
            1..k,
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    #[test]
    fn rounding_an_lp_schedule_chooses_exactly_l_paths(
        (b, r, limit, choose) in instance(),
        seed in any::<u64>(),
    ) {
        let mut rng = StdRng::seed_from_u64(seed);
        let p = MaxRttProblem { bandwidth: &b, rtt: &r, rtt_limit: limit, choose };
        if let Ok(schedule) = p.solve() {
            for _ in 0..8 {
                let mask = dependent_round(schedule.weights(), &mut rng).unwrap();
                prop_assert_eq!(mask.len(), choose);
                for (i, &v) in schedule.weights().iter().enumerate() {
                    if v == 0.0 { prop_assert!(!mask.contains(i)); }
                    if v == 1.0 { prop_assert!(mask.contains(i)); }
                }
            }
        }
    }
}

#[test]
fn empirical_marginals_match_lp_schedules() {
    let mut rng = StdRng::seed_from_u64(7);
    let mut checked = 0;
    for case in 0..40u64 {
        let k = 3 + (case as usize % 6);
        let mut gen_rng = StdRng::seed_from_u64(1000 + case);
        let b: Vec<f64> = (0..k)
            .map(|_| rand::RngExt::random::<f64>(&mut gen_rng))
            .collect();
        let r: Vec<f64> = (0..k)
            .map(|_| rand::RngExt::random::<f64>(&mut gen_rng))
            .collect();
        let p = BandwidthProblem {
            bandwidth: &b,
            rtt: &r,
            bandwidth_limit: 0.6,
            choose: 2,
        };
        let Ok(schedule) = p.solve() else { continue };
        let v = schedule.weights();
        if v.iter().filter(|&&x| x > 1e-9 && x < 1.0 - 1e-9).count() < 2 {
            continue;
        }
        let draws = 50_000;
        let mut hits = vec![0usize; k];
        for _ in 0..draws {
            for i in dependent_round(v, &mut rng).unwrap().iter() {
                hits[i] += 1;
            }
        }
        for (i, &w) in v.iter().enumerate() {
            let freq = hits[i] as f64 / draws as f64;
            let sigma = (w * (1.0 - w) / draws as f64).sqrt();
            assert!(
                (freq - w).abs() <= 4.5 * sigma + 1e-12,
                "{v:?}: path {i} {freq} vs {w}"
            );
        }
        checked += 1;
    }
    assert!(
        checked >= 10,
        "only {checked} schedules had two fractional entries"
    );
}
