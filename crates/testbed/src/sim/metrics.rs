//! The metrics of one run, measured by the simulator from what it sees: every packet on the
//! wire and every byte the receiving application reads. Definitions (with formulas) are in
//! `docs/metrics.md`; the JSON names follow DESIGN.md. OLMS regret and violation follow OLMS
//! §II-C eqs. (1)–(3) with the utilities and constraints of §IV-A (eqs. 5–7) and §IV-B
//! (eqs. 9–11), per packet and normalised as in §VI-B; the deadline meeting ratio is DaMPS's.

use std::collections::BTreeMap;

use braid_sched_core::{FlowId, Timestamp};

use super::DataFrame;
use super::truth;
use crate::scenario::{Objective, ObjectiveKind, PathSpec};

/// The metrics of one run; `None` where a metric does not apply (JSON `null`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Metrics {
    /// Packet bytes the receiver got on all paths (duplicates and headers included), Mbit/s.
    pub throughput_mbps: Option<f64>,
    /// Application bytes read by the receiver, Mbit/s.
    pub goodput_mbps: Option<f64>,
    /// Flow completion time (web: page load time), s; `None` if unfinished or realtime.
    pub fct_s: Option<f64>,
    /// Mean per-packet regret (objective scenarios).
    pub regret: Option<f64>,
    /// Mean per-packet violation (objective scenarios).
    pub violation: Option<f64>,
    /// On-time datagrams over datagrams received or dropped (realtime).
    pub deadline_meeting_ratio: Option<f64>,
    /// Data packets that arrived while earlier data of their flow was missing.
    pub ooo_packets: Option<f64>,
    /// Duplicate application bytes received over application bytes received.
    pub redundant_ratio: Option<f64>,
    /// Application goodput inside the union of outage windows, Mbit/s.
    pub handoff_goodput_mbps: Option<f64>,
}

impl Metrics {
    /// The JSON names and values, in the design's order.
    pub fn fields(&self) -> [(&'static str, Option<f64>); 9] {
        [
            ("throughput_mbps", self.throughput_mbps),
            ("goodput_mbps", self.goodput_mbps),
            ("fct_s", self.fct_s),
            ("regret", self.regret),
            ("violation", self.violation),
            ("deadline_meeting_ratio", self.deadline_meeting_ratio),
            ("ooo_packets", self.ooo_packets),
            ("redundant_ratio", self.redundant_ratio),
            ("handoff_goodput_mbps", self.handoff_goodput_mbps),
        ]
    }
}

/// Per-bin series of one run, for plots.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TimeSeries {
    /// Bin width, s.
    pub bin_s: f64,
    /// Per path, packet bytes received per bin, as Mbit/s.
    pub path_mbps: Vec<Vec<f64>>,
    /// Application goodput per bin, Mbit/s.
    pub goodput_mbps: Vec<f64>,
    /// Cumulative violation (sum over packets) at the end of each bin (objective scenarios).
    pub cumulative_violation: Vec<f64>,
    /// Cumulative regret at the end of each bin (objective scenarios).
    pub cumulative_regret: Vec<f64>,
}

/// Receiver-side state of one stream flow: the contiguous prefix and the ranges above it.
#[derive(Debug, Default)]
struct StreamTrack {
    contiguous: u64,
    above: Vec<(u64, u64)>,
}

