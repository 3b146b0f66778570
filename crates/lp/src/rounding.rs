//! Dependent rounding (Gandhi, Khuller, Parthasarathy, Srinivasan, "Dependent rounding and its
//! applications to approximation algorithms", J. ACM 53(3), 2006, §2), as OLMS §III-B uses it
//! (ref. [25]) to turn the LP's scheduling vector `v` (`Σ v_i = L`, `0 <= v_i <= 1`) into a set
//! of exactly `L` paths with `P(i chosen) = v_i`.
//!
//! Each step takes two fractional entries `v_p, v_i` and, with `α = min(1 - v_p, v_i)` and
//! `β = min(v_p, 1 - v_i)`, moves `(v_p, v_i)` to `(v_p + α, v_i - α)` with probability
//! `β / (α + β)` and to `(v_p - β, v_i + β)` otherwise. The expected change of each entry is
//! `αβ/(α+β) - βα/(α+β) = 0` (marginals kept), the sum is unchanged (so exactly `L` ones
//! remain), and at least one of the two becomes 0 or 1, so `K - 1` steps suffice. One pass over
//! the entries with a single pending fractional index does it without allocation.

use rand::{Rng, RngExt};

use crate::MAX_PATHS;
use crate::error::{LpError, LpKind};

const LP: LpKind = LpKind::DependentRounding;

/// How far from an integer the sum of the weights may be (solver outputs carry rounding).
const SUM_SLACK: f64 = 1e-7;

/// How far outside `[0, 1]` an entry may be (clamped), and within what distance of 0 or 1 an
/// entry counts as integral.
const ENTRY_SLACK: f64 = 1e-12;

const _: () = assert!(MAX_PATHS <= 32, "PathMask holds at most 32 paths");

/// A set of path indices `0..MAX_PATHS`, one bit each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PathMask(pub u32);

impl PathMask {
    /// Whether path `index` is in the set.
    pub fn contains(self, index: usize) -> bool {
        index < 32 && self.0 & (1 << index) != 0
    }

    /// The number of paths in the set.
    pub fn len(self) -> usize {
        self.0.count_ones() as usize
    }

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The path indices in the set, ascending.
    pub fn iter(self) -> impl Iterator<Item = usize> {
        (0..32).filter(move |&i| self.contains(i))
    }
}

/// Rounds `weights` (each in `[0, 1]`, summing to an integer `L`) to a set of exactly `L` paths
/// in which path `i` appears with probability `weights[i]`. Allocation-free; `K - 1` random
/// draws at most.
///
/// Errors name the bad input: a NaN or out-of-range entry, a length outside `1..=MAX_PATHS`,
/// or a sum that is not an integer.
pub fn dependent_round<R: Rng + ?Sized>(weights: &[f64], rng: &mut R) -> Result<PathMask, LpError> {
    let k = weights.len();
    if k == 0 || k > MAX_PATHS {
        return Err(LpError::BadLength {
            lp: LP,
            input: "weights",
            len: k,
            max: MAX_PATHS,
        });
    }
    let mut v = [0.0f64; MAX_PATHS];
    for (index, (slot, &value)) in v.iter_mut().zip(weights).enumerate() {
        if !(-ENTRY_SLACK..=1.0 + ENTRY_SLACK).contains(&value) {
            return Err(LpError::InvalidEntry {
                lp: LP,
                input: "weights",
                index,
                value,
                expected: "a number in [0, 1]",
            });
        }
        *slot = value.clamp(0.0, 1.0);
    }
    let sum: f64 = v[..k].iter().sum();
    let chosen = sum.round();
    if (sum - chosen).abs() > SUM_SLACK {
        return Err(LpError::FractionalSum { lp: LP, sum });
    }
    let mut pending: Option<usize> = None;
    for i in 0..k {
        if is_integral(v[i]) {
            continue;
        }
        pending = match pending {
            None => Some(i),
            Some(p) => {
                pair_step(&mut v, p, i, rng);
                [p, i].into_iter().find(|&j| !is_integral(v[j]))
            }
        };
    }
    let mut mask = 0u32;
    for (i, &value) in v[..k].iter().enumerate() {
        // A pending entry left over is within rounding of 0 or 1 because the sum is integral.
        if value >= 0.5 {
            mask |= 1 << i;
        }
    }
    let mask = PathMask(mask);
    if mask.len() as f64 != chosen {
        return Err(LpError::FractionalSum { lp: LP, sum });
    }
    Ok(mask)
}

