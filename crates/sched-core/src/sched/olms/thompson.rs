//! Beta posteriors over Bernoulli trials of one normalised path characteristic (OLMS Alg. 1,
//! lines 5-7 and 16-18, §III-B).
//!
//! A measurement `x ∈ [0, 1]` (an RTT or a bandwidth divided by its scale) is turned into a
//! Bernoulli trial that succeeds with probability `x`; the posterior after `S` successes in `N`
//! trials is `Beta(S + 1, N − S + 1)`, whose mean tends to the characteristic's mean `E[x]`. A
//! Thompson sample is one exact draw from it, taken as the Gamma ratio `X / (X + Y)` with
//! `X ~ Gamma(S + 1)` and `Y ~ Gamma(N − S + 1)`. Both shapes are at least 1, so each Gamma
//! variate comes from Marsaglia and Tsang's method (ACM TOMS 26(3), 2000): a standard normal
//! (rand_distr's ziggurat) and one uniform, accepted by the cheap squeeze `u < 1 − 0.0331 x⁴`
//! (no logarithm) in the great majority of draws, by the exact log test otherwise. Its
//! constants `d = a − 1/3` and `c = 1/√(9d)` are recomputed only when the counts change, so a
//! decision draws without dispatch, recomputation or allocation. (rand_distr's `Beta`, Cheng's
//! sampler, took about 71 ns per draw here; its `Gamma` enum about 21 ns per ratio.)

use rand::{Rng, RngExt};
use rand_distr::{Distribution, Open01, StandardNormal};

/// Marsaglia–Tsang constants of `Gamma(a, 1)` for a shape `a >= 1`.
#[derive(Clone, Copy, Debug, PartialEq)]
struct GammaShape {
    /// `d = a − 1/3`.
    d: f64,
    /// `c = 1 / √(9 d)`.
    c: f64,
}

impl GammaShape {
    /// Constants for shape `a`; shapes below 1 are raised to 1 (never happens for counts).
    fn new(a: f64) -> Self {
        let d = a.max(1.0) - 1.0 / 3.0;
        GammaShape {
            d,
            c: 1.0 / (9.0 * d).sqrt(),
        }
    }

    /// One `Gamma(a, 1)` variate (Marsaglia and Tsang, 2000).
    #[inline(always)]
    fn sample<R: Rng + ?Sized>(self, rng: &mut R) -> f64 {
        loop {
            let x: f64 = StandardNormal.sample(rng);
            let t = 1.0 + self.c * x;
            if t <= 0.0 {
                continue;
            }
            let v = t * t * t;
            let u: f64 = Open01.sample(rng);
            let x2 = x * x;
            if u < 1.0 - 0.0331 * x2 * x2 || u.ln() < 0.5 * x2 + self.d * (1.0 - v + v.ln()) {
                return self.d * v;
            }
        }
    }
}

/// `Beta(S + 1, N − S + 1)` for one characteristic of one path.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Posterior {
    successes: u32,
    trials: u32,
    /// `Gamma(S + 1, 1)`, whose ratio with the sum of both is the Beta draw.
    success_shape: GammaShape,
    /// `Gamma(N − S + 1, 1)`.
    failure_shape: GammaShape,
}

impl Default for Posterior {
    fn default() -> Self {
        Posterior {
            successes: 0,
            trials: 0,
            success_shape: GammaShape::new(1.0),
            failure_shape: GammaShape::new(1.0),
        }
    }
}

impl Posterior {
    /// A posterior after `successes` of `trials` (clamped to `successes <= trials`); lets tests
    /// and warm starts begin from known statistics.
    pub fn from_counts(successes: u32, trials: u32) -> Self {
        let mut p = Posterior {
            successes: successes.min(trials),
            trials,
            ..Posterior::default()
        };
        p.rebuild();
        p
    }

    /// `S`, successful trials so far.
    pub fn successes(&self) -> u32 {
        self.successes
    }

    /// `N`, trials so far.
    pub fn trials(&self) -> u32 {
        self.trials
    }

    /// Records one trial's outcome (Alg. 1 lines 16-18).
    pub fn record(&mut self, success: bool) {
        self.trials = self.trials.saturating_add(1);
        self.successes = self.successes.saturating_add(u32::from(success));
        self.rebuild();
    }

    /// Runs the Bernoulli trial of measurement `x` (clamped to `[0, 1]`; NaN counts as 0) and
    /// records it.
    pub fn observe<R: Rng + ?Sized>(&mut self, x: f64, rng: &mut R) {
        let p = if x.is_nan() { 0.0 } else { x.clamp(0.0, 1.0) };
        let success = rng.random::<f64>() < p;
        self.record(success);
    }

    /// Forgets every trial (the monitor's statistics reinitialisation, Alg. 2 line 8).
    pub fn reset(&mut self) {
        *self = Posterior::default();
    }

    /// One Thompson sample from the posterior: an exact `Beta(S + 1, N − S + 1)` draw.
    #[inline]
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> f64 {
        let x = self.success_shape.sample(rng);
        let y = self.failure_shape.sample(rng);
        // x, y > 0 almost surely; the guard keeps a (measure-zero) 0/0 out.
        if x + y > 0.0 { x / (x + y) } else { 0.5 }
    }

    /// The posterior mean `(S + 1) / (N + 2)`.
    pub fn mean(&self) -> f64 {
        (f64::from(self.successes) + 1.0) / (f64::from(self.trials) + 2.0)
    }

