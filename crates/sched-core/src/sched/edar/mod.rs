//! EdAR: experience-driven adaptive redundant scheduling (Han et al., IEEE TMC; §IV–V).
//!
//! Once per time interval (TI = the smallest smoothed RTT of the usable paths, §IV-B) EdAR
//! observes the state of the last interval ([`state`]), asks its Q-network ([`network`]) for
//! Q(s, normal) and Q(s, redundant), and transmits in that mode until the next interval:
//!
//! - **normal** (§IV-A): every packet once, on the lowest-RTT path with window room (minRTT);
//! - **redundant** (§IV-A), two implementations chosen by `redundant_buffer`:
//!   - `1` (the default), copies at placement (as with `0`) plus the paper's redundant buffer:
//!     the session's redundant buffer is linked ([`Scheduler::link_redundant_buffer`] returns
//!     true): when a path has window room that no new data can use (stream bytes held back by
//!     flow control, as the holes of a lossy path hold a flow's window in a handoff), the
//!     session sends on it a copy of the oldest stream packet still in flight (sent, neither
//!     acknowledged nor declared lost) on another path and not yet copied onto this one, at
//!     placement or by the buffer, the per-path congestion control bounding the copies. So the
//!     buffer copies only what placement could not (the paths without room when the packet was
//!     placed). The paper checks the buffer before new data ("once a subflow is available to
//!     send a packet, EdAR first checks the redundant buffer"); braid puts it after, because
//!     copies made first take the room of new data (docs/schedulers.md, "Redundant buffer");
//!   - `0`, copies at placement only: a packet goes to the lowest-RTT path with room and a copy
//!     to every other admitted path with room, as a `Decision::Duplicate`.
//!
//! Which path carries a packet placed in redundant mode is `redundant_placement`
//! ([`RedundantPlacement`]): by default (`3`, issue #7 HW) the lowest-RTT path with room, as
//! minRTT, unless that path's loss rate is at least [`LOSSY_MARGIN`] (5 points) above the
//! fastest usable path's; then the packet waits for the fastest, so new data stays off a path
//! that is losing much more (a handoff's degradation) while its room still takes copies. In
//! `edar-table3-handoff-gradual` that raises the goodput in the handoff windows by 0.133 ±
//! 0.020 Mbit/s over the lowest-RTT placement (`0`, 57 of 60 seeds), to 0.113 ± 0.034 above
//! peekaboo's (49/60), with the stable periods unchanged, and costs at most 0.5 % in the 24 other
//! EdAR, OLMS and FALCON scenarios (40 seeds). Always waiting for the fastest (`1`, the paper's
//! redundant mode, whose goodput is the best single path's) or whenever the path with room loses
//! more (`2`) gains as much in the handoff but gives up aggregation wherever the shipped weights
//! are in redundant mode on healthy paths (5-63 % and 2-35 % of goodput lost in the OLMS and
//! Table II files; docs/results.md observation 8).
//!
//! The buffer's deviations from the paper: (1) it is the session's table of packets in flight,
//! so a packet leaves it when acknowledged or declared lost (the paper removes it once it has
//! been sent on another subflow; with two paths that is the same), a copy is made at most once
//! per path and copies are never copied; (2) it holds stream data only: a datagram (unreliable,
//! not kept after it is sent) is still copied when it is placed; (3) a retransmission of lost
//! bytes goes before the copies. Copies at placement almost never cover a window-limited lossy
//! path's packets in a bulk transfer (0.009 Mbit/s of copies against 0.355 Mbit/s of new data at
//! risk on the handing-off path of `edar-table3-handoff-gradual`), so redundant mode costs almost
//! nothing there, and the shipped weights, trained with it, are in redundant mode in 88-100 % of
//! the intervals of some scenarios (the OLMS ones). A buffer checked before new data (the
//! paper's order) spent each of those intervals' windows on copies (edar's goodput fell by
//! 36-55 % in the nine OLMS scenarios); the low-priority buffer takes only room that no new data
//! can use. With the shipped weights it raises the goodput in the handoff windows of
//! `edar-table3-handoff-gradual` by 2.2 % (20 of 20 seeds) and costs 0.6 % in
//! `edar-table2-setting-i-gradual` and 2.5 % in `-v` (40 seeds), no significant loss in the 22
//! other EdAR, OLMS and FALCON scenarios (20 seeds; small gains in five OLMS ones), so it is on
//! by default. Weights retrained with it were worse in the handoff (docs/results.md, observation
//! 8; models/edar/PROVENANCE.md).
//!
//! Learning (§V): every interval becomes a transition `(s_t, a_t, r_t, s_{t+1})` whose reward
//! ([`reward`]) is what the receiver observed of the data sent in that interval (intervals in
//! which this end placed no data packet, e.g. the receiving end of a download, yield none); it
//! goes to the learner through an [`ExperienceSender`] (never blocks; dropped and counted when
//! full). Weights come back through a [`SlotReader`] refreshed at every call (latest wins, never
//! waits). Actions are ε-greedy with a seeded generator (Alg. 2); `policy = normal | redundant`
//! gives the fixed policies of offline data collection (Alg. 1), `policy = switching` a random
//! action per interval (braid's addition to the collection, see [`EdarPolicy::Switching`]). The
//! first interval of a connection is redundant (§IV-B). Without weights the learned policy is
//! normal, i.e. minRTT.
//!
//! Aligning the reward with the interval: the session's receiver report rides on an ACK every
//! `report_interval` (100 ms), longer than a TI of tens of ms, and it reaches the sender about
//! one RTT after the data it describes was sent. A report that arrives at `now` and covers
//! `interval_us` of receiver time is therefore credited to the sends of
//! `[now − RTT − interval_us, now − RTT)` (RTT = the latest TI, the smallest srtt), split over the
//! intervals in that span in proportion to their overlap; an interval's transition is emitted
//! once the reports have passed its end. Crediting a report to the interval in which it arrived
//! (braid before) rewarded an action with what the previous one or two actions had caused, and an
//! interval in which no report arrived produced no transition at all.
//!
//! Prefix: the decision at boundary `t` reads the samples `s_{t−5}..s_t` of every path; LSTM1's
//! steps 0–4, the recurrent part `b + W_hh h` of its step 5 and the half of LSTM2's input
//! projection that reads step 4's states read only `s_{t−5}..s_{t−1}`, all known once the
//! decision at `t − 1` is made (a sample never changes once pushed). So after a decision the
//! scheduler starts the next decision's prefix from the state just decided on (`packed::Prefix`:
//! its steps 1–5 become steps 0–4, read from the input layout the decision made, not copied)
//! and runs it a unit per `select` inside the interval (seven units: LSTM1's five steps, the
//! projection half, step 5's recurrent sums, each ≈ 0.3 µs at most at K = 4). At the boundary
//! the prefix serves only if the inputs it read equal the new state's steps 0–4 bit for bit,
//! with the same path count, weights version and kernel. The equality needs no compare when the
//! decision uses the same history entries as the one before (histories change only when an
//! interval closes, at a decision, one sample each): the prefix carries the name of the
//! histories it was begun from (`lineage`: decision number and entries used), the decision passes
//! the name it continues, and on a match its steps 0–4 are copied from the prefix's inputs and
//! only step 5 is laid out (compared with the full layout in debug builds); otherwise the inputs
//! are laid out and compared. Then only the rest runs (step 5's input
//! term and cells, the projection's other half, LSTM2's recurrence, the core), with the same
//! operations on the same values as the full pass (whose step 5 adds its input term last for
//! this), so the Q-values are the same bit for bit. Otherwise (paths changed, weights swapped,
//! fewer than two units done) the full pass runs, as before. [`Edar::prefix_stats`] counts
//! both. The states decided on stay in a ring (`Edar::states`) that the decision and the
//! transitions read in place; a decision on the same entries as the one before writes its state
//! as that one's shifted a step plus the newest samples. Without an experience queue no closed
//! interval waits for its reports (they would only become transitions).
//!
//! Failed, rate-limited and backup paths are handled by [`TierGate`] and
//! [`PathView::can_send`]; nothing here allocates after [`Edar::new`].

