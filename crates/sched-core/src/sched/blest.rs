//! BLEST, BLocking ESTimation (Ferlin et al., "BLEST: Blocking Estimation-based MPTCP
//! Scheduler for Heterogeneous Networks", IFIP Networking 2016), as implemented by the
//! Linux MPTCP v0.95 kernel scheduler `net/mptcp/mptcp_blest.c`.
//!
//! When the fastest path has room the packet goes there. When only a slower path has room,
//! BLEST estimates how long the packet would occupy the connection's send window on the slow
//! path and how many bytes the fast path could send meanwhile, and skips the slow path (waits)
//! when those bytes would not fit in what the window has left:
//!
//! ```text
//! linger  = max(srtt_s, min_srtt_s + (max_srtt_s − min_srtt_s)·(inflight_s + len)/cwnd_s)
//!           (max_srtt_s when the slow window would be full)
//! rounds  = linger / ((min_srtt_f + max_srtt_f)/2) + 1
//! fast    = λ · (cwnd_f + ⌊(rounds − 1)/2⌋·mss_f) · rounds       (Reno growth of one MSS per RTT)
//! wait when fast > window − (inflight_s + len)
//! ```
//!
//! `window` is the connection-level flow-control window counted from the oldest unacknowledged
//! byte, which braid reconstructs as [`PacketMeta::send_window`] (what is still admitted) plus
//! the bytes in flight on every path. braid's path view has no ssthresh, so the fast path is
//! always assumed in congestion avoidance (the kernel's non-slow-start branch).
//!
//! λ starts at 1.2 and adapts in [1.0, 1.3]: at most once per slow-path minimum srtt it grows by
//! 0.04 (`dyn_lambda_bad`) when a retransmission was scheduled since the last update (a packet
//! with [`PacketMeta::retransmit`]), and shrinks by 0.01 (`dyn_lambda_good`) otherwise. The
//! per-path min/max srtt are tracked over every decision, as the kernel does. Failed,
//! rate-capped and non-admitted backup paths take no part (see [`crate::tier`]).

use crate::decision::Decision;
use crate::packet::PacketMeta;
use crate::path::{MAX_PATHS, PathId, PathView};
use crate::scheduler::{ParamError, ParamInfo, Scheduler, SchedulerInfo, SchedulerKind, in_range};
use crate::tier::TierGate;
use crate::time::Timestamp;

/// Configuration of [`Blest`]; defaults are the kernel's module parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct BlestConfig {
    /// Initial λ (kernel `lambda` = 12, i.e. 1.2).
    pub lambda: f64,
    /// Lower bound of λ (kernel `min_lambda` = 10).
    pub min_lambda: f64,
    /// Upper bound of λ (kernel `max_lambda` = 13).
    pub max_lambda: f64,
    /// Decrease of λ per update without retransmissions (kernel `dyn_lambda_good` = 1%).
    pub lambda_decrease: f64,
    /// Increase of λ per update after retransmissions (kernel `dyn_lambda_bad` = 4%).
    pub lambda_increase: f64,
}