fn is_integral(value: f64) -> bool {
    value <= ENTRY_SLACK || value >= 1.0 - ENTRY_SLACK
}

/// One Gandhi et al. step on the fractional pair `(p, i)`; afterwards at least one is 0 or 1.
fn pair_step<R: Rng + ?Sized>(v: &mut [f64; MAX_PATHS], p: usize, i: usize, rng: &mut R) {
    let (a, b) = (v[p], v[i]);
    let up = (1.0 - a).min(b); // α: p rises, i falls
    let down = a.min(1.0 - b); // β: p falls, i rises
    if rng.random::<f64>() * (up + down) < down {
        if 1.0 - a <= b {
            v[p] = 1.0;
            v[i] = b - (1.0 - a);
        } else {
            v[p] = a + b;
            v[i] = 0.0;
        }
    } else if a <= 1.0 - b {
        v[p] = 0.0;
        v[i] = a + b;
    } else {
        v[p] = a - (1.0 - b);
        v[i] = 1.0;
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;

    /// Draws `n` rounded sets and checks every set has `L` paths and every empirical marginal
    /// is within 4.5 standard deviations of `weights[i]` (integral entries exactly).
    fn check_marginals(weights: &[f64], n: usize, seed: u64) {
        let mut rng = StdRng::seed_from_u64(seed);
        let chosen = weights.iter().sum::<f64>().round() as usize;
        let mut hits = [0usize; MAX_PATHS];
        for _ in 0..n {
            let mask = dependent_round(weights, &mut rng).unwrap();
            assert_eq!(mask.len(), chosen, "{weights:?} gave {mask:?}");
            for i in mask.iter() {
                hits[i] += 1;
            }
        }
        for (i, &w) in weights.iter().enumerate() {
            let freq = hits[i] as f64 / n as f64;
            let sigma = (w * (1.0 - w) / n as f64).sqrt();
            assert!(
                (freq - w).abs() <= 4.5 * sigma,
                "path {i}: {freq} vs {w} (sigma {sigma})"
            );
        }
    }

    #[test]
    fn application_one_vector_keeps_its_marginals() {
        check_marginals(&[1.0 / 6.0, 0.0, 1.0, 5.0 / 6.0], 200_000, 1);
    }

    #[test]
    fn many_fractional_entries_keep_their_marginals() {
        check_marginals(&[0.1, 0.45, 0.9, 0.3, 0.25, 0.5, 0.15, 0.35], 200_000, 2);
        check_marginals(&[0.5; 16], 100_000, 3);
    }

    #[test]
    fn integral_vectors_are_returned_as_they_are() {
        let mut rng = StdRng::seed_from_u64(4);
        assert_eq!(
            dependent_round(&[1.0, 0.0, 1.0], &mut rng).unwrap(),
            PathMask(0b101)
        );
    }

    #[test]
    fn bad_inputs_are_named() {
        let mut rng = StdRng::seed_from_u64(5);
        assert!(matches!(
            dependent_round(&[0.5, f64::NAN], &mut rng),
            Err(LpError::InvalidEntry { index: 1, .. })
        ));
        assert!(matches!(
            dependent_round(&[0.5, 1.5], &mut rng),
            Err(LpError::InvalidEntry { index: 1, .. })
        ));
        assert!(matches!(
            dependent_round(&[0.5, 0.6], &mut rng),
            Err(LpError::FractionalSum { .. })
        ));
        assert!(matches!(
            dependent_round(&[], &mut rng),
            Err(LpError::BadLength { len: 0, .. })
        ));
    }
}
