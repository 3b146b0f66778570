//! Bayesian online change-point detection (Adams & MacKay 2007, "Bayesian Online Changepoint
//! Detection", arXiv:0710.3742), as FALCON §IV-A uses it to notice that a path's network
//! condition changed: one detector on the path's RTT samples, one on its loss counts grouped
//! over packets (a binomial count, FALCON's way of making the Bernoulli loss signal roughly
//! continuous).
//!
//! The detector keeps the posterior over the *run length* (samples since the last change),
//! `P(r_t | x_1..t)`, with a constant hazard `H = 1 / expected_run`, and a conjugate
//! Normal-Gamma model per run length whose predictive is a Student-t (Adams & MacKay §2.3,
//! Alg. 1). Run lengths are truncated at [`MAX_RUN`]: the mass of longer runs is folded into the
//! last bucket (the usual fixed-memory approximation), so every array is fixed-size and nothing
//! is allocated after construction.
//!
//! Samples may be averaged in groups ([`ChangeDetectorConfig::group`]) before they reach the
//! model: on per-ACK RTTs, whose queueing noise is strongly autocorrelated and far from
//! Gaussian, that is what keeps the detector to about one alarm per true change.
//!
//! A change is *declared* when the most probable (MAP) run length collapses (falls by at least
//! `min_drop` from a run of at least `confirm + min_drop`) and the new run then stays the most
//! probable for `confirm` samples; if the old long run takes the lead again first (a single
//! outlier), nothing is declared. The bare `P(r_t = 0)` cannot be used (under a constant hazard
//! it always equals `H`); the confirmation trades `confirm` samples of delay for robustness.

/// Longest run length tracked; longer runs share the last bucket.
pub const MAX_RUN: usize = 48;
const SLOTS: usize = MAX_RUN + 1;

/// Parameters of a [`ChangeDetector`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ChangeDetectorConfig {
    /// Expected samples between changes (`1 / hazard`), > 1.
    pub expected_run: f64,
    /// Prior pseudo-observations for the mean (κ₀ > 0).
    pub kappa: f64,
    /// Prior shape of the precision (α₀ > 0).
    pub alpha: f64,
    /// Prior standard deviation relative to the first sample's magnitude (sets β₀).
    pub relative_scale: f64,
    /// Smallest prior standard deviation, in the signal's unit (sets β₀ for signals near 0).
    pub min_scale: f64,
    /// Samples the new run must stay the most probable before a change is declared.
    pub confirm: usize,
    /// How far the MAP run length must fall for a candidate change.
    pub min_drop: usize,
    /// Samples averaged into one observation of the model (1: every sample is one). Averaging
    /// makes queueing noise closer to the model's Gaussian and sets the time scale the hazard
    /// is counted in.
    pub group: u32,
    /// Smallest predictive standard deviation of any run, in the signal's unit (0: none).
    pub scale_floor: f64,
    /// Smallest predictive standard deviation of any run relative to its mean (0: none).
    pub relative_floor: f64,
    /// Window of the propagation-delay filter in µs (0: off). When set, each observation is
    /// the minimum of the samples of the last `min_window_us` (fed through
    /// [`ChangeDetector::observe_at`]), taken at the end of each group of `group` samples,
    /// instead of the group's mean: queueing only ever adds delay, so the windowed minimum
    /// follows the path's propagation delay and ignores queues that fill and drain within the
    /// window.
    pub min_window_us: u64,
}

impl Default for ChangeDetectorConfig {
    fn default() -> Self {
        ChangeDetectorConfig {
            expected_run: 1000.0,
            kappa: 1.0,
            alpha: 1.0,
            relative_scale: 0.1,
            min_scale: 1.0,
            confirm: 3,
            min_drop: 4,
            group: 1,
            scale_floor: 0.0,
            relative_floor: 0.0,
            min_window_us: 0,
        }
    }
}

