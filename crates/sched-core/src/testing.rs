//! The one scheduler test harness, shared by sched-core's tests and any crate that wants to
//! drive a scheduler against a simple path model (the testbed, benches).
//!
//! A [`Harness`] owns a scheduler and a set of paths. Tests set each path's RTT, window, bytes in
//! flight, state and rate cap, then call [`Harness::select`], which checks the decision against
//! the contract ([`check_decision`]) and applies it: every chosen path gets the packet's bytes in
//! flight and the scheduler hears [`Scheduler::on_sent`]. Acknowledgements and losses are fed
//! packet by packet ([`Harness::ack_oldest`], [`Harness::lose_oldest`]) or by time
//! ([`Harness::deliver_due`]: a packet is acknowledged one srtt after it was sent), so bytes in
//! flight stay conserved: each path's `bytes_in_flight` always equals the bytes of its
//! outstanding packets ([`Harness::in_flight_conserved`]).
//!
//! This is test support: it allocates freely and is never on the hot path.

use std::collections::VecDeque;
use std::time::Duration;

use crate::decision::Decision;
use crate::packet::PacketMeta;
use crate::path::{PathId, PathState, PathView};
use crate::scheduler::{AckInfo, AnyScheduler, ReceiverReport, Scheduler, SchedulerKind};
use crate::tier::TierGate;
use crate::time::Timestamp;

/// A way a decision broke the scheduler contract.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Violation {
    /// The decision names a path that is not in the view.
    #[error("decision names path {0:?}, which is not in the view")]
    UnknownPath(PathId),
    /// The decision names a failed or rate-capped path.
    #[error("decision names path {0:?}, which is failed or rate-capped")]
    Unusable(PathId),
    /// The decision names a path whose window has no room for the packet.
    #[error("decision names path {0:?}, whose window has no room for the packet")]
    NoHeadroom(PathId),
    /// The decision names a backup path while a primary path was live.
    #[error("decision names backup path {0:?} while a primary path was live")]
    TierNotAdmitted(PathId),
    /// A duplicate decision with fewer than two paths.
    #[error("duplicate decision over {0} path(s)")]
    EmptyDuplicate(usize),
    /// A packet without a deadline, or a reliable one, was dropped.
    #[error("a packet that may not be dropped (reliable or without deadline) was dropped")]
    IllegalDrop,
}

/// Checks `decision` for `packet` against the contract: every named path is in the view,
/// usable, has window room for the packet, and its tier is admitted; duplicates name at least
/// two paths; only unreliable packets with a deadline are dropped.
pub fn check_decision(
    paths: &[PathView],
    packet: &PacketMeta,
    decision: Decision,
) -> Result<(), Violation> {
    if let Decision::Duplicate(set) = decision
        && set.len() < 2
    {
        return Err(Violation::EmptyDuplicate(set.len()));
    }
    if decision == Decision::Drop
        && (packet.deadline.is_none() || packet.class != crate::TrafficClass::Realtime)
    {
        return Err(Violation::IllegalDrop);
    }
    let gate = TierGate::new(paths);
    for id in decision.paths().iter() {
        let path = paths
            .iter()
            .find(|p| p.id == id)
            .ok_or(Violation::UnknownPath(id))?;
        if !path.is_usable() {
            return Err(Violation::Unusable(id));
        }
        if !path.can_send(packet.len) {
            return Err(Violation::NoHeadroom(id));
        }
        if !gate.admits(path) {
            return Err(Violation::TierNotAdmitted(id));
        }
    }
    Ok(())
}

/// True when some usable path whose tier is admitted has room for the packet.
pub fn any_admitted_room(paths: &[PathView], packet: &PacketMeta) -> bool {
    let gate = TierGate::new(paths);
    paths
        .iter()
        .any(|p| p.can_send(packet.len) && gate.admits(p))
}

/// The lowest-srtt usable, admitted path, whether or not it has room.
pub fn fastest_admitted(paths: &[PathView]) -> Option<PathId> {
    let gate = TierGate::new(paths);
    paths
        .iter()
        .filter(|p| p.is_usable() && gate.admits(p))
        .min_by_key(|p| (p.srtt_us, p.id))
        .map(|p| p.id)
}

/// A packet the harness considers outstanding on a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Outstanding {
    bytes: u64,
    sent: Timestamp,
}

