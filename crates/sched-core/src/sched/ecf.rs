//! ECF, Earliest Completion First (Lim et al., "ECF: An MPTCP Path Scheduler to Manage
//! Heterogeneous Paths", CoNEXT 2017), as implemented by the Linux MPTCP v0.95 kernel
//! scheduler `net/mptcp/mptcp_ecf.c`.
//!
//! When the fastest path (lowest srtt, window full or not) has room, the packet goes there. When
//! only a slower path has room, ECF asks whether the data still queued (`k`, the session's
//! backlog, [`PacketMeta::backlog_bytes`]) would finish sooner by waiting for the fast path:
//!
//! ```text
//! n = 1 + max(k, cwnd_f) / cwnd_f                    (rounds on the fast path, at least one)
//! δ = max(rttvar_f, rttvar_s)
//! if n·rtt_f < (1 + waiting·β)·(rtt_s + δ):          (waiting for the fast path finishes first)
//!     if max(k, cwnd_s)/cwnd_s · rtt_s >= 2·rtt_f + δ:   (and the slow path is too slow)
//!         waiting = 1; wait
//! else:
//!     waiting = 0
//! send on the slower path
//! ```
//!
//! This is the kernel's form (multiplied out to avoid divisions; `waiting` is its
//! `switching_margin`, β = 1 / `mptcp_ecf_r_beta` = 1/4): the hysteresis flag keeps ECF from
//! flapping between waiting and sending once it has decided to wait. Unlike the quic-go port,
//! ECF here really waits: the slow path's free window is left unused when waiting is better.
//! Windows are in bytes (the kernel's `cwnd·mss`). Failed, rate-capped and non-admitted backup
//! paths take no part (see [`crate::tier`]).

use crate::decision::Decision;
use crate::packet::PacketMeta;
use crate::path::PathView;
use crate::sched::minrtt::{FastAndBest, fastest_and_best};
use crate::scheduler::{ParamError, ParamInfo, Scheduler, SchedulerInfo, SchedulerKind, in_range};
use crate::time::Timestamp;

/// Configuration of [`Ecf`].
#[derive(Clone, Debug, PartialEq)]
pub struct EcfConfig {
    /// Hysteresis β: once waiting, keep waiting while the fast path wins by less than this
    /// fraction. Kernel default 1/4 (`mptcp_ecf_r_beta` = 4).
    pub beta: f64,
}

