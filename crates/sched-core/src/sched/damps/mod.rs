//! DaMPS: deadline-aware multipath packet scheduling (Chen, Cai, Zhang, Lui, IEEE MASS 2024;
//! seeds/damps.txt: Alg. 1-2, §II, §III).
//!
//! One *decision interval* (Alg. 1) places a batch of `M` packets (default 6):
//!
//! 1. **Fluctuation monitor** (line 1, [`ucb`]): each path's UCB bandit picks a strictness
//!    factor `α_j` and the delay estimate is `τ_j = α_j · OWD_j` (eq. 2), with `OWD_j` the path's
//!    one-way delay estimate [`PathView::owd_us`] (half the minimum RTT plus queueing seen in the
//!    receiver's timestamps; the paper halves the smoothed RTT).
//! 2. **Packet scheduling solver** (line 2): the LP relaxation of eq. 1 over the batch's time
//!    left `d_i = deadline_i − now`, the estimates `τ_j` and the remaining windows in packets
//!    `c_j = ⌊(cwnd − in flight) / len⌋`, solved exactly and allocation-free by
//!    `braid_lp::BatchProblem::solve_into`. A packet wholly assigned to a path is sent there.
//! 3. **Selective preservation** (lines 3-17): a packet left unassigned is kept (`Wait`) when
//!    `d_i >= 3 τ_j` on some path, and otherwise dropped (`Drop`) if it is a real-time datagram.
//!    Reliable packets are never dropped: they go to the lowest-`τ` path with room, late.
//!
//! Around it (§III): **cold start**: while a path has had no ACK yet, packets DaMPS places are
//! duplicated on it and on the chosen path (a new path's copy goes with one on the lowest-delay
//! known path); **fail-safe**: an interval in which some path had room but no packet was sent is
//! *impractical*; after `failsafe_intervals` (5) consecutive ones DaMPS hands its decisions to
//! [`Edf`] for the next `failsafe_intervals` intervals, then tries again; **rewards** (eq. 3-6):
//! when an interval ends each path's bandit gets `max(r_DM − r_UP, 0)`, where `r_UP` is the
//! interval's unsent fraction and `r_DM` the path's own deadline meeting ratio over its last
//! `L = 5` receiver reports that counted deadline packets on it ([`Scheduler::on_report`],
//! [`ReceiverReport::path_deadlines`]: met / total of the deadline datagrams that *arrived on
//! that path*, judged by the peer's session from relative budgets, no synchronised clocks).
//! The paper matches each ACK to the arm in use on its path by packet number; here a report
//! covers `report_interval` (100 ms), so its counts credit the arm in use when it arrives.
//! Datagrams the sender dropped itself are in no path's count (they are `r_UP`'s).
//!
//! **How the session's calls map to batches.** [`Scheduler::select_batch`] is the paper's
//! decision interval: the batch is solved as one LP. The session asks packet by packet
//! ([`Scheduler::select`]); there one interval is `M` consecutive decisions for deadline
//! packets: the arms are drawn when it starts, each packet is solved as a batch of one on the
//! current windows (the views refresh after every packet, so capacity used by earlier packets
//! is seen), and the reward and the fail-safe are judged when the `M`-th decision ends it. Both
//! preserve as Alg. 1 lines 10-15 do: a packet the LP leaves unassigned waits (`Wait`) when
//! `d >= 3τ_j` on some path, even while a path too slow for it has room (the LP would have
//! assigned it to any path with room and `τ_j < d`, so the path it waits for is a full one that
//! can still deliver it; the scheduler contract allows this wait for deadline packets, as for
//! EDF, `tests/properties.rs`). Packets without a deadline are placed by EDF (lowest RTT with
//! room) and are no part of any interval.

pub mod ucb;

use braid_lp::{BatchProblem, BatchSchedule, MAX_BATCH};

use crate::decision::{Decision, PathSet};
use crate::packet::{PacketMeta, TrafficClass};
use crate::path::{MAX_PATHS, PathId, PathState, PathView};
use crate::sched::edf::{Edf, EdfConfig};
use crate::scheduler::{
    AckInfo, ParamError, ParamInfo, ReceiverReport, Scheduler, SchedulerInfo, SchedulerKind,
    in_range,
};
use crate::tier::TierGate;
use crate::time::Timestamp;

