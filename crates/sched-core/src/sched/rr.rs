//! Round-robin: each packet goes to the next path in turn, skipping paths whose window has no
//! room (Linux MPTCP v0.95 `mptcp_rr.c` with `cwnd_limited` on, one packet per turn).

use crate::decision::Decision;
use crate::packet::PacketMeta;
use crate::path::PathView;
use crate::scheduler::{Scheduler, SchedulerInfo, SchedulerKind};
use crate::tier::TierGate;
use crate::time::Timestamp;

/// Configuration of [`RoundRobin`] (it has no parameters).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RoundRobinConfig {}

/// Cycles over the paths that can send.
#[derive(Clone, Debug, Default)]
pub struct RoundRobin {
    /// Position in the path slice where the next search starts.
    next: usize,
}

impl RoundRobin {
    /// Catalogue entry.
    pub const INFO: SchedulerInfo = SchedulerInfo {
        kind: SchedulerKind::RoundRobin,
        summary: "next path in turn among those whose window has room; waits when none has",
        source: "Linux MPTCP v0.95 round-robin scheduler (mptcp_rr.c, cwnd_limited)",
        params: &[],
    };

    /// Builds the scheduler.
    pub fn new(_config: &RoundRobinConfig) -> Self {
        RoundRobin::default()
    }
}

impl Scheduler for RoundRobin {
    #[inline]
    fn select(&mut self, paths: &[PathView], packet: &PacketMeta, _now: Timestamp) -> Decision {
        let n = paths.len();
        if n == 0 {
            return Decision::Wait;
        }
        let gate = TierGate::new(paths);
        let start = self.next % n;
        for step in 0..n {
            // (start + step) mod n without a division per step: both terms are below n.
            let i = if start + step >= n {
                start + step - n
            } else {
                start + step
            };
            let p = &paths[i];
            if p.can_send(packet.len) && gate.admits(p) {
                self.next = i + 1;
                return Decision::Send(p.id);
            }
        }
        Decision::Wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::{PathId, PathState};

    #[test]
    fn cycles_and_skips_full_paths() {
        let mut s = RoundRobin::default();
        let mut p = [
            PathView::new(PathId(0), 40_000, 20_000),
            PathView::new(PathId(1), 10_000, 20_000),
            PathView::new(PathId(2), 25_000, 20_000),
        ];
        let pkt = PacketMeta::bulk(1_200);
        let now = Timestamp::ZERO;
        let picks: Vec<_> = (0..4).map(|_| s.select(&p, &pkt, now)).collect();
        assert_eq!(
            picks,
            [0, 1, 2, 0].map(|i| Decision::Send(PathId(i))).to_vec()
        );
        p[1].bytes_in_flight = 20_000;
        assert_eq!(s.select(&p, &pkt, now), Decision::Send(PathId(2)));
        p[2].state = PathState::Failed;
        assert_eq!(s.select(&p, &pkt, now), Decision::Send(PathId(0)));
        assert_eq!(s.select(&p, &pkt, now), Decision::Send(PathId(0)));
        p[0].rate_limited = true;
        assert_eq!(s.select(&p, &pkt, now), Decision::Wait);
        assert_eq!(s.select(&[], &pkt, now), Decision::Wait);
    }
}