impl BlestConfig {
    /// Sets parameter `name`; `Ok(false)` when BLEST has no such parameter.
    pub fn set(&mut self, name: &str, value: f64) -> Result<bool, ParamError> {
        const FACTOR: &str = "a factor in [0.1, 10]";
        const STEP: &str = "a step in [0, 1]";
        match name {
            "lambda" => self.lambda = in_range("lambda", value, 0.1, 10.0, FACTOR)?,
            "min_lambda" => self.min_lambda = in_range("min_lambda", value, 0.1, 10.0, FACTOR)?,
            "max_lambda" => self.max_lambda = in_range("max_lambda", value, 0.1, 10.0, FACTOR)?,
            "lambda_decrease" => {
                self.lambda_decrease = in_range("lambda_decrease", value, 0.0, 1.0, STEP)?;
            }
            "lambda_increase" => {
                self.lambda_increase = in_range("lambda_increase", value, 0.0, 1.0, STEP)?;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Checks what no single parameter can: the bounds of λ in order (λ itself is clamped into
    /// them, as in the kernel).
    pub fn validate(&self) -> Result<(), ParamError> {
        if self.max_lambda < self.min_lambda {
            return Err(ParamError::OutOfRange {
                name: "max_lambda",
                value: self.max_lambda,
                expected: "a factor >= min_lambda",
            });
        }
        Ok(())
    }
}

impl Default for BlestConfig {
    fn default() -> Self {
        BlestConfig {
            lambda: 1.2,
            min_lambda: 1.0,
            max_lambda: 1.3,
            lambda_decrease: 0.01,
            lambda_increase: 0.04,
        }
    }
}

/// Blocking estimation scheduler.
#[derive(Clone, Debug)]
pub struct Blest {
    /// λ and its bounds and steps in thousandths, as the kernel's `lambda_1000`.
    lambda_1000: i64,
    min_lambda_1000: i64,
    max_lambda_1000: i64,
    decrease_1000: i64,
    increase_1000: i64,
    /// A retransmission was scheduled since λ was last updated (the kernel's `retrans_flag`).
    retransmitted: bool,
    last_lambda_update: Timestamp,
    /// Smallest srtt seen per path, µs (`u32::MAX` until seen).
    min_srtt: [u32; MAX_PATHS],
    /// Largest srtt seen per path, µs.
    max_srtt: [u32; MAX_PATHS],
}

/// `value` in thousandths, rounded (parameters are validated to small ranges by `set`).
fn thousandths(value: f64) -> i64 {
    (value * 1000.0).round() as i64
}

impl Blest {
    /// Catalogue entry.
    pub const INFO: SchedulerInfo = SchedulerInfo {
        kind: SchedulerKind::Blest,
        summary: "minRTT, but skips a slower path whose packet would block the send window for the fast one",
        source: "Ferlin et al., IFIP Networking 2016; Linux MPTCP v0.95 mptcp_blest.c",
        params: &[
            ParamInfo {
                name: "lambda",
                default: 1.2,
                description: "initial scaling of the fast path's estimated bytes, in [0.1, 10]",
            },
            ParamInfo {
                name: "min_lambda",
                default: 1.0,
                description: "lower bound of lambda, in [0.1, 10]",
            },
            ParamInfo {
                name: "max_lambda",
                default: 1.3,
                description: "upper bound of lambda, in [0.1, 10] and at least min_lambda",
            },
            ParamInfo {
                name: "lambda_decrease",
                default: 0.01,
                description: "lambda decrease per slow-path min RTT without retransmissions, in [0, 1]",
            },
            ParamInfo {
                name: "lambda_increase",
                default: 0.04,
                description: "lambda increase per slow-path min RTT with retransmissions, in [0, 1]",
            },
        ],
    };

    /// Builds the scheduler.
    pub fn new(config: &BlestConfig) -> Self {
        let min_lambda_1000 = thousandths(config.min_lambda);
        // `validate` refuses max < min; a config built without it still gets ordered bounds.
        let max_lambda_1000 = thousandths(config.max_lambda).max(min_lambda_1000);
        Blest {
            lambda_1000: thousandths(config.lambda).clamp(min_lambda_1000, max_lambda_1000),
            min_lambda_1000,
            max_lambda_1000,
            decrease_1000: thousandths(config.lambda_decrease),
            increase_1000: thousandths(config.lambda_increase),
            retransmitted: false,
            last_lambda_update: Timestamp::ZERO,
            min_srtt: [u32::MAX; MAX_PATHS],
            max_srtt: [0; MAX_PATHS],
        }
    }

    /// The current λ.
    pub fn lambda(&self) -> f64 {
        self.lambda_1000 as f64 / 1000.0
    }

    fn srtt_bounds(&self, path: &PathView) -> (u32, u32) {
        let slot = path.id.index();
        match (self.min_srtt.get(slot), self.max_srtt.get(slot)) {
            (Some(&lo), Some(&hi)) if lo <= hi => (lo, hi),
            _ => (path.srtt_us, path.srtt_us),
        }
    }

    /// Kernel `blestsched_update_lambda`: once per slow-path minimum srtt.
    fn update_lambda(&mut self, slow: &PathView, now: Timestamp) {
        let (min_srtt, _) = self.srtt_bounds(slow);
        let elapsed = now
            .as_micros()
            .saturating_sub(self.last_lambda_update.as_micros());
        if elapsed < u64::from(min_srtt) {
            return;
        }
        if self.retransmitted {
            self.lambda_1000 += self.increase_1000;
        } else {
            self.lambda_1000 -= self.decrease_1000;
        }
        self.retransmitted = false;
        self.lambda_1000 = self
            .lambda_1000
            .clamp(self.min_lambda_1000, self.max_lambda_1000);
        self.last_lambda_update = now;
    }

    /// Kernel `blestsched_estimate_linger_time`: how long a packet sent now on `slow` stays
    /// unacknowledged, µs.
    fn linger_time(&self, slow: &PathView, len: u32) -> u64 {
        let (min_srtt, max_srtt) = self.srtt_bounds(slow);
        let inflight = slow.bytes_in_flight.saturating_add(u64::from(len));
        let estimate = if inflight >= slow.cwnd {
            u64::from(max_srtt)
        } else {
            let slope = u128::from(max_srtt - min_srtt);
            let rise = slope * u128::from(inflight) / u128::from(slow.cwnd.max(1));
            u64::from(min_srtt).saturating_add(u64::try_from(rise).unwrap_or(u64::MAX))
        };
        estimate.max(u64::from(slow.srtt_us))
    }

    /// Kernel `blestsched_estimate_bytes` (congestion-avoidance branch): bytes `fast` sends in
    /// `time_us`, scaled by λ.
    fn fast_bytes(&self, fast: &PathView, time_us: u64) -> u128 {
        let (min_srtt, max_srtt) = self.srtt_bounds(fast);
        let avg_rtt = (u64::from(min_srtt) + u64::from(max_srtt)) / 2;
        let rounds = match avg_rtt {
            0 => 1,
            avg => u128::from(time_us / avg) + 1,
        };
        let mss = u128::from(fast.max_datagram_size);
        let bytes = (u128::from(fast.cwnd) + (rounds - 1) / 2 * mss) * rounds;
        bytes * u128::from(self.lambda_1000.unsigned_abs()) / 1000
    }
}

impl Scheduler for Blest {
    #[inline]
    fn select(&mut self, paths: &[PathView], packet: &PacketMeta, now: Timestamp) -> Decision {
        if packet.retransmit {
            self.retransmitted = true;
        }
        let gate = TierGate::new(paths);
        let mut fastest: Option<&PathView> = None;
        let mut best: Option<&PathView> = None;
        let mut in_flight_total: u64 = 0;
        for p in paths {
            in_flight_total = in_flight_total.saturating_add(p.bytes_in_flight);
            if !p.is_usable() || !gate.admits(p) {
                continue;
            }
            if let (Some(lo), Some(hi)) = (
                self.min_srtt.get_mut(p.id.index()),
                self.max_srtt.get_mut(p.id.index()),
            ) {
                *lo = (*lo).min(p.srtt_us);
                *hi = (*hi).max(p.srtt_us);
            }
            let key = (p.srtt_us, p.id);
            if fastest.is_none_or(|f| key < (f.srtt_us, f.id)) {
                fastest = Some(p);
            }
            if p.headroom() >= u64::from(packet.len) && best.is_none_or(|b| key < (b.srtt_us, b.id))
            {
                best = Some(p);
            }
        }
        let Some(best) = best else {
            return Decision::Wait;
        };
        let Some(fast) = fastest.filter(|f| f.id != best.id) else {
            return Decision::Send(best.id);
        };
        self.update_lambda(best, now);
        let linger = self.linger_time(best, packet.len);
        let fast_bytes = self.fast_bytes(fast, linger);
        let window = packet.send_window.saturating_add(in_flight_total);
        let slow_bytes = best.bytes_in_flight.saturating_add(u64::from(packet.len));
        let available = u128::from(window.saturating_sub(slow_bytes));
        if fast_bytes > available {
            Decision::Wait
        } else {
            Decision::Send(best.id)
        }
    }

    fn on_path_state(&mut self, path: PathId, _state: crate::PathState, _now: Timestamp) {
        if let (Some(lo), Some(hi)) = (
            self.min_srtt.get_mut(path.index()),
            self.max_srtt.get_mut(path.index()),
        ) {
            *lo = u32::MAX;
            *hi = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inverted_lambda_bounds_are_refused() {
        let mut config = BlestConfig::default();
        // Set one at a time, max first (as a file's parameters come, by name): the pair is
        // checked once both are in.
        assert_eq!(config.set("max_lambda", 0.8), Ok(true));
        assert_eq!(config.set("min_lambda", 0.5), Ok(true));
        assert_eq!(config.validate(), Ok(()));
        assert_eq!(config.set("min_lambda", 5.0), Ok(true));
        assert_eq!(
            config.validate(),
            Err(ParamError::OutOfRange {
                name: "max_lambda",
                value: 0.8,
                expected: "a factor >= min_lambda",
            })
        );
    }

    /// Fast: 10 ms, 20 kB window, full. Slow: 50 ms, 20 kB window, empty. 1200-byte MSS.
    fn paths() -> [PathView; 2] {
        let mut fast = PathView::new(PathId(0), 10_000, 20_000);
        fast.bytes_in_flight = 20_000;
        let slow = PathView::new(PathId(1), 50_000, 20_000);
        [fast, slow]
    }

    fn packet(send_window: u64) -> PacketMeta {
        PacketMeta {
            send_window,
            ..PacketMeta::bulk(1_200)
        }
    }

    #[test]
    fn skips_slow_path_that_would_block_the_window() {
        // Fresh stats: min = max srtt, so linger = 50 ms; fast rounds = 50/10 + 1 = 6;
        // fast bytes = 1.2·(20_000 + 2·1_200)·6 = 161_280. The first decision at t = 0 does not
        // update λ (less than the slow path's min srtt since t = 0).
        // window = send_window + 20_000 in flight; available = window − 1_200.
        let p = paths();
        let mut s = Blest::new(&BlestConfig::default());
        // available = 142_480 + 20_000 − 1_200 = 161_280: fits exactly, send on the slow path.
        assert_eq!(
            s.select(&p, &packet(142_480), Timestamp::ZERO),
            Decision::Send(PathId(1))
        );
        // One byte less: the fast path would be blocked, wait.
        assert_eq!(
            s.select(&p, &packet(142_479), Timestamp::ZERO),
            Decision::Wait
        );
        // The fast path has room: always there.
        let mut free = p;
        free[0].bytes_in_flight = 0;
        assert_eq!(
            s.select(&free, &packet(0), Timestamp::ZERO),
            Decision::Send(PathId(0))
        );
    }

    #[test]
    fn lambda_adapts_within_bounds() {
        let p = paths();
        let mut s = Blest::new(&BlestConfig::default());
        assert_eq!(s.lambda(), 1.2);
        // Every 50 ms (the slow path's min srtt) without retransmissions: −0.01, floor 1.0.
        for i in 1..=30 {
            s.select(&p, &packet(u64::MAX), Timestamp::from_millis(50 * i));
        }
        assert!((s.lambda() - 1.0).abs() < 1e-9);
        // A retransmission: +0.04 at the next update, ceiling 1.3.
        let mut retx = packet(u64::MAX);
        retx.retransmit = true;
        s.select(&p, &retx, Timestamp::from_millis(50 * 31));
        assert!((s.lambda() - 1.04).abs() < 1e-9);
        for i in 32..=50 {
            s.select(&p, &retx, Timestamp::from_millis(50 * i));
        }
        assert!((s.lambda() - 1.3).abs() < 1e-9);
        // Updates are rate-limited to one per slow-path min srtt.
        s.select(&p, &packet(u64::MAX), Timestamp::from_millis(50 * 50 + 10));
        assert!((s.lambda() - 1.3).abs() < 1e-9);
    }

    #[test]
    fn linger_time_grows_with_slow_path_occupancy() {
        let mut p = paths();
        let mut s = Blest::new(&BlestConfig::default());
        s.select(&p, &packet(u64::MAX), Timestamp::ZERO);
        p[1].srtt_us = 90_000;
        s.select(&p, &packet(u64::MAX), Timestamp::ZERO);
        p[1].srtt_us = 50_000;
        // min 50 ms, max 90 ms: empty window → 50 + 40·1_200/20_000 = 52.4 ms.
        assert_eq!(s.linger_time(&p[1], 1_200), 52_400);
        // full window → max srtt.
        p[1].bytes_in_flight = 19_000;
        assert_eq!(s.linger_time(&p[1], 1_200), 90_000);
    }
}
