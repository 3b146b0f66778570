//! The read-only view of one path that a scheduler decides on.
//!
//! The session keeps one [`PathView`] per joined path up to date from its congestion controller,
//! RTT estimator and loss detector; schedulers read them and never reach into session internals.

/// The most paths one session may have at once. Per-path scheduler state lives in fixed arrays
/// of this size so that nothing is allocated per packet.
pub const MAX_PATHS: usize = 16;

/// A stable identifier of a path within one session, `0..MAX_PATHS`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PathId(pub u8);

impl PathId {
    /// The identifier as an index into per-path arrays.
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

/// Whether a path may carry traffic, and in which priority tier.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum PathState {
    /// A live primary-tier path.
    #[default]
    Active,
    /// A live backup-tier path: used only when no primary path is live (see [`crate::tier`]).
    Backup,
    /// A path that failed (no heartbeat answered, or the link went away); never chosen.
    Failed,
}

/// What a scheduler may know about one path. All rates are bytes per second, all sizes bytes,
/// all times microseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PathView {
    /// Which path this is.
    pub id: PathId,
    /// Live or failed, and its tier.
    pub state: PathState,
    /// Relative weight from the link's config (weighted round-robin); at least 1.
    pub weight: u16,
    /// Smoothed round-trip time (RFC 6298 / RFC 9002), µs.
    pub srtt_us: u32,
    /// Round-trip time variation, µs.
    pub rttvar_us: u32,
    /// Smallest round-trip time seen, µs.
    pub min_rtt_us: u32,
    /// One-way delay estimate, µs: half the minimum RTT plus the queueing delay seen in the
    /// receiver's timestamps relative to their running minimum (clocks are never assumed
    /// synchronised).
    pub owd_us: u32,
    /// Congestion window of the path's congestion controller, bytes.
    pub cwnd: u64,
    /// Bytes sent on the path and neither acknowledged nor declared lost.
    pub bytes_in_flight: u64,
    /// Smoothed fraction of packets lost, 0.0..=1.0.
    pub loss_rate: f32,
    /// Recent delivery rate (acknowledged bytes per second).
    pub delivery_rate: u64,
    /// True when the link's configured rate cap forbids sending right now, or the pacer of a
    /// congestion controller that sets its own pacing rate (BBR) holds the next packet back:
    /// either way the path carries what it can, and a packet may go elsewhere.
    pub rate_limited: bool,
    /// Largest datagram payload the path carries, bytes.
    pub max_datagram_size: u16,
    /// True when a probe timeout fired on this live path and nothing was acknowledged since: it
    /// may have gone dark (Linux MPTCP's "potentially failed"). Its window is closed until an
    /// ACK comes, and backup paths may take its place (see [`crate::tier`]).
    pub potentially_failed: bool,
    /// True when this live path has been kept busy (its window or pacer full) for a while yet
    /// delivered less than the floor its session was configured with (the daemon's
    /// `[session] backup_below_mbps`; never with no floor set): a primary path so slow lets
    /// backup paths help (see [`crate::tier`]). It is still chosen and waited for like any
    /// live path.
    pub degraded: bool,
}

impl PathView {
    /// A live primary path with the given RTT and window and nothing in flight; the other fields
    /// take neutral values. Handy for tests and benches.
    pub fn new(id: PathId, srtt_us: u32, cwnd: u64) -> Self {
        PathView {
            id,
            state: PathState::Active,
            weight: 1,
            srtt_us,
            rttvar_us: srtt_us / 2,
            min_rtt_us: srtt_us,
            owd_us: srtt_us / 2,
            cwnd,
            bytes_in_flight: 0,
            loss_rate: 0.0,
            delivery_rate: 0,
            rate_limited: false,
            max_datagram_size: 1200,
            potentially_failed: false,
            degraded: false,
        }
    }

    /// Bytes the congestion window still admits.
    pub fn headroom(&self) -> u64 {
        self.cwnd.saturating_sub(self.bytes_in_flight)
    }

    /// Neither failed nor potentially failed: a path a scheduler may wait for. (A potentially
    /// failed path is not waited for, as in Linux MPTCP, where such a subflow is unavailable to
    /// every scheduler.)
    pub fn is_live(&self) -> bool {
        self.state != PathState::Failed && !self.potentially_failed
    }

    /// Live, and not held back by its rate cap (or its controller's pacing rate).
    pub fn is_usable(&self) -> bool {
        self.is_live() && !self.rate_limited
    }

    /// Usable, and its window admits a packet of `len` bytes.
    pub fn can_send(&self, len: u32) -> bool {
        self.is_usable() && self.headroom() >= u64::from(len)
    }

    /// True for a live backup-tier path.
    pub fn is_backup(&self) -> bool {
        self.state == PathState::Backup
    }

    /// True for a primary-tier path that is neither failed, potentially failed nor degraded:
    /// while one is, backup paths carry nothing.
    pub fn is_live_primary(&self) -> bool {
        self.is_live() && !self.is_backup() && !self.degraded
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headroom_and_usability() {
        let mut p = PathView::new(PathId(0), 20_000, 10_000);
        p.bytes_in_flight = 9_000;
        assert_eq!(p.headroom(), 1_000);
        assert!(p.can_send(1_000));
        assert!(!p.can_send(1_001));
        p.bytes_in_flight = 20_000;
        assert_eq!(p.headroom(), 0);
        p.bytes_in_flight = 0;
        p.rate_limited = true;
        assert!(!p.can_send(1));
        p.rate_limited = false;
        p.state = PathState::Failed;
        assert!(!p.is_usable());
    }

    #[test]
    fn view_stays_small() {
        assert!(std::mem::size_of::<PathView>() <= 64);
    }
}