pub mod network;
mod packed;
pub mod reward;
pub mod state;

use crate::decision::{Decision, PathSet};
use crate::packet::{PacketMeta, TrafficClass};
use crate::path::{MAX_PATHS, PathId, PathView};
use crate::sched::minrtt::{FastAndBest, fastest_and_best, lowest_rtt_with_room};
use crate::scheduler::{
    AckInfo, ParamError, ParamInfo, ReceiverReport, Scheduler, SchedulerInfo, SchedulerKind,
    in_range,
};
use crate::slot::{ExperienceSender, SlotReader};
use crate::tier::TierGate;
use crate::time::Timestamp;

use std::time::Duration;

pub use network::{EdarKernel, EdarNetwork, EdarNetworkError, EdarScratch, SplitMix64};
use packed::{Kernel, Prefix, PrefixUse};
pub use reward::{ReportTotals, RewardWeights, reward};
pub use state::{
    CONNECTION_FEATURES, EDAR_MAX_PATHS, EdarState, FEATURES, HISTORY, PathHistory, PathSample,
};

/// EdAR's two actions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum EdarAction {
    /// Every packet once (minRTT).
    #[default]
    Normal,
    /// Copies on the other paths with room.
    Redundant,
}

impl EdarAction {
    /// 0 for normal, 1 for redundant (the Q-network's output index).
    pub fn index(self) -> usize {
        match self {
            EdarAction::Normal => 0,
            EdarAction::Redundant => 1,
        }
    }

    /// The action of a Q-network output index (anything but 1 is normal).
    pub fn from_index(index: usize) -> Self {
        if index == 1 {
            EdarAction::Redundant
        } else {
            EdarAction::Normal
        }
    }
}

/// One interval's experience: `(s_t, a_t, r_t, s_{t+1})`. Fixed-size, so queueing it never
/// allocates.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EdarTransition {
    /// The state the action was chosen in.
    pub state: EdarState,
    /// The action taken for the interval.
    pub action: EdarAction,
    /// The reward measured at the receiver over the interval.
    pub reward: f32,
    /// The state at the end of the interval.
    pub next_state: EdarState,
    /// True when the flow ended after this interval (no bootstrap term).
    pub terminal: bool,
}

/// How EdAR picks its action.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EdarPolicy {
    /// ε-greedy on the Q-network (normal transmission when there are no weights).
    #[default]
    Learned,
    /// Always normal (offline data collection, Alg. 1).
    Normal,
    /// Always redundant (offline data collection, Alg. 1).
    Redundant,
    /// Normal or redundant with probability 1/2 each interval, from the seeded generator (offline
    /// data collection; braid's addition to Alg. 1). The fixed policies never take an action
    /// other than the previous one, so the state's `a_{t−1}` always equals `a_t` in their
    /// transitions and the Q-value of a switch is never trained.
    Switching,
}

