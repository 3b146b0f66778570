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
//! (paths with `r_i = 0` have cap 1). The optimum is the least `z` at which the caps can hold
//! `L` at all, `S(z) = Σ min(1, z / r_i) >= L`, and `g(z) <= C_b`.
//!
//! - `g(z)` is the greedy fractional knapsack of [`crate::MaxRttProblem`] with the order
//!   reversed (cheapest bandwidth first): the paths before the marginal path `m` take their
//!   caps, `m` takes what is left of `L`.
//! - The problem is infeasible exactly when `g(∞)`, the sum of the `L` smallest `b_i`, exceeds
//!   `C_b`. Otherwise the optimum is at most the largest RTT, where every cap is 1.
//! - With the paths cheapest first, let `h_m(z) = b_m L - Σ_{j<m} (b_m - b_j) min(1, z / r_j)`,
//!   the cost if `m` were the marginal path. `h_m - h_{m-1} = (b_m - b_{m-1})(L - Σ_{j<m} u_j)`
//!   is `>= 0` up to the greedy's marginal path and `<= 0` after it, so wherever the caps hold
//!   `L`, `g = max_m h_m`. The constraint `g(z) <= C_b` is thus `h_m(z) <= C_b` for every `m`.
//! - Each `h_m` is convex and non-increasing, `S` is concave and non-decreasing, and all are
//!   piecewise linear with kinks only at RTTs. Between two RTTs each is a line; the root of a
//!   line lies at or below the least `z` meeting its constraint (a convex function lies above
//!   the extension of each of its pieces, a concave one below).
//!
//! The solver walks the pieces from `z = 0`: on the piece after `z` it takes the largest root
//! of the `K + 1` lines (one `O(K)` pass with prefix sums), a lower bound on the optimum. If no
//! RTT lies between `z` and that root, the lines are the functions themselves there and the
//! root is the optimum; otherwise the walk goes on from the root, past at least one RTT. So
//! it ends after at most `K + 1` passes, usually 1 to 3. A last greedy pass builds the schedule
//! and checks the cost against `C_b`; should rounding ever leave it short, Newton's method on
//! `g` from that level finishes the search (each step lands on the root of the current piece
//! of `g` or enters a later piece; it never overshoots). No allocation.
//!
//! Two paths with `L = 1` are solved in closed form (`solve_pair`).
//!
//! The property tests in `tests/lp_vs_good_lp.rs` check the solver against good_lp on 10,000
//! instances of every path count from 2 to 8 and 10,000 more of 2 to 16 paths.

use good_lp::constraint::leq;
use good_lp::{ProblemVariables, SolverModel, microlp, variable};

use crate::error::{LpError, LpKind, TOLERANCE, check_olms, olms_input_ok};
use crate::schedule::{Schedule, sorted_indices};
use crate::{MAX_PATHS, chi_model};

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

/// The instance in cheapest-first order (ties by index), gathered into arrays of `N >= K` so
/// that every pass of the level search reads them front to back. `N` is 4, 8 or
/// [`MAX_PATHS`]: the smallest that holds `K`, so small instances touch little memory.
struct Levels<const N: usize> {
    len: usize,
    /// `L` as a float.
    choose: f64,
    /// The original index of each position.
    path: [usize; N],
    bandwidth: [f64; N],
    /// `r_i`, with RTTs at or below [`ZERO_RTT`] stored as 0 (saturated at every level).
    rtt: [f64; N],
    /// `1 / r_i`, 0 for a zero RTT.
    inverse_rtt: [f64; N],
}

/// What one pass of the greedy finds at a level `z`.
enum Pass {
    /// The caps hold less than `L`: `saturated` of them are 1 and the others sum to
    /// `z · inverse_sum`.
    Short { saturated: f64, inverse_sum: f64 },
    /// `g(z)` and its right derivative `g'(z+)`.
    Cost { cost: f64, slope: f64 },
}

