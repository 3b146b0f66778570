//! Weighted round-robin: smooth weighted round-robin as in nginx's upstream balancer
//! (`ngx_http_upstream_get_peer`, 2012): every eligible path gains its weight each turn, the path
//! with the largest running credit is chosen and pays back the total weight of the turn. Over any
//! window of Σw turns a path with weight w is chosen w times, interleaved rather than in bursts.
//!
//! Weights come from each link's config ([`PathView::weight`]); a weight of 0 is treated as 1.
//! Only paths that can take the packet now and whose tier is admitted take part in a turn, so a
//! saturated, failed or rate-capped path neither gains credit nor blocks the others.

use crate::decision::Decision;
use crate::packet::PacketMeta;
use crate::path::{MAX_PATHS, PathId, PathState, PathView};
use crate::scheduler::{Scheduler, SchedulerInfo, SchedulerKind};
use crate::tier::TierGate;
use crate::time::Timestamp;

/// Configuration of [`WeightedRoundRobin`] (it has no parameters: weights come from the links).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WeightedRoundRobinConfig {}

/// Smooth weighted round-robin over the paths that can send.
#[derive(Clone, Debug)]
pub struct WeightedRoundRobin {
    /// Running credit of each path, indexed by [`PathId::index`].
    credit: [i64; MAX_PATHS],
}

impl Default for WeightedRoundRobin {
    fn default() -> Self {
        WeightedRoundRobin {
            credit: [0; MAX_PATHS],
        }
    }
}

impl WeightedRoundRobin {
    /// Catalogue entry.
    pub const INFO: SchedulerInfo = SchedulerInfo {
        kind: SchedulerKind::WeightedRoundRobin,
        summary: "smooth weighted round-robin over paths with room, by each link's configured weight",
        source: "nginx smooth weighted round-robin (ngx_http_upstream_round_robin.c)",
        params: &[],
    };

    /// Builds the scheduler.
    pub fn new(_config: &WeightedRoundRobinConfig) -> Self {
        WeightedRoundRobin::default()
    }
}

impl Scheduler for WeightedRoundRobin {
    #[inline]
    fn select(&mut self, paths: &[PathView], packet: &PacketMeta, _now: Timestamp) -> Decision {
        let gate = TierGate::new(paths);
        let mut total: i64 = 0;
        let mut chosen: Option<(usize, PathId)> = None;
        for p in paths {
            let slot = p.id.index();
            if slot >= MAX_PATHS || !p.can_send(packet.len) || !gate.admits(p) {
                continue;
            }
            let weight = i64::from(p.weight.max(1));
            self.credit[slot] += weight;
            total += weight;
            if chosen.is_none_or(|(best, _)| self.credit[slot] > self.credit[best]) {
                chosen = Some((slot, p.id));
            }
        }
        match chosen {
            Some((slot, id)) => {
                self.credit[slot] -= total;
                Decision::Send(id)
            }
            None => Decision::Wait,
        }
    }

    fn on_path_state(&mut self, path: PathId, _state: PathState, _now: Timestamp) {
        // A path that joined, failed or changed tier starts its credit afresh.
        if let Some(credit) = self.credit.get_mut(path.index()) {
            *credit = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weighted(weights: &[u16]) -> Vec<PathView> {
        weights
            .iter()
            .enumerate()
            .map(|(i, &w)| {
                let mut p = PathView::new(PathId(i as u8), 20_000, 1_000_000);
                p.weight = w;
                p
            })
            .collect()
    }

    #[test]
    fn follows_nginx_sequence_for_5_1_1() {
        // nginx documents the sequence {a, a, b, a, c, a, a} for weights {5, 1, 1}.
        let mut s = WeightedRoundRobin::default();
        let p = weighted(&[5, 1, 1]);
        let pkt = PacketMeta::bulk(1_200);
        let picks: Vec<u8> = (0..7)
            .map(|_| match s.select(&p, &pkt, Timestamp::ZERO) {
                Decision::Send(id) => id.0,
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(picks, vec![0, 0, 1, 0, 2, 0, 0]);
    }

    #[test]
    fn shares_follow_weights_and_skip_full_paths() {
        let mut s = WeightedRoundRobin::default();
        let mut p = weighted(&[3, 1, 0]);
        let pkt = PacketMeta::bulk(1_200);
        let mut counts = [0u32; 3];
        for _ in 0..500 {
            if let Decision::Send(id) = s.select(&p, &pkt, Timestamp::ZERO) {
                counts[id.index()] += 1;
            }
        }
        // weight 0 counts as 1: shares 3:1:1 over 500 turns
        assert_eq!(counts, [300, 100, 100]);
        p[0].bytes_in_flight = p[0].cwnd;
        p[1].state = PathState::Failed;
        assert_eq!(
            s.select(&p, &pkt, Timestamp::ZERO),
            Decision::Send(PathId(2))
        );
        p[2].rate_limited = true;
        assert_eq!(s.select(&p, &pkt, Timestamp::ZERO), Decision::Wait);
    }

    #[test]
    fn out_of_range_ids_are_ignored() {
        let mut s = WeightedRoundRobin::default();
        let p = [PathView::new(PathId(200), 10_000, 100_000)];
        assert_eq!(
            s.select(&p, &PacketMeta::bulk(100), Timestamp::ZERO),
            Decision::Wait
        );
        s.on_path_state(PathId(200), PathState::Failed, Timestamp::ZERO);
    }
}
