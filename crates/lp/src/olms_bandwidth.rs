//! OLMS §IV-B, eq. (8) (and eq. (9) on true means): the bandwidth-constrained LP
//!
//! ```text
//! minimise   max_i v_i r_i
//! subject to Σ v_i = L,   0 <= v_i <= 1,   vᵀb <= C_b
//! ```
//!
//! written as its epigraph LP: minimise `z` subject to `r_i v_i <= z` for every path, plus the
//! constraints above. `b`, `r` and `C_b` are normalised to `[0, 1]` as in OLMS §III-A
//! (Application II: `b = (0.3, 0.1, 0.4, 0.6)`, `r = (0.3, 0.3, 0.4, 0.1)`, `C_b = 0.4`, `L = 2`
//! gives `v* = (1, 1, 0, 0)` and `OPT_min = 0.3`). The objective is the largest `v_i r_i`, a
//! single number; there is no sum over the `L` picks to average.
//!
//! # Fast exact solver
//!
//! For a level `z`, let `g(z)` be the least `vᵀb` over `{Σ v = L, 0 <= v_i <= min(1, z / r_i)}`
//! (paths with `r_i = 0` have cap 1). The optimum is the least `z` with `g(z) <= C_b`.
//!
//! - `g(z)` is computed exactly by the greedy fractional knapsack of [`crate::MaxRttProblem`]
//!   with the order reversed (cheapest bandwidth first); it is finite from `z_L`, the least `z`
//!   with `Σ min(1, z / r_i) = L`, found in closed form by scanning the sorted RTTs.
//! - `g` is the value function of an LP whose right-hand side moves linearly with `z` (the rows
//!   `r_i v_i - z <= 0`), hence convex and piecewise linear; it is non-increasing because the
//!   feasible set grows with `z`. It has at most `2K` breakpoints: where a cap reaches 1
//!   (`z = r_i`) and where the marginal path of the greedy changes.
//! - The problem is infeasible exactly when `g(∞)`, the sum of the `L` smallest `b_i`, exceeds
//!   `C_b`.
//! - Starting at `z_L`, Newton's method on `g(z) = C_b` with the right derivative
//!   `g'(z+) = Σ_{j before the marginal path m, r_j > z} (b_j - b_m) / r_j` never overshoots
//!   (a convex function lies above its supporting lines) and each step either lands on the root
//!   (the current piece is linear) or enters a later piece. So it ends after at most `2K + 1`
//!   steps, each `O(K)`, at the exact optimum. No allocation.
//!
//! Two paths with `L = 1` are solved in closed form (`solve_pair`).
//!
//! The property test `tests/lp_vs_good_lp.rs` checks both against good_lp on 10,000 instances
//! (and on 10,000 two-path, one-pick instances).

use good_lp::constraint::{eq, leq};
use good_lp::{Expression, ProblemVariables, Solution, SolverModel, Variable, microlp, variable};

use crate::MAX_PATHS;
use crate::error::{
    LpError, LpKind, TOLERANCE, check_choose, check_nonnegative, check_same_length, check_scalar,
};
use crate::schedule::{Schedule, sorted_indices};

const LP: LpKind = LpKind::OlmsBandwidth;

/// RTTs at or below this count as zero (their cap `min(1, z / r)` is 1 for every `z >= 0`);
/// keeps `1 / r` finite.
const ZERO_RTT: f64 = 1e-300;

/// Newton steps allowed before giving up; the argument in the module docs bounds the need by
/// `2K + 1`, the rest is slack for rounding.
const MAX_STEPS: usize = 4 * MAX_PATHS + 8;

/// Relative slack when accepting `g(z) <= C_b` during Newton's method.
const NEWTON_SLACK: f64 = 1e-12;

/// Absolute slack when deciding that a path's cap covers the rest of `L`.
const MARGINAL_SLACK: f64 = 1e-12;

