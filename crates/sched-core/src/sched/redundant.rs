//! Redundant: every packet on every usable path, the baseline of ReMP TCP (Frömmgen et al.,
//! "ReMP TCP: Low Latency Multipath TCP", IEEE ICC 2016) and of the Linux MPTCP v0.95
//! `mptcp_redundant.c` scheduler.
//!
//! The packet is copied onto every path that can take it now ([`PathView::can_send`]) and
//! whose tier is admitted: backup paths join only when no primary is live (see
//! [`crate::tier`]). One such path gives a plain send; none gives a wait. Copies cost window on every path, so the
//! session's per-path congestion control still bounds what each link carries.

use crate::decision::{Decision, PathSet};
use crate::packet::PacketMeta;
use crate::path::{MAX_PATHS, PathView};
use crate::scheduler::{Scheduler, SchedulerInfo, SchedulerKind};
use crate::tier::TierGate;
use crate::time::Timestamp;

/// Configuration of [`Redundant`] (it has no parameters).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RedundantConfig {}

/// Copies every packet onto every path with room.
#[derive(Clone, Debug, Default)]
pub struct Redundant {}

impl Redundant {
    /// Catalogue entry.
    pub const INFO: SchedulerInfo = SchedulerInfo {
        kind: SchedulerKind::Redundant,
        summary: "a copy of every packet on every path whose window has room",
        source: "Frömmgen et al., ReMP TCP, ICC 2016; Linux MPTCP v0.95 mptcp_redundant.c",
        params: &[],
    };

    /// Builds the scheduler.
    pub fn new(_config: &RedundantConfig) -> Self {
        Redundant {}
    }
}

impl Scheduler for Redundant {
    #[inline]
    fn select(&mut self, paths: &[PathView], packet: &PacketMeta, _now: Timestamp) -> Decision {
        let gate = TierGate::new(paths);
        let mut set = PathSet::EMPTY;
        let mut only = None;
        for p in paths {
            if p.id.index() < MAX_PATHS && p.can_send(packet.len) && gate.admits(p) {
                set.insert(p.id);
                only = Some(p.id);
            }
        }
        match only {
            None => Decision::Wait,
            Some(id) if set.len() == 1 => Decision::Send(id),
            Some(_) => Decision::Duplicate(set),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::{PathId, PathState};

    #[test]
    fn copies_on_every_path_with_room() {
        let mut s = Redundant::default();
        let mut p = [
            PathView::new(PathId(0), 40_000, 20_000),
            PathView::new(PathId(1), 10_000, 20_000),
            PathView::new(PathId(2), 25_000, 20_000),
        ];
        let pkt = PacketMeta::bulk(1_200);
        let now = Timestamp::ZERO;
        assert_eq!(
            s.select(&p, &pkt, now),
            Decision::Duplicate([PathId(0), PathId(1), PathId(2)].into_iter().collect())
        );
        p[1].bytes_in_flight = 19_000;
        p[2].state = PathState::Backup;
        // The backup is not used while a primary has room.
        assert_eq!(s.select(&p, &pkt, now), Decision::Send(PathId(0)));
        p[0].rate_limited = true;
        // No primary can send now, but both are live: wait for them.
        assert_eq!(s.select(&p, &pkt, now), Decision::Wait);
        p[0].state = PathState::Failed;
        p[1].potentially_failed = true;
        // No primary is live: the backup carries it.
        assert_eq!(s.select(&p, &pkt, now), Decision::Send(PathId(2)));
        p[2].state = PathState::Failed;
        assert_eq!(s.select(&p, &pkt, now), Decision::Wait);
    }
}