/// Which path carries a packet placed in redundant mode; copies go on the other admitted paths
/// that have room at that instant (`redundant_placement`, docs/results.md observation 8).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RedundantPlacement {
    /// The lowest-RTT admitted path with window room, as in normal mode (minRTT); the default
    /// before issue #7 HW.
    LowestRttWithRoom,
    /// The fastest (lowest srtt) usable admitted path, room or not: while it has no room the
    /// packet waits, so a slower path carries only copies (the paper's redundant mode sends
    /// "the same packet" on the paths, not new data on the slow one).
    Fastest,
    /// The lowest-RTT admitted path with room unless its loss rate is higher than the fastest
    /// usable path's; then the packet waits for the fastest (new data stays off a path that
    /// loses more, which is what helps in a handoff's degradation, docs/results.md obs. 8).
    FastestWhenLossier,
    /// The default: as [`RedundantPlacement::FastestWhenLossier`], but the packet waits only
    /// when the path with room's loss rate is at least [`LOSSY_MARGIN`] above the fastest's, so
    /// the noise of the loss-rate average (a step of 1/64 per lost packet) at similar low losses
    /// does not trigger it and the paths are aggregated as with `LowestRttWithRoom`.
    #[default]
    FastestWhenLossy,
}

/// Loss-rate margin of [`RedundantPlacement::FastestWhenLossy`] (issue #7 HW): 5 percentage
/// points, chosen once before measuring it, knowing that the EdAR, OLMS and FALCON scenarios'
/// steady losses are at most 1.56 % and the gradual handoff's steps are 1, 2, 5, 10, 20 %.
pub const LOSSY_MARGIN: f32 = 0.05;

impl RedundantPlacement {
    /// Whether `best`, the lowest-RTT path with room, may carry a packet in redundant mode when
    /// `fastest` is the fastest usable path (room or not); otherwise the packet waits.
    fn may_carry(self, best: &PathView, fastest: &PathView) -> bool {
        match self {
            RedundantPlacement::LowestRttWithRoom => true,
            RedundantPlacement::Fastest => best.id == fastest.id,
            RedundantPlacement::FastestWhenLossier => best.loss_rate <= fastest.loss_rate,
            RedundantPlacement::FastestWhenLossy => {
                best.loss_rate < fastest.loss_rate + LOSSY_MARGIN
            }
        }
    }
}

/// Configuration of [`Edar`].
#[derive(Clone, Debug)]
pub struct EdarConfig {
    /// ε of the ε-greedy policy (0 = greedy).
    pub epsilon: f64,
    /// α, weight of wasted bandwidth in the reward (§VI: 1.0).
    pub alpha: f64,
    /// β, weight of out-of-order packets in the reward (§VI: 0.5).
    pub beta: f64,
    /// `B_t`, the receiver's buffer, bytes (Table II: 128 KB in settings i–iii).
    pub receive_buffer_bytes: f64,
    /// Goodput counted as 1.0 in the reward, Mbit/s.
    pub goodput_scale_mbps: f64,
    /// Seed of the ε-greedy generator.
    pub seed: u64,
    /// Learned or one of the fixed policies.
    pub policy: EdarPolicy,
    /// Redundant mode also through the session's redundant buffer (§IV-A), besides the copies
    /// made when a packet is placed; on by default (see the module doc).
    pub redundant_buffer: bool,
    /// Which path carries a packet placed in redundant mode (its copies go on the others).
    pub redundant_placement: RedundantPlacement,
    /// Where the weights come from; `None`: no network, the learned policy is normal.
    pub weights: Option<SlotReader<EdarNetwork>>,
    /// Where transitions go; `None`: not recorded.
    pub experience: Option<ExperienceSender<EdarTransition>>,
}

impl Default for EdarConfig {
    fn default() -> Self {
        EdarConfig {
            epsilon: 0.0,
            alpha: 1.0,
            beta: 0.5,
            receive_buffer_bytes: 131_072.0,
            goodput_scale_mbps: 10.0,
            seed: 0,
            policy: EdarPolicy::Learned,
            redundant_buffer: true,
            redundant_placement: RedundantPlacement::FastestWhenLossy,
            weights: None,
            experience: None,
        }
    }
}

impl PartialEq for EdarConfig {
    /// Parameters compare by value; the weight slot and the experience queue by whether they
    /// are set (and the weights' version).
    fn eq(&self, other: &Self) -> bool {
        self.epsilon == other.epsilon
            && self.alpha == other.alpha
            && self.beta == other.beta
            && self.receive_buffer_bytes == other.receive_buffer_bytes
            && self.goodput_scale_mbps == other.goodput_scale_mbps
            && self.seed == other.seed
            && self.policy == other.policy
            && self.redundant_buffer == other.redundant_buffer
            && self.redundant_placement == other.redundant_placement
            && self.weights.as_ref().map(SlotReader::version)
                == other.weights.as_ref().map(SlotReader::version)
            && self.experience.is_some() == other.experience.is_some()
    }
}

const SEED_RANGE: &str = "an integer in [0, 2^53]";