/// One instance of OLMS eq. (8). All slices have one entry per path, `1 <= K <= MAX_PATHS`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BandwidthProblem<'a> {
    /// `b_i`: bandwidth of path `i`, normalised, finite and `>= 0`.
    pub bandwidth: &'a [f64],
    /// `r_i`: RTT of path `i`, normalised, finite and `>= 0`. The objective weights.
    pub rtt: &'a [f64],
    /// `C_b`: the bandwidth throttling threshold on `vᵀb`, finite and `>= 0`.
    pub bandwidth_limit: f64,
    /// `L`: the number of paths the schedule spreads over, `1 <= L <= K`.
    pub choose: usize,
}

/// Per-instance data the level search reuses: the cheapest-first order and `1 / r_i`
/// (0 for a zero RTT, whose cap is always 1).
struct Levels<'p> {
    problem: &'p BandwidthProblem<'p>,
    cheapest_first: [usize; MAX_PATHS],
    inverse_rtt: [f64; MAX_PATHS],
}

impl BandwidthProblem<'_> {
    /// Checks every input and names the first bad one.
    pub fn validate(&self) -> Result<(), LpError> {
        check_nonnegative(LP, "bandwidth", self.bandwidth, MAX_PATHS)?;
        check_nonnegative(LP, "rtt", self.rtt, MAX_PATHS)?;
        check_same_length(LP, "rtt", self.rtt.len(), "bandwidth", self.bandwidth.len())?;
        check_scalar(LP, "bandwidth_limit", self.bandwidth_limit)?;
        check_choose(LP, self.choose, self.bandwidth.len())
    }

    /// Solves eq. (8) exactly by Newton's method on the convex level function (module docs).
    /// Allocation-free; `O(K²)` with `K <= MAX_PATHS`.
    ///
    /// Returns [`LpError::Infeasible`] when even the `L` cheapest paths exceed `C_b`.
    pub fn solve(&self) -> Result<Schedule, LpError> {
        self.validate()?;
        if self.bandwidth.len() == 2 && self.choose == 1 {
            return self.solve_pair();
        }
        let levels = Levels::new(self);
        let floor: f64 = levels.cheapest_first[..self.choose]
            .iter()
            .map(|&p| self.bandwidth[p])
            .sum();
        let limit = self.bandwidth_limit;
        if floor > limit + TOLERANCE * limit.max(1.0) {
            return Err(LpError::Infeasible {
                lp: LP,
                reason: "the choose cheapest paths already exceed bandwidth_limit",
            });
        }
        // Within TOLERANCE of the floor counts as meeting it, so aim at the floor then.
        let target = limit.max(floor);
        // Rounding in `vᵀb` with `v <= 1` is of the order of ε Σ b_i; never ask for less.
        let scale: f64 = self.bandwidth.iter().sum();
        let accept = target + NEWTON_SLACK * target.max(1.0) + 8.0 * f64::EPSILON * scale;
        let mut level = levels.min_level();
        for _ in 0..MAX_STEPS {
            let Some((cost, slope)) = levels.cost_and_slope(level) else {
                // Rounding left `z_L` a hair low: step up by a relative 1e-12.
                level = level * (1.0 + NEWTON_SLACK) + f64::MIN_POSITIVE;
                continue;
            };
            if cost <= accept {
                return Ok(levels.schedule(level));
            }
            level = if slope < 0.0 {
                let next = level + (target - cost) / slope;
                if next <= level {
                    // Rounding stalled the search within an ulp of the optimum.
                    return Ok(levels.schedule(level));
                }
                next
            } else {
                // A zero slope with cost above target contradicts convexity unless rounding
                // blurred it; every cap is 1 from the largest RTT on, where cost = floor.
                self.rtt.iter().fold(level, |m, &r| m.max(r))
            };
        }
        Err(LpError::Solver {
            lp: LP,
            reason: "Newton's method on the level did not settle",
        })
    }

    /// Two paths, one pick (a phone's Wi-Fi and cellular link), in closed form. With `v` on
    /// path 0 and `1 - v` on path 1, `max(v r_0, (1 - v) r_1)` is least where the two are equal,
    /// `v = r_1 / (r_0 + r_1)`; if that spends more than `C_b`, the optimum moves towards the
    /// cheaper path just until `vᵀb = C_b` (the objective grows monotonically on that side).
    fn solve_pair(&self) -> Result<Schedule, LpError> {
        let (b0, b1) = (self.bandwidth[0], self.bandwidth[1]);
        let (r0, r1) = (self.rtt[0], self.rtt[1]);
        let floor = b0.min(b1);
        let limit = self.bandwidth_limit;
        if floor > limit + TOLERANCE * limit.max(1.0) {
            return Err(LpError::Infeasible {
                lp: LP,
                reason: "the choose cheapest paths already exceed bandwidth_limit",
            });
        }
        // Within TOLERANCE of the floor counts as meeting it, as in the general solver.
        let target = limit.max(floor);
        let mut v = if r0 + r1 > 0.0 {
            r1 / (r0 + r1)
        } else if b0 <= b1 {
            1.0
        } else {
            0.0
        };
        // b0 == b1 never gets here: then every v spends b0 = floor <= target.
        if b1 + v * (b0 - b1) > target {
            v = ((target - b1) / (b0 - b1)).clamp(0.0, 1.0);
        }
        let mut weights = [0.0; MAX_PATHS];
        weights[0] = v;
        weights[1] = 1.0 - v;
        Ok(Schedule::new(weights, 2, (v * r0).max((1.0 - v) * r1)))
    }

    /// Solves the epigraph form of eq. (8) with good_lp on the pure-Rust microlp solver.
    /// Allocates; for validation and benchmarks, not the hot path.
    pub fn solve_good_lp(&self) -> Result<Schedule, LpError> {
        self.validate()?;
        let k = self.bandwidth.len();
        let mut vars = ProblemVariables::new();
        let v: Vec<Variable> = (0..k)
            .map(|_| vars.add(variable().min(0.0).max(1.0)))
            .collect();
        let level = vars.add(variable().min(0.0));
        let spent: Expression = v.iter().zip(self.bandwidth).map(|(&x, &b)| b * x).sum();
        let total: Expression = v.iter().copied().sum();
        let mut model = vars.minimise(level).using(microlp);
        model = model.with(eq(total, self.choose as f64));
        model = model.with(leq(spent, self.bandwidth_limit));
        for (&x, &r) in v.iter().zip(self.rtt) {
            model = model.with(leq(r * x, level));
        }
        let solution = model
            .solve()
            .map_err(|e| crate::error::from_good_lp(LP, e))?;
        let mut weights = [0.0; MAX_PATHS];
        for (w, &x) in weights.iter_mut().zip(&v) {
            *w = solution.value(x);
        }
        let objective = weights
            .iter()
            .zip(self.rtt)
            .map(|(v, r)| v * r)
            .fold(0.0, f64::max);
        Ok(Schedule::new(weights, k, objective))
    }
}

