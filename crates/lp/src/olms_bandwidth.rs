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
//! The property test `tests/lp_vs_good_lp.rs` checks it against good_lp on 10,000 instances.

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

/// The greedy point at one level `z`.
struct Fill {
    weights: [f64; MAX_PATHS],
    /// `g(z) = vᵀb` at the greedy point.
    cost: f64,
    /// The right derivative `g'(z+)`, `<= 0`.
    slope: f64,
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
        let k = self.bandwidth.len();
        let order = sorted_indices(self.bandwidth, false);
        let floor: f64 = order[..self.choose]
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
        let accept = target + NEWTON_SLACK * target.max(1.0);
        let mut level = self.min_level();
        for _ in 0..MAX_STEPS {
            let fill = self.fill(&order[..k], level);
            if fill.cost <= accept {
                let objective = fill
                    .weights
                    .iter()
                    .zip(self.rtt)
                    .map(|(v, r)| v * r)
                    .fold(0.0, f64::max);
                return Ok(Schedule::new(fill.weights, k, objective));
            }
            level = if fill.slope < 0.0 {
                level + (target - fill.cost) / fill.slope
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

    /// `min(1, z / r_i)`, the cap on `v_i` at level `z`.
    fn cap(&self, path: usize, level: f64) -> f64 {
        let rtt = self.rtt[path];
        if rtt <= level || rtt <= ZERO_RTT {
            1.0
        } else {
            level / rtt
        }
    }

    /// `z_L`: the least level at which the caps can hold `L` in total.
    fn min_level(&self) -> f64 {
        let k = self.rtt.len();
        let order = sorted_indices(self.rtt, false);
        let choose = self.choose as f64;
        // Invariant at `pos`: paths order[..pos] are saturated (cap 1) on [r_{pos-1}, r_pos].
        for pos in 0..k {
            let rtt = self.rtt[order[pos]];
            if rtt <= ZERO_RTT {
                if pos + 1 >= self.choose {
                    return 0.0;
                }
                continue;
            }
            let inverse_sum: f64 = order[pos..k].iter().map(|&p| 1.0 / self.rtt[p]).sum();
            let level = (choose - pos as f64) / inverse_sum;
            if level <= rtt {
                return level;
            }
        }
        // Unreachable for L <= K: at the last position level = (L - K + 1) r_max <= r_max.
        self.rtt.iter().fold(0.0, |m, &r| m.max(r))
    }

    /// The greedy (cheapest bandwidth first) point at `level`, its cost and right slope.
    fn fill(&self, order: &[usize], level: f64) -> Fill {
        let mut weights = [0.0; MAX_PATHS];
        let mut left = self.choose as f64;
        let mut cost = 0.0;
        let mut marginal = None;
        for (pos, &path) in order.iter().enumerate() {
            let cap = self.cap(path, level);
            // The marginal path is the first whose cap covers what is left; the slack absorbs
            // rounding in `min_level`, where the caps sum to exactly L.
            let take = if cap >= left - TOLERANCE * 1e-3 {
                left.min(cap)
            } else {
                cap
            };
            weights[path] = take;
            cost += take * self.bandwidth[path];
            left -= take;
            if take < cap || left <= TOLERANCE * 1e-3 {
                marginal = Some(pos);
                break;
            }
        }
        let slope = match marginal {
            Some(m) => {
                let marginal_bandwidth = self.bandwidth[order[m]];
                order[..m]
                    .iter()
                    .filter(|&&p| self.rtt[p] > level && self.rtt[p] > ZERO_RTT)
                    .map(|&p| (self.bandwidth[p] - marginal_bandwidth) / self.rtt[p])
                    .sum()
            }
            None => 0.0,
        };
        Fill {
            weights,
            cost,
            slope,
        }
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
