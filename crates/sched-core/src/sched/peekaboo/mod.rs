//! Peekaboo (Wu et al., "Peekaboo: Learning-based Multipath Scheduling for Dynamic Heterogeneous
//! Environments", IEEE JSAC 2020: its online-learning scheduler design).
//!
//! Peekaboo is minRTT while the fastest path has room. When it has none and a slower path
//! does, an online contextual bandit decides between two actions, *wait* for the fast path or
//! *send* on the slower one, instead of ECF's and BLEST's fixed models:
//!
//! - **Context** (d = 6, our choice of the paper's path-state features, each scaled to about
//!   [0, 1]): a bias 1; `srtt_f / srtt_s`; the backlog relative to both windows,
//!   `min(1, k / (cwnd_f + cwnd_s))`; the slow path's window occupancy `inflight_s / cwnd_s`;
//!   the fast path's share of capacity `cwnd_f / (cwnd_f + cwnd_s)`; the slow path's loss rate.
//! - **Deterministic part**: disjoint LinUCB ([`super::linucb`]), one arm per action, score
//!   `θᵀx + α·√(xᵀA⁻¹x)`.
//! - **Stochastic adjustment**: when the two scores are within `margin` of each other
//!   the action is drawn at random, with the probability of *send* rising linearly from 0 to 1
//!   across the margin; outside it the better score wins. This keeps exploring as the paths
//!   drift, which is what makes Peekaboo track dynamic environments.
//! - **Reward**: the goodput of each interval, normalised by the best interval seen so far, less
//!   the fraction of packets that arrived out of order. Intervals end with each receiver report
//!   ([`Scheduler::on_report`]); while no report has been seen, they end every
//!   `reward_interval_ms` and use the bytes acknowledged ([`Scheduler::on_ack`]). Every decision
//!   of the interval (up to [`PENDING`]; the oldest are overwritten) learns that reward.
//!
//! The learned matrices are saved with [`Peekaboo::save`] and loaded with [`Peekaboo::load`]
//! (format in [`model`]). Nothing is allocated per packet: the arms, the pending
//! decisions and the random generator live in fixed arrays.

use crate::decision::Decision;
use crate::packet::PacketMeta;
use crate::path::PathView;
use crate::sched::linucb::{Arm, Context};
use crate::sched::minrtt::{FastAndBest, fastest_and_best};
use crate::scheduler::{
    AckInfo, ParamError, ParamInfo, ReceiverReport, Scheduler, SchedulerInfo, SchedulerKind,
    in_range,
};
use crate::time::Timestamp;

/// Decisions remembered per reward interval.
pub const PENDING: usize = 64;
/// Index of the *wait for the fast path* arm.
const WAIT: usize = 0;
/// Index of the *send on the slower path* arm.
const SEND: usize = 1;
/// Number of actions (wait, send).
const ACTIONS: usize = 2;

pub mod model;

pub use model::{MODEL_LEN, MODEL_MAGIC, MODEL_VERSION, ModelError};

/// Configuration of [`Peekaboo`].
#[derive(Clone, Debug, PartialEq)]
pub struct PeekabooConfig {
    /// LinUCB exploration weight α.
    pub alpha: f64,
    /// Width of the score gap within which the action is drawn at random.
    pub margin: f64,
    /// Reward interval when no receiver reports arrive, ms.
    pub reward_interval_ms: f64,
    /// Seed of the stochastic adjustment's random generator.
    pub seed: u64,
}

