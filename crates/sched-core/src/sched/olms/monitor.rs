//! The path characteristic measurements monitor (OLMS Alg. 2, §III-C, §V): detects a shift in a
//! path's RTT or bandwidth distribution and tells the caller to reinitialise its statistics.
//!
//! For each measurement `x` of a path whose posterior has at least `q` trials, the monitor
//! compares `x` with the posterior mean `μ` and standard deviation `σ` (Alg. 2 line 4); a
//! deviation `|x − μ| > δσ` increments the path's counter, and when the counter exceeds `h` the
//! statistics are reinitialised and the counter reset (lines 6-9). Two readings of the paper:
//!
//! - Alg. 2 line 4 prints `μ = (S + 1) / N`; we use the mean of the posterior whose `σ` the same
//!   line gives, `(S + 1) / (N + 2)` (the two differ by `2/N`, a printing slip as we read it).
//! - §V says statistics are reinitialised "only if these deviations persist for h consecutive
//!   monitoring intervals", so a measurement within `δσ` resets the counter (Alg. 2 alone never
//!   resets it, which would let isolated outliers add up over hours).

use super::thompson::Posterior;

/// Parameters of Alg. 2 (paper's §VI-D3 values as defaults: `q = 20`, `δ = 3`, `h = 3`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Monitor {
    /// Trials needed before the monitor judges measurements.
    pub q: u32,
    /// Deviation threshold in posterior standard deviations.
    pub delta: f64,
    /// Deviations tolerated before reinitialising (reinitialise when the counter exceeds it).
    pub h: u32,
}

impl Default for Monitor {
    fn default() -> Self {
        Monitor {
            q: 20,
            delta: 3.0,
            h: 3,
        }
    }
}

impl Monitor {
    /// Judges measurement `x` against `posterior`, updating the path's deviation `counter`.
    /// Returns true when the statistics must be reinitialised (the counter is then reset).
    pub fn check(&self, posterior: &Posterior, counter: &mut u32, x: f64) -> bool {
        if posterior.trials() < self.q {
            return false;
        }
        if (x - posterior.mean()).abs() > self.delta * posterior.std_dev() {
            *counter += 1;
            if *counter > self.h {
                *counter = 0;
                return true;
            }
        } else {
            *counter = 0;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    /// A posterior fed `n` Bernoulli trials of measurements around `level`.
    fn trained(level: f64, n: u32, rng: &mut SmallRng) -> Posterior {
        let mut p = Posterior::default();
        for _ in 0..n {
            p.observe(level, rng);
        }
        p
    }

    #[test]
    fn quiet_until_q_trials() {
        let m = Monitor::default();
        let mut rng = SmallRng::seed_from_u64(1);
        let p = trained(0.2, 19, &mut rng);
        let mut c = 0;
        for _ in 0..10 {
            assert!(!m.check(&p, &mut c, 1.0));
        }
        assert_eq!(c, 0);
    }

    #[test]
    fn triggers_on_a_step_change_after_h_plus_one_deviations() {
        let m = Monitor::default();
        let mut rng = SmallRng::seed_from_u64(2);
        let p = trained(0.2, 200, &mut rng);
        // σ of Beta(~41, ~161) is about 0.028, so a step to 0.6 is > 10σ away.
        let mut c = 0;
        assert!(!m.check(&p, &mut c, 0.6));
        assert!(!m.check(&p, &mut c, 0.6));
        assert!(!m.check(&p, &mut c, 0.6));
        assert_eq!(c, 3);
        assert!(
            m.check(&p, &mut c, 0.6),
            "fourth consecutive deviation reinitialises"
        );
        assert_eq!(c, 0);
    }

    #[test]
    fn noise_within_delta_sigma_never_triggers() {
        let m = Monitor::default();
        let mut rng = SmallRng::seed_from_u64(3);
        let mut p = trained(0.5, 100, &mut rng);
        let mut c = 0;
        // Measurements jitter by ±0.04 around the mean; 3σ ≈ 0.15 at N = 100 and stays above
        // 0.04 until N ≈ 1,400.
        for i in 0..1_000u32 {
            let x = 0.5 + if i % 2 == 0 { 0.04 } else { -0.04 };
            assert!(!m.check(&p, &mut c, x), "noise triggered at {i}");
            p.observe(x, &mut rng);
        }
        // An isolated outlier between normal readings resets the counter.
        assert!(!m.check(&p, &mut c, 1.0));
        assert_eq!(c, 1);
        assert!(!m.check(&p, &mut c, 0.5));
        assert_eq!(c, 0);
    }
}
