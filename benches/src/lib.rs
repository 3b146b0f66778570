//! Shared inputs for braid's criterion benches: realistic, varying path states.
//!
//! [`DecisionTrace::record`] runs a scheduler over a small model of K heterogeneous paths (each
//! with its own base RTT and window, RTT jitter, bytes in flight that grow with every packet
//! sent and drain when its ACK comes back one jittered RTT later, Reno-like window growth and
//! halving on occasional losses) and records the path views, packet and time of every decision.
//! The scheduler hears every `on_sent`, `on_ack`, `on_loss` and a receiver report every 100 ms,
//! so learning schedulers are trained on the same traffic. A bench then replays the snapshots in
//! a ring, so every measured `select` sees a different, realistic state and nothing but the
//! decision itself is timed.
#![warn(missing_docs)]

use std::collections::VecDeque;
use std::time::Duration;

use braid_sched_core::{
    AckInfo, Decision, PacketMeta, PathId, PathView, ReceiverReport, Scheduler, Timestamp,
};

/// Bytes per packet in the model (the benches' datagram payload).
pub const PACKET_LEN: u32 = 1_200;

/// A recorded sequence of scheduling inputs; see the module docs.
#[derive(Clone, Debug)]
pub struct DecisionTrace {
    k: usize,
    views: Vec<PathView>,
    packets: Vec<PacketMeta>,
    times: Vec<Timestamp>,
}

/// splitmix64: a tiny deterministic generator so traces are identical from run to run.
#[derive(Clone, Debug)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, n)` (`n > 0`).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// The model's state of one path.
#[derive(Clone, Debug)]
struct ModelPath {
    view: PathView,
    base_rtt_us: u32,
    /// (bytes, time the ACK arrives) per packet in flight, oldest first.
    outstanding: VecDeque<(u64, Timestamp)>,
}

/// The path model the trace is recorded from.
#[derive(Clone, Debug)]
struct Model {
    paths: Vec<ModelPath>,
    rng: Rng,
    now: Timestamp,
    next_report: Timestamp,
    delivered: u64,
}

impl Model {
    fn new(k: usize, seed: u64) -> Self {
        let mut rng = Rng(seed);
        let paths = (0..k)
            .map(|i| {
                let base_rtt_us = 8_000 + 11_000 * i as u32 + rng.below(3_000) as u32;
                let cwnd = 20_000 + rng.below(60_000);
                ModelPath {
                    view: PathView::new(PathId(i as u8), base_rtt_us, cwnd),
                    base_rtt_us,
                    outstanding: VecDeque::new(),
                }
            })
            .collect();
        Model {
            paths,
            rng,
            now: Timestamp::ZERO,
            next_report: Timestamp::from_millis(100),
            delivered: 0,
        }
    }

    fn views(&self) -> impl Iterator<Item = PathView> + '_ {
        self.paths.iter().map(|p| p.view)
    }

    fn packet(&mut self) -> PacketMeta {
        PacketMeta {
            len: PACKET_LEN,
            backlog_bytes: 50_000 + self.rng.below(2_000_000),
            retransmit: self.rng.below(100) == 0,
            ..PacketMeta::bulk(PACKET_LEN)
        }
    }

    /// Puts the packet on the chosen paths.
    fn apply<S: Scheduler>(&mut self, decision: Decision, packet: &PacketMeta, s: &mut S) {
        for id in decision.paths().iter() {
            let jitter = self
                .rng
                .below(u64::from(self.paths[id.index()].base_rtt_us / 4));
            let p = &mut self.paths[id.index()];
            let rtt = u64::from(p.base_rtt_us) + jitter;
            p.view.bytes_in_flight += u64::from(packet.len);
            p.outstanding
                .push_back((u64::from(packet.len), self.now + Duration::from_micros(rtt)));
            s.on_sent(id, packet, self.now);
        }
    }

    /// Delivers every ACK due by now (1% of packets are lost instead), updating RTT estimates
    /// and windows and telling the scheduler.
    fn deliver<S: Scheduler>(&mut self, s: &mut S) {
        let now = self.now;
        for p in &mut self.paths {
            while let Some(&(bytes, due)) = p.outstanding.front() {
                if due > now {
                    break;
                }
                p.outstanding.pop_front();
                p.view.bytes_in_flight -= bytes;
                if self.rng.below(100) == 0 {
                    p.view.cwnd = (p.view.cwnd / 2).max(2 * u64::from(PACKET_LEN));
                    p.view.loss_rate = p.view.loss_rate * 0.9 + 0.1;
                    s.on_loss(p.view.id, bytes, now);
                    continue;
                }
                let rtt = p.base_rtt_us + self.rng.below(u64::from(p.base_rtt_us / 4)) as u32;
                let v = &mut p.view;
                let diff = v.srtt_us.abs_diff(rtt);
                v.rttvar_us = (3 * v.rttvar_us + diff) / 4;
                v.srtt_us = (7 * v.srtt_us + rtt) / 8;
                v.min_rtt_us = v.min_rtt_us.min(rtt);
                v.owd_us = rtt / 2;
                v.loss_rate *= 0.99;
                v.cwnd = (v.cwnd + bytes * u64::from(PACKET_LEN) / v.cwnd.max(1)).min(200_000);
                v.delivery_rate = bytes * 1_000_000 / u64::from(rtt.max(1));
                self.delivered += bytes;
                let ack = AckInfo {
                    bytes,
                    rtt_us: rtt,
                    owd_us: rtt / 2,
                };
                s.on_ack(v.id, &ack, now);
            }
        }
        if now >= self.next_report {
            let report = ReceiverReport {
                interval_us: 100_000,
                delivered_bytes: self.delivered,
                ooo_packets: self.rng.below(20) as u32,
                ..ReceiverReport::default()
            };
            s.on_report(&report, now);
            self.delivered = 0;
            self.next_report += Duration::from_millis(100);
        }
    }

    /// Moves time on: a little after a send, to the next ACK after a wait.
    fn advance(&mut self, decision: Decision) {
        let step = match decision {
            Decision::Wait => self
                .paths
                .iter()
                .filter_map(|p| p.outstanding.front().map(|&(_, due)| due))
                .min()
                .map_or(Duration::from_millis(1), |due| due - self.now),
            _ => Duration::from_micros(20),
        };
        self.now += step.max(Duration::from_micros(1));
    }
}