impl ChangeDetectorConfig {
    /// Per-ACK RTT samples in ms (FALCON's RTT monitor): prior spread 10 % of the first
    /// sample, at least 1 ms, and groups of [`RTT_GROUP`] samples averaged into one
    /// observation. Per ACK, the hazard of the default `expected_run` meant a change every
    /// 1,000 ACKs (0.4 s at 30 Mbit/s), and queueing makes consecutive samples far from
    /// independent; both made the detector fire several times per true change (see
    /// `changepoint_real.rs` for the measured series).
    pub fn per_ack_rtt() -> Self {
        ChangeDetectorConfig {
            relative_scale: 0.1,
            min_scale: 1.0,
            group: RTT_GROUP,
            ..ChangeDetectorConfig::default()
        }
    }
}

impl ChangeDetectorConfig {
    /// Lost packets per group of sent packets (FALCON's loss monitor): prior spread half the
    /// first count, at least one packet, and no run's predictive spread below one packet. Without
    /// that floor a long run of loss-free groups shrinks the model's variance towards zero, and
    /// the next drop-tail loss event (a few packets in one group, a path's ordinary congestion
    /// epoch) underflows every long run's probability: one alarm per loss event.
    pub fn loss_counts() -> Self {
        ChangeDetectorConfig {
            relative_scale: 0.5,
            min_scale: 1.0,
            scale_floor: 1.0,
            ..ChangeDetectorConfig::default()
        }
    }
}

impl ChangeDetectorConfig {
    /// A path's propagation delay in ms, fed per ACK through
    /// [`ChangeDetector::observe_at`]: each group of [`RTT_GROUP`] samples gives one
    /// observation, the minimum RTT over the last `window_us`. Queueing only adds delay, so a
    /// queue that fills and drains within the window leaves the minimum where the propagation
    /// delay puts it; a fall of the propagation delay shows at once, a rise once the window has
    /// passed. The minimum is nearly constant between changes, so no run's predictive spread
    /// goes below 1 ms or 10 % of its mean (without that floor, a minimum that creeps by a
    /// fraction of a ms would be a change).
    pub fn propagation_delay(window_us: u64) -> Self {
        ChangeDetectorConfig {
            min_window_us: window_us,
            scale_floor: 1.0,
            relative_floor: 0.1,
            ..ChangeDetectorConfig::per_ack_rtt()
        }
    }
}

/// RTT samples averaged into one observation by [`ChangeDetectorConfig::per_ack_rtt`].
pub const RTT_GROUP: u32 = 16;

/// Sufficient statistics of the Normal-Gamma posterior of one run length.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Posterior {
    mean: f64,
    kappa: f64,
    alpha: f64,
    beta: f64,
}

impl Posterior {
    /// Log of the Student-t predictive density of `x` (Murphy 2007, eq. 100), with
    /// `lgamma_ratio = ln Γ(α + ½) − ln Γ(α)`.
    /// `floor` and `relative` bound the scale from below ([`ChangeDetectorConfig::scale_floor`],
    /// [`ChangeDetectorConfig::relative_floor`]).
    fn log_predictive(&self, x: f64, lgamma_ratio: f64, floor: f64, relative: f64) -> f64 {
        let dof = 2.0 * self.alpha;
        let least = floor.max(relative * self.mean.abs());
        let scale2 =
            (self.beta * (self.kappa + 1.0) / (self.alpha * self.kappa)).max(least * least);
        let z = (x - self.mean) * (x - self.mean) / (dof * scale2);
        lgamma_ratio
            - 0.5 * (dof * std::f64::consts::PI * scale2).ln()
            - (self.alpha + 0.5) * z.ln_1p()
    }

    /// The posterior after observing `x`.
    fn updated(&self, x: f64) -> Posterior {
        let kappa = self.kappa + 1.0;
        Posterior {
            mean: (self.kappa * self.mean + x) / kappa,
            kappa,
            alpha: self.alpha + 0.5,
            beta: self.beta + self.kappa * (x - self.mean) * (x - self.mean) / (2.0 * kappa),
        }
    }
}

