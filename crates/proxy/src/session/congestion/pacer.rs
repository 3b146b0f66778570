//! Pacing of one path's packets, RFC 9002 §7.7.
//!
//! A token bucket refilled at `1.25 * cwnd / srtt` bytes per second (N = 1.25 so that pacing does
//! not itself limit the window). The bucket holds at most the burst capacity, which adapts to the
//! path as quinn's pacer does: the bytes the window moves in 2 ms (`cwnd * 2 ms / srtt`), clamped
//! to `[min_burst, max_burst]` (by default 10 and 256 datagrams). A fixed 10-datagram burst caps
//! a path at 10 datagrams per wake-up of a sender whose timer ticks every millisecond, far below
//! a fast path's rate; 2 ms of the window covers a tick with room to spare, and small RTTs (where
//! a burst is cheap) get large bursts while long paths keep short ones. Rate and capacity are
//! recomputed from the window and smoothed RTT passed on every call, so they follow the
//! controller without being told of changes; a capacity that shrinks drops the tokens above it.
//! Refills are exact rational arithmetic that keeps the sub-byte remainder, so a slow rate polled
//! every microsecond accrues exactly as much as one polled once. Everything is integer
//! arithmetic on the inputs, so the pacer is deterministic.
//!
//! A controller that sets its own rate (BBR's `pacing_gain * BtlBw`) paces through
//! [`Pacer::delay_at_rate`] instead: the same bucket, refilled at that rate, with the burst the
//! same 1.6 ms of it that the window form gives (2 ms of the window is 1.6 ms at 1.25 times
//! the window's rate).

use std::time::Duration;

use braid_sched_core::Timestamp;
use braid_sched_core::time::duration_micros;

/// The span of sending a burst may cover: capacity = `window * BURST_INTERVAL / srtt` (quinn).
const BURST_INTERVAL_US: u128 = 2_000;
/// Smallest default burst, in datagrams.
pub const MIN_BURST_DATAGRAMS: u64 = 10;
/// Largest default burst, in datagrams.
pub const MAX_BURST_DATAGRAMS: u64 = 256;

/// Paces one path (RFC 9002 §7.7).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pacer {
    tokens: u64,
    /// Sub-byte remainder of the last refill, in units of `1 / fraction_unit` bytes.
    fraction: u128,
    /// The denominator `fraction` is counted in (the rate's `micros` when it was earned).
    fraction_unit: u128,
    /// The current burst capacity, within `[min_burst, max_burst]`.
    capacity: u64,
    min_burst: u64,
    max_burst: u64,
    /// The rate `capacity` was computed from (`None`: recompute on the next call).
    last_rate: Option<Rate>,
    last_refill: Timestamp,
}

/// The pacing rate as the exact fraction `bytes / micros` (bytes per µs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Rate {
    bytes: u128,
    micros: u128,
}

impl Rate {
    /// `1.25 * window / srtt` = `5 * window` bytes per `4 * srtt` µs; `None` when either is zero.
    fn new(window: u64, srtt: Duration) -> Option<Rate> {
        let micros = 4 * u128::from(duration_micros(srtt));
        let bytes = 5 * u128::from(window);
        (micros > 0 && bytes > 0).then_some(Rate { bytes, micros })
    }

    /// `bytes_per_sec` bytes per 10^6 µs; `None` when zero.
    fn per_second(bytes_per_sec: u64) -> Option<Rate> {
        (bytes_per_sec > 0).then_some(Rate {
            bytes: u128::from(bytes_per_sec),
            micros: 1_000_000,
        })
    }
}

impl Pacer {
    /// A pacer for datagrams of up to `max_datagram_size` bytes, with bursts of 10 to 256 of
    /// them (quinn's bounds); it starts with a full burst of 10.
    pub fn new(max_datagram_size: u64) -> Self {
        Self::with_burst_range(
            max_datagram_size.saturating_mul(MIN_BURST_DATAGRAMS),
            max_datagram_size.saturating_mul(MAX_BURST_DATAGRAMS),
        )
    }