impl<'p> Levels<'p> {
    fn new(problem: &'p BandwidthProblem<'p>) -> Self {
        let mut inverse_rtt = [0.0; MAX_PATHS];
        for (inverse, &rtt) in inverse_rtt.iter_mut().zip(problem.rtt) {
            *inverse = if rtt <= ZERO_RTT { 0.0 } else { 1.0 / rtt };
        }
        let cheapest_first = sorted_indices(problem.bandwidth, false);
        Self {
            problem,
            cheapest_first,
            inverse_rtt,
        }
    }

    /// `min(1, z / r_i)`, the cap on `v_i` at level `z`.
    fn cap(&self, path: usize, level: f64) -> f64 {
        if self.problem.rtt[path] <= level || self.inverse_rtt[path] == 0.0 {
            1.0
        } else {
            level * self.inverse_rtt[path]
        }
    }

    /// `z_L`: the least level at which the caps can hold `L` in total. On `[r_(m), r_(m+1)]`
    /// (RTTs ascending) the caps sum to `m + z Σ_{j > m} 1 / r_(j)`.
    fn min_level(&self) -> f64 {
        let rtt = self.problem.rtt;
        let k = rtt.len();
        let order = sorted_indices(rtt, false);
        let choose = self.problem.choose;
        // Zero RTTs sort first and are saturated at every level: with L of them, z_L = 0.
        let zeros = order[..k]
            .iter()
            .take_while(|&&path| self.inverse_rtt[path] == 0.0)
            .count();
        if zeros >= choose {
            return 0.0;
        }
        // The first position `pos` (RTTs ascending) whose level
        // `(L − pos) / Σ_{q >= pos} 1 / r_(q)` reaches no further than `r_(pos)`. The scan runs
        // from the largest RTT down, so the suffix sum stays in a register and is summed from
        // the largest RTT down: a tiny RTT (huge inverse) never cancels against the rest.
        let mut suffix = 0.0;
        let mut found = None;
        for pos in (zeros..k).rev() {
            let path = order[pos];
            suffix += self.inverse_rtt[path];
            let level = (choose as f64 - pos as f64) / suffix;
            // `level` may land an ulp above `r_(pos)` when `1 / r_(pos)` swamps the suffix sum;
            // the caps at `r_(pos)` itself still hold L then.
            if level <= rtt[path] * (1.0 + NEWTON_SLACK) {
                found = Some(level.min(rtt[path]));
            }
        }
        // Always found for L <= K: at the last position level = (L - K + 1) r_max <= r_max.
        found.unwrap_or_else(|| rtt.iter().fold(0.0, |m, &r| m.max(r)))
    }