impl BandwidthProblem<'_> {
    /// Checks every input and names the first bad one.
    pub fn validate(&self) -> Result<(), LpError> {
        let limit = ("bandwidth_limit", self.bandwidth_limit);
        check_olms(LP, self.bandwidth, self.rtt, limit, self.choose)
    }

    /// Solves eq. (8) exactly by a walk over the pieces between RTTs (module docs).
    /// Allocation-free; `O(K²)` with `K <= MAX_PATHS`.
    ///
    /// Returns [`LpError::Infeasible`] when even the `L` cheapest paths exceed `C_b`.
    pub fn solve(&self) -> Result<Schedule, LpError> {
        if !olms_input_ok(self.bandwidth, self.rtt, self.bandwidth_limit, self.choose) {
            self.validate()?;
        }
        match self.bandwidth.len() {
            2 if self.choose == 1 => self.solve_pair(),
            0..=4 => self.solve_in::<4>(),
            5..=8 => self.solve_in::<8>(),
            _ => self.solve_in::<MAX_PATHS>(),
        }
    }

    /// The level search on arrays of `N >= K` entries.
    fn solve_in<const N: usize>(&self) -> Result<Schedule, LpError> {
        let levels = Levels::<N>::new(self);
        let floor: f64 = levels.bandwidth[..self.choose].iter().sum();
        let target = self.target(floor)?;
        // Rounding in `vᵀb` with `v <= 1` is of the order of ε Σ b_i; never ask for less.
        let scale: f64 = levels.bandwidth[..levels.len].iter().sum();
        let accept = target + NEWTON_SLACK * target.max(1.0) + 8.0 * f64::EPSILON * scale;
        let level = levels.level(target, accept);
        // The walk is exact but for rounding; the greedy pass that builds the schedule checks
        // it, and Newton's method finishes the rare case it falls short in.
        match levels.schedule(level, accept, self.rtt) {
            Err(LpError::Solver { .. }) => {
                let level = levels.search(level, target, accept)?;
                levels.schedule(level, f64::INFINITY, self.rtt)
            }
            done => done,
        }
    }

    /// The budget the search aims at, or [`LpError::Infeasible`] when the `L` cheapest paths
    /// (`floor`) exceed it. Within [`TOLERANCE`] of the floor counts as meeting it, so the
    /// search aims at the floor then.
    fn target(&self, floor: f64) -> Result<f64, LpError> {
        let limit = self.bandwidth_limit;
        if floor > limit + TOLERANCE * limit.max(1.0) {
            return Err(LpError::Infeasible {
                lp: LP,
                reason: "the choose cheapest paths already exceed bandwidth_limit",
            });
        }
        Ok(limit.max(floor))
    }

    /// Two paths, one pick (a phone's Wi-Fi and cellular link), in closed form. With `v` on
    /// path 0 and `1 - v` on path 1, `max(v r_0, (1 - v) r_1)` is least where the two are equal,
    /// `v = r_1 / (r_0 + r_1)`; if that spends more than `C_b`, the optimum moves towards the
    /// cheaper path just until `vᵀb = C_b` (the objective grows monotonically on that side).
    fn solve_pair(&self) -> Result<Schedule, LpError> {
        let (b0, b1) = (self.bandwidth[0], self.bandwidth[1]);
        let (r0, r1) = (self.rtt[0], self.rtt[1]);
        let target = self.target(b0.min(b1))?;
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
        let mut schedule = Schedule::zeroed(2);
        schedule.weights[0] = v;
        schedule.weights[1] = 1.0 - v;
        schedule.objective = larger(v * r0, (1.0 - v) * r1);
        Ok(schedule)
    }

    /// Solves the epigraph form of eq. (8) with good_lp on the pure-Rust microlp solver.
    /// Allocates; for validation and benchmarks, not the hot path.
    pub fn solve_good_lp(&self) -> Result<Schedule, LpError> {
        self.validate()?;
        let k = self.bandwidth.len();
        let mut vars = ProblemVariables::new();
        let v = chi_model::variables(&mut vars, k);
        let level = vars.add(variable().min(0.0));
        let mut model = vars.minimise(level).using(microlp);
        model = model.with(chi_model::sum_is(&v, self.choose));
        model = model.with(leq(
            chi_model::weighted(&v, self.bandwidth),
            self.bandwidth_limit,
        ));
        for (&x, &r) in v.iter().zip(self.rtt) {
            model = model.with(leq(r * x, level));
        }
        let solution = model
            .solve()
            .map_err(|e| crate::error::from_good_lp(LP, e))?;
        let weights = chi_model::weights(&v, &solution);
        let objective = weights
            .iter()
            .zip(self.rtt)
            .map(|(v, r)| v * r)
            .fold(0.0, f64::max);
        Ok(Schedule::new(weights, k, objective))
    }
}