impl EdarConfig {
    /// Sets one parameter; `Ok(false)` when `name` is not EdAR's.
    pub fn set(&mut self, name: &str, value: f64) -> Result<bool, ParamError> {
        match name {
            "epsilon" => {
                self.epsilon = in_range("epsilon", value, 0.0, 1.0, "a probability in [0, 1]")?
            }
            "alpha" => self.alpha = in_range("alpha", value, 0.0, 100.0, "a weight in [0, 100]")?,
            "beta" => self.beta = in_range("beta", value, 0.0, 100.0, "a weight in [0, 100]")?,
            "receive_buffer_bytes" => {
                self.receive_buffer_bytes = in_range(
                    "receive_buffer_bytes",
                    value,
                    1_200.0,
                    1e12,
                    "bytes in [1200, 1e12]",
                )?;
            }
            "goodput_scale_mbps" => {
                self.goodput_scale_mbps = in_range(
                    "goodput_scale_mbps",
                    value,
                    0.001,
                    1e6,
                    "Mbit/s in [0.001, 1e6]",
                )?;
            }
            "policy" => {
                self.policy = match value {
                    0.0 => EdarPolicy::Learned,
                    1.0 => EdarPolicy::Normal,
                    2.0 => EdarPolicy::Redundant,
                    3.0 => EdarPolicy::Switching,
                    _ => {
                        return Err(ParamError::OutOfRange {
                            name: "policy",
                            value,
                            expected: "0 (learned), 1 (always normal), 2 (always redundant) or 3 \
                                       (random per interval)",
                        });
                    }
                };
            }
            "redundant_buffer" => {
                self.redundant_buffer = match value {
                    0.0 => false,
                    1.0 => true,
                    _ => {
                        return Err(ParamError::OutOfRange {
                            name: "redundant_buffer",
                            value,
                            expected: "0 (copies when a packet is placed) or 1 (the session's \
                                       redundant buffer)",
                        });
                    }
                };
            }
            "redundant_placement" => {
                self.redundant_placement = match value {
                    0.0 => RedundantPlacement::LowestRttWithRoom,
                    1.0 => RedundantPlacement::Fastest,
                    2.0 => RedundantPlacement::FastestWhenLossier,
                    3.0 => RedundantPlacement::FastestWhenLossy,
                    _ => {
                        return Err(ParamError::OutOfRange {
                            name: "redundant_placement",
                            value,
                            expected: "0 (the lowest-RTT path with room), 1 (the fastest \
                                       usable path, waiting for its room), 2 (the fastest \
                                       when the path with room loses more) or 3 (the fastest \
                                       when the path with room loses 5 points more)",
                        });
                    }
                };
            }
            "seed" => {
                let seed = in_range("seed", value, 0.0, 9_007_199_254_740_992.0, SEED_RANGE)?;
                if seed.fract() != 0.0 {
                    return Err(ParamError::OutOfRange {
                        name: "seed",
                        value,
                        expected: SEED_RANGE,
                    });
                }
                self.seed = seed as u64;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    fn reward_weights(&self) -> RewardWeights {
        RewardWeights {
            alpha: self.alpha as f32,
            beta: self.beta as f32,
            receive_buffer_packets: (self.receive_buffer_bytes / 1200.0) as f32,
            goodput_scale_mbps: self.goodput_scale_mbps as f32,
        }
    }
}

/// How EdAR's decisions used the pass computed ahead (the module docs, "Prefix"): counts since
/// [`Edar::new`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EdarPrefixStats {
    /// Decisions whose prefix was valid and complete: only the rest of the pass ran.
    pub ready: u64,
    /// Decisions whose prefix was valid but incomplete (too few packets in the interval): its
    /// remaining work ran at the decision, then the rest.
    pub finished: u64,
    /// Decisions of the network that ran the full pass: no prefix (the first decision, no
    /// paths), one that did not match (paths changed, weights swapped), or one with less than
    /// two of its seven units done (an interval with fewer than two packets), where the full pass
    /// costs less than finishing it.
    pub missed: u64,
    /// Of the decisions that used their prefix (ready or finished), those whose inputs were
    /// taken from it because the histories only shifted since it began (the same paths, one
    /// interval later: its inputs copied, the input compare skipped).
    pub continued: u64,
}

impl EdarPrefixStats {
    fn count(&mut self, used: PrefixUse, continued: bool) {
        if continued && used != PrefixUse::Missed {
            self.continued += 1;
        }
        match used {
            PrefixUse::Ready => self.ready += 1,
            PrefixUse::Finished => self.finished += 1,
            PrefixUse::Missed => self.missed += 1,
        }
    }
}

/// Per-path sums over the current interval.
#[derive(Clone, Copy, Debug, Default)]
struct PathAccumulator {
    samples: u32,
    rtt_us: f64,
    rto_us: f64,
    cwnd: f64,
    loss: f64,
    in_flight: f64,
    acked_bytes: u64,
}

impl PathAccumulator {
    fn observe(&mut self, p: &PathView) {
        self.samples += 1;
        self.rtt_us += f64::from(p.srtt_us);
        self.rto_us += f64::from(p.srtt_us) + 4.0 * f64::from(p.rttvar_us);
        self.cwnd += p.cwnd as f64;
        self.loss += f64::from(p.loss_rate);
        self.in_flight += p.bytes_in_flight as f64;
    }

    fn sample(&self, interval: Duration) -> PathSample {
        let n = f64::from(self.samples.max(1));
        let seconds = (interval.as_micros() as f64 / 1e6).max(1e-6);
        PathSample {
            rtt_us: self.rtt_us / n,
            rto_us: self.rto_us / n,
            throughput_bps: self.acked_bytes as f64 / seconds,
            cwnd_bytes: self.cwnd / n,
            loss_rate: self.loss / n,
            in_flight_bytes: self.in_flight / n,
        }
    }
}

/// Report totals credited to one interval (fractions of reports, hence `f64`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Credited {
    /// Receiver time credited, µs.
    covered_us: f64,
    delivered_bytes: f64,
    duplicate_bytes: f64,
    ooo_packets: f64,
}

impl Credited {
    fn add(&mut self, report: &ReceiverReport, fraction: f64, covered_us: f64) {
        self.covered_us += covered_us;
        self.delivered_bytes += report.delivered_bytes as f64 * fraction;
        self.duplicate_bytes += report.duplicate_bytes as f64 * fraction;
        self.ooo_packets += f64::from(report.ooo_packets) * fraction;
    }