/// One BOCPD detector over a scalar signal; fixed memory, no allocation per sample.
#[derive(Clone, Debug)]
pub struct ChangeDetector {
    config: ChangeDetectorConfig,
    hazard: f64,
    /// `P(r_t = r)`, normalised.
    run: [f64; SLOTS],
    posterior: [Posterior; SLOTS],
    next_run: [f64; SLOTS],
    next_posterior: [Posterior; SLOTS],
    /// `ln Γ(α₀ + (r+1)/2) − ln Γ(α₀ + r/2)` for each run length.
    lgamma_ratio: [f64; SLOTS],
    prior: Posterior,
    samples: u64,
    map_run: usize,
    /// A collapse of the MAP run length waits for confirmation.
    pending: bool,
    changes: u64,
    /// Sum and count of the samples of the group being averaged.
    group_sum: f64,
    group_len: u32,
    /// The propagation-delay filter (used when `min_window_us` > 0).
    floor: WindowedMin,
}

impl ChangeDetector {
    /// A detector with `config`; invalid numbers are replaced by the defaults (see
    /// [`ChangeDetectorConfig::default`]) so that the detector is always well defined.
    pub fn new(config: ChangeDetectorConfig) -> Self {
        let d = ChangeDetectorConfig::default();
        let non_negative = |v: f64| if v.is_finite() && v > 0.0 { v } else { 0.0 };
        let positive = |v: f64, fallback: f64| {
            if v.is_finite() && v > 0.0 {
                v
            } else {
                fallback
            }
        };
        let config = ChangeDetectorConfig {
            expected_run: if config.expected_run.is_finite() && config.expected_run > 1.0 {
                config.expected_run
            } else {
                d.expected_run
            },
            kappa: positive(config.kappa, d.kappa),
            alpha: positive(config.alpha, d.alpha),
            relative_scale: positive(config.relative_scale, d.relative_scale),
            min_scale: positive(config.min_scale, d.min_scale),
            confirm: config.confirm.min(MAX_RUN / 2),
            min_drop: config.min_drop.clamp(1, MAX_RUN / 2),
            group: config.group.max(1),
            scale_floor: non_negative(config.scale_floor),
            relative_floor: non_negative(config.relative_floor),
            min_window_us: config.min_window_us,
        };
        let mut lgamma_ratio = [0.0; SLOTS];
        for (r, ratio) in lgamma_ratio.iter_mut().enumerate() {
            let a = config.alpha + r as f64 / 2.0;
            *ratio = ln_gamma(a + 0.5) - ln_gamma(a);
        }
        let mut detector = ChangeDetector {
            config,
            hazard: 1.0 / config.expected_run,
            run: [0.0; SLOTS],
            posterior: [Posterior::default(); SLOTS],
            next_run: [0.0; SLOTS],
            next_posterior: [Posterior::default(); SLOTS],
            lgamma_ratio,
            prior: Posterior::default(),
            samples: 0,
            map_run: 0,
            pending: false,
            changes: 0,
            group_sum: 0.0,
            group_len: 0,
            floor: WindowedMin::new(config.min_window_us),
        };
        detector.reset();
        detector
    }

    /// Forgets everything; the next sample sets the prior again.
    pub fn reset(&mut self) {
        self.run = [0.0; SLOTS];
        self.run[0] = 1.0;
        self.samples = 0;
        self.map_run = 0;
        self.pending = false;
        self.group_sum = 0.0;
        self.group_len = 0;
        self.floor = WindowedMin::new(self.config.min_window_us);
    }

    /// Observations (group means) made since construction or the last [`reset`](Self::reset).
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Changes declared so far.
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// The most probable run length after the last sample.
    pub fn map_run_length(&self) -> usize {
        self.map_run
    }

