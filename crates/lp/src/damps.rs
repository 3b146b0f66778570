//! DaMPS §II-A, eq. (1) with the integrality of `s_ij` relaxed to `[0, 1]` (DaMPS Alg. 1,
//! line 2, the "Packet Scheduling Solver"):
//!
//! ```text
//! maximise   Σ_i Σ_j s_ij · 1(τ_j < d_i)            (1a) packets delivered before deadline
//! subject to Σ_i s_ij <= c_j        for every path j   (1b) remaining congestion window
//!            Σ_i Σ_j s_ij <= M                        (1c) batch size
//!            Σ_j s_ij <= 1          for every packet i (1d) one path per packet
//!            0 <= s_ij <= 1
//! ```
//!
//! `d_i` is the time left until packet `i`'s deadline and `τ_j` the one-way delay estimate of
//! path `j` (DaMPS eq. (2)), in one common time unit; `c_j` is the remaining congestion window of
//! path `j` in packets. The paper's batch is `M = 6` packets over `N = 2` paths.
//!
//! # Fast exact solver
//!
//! Packet `i` can use path `j` (`1(τ_j < d_i) = 1`) exactly when `τ_j < d_i`, so if the paths
//! are ordered from slowest to fastest, each path's eligible packets include those of every
//! slower path: the eligibility sets are nested. Row (1c) is implied by (1d). The greedy visits
//! the paths from slowest to fastest and fills each with up to `c_j` units of the eligible
//! packets' remaining mass, loosest deadline first (leaving tight packets to fast paths).
//!
//! Why this is optimal: let `j` be the slowest path and `E_j` its eligible packets. Some optimum
//! gives `j` the amount `min(c_j, |E_j|)`: if it gave less, some packet of `E_j` has mass that
//! is either unused (moving it onto `j` raises the objective, a contradiction) or sits on a
//! faster path (moving it onto `j` keeps the objective). Which packets of `E_j` fill `j` does not
//! matter, because every faster path accepts all of `E_j` too; so the rest is the same problem
//! with `j` removed and induction finishes. Ineligible cells stay 0: they add nothing to (1a)
//! and only use capacity. With integer `c_j` the greedy is integral, as the paper notes for the
//! LP optimum. Allocation-free, `O(N·M)` after two insertion sorts. The property test
//! `tests/lp_vs_good_lp.rs` checks it against good_lp on 10,000 instances.

use good_lp::constraint::leq;
use good_lp::{Expression, ProblemVariables, Solution, SolverModel, Variable, microlp, variable};

use crate::error::{LpError, LpKind, TOLERANCE, check_nonnegative, check_same_length};
use crate::schedule::sorted_indices;
use crate::{MAX_BATCH, MAX_PATHS};

const LP: LpKind = LpKind::DampsBatch;

/// One DaMPS batch: `M` packets with deadlines over `N` paths.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchProblem<'a> {
    /// `d_i`: time left until packet `i`'s deadline, finite (negative means already late).
    /// `1 <= M <= MAX_BATCH` entries.
    pub deadlines: &'a [f64],
    /// `τ_j`: one-way delay estimate of path `j`, same unit as `deadlines`, finite and `>= 0`.
    /// `1 <= N <= MAX_PATHS` entries.
    pub delays: &'a [f64],
    /// `c_j`: remaining congestion window of path `j` in packets, finite and `>= 0`.
    pub capacities: &'a [f64],
}

/// The scheduling matrix `S` (packets × paths) and the number of timely packets it delivers.
/// Cells outside the `M × N` in use are unspecified and ignored by `==`.
#[derive(Debug, Clone, Copy)]
pub struct BatchSchedule {
    share: [[f64; MAX_PATHS]; MAX_BATCH],
    packets: usize,
    paths: usize,
    delivered: f64,
}

impl PartialEq for BatchSchedule {
    fn eq(&self, other: &Self) -> bool {
        (self.packets, self.paths, self.delivered) == (other.packets, other.paths, other.delivered)
            && (0..self.packets).all(|i| self.row(i) == other.row(i))
    }
}

impl Default for BatchSchedule {
    /// An empty `0 × 0` schedule, e.g. a buffer for [`BatchProblem::solve_into`].
    fn default() -> Self {
        Self::empty(0, 0)
    }
}

impl BatchSchedule {
    fn empty(packets: usize, paths: usize) -> Self {
        Self {
            share: [[0.0; MAX_PATHS]; MAX_BATCH],
            packets,
            paths,
            delivered: 0.0,
        }
    }

    /// `s_ij`, the share of packet `i` sent on path `j` (0 outside the matrix).
    pub fn share(&self, packet: usize, path: usize) -> f64 {
        if packet < self.packets && path < self.paths {
            self.share[packet][path]
        } else {
            0.0
        }
    }

    /// Row `i` of `S`: packet `i`'s share on each path (empty outside the matrix).
    pub fn row(&self, packet: usize) -> &[f64] {
        match self.share.get(packet) {
            Some(row) if packet < self.packets => &row[..self.paths],
            _ => &[],
        }
    }

