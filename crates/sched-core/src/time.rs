//! Time as a plain value: microseconds since an origin the caller chooses.
//!
//! Nothing in sched-core reads a clock; every hot-path function takes `now: Timestamp`. Tests
//! build time from zero.

use std::ops::{Add, AddAssign, Sub};
use std::time::Duration;

/// A point in time, in microseconds since an arbitrary origin (the session's start, or zero in
/// tests and the simulator).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The origin.
    pub const ZERO: Timestamp = Timestamp(0);
    /// The latest representable time; useful as "never".
    pub const MAX: Timestamp = Timestamp(u64::MAX);

    /// A timestamp `micros` microseconds after the origin.
    pub const fn from_micros(micros: u64) -> Self {
        Timestamp(micros)
    }

    /// A timestamp `millis` milliseconds after the origin.
    pub const fn from_millis(millis: u64) -> Self {
        Timestamp(millis.saturating_mul(1_000))
    }

    /// A timestamp `secs` seconds after the origin (fractions are kept to the microsecond).
    pub fn from_secs_f64(secs: f64) -> Self {
        Timestamp((secs.max(0.0) * 1e6) as u64)
    }

    /// Microseconds since the origin.
    pub const fn as_micros(self) -> u64 {
        self.0
    }

    /// Seconds since the origin.
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e6
    }

    /// The time elapsed from `earlier` to `self`, zero when `earlier` is later.
    pub const fn saturating_duration_since(self, earlier: Timestamp) -> Duration {
        Duration::from_micros(self.0.saturating_sub(earlier.0))
    }

    /// `self - d`, clamped at the origin.
    pub fn saturating_sub(self, d: Duration) -> Timestamp {
        Timestamp(self.0.saturating_sub(duration_micros(d)))
    }
}

/// A duration in whole microseconds, saturating at `u64::MAX`.
pub fn duration_micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl Add<Duration> for Timestamp {
    type Output = Timestamp;
    fn add(self, rhs: Duration) -> Timestamp {
        Timestamp(self.0.saturating_add(duration_micros(rhs)))
    }
}

impl AddAssign<Duration> for Timestamp {
    fn add_assign(&mut self, rhs: Duration) {
        *self = *self + rhs;
    }
}

impl Sub for Timestamp {
    type Output = Duration;
    /// The duration from `rhs` to `self`, saturating at zero.
    fn sub(self, rhs: Timestamp) -> Duration {
        self.saturating_duration_since(rhs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        let t = Timestamp::from_millis(5);
        assert_eq!(t.as_micros(), 5_000);
        assert_eq!(t + Duration::from_micros(7), Timestamp::from_micros(5_007));
        assert_eq!(Timestamp::ZERO - t, Duration::ZERO);
        assert_eq!(t - Timestamp::ZERO, Duration::from_millis(5));
        assert_eq!(Timestamp::MAX + Duration::from_secs(1), Timestamp::MAX);
        assert_eq!(t.saturating_sub(Duration::from_secs(1)), Timestamp::ZERO);
    }
}