    /// A pacer whose burst capacity stays within `[min_burst, max_burst]` bytes (`max_burst`
    /// below `min_burst` counts as `min_burst`; equal bounds give a fixed burst); it starts with
    /// a full burst of `min_burst`.
    pub fn with_burst_range(min_burst: u64, max_burst: u64) -> Self {
        Pacer {
            tokens: min_burst,
            fraction: 0,
            fraction_unit: 0,
            capacity: min_burst,
            min_burst,
            max_burst: max_burst.max(min_burst),
            last_rate: None,
            last_refill: Timestamp::ZERO,
        }
    }

    /// Changes the burst bounds (a path's datagram size changed): the capacity is recomputed
    /// within `[min_burst, max_burst]` on the next call, and tokens above a smaller capacity are
    /// dropped then.
    pub fn set_burst_range(&mut self, min_burst: u64, max_burst: u64) {
        self.min_burst = min_burst;
        self.max_burst = max_burst.max(min_burst);
        // Force `update_capacity` to run with the new bounds.
        self.last_rate = None;
        self.capacity = self.capacity.clamp(self.min_burst, self.max_burst);
        self.tokens = self.tokens.min(self.capacity);
    }

    /// When a packet of `bytes` may be sent: `None` now, `Some(t)` not before `t` (later than
    /// `now` unless `now` is [`Timestamp::MAX`]). `window` is the congestion window and `srtt`
    /// the smoothed RTT; with either zero there is no rate to pace at and the answer is `None`
    /// (the window still gates). A packet larger than the burst waits until the bucket holds it.
    pub fn delay(
        &mut self,
        now: Timestamp,
        bytes: u64,
        window: u64,
        srtt: Duration,
    ) -> Option<Timestamp> {
        self.delay_with(now, bytes, Rate::new(window, srtt)?)
    }

    /// As [`Pacer::delay`], at a rate the controller set: `bytes_per_sec` (zero: no pacing).
    pub fn delay_at_rate(
        &mut self,
        now: Timestamp,
        bytes: u64,
        bytes_per_sec: u64,
    ) -> Option<Timestamp> {
        self.delay_with(now, bytes, Rate::per_second(bytes_per_sec)?)
    }

    fn delay_with(&mut self, now: Timestamp, bytes: u64, rate: Rate) -> Option<Timestamp> {
        self.update_capacity(rate);
        self.refill(now, rate, self.capacity.max(bytes));
        if self.tokens >= bytes {
            return None;
        }
        let needed = u128::from(bytes - self.tokens)
            .saturating_mul(rate.micros)
            .saturating_sub(self.fraction);
        let wait = u64::try_from(needed.div_ceil(rate.bytes)).unwrap_or(u64::MAX);
        Some(self.last_refill + Duration::from_micros(wait))
    }

    /// A packet of `bytes` was sent: its bytes leave the bucket.
    pub fn on_sent(&mut self, now: Timestamp, bytes: u64) {
        if now > self.last_refill && self.tokens >= self.capacity {
            // A full bucket earns nothing while it waits; start accruing from this send.
            self.last_refill = now;
            self.fraction = 0;
        }
        self.tokens = self.tokens.saturating_sub(bytes);
    }

    /// Bytes that may be sent at once, as of the last call.
    pub fn tokens(&self) -> u64 {
        self.tokens
    }

    /// The burst capacity in bytes, as of the last call.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Recomputes the capacity when the rate changed: `window * 2 ms / srtt` within the bounds
    /// (quinn's `optimal_capacity`), that is 1.6 ms of the rate `1.25 * window / srtt`. Tokens
    /// above a smaller capacity are dropped; a larger capacity fills at the pacing rate.
    fn update_capacity(&mut self, rate: Rate) {
        if self.last_rate == Some(rate) {
            return;
        }
        self.last_rate = Some(rate);
        // 4/5 of the rate's bytes in BURST_INTERVAL: `window * 2 ms / srtt` for the window form.
        let ideal = rate
            .bytes
            .saturating_mul(4 * BURST_INTERVAL_US)
            .checked_div(5 * rate.micros)
            .unwrap_or(u128::MAX);
        self.capacity = u64::try_from(ideal)
            .unwrap_or(u64::MAX)
            .clamp(self.min_burst, self.max_burst);
        self.tokens = self.tokens.min(self.capacity);
    }

