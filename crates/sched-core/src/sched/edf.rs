//! EDF: earliest deadline first (Liu & Layland, JACM 1973) for multipath packet placement, the
//! deadline-aware baseline of the DaMPS paper (seeds/damps.txt, evaluation: "prioritizes the
//! packet with the tightest deadline and schedules it to the path with the smallest RTT").
//! Unlike that baseline, which "is unable to drop packets", braid's EDF also checks that the
//! path can still deliver in time and drops real-time packets no path can deliver in time.
//!
//! The session orders its queue by deadline, tightest first, and asks for each packet in turn.
//! For a packet with a deadline EDF picks, among the usable, tier-admitted paths with room, the
//! lowest-srtt one on which it can still arrive in time (`now + owd <= deadline`, with the path's
//! one-way delay estimate [`PathView::owd_us`]). When none with room can make it:
//!
//! - if some live admitted path could make it once its window opens, it waits;
//! - else an unreliable packet ([`TrafficClass::Realtime`]) is dropped, since it is useless late,
//!   and a reliable one goes to the lowest-srtt path with room (late, but it must arrive).
//!
//! Packets without a deadline are placed as by minRTT.

use std::time::Duration;

use crate::decision::Decision;
use crate::packet::{PacketMeta, TrafficClass};
use crate::path::PathView;
use crate::scheduler::{Scheduler, SchedulerInfo, SchedulerKind};
use crate::tier::TierGate;
use crate::time::Timestamp;

/// Configuration of [`Edf`] (it has no parameters).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EdfConfig {}

/// Deadline-aware lowest-RTT placement.
#[derive(Clone, Debug, Default)]
pub struct Edf {}

impl Edf {
    /// Catalogue entry.
    pub const INFO: SchedulerInfo = SchedulerInfo {
        kind: SchedulerKind::Edf,
        summary: "tightest deadline first, on the lowest-RTT path that still meets it; drops late real-time packets",
        source: "earliest deadline first (Liu & Layland, JACM 1973), as the DaMPS paper's EDF baseline",
        params: &[],
    };

    /// Builds the scheduler.
    pub fn new(_config: &EdfConfig) -> Self {
        Edf {}
    }
}

impl Scheduler for Edf {
    #[inline]
    fn select(&mut self, paths: &[PathView], packet: &PacketMeta, now: Timestamp) -> Decision {
        let gate = TierGate::new(paths);
        let mut in_time: Option<&PathView> = None;
        let mut any_room: Option<&PathView> = None;
        let mut could_meet = false;
        for p in paths {
            if !p.is_live() || !gate.admits(p) {
                continue;
            }
            let meets = packet
                .deadline
                .is_none_or(|d| now + Duration::from_micros(u64::from(p.owd_us)) <= d);
            could_meet |= meets;
            if !p.can_send(packet.len) {
                continue;
            }
            let key = (p.srtt_us, p.id);
            if any_room.is_none_or(|b| key < (b.srtt_us, b.id)) {
                any_room = Some(p);
            }
            if meets && in_time.is_none_or(|b| key < (b.srtt_us, b.id)) {
                in_time = Some(p);
            }
        }
        match (in_time, any_room) {
            (Some(p), _) => Decision::Send(p.id),
            _ if could_meet => Decision::Wait,
            _ if packet.deadline.is_some() && packet.class == TrafficClass::Realtime => {
                Decision::Drop
            }
            (None, Some(p)) => Decision::Send(p.id),
            (None, None) => Decision::Wait,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::{PathId, PathState};

    /// Path 0: 10 ms srtt, 5 ms owd. Path 1: 60 ms srtt, 30 ms owd.
    fn paths() -> [PathView; 2] {
        [
            PathView::new(PathId(0), 10_000, 20_000),
            PathView::new(PathId(1), 60_000, 20_000),
        ]
    }

    fn realtime(deadline_ms: u64) -> PacketMeta {
        PacketMeta {
            class: TrafficClass::Realtime,
            deadline: Some(Timestamp::from_millis(deadline_ms)),
            ..PacketMeta::bulk(1_000)
        }
    }

    #[test]
    fn lowest_rtt_path_that_meets_the_deadline() {
        let mut s = Edf::default();
        let mut p = paths();
        let now = Timestamp::from_millis(100);
        assert_eq!(s.select(&p, &realtime(140), now), Decision::Send(PathId(0)));
        // The fast path is full: the slow one still makes 140 ms (100 + 30 <= 140).
        p[0].bytes_in_flight = 20_000;
        assert_eq!(s.select(&p, &realtime(140), now), Decision::Send(PathId(1)));
        // Deadline 120 ms: only the full fast path could make it: wait for it.
        assert_eq!(s.select(&p, &realtime(120), now), Decision::Wait);
        // Deadline 104 ms: no path can make it: drop the real-time packet...
        assert_eq!(s.select(&p, &realtime(104), now), Decision::Drop);
        // ...but send a reliable one anyway, on the lowest-RTT path with room.
        let reliable = PacketMeta {
            class: TrafficClass::Interactive,
            ..realtime(104)
        };
        assert_eq!(s.select(&p, &reliable, now), Decision::Send(PathId(1)));
    }

    #[test]
    fn deadline_boundary_is_inclusive_and_no_deadline_is_minrtt() {
        let mut s = Edf::default();
        let mut p = paths();
        let now = Timestamp::from_millis(100);
        assert_eq!(s.select(&p, &realtime(105), now), Decision::Send(PathId(0)));
        p[0].state = PathState::Failed;
        assert_eq!(s.select(&p, &realtime(129), now), Decision::Drop);
        assert_eq!(s.select(&p, &realtime(130), now), Decision::Send(PathId(1)));
        assert_eq!(
            s.select(&p, &PacketMeta::bulk(1_000), now),
            Decision::Send(PathId(1))
        );
        // No live path at all: a real-time packet without deadline waits, it is never dropped.
        p[1].state = PathState::Failed;
        let no_deadline = PacketMeta {
            deadline: None,
            ..realtime(0)
        };
        assert_eq!(s.select(&p, &no_deadline, now), Decision::Wait);
    }
}