    /// `P(r_t = r)` after the last sample.
    pub fn run_probability(&self, r: usize) -> f64 {
        self.run.get(r).copied().unwrap_or(0.0)
    }

    /// Feeds one sample; true when it completes the detection of a change (only the last
    /// sample of a group can). Non-finite samples are ignored.
    pub fn observe(&mut self, x: f64) -> bool {
        if !x.is_finite() {
            return false;
        }
        if self.config.group > 1 {
            self.group_sum += x;
            self.group_len += 1;
            if self.group_len < self.config.group {
                return false;
            }
            let mean = self.group_sum / f64::from(self.group_len);
            self.group_sum = 0.0;
            self.group_len = 0;
            return self.update(mean);
        }
        self.update(x)
    }

    /// Feeds one sample taken at `now_us` (µs, non-decreasing). With a propagation-delay window
    /// ([`ChangeDetectorConfig::min_window_us`] > 0) the sample enters the windowed minimum, and
    /// the last sample of each group feeds that minimum to the model; without one this is
    /// [`observe`](Self::observe). True when it completes the detection of a change.
    pub fn observe_at(&mut self, x: f64, now_us: u64) -> bool {
        if self.config.min_window_us == 0 {
            return self.observe(x);
        }
        if !x.is_finite() {
            return false;
        }
        let floor = self.floor.update(x, now_us);
        self.group_len += 1;
        if self.group_len < self.config.group {
            return false;
        }
        self.group_len = 0;
        self.update(floor)
    }

    /// One step of the run-length recursion on observation `x`.
    fn update(&mut self, x: f64) -> bool {
        if self.samples == 0 {
            let scale = (self.config.relative_scale * x.abs()).max(self.config.min_scale);
            self.prior = Posterior {
                mean: x,
                kappa: self.config.kappa,
                alpha: self.config.alpha,
                beta: self.config.alpha * scale * scale,
            };
            self.posterior[0] = self.prior;
        }
        self.samples += 1;
        let h = self.hazard;
        let (floor, relative) = (self.config.scale_floor, self.config.relative_floor);
        // Growth and change probabilities (Alg. 1 steps 3-5), then fold run MAX_RUN's growth
        // into the last bucket.
        let mut change = 0.0;
        self.next_run = [0.0; SLOTS];
        for r in 0..SLOTS {
            let p = self.run[r];
            if p <= 0.0 {
                continue;
            }
            let likelihood = self.posterior[r]
                .log_predictive(x, self.lgamma_ratio[r], floor, relative)
                .exp();
            let mass = p * likelihood;
            change += mass * h;
            self.next_run[(r + 1).min(MAX_RUN)] += mass * (1.0 - h);
        }
        self.next_run[0] = change;
        let total: f64 = self.next_run.iter().sum();
        if !(total.is_finite() && total > 0.0) {
            // Every run length found x impossible (far outside any posterior): that is a change.
            self.restart_at(x);
            return self.declare(0);
        }
        for p in &mut self.next_run {
            *p /= total;
        }
        // Posterior updates (Alg. 1 step 8): run r+1 extends run r; run 0 restarts from the prior.
        self.next_posterior[0] = self.prior.updated(x);
        for r in 0..MAX_RUN {
            self.next_posterior[r + 1] = self.posterior[r].updated(x);
        }
        // Run MAX_RUN's own growth folded into MAX_RUN: keep the longer run's statistics, which
        // carry more of the mass after a long stable period.
        self.next_posterior[MAX_RUN] = self.posterior[MAX_RUN].updated(x);
        if self.run[MAX_RUN] < self.run[MAX_RUN - 1] {
            self.next_posterior[MAX_RUN] = self.posterior[MAX_RUN - 1].updated(x);
        }
        std::mem::swap(&mut self.run, &mut self.next_run);
        std::mem::swap(&mut self.posterior, &mut self.next_posterior);
        let map = self
            .run
            .iter()
            .enumerate()
            .fold(
                (0, f64::MIN),
                |best, (r, &p)| if p > best.1 { (r, p) } else { best },
            )
            .0;
        self.declare(map)
    }