impl<const N: usize> Levels<N> {
    fn new(problem: &BandwidthProblem<'_>) -> Self {
        let len = problem.bandwidth.len();
        let order = sorted_indices::<N>(problem.bandwidth, false);
        let mut levels = Self {
            len,
            choose: problem.choose as f64,
            path: order,
            bandwidth: [0.0; N],
            rtt: [0.0; N],
            inverse_rtt: [0.0; N],
        };
        for (position, &path) in order[..len].iter().enumerate() {
            levels.bandwidth[position] = problem.bandwidth[path];
            let rtt = problem.rtt[path];
            levels.rtt[position] = if rtt > ZERO_RTT { rtt } else { 0.0 };
        }
        // All N lanes at once, without a branch (1 / 0 is not used).
        for (inverse, &rtt) in levels.inverse_rtt.iter_mut().zip(&levels.rtt) {
            let reciprocal = 1.0 / rtt;
            *inverse = if rtt > 0.0 { reciprocal } else { 0.0 };
        }
        levels
    }

    /// The least level `z` with `g(z) <= accept`, from a `start` at or below it: the fallback
    /// after [`Self::level`]. Newton's method first on the concave `S(z) = Σ min(1, z / r_i)`
    /// up to `z_L` (where `S = L`) if `start` is below it, then on the convex `g` down to
    /// `target`. Both approach their root from below and never pass it, each step crossing at
    /// least one breakpoint or landing on the root.
    fn search(&self, start: f64, target: f64, accept: f64) -> Result<f64, LpError> {
        let mut level = start;
        for _ in 0..MAX_STEPS {
            match self.pass(level) {
                Pass::Short {
                    saturated,
                    inverse_sum,
                } => {
                    let next = (self.choose - saturated) / inverse_sum;
                    // Rounding may leave the root a hair below `z_L`: then step up by 1e-12.
                    level = if next > level {
                        next
                    } else {
                        level * (1.0 + NEWTON_SLACK) + f64::MIN_POSITIVE
                    };
                }
                Pass::Cost { cost, .. } if cost <= accept => return Ok(level),
                Pass::Cost { cost, slope } if slope < 0.0 => {
                    let next = level + (target - cost) / slope;
                    if next <= level {
                        // Rounding stalled the search within an ulp of the optimum.
                        return Ok(level);
                    }
                    level = next;
                }
                Pass::Cost { .. } => {
                    // A zero slope with cost above target contradicts convexity unless rounding
                    // blurred it; every cap is 1 from the largest RTT on, where cost = floor.
                    level = self.rtt[..self.len].iter().fold(level, |m, &r| m.max(r));
                }
            }
        }
        Err(LpError::Solver {
            lp: LP,
            reason: "Newton's method on the level did not settle",
        })
    }

