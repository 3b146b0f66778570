//! A rate cap for one path: a token bucket of `rate_bytes_per_sec` with room for `burst_bytes`.
//!
//! It is independent of congestion control: it models a configured limit (a metered LTE link, a
//! user's cap) that holds even when the network would take more. Tokens accrue continuously in
//! exact integer arithmetic (the sub-byte remainder is kept), so polling often or rarely gives
//! the same result. Use: `has_tokens(now, len)` (refills to `now`), then `consume(len)` when the
//! packet goes; `ready_at(len)` says when to try again.

use std::time::Duration;

use braid_sched_core::Timestamp;
use braid_sched_core::time::duration_micros;

const MICROS_PER_SEC: u128 = 1_000_000;

/// A token bucket rate limiter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenBucket {
    rate_bytes_per_sec: u64,
    burst_bytes: u64,
    tokens: u64,
    /// Sub-byte remainder, in millionths of a byte.
    fraction: u128,
    last_refill: Timestamp,
}

impl TokenBucket {
    /// A full bucket refilling at `rate_bytes_per_sec` up to `burst_bytes`. A rate of zero never
    /// refills.
    pub fn new(rate_bytes_per_sec: u64, burst_bytes: u64) -> Self {
        TokenBucket {
            rate_bytes_per_sec,
            burst_bytes,
            tokens: burst_bytes,
            fraction: 0,
            last_refill: Timestamp::ZERO,
        }
    }

    /// Changes the burst (a path's datagram size changed); tokens above it are dropped.
    pub fn set_burst(&mut self, burst_bytes: u64) {
        self.burst_bytes = burst_bytes;
        self.tokens = self.tokens.min(burst_bytes);
    }

    /// Refills up to `now` and says whether `bytes` tokens are available. `bytes` larger than
    /// the burst is never available.
    pub fn has_tokens(&mut self, now: Timestamp, bytes: u64) -> bool {
        self.refill(now);
        self.tokens >= bytes
    }

    /// Takes `bytes` tokens (down to zero); call after [`has_tokens`](Self::has_tokens).
    pub fn consume(&mut self, bytes: u64) {
        self.tokens = self.tokens.saturating_sub(bytes);
    }

    /// The earliest time `bytes` tokens are available: the last refill time if they already are,
    /// [`Timestamp::MAX`] if they never will be (more than the burst, or a zero rate).
    pub fn ready_at(&self, bytes: u64) -> Timestamp {
        if self.tokens >= bytes {
            return self.last_refill;
        }
        if bytes > self.burst_bytes || self.rate_bytes_per_sec == 0 {
            return Timestamp::MAX;
        }
        let needed = u128::from(bytes - self.tokens) * MICROS_PER_SEC - self.fraction;
        let wait = needed.div_ceil(u128::from(self.rate_bytes_per_sec));
        self.last_refill + Duration::from_micros(u64::try_from(wait).unwrap_or(u64::MAX))
    }

    /// Tokens available as of the last refill.
    pub fn tokens(&self) -> u64 {
        self.tokens
    }

    /// The configured rate, bytes per second.
    pub fn rate_bytes_per_sec(&self) -> u64 {
        self.rate_bytes_per_sec
    }

    /// The configured burst, bytes.
    pub fn burst_bytes(&self) -> u64 {
        self.burst_bytes
    }