    /// `g(z)` and its right derivative `g'(z+)` (cheapest first), or `None` when the caps at
    /// `level` cannot hold `L` (only possible through rounding just below `z_L`).
    fn cost_and_slope(&self, level: f64) -> Option<(f64, f64)> {
        let bandwidth = self.problem.bandwidth;
        let order = &self.cheapest_first[..bandwidth.len()];
        let mut left = self.problem.choose as f64;
        let mut cost = 0.0;
        for (pos, &path) in order.iter().enumerate() {
            let cap = self.cap(path, level);
            // The marginal path is the first whose cap covers what is left; the slack absorbs
            // rounding in `min_level`, where the caps sum to exactly L.
            if cap >= left - MARGINAL_SLACK {
                cost += left.min(cap) * bandwidth[path];
                let marginal = bandwidth[path];
                // Σ (b_j - b_m) / r_j over the unsaturated paths before the marginal one,
                // summed term by term to avoid cancellation between large inverses.
                let slope = order[..pos]
                    .iter()
                    .filter(|&&j| self.cap(j, level) < 1.0)
                    .map(|&j| (bandwidth[j] - marginal) * self.inverse_rtt[j])
                    .sum();
                return Some((cost, slope));
            }
            cost += cap * bandwidth[path];
            left -= cap;
        }
        None
    }

    /// The greedy point at `level` as a schedule, objective `max_i v_i r_i`.
    fn schedule(&self, level: f64) -> Schedule {
        let problem = self.problem;
        let mut weights = [0.0; MAX_PATHS];
        let mut left = problem.choose as f64;
        for &path in &self.cheapest_first[..problem.bandwidth.len()] {
            let cap = self.cap(path, level);
            let take = if cap >= left - MARGINAL_SLACK {
                left.min(cap)
            } else {
                cap
            };
            weights[path] = take;
            left -= take;
            if left <= MARGINAL_SLACK {
                break;
            }
        }
        let objective = weights
            .iter()
            .zip(problem.rtt)
            .map(|(v, r)| v * r)
            .fold(0.0, f64::max);
        Schedule::new(weights, problem.bandwidth.len(), objective)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// OLMS §VI-C, Application II on the true means.
    const APP2: BandwidthProblem<'static> = BandwidthProblem {
        bandwidth: &[0.3, 0.1, 0.4, 0.6],
        rtt: &[0.3, 0.3, 0.4, 0.1],
        bandwidth_limit: 0.4,
        choose: 2,
    };

    fn assert_app2(schedule: &Schedule, tol: f64) {
        for (got, want) in schedule.weights().iter().zip([1.0, 1.0, 0.0, 0.0]) {
            assert!((got - want).abs() < tol, "{:?}", schedule.weights());
        }
        assert!(
            (schedule.objective() - 0.3).abs() < tol,
            "{}",
            schedule.objective()
        );
    }

    #[test]
    fn application_two_fast_matches_the_paper() {
        assert_app2(&APP2.solve().unwrap(), 1e-9);
    }

    #[test]
    fn application_two_good_lp_matches_the_paper() {
        assert_app2(&APP2.solve_good_lp().unwrap(), 1e-9);
    }

