//! The good_lp side of χ = {v : 0 <= v_i <= 1, Σ v_i = L} (OLMS §III-A), which the reference
//! models of eq. (4) and eq. (8) both start from: the variables, the sum row, a weighted sum
//! of `v`, and reading the vector back from a solution.

use good_lp::constraint::{Constraint, eq};
use good_lp::{Expression, ProblemVariables, Solution, Variable, variable};

use crate::MAX_PATHS;

/// One variable `0 <= v_i <= 1` per path.
pub(crate) fn variables(vars: &mut ProblemVariables, paths: usize) -> Vec<Variable> {
    (0..paths)
        .map(|_| vars.add(variable().min(0.0).max(1.0)))
        .collect()
}

/// `Σ v_i = L`.
pub(crate) fn sum_is(v: &[Variable], choose: usize) -> Constraint {
    eq(v.iter().copied().sum::<Expression>(), choose as f64)
}

/// `Σ w_i v_i`.
pub(crate) fn weighted(v: &[Variable], w: &[f64]) -> Expression {
    v.iter().zip(w).map(|(&x, &w)| w * x).sum()
}

/// The values of `v` in `solution`, padded with zeros.
pub(crate) fn weights(v: &[Variable], solution: &impl Solution) -> [f64; MAX_PATHS] {
    let mut weights = [0.0; MAX_PATHS];
    for (w, &x) in weights.iter_mut().zip(v) {
        *w = solution.value(x);
    }
    weights
}