impl StreamTrack {
    /// Records `[start, end)`; returns (new bytes, whether it arrived above a gap).
    fn on_data(&mut self, start: u64, end: u64) -> (u64, bool) {
        let above_gap = start > self.contiguous;
        let mut new = 0;
        let mut cursor = start.max(self.contiguous);
        for &(s, e) in &self.above {
            if e <= cursor {
                continue;
            }
            if s >= end {
                break;
            }
            new += s.saturating_sub(cursor).min(end.saturating_sub(cursor));
            cursor = cursor.max(e);
        }
        new += end.saturating_sub(cursor);
        if new > 0 {
            let i = self.above.partition_point(|&(s, _)| s < start);
            self.above.insert(i, (start, end));
            let mut merged: usize = 0;
            for k in 0..self.above.len() {
                let r = self.above[k];
                if merged > 0 && r.0 <= self.above[merged - 1].1 {
                    self.above[merged - 1].1 = self.above[merged - 1].1.max(r.1);
                } else {
                    self.above[merged] = r;
                    merged += 1;
                }
            }
            self.above.truncate(merged);
            while let Some(&(s, e)) = self.above.first() {
                if s > self.contiguous {
                    break;
                }
                self.contiguous = self.contiguous.max(e);
                self.above.remove(0);
            }
        }
        (new, above_gap && new > 0)
    }
}

/// Receiver-side state of one datagram flow: which sequence numbers arrived.
#[derive(Debug, Default)]
struct DatagramTrack {
    highest: Option<u64>,
    seen: Vec<u64>,
}

impl DatagramTrack {
    /// Records `seq`; returns (first copy, arrived after a higher one).
    fn on_seq(&mut self, seq: u64) -> (bool, bool) {
        let word = (seq / 64) as usize;
        if word >= self.seen.len() {
            self.seen.resize(word + 1, 0);
        }
        let bit = 1u64 << (seq % 64);
        let first = self.seen[word] & bit == 0;
        self.seen[word] |= bit;
        let late = self.highest.is_some_and(|h| seq < h);
        self.highest = Some(self.highest.map_or(seq, |h| h.max(seq)));
        (first, first && late)
    }
}

/// Accumulates one run's measurements.
#[derive(Debug)]
pub struct Recorder {
    bin_s: f64,
    objective: Option<Objective>,
    truth: Option<truth::TruthCache>,
    outages: Vec<(f64, f64)>,
    streams: BTreeMap<FlowId, StreamTrack>,
    datagrams: BTreeMap<FlowId, DatagramTrack>,
    wire_bytes: u64,
    data_bytes: u64,
    duplicate_bytes: u64,
    ooo_packets: u64,
    app_bytes: u64,
    app_bytes_in_outage: u64,
    path_bytes: Vec<Vec<u64>>,
    goodput_bytes: Vec<u64>,
    data_packets: Vec<u64>,
    violation_bins: Vec<f64>,
    regret_bins: Vec<f64>,
    violation_packets: u64,
    regret_packets: u64,
    /// On-time and counted datagrams (deadline meeting ratio).
    pub deadline_on_time: u64,
    /// Datagrams received or dropped.
    pub deadline_total: u64,
}

impl Recorder {
    /// A recorder for a run of `duration_s` over `paths`.
    pub fn new(paths: &[PathSpec], objective: Option<Objective>, duration_s: f64) -> Self {
        let bin_s = (duration_s / 2000.0).max(0.1);
        let bins = (duration_s / bin_s).ceil() as usize + 1;
        Recorder {
            bin_s,
            objective,
            truth: objective.map(|o| truth::TruthCache::new(paths, o, duration_s)),
            outages: truth::outage_union(paths, duration_s),
            streams: BTreeMap::new(),
            datagrams: BTreeMap::new(),
            wire_bytes: 0,
            data_bytes: 0,
            duplicate_bytes: 0,
            ooo_packets: 0,
            app_bytes: 0,
            app_bytes_in_outage: 0,
            path_bytes: vec![vec![0; bins]; paths.len()],
            goodput_bytes: vec![0; bins],
            data_packets: vec![0; bins],
            violation_bins: vec![0.0; bins],
            regret_bins: vec![0.0; bins],
            violation_packets: 0,
            regret_packets: 0,
            deadline_on_time: 0,
            deadline_total: 0,
        }
    }

    fn bin(&self, now: Timestamp) -> usize {
        ((now.as_secs_f64() / self.bin_s) as usize).min(self.goodput_bytes.len() - 1)
    }

