//! minRTT: the default scheduler of Linux MPTCP (`mptcp_sched.c`, "default" scheduler) and of
//! most multipath QUIC stacks: among the paths whose congestion window has room for the packet,
//! the one with the lowest smoothed RTT; wait when none has room.

use crate::decision::Decision;
use crate::packet::PacketMeta;
use crate::path::PathView;
use crate::scheduler::{Scheduler, SchedulerInfo, SchedulerKind};
use crate::tier::TierGate;
use crate::time::Timestamp;

/// Configuration of [`MinRtt`] (it has no parameters).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MinRttConfig {}

/// The lowest-RTT path with window headroom.
#[derive(Clone, Debug, Default)]
pub struct MinRtt {}

impl MinRtt {
    /// Catalogue entry.
    pub const INFO: SchedulerInfo = SchedulerInfo {
        kind: SchedulerKind::MinRtt,
        summary: "lowest smoothed RTT among paths whose window has room; waits when none has",
        source: "Linux MPTCP v0.95 default scheduler (mptcp_sched.c)",
        params: &[],
    };

    /// Builds the scheduler.
    pub fn new(_config: &MinRttConfig) -> Self {
        MinRtt {}
    }
}

/// The path with the lowest srtt among those that can take `len` bytes now and whose tier is
/// admitted; ties go to the lower id. Shared by schedulers that fall back to minRTT.
pub fn lowest_rtt_with_room(paths: &[PathView], len: u32) -> Option<&PathView> {
    // One pass applying [`TierGate`]'s rule: the best primary and the best backup with room,
    // and whether some primary is live (then the backups are not admitted; otherwise both
    // tiers are, and the only primaries with room are degraded ones, a failed or potentially
    // failed path being unusable).
    let mut primary: Option<&PathView> = None;
    let mut backup: Option<&PathView> = None;
    let mut live_primary = false;
    for p in paths {
        live_primary |= p.is_live_primary();
        if !p.can_send(len) {
            continue;
        }
        let best = if p.is_backup() {
            &mut backup
        } else {
            &mut primary
        };
        if best.is_none_or(|b| (p.srtt_us, p.id) < (b.srtt_us, b.id)) {
            *best = Some(p);
        }
    }
    if live_primary {
        primary
    } else {
        [primary, backup]
            .into_iter()
            .flatten()
            .min_by_key(|p| (p.srtt_us, p.id))
    }
}

/// The two paths ECF, BLEST and Peekaboo compare, found in one pass over the admitted tier:
/// `fastest` is the usable path with the lowest srtt whether or not its window has room (the
/// kernel schedulers' `minsk`), `best` is what minRTT would pick (their `bestsk`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FastAndBest<'a> {
    /// Lowest srtt among usable, admitted paths, ignoring window headroom.
    pub fastest: Option<&'a PathView>,
    /// Lowest srtt among usable, admitted paths with room for the packet.
    pub best: Option<&'a PathView>,
}

/// Finds [`FastAndBest`] for a packet of `len` bytes; ties go to the lower id.
pub fn fastest_and_best(paths: &[PathView], len: u32) -> FastAndBest<'_> {
    let gate = TierGate::new(paths);
    let mut fastest: Option<&PathView> = None;
    let mut best: Option<&PathView> = None;
    for p in paths {
        if !p.is_usable() || !gate.admits(p) {
            continue;
        }
        let key = (p.srtt_us, p.id);
        if fastest.is_none_or(|f| key < (f.srtt_us, f.id)) {
            fastest = Some(p);
        }
        if p.headroom() >= u64::from(len) && best.is_none_or(|b| key < (b.srtt_us, b.id)) {
            best = Some(p);
        }
    }
    FastAndBest { fastest, best }
}

impl Scheduler for MinRtt {
    #[inline]
    fn select(&mut self, paths: &[PathView], packet: &PacketMeta, _now: Timestamp) -> Decision {
        match lowest_rtt_with_room(paths, packet.len) {
            Some(p) => Decision::Send(p.id),
            None => Decision::Wait,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::{PathId, PathState};

    fn paths() -> [PathView; 3] {
        [
            PathView::new(PathId(0), 40_000, 20_000),
            PathView::new(PathId(1), 10_000, 20_000),
            PathView::new(PathId(2), 25_000, 20_000),
        ]
    }

    #[test]
    fn picks_lowest_rtt_with_room() {
        let mut s = MinRtt::default();
        let mut p = paths();
        let pkt = PacketMeta::bulk(1_200);
        assert_eq!(
            s.select(&p, &pkt, Timestamp::ZERO),
            Decision::Send(PathId(1))
        );
        p[1].bytes_in_flight = 19_000;
        assert_eq!(
            s.select(&p, &pkt, Timestamp::ZERO),
            Decision::Send(PathId(2))
        );
        p[2].state = PathState::Failed;
        assert_eq!(
            s.select(&p, &pkt, Timestamp::ZERO),
            Decision::Send(PathId(0))
        );
        p[0].rate_limited = true;
        assert_eq!(s.select(&p, &pkt, Timestamp::ZERO), Decision::Wait);
    }

    #[test]
    fn backup_only_when_no_primary_is_live() {
        let mut s = MinRtt::default();
        let mut p = paths();
        p[1].state = PathState::Backup;
        let pkt = PacketMeta::bulk(1_200);
        assert_eq!(
            s.select(&p, &pkt, Timestamp::ZERO),
            Decision::Send(PathId(2))
        );
        // Full primaries: the packet waits for them.
        p[0].bytes_in_flight = 20_000;
        p[2].bytes_in_flight = 20_000;
        assert_eq!(s.select(&p, &pkt, Timestamp::ZERO), Decision::Wait);
        // Both went quiet after their probe timeouts: the backup takes over.
        p[0].potentially_failed = true;
        p[2].state = PathState::Failed;
        assert_eq!(
            s.select(&p, &pkt, Timestamp::ZERO),
            Decision::Send(PathId(1))
        );
    }

    #[test]
    fn degraded_primaries_share_with_the_backup_by_rtt() {
        let mut s = MinRtt::default();
        let mut p = paths();
        p[1].state = PathState::Backup;
        p[0].degraded = true;
        p[2].degraded = true;
        let pkt = PacketMeta::bulk(1_200);
        // The fastest path with room, of either tier: the backup, then the faster primary.
        assert_eq!(
            s.select(&p, &pkt, Timestamp::ZERO),
            Decision::Send(PathId(1))
        );
        p[1].bytes_in_flight = 20_000;
        assert_eq!(
            s.select(&p, &pkt, Timestamp::ZERO),
            Decision::Send(PathId(2))
        );
        // One primary that is not degraded keeps the backup out again.
        p[1].bytes_in_flight = 0;
        p[0].degraded = false;
        assert_eq!(
            s.select(&p, &pkt, Timestamp::ZERO),
            Decision::Send(PathId(2))
        );
    }
}
