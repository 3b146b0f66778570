//! The result of the OLMS LPs: a probabilistic path scheduling vector `v` with `sum v = L` and
//! `0 <= v_i <= 1` (OLMS §III-A, the set χ), stored inline so solving never allocates.

use crate::MAX_PATHS;

/// A scheduling vector `v` over `K <= MAX_PATHS` paths and the LP objective it attains.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Schedule {
    /// `v`, zero past `len`. The solvers fill it in place (no copy of the array on return).
    pub(crate) weights: [f64; MAX_PATHS],
    len: usize,
    pub(crate) objective: f64,
}

impl Schedule {
    /// All-zero weights over `len` paths and objective 0, for a solver to fill in.
    #[inline(always)]
    pub(crate) fn zeroed(len: usize) -> Self {
        Self {
            weights: [0.0; MAX_PATHS],
            len: len.min(MAX_PATHS),
            objective: 0.0,
        }
    }

    /// Builds a schedule from the first `len` entries of `weights`.
    pub(crate) fn new(weights: [f64; MAX_PATHS], len: usize, objective: f64) -> Self {
        Self {
            weights,
            len: len.min(MAX_PATHS),
            objective,
        }
    }

    /// `v_i`, the marginal probability that path `i` is among the `L` chosen paths.
    pub fn weights(&self) -> &[f64] {
        &self.weights[..self.len]
    }

    /// The LP objective at `v`: `v·b` for eq. (4) (total over the `L` picks, not divided by
    /// `L`), `max_i v_i r_i` for eq. (8).
    pub fn objective(&self) -> f64 {
        self.objective
    }

    /// The number of paths `K`.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the schedule covers no path (never produced by the solvers).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// `min(a, b)` for numbers that are never NaN (the input is validated): one instruction, where
/// `f64::min` spends several on NaN.
#[inline(always)]
pub(crate) fn smaller(a: f64, b: f64) -> f64 {
    if a < b { a } else { b }
}

/// Up to this many keys, [`sorted_indices`] ranks by comparisons only.
const RANK_SORT_MAX: usize = 8;

/// Indices `0..keys.len()` ordered by key, ascending or descending; ties keep index order.
/// Keys must not be NaN (the solvers validate first). Allocation-free.
///
/// Up to [`RANK_SORT_MAX`] keys (OLMS's usual path counts), each index is placed at its rank,
/// the number of keys that come before it, counted without a data-dependent branch: an
/// insertion sort mispredicts its branches on keys that arrive in a random order, as Thompson
/// samples do. Beyond that the `O(K²)` comparisons cost more than the mispredictions, and an
/// insertion sort is used.
///
/// `N` is the capacity of the returned array; keys past it are ignored.
#[inline(always)]
pub(crate) fn sorted_indices<const N: usize>(keys: &[f64], descending: bool) -> [usize; N] {
    let mut order = [0usize; N];
    sort_indices_into(keys, descending, &mut order);
    order
}

/// [`sorted_indices`] into the caller's array, so that the ranks are stored where they are
/// read: returning the array by value made the compiler copy it with 16-byte loads right after
/// the rank sort's 8-byte stores, a store-to-load forwarding stall. Entries past `keys.len()`
/// are left as they are.
#[inline(always)]
pub(crate) fn sort_indices_into<const N: usize>(
    keys: &[f64],
    descending: bool,
    order: &mut [usize; N],
) {
    let keys = &keys[..keys.len().min(N)];
    if keys.len() <= RANK_SORT_MAX {
        for (i, &key) in keys.iter().enumerate() {
            // Earlier indices come first on a tie, later ones only when strictly ahead.
            let (earlier, later) = if descending {
                (
                    keys[..i].iter().filter(|&&other| other >= key).count(),
                    keys[i..].iter().filter(|&&other| other > key).count(),
                )
            } else {
                (
                    keys[..i].iter().filter(|&&other| other <= key).count(),
                    keys[i..].iter().filter(|&&other| other < key).count(),
                )
            };
            // The rank is below keys.len() <= N.
            order[earlier + later] = i;
        }
        return;
    }
    for (slot, index) in order.iter_mut().zip(0..keys.len()) {
        *slot = index;
    }
    for i in 1..keys.len() {
        let current = order[i];
        let mut j = i;
        while j > 0 && comes_before(keys[current], keys[order[j - 1]], descending) {
            order[j] = order[j - 1];
            j -= 1;
        }
        order[j] = current;
    }
}

fn comes_before(a: f64, b: f64, descending: bool) -> bool {
    if descending { a > b } else { a < b }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hot_path_values_stay_small() {
        // Returned by value on every OLMS decision: K weights inline, no heap.
        assert!(std::mem::size_of::<Schedule>() <= 8 * MAX_PATHS + 16);
        assert!(std::mem::size_of::<crate::LpError>() <= 64);
        assert_eq!(std::mem::size_of::<crate::PathMask>(), 4);
    }

    #[test]
    fn sorted_indices_is_stable_both_ways() {
        let keys = [0.3, 0.1, 0.3, 0.2];
        assert_eq!(&sorted_indices::<4>(&keys, false), &[1, 3, 0, 2]);
        assert_eq!(
            &sorted_indices::<MAX_PATHS>(&keys, true)[..4],
            &[0, 2, 3, 1]
        );
    }

    #[test]
    fn sorted_indices_matches_a_stable_sort() {
        // Every length up to MAX_PATHS, keys from a coarse grid (many ties, both zeros).
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for case in 0..20_000 {
            let n = 1 + case % MAX_PATHS;
            let keys: Vec<f64> = (0..n)
                .map(|_| {
                    state = state
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1);
                    let k = (state >> 59) as f64 / 4.0;
                    if k == 0.0 && state & 1 == 1 { -0.0 } else { k }
                })
                .collect();
            for descending in [false, true] {
                // A stable sort keeps index order among ties (and -0 ties with +0).
                let mut expected: Vec<usize> = (0..n).collect();
                expected.sort_by(|&a, &b| {
                    let (x, y) = if descending { (b, a) } else { (a, b) };
                    keys[x].partial_cmp(&keys[y]).unwrap()
                });
                assert_eq!(
                    &sorted_indices::<MAX_PATHS>(&keys, descending)[..n],
                    &expected[..],
                    "{keys:?}"
                );
            }
        }
    }
}
