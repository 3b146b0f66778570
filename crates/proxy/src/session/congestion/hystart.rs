//! HyStart++ (RFC 9406): slow start that stops growing by whole windows once the path's
//! queue starts to fill, instead of when it overflows.
//!
//! Plain slow start doubles the window every round trip until a packet is lost, so on a link
//! with a deep buffer it ends with the buffer full and up to a window of packets lost at once.
//! HyStart++ watches the smallest RTT of each round: once it rises by `RttThresh` (an eighth
//! of the last round's, within 4 to 16 ms) over the round before, it enters Conservative Slow
//! Start (CSS), growing by a quarter of the acknowledged bytes. If the smallest RTT of a CSS
//! round falls back below the one that triggered it, the exit was spurious and slow start
//! resumes; after five CSS rounds, congestion avoidance begins (the caller sets `ssthresh` to
//! the window). A loss ends slow start and CSS as before.
//!
//! Rounds: a round ends when an ACK's largest newly acknowledged packet was sent at or after
//! the round's start (the RFC's `windowEnd`, by send time instead of packet number). RTT
//! samples come once per ACK that gives one ([`HyStart::on_rtt_sample`]). The window grows
//! by the acknowledged bytes with no per-ACK limit (`L` = infinity: every path is paced).
//! Nothing allocates.

use std::time::Duration;

use braid_sched_core::Timestamp;

/// `MIN_RTT_THRESH`: the smallest RTT increase that ends slow start.
const MIN_RTT_THRESH: Duration = Duration::from_millis(4);
/// `MAX_RTT_THRESH`: the largest RTT increase needed to end slow start.
const MAX_RTT_THRESH: Duration = Duration::from_millis(16);
/// `MIN_RTT_DIVISOR`: the threshold is the last round's smallest RTT over this.
const MIN_RTT_DIVISOR: u32 = 8;
/// `N_RTT_SAMPLE`: RTT samples a round needs before its smallest RTT is compared.
const N_RTT_SAMPLE: u32 = 8;
/// `CSS_GROWTH_DIVISOR`: CSS grows the window by the acknowledged bytes over this.
pub(crate) const CSS_GROWTH_DIVISOR: u64 = 4;
/// `CSS_ROUNDS`: CSS rounds before congestion avoidance.
const CSS_ROUNDS: u32 = 5;

/// Where slow start stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Standard slow start: the window grows by every acknowledged byte.
    SlowStart,
    /// Conservative slow start since the smallest RTT rose to `baseline`; `rounds` CSS rounds
    /// have ended.
    Css { baseline: Duration, rounds: u32 },
}

/// HyStart++ state for one path's slow start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HyStart {
    phase: Phase,
    /// Packets sent at or after this instant end the current round when acknowledged.
    round_start: Timestamp,
    last_round_min_rtt: Option<Duration>,
    current_round_min_rtt: Option<Duration>,
    samples: u32,
}

impl Default for HyStart {
    fn default() -> Self {
        HyStart {
            phase: Phase::SlowStart,
            round_start: Timestamp::ZERO,
            last_round_min_rtt: None,
            current_round_min_rtt: None,
            samples: 0,
        }
    }
}

impl HyStart {
    /// Starts over in standard slow start (a new path, or slow start again after persistent
    /// congestion).
    pub fn restart(&mut self) {
        *self = HyStart::default();
    }

    /// How much slower than standard slow start the window grows now: 1, or
    /// [`CSS_GROWTH_DIVISOR`] in CSS.
    pub fn growth_divisor(&self) -> u64 {
        match self.phase {
            Phase::Css { .. } => CSS_GROWTH_DIVISOR,
            Phase::SlowStart => 1,
        }
    }

    /// Whether CSS is under way.
    pub fn in_css(&self) -> bool {
        matches!(self.phase, Phase::Css { .. })
    }