    fn totals(&self) -> ReportTotals {
        // Rounded to whole units; `interval_us` ≥ 1 whenever anything was credited.
        ReportTotals {
            interval_us: self.covered_us.round().max(1.0) as u64,
            delivered_bytes: self.delivered_bytes.round() as u64,
            duplicate_bytes: self.duplicate_bytes.round() as u64,
            ooo_packets: self.ooo_packets.round() as u64,
        }
    }
}

/// A closed interval waiting for the reports that describe its sends.
#[derive(Clone, Copy, Debug, Default)]
struct Awaiting {
    /// Where its state is in [`Edar::states`]; its next state is the one after (mod `STATES`).
    state: usize,
    action: EdarAction,
    start: Timestamp,
    end: Timestamp,
    data_packets: u32,
    credited: Credited,
}

/// Closed intervals kept waiting for their reports: a report arrives about one RTT (≈ one TI)
/// plus one report interval after the sends it covers, i.e. a few intervals later; older ones
/// are emitted with what they have.
const AWAITING: usize = 8;

/// States kept, by decision number mod `STATES`: those of the closed intervals waiting (up to
/// `AWAITING`), of their next states and of the open interval, plus the one being written.
const STATES: usize = AWAITING + 2;

/// Shortest and longest decision interval, µs (guards against a 0 or absurd srtt).
const MIN_INTERVAL_US: u64 = 1_000;
const MAX_INTERVAL_US: u64 = 1_000_000;

/// The EdAR scheduler.
#[derive(Clone, Debug)]
pub struct Edar {
    config: EdarConfig,
    rewards: RewardWeights,
    rng: SplitMix64,
    scratch: Option<EdarScratch>,
    mode: EdarAction,
    interval_start: Option<Timestamp>,
    next_decision: Timestamp,
    accumulators: [PathAccumulator; EDAR_MAX_PATHS],
    histories: [PathHistory; EDAR_MAX_PATHS],
    /// Reports credited to the current (open) interval.
    credited: Credited,
    /// Closed intervals in order, oldest at `awaiting_head`; `awaiting_len` of them are in use.
    awaiting: Box<[Awaiting; AWAITING]>,
    awaiting_head: usize,
    awaiting_len: usize,
    /// The RTT by which a report lags the sends it describes (the latest TI).
    report_lag: Duration,
    /// Data (non-control) packets placed in the current interval.
    data_packets: u32,
    /// The states decided on, decision `n`'s at `n mod STATES` (written in place, read in
    /// place by the decision and the transitions: no copy at a boundary).
    states: Box<[EdarState; STATES]>,
    /// The action of the open interval (its state: the last one decided on).
    pending: Option<EdarAction>,
    receive_window: u64,
    decisions: u64,
    /// The history entries the last decision used ([`used_mask`]; `None` before the first).
    last_used: Option<u8>,
    redundant_decisions: u64,
    /// The next decision's pass computed ahead, a unit per `select` inside the interval (the
    /// module docs, "Prefix"); `None` without weights.
    prefix: Option<Box<Prefix>>,
    prefix_stats: EdarPrefixStats,
    /// Off only in tests that compare against the full pass at every decision.
    prefix_enabled: bool,
    /// The Q-values of the last decision the network made (tests compare them bit for bit).
    #[cfg(test)]
    last_q: Option<[f32; 2]>,
}

impl Edar {
    /// Catalogue entry.
    pub const INFO: SchedulerInfo = SchedulerInfo {
        kind: SchedulerKind::Edar,
        summary: "DQN choosing normal (minRTT) or redundant transmission once per min-RTT interval",
        source: "Han et al., EdAR, IEEE TMC, §IV-V (LSTM representation + 128/32 core, DQN)",
        params: &[
            ParamInfo {
                name: "epsilon",
                default: 0.0,
                description: "probability of a random action (online exploration)",
            },
            ParamInfo {
                name: "alpha",
                default: 1.0,
                description: "reward weight of wasted bandwidth (V_w)",
            },
            ParamInfo {
                name: "beta",
                default: 0.5,
                description: "reward weight of out-of-order packets (V_o)",
            },
            ParamInfo {
                name: "receive_buffer_bytes",
                default: 131_072.0,
                description: "receiver buffer B_t in the reward and state, bytes",
            },
            ParamInfo {
                name: "goodput_scale_mbps",
                default: 10.0,
                description: "goodput counted as 1.0 in the reward, Mbit/s",
            },
            ParamInfo {
                name: "policy",
                default: 0.0,
                description: "0 learned, 1 always normal, 2 always redundant, 3 random per \
                              interval (data collection)",
            },
            ParamInfo {
                name: "redundant_buffer",
                default: 1.0,
                description: "redundant mode: 1 copies at placement plus the session's redundant \
                              buffer (paper §IV-A), 0 copies at placement only (the shipped \
                              weights were trained with 0)",
            },
            ParamInfo {
                name: "redundant_placement",
                default: 3.0,
                description: "redundant mode: 0 a packet goes on the lowest-RTT path with room, \
                              1 it waits for the fastest usable path, 2 it waits for the \
                              fastest only when the path with room has a higher loss rate, 3 \
                              only when that rate is 5 points higher (copies on the others with \
                              room in every case)",
            },
            ParamInfo {
                name: "seed",
                default: 0.0,
                description: "seed of the epsilon-greedy generator",
            },
        ],
    };