    /// The path packet `i` is wholly assigned to (`s_ij = 1` within [`TOLERANCE`]), if any;
    /// DaMPS Alg. 1 lines 6-9 transmit the packet there.
    pub fn path_of(&self, packet: usize) -> Option<usize> {
        self.row(packet).iter().position(|&s| s >= 1.0 - TOLERANCE)
    }

    /// The objective (1a): packets (or packet mass) delivered before their deadline.
    pub fn delivered(&self) -> f64 {
        self.delivered
    }

    /// `M`, the number of packets in the batch.
    pub fn packets(&self) -> usize {
        self.packets
    }

    /// `N`, the number of paths.
    pub fn paths(&self) -> usize {
        self.paths
    }
}

impl BatchProblem<'_> {
    /// Checks every input and names the first bad one.
    pub fn validate(&self) -> Result<(), LpError> {
        let m = self.deadlines.len();
        if m == 0 || m > MAX_BATCH {
            return Err(LpError::BadLength {
                lp: LP,
                input: "deadlines",
                len: m,
                max: MAX_BATCH,
            });
        }
        if let Some((index, &value)) = self
            .deadlines
            .iter()
            .enumerate()
            .find(|(_, d)| !d.is_finite())
        {
            return Err(LpError::InvalidEntry {
                lp: LP,
                input: "deadlines",
                index,
                value,
                expected: "a finite number",
            });
        }
        check_nonnegative(LP, "delays", self.delays, MAX_PATHS)?;
        check_nonnegative(LP, "capacities", self.capacities, MAX_PATHS)?;
        check_same_length(
            LP,
            "capacities",
            self.capacities.len(),
            "delays",
            self.delays.len(),
        )
    }

    /// `1(τ_j < d_i)`: whether path `j` delivers packet `i` in time.
    fn in_time(&self, packet: usize, path: usize) -> bool {
        self.delays[path] < self.deadlines[packet]
    }

    /// Solves relaxed eq. (1) exactly by the nested-eligibility greedy (module docs).
    /// Allocation-free. Never infeasible: `S = 0` is always feasible.
    pub fn solve(&self) -> Result<BatchSchedule, LpError> {
        let mut schedule = BatchSchedule::default();
        self.solve_into(&mut schedule)?;
        Ok(schedule)
    }

    /// [`BatchProblem::solve`] into a caller-owned schedule (reused across batches, so only
    /// the `M × N` cells in use are cleared). On error `out` is left unchanged.
    pub fn solve_into(&self, out: &mut BatchSchedule) -> Result<(), LpError> {
        self.validate()?;
        let (m, n) = (self.deadlines.len(), self.delays.len());
        out.packets = m;
        out.paths = n;
        out.delivered = 0.0;
        for row in &mut out.share[..m] {
            row[..n].fill(0.0);
        }
        let mut left = [1.0f64; MAX_BATCH];
        let slowest_first = sorted_indices::<MAX_PATHS>(self.delays, true);
        let loosest_first = sorted_packets(self.deadlines);
        for &path in &slowest_first[..n] {
            let mut room = self.capacities[path];
            for &packet in &loosest_first[..m] {
                if room <= 0.0 {
                    break;
                }
                if left[packet] > 0.0 && self.in_time(packet, path) {
                    let take = left[packet].min(room);
                    out.share[packet][path] = take;
                    left[packet] -= take;
                    room -= take;
                    out.delivered += take;
                }
            }
        }
        Ok(())
    }

    /// Solves relaxed eq. (1) as written (all `M·N` cells, rows (1b)-(1d)) with good_lp on the
    /// pure-Rust microlp solver. Allocates; for validation and benchmarks.
    pub fn solve_good_lp(&self) -> Result<BatchSchedule, LpError> {
        self.validate()?;
        let (m, n) = (self.deadlines.len(), self.delays.len());
        let mut vars = ProblemVariables::new();
        let s: Vec<Vec<Variable>> = (0..m)
            .map(|_| {
                (0..n)
                    .map(|_| vars.add(variable().min(0.0).max(1.0)))
                    .collect()
            })
            .collect();
        let mut objective = Expression::from(0.0);
        for (i, row) in s.iter().enumerate() {
            for (j, &cell) in row.iter().enumerate() {
                if self.in_time(i, j) {
                    objective += cell;
                }
            }
        }
        let mut model = vars.maximise(objective).using(microlp);
        for (j, &capacity) in self.capacities.iter().enumerate() {
            let column: Expression = s.iter().map(|row| row[j]).sum();
            model = model.with(leq(column, capacity));
        }
        let all: Expression = s.iter().flatten().copied().sum();
        model = model.with(leq(all, m as f64));
        for row in &s {
            let once: Expression = row.iter().copied().sum();
            model = model.with(leq(once, 1.0));
        }
        let solution = model
            .solve()
            .map_err(|e| crate::error::from_good_lp(LP, e))?;
        let mut schedule = BatchSchedule::empty(m, n);
        for (i, row) in s.iter().enumerate() {
            for (j, &cell) in row.iter().enumerate() {
                let value = solution.value(cell);
                schedule.share[i][j] = value;
                if self.in_time(i, j) {
                    schedule.delivered += value;
                }
            }
        }
        Ok(schedule)
    }
}