    /// All mass on a new run that has seen `x`.
    fn restart_at(&mut self, x: f64) {
        self.run = [0.0; SLOTS];
        self.run[0] = 1.0;
        self.posterior[0] = self.prior.updated(x);
    }

    fn declare(&mut self, map: usize) -> bool {
        let previous = self.map_run;
        self.map_run = map;
        let c = self.config;
        if map + c.min_drop <= previous && previous >= c.confirm + c.min_drop {
            // The MAP collapsed from a long run: a candidate change, confirmed once the new run
            // has lasted `confirm` samples, dropped if the long run takes the lead again.
            self.pending = true;
        }
        if !self.pending {
            return false;
        }
        if map > c.confirm + c.min_drop {
            self.pending = false;
            return false;
        }
        if map >= c.confirm {
            self.pending = false;
            self.changes += 1;
            return true;
        }
        false
    }
}

/// The minimum of a signal over a sliding time window in constant memory: Kathleen Nichols'
/// windowed min filter (as in BBR and Linux's `lib/win_minmax.c`), which keeps the best, second
/// and third best samples of the window's subwindows; the estimate is exact when the window
/// holds a new minimum and otherwise at most one subwindow (a quarter of the window) late.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WindowedMin {
    window_us: u64,
    /// (time µs, value): best, second best, third best.
    s: [(u64, f64); 3],
    empty: bool,
}

impl WindowedMin {
    /// An empty filter over `window_us` µs (0: the last sample only).
    pub fn new(window_us: u64) -> Self {
        WindowedMin {
            window_us,
            s: [(0, f64::INFINITY); 3],
            empty: true,
        }
    }

    /// The current minimum (`+∞` before the first sample).
    pub fn get(&self) -> f64 {
        self.s[0].1
    }

    /// Adds `value` measured at `now_us` (non-decreasing) and returns the windowed minimum.
    pub fn update(&mut self, value: f64, now_us: u64) -> f64 {
        let sample = (now_us, value);
        let window = self.window_us;
        if self.empty || value <= self.s[0].1 || now_us.saturating_sub(self.s[2].0) > window {
            // A new minimum, or nothing in the window: reset to this sample.
            self.s = [sample; 3];
            self.empty = false;
            return value;
        }
        if value <= self.s[1].1 {
            self.s[1] = sample;
            self.s[2] = sample;
        } else if value <= self.s[2].1 {
            self.s[2] = sample;
        }
        // Expire the best (and then the second best) once they leave the window; refresh the
        // subwindows with this sample while the window's first quarter or half passes without
        // a better one (win_minmax's subwindow rules).
        let dt = now_us.saturating_sub(self.s[0].0);
        if dt > window {
            self.s[0] = self.s[1];
            self.s[1] = self.s[2];
            self.s[2] = sample;
            if now_us.saturating_sub(self.s[0].0) > window {
                self.s[0] = self.s[1];
                self.s[1] = self.s[2];
                self.s[2] = sample;
            }
        } else if self.s[1].0 == self.s[0].0 && dt > window / 4 {
            self.s[1] = sample;
            self.s[2] = sample;
        } else if self.s[2].0 == self.s[1].0 && dt > window / 2 {
            self.s[2] = sample;
        }
        self.s[0].1
    }
}