    /// Builds the scheduler (allocates its scratch space once).
    pub fn new(config: &EdarConfig) -> Self {
        let scratch = config.weights.as_ref().map(|w| w.weights().scratch());
        Edar {
            rewards: config.reward_weights(),
            rng: SplitMix64(config.seed ^ 0xED4A_5EED),
            scratch,
            mode: EdarAction::Redundant,
            interval_start: None,
            next_decision: Timestamp::ZERO,
            accumulators: [PathAccumulator::default(); EDAR_MAX_PATHS],
            histories: [PathHistory::default(); EDAR_MAX_PATHS],
            credited: Credited::default(),
            awaiting: Box::new([Awaiting::default(); AWAITING]),
            awaiting_head: 0,
            awaiting_len: 0,
            report_lag: Duration::ZERO,
            data_packets: 0,
            states: Box::new([EdarState::EMPTY; STATES]),
            pending: None,
            receive_window: 0,
            decisions: 0,
            last_used: None,
            redundant_decisions: 0,
            prefix: config.weights.as_ref().map(|_| Prefix::new()),
            prefix_stats: EdarPrefixStats::default(),
            prefix_enabled: true,
            #[cfg(test)]
            last_q: None,
            config: config.clone(),
        }
    }

    /// The transmission mode of the current interval.
    pub fn mode(&self) -> EdarAction {
        self.mode
    }

    /// Decisions taken so far, and how many of them were redundant.
    pub fn decisions(&self) -> (u64, u64) {
        (self.decisions, self.redundant_decisions)
    }

    /// How the network's decisions used the pass computed ahead.
    pub fn prefix_stats(&self) -> EdarPrefixStats {
        self.prefix_stats
    }

    /// Turns the pass computed ahead off (every decision runs the full pass) or on; for tests
    /// that compare the two.
    #[cfg(test)]
    fn set_prefix_enabled(&mut self, enabled: bool) {
        self.prefix_enabled = enabled;
        if let Some(prefix) = self.prefix.as_mut() {
            prefix.clear();
        }
    }

    /// The version of the weights in use (`None` without a weight slot).
    pub fn weights_version(&self) -> Option<u64> {
        self.config.weights.as_ref().map(SlotReader::version)
    }

    /// The state the scheduler would observe if an interval ended now (for tests and tools).
    pub fn observe_state(&self, paths: &[PathView]) -> EdarState {
        let mut state = EdarState::EMPTY;
        observe_into(&self.histories, self.connection(paths), paths, &mut state);
        state
    }

    /// The connection features `M_t` if an interval ended now.
    fn connection(&self, paths: &[PathView]) -> [f32; CONNECTION_FEATURES] {
        let mut in_flight = 0u64;
        for p in paths {
            in_flight = in_flight.saturating_add(p.bytes_in_flight);
        }
        state::connection_features(
            self.mode == EdarAction::Redundant,
            self.receive_window,
            self.config.receive_buffer_bytes,
            in_flight,
        )
    }

    fn close_interval(&mut self, paths: &[PathView], now: Timestamp) {
        let start = self.interval_start.unwrap_or(now);
        let length = now.saturating_duration_since(start);
        for index in 0..EDAR_MAX_PATHS {
            let present = paths.iter().any(|p| p.id.index() == index && p.is_usable());
            if present {
                let sample = self.accumulators[index].sample(length);
                self.histories[index].push(sample.normalised());
            } else if !paths.iter().any(|p| p.id.index() == index) {
                self.histories[index].clear();
            } else {
                // Failed or rate-capped this interval: it delivered nothing.
                let mut sample = self.accumulators[index].sample(length);
                sample.throughput_bps = 0.0;
                self.histories[index].push(sample.normalised());
            }
            self.accumulators[index] = PathAccumulator::default();
        }
    }

    /// The action for the interval that begins, and whether the next decision's prefix was
    /// begun with it (the network's decision begins it from the inputs it laid out).
    fn choose(&mut self, slot: usize, used: u8) -> (EdarAction, bool) {
        let state = &self.states[slot];
        match self.config.policy {
            EdarPolicy::Normal => return (EdarAction::Normal, false),
            EdarPolicy::Redundant => return (EdarAction::Redundant, false),
            EdarPolicy::Switching => {
                return (
                    EdarAction::from_index((self.rng.next_u64() & 1) as usize),
                    false,
                );
            }
            EdarPolicy::Learned => {}
        }
        let (Some(reader), Some(scratch)) = (self.config.weights.as_ref(), self.scratch.as_mut())
        else {
            return (EdarAction::Normal, false);
        };
        if self.config.epsilon > 0.0 && self.rng.unit() < self.config.epsilon {
            return (
                EdarAction::from_index((self.rng.next_u64() & 1) as usize),
                false,
            );
        }
        let mut begun = false;
        let q = match self.prefix.as_mut() {
            Some(prefix) if self.prefix_enabled => {
                let continues = self.decisions.checked_sub(1).map(|d| lineage(d, used));
                let (q, how) = reader.weights().q_values_then_begin(
                    state,
                    reader.version(),
                    Kernel::best(),
                    prefix,
                    continues,
                );
                let continued = prefix.continued();
                prefix.set_lineage(lineage(self.decisions, used));
                begun = true;
                self.prefix_stats.count(how, continued);
                Ok(q)
            }
            _ => reader.weights().q_values(state, scratch),
        };
        #[cfg(test)]
        {
            self.last_q = q.as_ref().ok().copied();
        }
        let action = match q {
            Ok([normal, redundant]) if redundant > normal => EdarAction::Redundant,
            _ => EdarAction::Normal,
        };
        (action, begun)
    }