    /// The posterior standard deviation `√((S + 1)(N − S + 1) / ((N + 3)(N + 2)²))` (Alg. 2
    /// line 4).
    pub fn std_dev(&self) -> f64 {
        let s = f64::from(self.successes);
        let n = f64::from(self.trials);
        ((s + 1.0) * (n - s + 1.0) / ((n + 3.0) * (n + 2.0) * (n + 2.0))).sqrt()
    }

    fn rebuild(&mut self) {
        let a = f64::from(self.successes) + 1.0;
        let b = f64::from(self.trials - self.successes.min(self.trials)) + 1.0;
        self.success_shape = GammaShape::new(a);
        self.failure_shape = GammaShape::new(b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    #[test]
    fn update_counts_successes_and_trials() {
        let mut p = Posterior::default();
        assert_eq!((p.successes(), p.trials()), (0, 0));
        assert!((p.mean() - 0.5).abs() < 1e-12);
        p.record(true);
        p.record(true);
        p.record(false);
        // Beta(3, 2): mean 3/5, variance 3·2 / (5²·6) = 0.04.
        assert_eq!((p.successes(), p.trials()), (2, 3));
        assert!((p.mean() - 0.6).abs() < 1e-12);
        assert!((p.std_dev() - 0.2).abs() < 1e-12);
        p.reset();
        assert_eq!((p.successes(), p.trials()), (0, 0));
    }

    #[test]
    fn samples_have_the_beta_mean_and_variance() {
        // Beta(3, 2): mean 0.6, variance 0.04. 200,000 draws: the standard error of the mean is
        // 0.00045 and of the variance about 0.0001.
        let p = Posterior::from_counts(2, 3);
        let mut rng = SmallRng::seed_from_u64(5);
        let n = 200_000;
        let draws: Vec<f64> = (0..n).map(|_| p.sample(&mut rng)).collect();
        assert!(draws.iter().all(|x| (0.0..=1.0).contains(x)));
        let mean = draws.iter().sum::<f64>() / f64::from(n);
        let var = draws.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / f64::from(n);
        assert!((mean - 0.6).abs() < 0.003, "{mean}");
        assert!((var - 0.04).abs() < 0.001, "{var}");
    }

    #[test]
    fn samples_match_beta_moments_and_cdf_across_shapes() {
        // From the uniform prior (both shapes 1, the Marsaglia–Tsang edge) to a long run of
        // trials. For each: the mean and variance within about 5 standard errors of 100,000
        // draws, and the empirical CDF at the mean against the exact Beta CDF (regularised
        // incomplete beta, integer shapes: a binomial tail) within 0.006 (Kolmogorov's
        // 1.36/√n at 5% is 0.0043 for the sup over all points; one point is tighter).
        let mut rng = SmallRng::seed_from_u64(11);
        for (s, n) in [
            (0u32, 0u32),
            (0, 9),
            (9, 9),
            (1, 40),
            (300, 1_000),
            (4_000, 5_000),
        ] {
            let p = Posterior::from_counts(s, n);
            let (a, b) = (f64::from(s) + 1.0, f64::from(n - s) + 1.0);
            let mean = a / (a + b);
            let var = a * b / ((a + b) * (a + b) * (a + b + 1.0));
            let draws = 100_000u32;
            let xs: Vec<f64> = (0..draws).map(|_| p.sample(&mut rng)).collect();
            assert!(xs.iter().all(|x| (0.0..=1.0).contains(x)));
            let m = xs.iter().sum::<f64>() / f64::from(draws);
            let v = xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / f64::from(draws);
            let se_mean = (var / f64::from(draws)).sqrt();
            assert!(
                (m - mean).abs() < 5.0 * se_mean,
                "({s}, {n}): mean {m} vs {mean}"
            );
            // The variance of the sample variance is below 2 var² / n · (1 + kurtosis slack).
            assert!(
                (v - var).abs() < 5.0 * var * (3.0 / f64::from(draws)).sqrt(),
                "({s}, {n}): var {v} vs {var}"
            );
            // P(X <= x) for Beta(a, b) with integer shapes = P(Binomial(a + b − 1, x) >= a).
            let trials = (a + b - 1.0) as u32;
            // Terms in logs: (1 − x)^5000 underflows.
            let mut cdf = 0.0;
            let mut log_term = f64::from(trials) * (1.0 - mean).ln(); // k = 0
            let odds = (mean / (1.0 - mean)).ln();
            for k in 0..=trials {
                if f64::from(k) >= a {
                    cdf += log_term.exp();
                }
                if k < trials {
                    log_term += (f64::from(trials - k) / f64::from(k + 1)).ln() + odds;
                }
            }
            let below = xs.iter().filter(|&&x| x <= mean).count() as f64 / f64::from(draws);
            assert!(
                (below - cdf).abs() < 0.006,
                "({s}, {n}): F(mean) {below} vs {cdf}"
            );
        }
    }

    #[test]
    fn bernoulli_trials_of_a_constant_concentrate_on_it() {
        let mut rng = SmallRng::seed_from_u64(3);
        let mut p = Posterior::default();
        for _ in 0..20_000 {
            p.observe(0.3, &mut rng);
        }
        assert!((p.mean() - 0.3).abs() < 0.015, "{}", p.mean());
        let draws = 2_000;
        let avg: f64 = (0..draws).map(|_| p.sample(&mut rng)).sum::<f64>() / f64::from(draws);
        assert!((avg - 0.3).abs() < 0.015, "{avg}");
        // Out-of-range and NaN measurements are clamped, never a panic.
        let mut q = Posterior::default();
        q.observe(7.0, &mut rng);
        q.observe(f64::NAN, &mut rng);
        q.observe(-1.0, &mut rng);
        assert_eq!((q.successes(), q.trials()), (1, 3));
    }
}