    /// Adds what `rate` earned since the last refill, up to `capacity`.
    fn refill(&mut self, now: Timestamp, rate: Rate, capacity: u64) {
        if self.fraction_unit != rate.micros {
            // The remainder was counted at another RTT; dropping it loses less than a byte.
            self.fraction = 0;
            self.fraction_unit = rate.micros;
        }
        let elapsed = u128::from(duration_micros(now - self.last_refill));
        self.last_refill = self.last_refill.max(now);
        let earned = elapsed
            .checked_mul(rate.bytes)
            .and_then(|scaled| scaled.checked_add(self.fraction));
        let room = u128::from(capacity.saturating_sub(self.tokens));
        match earned {
            Some(scaled) if scaled / rate.micros < room => {
                // Less than `room`, which fits in a u64, so the conversion cannot fail.
                self.tokens += u64::try_from(scaled / rate.micros).unwrap_or(0);
                self.fraction = scaled % rate.micros;
            }
            _ => {
                self.tokens = capacity;
                self.fraction = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MDS: u64 = 1200;

    fn us(v: u64) -> Timestamp {
        Timestamp::from_micros(v)
    }

    /// Sends `count` datagrams as early as the pacer allows, returning their send times.
    fn send_paced(pacer: &mut Pacer, count: usize, window: u64, srtt: Duration) -> Vec<u64> {
        let mut now = Timestamp::ZERO;
        let mut times = Vec::with_capacity(count);
        while times.len() < count {
            match pacer.delay(now, MDS, window, srtt) {
                None => {
                    pacer.on_sent(now, MDS);
                    times.push(now.as_micros());
                }
                Some(at) => {
                    assert!(at > now, "delay {at:?} not after {now:?}");
                    now = at;
                }
            }
        }
        times
    }

    #[test]
    fn spreads_a_window_over_the_round_trip() {
        // window 120000 bytes, srtt 100 ms: rate 1.25 * 120000 / 0.1 s = 1.5 bytes/µs, so one
        // 1200-byte datagram every 800 µs after a 10-datagram burst.
        let mut pacer = Pacer::with_burst_range(10 * MDS, 10 * MDS);
        let times = send_paced(&mut pacer, 100, 120_000, Duration::from_millis(100));
        assert!(times[..10].iter().all(|&t| t == 0));
        for (i, &t) in times.iter().enumerate().skip(10) {
            assert_eq!(t, (i as u64 - 9) * 800, "datagram {i}");
        }
        // The whole window is out after (100 - 10) * 800 µs = 72 ms = 0.8 srtt minus the burst.
        assert_eq!(times[99], 72_000);
    }

    #[test]
    fn uneven_rates_keep_the_sub_byte_remainder() {
        // window 12000, srtt 70 ms: 5 * 12000 bytes per 280000 µs = 3/14 bytes/µs; a 1200-byte
        // datagram takes 5600 µs exactly. Polling every µs must not lose fractions.
        let mut pacer = Pacer::with_burst_range(MDS, MDS);
        pacer.on_sent(us(0), MDS);
        let mut sent = Vec::new();
        for t in 0..=20_000 {
            if pacer
                .delay(us(t), MDS, 12_000, Duration::from_millis(70))
                .is_none()
            {
                pacer.on_sent(us(t), MDS);
                sent.push(t);
            }
        }
        assert_eq!(sent, vec![5_600, 11_200, 16_800]);
    }

    #[test]
    fn delay_names_the_exact_instant_and_the_rate_follows_the_window() {
        let mut pacer = Pacer::with_burst_range(2 * MDS, 2 * MDS);
        pacer.on_sent(us(0), 2 * MDS);
        // 1.5 bytes/µs: 1200 bytes after 800 µs.
        assert_eq!(
            pacer.delay(us(0), MDS, 120_000, Duration::from_millis(100)),
            Some(us(800))
        );
        assert_eq!(
            pacer.delay(us(799), MDS, 120_000, Duration::from_millis(100)),
            Some(us(800))
        );
        assert_eq!(
            pacer.delay(us(800), MDS, 120_000, Duration::from_millis(100)),
            None
        );
        pacer.on_sent(us(800), MDS);
        // Twice the window, twice the rate: the next 1200 bytes take 400 µs.
        assert_eq!(
            pacer.delay(us(800), MDS, 240_000, Duration::from_millis(100)),
            Some(us(1_200))
        );
    }

    #[test]
    fn idle_time_refills_only_up_to_the_burst() {
        let mut pacer = Pacer::with_burst_range(3 * MDS, 3 * MDS);
        let times = send_paced(&mut pacer, 3, 120_000, Duration::from_millis(100));
        assert_eq!(times, vec![0, 0, 0]);
        // After a long idle period only 3 datagrams may go back to back.
        let now = us(10_000_000);
        for _ in 0..3 {
            assert_eq!(
                pacer.delay(now, MDS, 120_000, Duration::from_millis(100)),
                None
            );
            pacer.on_sent(now, MDS);
        }
        assert_eq!(
            pacer.delay(now, MDS, 120_000, Duration::from_millis(100)),
            Some(now + Duration::from_micros(800))
        );
    }

    #[test]
    fn no_rate_means_no_pacing_and_oversized_packets_still_go() {
        let mut pacer = Pacer::with_burst_range(MDS, MDS);
        pacer.on_sent(us(0), MDS);
        assert_eq!(pacer.delay(us(0), MDS, 0, Duration::from_millis(10)), None);
        assert_eq!(pacer.delay(us(0), MDS, 12_000, Duration::ZERO), None);
        // A 3000-byte packet with a 1200-byte burst: waits for 3000 bytes, then goes.
        let mut pacer = Pacer::with_burst_range(MDS, MDS);
        let wait = pacer.delay(us(0), 3_000, 120_000, Duration::from_millis(100));
        assert_eq!(wait, Some(us(1_200)));
        assert_eq!(
            pacer.delay(us(1_200), 3_000, 120_000, Duration::from_millis(100)),
            None
        );
    }

    #[test]
    fn burst_is_two_ms_of_the_window_within_10_and_256_datagrams() {
        let fill = |window: u64, srtt_us: u64| {
            let mut pacer = Pacer::new(MDS);
            let srtt = Duration::from_micros(srtt_us);
            // Long idle: the bucket fills to its capacity.
            assert_eq!(pacer.delay(us(10_000_000), MDS, window, srtt), None);
            (pacer.capacity(), pacer.tokens())
        };
        // 1.2 MB per 10 ms: 240 000 bytes in 2 ms = 200 datagrams.
        assert_eq!(fill(1_200_000, 10_000), (200 * MDS, 200 * MDS));
        // 12 000 bytes per 100 ms: 240 bytes in 2 ms, raised to 10 datagrams.
        assert_eq!(fill(12_000, 100_000), (10 * MDS, 10 * MDS));
        // 12 MB per 1 ms: 24 MB in 2 ms, capped at 256 datagrams.
        assert_eq!(fill(12_000_000, 1_000), (256 * MDS, 256 * MDS));
        // Fixed bounds stay fixed.
        let mut pacer = Pacer::with_burst_range(3 * MDS, 3 * MDS);
        pacer.delay(us(10_000_000), MDS, 12_000_000, Duration::from_millis(1));
        assert_eq!((pacer.capacity(), pacer.tokens()), (3 * MDS, 3 * MDS));
    }

    #[test]
    fn a_full_adaptive_burst_goes_back_to_back_and_a_smaller_capacity_drops_tokens() {
        let mut pacer = Pacer::new(MDS);
        let srtt = Duration::from_millis(10);
        let now = us(10_000_000);
        let mut sent = 0;
        while pacer.delay(now, MDS, 1_200_000, srtt).is_none() {
            pacer.on_sent(now, MDS);
            sent += 1;
        }
        assert_eq!(sent, 200);
        // The next one waits for its 1200 bytes at 1.25 * 1.2 MB / 10 ms = 150 bytes/µs: 8 µs.
        assert_eq!(
            pacer.delay(now, MDS, 1_200_000, srtt),
            Some(now + Duration::from_micros(8))
        );
        // Refill while the RTT is 10 ms, then the RTT grows to 100 ms: 20 datagrams of capacity;
        // the tokens above it are gone.
        let later = now + Duration::from_millis(5);
        assert_eq!(pacer.delay(later, MDS, 1_200_000, srtt), None);
        assert_eq!(pacer.tokens(), 200 * MDS);
        assert_eq!(
            pacer.delay(later, MDS, 1_200_000, Duration::from_millis(100)),
            None
        );
        assert_eq!((pacer.capacity(), pacer.tokens()), (20 * MDS, 20 * MDS));
    }

    #[test]
    fn a_millisecond_tick_sender_is_not_held_to_ten_datagrams_per_tick() {
        // A driver that wakes every 1 ms and sends what the pacer allows, on a path with a
        // 2.4 MB window and a 2 ms RTT (rate 1.25 * 2.4 MB / 2 ms = 1500 bytes/µs, 1.5 MB per
        // tick). A fixed 10-datagram bucket lets 12 000 bytes leave per tick; the adaptive one
        // holds 2 ms of the window (2.4 MB), capped at 256 datagrams.
        let per_tick = |mut pacer: Pacer| {
            let srtt = Duration::from_millis(2);
            let mut sent = 0u64;
            for tick in 1..=100u64 {
                let now = us(tick * 1_000);
                while pacer.delay(now, MDS, 2_400_000, srtt).is_none() {
                    pacer.on_sent(now, MDS);
                    sent += 1;
                }
            }
            sent / 100
        };
        assert_eq!(per_tick(Pacer::with_burst_range(10 * MDS, 10 * MDS)), 10);
        assert_eq!(per_tick(Pacer::new(MDS)), 256);
    }

    #[test]
    fn burst_range_follows_a_new_datagram_size() {
        // A fast path (2 ms srtt, window 2.4 MB) bursts the maximum of 256 datagrams.
        let srtt = Duration::from_millis(2);
        let mut pacer = Pacer::new(MDS);
        assert_eq!(pacer.delay(us(0), MDS, 2_400_000, srtt), None);
        pacer.on_sent(us(0), MDS);
        assert_eq!(pacer.delay(us(10_000), MDS, 2_400_000, srtt), None);
        assert_eq!(pacer.capacity(), 256 * MDS);
        // The datagram size drops to 300 bytes: 256 of them, and the surplus tokens go.
        pacer.set_burst_range(10 * 300, 256 * 300);
        assert!(pacer.tokens() <= 256 * 300);
        assert_eq!(pacer.delay(us(10_000), 300, 2_400_000, srtt), None);
        assert_eq!(pacer.capacity(), 256 * 300);
        // And grows to 1500: a slow path's burst floor is 10 of the new datagrams.
        pacer.set_burst_range(10 * 1500, 256 * 1500);
        pacer.delay(us(20_000), 1500, 24_000, Duration::from_millis(100));
        assert_eq!(pacer.capacity(), 10 * 1500);
    }

    #[test]
    fn extreme_inputs_do_not_panic() {
        let mut pacer = Pacer::with_burst_range(u64::MAX, u64::MAX);
        assert_eq!(
            pacer.delay(Timestamp::MAX, u64::MAX, u64::MAX, Duration::MAX),
            None
        );
        pacer.on_sent(Timestamp::MAX, u64::MAX);
        let later = pacer.delay(Timestamp::ZERO, u64::MAX, 1, Duration::MAX);
        assert!(later.is_some());
    }
}