    fn decide(&mut self, paths: &[PathView], now: Timestamp) {
        self.close_interval(paths, now);
        // Decision `n`'s state goes to `n mod STATES`: no waiting interval reads that slot
        // (they read decisions `n − AWAITING − 1` to `n − 1`).
        let slot = (self.decisions % STATES as u64) as usize;
        let connection = self.connection(paths);
        let used = used_mask(paths);
        let previous = (slot + STATES - 1) % STATES;
        if self.last_used == Some(used)
            && let Ok([before, state]) = self.states.get_disjoint_mut([previous, slot])
        {
            // The same entries as the decision before: its state, one step on.
            observe_shifted(before, &self.histories, connection, used, state);
            debug_assert!({
                let mut full = EdarState::EMPTY;
                observe_into(&self.histories, connection, paths, &mut full);
                same_bits(&full, state)
            });
        } else {
            observe_into(&self.histories, connection, paths, &mut self.states[slot]);
        }
        self.last_used = Some(used);
        // The closed intervals wait for their reports only to become transitions: with no
        // experience queue (no learner) nothing waits.
        if let Some(action) = self.pending.take()
            && self.config.experience.is_some()
        {
            if self.awaiting_len == AWAITING {
                self.emit_oldest();
            }
            let at = (self.awaiting_head + self.awaiting_len) % AWAITING;
            self.awaiting[at] = Awaiting {
                state: (slot + STATES - 1) % STATES,
                action,
                start: self.interval_start.unwrap_or(now),
                end: now,
                data_packets: self.data_packets,
                credited: self.credited,
            };
            self.awaiting_len += 1;
        }
        self.credited = Credited::default();
        self.data_packets = 0;
        let (action, begun) = self.choose(slot, used);
        if !begun {
            self.begin_prefix(slot, used);
        }
        self.pending = Some(action);
        self.mode = action;
        self.decisions += 1;
        if action == EdarAction::Redundant {
            self.redundant_decisions += 1;
        }
        self.interval_start = Some(now);
        let ti = interval(paths);
        self.report_lag = ti;
        self.next_decision = now + ti;
    }

    /// Starts the next decision's prefix from the state just decided on (`states[slot]`; the
    /// learned policy with weights only: the fixed policies run no network).
    fn begin_prefix(&mut self, slot: usize, used: u8) {
        if self.config.policy != EdarPolicy::Learned || !self.prefix_enabled {
            return;
        }
        if let (Some(reader), Some(prefix)) = (self.config.weights.as_ref(), self.prefix.as_mut()) {
            reader.weights().prefix_begin(
                &self.states[slot],
                reader.version(),
                Kernel::best(),
                prefix,
            );
            prefix.set_lineage(lineage(self.decisions, used));
        }
    }

    /// One unit of the next decision's prefix, if any is left (dropped if the weights changed
    /// since it began: its units must all use the same weights).
    fn advance_prefix(&mut self) {
        let (Some(reader), Some(prefix)) = (self.config.weights.as_ref(), self.prefix.as_mut())
        else {
            return;
        };
        if !prefix.pending() {
            return;
        }
        if prefix.version() != Some(reader.version()) {
            prefix.clear();
            return;
        }
        reader.weights().prefix_advance(prefix);
    }

    /// Removes the oldest closed interval and sends its transition when reports were credited
    /// to it and it placed data.
    fn emit_oldest(&mut self) {
        if self.awaiting_len == 0 {
            return;
        }
        let a = &self.awaiting[self.awaiting_head];
        if a.credited.covered_us > 0.0
            && a.data_packets > 0
            && let Some(sender) = &self.config.experience
        {
            sender.send(EdarTransition {
                state: self.states[a.state],
                action: a.action,
                reward: reward(&a.credited.totals(), &self.rewards),
                next_state: self.states[(a.state + 1) % STATES],
                terminal: false,
            });
        }
        self.awaiting_head = (self.awaiting_head + 1) % AWAITING;
        self.awaiting_len -= 1;
    }

    /// Credits `report` (arrived at `now`) to the intervals whose sends it describes, and emits
    /// the intervals it has passed.
    fn credit(&mut self, report: &ReceiverReport, now: Timestamp) {
        if report.interval_us == 0 {
            return;
        }
        let span_end = now.saturating_sub(self.report_lag);
        let length = Duration::from_micros(u64::from(report.interval_us));
        let span_start = span_end.saturating_sub(length);
        let total_us = length.as_secs_f64() * 1e6;
        let overlap = |start: Timestamp, end: Timestamp| {
            let lo = start.max(span_start);
            let hi = end.min(span_end);
            hi.saturating_duration_since(lo).as_secs_f64() * 1e6
        };
        for k in 0..self.awaiting_len {
            let a = &mut self.awaiting[(self.awaiting_head + k) % AWAITING];
            let us = overlap(a.start, a.end);
            if us > 0.0 {
                a.credited.add(report, us / total_us, us);
            }
        }
        if let Some(start) = self.interval_start {
            let us = overlap(start, span_end);
            if us > 0.0 {
                self.credited.add(report, us / total_us, us);
            }
        }
        while self.awaiting_len > 0 && self.awaiting[self.awaiting_head].end <= span_end {
            self.emit_oldest();
        }
    }