    fn refill(&mut self, now: Timestamp) {
        if now <= self.last_refill {
            return;
        }
        let elapsed = u128::from(duration_micros(now - self.last_refill));
        self.last_refill = now;
        // elapsed < 2^64 and rate < 2^64: the product and the sum fit in a u128.
        let scaled = elapsed * u128::from(self.rate_bytes_per_sec) + self.fraction;
        let earned = scaled / MICROS_PER_SEC;
        let room = u128::from(self.burst_bytes.saturating_sub(self.tokens));
        if earned < room {
            // Less than `room`, which fits in a u64, so the conversion cannot fail.
            self.tokens += u64::try_from(earned).unwrap_or(0);
            self.fraction = scaled % MICROS_PER_SEC;
        } else {
            self.tokens = self.burst_bytes;
            self.fraction = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Timestamp {
        Timestamp::from_millis(v)
    }

    #[test]
    fn starts_full_and_allows_one_burst() {
        let mut bucket = TokenBucket::new(1_000_000, 10_000);
        assert!(bucket.has_tokens(ms(0), 10_000));
        assert!(!bucket.has_tokens(ms(0), 10_001));
        bucket.consume(6_000);
        assert!(bucket.has_tokens(ms(0), 4_000));
        bucket.consume(4_000);
        assert!(!bucket.has_tokens(ms(0), 1));
        assert_eq!(bucket.tokens(), 0);
    }

    #[test]
    fn refills_at_the_rate_up_to_the_burst() {
        // 1 MB/s = 1000 bytes per ms.
        let mut bucket = TokenBucket::new(1_000_000, 10_000);
        bucket.consume(10_000);
        assert!(!bucket.has_tokens(ms(1), 1_001));
        assert!(bucket.has_tokens(ms(1), 1_000));
        assert!(bucket.has_tokens(ms(5), 5_000));
        assert!(!bucket.has_tokens(ms(5), 5_001));
        // A long pause fills only up to the burst.
        assert!(bucket.has_tokens(ms(1_000), 10_000));
        assert_eq!(bucket.tokens(), 10_000);
    }

    #[test]
    fn sub_byte_accrual_is_kept_across_frequent_polls() {
        // 300000 bytes/s = 0.3 bytes/µs: each 1 µs poll earns a fraction of a byte.
        let mut bucket = TokenBucket::new(300_000, 1_000);
        bucket.consume(1_000);
        for t in 1..=10_000u64 {
            bucket.has_tokens(Timestamp::from_micros(t), 1_000);
        }
        // 10000 µs * 0.3 bytes/µs = 3000 bytes earned, capped at the 1000-byte burst.
        assert_eq!(bucket.tokens(), 1_000);
        bucket.consume(1_000);
        for t in 10_001..=10_333u64 {
            bucket.has_tokens(Timestamp::from_micros(t), 1_000);
        }
        // 333 µs * 0.3 = 99.9 bytes: 99 whole bytes, the 0.9 is carried.
        assert_eq!(bucket.tokens(), 99);
        bucket.has_tokens(Timestamp::from_micros(10_334), 1_000);
        assert_eq!(bucket.tokens(), 100);
    }

    #[test]
    fn ready_at_names_the_earliest_instant() {
        let mut bucket = TokenBucket::new(1_000_000, 10_000);
        assert!(bucket.has_tokens(ms(2), 1_200));
        assert_eq!(bucket.ready_at(1_200), ms(2));
        bucket.consume(10_000);
        // 1200 bytes at 1 byte/µs: 1200 µs after the last refill.
        let at = bucket.ready_at(1_200);
        assert_eq!(at, ms(2) + Duration::from_micros(1_200));
        assert!(!bucket.has_tokens(at.saturating_sub(Duration::from_micros(1)), 1_200));
        assert!(bucket.has_tokens(at, 1_200));
        // Uneven rate: 3 bytes/s; 1 byte needs 333334 µs (rounded up).
        let mut slow = TokenBucket::new(3, 10);
        slow.consume(10);
        assert_eq!(slow.ready_at(1), Timestamp::from_micros(333_334));
        assert!(!slow.has_tokens(Timestamp::from_micros(333_333), 1));
        assert!(slow.has_tokens(Timestamp::from_micros(333_334), 1));
    }

    #[test]
    fn impossible_requests_are_never_ready() {
        let bucket = TokenBucket::new(1_000_000, 1_000);
        assert_eq!(bucket.ready_at(1_001), Timestamp::MAX);
        let mut stopped = TokenBucket::new(0, 1_000);
        stopped.consume(1_000);
        assert_eq!(stopped.ready_at(1), Timestamp::MAX);
        assert!(!stopped.has_tokens(Timestamp::MAX, 1));
        let mut huge = TokenBucket::new(u64::MAX, u64::MAX);
        huge.consume(u64::MAX);
        assert!(huge.has_tokens(Timestamp::MAX, u64::MAX));
        assert_eq!(huge.ready_at(u64::MAX), Timestamp::MAX);
    }

    #[test]
    fn a_smaller_burst_drops_the_tokens_above_it() {
        let mut bucket = TokenBucket::new(1_000, 4_800);
        bucket.set_burst(800);
        assert_eq!(bucket.burst_bytes(), 800);
        assert_eq!(bucket.tokens(), 800);
        assert!(!bucket.has_tokens(ms(10_000), 801));
        bucket.set_burst(6_000);
        assert!(bucket.has_tokens(ms(20_000), 6_000));
    }
}