use self::ucb::{MAX_WINDOW, StrictnessBandit};

/// Configuration of [`Damps`]; defaults are the paper's (§IV-A, §IV-C, §III).
#[derive(Clone, Debug, PartialEq)]
pub struct DampsConfig {
    /// `M`, packets per decision interval.
    pub batch_size: u32,
    /// `γ`, the reward discount.
    pub gamma: f64,
    /// `L`, receiver reports in the deadline meeting ratio.
    pub window: u32,
    /// Consecutive impractical intervals before falling back to EDF, and EDF intervals after.
    pub failsafe_intervals: u32,
    /// Keep an unassigned packet when `d >= preserve_factor · τ` on some path (paper: 3).
    pub preserve_factor: f64,
    /// Whether the fluctuation monitor runs (false: `α = 1` on every path, the paper's "w/o FM").
    pub monitor: bool,
}

impl Default for DampsConfig {
    fn default() -> Self {
        DampsConfig {
            batch_size: 6,
            gamma: 0.8,
            window: 5,
            failsafe_intervals: 5,
            preserve_factor: 3.0,
            monitor: true,
        }
    }
}

fn integer(
    name: &'static str,
    value: f64,
    high: f64,
    expected: &'static str,
) -> Result<u32, ParamError> {
    let v = in_range(name, value, 1.0, high, expected)?;
    if v.fract() == 0.0 {
        Ok(v as u32)
    } else {
        Err(ParamError::OutOfRange {
            name,
            value,
            expected,
        })
    }
}

