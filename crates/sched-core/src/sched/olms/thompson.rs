//! Beta posteriors over Bernoulli trials of one normalised path characteristic (OLMS Alg. 1,
//! lines 5-7 and 16-18, §III-B).
//!
//! A measurement `x ∈ [0, 1]` (an RTT or a bandwidth divided by its scale) is turned into a
//! Bernoulli trial that succeeds with probability `x`; the posterior after `S` successes in `N`
//! trials is `Beta(S + 1, N − S + 1)`, whose mean tends to the characteristic's mean `E[x]`. A
//! Thompson sample is one draw from it, taken as the Gamma ratio `X / (X + Y)` with
//! `X ~ Gamma(S + 1)` and `Y ~ Gamma(N − S + 1)` (Marsaglia–Tsang sampling, about half the cost
//! of rand_distr's Cheng sampler for `Beta` here). The two Gamma distributions are rebuilt only
//! when the counts change, so a decision draws without recomputing constants or allocating.

use rand::{Rng, RngExt};
use rand_distr::{Distribution, Gamma};

/// `Beta(S + 1, N − S + 1)` for one characteristic of one path.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Posterior {
    successes: u32,
    trials: u32,
    /// `Gamma(S + 1, 1)` and `Gamma(N − S + 1, 1)`. `None` only if `Gamma::new` refused the
    /// parameters, which cannot happen for counts `S <= N` (both shapes are at least 1); sampling
    /// then falls back to the uniform prior.
    distribution: Option<(Gamma<f64>, Gamma<f64>)>,
}

impl Default for Posterior {
    fn default() -> Self {
        Posterior {
            successes: 0,
            trials: 0,
            distribution: gammas(1.0, 1.0),
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

    /// One Thompson sample from the posterior.
    #[inline]
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> f64 {
        match &self.distribution {
            Some((success, failure)) => {
                let x = success.sample(rng);
                let y = failure.sample(rng);
                // x, y > 0 almost surely; the guard keeps a (measure-zero) 0/0 out.
                if x + y > 0.0 { x / (x + y) } else { 0.5 }
            }
            None => rng.random::<f64>(),
        }
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
        if let Some(pair) = gammas(a, b) {
            self.distribution = Some(pair);
        }
    }
}

/// `Gamma(a, 1)` and `Gamma(b, 1)`, whose ratio `X / (X + Y)` is `Beta(a, b)`.
fn gammas(a: f64, b: f64) -> Option<(Gamma<f64>, Gamma<f64>)> {
    Some((Gamma::new(a, 1.0).ok()?, Gamma::new(b, 1.0).ok()?))
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