/// A scheduler driven over modelled paths; see the module docs.
#[derive(Debug)]
pub struct Harness {
    /// The scheduler under test.
    pub scheduler: AnyScheduler,
    paths: Vec<PathView>,
    outstanding: Vec<VecDeque<Outstanding>>,
    sent: Vec<u64>,
    now: Timestamp,
}

impl Harness {
    /// `scheduler` over `paths`; path `i` in the slice must have `PathId(i)`. Bytes already in
    /// flight on a path count as one outstanding chunk sent at time zero.
    pub fn new(scheduler: AnyScheduler, paths: Vec<PathView>) -> Self {
        let outstanding = paths
            .iter()
            .map(|p| {
                let mut q = VecDeque::new();
                if p.bytes_in_flight > 0 {
                    q.push_back(Outstanding {
                        bytes: p.bytes_in_flight,
                        sent: Timestamp::ZERO,
                    });
                }
                q
            })
            .collect();
        let sent = vec![0; paths.len()];
        Harness {
            scheduler,
            paths,
            outstanding,
            sent,
            now: Timestamp::ZERO,
        }
    }

    /// `kind` with its defaults over `k` idle primary paths: path `i` has srtt `10 + 15·i` ms and
    /// a 30 kB window.
    pub fn with_kind(kind: SchedulerKind, k: usize) -> Self {
        let paths = (0..k)
            .map(|i| PathView::new(PathId(i as u8), 10_000 + 15_000 * i as u32, 30_000))
            .collect();
        Harness::new(AnyScheduler::with_defaults(kind), paths)
    }

    /// The current path views.
    pub fn paths(&self) -> &[PathView] {
        &self.paths
    }

    /// The current time.
    pub fn now(&self) -> Timestamp {
        self.now
    }

    /// Packets (copies included) sent on each path so far.
    pub fn sent(&self) -> &[u64] {
        &self.sent
    }

    /// Sets path `i`'s smoothed RTT (its rttvar becomes a quarter of it, its one-way delay half).
    pub fn set_rtt(&mut self, i: usize, srtt_us: u32) {
        let p = &mut self.paths[i];
        p.srtt_us = srtt_us;
        p.rttvar_us = srtt_us / 4;
        p.min_rtt_us = p.min_rtt_us.min(srtt_us);
        p.owd_us = srtt_us / 2;
    }

    /// Sets path `i`'s congestion window.
    pub fn set_cwnd(&mut self, i: usize, cwnd: u64) {
        self.paths[i].cwnd = cwnd;
    }

    /// Replaces what is in flight on path `i` with one chunk of `bytes` sent now.
    pub fn set_in_flight(&mut self, i: usize, bytes: u64) {
        self.outstanding[i].clear();
        if bytes > 0 {
            self.outstanding[i].push_back(Outstanding {
                bytes,
                sent: self.now,
            });
        }
        self.paths[i].bytes_in_flight = bytes;
    }

    /// Sets path `i`'s state and tells the scheduler.
    pub fn set_state(&mut self, i: usize, state: PathState) {
        self.paths[i].state = state;
        let id = self.paths[i].id;
        self.scheduler.on_path_state(id, state, self.now);
    }

    /// Sets whether path `i`'s rate cap holds it back.
    pub fn set_rate_limited(&mut self, i: usize, limited: bool) {
        self.paths[i].rate_limited = limited;
    }

    /// Sets path `i`'s configured weight.
    pub fn set_weight(&mut self, i: usize, weight: u16) {
        self.paths[i].weight = weight;
    }

    /// Moves time forward.
    pub fn advance(&mut self, d: Duration) {
        self.now += d;
    }

    /// Asks the scheduler about `packet`, checks the answer and applies it.
    pub fn select(&mut self, packet: &PacketMeta) -> Result<Decision, Violation> {
        let decision = self.scheduler.select(&self.paths, packet, self.now);
        check_decision(&self.paths, packet, decision)?;
        for id in decision.paths().iter() {
            let i = id.index();
            self.paths[i].bytes_in_flight += u64::from(packet.len);
            self.outstanding[i].push_back(Outstanding {
                bytes: u64::from(packet.len),
                sent: self.now,
            });
            self.sent[i] += 1;
            self.scheduler.on_sent(id, packet, self.now);
        }
        Ok(decision)
    }

