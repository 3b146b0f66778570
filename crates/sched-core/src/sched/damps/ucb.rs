//! DaMPS's fluctuation monitor for one path (DaMPS §II-C, Alg. 2, eq. 2-7): a UCB bandit over
//! strictness factors `α ∈ {0.9, 1.0, 1.1, 1.2}` that scale the path's measured one-way delay
//! into the estimate `τ = α · OWD` (eq. 2).
//!
//! - Each decision interval the bandit picks an arm: every arm once first (Alg. 2 lines 3-4),
//!   then the arm maximising `F_k / n_k + √(2 ln Σ n / n_k)` (eq. 7).
//! - When the interval ends the arm's reward is `f = max(r_DM − r_UP, 0)` (eq. 5): `r_DM` is the
//!   deadline meeting ratio over the last `L` receiver reports (eq. 3, `L = 5`), `r_UP` the
//!   fraction of the interval's packets left unsent (eq. 4).
//! - Rewards are discounted: every arm's `F_k` is multiplied by `γ` each interval and the pulled
//!   arm's gains `f` (eq. 6, `F_k(t) = γ F_k(t−1) + f_k(t)` with `f_k = 0` for arms not pulled).

/// The strictness factors of §IV-C.
pub const STRICTNESS: [f64; 4] = [0.9, 1.0, 1.1, 1.2];
/// Number of arms.
pub const ARMS: usize = STRICTNESS.len();
/// Longest report window `L` supported.
pub const MAX_WINDOW: usize = 64;

/// One path's strictness-factor bandit and its window of deadline reports.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StrictnessBandit {
    discounted: [f64; ARMS],
    pulls: [u32; ARMS],
    current: usize,
    /// Last `window` reports' (met, total), a ring.
    reports: [(u32, u32); MAX_WINDOW],
    report_head: usize,
    report_len: usize,
}

impl Default for StrictnessBandit {
    fn default() -> Self {
        StrictnessBandit {
            discounted: [0.0; ARMS],
            pulls: [0; ARMS],
            current: 1,
            reports: [(0, 0); MAX_WINDOW],
            report_head: 0,
            report_len: 0,
        }
    }
}

impl StrictnessBandit {
    /// The strictness factor in use.
    pub fn alpha(&self) -> f64 {
        STRICTNESS[self.current]
    }

    /// The arm in use (index into [`STRICTNESS`]).
    pub fn arm(&self) -> usize {
        self.current
    }

    /// `F_k`, the discounted reward of each arm.
    pub fn discounted(&self) -> [f64; ARMS] {
        self.discounted
    }

    /// `n_k`, the pulls of each arm.
    pub fn pulls(&self) -> [u32; ARMS] {
        self.pulls
    }

    /// Picks the arm for the next interval (Alg. 2 lines 3-7) and counts the pull (line 11).
    pub fn choose(&mut self) -> f64 {
        let total: u32 = self.pulls.iter().sum();
        self.current = if let Some(unexplored) = self.pulls.iter().position(|&n| n == 0) {
            unexplored
        } else {
            let ln_total = f64::from(total.max(1)).ln();
            let mut best = 0;
            let mut best_index = f64::NEG_INFINITY;
            for k in 0..ARMS {
                let n = f64::from(self.pulls[k]);
                let index = self.discounted[k] / n + (2.0 * ln_total / n).sqrt();
                if index > best_index {
                    best_index = index;
                    best = k;
                }
            }
            best
        };
        self.pulls[self.current] = self.pulls[self.current].saturating_add(1);
        self.alpha()
    }

    /// Adds one receiver report to the window of the last `window` reports (eq. 3's `L`).
    pub fn push_report(&mut self, met: u32, total: u32, window: usize) {
        let window = window.clamp(1, MAX_WINDOW);
        let slot = (self.report_head + self.report_len.min(window)) % MAX_WINDOW;
        self.reports[slot] = (met.min(total), total);
        if self.report_len < window {
            self.report_len += 1;
        } else {
            self.report_head = (self.report_head + 1) % MAX_WINDOW;
        }
    }

    /// `r_DM` (eq. 3) over the window; 1 when no deadline packet was reported (nothing missed).
    pub fn meeting_ratio(&self) -> f64 {
        let (mut met, mut total) = (0u64, 0u64);
        for j in 0..self.report_len {
            let (m, t) = self.reports[(self.report_head + j) % MAX_WINDOW];
            met += u64::from(m);
            total += u64::from(t);
        }
        if total == 0 {
            1.0
        } else {
            met as f64 / total as f64
        }
    }

    /// Ends the interval: reward `max(r_DM − unsent_ratio, 0)` (eq. 5) to the arm in use, all
    /// arms discounted by `gamma` first (eq. 6). Returns the reward.
    pub fn reward(&mut self, unsent_ratio: f64, gamma: f64) -> f64 {
        let f = (self.meeting_ratio() - unsent_ratio).max(0.0);
        for d in &mut self.discounted {
            *d *= gamma;
        }
        self.discounted[self.current] += f;
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explores_each_arm_once_then_picks_the_best_discounted_reward() {
        let mut b = StrictnessBandit::default();
        // Exploration: arms 0..4 in order; arm 2 (α = 1.1) meets every deadline, the others
        // leave half of the batch unsent.
        for (k, &alpha) in STRICTNESS.iter().enumerate() {
            assert_eq!(b.choose(), alpha);
            let unsent = if k == 2 { 0.0 } else { 0.5 };
            b.reward(unsent, 0.8);
        }
        // F = (0.5·0.8³, 0.5·0.8², 1·0.8, 0.5) and n = 1 each: arm 2 has the highest index.
        let f = b.discounted();
        assert!(
            (f[0] - 0.256).abs() < 1e-12 && (f[2] - 0.8).abs() < 1e-12,
            "{f:?}"
        );
        assert_eq!(b.choose(), 1.1);
        assert_eq!(b.pulls(), [1, 1, 2, 1]);
    }

    #[test]
    fn meeting_ratio_covers_the_last_l_reports() {
        let mut b = StrictnessBandit::default();
        assert_eq!(b.meeting_ratio(), 1.0);
        b.push_report(0, 10, 5); // falls out of the window below
        for _ in 0..5 {
            b.push_report(9, 10, 5);
        }
        assert!((b.meeting_ratio() - 0.9).abs() < 1e-12);
        b.push_report(0, 10, 5);
        assert!((b.meeting_ratio() - 36.0 / 50.0).abs() < 1e-12);
        // Reward is clamped at zero (eq. 5).
        b.choose();
        assert_eq!(b.reward(1.0, 0.8), 0.0);
    }
}