    fn redundant(paths: &[PathView], len: u32, placement: RedundantPlacement) -> Decision {
        let best = if placement == RedundantPlacement::LowestRttWithRoom {
            lowest_rtt_with_room(paths, len)
        } else {
            // `best` has room and is admitted, so `fastest` exists whenever `best` does.
            let FastAndBest { fastest, best } = fastest_and_best(paths, len);
            best.filter(|b| fastest.is_some_and(|f| placement.may_carry(b, f)))
        };
        let Some(best) = best else {
            return Decision::Wait;
        };
        let gate = TierGate::new(paths);
        let mut set = PathSet::EMPTY;
        set.insert(best.id);
        for p in paths {
            if p.id.index() < MAX_PATHS && p.can_send(len) && gate.admits(p) {
                set.insert(p.id);
            }
        }
        if set.len() == 1 {
            Decision::Send(best.id)
        } else {
            Decision::Duplicate(set)
        }
    }
}

/// [`Edar::observe_state`] into `out` (every value written), from the paths' histories and the
/// connection features.
fn observe_into(
    histories: &[PathHistory; EDAR_MAX_PATHS],
    connection: [f32; CONNECTION_FEATURES],
    paths: &[PathView],
    out: &mut EdarState,
) {
    out.connection = connection;
    let mut count = 0usize;
    for (index, history) in histories.iter().enumerate() {
        if paths.iter().any(|p| p.id.index() == index) {
            history.write_into(&mut out.paths[count]);
            count += 1;
        }
    }
    for unused in &mut out.paths[count..] {
        *unused = [0.0; FEATURES * HISTORY];
    }
    out.path_count = count as u8;
}

/// The history entries a state holds: bit `i` set when path `i` is in `paths` (usable or not;
/// [`observe_into`]).
fn used_mask(paths: &[PathView]) -> u8 {
    let mut mask = 0u8;
    for p in paths {
        if p.id.index() < EDAR_MAX_PATHS {
            mask |= 1 << p.id.index();
        }
    }
    mask
}

/// The name of the histories decision `decision` saw with the entries `used`
/// ([`super::edar::packed::Prefix::set_lineage`]). Histories change only when an interval
/// closes, at a decision, where every entry in use takes one sample and the others are cleared;
/// so if decision `n` uses the same entries as decision `n − 1`, its state's steps 0–4 are
/// decision `n − 1`'s steps 1–5, and its `continues` is `lineage(n − 1, used)`.
fn lineage(decision: u64, used: u8) -> u64 {
    (decision << 8) | u64::from(used)
}

/// [`observe_into`] for a decision that uses the entries `used` as the decision before did,
/// whose state is `before`: since then every entry in use took one sample (histories change
/// only when an interval closes), so each is `before`'s shifted one step, with the newest sample.
fn observe_shifted(
    before: &EdarState,
    histories: &[PathHistory; EDAR_MAX_PATHS],
    connection: [f32; CONNECTION_FEATURES],
    used: u8,
    out: &mut EdarState,
) {
    out.connection = connection;
    let mut count = 0usize;
    for (index, history) in histories.iter().enumerate() {
        if used & (1 << index) != 0 {
            let (from, to) = (&before.paths[count], &mut out.paths[count]);
            to[..FEATURES * HISTORY - 1].copy_from_slice(&from[1..]);
            for (f, &value) in history.newest().iter().enumerate() {
                to[f * HISTORY + HISTORY - 1] = value;
            }
            count += 1;
        }
    }
    for unused in &mut out.paths[count..] {
        *unused = [0.0; FEATURES * HISTORY];
    }
    out.path_count = count as u8;
}

/// True when `a` and `b` hold the same values bit for bit (without allocating: the
/// no-allocation test runs debug builds, where this checks [`observe_shifted`]).
fn same_bits(a: &EdarState, b: &EdarState) -> bool {
    fn values(s: &EdarState) -> impl Iterator<Item = u32> + '_ {
        let paths = s.paths.as_flattened();
        s.connection.iter().chain(paths).map(|v| v.to_bits())
    }
    a.path_count == b.path_count && values(a).eq(values(b))
}

/// TI: the smallest srtt of the usable paths, clamped to [1 ms, 1 s].
fn interval(paths: &[PathView]) -> Duration {
    let min = paths
        .iter()
        .filter(|p| p.is_usable() && p.srtt_us > 0)
        .map(|p| u64::from(p.srtt_us))
        .min()
        .unwrap_or(MAX_INTERVAL_US);
    Duration::from_micros(min.clamp(MIN_INTERVAL_US, MAX_INTERVAL_US))
}

impl Scheduler for Edar {
    fn select(&mut self, paths: &[PathView], packet: &PacketMeta, now: Timestamp) -> Decision {
        if let Some(reader) = self.config.weights.as_mut() {
            reader.refresh();
        }
        for p in paths {
            if let Some(acc) = self.accumulators.get_mut(p.id.index()) {
                acc.observe(p);
            }
        }
        self.receive_window = packet.send_window;
        if packet.class != TrafficClass::Control {
            self.data_packets = self.data_packets.saturating_add(1);
        }
        if self.interval_start.is_none() {
            // The first interval of a connection is redundant (§IV-B).
            self.interval_start = Some(now);
            self.next_decision = now + interval(paths);
        } else if now >= self.next_decision {
            self.decide(paths, now);
        } else {
            self.advance_prefix();
        }
        match self.mode {
            // With the redundant buffer too, a packet is copied at placement onto the paths with
            // room; the buffer (`link_redundant_buffer`) copies it later onto the others.
            EdarAction::Redundant => {
                Edar::redundant(paths, packet.len, self.config.redundant_placement)
            }
            EdarAction::Normal => match lowest_rtt_with_room(paths, packet.len) {
                Some(p) => Decision::Send(p.id),
                None => Decision::Wait,
            },
        }
    }

    fn link_redundant_buffer(&self) -> bool {
        self.config.redundant_buffer && self.mode == EdarAction::Redundant
    }

    fn on_ack(&mut self, path: PathId, ack: &AckInfo, _now: Timestamp) {
        if let Some(acc) = self.accumulators.get_mut(path.index()) {
            acc.acked_bytes = acc.acked_bytes.saturating_add(ack.bytes);
        }
    }

    fn on_report(&mut self, report: &ReceiverReport, now: Timestamp) {
        self.credit(report, now);
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod placement_tests;
