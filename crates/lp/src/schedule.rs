//! The result of the OLMS LPs: a probabilistic path scheduling vector `v` with `sum v = L` and
//! `0 <= v_i <= 1` (OLMS §III-A, the set χ), stored inline so solving never allocates.

use crate::MAX_PATHS;

/// A scheduling vector `v` over `K <= MAX_PATHS` paths and the LP objective it attains.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Schedule {
    weights: [f64; MAX_PATHS],
    len: usize,
    objective: f64,
}

impl Schedule {
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

/// Indices `0..keys.len()` ordered by key, ascending or descending; ties keep index order.
/// Insertion sort: `K <= MAX_PATHS` is tiny and this must not allocate.
pub(crate) fn sorted_indices(keys: &[f64], descending: bool) -> [usize; MAX_PATHS] {
    let mut order = [0usize; MAX_PATHS];
    let n = keys.len().min(MAX_PATHS);
    for (slot, index) in order.iter_mut().zip(0..n) {
        *slot = index;
    }
    for i in 1..n {
        let current = order[i];
        let mut j = i;
        while j > 0 && comes_before(keys[current], keys[order[j - 1]], descending) {
            order[j] = order[j - 1];
            j -= 1;
        }
        order[j] = current;
    }
    order
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
        assert_eq!(&sorted_indices(&keys, false)[..4], &[1, 3, 0, 2]);
        assert_eq!(&sorted_indices(&keys, true)[..4], &[0, 2, 3, 1]);
    }
}
