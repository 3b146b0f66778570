//! Spurious losses: packets declared lost that are acknowledged after all, because the link
//! reordered them (or delayed them far longer than the others).
//!
//! RFC 9002 §6.1.1-6.1.2 let an implementation adapt its loss thresholds to a path that
//! reorders, and §7 leaves undoing a congestion response to it. A path remembers its last
//! [`LOST_RECORDS`] packets declared lost. When one is acknowledged, the packet threshold grows
//! past the distance it was overtaken by (up to [`MAX_PACKET_THRESHOLD`]) and the time
//! threshold past the delay it came with (up to twice the RTT); when every packet whose loss
//! caused a window reduction proves spurious, the reduction is undone (as Linux undoes a
//! recovery whose retransmissions all prove spurious). After [`FORGET_AFTER_REDUCTIONS`] window
//! reductions in a row without a spurious loss the path is taken to reorder no more and the
//! thresholds go back to RFC 9002's (as Linux's RACK shrinks its reordering window after 16
//! recoveries without a DSACK). Without this, a link whose jitter lets
//! packets overtake each other (netem's `jitter` does, and so do some radio links) had every
//! overtaken packet taken for a congestion signal: a 30 MB download over a 30 Mbit/s link with
//! 1 ms of jitter took 57 s instead of 8.5 s.

use std::time::Duration;

use braid_sched_core::Timestamp;

use super::congestion::{AnyController, Controller};
use super::frame::AckFrame;

/// RFC 9002 §6.1.1 packet reordering threshold.
pub const PACKET_THRESHOLD: u64 = 3;
/// The most the packet threshold grows to on a path that reorders.
pub const MAX_PACKET_THRESHOLD: u64 = 256;
/// Packets declared lost that are remembered, to find out whether they arrive after all.
const LOST_RECORDS: usize = 64;
/// Window reductions in a row with no spurious loss after which the thresholds go back to
/// RFC 9002's.
pub const FORGET_AFTER_REDUCTIONS: u32 = 16;

/// How much a path reorders, learned from packets declared lost that arrived after all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reordering {
    /// Packets declared lost and acknowledged afterwards.
    pub spurious_losses: u64,
    /// Window reductions undone: every packet whose loss caused one was acknowledged after all.
    pub undone_reductions: u64,
    /// The packet threshold: a packet is lost once one sent this many later was acknowledged.
    pub packet_threshold: u64,
    /// What the time threshold adds to the RTT (it is at least 1/8 of it).
    pub time_slack: Duration,
}

/// A packet declared lost, remembered in case its acknowledgement still comes.
#[derive(Clone, Copy, Debug)]
struct LostRecord {
    /// `u64::MAX`: an empty slot.
    pn: u64,
    time_sent: Timestamp,
    /// The largest packet number acknowledged when it was declared lost.
    largest_acked: u64,
    /// The congestion episode (window reduction) its loss belongs to.
    episode: u32,
}

const EMPTY: LostRecord = LostRecord {
    pn: u64::MAX,
    time_sent: Timestamp::ZERO,
    largest_acked: 0,
    episode: 0,
};

/// The controller as it was before the window reduction of a congestion episode, kept until
/// every packet whose loss the episode answered is either acknowledged after all (then the
/// reduction is undone) or forgotten.
#[derive(Clone, Debug)]
struct Undo {
    before: AnyController,
    episode: u32,
    /// The episode's lost packets not yet acknowledged.
    pending: u32,
}

/// One path's record of its recent losses and what it learned from them.
#[derive(Clone, Debug)]
pub(crate) struct LossHistory {
    records: [LostRecord; LOST_RECORDS],
    next: usize,
    /// Records in use: an ACK looks at the records only when there are some.
    live: usize,
    /// Records written since the last [`LossHistory::after_congestion_event`].
    recorded: u32,
    episode: u32,
    undo: Option<Undo>,
    reordering: Reordering,
    /// Window reductions since the last spurious loss.
    reductions_since_spurious: u32,
}

impl Default for LossHistory {
    fn default() -> Self {
        LossHistory {
            records: [EMPTY; LOST_RECORDS],
            next: 0,
            live: 0,
            recorded: 0,
            episode: 0,
            undo: None,
            reductions_since_spurious: 0,
            reordering: Reordering {
                spurious_losses: 0,
                undone_reductions: 0,
                packet_threshold: PACKET_THRESHOLD,
                time_slack: Duration::ZERO,
            },
        }
    }
}

impl LossHistory {
    /// What was learned so far.
    pub fn reordering(&self) -> Reordering {
        self.reordering
    }

    /// How long after it was sent a packet is lost, for a path whose RTT is `rtt`: RFC 9002's
    /// 9/8 of it, or more where the path delayed packets longer.
    pub fn loss_delay(&self, rtt: Duration) -> Duration {
        (rtt * 9 / 8).max(rtt + self.reordering.time_slack)
    }