    /// One ACK's RTT sample, taken in slow start: `largest_sent` is when the largest packet it
    /// newly acknowledged was sent, `now` when the ACK arrived. Returns true when CSS has run
    /// its rounds: slow start is over, the caller sets `ssthresh` to its window, and this state
    /// is back at the start for the next slow start.
    pub fn on_rtt_sample(
        &mut self,
        now: Timestamp,
        largest_sent: Timestamp,
        sample: Duration,
    ) -> bool {
        if largest_sent >= self.round_start {
            self.round_start = now;
            self.last_round_min_rtt = self.current_round_min_rtt.take();
            self.samples = 0;
            if let Phase::Css { baseline, rounds } = self.phase {
                if rounds + 1 >= CSS_ROUNDS {
                    self.restart();
                    return true;
                }
                self.phase = Phase::Css {
                    baseline,
                    rounds: rounds + 1,
                };
            }
        }
        let current = self.current_round_min_rtt.map_or(sample, |m| m.min(sample));
        self.current_round_min_rtt = Some(current);
        self.samples = self.samples.saturating_add(1);
        if self.samples < N_RTT_SAMPLE {
            return false;
        }
        match self.phase {
            Phase::SlowStart => {
                let Some(last) = self.last_round_min_rtt else {
                    return false;
                };
                let threshold = (last / MIN_RTT_DIVISOR).clamp(MIN_RTT_THRESH, MAX_RTT_THRESH);
                if current >= last + threshold {
                    self.phase = Phase::Css {
                        baseline: current,
                        rounds: 0,
                    };
                }
            }
            Phase::Css { baseline, .. } if current < baseline => {
                self.phase = Phase::SlowStart;
            }
            Phase::Css { .. } => {}
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Timestamp {
        Timestamp::from_millis(v)
    }

    /// Feeds one round of `n` samples of `rtt_ms`, the round beginning at `start_ms` (each ACK
    /// acknowledging a packet sent after the round began); returns how many of them ended slow
    /// start.
    fn round(h: &mut HyStart, start_ms: u64, rtt_ms: u64, n: u64) -> usize {
        (0..n)
            .filter(|i| {
                let now = ms(1000 + start_ms + i);
                let sent = ms(1000 + start_ms + i - rtt_ms);
                h.on_rtt_sample(now, sent, Duration::from_millis(rtt_ms))
            })
            .count()
    }

    #[test]
    fn a_rising_rtt_enters_css_and_five_css_rounds_end_slow_start() {
        let mut h = HyStart::default();
        // Rounds of 100 ms at a 50 ms RTT: the threshold is 50 / 8 = 6.25 ms.
        round(&mut h, 0, 50, 10);
        round(&mut h, 100, 50, 10);
        round(&mut h, 200, 56, 10);
        assert_eq!(h.growth_divisor(), 1, "6 ms is under the threshold");
        round(&mut h, 300, 63, 10);
        assert_eq!(
            h.growth_divisor(),
            CSS_GROWTH_DIVISOR,
            "7 ms over the last round"
        );
        for k in 1..CSS_ROUNDS {
            assert_eq!(round(&mut h, 300 + 100 * u64::from(k), 63, 10), 0);
            assert!(h.in_css(), "CSS round {k}");
        }
        let ended = round(&mut h, 300 + 100 * u64::from(CSS_ROUNDS), 63, 10);
        assert_eq!(ended, 1, "the fifth CSS round ended slow start, once");
        assert_eq!(h.growth_divisor(), 1);
    }

    #[test]
    fn an_rtt_back_below_the_baseline_resumes_slow_start() {
        let mut h = HyStart::default();
        round(&mut h, 0, 50, 10);
        round(&mut h, 100, 60, 10);
        assert!(h.in_css());
        round(&mut h, 200, 55, 10);
        assert!(!h.in_css(), "55 ms < the 60 ms that triggered CSS");
        assert_eq!(h.growth_divisor(), 1);
    }

    #[test]
    fn few_samples_or_a_small_rise_keep_standard_slow_start() {
        let mut h = HyStart::default();
        round(&mut h, 0, 50, 10);
        round(&mut h, 100, 90, N_RTT_SAMPLE as u64 - 1);
        assert!(!h.in_css(), "seven samples are too few");
        let mut h = HyStart::default();
        // A 1 ms path: the threshold is the 4 ms floor, not 1/8 ms.
        round(&mut h, 0, 1, 10);
        round(&mut h, 100, 4, 10);
        assert!(!h.in_css());
        round(&mut h, 200, 9, 10);
        assert!(h.in_css(), "9 ms >= 4 + 4 ms");
        // A 400 ms path: the threshold is the 16 ms ceiling, not 50 ms.
        let mut h = HyStart::default();
        round(&mut h, 0, 400, 10);
        round(&mut h, 1000, 417, 10);
        assert!(h.in_css());
    }
}
