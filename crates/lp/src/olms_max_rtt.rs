//! OLMS §IV-A, eq. (4) (and eq. (5) on true means): the maxRTT-constrained LP
//!
//! ```text
//! maximise   vᵀb
//! subject to Σ v_i = L,   0 <= v_i <= 1,   r_i · v_i <= C_r  for every path i
//! ```
//!
//! `b` and `r` are the (sampled or true) bandwidths and RTTs normalised to `[0, 1]` (OLMS §III-A,
//! min-max scaling; Application I divides by 100 Mbit/s and 100 ms), `C_r` is the RTT threshold
//! in the same unit as `r`, and `L` is how many paths the scheduling vector spreads over. The
//! constraint is element-wise (`r̂ ∘ v ⪯ C_r 1`), not an average over the chosen paths; only the
//! element-wise reading reproduces the paper's Application I numbers.
//!
//! The objective is the total `Σ v_i b_i` over the `L` picks, not divided by `L`: Application I
//! gives `v* = (1/6, 0, 1, 5/6)` and `OPT_max = 1/6·0.3 + 1·0.6 + 5/6·0.4 = 0.98333…`.
//!
//! # Fast exact solver
//!
//! Each row `r_i v_i <= C_r` only tightens the upper bound of `v_i`, so the feasible set is the
//! box `0 <= v_i <= u_i`, `u_i = min(1, C_r / r_i)` (`u_i = 1` when `r_i <= C_r`), intersected
//! with the hyperplane `Σ v_i = L`. It is non-empty exactly when `Σ u_i >= L`. Maximising a
//! linear function over a box cut by `Σ v_i = L` is a fractional knapsack with unit weights:
//! visit the paths by decreasing `b_i` and give each `min(u_i, what is left of L)`.
//!
//! Why this is optimal: take any feasible `v` and two paths with `b_i > b_j`, `v_i < u_i` and
//! `v_j > 0`. Moving `ε = min(u_i - v_i, v_j)` from `j` to `i` keeps `Σ v = L` and the box, and
//! changes the objective by `ε (b_i - b_j) > 0`. So at an optimum no better path is below its cap
//! while a worse one is used, which is exactly the greedy vector (ties in `b` give the same
//! objective). `tests/lp_vs_good_lp.rs` checks it against good_lp on 10,000 random instances of
//! 2 to 16 paths and 10,000 more for each path count from 2 to 8.

use good_lp::constraint::leq;
use good_lp::{ProblemVariables, SolverModel, microlp};

use crate::error::{LpError, LpKind, TOLERANCE, check_olms, olms_input_ok};
use crate::schedule::{Schedule, smaller, sort_indices_into};
use crate::{MAX_PATHS, chi_model};

const LP: LpKind = LpKind::OlmsMaxRtt;

/// One instance of OLMS eq. (4). All slices have one entry per path, `1 <= K <= MAX_PATHS`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MaxRttProblem<'a> {
    /// `b_i`: bandwidth of path `i`, normalised, finite and `>= 0`. The objective weights.
    pub bandwidth: &'a [f64],
    /// `r_i`: RTT of path `i`, in the unit of `rtt_limit`, finite and `>= 0`.
    pub rtt: &'a [f64],
    /// `C_r`: the RTT threshold, finite and `>= 0`.
    pub rtt_limit: f64,
    /// `L`: the number of paths the schedule spreads over, `1 <= L <= K`.
    pub choose: usize,
}