    /// Remembers packet `pn`, sent at `time_sent`, declared lost while `largest_acked` was the
    /// largest packet acknowledged.
    pub fn record_lost(&mut self, pn: u64, time_sent: Timestamp, largest_acked: u64) {
        if self.records[self.next].pn == u64::MAX {
            self.live += 1;
        }
        self.records[self.next] = LostRecord {
            pn,
            time_sent,
            largest_acked,
            episode: self.episode,
        };
        self.next = (self.next + 1) % LOST_RECORDS;
        self.recorded = self.recorded.saturating_add(1);
    }

    /// After the losses just recorded were reported to the controller: `before` is a copy of
    /// the controller from before the report (`None`: not one that is undone), `window` its
    /// window then. A report that reduced the window starts a new episode, undone if all its
    /// losses prove spurious; one that did not (the controller was still recovering) adds its
    /// losses to the current episode.
    pub fn after_congestion_event(
        &mut self,
        before: Option<AnyController>,
        window: u64,
        persistent: bool,
        cc: &AnyController,
    ) {
        let recorded = std::mem::take(&mut self.recorded);
        if cc.window() < window {
            self.episode = self.episode.wrapping_add(1);
            self.reductions_since_spurious = self.reductions_since_spurious.saturating_add(1);
            if self.reductions_since_spurious >= FORGET_AFTER_REDUCTIONS {
                // Real losses all along: the path no longer reorders.
                self.reordering.packet_threshold = PACKET_THRESHOLD;
                self.reordering.time_slack = Duration::ZERO;
            }
            for k in 1..=(recorded as usize).min(LOST_RECORDS) {
                self.records[(self.next + LOST_RECORDS - k) % LOST_RECORDS].episode = self.episode;
            }
            // More losses than records: some can never be matched, so the episode stays.
            self.undo = before
                .filter(|_| !persistent && recorded as usize <= LOST_RECORDS)
                .map(|before| Undo {
                    before,
                    episode: self.episode,
                    pending: recorded,
                });
        } else if let Some(undo) = &mut self.undo
            && undo.episode == self.episode
        {
            undo.pending = undo.pending.saturating_add(recorded);
        }
    }

    /// The controller was replaced or resized: a reduction from before is no longer undone.
    pub fn forget_undo(&mut self) {
        self.undo = None;
    }

    /// Finds packets declared lost that `ack` acknowledges after all, widens the thresholds so
    /// that packets overtaken as far, or delayed as long, are waited for next time, and undoes
    /// a reduction all of whose losses proved spurious. Records of packets sent more than
    /// `forget_after` before `now` are dropped first: a packet that late is as good as lost.
    pub fn on_ack(
        &mut self,
        ack: &AckFrame<'_>,
        now: Timestamp,
        srtt: Duration,
        forget_after: Duration,
        cc: &mut AnyController,
    ) {
        if self.live == 0 {
            return;
        }
        let stale_before = now.saturating_sub(forget_after);
        let mut oldest = u64::MAX;
        for record in &mut self.records {
            if record.pn != u64::MAX && record.time_sent < stale_before {
                *record = EMPTY;
                self.live -= 1;
            }
            oldest = oldest.min(record.pn);
        }
        if oldest == u64::MAX {
            return;
        }
        for (lo, hi) in ack.ranges() {
            // Ranges come highest first.
            if hi < oldest {
                break;
            }
            for i in 0..LOST_RECORDS {
                let record = self.records[i];
                if record.pn >= lo && record.pn <= hi {
                    self.records[i] = EMPTY;
                    self.live -= 1;
                    self.on_spurious(record, now, srtt, cc);
                }
            }
        }
    }

    fn on_spurious(
        &mut self,
        record: LostRecord,
        now: Timestamp,
        srtt: Duration,
        cc: &mut AnyController,
    ) {
        self.reductions_since_spurious = 0;
        let r = &mut self.reordering;
        r.spurious_losses += 1;
        let overtaken_by = record.largest_acked.saturating_sub(record.pn);
        r.packet_threshold = r
            .packet_threshold
            .max(overtaken_by + 1)
            .min(MAX_PACKET_THRESHOLD);
        let late_by = now
            .saturating_duration_since(record.time_sent)
            .saturating_sub(srtt);
        r.time_slack = r.time_slack.max(late_by.min(srtt));
        let Some(undo) = &mut self.undo else {
            return;
        };
        if undo.episode != record.episode {
            return;
        }
        // Each record is matched once, and counted once in `pending`; saturating all the same,
        // so that no acknowledgement a peer can send makes this panic.
        undo.pending = undo.pending.saturating_sub(1);
        if undo.pending == 0 {
            if undo.before.window() > cc.window() {
                cc.undo_to(&undo.before);
                r.undone_reductions += 1;
            }
            self.undo = None;
        }
    }
}