    /// The optimum level by a walk over the pieces between RTT breakpoints (module docs),
    /// or, in a rounding pathology, a level below it for Newton's method to finish.
    fn level(&self, target: f64, accept: f64) -> f64 {
        let len = self.len;
        // At the largest RTT every cap is 1 and the cost is the floor: the optimum is no
        // higher. This bounds a root that rounding sends far off.
        let highest = self.rtt[..len].iter().fold(0.0, |m, &r| larger(m, r));
        // Bounds the rounding of the sums below, relative to their magnitude.
        let rounding = 2.0 * (len as f64 + 2.0) * f64::EPSILON;
        let mut level = 0.0f64;
        for _ in 0..=N {
            // The lines of the piece after `level`, cheapest first: `saturated` caps are 1
            // (their bandwidth sums to `fixed`), the others z / r_j (Σ 1 / r_j = `inverse`,
            // Σ b_j / r_j = `weighted`).
            let (mut saturated, mut fixed, mut inverse, mut weighted) = (0.0, 0.0, 0.0, 0.0);
            let mut next = level;
            for position in 0..len {
                let bandwidth = self.bandwidth[position];
                // h_m = α - z β with α = b_m (L - saturated) + fixed and
                // β = Σ_{j<m, not saturated} (b_m - b_j) / r_j >= 0, here a difference of
                // sums; widening it by its rounding makes the root err low, never high.
                let alpha = bandwidth * (self.choose - saturated) + fixed;
                let beta = bandwidth * inverse - weighted;
                if beta > 0.0 && alpha - level * beta > accept {
                    let widened = beta + rounding * (bandwidth * inverse + weighted);
                    next = larger(next, (alpha - target) / widened);
                }
                if self.rtt[position] <= level {
                    saturated += 1.0;
                    fixed += bandwidth;
                } else {
                    inverse += self.inverse_rtt[position];
                    weighted += bandwidth * self.inverse_rtt[position];
                }
            }
            // The caps' sum, saturated + z Σ 1 / r_j, reaches L at z_L.
            if saturated < self.choose && inverse > 0.0 {
                next = larger(next, (self.choose - saturated) / inverse);
            }
            let next = next.min(highest);
            // Exact when no cap reached 1 on the way: the lines were the functions themselves.
            if !self.rtt[..len]
                .iter()
                .any(|&rtt| rtt > level && rtt <= next)
            {
                return next;
            }
            level = next;
        }
        level
    }

    /// `min(1, z / r_i)` at position `position`, the cap on its `v`.
    fn cap(&self, position: usize, level: f64) -> f64 {
        if self.rtt[position] <= level {
            1.0
        } else {
            level * self.inverse_rtt[position]
        }
    }

    /// One greedy pass at `level`, cheapest first.
    fn pass(&self, level: f64) -> Pass {
        let mut left = self.choose;
        let mut cost = 0.0;
        let mut saturated = 0.0;
        let mut inverse_sum = 0.0;
        for position in 0..self.len {
            let cap = self.cap(position, level);
            let bandwidth = self.bandwidth[position];
            // The marginal path is the first whose cap covers what is left; the slack absorbs
            // rounding at `z_L`, where the caps sum to exactly L.
            if cap >= left - MARGINAL_SLACK {
                cost += left.min(cap) * bandwidth;
                // Σ (b_j - b_m) / r_j over the unsaturated paths before the marginal one,
                // summed term by term to avoid cancellation between large inverses.
                let slope = (0..position)
                    .filter(|&j| self.rtt[j] > level)
                    .map(|j| (self.bandwidth[j] - bandwidth) * self.inverse_rtt[j])
                    .sum();
                return Pass::Cost { cost, slope };
            }
            cost += cap * bandwidth;
            left -= cap;
            if self.rtt[position] <= level {
                saturated += 1.0;
            } else {
                inverse_sum += self.inverse_rtt[position];
            }
        }
        Pass::Short {
            saturated,
            inverse_sum,
        }
    }