    /// A packet of `len` bytes reached the receiver on `path`.
    pub fn on_arrival(&mut self, now: Timestamp, path: usize, len: usize) {
        let bin = self.bin(now);
        self.wire_bytes += len as u64;
        if let Some(series) = self.path_bytes.get_mut(path) {
            series[bin] += len as u64;
        }
    }

    /// One piece of application data in a packet that reached the receiver; returns whether it
    /// was data at all (the caller then calls [`Recorder::on_data_arrival`] once per packet).
    pub fn on_frame(&mut self, frame: DataFrame) {
        match frame {
            DataFrame::Stream { flow, offset, len } => {
                let (new, ooo) = self
                    .streams
                    .entry(flow)
                    .or_default()
                    .on_data(offset, offset + len);
                self.data_bytes += len;
                self.duplicate_bytes += len - new.min(len);
                self.ooo_packets += u64::from(ooo);
            }
            DataFrame::Datagram { flow, seq, len } => {
                let (first, late) = self.datagrams.entry(flow).or_default().on_seq(seq);
                self.data_bytes += len;
                if !first {
                    self.duplicate_bytes += len;
                }
                self.ooo_packets += u64::from(late);
            }
        }
    }

    /// A packet carrying data, sent at `sent_at` on `path`, reached the receiver at `now`:
    /// the maxRTT violation of its experienced RTT (forward transit plus the reverse delay).
    pub fn on_data_arrival(&mut self, now: Timestamp, path: usize, sent_at: Timestamp) {
        let bin = self.bin(now);
        self.data_packets[bin] += 1;
        let (Some(o), Some(truth)) = (self.objective, self.truth.as_mut()) else {
            return;
        };
        if o.kind != ObjectiveKind::MaxRtt {
            return;
        }
        let Some(&reverse_ms) = truth.at(sent_at.as_secs_f64()).reverse_delay_ms.get(path) else {
            return;
        };
        let transit_ms = (now - sent_at).as_secs_f64() * 1e3;
        self.violation_bins[bin] +=
            ((transit_ms + reverse_ms) / o.rtt_scale_ms - o.threshold).max(0.0);
        self.violation_packets += 1;
    }

    /// Whether regret is measured (the caller may skip decoding sent packets otherwise).
    pub fn wants_sent_data(&self) -> bool {
        self.truth.is_some()
    }

    /// The sender put a data packet on `path` at `now`: its regret against the optimum.
    pub fn on_data_sent(&mut self, now: Timestamp, path: usize) {
        let (Some(o), Some(truth)) = (self.objective, self.truth.as_mut()) else {
            return;
        };
        let truth = truth.at(now.as_secs_f64());
        let (Some(opt), Some(&b), Some(&r)) = (
            truth.optimum,
            truth.bandwidth.get(path),
            truth.rtt.get(path),
        ) else {
            return;
        };
        let regret = match o.kind {
            ObjectiveKind::MaxRtt => opt - b,
            ObjectiveKind::Bandwidth => r - opt,
        };
        let bin = self.bin(now);
        self.regret_bins[bin] += regret.max(0.0);
        self.regret_packets += 1;
    }

    /// The receiving application read `n` bytes at `now`.
    pub fn on_app_bytes(&mut self, now: Timestamp, n: usize) {
        let bin = self.bin(now);
        self.goodput_bytes[bin] += n as u64;
        self.app_bytes += n as u64;
        let t = now.as_secs_f64();
        if self.outages.iter().any(|&(s, e)| s <= t && t < e) {
            self.app_bytes_in_outage += n as u64;
        }
    }

    /// The bandwidth objective's violation per bin: the aggregate receive rate in the bin
    /// above the threshold, counted once per data packet received in the bin.
    fn bandwidth_violation(&mut self, o: &Objective) {
        for bin in 0..self.data_packets.len() {
            let bytes: u64 = self.path_bytes.iter().map(|p| p[bin]).sum();
            let rate = bytes as f64 * 8.0 / self.bin_s / 1e6 / o.bw_scale_mbps;
            let v = (rate - o.threshold).max(0.0);
            self.violation_bins[bin] = v * self.data_packets[bin] as f64;
            self.violation_packets += self.data_packets[bin];
        }
    }