impl EcfConfig {
    /// Sets parameter `name`; `Ok(false)` when ECF has no such parameter.
    pub fn set(&mut self, name: &str, value: f64) -> Result<bool, ParamError> {
        match name {
            "beta" => self.beta = in_range("beta", value, 0.0, 1.0, "a fraction in [0, 1]")?,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

impl Default for EcfConfig {
    fn default() -> Self {
        EcfConfig { beta: 0.25 }
    }
}

/// Earliest Completion First.
#[derive(Clone, Debug)]
pub struct Ecf {
    beta: f64,
    /// The kernel's `switching_margin`: set when ECF last chose to wait for the fast path.
    waiting: bool,
}

impl Ecf {
    /// Catalogue entry.
    pub const INFO: SchedulerInfo = SchedulerInfo {
        kind: SchedulerKind::Ecf,
        summary: "minRTT, but waits for the fastest path when sending on a slower one would finish later",
        source: "Lim et al., CoNEXT 2017; Linux MPTCP v0.95 mptcp_ecf.c",
        params: &[ParamInfo {
            name: "beta",
            default: 0.25,
            description: "hysteresis margin while waiting for the fast path, fraction in [0, 1]",
        }],
    };

    /// Builds the scheduler.
    pub fn new(config: &EcfConfig) -> Self {
        Ecf {
            beta: config.beta,
            waiting: false,
        }
    }

    /// True when ECF's last slow-path decision was to wait (the kernel's `switching_margin`).
    pub fn is_waiting(&self) -> bool {
        self.waiting
    }

    /// The ECF inequalities for sending a packet with `backlog` bytes queued on `slow` while
    /// `fast` is full. Returns true to wait; updates the hysteresis flag.
    fn should_wait(&mut self, fast: &PathView, slow: &PathView, backlog: u64) -> bool {
        let cwnd_f = fast.cwnd.max(1) as f64;
        let cwnd_s = slow.cwnd.max(1) as f64;
        let rtt_f = f64::from(fast.srtt_us);
        let rtt_s = f64::from(slow.srtt_us);
        let delta = f64::from(fast.rttvar_us.max(slow.rttvar_us));
        let k = backlog as f64;

        let x_f = k.max(cwnd_f);
        let lhs = rtt_f * (x_f + cwnd_f);
        let rhs = cwnd_f * (rtt_s + delta);
        let margin = if self.waiting { 1.0 + self.beta } else { 1.0 };
        if lhs < rhs * margin {
            let x_s = k.max(cwnd_s);
            if rtt_s * x_s >= cwnd_s * (2.0 * rtt_f + delta) {
                self.waiting = true;
                return true;
            }
        } else {
            self.waiting = false;
        }
        false
    }
}

impl Scheduler for Ecf {
    #[inline]
    fn select(&mut self, paths: &[PathView], packet: &PacketMeta, _now: Timestamp) -> Decision {
        let FastAndBest { fastest, best } = fastest_and_best(paths, packet.len);
        let Some(best) = best else {
            return Decision::Wait;
        };
        match fastest {
            Some(fast) if fast.id != best.id => {
                if self.should_wait(fast, best, packet.backlog_bytes) {
                    Decision::Wait
                } else {
                    Decision::Send(best.id)
                }
            }
            _ => Decision::Send(best.id),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::{PathId, PathState};

    /// Fast path: 10 ms, rttvar 1 ms, full window of 10 kB. Slow path: 100 ms, rttvar 5 ms,
    /// 10 kB window with room.
    fn paths() -> [PathView; 2] {
        let mut fast = PathView::new(PathId(0), 10_000, 10_000);
        fast.rttvar_us = 1_000;
        fast.bytes_in_flight = 10_000;
        let mut slow = PathView::new(PathId(1), 100_000, 10_000);
        slow.rttvar_us = 5_000;
        [fast, slow]
    }

    fn packet(backlog: u64) -> PacketMeta {
        PacketMeta {
            backlog_bytes: backlog,
            ..PacketMeta::bulk(1_200)
        }
    }

    #[test]
    fn sends_on_fast_path_when_it_has_room() {
        let mut s = Ecf::new(&EcfConfig::default());
        let mut p = paths();
        p[0].bytes_in_flight = 0;
        assert_eq!(
            s.select(&p, &packet(1_000_000), Timestamp::ZERO),
            Decision::Send(PathId(0))
        );
    }

    #[test]
    fn waits_exactly_when_the_inequalities_say_so() {
        let mut s = Ecf::new(&EcfConfig::default());
        let p = paths();
        // k = 20 kB: lhs = 10e3·(20e3+10e3) = 3.0e8 < rhs = 10e3·(100e3+5e3) = 1.05e9, and
        // rtt_s·x_s = 100e3·20e3 = 2e9 >= cwnd_s·(2·10e3+5e3) = 2.5e8: wait.
        assert_eq!(
            s.select(&p, &packet(20_000), Timestamp::ZERO),
            Decision::Wait
        );
        assert!(s.is_waiting());
        // k = 1 MB: lhs = 10e3·1.01e6 = 1.01e10 >= 1.05e9·1.25: the slow path helps, send.
        assert_eq!(
            s.select(&p, &packet(1_000_000), Timestamp::ZERO),
            Decision::Send(PathId(1))
        );
        assert!(!s.is_waiting());
    }

    #[test]
    fn beta_hysteresis_keeps_waiting() {
        // k = 110 kB: lhs/rhs = (110e3+10e3)/105e3 = 1.143: above 1, below 1 + β = 1.25.
        let p = paths();
        let mut fresh = Ecf::new(&EcfConfig::default());
        assert_eq!(
            fresh.select(&p, &packet(110_000), Timestamp::ZERO),
            Decision::Send(PathId(1))
        );
        let mut waiting = Ecf::new(&EcfConfig::default());
        assert_eq!(
            waiting.select(&p, &packet(20_000), Timestamp::ZERO),
            Decision::Wait
        );
        assert_eq!(
            waiting.select(&p, &packet(110_000), Timestamp::ZERO),
            Decision::Wait
        );
        // With β = 0 the flag no longer matters.
        let mut no_margin = Ecf::new(&EcfConfig { beta: 0.0 });
        assert_eq!(
            no_margin.select(&p, &packet(20_000), Timestamp::ZERO),
            Decision::Wait
        );
        assert_eq!(
            no_margin.select(&p, &packet(110_000), Timestamp::ZERO),
            Decision::Send(PathId(1))
        );
    }

    #[test]
    fn each_inequality_decides_on_its_own() {
        // k = 10 kB = cwnd_f, so n = 2; δ = 1 ms. The waiting flag is reset by each send.
        let mut p = paths();
        p[1].rttvar_us = 1_000;
        let mut s = Ecf::new(&EcfConfig::default());
        // Slow 12 ms: 2·10 = 20 ms >= 12 + 1 ms, waiting is no faster: send.
        p[1].srtt_us = 12_000;
        assert_eq!(
            s.select(&p, &packet(10_000), Timestamp::ZERO),
            Decision::Send(PathId(1))
        );
        // Slow 20.5 ms: 20 < 21.5 ms, but 20.5 < 2·10 + 1 ms, not slow enough: send.
        p[1].srtt_us = 20_500;
        assert_eq!(
            s.select(&p, &packet(10_000), Timestamp::ZERO),
            Decision::Send(PathId(1))
        );
        // Slow 21 ms: 20 < 22 ms and 21 >= 21 ms: wait.
        p[1].srtt_us = 21_000;
        assert_eq!(
            s.select(&p, &packet(10_000), Timestamp::ZERO),
            Decision::Wait
        );
    }

    #[test]
    fn a_potentially_failed_fast_path_is_not_waited_for() {
        let mut p = paths();
        let mut s = Ecf::new(&EcfConfig::default());
        // The fast path is full and the backlog small: ECF waits for it.
        assert_eq!(
            s.select(&p, &packet(20_000), Timestamp::ZERO),
            Decision::Wait
        );
        // A probe timeout on it with nothing acknowledged since: it may be dark.
        p[0].potentially_failed = true;
        assert_eq!(
            s.select(&p, &packet(20_000), Timestamp::ZERO),
            Decision::Send(PathId(1))
        );
    }

    #[test]
    fn failed_fast_path_is_not_waited_for() {
        let mut p = paths();
        p[0].state = PathState::Failed;
        let mut s = Ecf::new(&EcfConfig::default());
        assert_eq!(
            s.select(&p, &packet(20_000), Timestamp::ZERO),
            Decision::Send(PathId(1))
        );
        p[1].bytes_in_flight = 10_000;
        assert_eq!(
            s.select(&p, &packet(20_000), Timestamp::ZERO),
            Decision::Wait
        );
    }
}
