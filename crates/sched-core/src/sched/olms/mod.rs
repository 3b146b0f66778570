//! OLMS: online learning multipath scheduling (Cai, Chen, Zhang, Lui, IEEE TNSE 2025;
//! seeds/olms.txt: Alg. 1, Alg. 2, §IV, §V, §VI-E2).
//!
//! Per decision (Alg. 1):
//!
//! 1. **Estimation** (lines 5-7): for every candidate path (not failed, tier admitted) one
//!    Thompson sample `r̂_i` of its normalised RTT and `b̂_i` of its normalised bandwidth from
//!    their Beta posteriors ([`thompson`]).
//! 2. **Constrained scheduling** (lines 9-10): the LP of the configured application on the
//!    samples, solved allocation-free by `braid-lp` (see docs/lp.md):
//!    - `maxrtt` (§IV-A, eq. 4): maximise `Σ v_i b̂_i` s.t. `r̂_i v_i <= C_r` for every path,
//!      `Σ v_i = L`, `0 <= v_i <= 1`;
//!    - `bandwidth` (§IV-B, eq. 8): minimise `max_i v_i r̂_i` s.t. `Σ v_i b̂_i <= C_b`, the same
//!      box and sum.
//!
//!    An infeasible LP falls back to minRTT (§III-B). Then dependent rounding draws a set of
//!    exactly `L` paths with `P(i in set) = v_i`, and the packet goes to the path with the
//!    highest `v_i` in the set; when that path's window is full, to the next in `v` order within
//!    the set (the paper's reason for drawing `L` paths, §VI-B); when no path of the set has
//!    room, to minRTT's choice (the paper: the set "reduces the risk of falling back to a
//!    suboptimal path selected by minRTT"). Ties in `v` go to the path with the better sample
//!    for the application's utility (higher `b̂` for maxrtt, lower `r̂` for bandwidth).
//! 3. **Cyclic solving** (§VI-E2): the drawn set is reused for `decision_cycle` decisions before
//!    sampling and solving again (1, the default, solves per packet as Alg. 1 does).
//! 4. **Statistics update** (lines 12-18), in [`Scheduler::on_ack`]: the acknowledged path's
//!    measurements are the path's smoothed RTT and `cwnd / srtt` (§V: the implementation reads
//!    `SmoothedRTT()` and `GetCongestionWindow()` on each ACK); we take both from the path's
//!    last [`PathView`] seen by `select` (before any view, the ACK's own RTT sample, and no
//!    bandwidth update). They are normalised by `rtt_scale_ms` and `bw_scale_mbps` (clamped to
//!    `[0, 1]`), checked by the monitor of Alg. 2 ([`monitor`]), which may reinitialise that
//!    posterior, and then recorded as a Bernoulli trial.
//!
//! All per-path state lives in `MAX_PATHS` arrays and the random generator is a seeded
//! `SmallRng`, so decisions are deterministic for a seed and allocate nothing.

pub mod monitor;
pub mod thompson;

use braid_lp::{BandwidthProblem, MaxRttProblem, Schedule, dependent_round};
use rand::SeedableRng;
use rand::rngs::SmallRng;

use crate::decision::Decision;
use crate::packet::PacketMeta;
use crate::path::{MAX_PATHS, PathId, PathState, PathView};
use crate::sched::minrtt::lowest_rtt_with_room;
use crate::scheduler::{
    AckInfo, ParamError, ParamInfo, Scheduler, SchedulerInfo, SchedulerKind, in_range,
};
use crate::tier::TierGate;
use crate::time::Timestamp;

use self::monitor::Monitor;
use self::thompson::Posterior;

/// Which constrained problem OLMS solves (§IV).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Application {
    /// Application I, eq. (4): most bandwidth with every scheduled path's RTT at most `C_r`.
    #[default]
    MaxRtt,
    /// Application II, eq. (8): least maximum RTT with the scheduled bandwidth at most `C_b`.
    Bandwidth,
}

/// Configuration of [`Olms`]. Defaults are the paper's Application I setting (§VI-B) and
/// monitor parameters (§VI-D3).
#[derive(Clone, Debug, PartialEq)]
pub struct OlmsConfig {
    /// The application's LP.
    pub application: Application,
    /// `C_r` (maxrtt) or `C_b` (bandwidth), normalised like the measurements.
    pub threshold: f64,
    /// RTT normalisation: an RTT of this many ms is 1.0.
    pub rtt_scale_ms: f64,
    /// Bandwidth normalisation: this many Mbit/s is 1.0.
    pub bw_scale_mbps: f64,
    /// `L`, paths drawn per decision.
    pub paths_per_decision: u32,
    /// Decisions that share one LP solution and rounding (§VI-E2).
    pub decision_cycle: u32,
    /// Alg. 2's `q`, `δ` and `h`.
    pub monitor: Monitor,
    /// Seed of the sampling and rounding generator.
    pub seed: u64,
}