    /// Acknowledges the oldest outstanding packet on path `i` with an RTT sample of the path's
    /// srtt; false when nothing was outstanding.
    pub fn ack_oldest(&mut self, i: usize) -> bool {
        let Some(o) = self.outstanding[i].pop_front() else {
            return false;
        };
        let p = &mut self.paths[i];
        p.bytes_in_flight -= o.bytes;
        let ack = AckInfo {
            bytes: o.bytes,
            rtt_us: p.srtt_us,
            owd_us: p.owd_us,
        };
        let id = p.id;
        self.scheduler.on_ack(id, &ack, self.now);
        true
    }

    /// Declares the oldest outstanding packet on path `i` lost; false when nothing was
    /// outstanding.
    pub fn lose_oldest(&mut self, i: usize) -> bool {
        let Some(o) = self.outstanding[i].pop_front() else {
            return false;
        };
        self.paths[i].bytes_in_flight -= o.bytes;
        let id = self.paths[i].id;
        self.scheduler.on_loss(id, o.bytes, self.now);
        true
    }

    /// Acknowledges every packet sent at least one srtt ago on a live path; returns the bytes
    /// acknowledged.
    pub fn deliver_due(&mut self) -> u64 {
        let mut bytes = 0;
        for i in 0..self.paths.len() {
            if self.paths[i].state == PathState::Failed {
                continue;
            }
            let rtt = Duration::from_micros(u64::from(self.paths[i].srtt_us));
            while self.outstanding[i]
                .front()
                .is_some_and(|o| o.sent + rtt <= self.now)
            {
                bytes += self.outstanding[i].front().map_or(0, |o| o.bytes);
                self.ack_oldest(i);
            }
        }
        bytes
    }

    /// Hands the scheduler a receiver report.
    pub fn report(&mut self, report: &ReceiverReport) {
        self.scheduler.on_report(report, self.now);
    }

    /// True when every path's `bytes_in_flight` equals the bytes of its outstanding packets.
    pub fn in_flight_conserved(&self) -> bool {
        self.paths
            .iter()
            .zip(&self.outstanding)
            .all(|(p, q)| p.bytes_in_flight == q.iter().map(|o| o.bytes).sum::<u64>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn harness_conserves_bytes_and_flags_violations() {
        let mut h = Harness::with_kind(SchedulerKind::MinRtt, 2);
        let pkt = PacketMeta::bulk(1_200);
        assert_eq!(h.select(&pkt), Ok(Decision::Send(PathId(0))));
        assert_eq!(h.paths()[0].bytes_in_flight, 1_200);
        h.set_in_flight(1, 5_000);
        assert!(h.in_flight_conserved());
        assert!(h.ack_oldest(0));
        assert!(!h.ack_oldest(0));
        assert!(h.lose_oldest(1));
        assert!(h.in_flight_conserved());
        assert_eq!(h.paths()[1].bytes_in_flight, 0);

        let mut paths = h.paths().to_vec();
        paths[1].state = PathState::Backup;
        assert_eq!(
            check_decision(&paths, &pkt, Decision::Send(PathId(1))),
            Err(Violation::TierNotAdmitted(PathId(1)))
        );
        paths[0].bytes_in_flight = paths[0].cwnd;
        assert_eq!(
            check_decision(&paths, &pkt, Decision::Send(PathId(0))),
            Err(Violation::NoHeadroom(PathId(0)))
        );
        // A full primary is still live: the backup waits.
        assert_eq!(
            check_decision(&paths, &pkt, Decision::Send(PathId(1))),
            Err(Violation::TierNotAdmitted(PathId(1)))
        );
        paths[0].potentially_failed = true;
        assert_eq!(
            check_decision(&paths, &pkt, Decision::Send(PathId(1))),
            Ok(())
        );
        assert_eq!(
            check_decision(&paths, &pkt, Decision::Send(PathId(7))),
            Err(Violation::UnknownPath(PathId(7)))
        );
        assert_eq!(
            check_decision(&paths, &pkt, Decision::Drop),
            Err(Violation::IllegalDrop)
        );
    }

    #[test]
    fn acks_arrive_one_rtt_later() {
        let mut h = Harness::with_kind(SchedulerKind::MinRtt, 1);
        h.select(&PacketMeta::bulk(1_000)).unwrap();
        h.advance(Duration::from_millis(9));
        assert_eq!(h.deliver_due(), 0);
        h.advance(Duration::from_millis(1));
        assert_eq!(h.deliver_due(), 1_000);
        assert_eq!(h.sent(), &[1]);
    }
}