/// `ln Γ(x)` for x > 0 (Lanczos, g = 7, n = 9; relative error below 1e-13).
fn ln_gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const COEFFICIENTS: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection: Γ(x) Γ(1 − x) = π / sin(πx).
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut sum = COEFFICIENTS[0];
    for (i, c) in COEFFICIENTS.iter().enumerate().skip(1) {
        sum += c / (x + i as f64);
    }
    let t = x + G + 0.5;
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + sum.ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Gaussian noise from a fixed-seed xorshift and Box-Muller.
    struct Noise(u64);

    impl Noise {
        fn uniform(&mut self) -> f64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            ((self.0 >> 11) as f64 + 0.5) / (1u64 << 53) as f64
        }

        fn gaussian(&mut self) -> f64 {
            let (u, v) = (self.uniform(), self.uniform());
            (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
        }
    }

    #[test]
    fn ln_gamma_matches_known_values() {
        assert!(ln_gamma(1.0).abs() < 1e-12);
        assert!(ln_gamma(2.0).abs() < 1e-12);
        assert!((ln_gamma(0.5) - std::f64::consts::PI.sqrt().ln()).abs() < 1e-12);
        assert!((ln_gamma(10.0) - 362_880f64.ln()).abs() < 1e-10);
    }

    #[test]
    fn detects_a_step_in_rtt_within_a_few_samples() {
        let mut noise = Noise(0x5eed);
        let mut detector = ChangeDetector::new(ChangeDetectorConfig::default());
        for _ in 0..300 {
            assert!(!detector.observe(40.0 + 2.0 * noise.gaussian()));
        }
        let mut delay = None;
        for i in 0..50 {
            if detector.observe(80.0 + 2.0 * noise.gaussian()) {
                delay = Some(i + 1);
                break;
            }
        }
        let delay = delay.expect("the step was not detected");
        assert!(delay <= 6, "detected after {delay} samples");
        assert_eq!(detector.changes(), 1);
    }

    #[test]
    fn no_false_alarm_on_stationary_noise() {
        let mut noise = Noise(42);
        let mut detector = ChangeDetector::new(ChangeDetectorConfig::default());
        let alarms = (0..20_000)
            .filter(|_| detector.observe(30.0 + 5.0 * noise.gaussian()))
            .count();
        assert_eq!(alarms, 0);
        assert!(detector.map_run_length() >= MAX_RUN - 1);
    }

    #[test]
    fn detects_a_rise_in_grouped_loss_counts() {
        // Binomial counts over groups of 32 packets: loss 1% then 20%.
        let mut noise = Noise(7);
        let mut detector = ChangeDetector::new(ChangeDetectorConfig::default());
        let count = |p: f64, noise: &mut Noise| (0..32).filter(|_| noise.uniform() < p).count();
        for _ in 0..200 {
            assert!(!detector.observe(count(0.01, &mut noise) as f64));
        }
        let detected = (0..20).any(|_| detector.observe(count(0.2, &mut noise) as f64));
        assert!(detected);
    }

    /// Per-ACK RTTs (one per ms) of a path whose queue fills and drains every congestion epoch:
    /// base delay + a queueing delay that climbs from 0 to `peak_ms` over `epoch_ms` and then
    /// drains to 0 within 50 ms (the window cut after a loss), + 1 ms of noise.
    fn sawtooth(noise: &mut Noise, t_ms: u64, base_ms: f64, peak_ms: f64, epoch_ms: u64) -> f64 {
        let phase = t_ms % epoch_ms;
        let fill = epoch_ms - 50;
        let queue = if phase < fill {
            peak_ms * phase as f64 / fill as f64
        } else {
            peak_ms * (epoch_ms - phase) as f64 / 50.0
        };
        base_ms + queue + noise.gaussian().abs()
    }

    #[test]
    fn queue_sawtooth_raises_no_alarm_but_a_base_delay_step_is_found() {
        // 40 ms of propagation delay, a 60 ms queueing sawtooth with 1.5 s epochs (each fill is
        // as large as the base-delay step that follows): 60 s stationary, then the base delay
        // steps to 80 ms for 30 s, then back to 40 ms.
        const EPOCH_MS: u64 = 1_500;
        let window_us = 2 * EPOCH_MS * 1_000;
        let run = |config: ChangeDetectorConfig| {
            let mut noise = Noise(0xca7);
            let mut detector = ChangeDetector::new(config);
            let mut alarms = Vec::new();
            for t in 0..120_000u64 {
                let base = if (60_000..90_000).contains(&t) {
                    80.0
                } else {
                    40.0
                };
                let rtt = sawtooth(&mut noise, t, base, 60.0, EPOCH_MS);
                if detector.observe_at(rtt, t * 1_000) {
                    alarms.push(t);
                }
            }
            alarms
        };
        let floor = run(ChangeDetectorConfig::propagation_delay(window_us));
        // Before the step: nothing. The rise shows once the window has passed (the minimum
        // of the old delay must leave it); the fall at once.
        assert!(floor.iter().all(|&t| t >= 60_000), "{floor:?}");
        let up: Vec<u64> = floor.iter().copied().filter(|&t| t < 90_000).collect();
        assert_eq!(up.len(), 1, "{floor:?}");
        assert!(up[0] <= 60_000 + window_us / 1_000 + 1_000, "{floor:?}");
        let down: Vec<u64> = floor.iter().copied().filter(|&t| t >= 90_000).collect();
        assert_eq!(down.len(), 1, "{floor:?}");
        assert!(down[0] <= 91_000, "{floor:?}");
        // The group means of the same samples fire on the sawtooth itself.
        let means = run(ChangeDetectorConfig::per_ack_rtt());
        assert!(
            means.iter().filter(|&&t| t < 60_000).count() >= 5,
            "{means:?}"
        );
    }

    #[test]
    fn windowed_min_follows_the_minimum_of_the_window() {
        let mut m = WindowedMin::new(1_000);
        assert_eq!(m.get(), f64::INFINITY);
        assert_eq!(m.update(10.0, 0), 10.0);
        assert_eq!(m.update(12.0, 300), 10.0);
        assert_eq!(m.update(11.0, 600), 10.0);
        // 10 leaves the window; the best of what is left takes over.
        assert!(m.update(13.0, 1_100) <= 12.0);
        assert_eq!(m.update(9.0, 1_200), 9.0);
        // Nothing in the window any more: the last sample.
        assert_eq!(m.update(20.0, 5_000), 20.0);
        // Against a brute-force minimum over a random walk: never below the window's true
        // minimum (no expired sample is kept), never above the newest sample, and a value the
        // window holds (the filter's approximation: a subwindow's best may be passed over).
        let mut noise = Noise(3);
        let mut m = WindowedMin::new(400);
        let mut history: Vec<(u64, f64)> = Vec::new();
        let mut x = 50.0;
        for t in 0..5_000u64 {
            x = (x + noise.gaussian()).max(0.0);
            history.push((t, x));
            let got = m.update(x, t);
            let window: Vec<f64> = history
                .iter()
                .filter(|(s, _)| t - s <= 400)
                .map(|(_, v)| *v)
                .collect();
            let exact = window.iter().copied().fold(f64::INFINITY, f64::min);
            assert!(got >= exact && got <= x, "t {t}: {got} {exact}");
            assert!(window.contains(&got), "t {t}: {got}");
        }
        // A falling then rising signal: exact.
        let mut m = WindowedMin::new(100);
        for t in 0..100u64 {
            assert_eq!(m.update(100.0 - t as f64, t), 100.0 - t as f64);
        }
        assert_eq!(m.update(50.0, 150), 1.0);
    }

    #[test]
    fn ignores_non_finite_samples_and_bad_config() {
        let mut detector = ChangeDetector::new(ChangeDetectorConfig {
            expected_run: f64::NAN,
            kappa: -1.0,
            ..ChangeDetectorConfig::default()
        });
        assert!(!detector.observe(f64::NAN));
        assert!(!detector.observe(f64::INFINITY));
        assert_eq!(detector.samples(), 0);
        assert!(!detector.observe(10.0));
        let total: f64 = (0..SLOTS).map(|r| detector.run_probability(r)).sum();
        assert!((total - 1.0).abs() < 1e-9);
    }
}

#[cfg(test)]
#[path = "changepoint_real.rs"]
mod real;