impl MaxRttProblem<'_> {
    /// Checks every input and names the first bad one.
    pub fn validate(&self) -> Result<(), LpError> {
        check_olms(
            LP,
            self.bandwidth,
            self.rtt,
            ("rtt_limit", self.rtt_limit),
            self.choose,
        )
    }

    /// `u_i = min(1, C_r / r_i)`: the upper bound on `v_i` implied by `r_i v_i <= C_r`.
    /// Without a branch: `C_r / r_i` is `>= 1` exactly when `r_i <= C_r`, and it is infinite
    /// for `r_i = 0` and NaN for `r_i = C_r = 0`; neither is below 1, so the cap is 1.
    #[inline(always)]
    fn cap(&self, path: usize) -> f64 {
        let ratio = self.rtt_limit / self.rtt[path];
        if ratio < 1.0 { ratio } else { 1.0 }
    }

    /// Solves eq. (4) exactly by the greedy fractional knapsack (see the module docs).
    /// Allocation-free; `O(K²)` with `K <= MAX_PATHS`.
    ///
    /// Returns [`LpError::Infeasible`] when `Σ_i min(1, C_r / r_i) < L`, i.e. no `L`-spread
    /// of the paths keeps every `r_i v_i <= C_r`.
    pub fn solve(&self) -> Result<Schedule, LpError> {
        if !olms_input_ok(self.bandwidth, self.rtt, self.rtt_limit, self.choose) {
            self.validate()?;
        }
        match self.bandwidth.len() {
            2 => self.solve_pair(),
            0..=4 => self.solve_in::<4>(),
            5..=8 => self.solve_in::<8>(),
            _ => self.solve_in::<MAX_PATHS>(),
        }
    }

    /// The greedy on an order of `N >= K` entries (4, 8 or [`MAX_PATHS`], the smallest that
    /// holds `K`, so that small instances sort few lanes).
    #[inline(always)]
    fn solve_in<const N: usize>(&self) -> Result<Schedule, LpError> {
        let k = self.bandwidth.len();
        let mut order = [0usize; N];
        sort_indices_into(self.bandwidth, true, &mut order);
        let mut schedule = Schedule::zeroed(k);
        let mut left = self.choose as f64;
        let mut objective = 0.0;
        // No early exit: once `L` is spent, `left` is exactly 0 (`left - min(cap, left)` never
        // rounds below 0) and every later path takes 0.
        for &path in &order[..k] {
            let take = smaller(self.cap(path), left);
            schedule.weights[path] = take;
            objective += take * self.bandwidth[path];
            left -= take;
        }
        self.finish(schedule, left, objective)
    }

    /// Two paths: the greedy unrolled (the better path first, index 0 on a tie), which gives
    /// the same numbers as [`Self::solve_in`].
    #[inline(always)]
    fn solve_pair(&self) -> Result<Schedule, LpError> {
        let first = usize::from(self.bandwidth[1] > self.bandwidth[0]);
        let second = 1 - first;
        let choose = self.choose as f64;
        let take_first = smaller(self.cap(first), choose);
        let take_second = smaller(self.cap(second), choose - take_first);
        let mut schedule = Schedule::zeroed(2);
        schedule.weights[first] = take_first;
        schedule.weights[second] = take_second;
        let objective = take_first * self.bandwidth[first] + take_second * self.bandwidth[second];
        self.finish(schedule, choose - take_first - take_second, objective)
    }

    /// The schedule with its objective, or [`LpError::Infeasible`] when the caps left more
    /// than [`TOLERANCE`]`·L` of `L` unplaced.
    #[inline(always)]
    fn finish(
        &self,
        mut schedule: Schedule,
        left: f64,
        objective: f64,
    ) -> Result<Schedule, LpError> {
        if left > TOLERANCE * self.choose as f64 {
            return Err(LpError::Infeasible {
                lp: LP,
                reason: "sum of min(1, rtt_limit / rtt) over the paths is below choose",
            });
        }
        schedule.objective = objective;
        Ok(schedule)
    }

    /// Solves eq. (4) as written, with good_lp on the pure-Rust microlp solver. Allocates; for
    /// validation and benchmarks, not the hot path.
    pub fn solve_good_lp(&self) -> Result<Schedule, LpError> {
        self.validate()?;
        let k = self.bandwidth.len();
        let mut vars = ProblemVariables::new();
        let v = chi_model::variables(&mut vars, k);
        let objective = chi_model::weighted(&v, self.bandwidth);
        let mut model = vars.maximise(objective).using(microlp);
        model = model.with(chi_model::sum_is(&v, self.choose));
        for (&x, &r) in v.iter().zip(self.rtt) {
            model = model.with(leq(r * x, self.rtt_limit));
        }
        let solution = model
            .solve()
            .map_err(|e| crate::error::from_good_lp(LP, e))?;
        let weights = chi_model::weights(&v, &solution);
        let objective = weights.iter().zip(self.bandwidth).map(|(w, b)| w * b).sum();
        Ok(Schedule::new(weights, k, objective))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// OLMS §VI-B, Application I on the true means.
    const APP1: MaxRttProblem<'static> = MaxRttProblem {
        bandwidth: &[0.3, 0.2, 0.6, 0.4],
        rtt: &[0.2, 0.3, 0.5, 0.6],
        rtt_limit: 0.5,
        choose: 2,
    };

    fn assert_app1(schedule: &Schedule, tol: f64) {
        let expected = [1.0 / 6.0, 0.0, 1.0, 5.0 / 6.0];
        for (got, want) in schedule.weights().iter().zip(expected) {
            assert!(
                (got - want).abs() < tol,
                "{:?} != {expected:?}",
                schedule.weights()
            );
        }
        let opt = 0.3 / 6.0 + 0.6 + 0.4 * 5.0 / 6.0;
        assert!(
            (schedule.objective() - opt).abs() < tol,
            "{}",
            schedule.objective()
        );
        assert!((schedule.objective() - 0.983_333_333_333).abs() < 1e-9);
    }

    #[test]
    fn application_one_fast_matches_the_paper() {
        assert_app1(&APP1.solve().unwrap(), 1e-12);
    }

    #[test]
    fn application_one_good_lp_matches_the_paper() {
        assert_app1(&APP1.solve_good_lp().unwrap(), 1e-9);
    }

    #[test]
    fn infeasible_is_a_value_in_both_solvers() {
        let p = MaxRttProblem {
            rtt_limit: 0.1,
            ..APP1
        };
        assert!(matches!(p.solve(), Err(LpError::Infeasible { .. })));
        assert!(matches!(p.solve_good_lp(), Err(LpError::Infeasible { .. })));
    }

    #[test]
    fn bad_inputs_are_named() {
        let p = MaxRttProblem {
            rtt: &[0.2, f64::NAN, 0.5, 0.6],
            ..APP1
        };
        assert!(matches!(
            p.solve(),
            Err(LpError::InvalidEntry {
                input: "rtt",
                index: 1,
                ..
            })
        ));
        let p = MaxRttProblem {
            bandwidth: &[0.3, -0.2, 0.6, 0.4],
            ..APP1
        };
        assert!(matches!(
            p.solve(),
            Err(LpError::InvalidEntry {
                input: "bandwidth",
                index: 1,
                ..
            })
        ));
        let p = MaxRttProblem { choose: 5, ..APP1 };
        assert!(matches!(
            p.solve(),
            Err(LpError::InvalidChoose {
                choose: 5,
                paths: 4,
                ..
            })
        ));
        let p = MaxRttProblem { choose: 0, ..APP1 };
        assert!(matches!(
            p.solve_good_lp(),
            Err(LpError::InvalidChoose { choose: 0, .. })
        ));
        let p = MaxRttProblem {
            rtt: &[0.2, 0.3],
            ..APP1
        };
        assert!(matches!(
            p.solve(),
            Err(LpError::LengthMismatch { input: "rtt", .. })
        ));
        let p = MaxRttProblem {
            rtt_limit: f64::INFINITY,
            ..APP1
        };
        assert!(matches!(
            p.solve(),
            Err(LpError::InvalidScalar {
                input: "rtt_limit",
                ..
            })
        ));
        let p = MaxRttProblem {
            bandwidth: &[],
            rtt: &[],
            ..APP1
        };
        assert!(matches!(p.solve(), Err(LpError::BadLength { len: 0, .. })));
        let long = [0.5; MAX_PATHS + 1];
        let p = MaxRttProblem {
            bandwidth: &long,
            rtt: &long,
            ..APP1
        };
        assert!(matches!(
            p.solve(),
            Err(LpError::BadLength {
                input: "bandwidth",
                ..
            })
        ));
    }

    #[test]
    fn choosing_every_path_takes_all_of_them() {
        let p = MaxRttProblem {
            choose: 4,
            rtt_limit: 1.0,
            ..APP1
        };
        assert_eq!(p.solve().unwrap().weights(), &[1.0; 4]);
    }
}