impl PeekabooConfig {
    /// Sets parameter `name`; `Ok(false)` when Peekaboo has no such parameter.
    pub fn set(&mut self, name: &str, value: f64) -> Result<bool, ParamError> {
        const SEED: &str = "an integer in [0, 2^53]";
        match name {
            "alpha" => self.alpha = in_range("alpha", value, 0.0, 100.0, "a weight in [0, 100]")?,
            "margin" => {
                self.margin = in_range("margin", value, 0.0, 10.0, "a score gap in [0, 10]")?;
            }
            "reward_interval_ms" => {
                self.reward_interval_ms = in_range(
                    "reward_interval_ms",
                    value,
                    0.001,
                    3_600_000.0,
                    "milliseconds in [0.001, 3600000]",
                )?;
            }
            "seed" => {
                let seed = in_range("seed", value, 0.0, 9_007_199_254_740_992.0, SEED)?;
                if seed.fract() != 0.0 {
                    return Err(ParamError::OutOfRange {
                        name: "seed",
                        value,
                        expected: SEED,
                    });
                }
                self.seed = seed as u64;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}

impl Default for PeekabooConfig {
    fn default() -> Self {
        PeekabooConfig {
            alpha: 0.5,
            margin: 0.05,
            reward_interval_ms: 100.0,
            seed: 1,
        }
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Pending {
    context: Context,
    action: usize,
}

/// Learning-based wait-or-send scheduler.
#[derive(Clone, Debug)]
pub struct Peekaboo {
    alpha: f64,
    margin: f64,
    reward_interval_us: u64,
    arms: [Arm; ACTIONS],
    pending: [Pending; PENDING],
    pending_head: usize,
    pending_len: usize,
    rng: u64,
    interval_start: Option<Timestamp>,
    acked_bytes: u64,
    best_goodput: f64,
    reports_seen: bool,
}

impl Peekaboo {
    /// Catalogue entry.
    pub const INFO: SchedulerInfo = SchedulerInfo {
        kind: SchedulerKind::Peekaboo,
        summary: "minRTT, but a LinUCB bandit with stochastic adjustment learns when to wait for the fast path",
        source: "Wu et al., Peekaboo, IEEE JSAC 2020 (LinUCB with stochastic adjustment)",
        params: &[
            ParamInfo {
                name: "alpha",
                default: 0.5,
                description: "LinUCB exploration weight, in [0, 100]",
            },
            ParamInfo {
                name: "margin",
                default: 0.05,
                description: "score gap within which the action is drawn at random, in [0, 10]",
            },
            ParamInfo {
                name: "reward_interval_ms",
                default: 100.0,
                description: "reward interval when no receiver reports arrive, ms, in (0, 3600000]",
            },
            ParamInfo {
                name: "seed",
                default: 1.0,
                description: "seed of the stochastic adjustment, integer in [0, 2^53]",
            },
        ],
    };

    /// Builds the scheduler with fresh (untrained) arms.
    pub fn new(config: &PeekabooConfig) -> Self {
        Peekaboo {
            alpha: config.alpha,
            margin: config.margin,
            reward_interval_us: (config.reward_interval_ms * 1_000.0).max(1.0) as u64,
            arms: [Arm::default(), Arm::default()],
            pending: [Pending::default(); PENDING],
            pending_head: 0,
            pending_len: 0,
            // splitmix64 of the seed, never zero (xorshift must not start at zero)
            rng: splitmix64(config.seed) | 1,
            interval_start: None,
            acked_bytes: 0,
            best_goodput: 0.0,
            reports_seen: false,
        }
    }

    /// The context Peekaboo decides on when `fast` is full and `slow` has room.
    pub fn context(fast: &PathView, slow: &PathView, backlog: u64) -> Context {
        let cwnd_f = fast.cwnd.max(1) as f64;
        let cwnd_s = slow.cwnd.max(1) as f64;
        [
            1.0,
            (f64::from(fast.srtt_us) / f64::from(slow.srtt_us.max(1))).min(1.0),
            (backlog as f64 / (cwnd_f + cwnd_s)).min(1.0),
            (slow.bytes_in_flight as f64 / cwnd_s).min(1.0),
            cwnd_f / (cwnd_f + cwnd_s),
            f64::from(slow.loss_rate).clamp(0.0, 1.0),
        ]
    }

    /// The two arms' scores (wait, send) for context `x`.
    pub fn scores(&self, x: &Context) -> (f64, f64) {
        (
            self.arms[WAIT].score(x, self.alpha),
            self.arms[SEND].score(x, self.alpha),
        )
    }

    /// Decides wait (false) or send (true) with the stochastic adjustment.
    fn choose_send(&mut self, x: &Context) -> bool {
        let (wait, send) = self.scores(x);
        let gap = send - wait;
        if self.margin > 0.0 && gap.abs() < self.margin {
            let p_send = 0.5 + gap / (2.0 * self.margin);
            self.next_unit() < p_send
        } else {
            gap > 0.0
        }
    }

    /// Uniform in [0, 1) from xorshift64*.
    fn next_unit(&mut self) -> f64 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let r = self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d);
        (r >> 11) as f64 / (1u64 << 53) as f64
    }

    fn remember(&mut self, context: Context, action: usize) {
        let slot = (self.pending_head + self.pending_len) % PENDING;
        self.pending[slot] = Pending { context, action };
        if self.pending_len < PENDING {
            self.pending_len += 1;
        } else {
            self.pending_head = (self.pending_head + 1) % PENDING;
        }
    }

    /// Closes the reward interval: every remembered decision learns `reward`.
    fn learn(&mut self, reward: f64) {
        for i in 0..self.pending_len {
            let p = self.pending[(self.pending_head + i) % PENDING];
            self.arms[p.action].update(&p.context, reward);
        }
        self.pending_head = 0;
        self.pending_len = 0;
    }

    /// Goodput normalised by the best interval so far, in [0, 1].
    fn normalised_goodput(&mut self, bytes: u64, interval_us: u64) -> f64 {
        let goodput = bytes as f64 / interval_us.max(1) as f64;
        self.best_goodput = self.best_goodput.max(goodput);
        if self.best_goodput > 0.0 {
            goodput / self.best_goodput
        } else {
            0.0
        }
    }

    /// Decisions waiting for their reward.
    pub fn pending_decisions(&self) -> usize {
        self.pending_len
    }

    /// Serialises the learned matrices in the format of [`model`] ([`MODEL_LEN`] bytes).
    pub fn save(&self) -> Vec<u8> {
        model::encode(&self.arms)
    }

    /// Replaces the learned matrices with a saved model (format in [`model`]); on error nothing
    /// changes.
    pub fn load(&mut self, bytes: &[u8]) -> Result<(), ModelError> {
        self.arms = model::decode(bytes)?;
        Ok(())
    }
}

fn splitmix64(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Scheduler for Peekaboo {
    #[inline]
    fn select(&mut self, paths: &[PathView], packet: &PacketMeta, now: Timestamp) -> Decision {
        let FastAndBest { fastest, best } = fastest_and_best(paths, packet.len);
        let Some(best) = best else {
            return Decision::Wait;
        };
        let Some(fast) = fastest.filter(|f| f.id != best.id) else {
            return Decision::Send(best.id);
        };
        if self.interval_start.is_none() {
            self.interval_start = Some(now);
        }
        let x = Peekaboo::context(fast, best, packet.backlog_bytes);
        let send = self.choose_send(&x);
        self.remember(x, if send { SEND } else { WAIT });
        if send {
            Decision::Send(best.id)
        } else {
            Decision::Wait
        }
    }

    fn on_ack(&mut self, _path: crate::PathId, ack: &AckInfo, now: Timestamp) {
        self.acked_bytes = self.acked_bytes.saturating_add(ack.bytes);
        let start = *self.interval_start.get_or_insert(now);
        let elapsed = now.as_micros().saturating_sub(start.as_micros());
        if !self.reports_seen && elapsed >= self.reward_interval_us {
            let reward = self.normalised_goodput(self.acked_bytes, elapsed);
            self.learn(reward);
            self.acked_bytes = 0;
            self.interval_start = Some(now);
        }
    }

    fn on_report(&mut self, report: &ReceiverReport, now: Timestamp) {
        self.reports_seen = true;
        let goodput =
            self.normalised_goodput(report.delivered_bytes, u64::from(report.interval_us));
        let packets = (report.delivered_bytes / 1_200).max(1) as f64;
        let disorder = (f64::from(report.ooo_packets) / packets).min(1.0);
        self.learn(goodput - disorder);
        self.acked_bytes = 0;
        self.interval_start = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::model::HEADER_LEN;
    use super::*;
    use crate::path::PathId;
    use crate::sched::linucb::FEATURES;

    fn paths() -> [PathView; 2] {
        let mut fast = PathView::new(PathId(0), 10_000, 20_000);
        fast.bytes_in_flight = 20_000;
        let slow = PathView::new(PathId(1), 80_000, 20_000);
        [fast, slow]
    }

    #[test]
    fn fast_path_with_room_is_used_without_learning() {
        let mut s = Peekaboo::new(&PeekabooConfig::default());
        let mut p = paths();
        p[0].bytes_in_flight = 0;
        let pkt = PacketMeta::bulk(1_200);
        assert_eq!(
            s.select(&p, &pkt, Timestamp::ZERO),
            Decision::Send(PathId(0))
        );
        assert_eq!(s.pending_decisions(), 0);
        p[0].bytes_in_flight = 20_000;
        p[1].bytes_in_flight = 20_000;
        assert_eq!(s.select(&p, &pkt, Timestamp::ZERO), Decision::Wait);
    }

    #[test]
    fn learns_to_wait_when_sending_slow_is_punished() {
        let config = PeekabooConfig {
            alpha: 0.1,
            ..PeekabooConfig::default()
        };
        let mut s = Peekaboo::new(&config);
        let p = paths();
        let x = Peekaboo::context(&p[0], &p[1], 1_200);
        for _ in 0..50 {
            s.arms[SEND].update(&x, 0.0);
            s.arms[WAIT].update(&x, 1.0);
        }
        let waits = (0..100)
            .filter(|_| s.select(&p, &PacketMeta::bulk(1_200), Timestamp::ZERO) == Decision::Wait)
            .count();
        assert_eq!(waits, 100);
        // And the other way round.
        let mut s = Peekaboo::new(&config);
        for _ in 0..50 {
            s.arms[SEND].update(&x, 1.0);
            s.arms[WAIT].update(&x, 0.0);
        }
        assert_eq!(
            s.select(&p, &PacketMeta::bulk(1_200), Timestamp::ZERO),
            Decision::Send(PathId(1))
        );
    }

    #[test]
    fn stochastic_adjustment_mixes_close_scores() {
        // Fresh arms score alike: within the margin, both actions must appear.
        let mut s = Peekaboo::new(&PeekabooConfig::default());
        let p = paths();
        let pkt = PacketMeta::bulk(1_200);
        let sends = (0..1_000)
            .filter(|_| s.select(&p, &pkt, Timestamp::ZERO) == Decision::Send(PathId(1)))
            .count();
        assert!((300..=700).contains(&sends), "{sends}");
        assert_eq!(s.pending_decisions(), PENDING);
    }

    #[test]
    fn rewards_from_reports_train_the_chosen_arm() {
        let mut s = Peekaboo::new(&PeekabooConfig::default());
        let p = paths();
        let pkt = PacketMeta::bulk(1_200);
        let decision = s.select(&p, &pkt, Timestamp::ZERO);
        let arm = if decision == Decision::Wait {
            WAIT
        } else {
            SEND
        };
        let report = ReceiverReport {
            interval_us: 100_000,
            delivered_bytes: 1_000_000,
            ..ReceiverReport::default()
        };
        s.on_report(&report, Timestamp::from_millis(100));
        assert_eq!(s.pending_decisions(), 0);
        assert_ne!(s.arms[arm], Arm::default());
        assert_eq!(s.arms[1 - arm], Arm::default());
    }

    #[test]
    fn acks_close_intervals_without_reports() {
        let mut s = Peekaboo::new(&PeekabooConfig::default());
        let p = paths();
        s.select(&p, &PacketMeta::bulk(1_200), Timestamp::ZERO);
        let ack = AckInfo {
            bytes: 1_200,
            ..AckInfo::default()
        };
        s.on_ack(PathId(0), &ack, Timestamp::from_millis(50));
        assert_eq!(s.pending_decisions(), 1);
        s.on_ack(PathId(0), &ack, Timestamp::from_millis(100));
        assert_eq!(s.pending_decisions(), 0);
    }

    #[test]
    fn model_round_trips_and_bad_input_is_named() {
        let mut trained = Peekaboo::new(&PeekabooConfig::default());
        let x = [1.0, 0.1, 0.2, 0.3, 0.4, 0.5];
        trained.arms[WAIT].update(&x, 0.7);
        trained.arms[SEND].update(&x, -0.2);
        let bytes = trained.save();
        assert_eq!(bytes.len(), MODEL_LEN);
        let mut loaded = Peekaboo::new(&PeekabooConfig::default());
        loaded.load(&bytes).unwrap();
        assert_eq!(loaded.save(), bytes);
        let (lw, ls) = loaded.scores(&x);
        let (tw, ts) = trained.scores(&x);
        assert!((lw - tw).abs() < 1e-12 && (ls - ts).abs() < 1e-12);

        let err = loaded.load(&bytes[..10]).unwrap_err();
        assert_eq!(
            err,
            ModelError::Length {
                expected: MODEL_LEN,
                found: 10
            }
        );
        let mut bad = bytes.clone();
        bad[0] = b'X';
        assert!(matches!(loaded.load(&bad), Err(ModelError::Magic { .. })));
        let mut bad = bytes.clone();
        bad[4] = 9;
        assert_eq!(loaded.load(&bad), Err(ModelError::Version { found: 9 }));
        let mut bad = bytes.clone();
        bad[6] = 7;
        assert_eq!(
            loaded.load(&bad),
            Err(ModelError::Shape {
                features: 7,
                actions: 2
            })
        );
        let mut bad = bytes.clone();
        bad[HEADER_LEN + 8..HEADER_LEN + 16].copy_from_slice(&f64::NAN.to_le_bytes());
        assert_eq!(
            loaded.load(&bad),
            Err(ModelError::NotFinite {
                action: 0,
                index: 1
            })
        );
        let mut bad = bytes.clone();
        let second = HEADER_LEN + (FEATURES * FEATURES + FEATURES) * 8;
        bad[second..second + FEATURES * FEATURES * 8].fill(0);
        assert_eq!(loaded.load(&bad), Err(ModelError::Singular { action: 1 }));
        assert!(err.to_string().contains("10 bytes"));
        // Failed loads left the loaded model untouched.
        assert_eq!(loaded.save(), bytes);
    }
}