    #[test]
    fn a_looser_budget_lowers_the_level() {
        // With C_b = 1 the cheapest-level point spreads mass onto the low-RTT path 4.
        let p = BandwidthProblem {
            bandwidth_limit: 1.0,
            ..APP2
        };
        let fast = p.solve().unwrap();
        let reference = p.solve_good_lp().unwrap();
        assert!(fast.objective() < 0.3);
        assert!((fast.objective() - reference.objective()).abs() < 1e-9);
    }

    #[test]
    fn infeasible_is_a_value_in_both_solvers() {
        let p = BandwidthProblem {
            bandwidth_limit: 0.39,
            ..APP2
        };
        assert!(matches!(p.solve(), Err(LpError::Infeasible { .. })));
        assert!(matches!(p.solve_good_lp(), Err(LpError::Infeasible { .. })));
    }

    #[test]
    fn zero_rtt_paths_cost_no_level() {
        let p = BandwidthProblem {
            bandwidth: &[0.2, 0.2, 0.2],
            rtt: &[0.0, 0.0, 0.5],
            bandwidth_limit: 1.0,
            choose: 2,
        };
        let s = p.solve().unwrap();
        assert_eq!(s.objective(), 0.0);
        assert_eq!(&s.weights()[..2], &[1.0, 1.0]);
    }

    #[test]
    fn a_tiny_rtt_does_not_swamp_the_others() {
        // Found by tests/robustness.rs: 1 / r_1 is so large that the suffix sum rounds to it and
        // z_L came out an ulp above r_1, which once sent the level search to 0.
        let r = [
            0.0,
            5.123_005_713_115_601_6e-20,
            0.511,
            0.352,
            0.042,
            0.733,
            0.0,
            0.926,
            0.247,
            0.549,
            0.232,
            0.999,
            0.321,
            0.076,
        ];
        let p = BandwidthProblem {
            bandwidth: &[0.0; 14],
            rtt: &r,
            bandwidth_limit: 0.0,
            choose: 3,
        };
        let s = p.solve().unwrap();
        assert!(
            (s.weights().iter().sum::<f64>() - 3.0).abs() < 1e-12,
            "{:?}",
            s.weights()
        );
        assert!(s.objective() <= 5.2e-20);
        // Found the same way: b_2 = 1.7e8 makes the rounding in vᵀb far larger than 1e-12.
        let p = BandwidthProblem {
            bandwidth: &[0.0, 174_212_230.957_203_24],
            rtt: &[0.913_315_757_713_880_7, 0.0],
            bandwidth_limit: 0.490_130_384_024_971_67,
            choose: 1,
        };
        let s = p.solve().unwrap();
        assert!(
            (s.weights().iter().sum::<f64>() - 1.0).abs() < 1e-12,
            "{:?}",
            s.weights()
        );
        let b = [0.0; 13];
        let r = [
            0.0,
            0.95,
            0.357,
            9.776_572_798_222_871e-17,
            0.134,
            0.599,
            0.678,
            1.638e121,
            0.735,
            0.539,
            0.959,
            0.240,
            0.643,
        ];
        let p = BandwidthProblem {
            bandwidth: &b,
            rtt: &r,
            bandwidth_limit: 0.0,
            choose: 3,
        };
        let s = p.solve().unwrap();
        assert!(
            (s.weights().iter().sum::<f64>() - 3.0).abs() < 1e-12,
            "{:?}",
            s.weights()
        );
    }

    #[test]
    fn bad_inputs_are_named() {
        let p = BandwidthProblem {
            bandwidth_limit: f64::NAN,
            ..APP2
        };
        assert!(matches!(
            p.solve(),
            Err(LpError::InvalidScalar {
                input: "bandwidth_limit",
                ..
            })
        ));
        let p = BandwidthProblem {
            rtt: &[0.3, 0.3, -1.0, 0.1],
            ..APP2
        };
        assert!(matches!(
            p.solve(),
            Err(LpError::InvalidEntry {
                input: "rtt",
                index: 2,
                ..
            })
        ));
        let p = BandwidthProblem { choose: 9, ..APP2 };
        assert!(matches!(
            p.solve_good_lp(),
            Err(LpError::InvalidChoose { choose: 9, .. })
        ));
    }
}