/// Packet indices by decreasing deadline (ties keep index order); insertion sort, no allocation.
fn sorted_packets(deadlines: &[f64]) -> [usize; MAX_BATCH] {
    let mut order = [0usize; MAX_BATCH];
    let n = deadlines.len().min(MAX_BATCH);
    for (slot, index) in order.iter_mut().zip(0..n) {
        *slot = index;
    }
    for i in 1..n {
        let current = order[i];
        let mut j = i;
        while j > 0 && deadlines[current] > deadlines[order[j - 1]] {
            order[j] = order[j - 1];
            j -= 1;
        }
        order[j] = current;
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Six packets, two paths (DaMPS §IV: M = 6; path 2 four times slower).
    const BATCH: BatchProblem<'static> = BatchProblem {
        deadlines: &[20.0, 25.0, 35.0, 45.0, 50.0, 12.0],
        delays: &[10.0, 40.0],
        capacities: &[3.0, 2.0],
    };

    #[test]
    fn tight_packets_go_to_the_fast_path_and_loose_ones_to_the_slow_path() {
        let s = BATCH.solve().unwrap();
        // Path 2 (τ = 40) serves the packets with d > 40: 3 and 4. Path 1 (τ = 10, c = 3)
        // then takes the three loosest of the rest: 2, 1, 0. Packet 5 (d = 12) is left out.
        assert_eq!(s.delivered(), 5.0);
        assert_eq!(s.path_of(4), Some(1));
        assert_eq!(s.path_of(3), Some(1));
        assert_eq!(s.path_of(2), Some(0));
        assert_eq!(s.path_of(1), Some(0));
        assert_eq!(s.path_of(0), Some(0));
        assert_eq!(s.path_of(5), None);
        assert_eq!(BATCH.solve_good_lp().unwrap().delivered(), 5.0);
    }

    #[test]
    fn late_packets_and_full_windows_deliver_nothing() {
        let p = BatchProblem {
            deadlines: &[-1.0, 5.0],
            delays: &[10.0],
            capacities: &[4.0],
        };
        assert_eq!(p.solve().unwrap().delivered(), 0.0);
        let p = BatchProblem {
            capacities: &[0.0, 0.0],
            ..BATCH
        };
        assert_eq!(p.solve().unwrap().delivered(), 0.0);
        assert!(p.solve_good_lp().unwrap().delivered().abs() < 1e-9);
    }

    #[test]
    fn fractional_windows_give_fractional_shares() {
        let p = BatchProblem {
            capacities: &[1.5, 0.25],
            ..BATCH
        };
        let s = p.solve().unwrap();
        assert!((s.delivered() - 1.75).abs() < 1e-12);
        assert!((p.solve_good_lp().unwrap().delivered() - 1.75).abs() < 1e-9);
        let rows: f64 = (0..6).map(|i| s.row(i).iter().sum::<f64>()).sum();
        assert!((rows - 1.75).abs() < 1e-12);
    }

    #[test]
    fn bad_inputs_are_named() {
        let p = BatchProblem {
            deadlines: &[1.0, f64::NAN],
            ..BATCH
        };
        assert!(matches!(
            p.solve(),
            Err(LpError::InvalidEntry {
                input: "deadlines",
                index: 1,
                ..
            })
        ));
        let p = BatchProblem {
            capacities: &[1.0],
            ..BATCH
        };
        assert!(matches!(
            p.solve(),
            Err(LpError::LengthMismatch {
                input: "capacities",
                ..
            })
        ));
        let p = BatchProblem {
            delays: &[1.0, -2.0],
            ..BATCH
        };
        assert!(matches!(
            p.solve(),
            Err(LpError::InvalidEntry {
                input: "delays",
                ..
            })
        ));
        let long = [1.0; MAX_BATCH + 1];
        let p = BatchProblem {
            deadlines: &long,
            ..BATCH
        };
        assert!(matches!(
            p.solve(),
            Err(LpError::BadLength {
                input: "deadlines",
                ..
            })
        ));
        assert_eq!(BATCH.solve().unwrap().share(99, 0), 0.0);
        assert!(BATCH.solve().unwrap().row(99).is_empty());
    }

    #[test]
    fn a_reused_buffer_is_cleared_between_batches() {
        let mut out = BatchSchedule::default();
        BATCH.solve_into(&mut out).unwrap();
        let smaller = BatchProblem {
            deadlines: &[30.0, 5.0],
            ..BATCH
        };
        smaller.solve_into(&mut out).unwrap();
        assert_eq!(out, smaller.solve().unwrap());
        assert_eq!((out.packets(), out.paths(), out.delivered()), (2, 2, 1.0));
        let bad = BatchProblem {
            capacities: &[f64::NAN, 1.0],
            ..BATCH
        };
        assert!(bad.solve_into(&mut out).is_err());
        assert_eq!(out.packets(), 2, "an error leaves the buffer as it was");
    }
}