impl Default for OlmsConfig {
    fn default() -> Self {
        OlmsConfig {
            application: Application::MaxRtt,
            threshold: 0.5,
            rtt_scale_ms: 100.0,
            bw_scale_mbps: 100.0,
            paths_per_decision: 2,
            decision_cycle: 1,
            monitor: Monitor::default(),
            seed: 1,
        }
    }
}

/// `value` when it is an integer in `[low, high]`.
fn integer(
    name: &'static str,
    value: f64,
    low: f64,
    high: f64,
    expected: &'static str,
) -> Result<f64, ParamError> {
    let v = in_range(name, value, low, high, expected)?;
    if v.fract() == 0.0 {
        Ok(v)
    } else {
        Err(ParamError::OutOfRange {
            name,
            value,
            expected,
        })
    }
}

impl OlmsConfig {
    /// Sets parameter `name`; `Ok(false)` when OLMS has no such parameter.
    pub fn set(&mut self, name: &str, value: f64) -> Result<bool, ParamError> {
        match name {
            "application" => {
                let v = integer(
                    "application",
                    value,
                    0.0,
                    1.0,
                    "0 (maxrtt) or 1 (bandwidth)",
                )?;
                self.application = if v == 0.0 {
                    Application::MaxRtt
                } else {
                    Application::Bandwidth
                };
            }
            "threshold" => {
                self.threshold =
                    in_range("threshold", value, 0.0, 1e9, "a normalised threshold >= 0")?;
            }
            "rtt_scale_ms" => {
                self.rtt_scale_ms = in_range(
                    "rtt_scale_ms",
                    value,
                    1e-3,
                    1e7,
                    "milliseconds in [0.001, 1e7]",
                )?;
            }
            "bw_scale_mbps" => {
                self.bw_scale_mbps = in_range(
                    "bw_scale_mbps",
                    value,
                    1e-6,
                    1e7,
                    "Mbit/s in [0.000001, 1e7]",
                )?;
            }
            "paths_per_decision" => {
                let v = integer(
                    "paths_per_decision",
                    value,
                    1.0,
                    MAX_PATHS as f64,
                    "an integer in [1, 16]",
                )?;
                self.paths_per_decision = v as u32;
            }
            "decision_cycle" => {
                let v = integer(
                    "decision_cycle",
                    value,
                    1.0,
                    1e6,
                    "an integer in [1, 1000000]",
                )?;
                self.decision_cycle = v as u32;
            }
            "monitor_q" => {
                let v = integer("monitor_q", value, 0.0, 1e9, "an integer in [0, 1e9]")?;
                self.monitor.q = v as u32;
            }
            "monitor_delta" => {
                self.monitor.delta = in_range(
                    "monitor_delta",
                    value,
                    0.0,
                    1e6,
                    "standard deviations in [0, 1e6]",
                )?;
            }
            "monitor_h" => {
                let v = integer("monitor_h", value, 0.0, 1e9, "an integer in [0, 1e9]")?;
                self.monitor.h = v as u32;
            }
            "seed" => {
                let v = integer(
                    "seed",
                    value,
                    0.0,
                    9_007_199_254_740_992.0,
                    "an integer in [0, 2^53]",
                )?;
                self.seed = v as u64;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// Thompson sampling + LP + dependent rounding + monitor (OLMS).
#[derive(Clone, Debug)]
pub struct Olms {
    config: OlmsConfig,
    rtt: [Posterior; MAX_PATHS],
    bandwidth: [Posterior; MAX_PATHS],
    rtt_deviations: [u32; MAX_PATHS],
    bandwidth_deviations: [u32; MAX_PATHS],
    /// Last srtt (µs) and cwnd (bytes) seen in a view, per path id; 0 before any view.
    last_srtt_us: [u32; MAX_PATHS],
    last_cwnd: [u64; MAX_PATHS],
    rng: SmallRng,
    /// The drawn set in preference order, reused for the rest of the decision cycle.
    chosen: [PathId; MAX_PATHS],
    chosen_len: usize,
    cycle_left: u32,
    lp_solves: u64,
    infeasible: u64,
    fallbacks: u64,
}

impl Olms {
    /// Catalogue entry.
    pub const INFO: SchedulerInfo = SchedulerInfo {
        kind: SchedulerKind::Olms,
        summary: "Thompson-sampled RTT/bandwidth, constrained LP, dependent rounding of L paths; minRTT when infeasible",
        source: "Cai et al., OLMS, IEEE TNSE 2025 (Alg. 1-2, eq. 4 and 8)",
        params: &[
            ParamInfo {
                name: "application",
                default: 0.0,
                description: "0 = maxrtt (eq. 4), 1 = bandwidth (eq. 8)",
            },
            ParamInfo {
                name: "threshold",
                default: 0.5,
                description: "C_r (maxrtt) or C_b (bandwidth), normalised, >= 0",
            },
            ParamInfo {
                name: "rtt_scale_ms",
                default: 100.0,
                description: "RTT that normalises to 1, ms",
            },
            ParamInfo {
                name: "bw_scale_mbps",
                default: 100.0,
                description: "bandwidth that normalises to 1, Mbit/s",
            },
            ParamInfo {
                name: "paths_per_decision",
                default: 2.0,
                description: "L, paths drawn by dependent rounding, integer in [1, 16]",
            },
            ParamInfo {
                name: "decision_cycle",
                default: 1.0,
                description: "decisions sharing one LP solution (Sec. VI-E2), integer >= 1",
            },
            ParamInfo {
                name: "monitor_q",
                default: 20.0,
                description: "Alg. 2 q: trials before the monitor judges, integer",
            },
            ParamInfo {
                name: "monitor_delta",
                default: 3.0,
                description: "Alg. 2 delta: deviation threshold in posterior std devs",
            },
            ParamInfo {
                name: "monitor_h",
                default: 3.0,
                description: "Alg. 2 h: reinitialise after more than h consecutive deviations",
            },
            ParamInfo {
                name: "seed",
                default: 1.0,
                description: "seed of sampling and rounding, integer in [0, 2^53]",
            },
        ],
    };

    /// Builds the scheduler with uniform priors.
    pub fn new(config: &OlmsConfig) -> Self {
        Olms {
            config: config.clone(),
            rtt: [Posterior::default(); MAX_PATHS],
            bandwidth: [Posterior::default(); MAX_PATHS],
            rtt_deviations: [0; MAX_PATHS],
            bandwidth_deviations: [0; MAX_PATHS],
            last_srtt_us: [0; MAX_PATHS],
            last_cwnd: [0; MAX_PATHS],
            rng: SmallRng::seed_from_u64(config.seed),
            chosen: [PathId(0); MAX_PATHS],
            chosen_len: 0,
            cycle_left: 0,
            lp_solves: 0,
            infeasible: 0,
            fallbacks: 0,
        }
    }

    /// The RTT posterior of `path`.
    pub fn rtt_posterior(&self, path: PathId) -> Option<&Posterior> {
        self.rtt.get(path.index())
    }

    /// The bandwidth posterior of `path`.
    pub fn bandwidth_posterior(&self, path: PathId) -> Option<&Posterior> {
        self.bandwidth.get(path.index())
    }

    /// LPs solved, and decisions that fell back to minRTT (infeasible LP or no room in the set).
    pub fn counters(&self) -> (u64, u64) {
        (self.lp_solves, self.fallbacks)
    }

    /// LPs that were infeasible (each such decision fell back to minRTT).
    pub fn infeasible_solves(&self) -> u64 {
        self.infeasible
    }

    /// Normalised RTT of `srtt_us`.
    fn normalised_rtt(&self, srtt_us: u32) -> f64 {
        (f64::from(srtt_us) / 1_000.0 / self.config.rtt_scale_ms).clamp(0.0, 1.0)
    }

    /// Normalised `cwnd / srtt` (bytes per µs × 8 = Mbit/s).
    fn normalised_bandwidth(&self, cwnd: u64, srtt_us: u32) -> f64 {
        let mbps = cwnd as f64 * 8.0 / f64::from(srtt_us.max(1));
        (mbps / self.config.bw_scale_mbps).clamp(0.0, 1.0)
    }

    /// Draws one Thompson sample per candidate into `r` and `b` and solves the application's
    /// LP on them; `None` when it is infeasible (or refuses its input).
    fn solve(
        &mut self,
        candidates: &[PathId],
        r: &mut [f64; MAX_PATHS],
        b: &mut [f64; MAX_PATHS],
    ) -> Option<Schedule> {
        let k = candidates.len();
        for ((id, r), b) in candidates.iter().zip(r.iter_mut()).zip(b.iter_mut()) {
            *r = self.rtt[id.index()].sample(&mut self.rng);
            *b = self.bandwidth[id.index()].sample(&mut self.rng);
        }
        let choose = (self.config.paths_per_decision as usize).clamp(1, k);
        self.lp_solves += 1;
        let solved = match self.config.application {
            Application::MaxRtt => MaxRttProblem {
                bandwidth: &b[..k],
                rtt: &r[..k],
                rtt_limit: self.config.threshold,
                choose,
            }
            .solve(),
            Application::Bandwidth => BandwidthProblem {
                bandwidth: &b[..k],
                rtt: &r[..k],
                bandwidth_limit: self.config.threshold,
                choose,
            }
            .solve(),
        };
        if solved.is_err() {
            self.infeasible += 1;
        }
        solved.ok()
    }

    /// Samples, solves, rounds and stores the drawn set in preference order; false when the
    /// LP is infeasible. Samples and schedule live in fixed arrays on the stack.
    fn draw(&mut self, candidates: &[PathId]) -> bool {
        let k = candidates.len();
        let mut r = [0.0; MAX_PATHS];
        let mut b = [0.0; MAX_PATHS];
        let Some(schedule) = self.solve(candidates, &mut r, &mut b) else {
            return false;
        };
        let v = schedule.weights();
        let Ok(mask) = dependent_round(v, &mut self.rng) else {
            return false;
        };
        // Preference key: v, then the application's utility sample (higher b̂ for maxrtt,
        // lower r̂ for bandwidth).
        let utility = match self.config.application {
            Application::MaxRtt => b,
            Application::Bandwidth => r.map(|x| -x),
        };
        let before = |x: usize, y: usize| (v[x], utility[x]) > (v[y], utility[y]);
        let mut order = [0usize; MAX_PATHS];
        let mut n = 0;
        for slot in mask.iter().filter(|&s| s < k) {
            // Insertion by descending key (L <= 16).
            let mut j = n;
            while j > 0 && before(slot, order[j - 1]) {
                order[j] = order[j - 1];
                j -= 1;
            }
            order[j] = slot;
            n += 1;
        }
        for (dst, &slot) in self.chosen.iter_mut().zip(&order[..n]) {
            *dst = candidates[slot];
        }
        self.chosen_len = n;
        true
    }
}

impl Scheduler for Olms {
    fn select(&mut self, paths: &[PathView], packet: &PacketMeta, _now: Timestamp) -> Decision {
        let gate = TierGate::new(paths);
        let mut candidates = [PathId(0); MAX_PATHS];
        let mut k = 0;
        for p in paths {
            let i = p.id.index();
            if i < MAX_PATHS {
                self.last_srtt_us[i] = p.srtt_us;
                self.last_cwnd[i] = p.cwnd;
            }
            if i < MAX_PATHS && k < MAX_PATHS && p.is_live() && gate.admits(p) {
                candidates[k] = p.id;
                k += 1;
            }
        }
        if self.cycle_left == 0 || self.chosen_len == 0 {
            self.chosen_len = 0;
            if k > 0 && self.draw(&candidates[..k]) {
                self.cycle_left = self.config.decision_cycle;
            }
        }
        self.cycle_left = self.cycle_left.saturating_sub(1);
        for &id in &self.chosen[..self.chosen_len] {
            if let Some(p) = paths.iter().find(|p| p.id == id)
                && p.can_send(packet.len)
                && gate.admits(p)
            {
                return Decision::Send(id);
            }
        }
        self.fallbacks += 1;
        match lowest_rtt_with_room(paths, packet.len) {
            Some(p) => Decision::Send(p.id),
            None => Decision::Wait,
        }
    }

    fn on_ack(&mut self, path: PathId, ack: &AckInfo, _now: Timestamp) {
        let i = path.index();
        if i >= MAX_PATHS {
            return;
        }
        let srtt = if self.last_srtt_us[i] > 0 {
            self.last_srtt_us[i]
        } else {
            ack.rtt_us
        };
        if srtt > 0 {
            let r = self.normalised_rtt(srtt);
            if self
                .config
                .monitor
                .check(&self.rtt[i], &mut self.rtt_deviations[i], r)
            {
                self.rtt[i].reset();
            }
            self.rtt[i].observe(r, &mut self.rng);
        }
        if self.last_cwnd[i] > 0 && self.last_srtt_us[i] > 0 {
            let b = self.normalised_bandwidth(self.last_cwnd[i], self.last_srtt_us[i]);
            let monitor = self.config.monitor;
            if monitor.check(&self.bandwidth[i], &mut self.bandwidth_deviations[i], b) {
                self.bandwidth[i].reset();
            }
            self.bandwidth[i].observe(b, &mut self.rng);
        }
    }

    fn on_path_state(&mut self, path: PathId, state: PathState, _now: Timestamp) {
        // A drawn set naming a failed path is stale: draw again on the next decision.
        if state == PathState::Failed && self.chosen[..self.chosen_len].contains(&path) {
            self.chosen_len = 0;
            self.cycle_left = 0;
        }
    }
}

#[cfg(test)]
mod tests;