    /// The metrics and series; `active_s` is the time goodput is measured over, `fct_s` the
    /// completion time when the application finished, `deadlines` whether it is realtime.
    pub fn finish(
        mut self,
        active_s: f64,
        fct_s: Option<f64>,
        deadlines: bool,
    ) -> (Metrics, TimeSeries) {
        if let Some(o) = self.objective
            && o.kind == ObjectiveKind::Bandwidth
        {
            self.bandwidth_violation(&o);
        }
        let mbps = |bytes: u64, secs: f64| (secs > 0.0).then(|| bytes as f64 * 8.0 / secs / 1e6);
        let mean = |sum: f64, n: u64| (n > 0).then(|| sum / n as f64);
        let outage_s: f64 = self.outages.iter().map(|(s, e)| e - s).sum();
        let metrics = Metrics {
            throughput_mbps: mbps(self.wire_bytes, active_s),
            goodput_mbps: mbps(self.app_bytes, active_s),
            fct_s,
            regret: self
                .objective
                .and_then(|_| mean(self.regret_bins.iter().sum(), self.regret_packets)),
            violation: self
                .objective
                .and_then(|_| mean(self.violation_bins.iter().sum(), self.violation_packets)),
            deadline_meeting_ratio: deadlines
                .then(|| mean(self.deadline_on_time as f64, self.deadline_total))
                .flatten(),
            ooo_packets: Some(self.ooo_packets as f64),
            redundant_ratio: (self.data_bytes > 0)
                .then(|| self.duplicate_bytes as f64 / self.data_bytes as f64),
            handoff_goodput_mbps: (outage_s > 0.0)
                .then(|| mbps(self.app_bytes_in_outage, outage_s))
                .flatten(),
        };
        let to_mbps = |v: &[u64]| -> Vec<f64> {
            v.iter()
                .map(|&b| b as f64 * 8.0 / self.bin_s / 1e6)
                .collect()
        };
        let cumulative = |v: &[f64]| -> Vec<f64> {
            v.iter()
                .scan(0.0, |acc, x| {
                    *acc += x;
                    Some(*acc)
                })
                .collect()
        };
        let has_objective = self.objective.is_some();
        let series = TimeSeries {
            bin_s: self.bin_s,
            path_mbps: self.path_bytes.iter().map(|p| to_mbps(p)).collect(),
            goodput_mbps: to_mbps(&self.goodput_bytes),
            cumulative_violation: if has_objective {
                cumulative(&self.violation_bins)
            } else {
                Vec::new()
            },
            cumulative_regret: if has_objective {
                cumulative(&self.regret_bins)
            } else {
                Vec::new()
            },
        };
        (metrics, series)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_track_counts_new_bytes_duplicates_and_gaps() {
        let mut t = StreamTrack::default();
        assert_eq!(t.on_data(0, 100), (100, false));
        assert_eq!(t.on_data(200, 300), (100, true), "arrived above a gap");
        assert_eq!(t.on_data(200, 300), (0, false), "duplicate");
        assert_eq!(t.on_data(100, 200), (100, false), "fills the gap");
        assert_eq!(t.contiguous, 300);
        assert!(t.above.is_empty());
        assert_eq!(t.on_data(250, 350), (50, false));
    }

    #[test]
    fn datagram_track_counts_late_and_duplicate_sequence_numbers() {
        let mut t = DatagramTrack::default();
        assert_eq!(t.on_seq(0), (true, false));
        assert_eq!(t.on_seq(2), (true, false));
        assert_eq!(t.on_seq(1), (true, true));
        assert_eq!(t.on_seq(1), (false, false));
        assert_eq!(t.on_seq(130), (true, false));
    }
}
