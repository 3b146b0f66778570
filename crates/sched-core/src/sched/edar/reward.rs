//! EdAR's reward (§IV-B): `r_t = V_g − α V_w − β V_o` with `V_g = G_t`,
//! `V_w = (Σ_i Y_t^i − G_t) / Σ_i Y_t^i` and `V_o = O_t / B_t + F_t / TI_t`, measured at the
//! receiver and returned to the sender in ACKs ([`ReceiverReport`]); α = 1.0 and β = 0.5 (§VI).
//!
//! braid's mapping onto the receiver report (the paper's collector is not specified further):
//! - `G_t`: in-order bytes delivered to the application per second, in units of
//!   `goodput_scale_mbps` (10 Mbit/s by default: the paper leaves the unit open, and an
//!   O(1) goodput keeps the three terms comparable);
//! - `Σ_i Y_t^i`: everything the receiver took in, i.e. delivered plus duplicate bytes, so
//!   `V_w` is the duplicate share;
//! - `O_t`: out-of-order packets in the interval; `B_t`: the receive buffer in 1200-byte packets;
//! - `F_t` (time the receive buffer was full of out-of-order data) is not in braid's report and
//!   counts as 0; a stalled buffer still shows as a goodput collapse in `V_g`.

use crate::scheduler::ReceiverReport;

/// α, β and the scales of [`reward`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RewardWeights {
    /// α, weight of wasted bandwidth.
    pub alpha: f32,
    /// β, weight of out-of-order packets.
    pub beta: f32,
    /// `B_t`, the receive buffer in packets.
    pub receive_buffer_packets: f32,
    /// Goodput that counts as 1.0, Mbit/s.
    pub goodput_scale_mbps: f32,
}

/// The receiver reports that arrived during one decision interval, summed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReportTotals {
    /// Receiver-side time covered, µs.
    pub interval_us: u64,
    /// Bytes delivered in order.
    pub delivered_bytes: u64,
    /// Bytes that arrived more than once.
    pub duplicate_bytes: u64,
    /// Out-of-order packets.
    pub ooo_packets: u64,
}

impl ReportTotals {
    /// Adds one report.
    pub fn add(&mut self, report: &ReceiverReport) {
        self.interval_us = self
            .interval_us
            .saturating_add(u64::from(report.interval_us));
        self.delivered_bytes = self.delivered_bytes.saturating_add(report.delivered_bytes);
        self.duplicate_bytes = self.duplicate_bytes.saturating_add(report.duplicate_bytes);
        self.ooo_packets = self
            .ooo_packets
            .saturating_add(u64::from(report.ooo_packets));
    }

    /// True when no report (or only empty-interval ones) arrived.
    pub fn is_empty(&self) -> bool {
        self.interval_us == 0
    }
}

/// `r_t` for the reports of one interval; 0 when they cover no time.
pub fn reward(totals: &ReportTotals, weights: &RewardWeights) -> f32 {
    if totals.interval_us == 0 {
        return 0.0;
    }
    // bits per µs = Mbit/s.
    let goodput_mbps = totals.delivered_bytes as f64 * 8.0 / totals.interval_us as f64;
    let v_g = (goodput_mbps / f64::from(weights.goodput_scale_mbps.max(1e-6))) as f32;
    let received = totals
        .delivered_bytes
        .saturating_add(totals.duplicate_bytes);
    let v_w = if received == 0 {
        0.0
    } else {
        (totals.duplicate_bytes as f64 / received as f64) as f32
    };
    let v_o = totals.ooo_packets as f32 / weights.receive_buffer_packets.max(1.0);
    v_g - weights.alpha * v_w - weights.beta * v_o
}

#[cfg(test)]
mod tests {
    use super::*;

    const WEIGHTS: RewardWeights = RewardWeights {
        alpha: 1.0,
        beta: 0.5,
        receive_buffer_packets: 100.0,
        goodput_scale_mbps: 10.0,
    };

    #[test]
    fn reward_is_goodput_minus_waste_minus_disorder() {
        let mut t = ReportTotals::default();
        assert_eq!(reward(&t, &WEIGHTS), 0.0);
        // 10 Mbit/s for 100 ms = 125 000 bytes; a quarter of what arrived was duplicate;
        // 20 out-of-order packets of a 100-packet buffer.
        t.add(&ReceiverReport {
            interval_us: 50_000,
            delivered_bytes: 60_000,
            duplicate_bytes: 20_000,
            ooo_packets: 10,
            ..ReceiverReport::default()
        });
        t.add(&ReceiverReport {
            interval_us: 50_000,
            delivered_bytes: 65_000,
            duplicate_bytes: 21_667,
            ooo_packets: 10,
            ..ReceiverReport::default()
        });
        let r = reward(&t, &WEIGHTS);
        let expected = 1.0 - 1.0 * 0.25 - 0.5 * 0.2;
        assert!((r - expected).abs() < 1e-4, "{r} vs {expected}");
    }

    #[test]
    fn redundancy_costs_and_disorder_costs() {
        let clean = ReportTotals {
            interval_us: 100_000,
            delivered_bytes: 125_000,
            duplicate_bytes: 0,
            ooo_packets: 0,
        };
        let wasteful = ReportTotals {
            duplicate_bytes: 125_000,
            ..clean
        };
        let disordered = ReportTotals {
            ooo_packets: 50,
            ..clean
        };
        assert!((reward(&clean, &WEIGHTS) - 1.0).abs() < 1e-6);
        assert!((reward(&wasteful, &WEIGHTS) - 0.5).abs() < 1e-6);
        assert!((reward(&disordered, &WEIGHTS) - 0.75).abs() < 1e-6);
    }
}