impl DecisionTrace {
    /// Runs `scheduler` over `k` modelled paths for a warm-up of 2,000 decisions, then records
    /// the inputs of the next `n` decisions (`n` rounded up to a power of two, so replaying in a
    /// ring costs a mask, not a division). Deterministic for a given `seed`.
    pub fn record<S: Scheduler>(scheduler: &mut S, k: usize, n: usize, seed: u64) -> Self {
        let n = n.max(1).next_power_of_two();
        let mut model = Model::new(k, seed);
        let mut views = Vec::with_capacity(n * k);
        let mut packets = Vec::with_capacity(n);
        let mut times = Vec::with_capacity(n);
        let mut current: Vec<PathView> = model.views().collect();
        for step in 0..2_000 + n {
            model.deliver(scheduler);
            current.clear();
            current.extend(model.views());
            let packet = model.packet();
            if step >= 2_000 {
                views.extend_from_slice(&current);
                packets.push(packet);
                times.push(model.now);
            }
            let decision = scheduler.select(&current, &packet, model.now);
            model.apply(decision, &packet, scheduler);
            model.advance(decision);
        }
        DecisionTrace {
            k,
            views,
            packets,
            times,
        }
    }

    /// Number of recorded decisions.
    pub fn len(&self) -> usize {
        self.packets.len()
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.packets.is_empty()
    }

    /// The inputs of recorded decision `i mod len`: path views, packet and time.
    #[inline]
    pub fn input(&self, i: usize) -> (&[PathView], &PacketMeta, Timestamp) {
        let i = i & (self.len() - 1); // len is a power of two (see `record`)
        (
            &self.views[i * self.k..(i + 1) * self.k],
            &self.packets[i],
            self.times[i],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use braid_sched_core::{AnyScheduler, SchedulerKind};

    #[test]
    fn traces_vary_and_are_deterministic() {
        let mut a = AnyScheduler::with_defaults(SchedulerKind::MinRtt);
        let mut b = AnyScheduler::with_defaults(SchedulerKind::MinRtt);
        let ta = DecisionTrace::record(&mut a, 4, 256, 7);
        let tb = DecisionTrace::record(&mut b, 4, 256, 7);
        assert_eq!(ta.len(), 256);
        assert_eq!(ta.views, tb.views);
        // In-flight and RTT change between decisions, and some decisions find room.
        let distinct_in_flight: std::collections::BTreeSet<u64> =
            (0..256).map(|i| ta.input(i).0[0].bytes_in_flight).collect();
        let distinct_rtt: std::collections::BTreeSet<u32> =
            (0..256).map(|i| ta.input(i).0[0].srtt_us).collect();
        assert!(distinct_in_flight.len() > 5, "{distinct_in_flight:?}");
        assert!(distinct_rtt.len() > 5, "{distinct_rtt:?}");
        let with_room = (0..256)
            .filter(|&i| {
                let (paths, packet, _) = ta.input(i);
                paths.iter().any(|p| p.can_send(packet.len))
            })
            .count();
        assert!(with_room > 64, "{with_room}");
    }
}