impl DampsConfig {
    /// Sets parameter `name`; `Ok(false)` when DaMPS has no such parameter.
    pub fn set(&mut self, name: &str, value: f64) -> Result<bool, ParamError> {
        match name {
            "batch_size" => {
                self.batch_size = integer(
                    "batch_size",
                    value,
                    MAX_BATCH as f64,
                    "an integer in [1, 16]",
                )?;
            }
            "gamma" => self.gamma = in_range("gamma", value, 1e-9, 1.0, "a discount in (0, 1]")?,
            "window" => {
                self.window = integer("window", value, MAX_WINDOW as f64, "an integer in [1, 64]")?
            }
            "failsafe_intervals" => {
                self.failsafe_intervals = integer(
                    "failsafe_intervals",
                    value,
                    1e6,
                    "an integer in [1, 1000000]",
                )?;
            }
            "preserve_factor" => {
                self.preserve_factor =
                    in_range("preserve_factor", value, 0.0, 1e3, "a factor in [0, 1000]")?;
            }
            "monitor" => {
                let v = in_range("monitor", value, 0.0, 1.0, "0 (off) or 1 (on)")?;
                if v.fract() != 0.0 {
                    return Err(ParamError::OutOfRange {
                        name: "monitor",
                        value,
                        expected: "0 (off) or 1 (on)",
                    });
                }
                self.monitor = v == 1.0;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// The decision interval in progress.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Interval {
    decided: u32,
    sent: u32,
    room_seen: bool,
    paths: PathSet,
}

/// The candidate paths of one decision and their LP inputs.
#[derive(Clone, Copy, Debug)]
struct Candidates {
    ids: [PathId; MAX_PATHS],
    delays: [f64; MAX_PATHS],
    capacities: [f64; MAX_PATHS],
    room: [bool; MAX_PATHS],
    len: usize,
}

/// Batch LP + UCB fluctuation monitor + selective preservation + fail-safe (DaMPS).
#[derive(Clone, Debug)]
pub struct Damps {
    config: DampsConfig,
    bandits: [StrictnessBandit; MAX_PATHS],
    alpha: [f64; MAX_PATHS],
    acked: [bool; MAX_PATHS],
    interval: Interval,
    impractical_run: u32,
    edf_left: u32,
    edf: Edf,
    schedule: BatchSchedule,
    intervals: u64,
    failsafe_entries: u64,
}

impl Damps {
    /// Catalogue entry.
    pub const INFO: SchedulerInfo = SchedulerInfo {
        kind: SchedulerKind::Damps,
        summary: "batch LP over deadlines and one-way delays, UCB-tuned delay estimates, drops hopeless real-time packets; EDF fail-safe",
        source: "Chen et al., DaMPS, IEEE MASS 2024 (Alg. 1-2, eq. 1-7)",
        params: &[
            ParamInfo {
                name: "batch_size",
                default: 6.0,
                description: "M, packets per decision interval, integer in [1, 16]",
            },
            ParamInfo {
                name: "gamma",
                default: 0.8,
                description: "reward discount of the fluctuation monitor, in (0, 1]",
            },
            ParamInfo {
                name: "window",
                default: 5.0,
                description: "L, receiver reports in the deadline meeting ratio, integer in [1, 64]",
            },
            ParamInfo {
                name: "failsafe_intervals",
                default: 5.0,
                description: "impractical intervals before EDF, and EDF intervals after, integer >= 1",
            },
            ParamInfo {
                name: "preserve_factor",
                default: 3.0,
                description: "keep an unassigned packet when d >= factor * tau on some path",
            },
            ParamInfo {
                name: "monitor",
                default: 1.0,
                description: "fluctuation monitor on (1) or off (0, alpha = 1)",
            },
        ],
    };

    /// Builds the scheduler.
    pub fn new(config: &DampsConfig) -> Self {
        Damps {
            config: config.clone(),
            bandits: [StrictnessBandit::default(); MAX_PATHS],
            alpha: [1.0; MAX_PATHS],
            acked: [false; MAX_PATHS],
            interval: Interval::default(),
            impractical_run: 0,
            edf_left: 0,
            edf: Edf::new(&EdfConfig::default()),
            schedule: BatchSchedule::default(),
            intervals: 0,
            failsafe_entries: 0,
        }
    }

    /// The bandit of `path`.
    pub fn bandit(&self, path: PathId) -> Option<&StrictnessBandit> {
        self.bandits.get(path.index())
    }

    /// True while the fail-safe has handed decisions to EDF.
    pub fn in_failsafe(&self) -> bool {
        self.edf_left > 0
    }

    /// Intervals completed, and times the fail-safe engaged.
    pub fn counters(&self) -> (u64, u64) {
        (self.intervals, self.failsafe_entries)
    }

    /// Starts an interval: each known path's bandit draws its strictness factor.
    fn begin_interval(&mut self, paths: &[PathView]) {
        self.interval = Interval::default();
        if self.edf_left > 0 {
            return;
        }
        for p in paths {
            let i = p.id.index();
            if i < MAX_PATHS && p.state != PathState::Failed {
                self.alpha[i] = if self.config.monitor {
                    self.bandits[i].choose()
                } else {
                    1.0
                };
            }
        }
    }

    /// Ends the interval: rewards (eq. 5-6) and the fail-safe's bookkeeping.
    fn end_interval(&mut self) {
        let iv = self.interval;
        self.interval = Interval::default();
        if iv.decided == 0 {
            return;
        }
        self.intervals += 1;
        if self.edf_left > 0 {
            self.edf_left -= 1;
            return;
        }
        if self.config.monitor {
            let unsent = f64::from(iv.decided - iv.sent.min(iv.decided)) / f64::from(iv.decided);
            for id in iv.paths.iter() {
                if let Some(b) = self.bandits.get_mut(id.index()) {
                    b.reward(unsent, self.config.gamma);
                }
            }
        }
        if iv.sent == 0 && iv.room_seen {
            self.impractical_run += 1;
            if self.impractical_run >= self.config.failsafe_intervals {
                self.impractical_run = 0;
                self.edf_left = self.config.failsafe_intervals;
                self.failsafe_entries += 1;
            }
        } else {
            self.impractical_run = 0;
        }
    }

    /// The admitted, live paths with `τ_j` and `c_j` for packets of `len` bytes.
    fn candidates(&self, paths: &[PathView], len: u32) -> Candidates {
        let gate = TierGate::new(paths);
        let mut c = Candidates {
            ids: [PathId(0); MAX_PATHS],
            delays: [0.0; MAX_PATHS],
            capacities: [0.0; MAX_PATHS],
            room: [false; MAX_PATHS],
            len: 0,
        };
        for p in paths {
            let i = p.id.index();
            if i >= MAX_PATHS || c.len >= MAX_PATHS || !p.is_live() || !gate.admits(p) {
                continue;
            }
            let owd_us = if p.owd_us > 0 {
                p.owd_us
            } else {
                p.srtt_us / 2
            };
            let room = p.can_send(len);
            c.ids[c.len] = p.id;
            c.delays[c.len] = self.alpha[i] * f64::from(owd_us) / 1_000.0;
            c.capacities[c.len] = if room {
                (p.headroom() / u64::from(len.max(1))) as f64
            } else {
                0.0
            };
            c.room[c.len] = room;
            c.len += 1;
        }
        c
    }

    /// Alg. 1 lines 10-17 for a packet the LP left unassigned, with `d` ms left.
    fn unassigned(
        &self,
        c: &Candidates,
        packet: &PacketMeta,
        d: f64,
        may_preserve: bool,
    ) -> Decision {
        let any_room = c.room[..c.len].iter().any(|&r| r);
        let preservable = c.delays[..c.len]
            .iter()
            .any(|&tau| d >= self.config.preserve_factor * tau);
        if preservable && (may_preserve || !any_room) {
            return Decision::Wait;
        }
        if packet.class == TrafficClass::Realtime {
            return Decision::Drop;
        }
        // A reliable packet must arrive, late or not: the lowest-delay path with room.
        let mut best: Option<usize> = None;
        for j in (0..c.len).filter(|&j| c.room[j]) {
            if best.is_none_or(|b| c.delays[j] < c.delays[b]) {
                best = Some(j);
            }
        }
        best.map_or(Decision::Wait, |j| Decision::Send(c.ids[j]))
    }

    /// Cold start (§III): copies on paths that have had no ACK yet, and a known path's copy
    /// with a new path's packet.
    fn cold_start(&self, c: &Candidates, chosen: usize) -> Decision {
        let mut set = PathSet::EMPTY;
        set.insert(c.ids[chosen]);
        let mut warm: Option<usize> = None;
        for j in (0..c.len).filter(|&j| c.room[j]) {
            if !self.acked[c.ids[j].index()] {
                set.insert(c.ids[j]);
            } else if warm.is_none_or(|w| c.delays[j] < c.delays[w]) {
                warm = Some(j);
            }
        }
        if !self.acked[c.ids[chosen].index()]
            && let Some(w) = warm
        {
            set.insert(c.ids[w]);
        }
        if set.len() > 1 {
            Decision::Duplicate(set)
        } else {
            Decision::Send(c.ids[chosen])
        }
    }

    /// Counts one decision of the current interval.
    fn note(&mut self, c: &Candidates, decision: Decision) {
        self.interval.decided += 1;
        self.interval.room_seen |= c.room[..c.len].iter().any(|&r| r);
        for id in &c.ids[..c.len] {
            self.interval.paths.insert(*id);
        }
        if matches!(decision, Decision::Send(_) | Decision::Duplicate(_)) {
            self.interval.sent += 1;
        }
    }
}

/// Time left until `deadline`, ms (negative when it has passed).
fn time_left_ms(deadline: Timestamp, now: Timestamp) -> f64 {
    if deadline >= now {
        (deadline.as_micros() - now.as_micros()) as f64 / 1_000.0
    } else {
        -((now.as_micros() - deadline.as_micros()) as f64) / 1_000.0
    }
}

impl Scheduler for Damps {
    fn select(&mut self, paths: &[PathView], packet: &PacketMeta, now: Timestamp) -> Decision {
        let Some(deadline) = packet.deadline else {
            return self.edf.select(paths, packet, now);
        };
        if self.interval.decided == 0 {
            self.begin_interval(paths);
        }
        let c = self.candidates(paths, packet.len);
        let decision = if self.edf_left > 0 {
            self.edf.select(paths, packet, now)
        } else {
            let d = time_left_ms(deadline, now);
            let problem = BatchProblem {
                deadlines: &[d],
                delays: &c.delays[..c.len],
                capacities: &c.capacities[..c.len],
            };
            let assigned = if c.len > 0 && problem.solve_into(&mut self.schedule).is_ok() {
                self.schedule.path_of(0)
            } else {
                None
            };
            match assigned {
                Some(j) => self.cold_start(&c, j),
                // Alg. 1 lines 10-15: preserved when d >= 3τ_j on some path, which (the LP
                // having left it unassigned) can only be a full path fast enough for it.
                None => self.unassigned(&c, packet, d, true),
            }
        };
        self.note(&c, decision);
        if self.interval.decided >= self.config.batch_size {
            self.end_interval();
        }
        decision
    }

    fn select_batch(
        &mut self,
        paths: &[PathView],
        packets: &[PacketMeta],
        decisions: &mut [Decision],
        now: Timestamp,
    ) {
        let n = packets.len().min(decisions.len());
        let mut start = 0;
        while start < n {
            let end = (start + MAX_BATCH).min(n);
            self.solve_batch(paths, &packets[start..end], &mut decisions[start..end], now);
            start = end;
        }
    }

    fn on_ack(&mut self, path: PathId, _ack: &AckInfo, _now: Timestamp) {
        if let Some(a) = self.acked.get_mut(path.index()) {
            *a = true;
        }
    }

    fn on_path_state(&mut self, path: PathId, state: PathState, _now: Timestamp) {
        // A path that failed is new again when it returns: cold-start it.
        if state == PathState::Failed
            && let Some(a) = self.acked.get_mut(path.index())
        {
            *a = false;
        }
    }

    fn on_report(&mut self, report: &ReceiverReport, _now: Timestamp) {
        // Eq. 3: path j's r_DM counts the deadline packets that arrived on path j; a report
        // with none from a path is no feedback for its bandit.
        let window = self.config.window as usize;
        for (b, counts) in self.bandits.iter_mut().zip(&report.path_deadlines) {
            if counts.total > 0 {
                b.push_report(counts.met, counts.total, window);
            }
        }
    }
}

impl Damps {
    /// One decision interval over at most `MAX_BATCH` packets (Alg. 1 as written).
    fn solve_batch(
        &mut self,
        paths: &[PathView],
        packets: &[PacketMeta],
        decisions: &mut [Decision],
        now: Timestamp,
    ) {
        self.end_interval();
        self.begin_interval(paths);
        let len = packets.iter().map(|p| p.len).max().unwrap_or(1);
        let c = self.candidates(paths, len);
        // Deadline packets of the batch, by position.
        let mut rows = [0usize; MAX_BATCH];
        let mut deadlines = [0.0f64; MAX_BATCH];
        let mut m = 0;
        for (i, p) in packets.iter().enumerate() {
            if let Some(d) = p.deadline
                && m < MAX_BATCH
            {
                rows[m] = i;
                deadlines[m] = time_left_ms(d, now);
                m += 1;
            }
        }
        let solved = self.edf_left == 0
            && m > 0
            && c.len > 0
            && BatchProblem {
                deadlines: &deadlines[..m],
                delays: &c.delays[..c.len],
                capacities: &c.capacities[..c.len],
            }
            .solve_into(&mut self.schedule)
            .is_ok();
        for (i, (packet, decision)) in packets.iter().zip(decisions.iter_mut()).enumerate() {
            let row = rows[..m].iter().position(|&r| r == i);
            *decision = match row {
                Some(row) if solved => match self.schedule.path_of(row) {
                    Some(j) => self.cold_start(&c, j),
                    None => self.unassigned(&c, packet, deadlines[row], true),
                },
                _ => self.edf.select(paths, packet, now),
            };
            if row.is_some() {
                self.note(&c, *decision);
            }
        }
        self.end_interval();
    }
}

#[cfg(test)]
mod tests;