    /// The greedy point at `level` as a schedule, objective `max_i v_i r_i` (with the RTTs as
    /// given), or [`LpError::Solver`] if the caps hold less than `L` or the point costs more
    /// than `accept`.
    #[inline(always)]
    fn schedule(&self, level: f64, accept: f64, rtt: &[f64]) -> Result<Schedule, LpError> {
        let mut schedule = Schedule::zeroed(self.len);
        let mut left = self.choose;
        let mut cost = 0.0;
        let mut objective = 0.0;
        for position in 0..self.len {
            let cap = self.cap(position, level);
            let take = if cap >= left - MARGINAL_SLACK {
                left.min(cap)
            } else {
                cap
            };
            let path = self.path[position];
            schedule.weights[path] = take;
            objective = larger(objective, take * rtt[path]);
            cost += take * self.bandwidth[position];
            left -= take;
            if left <= MARGINAL_SLACK && cost <= accept {
                schedule.objective = objective;
                return Ok(schedule);
            }
        }
        Err(LpError::Solver {
            lp: LP,
            reason: "the level search ended short of choose or over the budget",
        })
    }
}

/// `max(a, b)` for numbers that are never NaN (the input is validated), one instruction where
/// `f64::max` spends several on NaN.
#[inline(always)]
fn larger(a: f64, b: f64) -> f64 {
    if a > b { a } else { b }
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

    /// Solves `p` and checks that the weights sum to `choose`.
    fn solve_summing_to(p: &BandwidthProblem<'_>, choose: f64) -> Schedule {
        let s = p.solve().unwrap();
        let sum: f64 = s.weights().iter().sum();
        assert!((sum - choose).abs() < 1e-12, "{:?}", s.weights());
        s
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
        let s = solve_summing_to(&p, 3.0);
        assert!(s.objective() <= 5.2e-20);
        // Found the same way: b_2 = 1.7e8 makes the rounding in vᵀb far larger than 1e-12.
        let p = BandwidthProblem {
            bandwidth: &[0.0, 174_212_230.957_203_24],
            rtt: &[0.913_315_757_713_880_7, 0.0],
            bandwidth_limit: 0.490_130_384_024_971_67,
            choose: 1,
        };
        solve_summing_to(&p, 1.0);
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
        solve_summing_to(&p, 3.0);
    }

    /// The fallback, which the walk leaves nothing to do on the property tests' instances:
    /// Newton's method from level 0 must reach the walk's optimum on its own.
    #[test]
    fn newton_from_zero_agrees_with_the_walk() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut unit = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            // Half the draws on a 0.1 grid, for ties and zeros.
            let x = (state >> 11) as f64 / (1u64 << 53) as f64;
            if state & 1 == 0 {
                (x * 10.0).round() / 10.0
            } else {
                x
            }
        };
        let mut compared = 0;
        for case in 0..4_000 {
            let k = 3 + case % 6;
            let b: Vec<f64> = (0..k).map(|_| unit()).collect();
            let r: Vec<f64> = (0..k).map(|_| unit()).collect();
            let p = BandwidthProblem {
                bandwidth: &b,
                rtt: &r,
                bandwidth_limit: unit() * k as f64 / 2.0,
                choose: 1 + case % (k - 1),
            };
            let Ok(walk) = p.solve() else { continue };
            let levels = Levels::<8>::new(&p);
            let floor: f64 = levels.bandwidth[..p.choose].iter().sum();
            let target = p.target(floor).unwrap();
            let scale: f64 = b.iter().sum();
            let accept = target + NEWTON_SLACK * target.max(1.0) + 8.0 * f64::EPSILON * scale;
            let level = levels.search(0.0, target, accept).unwrap();
            let newton = levels.schedule(level, accept, &r).unwrap();
            assert!(
                (newton.objective() - walk.objective()).abs() < 1e-9,
                "{p:?}: Newton {newton:?}, walk {walk:?}"
            );
            compared += 1;
        }
        assert!(compared > 2_000, "{compared}");
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
