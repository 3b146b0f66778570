//! Session and path configuration. Every buffer the session keeps is bounded by a field here;
//! [`SessionConfig::memory_bound`] adds them up so tests can check [`super::Session::memory_usage`]
//! against it.

use std::time::Duration;

use braid_sched_core::MAX_PATHS;

use super::congestion::CongestionConfig;
use super::error::ConfigError;

/// Which end of the session this is. Client-opened flows have even ids, server-opened odd ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// The daemon on the device (opens most flows).
    Client,
    /// The daemon on the server.
    Server,
}

impl Role {
    /// The lowest bit of the flow ids this role opens.
    pub(crate) fn flow_parity(self) -> u64 {
        match self {
            Role::Client => 0,
            Role::Server => 1,
        }
    }
}

/// A path's priority tier.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Tier {
    /// Carries traffic whenever it has room.
    #[default]
    Primary,
    /// Carries traffic only when no primary path can.
    Backup,
}

/// Configuration of one path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PathConfig {
    /// Primary or backup.
    pub tier: Tier,
    /// Relative weight for weighted schedulers, at least 1.
    pub weight: u16,
    /// Optional rate cap, bytes per second (independent of congestion control).
    pub rate_cap: Option<u64>,
    /// Largest datagram payload the path carries, bytes (at least [`MIN_DATAGRAM_SIZE`]).
    pub max_datagram_size: u16,
}

/// The default of [`SessionConfig::max_datagram_payload`], 1,494 bytes: the whole UDP payload of
/// a 1,500-byte IPv4 packet (1,472 bytes), with the longest SOCKS5 UDP header of an address (22
/// bytes, IPv6). So whatever UDP a 1,500-byte MTU carries (the TUN device's default, a LAN's)
/// crosses braid, WireGuard's 1,452-byte packets (its default 1,420-byte MTU) among them. A
/// datagram goes whole when a path takes it ([`LONGEST_WHOLE_DATAGRAM`], 1,372 bytes, at most,
/// once a path's MTU discovery has reached its upper bound; a path joins taking 1,120), else in
/// DATAGRAM_FRAGMENT pieces when the peer reassembles them
/// ([`super::Session::set_peer_reassembles`]), else it is dropped and counted
/// ([`super::Session::datagrams_dropped`]). Until 23 Nov 2026 the default was
/// [`LONGEST_WHOLE_DATAGRAM`], and before that 1,100, what a path carries as it joins.
pub const DEFAULT_MAX_DATAGRAM_PAYLOAD: usize = 1472 + 22;

/// The longest datagram payload any path carries whole, 1,372 bytes: quinn's largest DATAGRAM
/// frame (1,414 bytes once its path MTU discovery has reached its upper bound, 1,452 bytes of UDP
/// payload, a 1,500-byte MTU) less the largest packet header and DATAGRAM frame header.
pub const LONGEST_WHOLE_DATAGRAM: usize =
    LARGEST_QUIC_DATAGRAM - super::frame::MAX_HEADER_LEN - super::frame::MAX_DATAGRAM_HEADER_LEN;

/// A path's `max_datagram_size` as it joins, bytes: quinn's largest DATAGRAM frame at QUIC's
/// initial 1,200-byte packets (what every QUIC path carries, before its path MTU discovery has
/// grown them, and on a link whose MTU is IPv6's 1,280-byte minimum).
pub const JOIN_DATAGRAM_SIZE: usize = 1162;

/// The longest datagram payload every live path carries from the moment it joins, 8,944 bytes:
/// [`super::frame::MAX_FRAGMENTS`] DATAGRAM_FRAGMENT pieces, each [`JOIN_DATAGRAM_SIZE`] less
/// the largest packet and fragment headers. The largest [`SessionConfig::max_datagram_payload`]
/// the daemons' files can ask for (`[session] max_udp_payload`, which adds the SOCKS5 header).
pub const LONGEST_FRAGMENTED_DATAGRAM: usize = super::frame::MAX_FRAGMENTS as usize
    * (JOIN_DATAGRAM_SIZE - super::frame::MAX_HEADER_LEN - super::frame::MAX_FRAGMENT_HEADER_LEN);

/// quinn's largest DATAGRAM frame, bytes: its `max_datagram_size` at its path MTU discovery's
/// default upper bound (1,452 bytes of UDP payload), as `braid status` shows on loopback paths.
pub const LARGEST_QUIC_DATAGRAM: usize = 1414;

/// The smallest `max_datagram_size` a path may have: every frame must fit a packet of this
/// size with room to spare, the largest being the OPEN of a flow to a 255-byte domain name
/// (269 bytes) sent with the flow's first stream bytes (checked at compile time in the send
/// path). QUIC paths carry at least about 1150 bytes, so only simulated paths come near it.
pub const MIN_DATAGRAM_SIZE: u16 = 400;

impl Default for PathConfig {
    fn default() -> Self {
        PathConfig {
            tier: Tier::Primary,
            weight: 1,
            rate_cap: None,
            max_datagram_size: 1200,
        }
    }
}

impl PathConfig {
    /// Checks the values.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.weight == 0 {
            return Err(err("weight", 0, "at least 1"));
        }
        if self.max_datagram_size < MIN_DATAGRAM_SIZE {
            return Err(err(
                "max_datagram_size",
                self.max_datagram_size,
                "at least 400 bytes",
            ));
        }
        if self.rate_cap == Some(0) {
            return Err(err("rate_cap", 0, "positive bytes per second, or none"));
        }
        Ok(())
    }
}

fn err(field: &'static str, value: impl ToString, expected: &'static str) -> ConfigError {
    ConfigError {
        field,
        value: value.to_string(),
        expected,
    }
}

/// Configuration of a session.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionConfig {
    /// Most flows open at once (both directions together).
    pub max_flows: usize,
    /// Bytes a flow buffers for sending (written but not yet acknowledged).
    pub flow_send_buffer: u64,
    /// Most bytes a flow buffers for sending while the peer grants it more credit than
    /// `flow_send_buffer` (a peer whose window grew); at most `flow_send_buffer` when not above
    /// it (the default, 0).
    pub flow_send_buffer_max: u64,
    /// Bytes a flow may receive beyond what the application has read (its flow-control window
    /// and the size of its receive/reorder buffer) at first. Both ends assume the peer's first
    /// window is their own: set it alike on both.
    pub flow_receive_window: u64,
    /// Most bytes a flow's window grows to when its application reads a whole window in less
    /// than two round trips (the window doubles each time, announced by MAX_FLOW_DATA); the
    /// window stays at `flow_receive_window` when not above it (the default, 0).
    pub flow_receive_window_max: u64,
    /// Stream bytes all flows together may receive beyond what has been read.
    pub session_receive_window: u64,
    /// Datagrams queued for sending, all flows together.
    pub datagram_send_queue: usize,
    /// Datagrams queued per flow for the application to read; older ones are dropped.
    pub datagram_receive_queue: usize,
    /// Largest datagram payload accepted by `send_datagram`, bytes (default
    /// [`DEFAULT_MAX_DATAGRAM_PAYLOAD`]), and the longest a flow puts back together from
    /// pieces; a datagram longer than its paths take when it is sent goes in pieces when the
    /// peer reassembles them, else it is dropped.
    pub max_datagram_payload: usize,
    /// Packets tracked per path for acknowledgement and loss detection; when full, the path is
    /// treated as having no window.
    pub max_sent_packets: usize,
    /// Received-packet ranges remembered per path (and the most sent in one ACK).
    pub max_ack_ranges: usize,
    /// RTT assumed before the first sample.
    pub initial_rtt: Duration,
    /// Longest we delay an ACK.
    pub max_ack_delay: Duration,
    /// An idle live path sends a PING this often while the session is busy.
    pub heartbeat_interval: Duration,
    /// An idle live path sends a PING this often once the session carried no application data
    /// for `quiet_after` (at least `heartbeat_interval`): a quiet session (a phone in a pocket)
    /// wakes its links' radios only this often, enough to keep NAT mappings alive.
    pub quiet_heartbeat_interval: Duration,
    /// How long after the last application data, sent or received, the session is quiet.
    pub quiet_after: Duration,
    /// Consecutive probe timeouts after which a path is declared failed.
    pub failure_probe_timeouts: u32,
    /// A failed path is probed this often to find out whether it came back.
    pub failed_probe_interval: Duration,
    /// The session closes when no path has been alive for this long.
    pub idle_timeout: Duration,
    /// How often the receiver report rides on an ACK.
    pub report_interval: Duration,
    /// The congestion controller built for every path (its datagram size is the path's).
    pub congestion: CongestionConfig,
    /// Bytes per second below which a primary path kept busy for a while counts as degraded and
    /// lets backup paths share the traffic ([`braid_sched_core::path::PathView::degraded`]);
    /// 0 (the default): backups carry traffic only when no primary is live.
    pub backup_below_rate: u64,
    /// A client tells the server its `backup_below_rate` (BACKUP_FLOOR, when the server knows
    /// the frame), which then governs what the server sends on the session too, in place of the
    /// server's own: set where the client's file sets `[session] backup_below_mbps`.
    pub tell_backup_floor: bool,
    /// Which flows this end sends redundantly, and how fast at most.
    pub redundant: RedundantFlows,
}

/// The flows a session sends redundantly: a copy of every packet on every path with room,
/// whatever the scheduler (a call, a game, DNS over a link that may fade).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RedundantFlows {
    /// Their destination ports. A flow this end opens to one is marked so in its OPEN, when
    /// the peer knows the mark ([`super::Session::set_peer_knows_redundant_flows`]), and the
    /// peer sends its side of it redundantly too; a flow the peer opens to one is sent so here,
    /// as is one the peer marks.
    pub ports: PortSet,
    /// Bytes per second at most that this end sends redundantly, all such flows together
    /// (each such packet counted once, whatever the number of its copies), with bursts of
    /// [`REDUNDANT_BURST`] at that rate; beyond it their packets go where the scheduler places
    /// them, once. It bounds what the flows cost: at most this rate once per path beyond the
    /// first. `Some(0)`: none is sent redundantly; `None`: no bound.
    pub max_rate: Option<u64>,
}

/// How far ahead of [`RedundantFlows::max_rate`] redundant packets may run: 250 ms of it.
pub const REDUNDANT_BURST: Duration = Duration::from_millis(250);

/// Most ranges a [`PortSet`] holds.
pub const MAX_PORT_RANGES: usize = 16;

/// A set of ports, as at most [`MAX_PORT_RANGES`] inclusive ranges (`Copy`, no allocation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortSet {
    ranges: [(u16, u16); MAX_PORT_RANGES],
    len: u8,
}

impl PortSet {
    /// The set of `ranges` (inclusive; a range whose first port is above its last holds none);
    /// `None` for more than [`MAX_PORT_RANGES`].
    pub fn new(ranges: impl IntoIterator<Item = (u16, u16)>) -> Option<PortSet> {
        let mut set = PortSet::default();
        for range in ranges {
            *set.ranges.get_mut(usize::from(set.len))? = range;
            set.len += 1;
        }
        Some(set)
    }

    /// Whether `port` is in the set.
    pub fn contains(&self, port: u16) -> bool {
        self.ranges().iter().any(|&(a, b)| (a..=b).contains(&port))
    }

    /// Whether the set holds no range.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The ranges, in the order given.
    pub fn ranges(&self) -> &[(u16, u16)] {
        &self.ranges[..usize::from(self.len)]
    }
}

/// The default [`SessionConfig::quiet_heartbeat_interval`]: 25 s, as WireGuard's persistent
/// keepalive, under the 30 s after which the shortest-lived NAT mappings go.
pub const DEFAULT_QUIET_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(25);

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            max_flows: 1024,
            flow_send_buffer: 1 << 20,
            flow_send_buffer_max: 0,
            flow_receive_window: 1 << 20,
            flow_receive_window_max: 0,
            session_receive_window: 16 << 20,
            datagram_send_queue: 512,
            datagram_receive_queue: 256,
            max_datagram_payload: DEFAULT_MAX_DATAGRAM_PAYLOAD,
            max_sent_packets: 8192,
            max_ack_ranges: 32,
            initial_rtt: Duration::from_millis(100),
            max_ack_delay: Duration::from_millis(5),
            heartbeat_interval: Duration::from_secs(1),
            quiet_heartbeat_interval: DEFAULT_QUIET_HEARTBEAT_INTERVAL,
            quiet_after: Duration::from_secs(10),
            failure_probe_timeouts: 3,
            failed_probe_interval: Duration::from_millis(250),
            idle_timeout: Duration::from_secs(30),
            report_interval: Duration::from_millis(100),
            congestion: CongestionConfig::default(),
            backup_below_rate: 0,
            tell_backup_floor: false,
            redundant: RedundantFlows::default(),
        }
    }
}

impl SessionConfig {
    /// Checks the values; the error names the first bad field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let positive: [(&'static str, u64); 7] = [
            ("max_flows", self.max_flows as u64),
            ("flow_send_buffer", self.flow_send_buffer),
            ("flow_receive_window", self.flow_receive_window),
            ("datagram_send_queue", self.datagram_send_queue as u64),
            ("datagram_receive_queue", self.datagram_receive_queue as u64),
            ("max_sent_packets", self.max_sent_packets as u64),
            (
                "failure_probe_timeouts",
                u64::from(self.failure_probe_timeouts),
            ),
        ];
        for (field, value) in positive {
            if value == 0 {
                return Err(err(field, value, "positive"));
            }
        }
        if self.max_flows > MAX_FLOWS_LIMIT {
            return Err(err("max_flows", self.max_flows, "at most 65536"));
        }
        let buffers = [
            self.flow_send_buffer,
            self.flow_send_buffer_max,
            self.flow_receive_window,
            self.flow_receive_window_max,
        ];
        if let Some(&largest) = buffers.iter().find(|&&b| b > BUFFER_LIMIT) {
            return Err(err(
                "flow_send_buffer/flow_receive_window (or their _max)",
                largest,
                "at most 1 GiB",
            ));
        }
        if self.datagram_send_queue > QUEUE_LIMIT
            || self.datagram_receive_queue > QUEUE_LIMIT
            || self.max_sent_packets > QUEUE_LIMIT * 64
        {
            return Err(err(
                "datagram queues/max_sent_packets",
                self.max_sent_packets,
                "queues at most 65536, max_sent_packets at most 4194304",
            ));
        }
        if self.failure_probe_timeouts > 16 {
            return Err(err(
                "failure_probe_timeouts",
                self.failure_probe_timeouts,
                "1..=16",
            ));
        }
        if self.session_receive_window < self.flow_receive_window {
            return Err(err(
                "session_receive_window",
                self.session_receive_window,
                "at least flow_receive_window",
            ));
        }
        if self.max_ack_ranges == 0 || self.max_ack_ranges > 64 {
            return Err(err("max_ack_ranges", self.max_ack_ranges, "1..=64"));
        }
        if self.max_datagram_payload == 0 || self.max_datagram_payload > 65_000 {
            return Err(err(
                "max_datagram_payload",
                self.max_datagram_payload,
                "1..=65000 bytes",
            ));
        }
        if self.initial_rtt.is_zero() || self.heartbeat_interval.is_zero() {
            return Err(err("initial_rtt/heartbeat_interval", 0, "positive"));
        }
        Ok(())
    }

    /// The configuration with every value forced into its accepted range (the largest values
    /// are generous upper limits that keep allocations bounded).
    pub fn clamped(&self) -> SessionConfig {
        let mut c = self.clone();
        c.max_flows = c.max_flows.clamp(1, MAX_FLOWS_LIMIT);
        c.flow_send_buffer = c.flow_send_buffer.clamp(1, BUFFER_LIMIT);
        c.flow_receive_window = c.flow_receive_window.clamp(1, BUFFER_LIMIT);
        c.flow_send_buffer_max = c
            .flow_send_buffer_max
            .clamp(c.flow_send_buffer, BUFFER_LIMIT);
        c.flow_receive_window_max = c
            .flow_receive_window_max
            .clamp(c.flow_receive_window, BUFFER_LIMIT);
        c.session_receive_window = c
            .session_receive_window
            .clamp(c.flow_receive_window, BUFFER_LIMIT * 64);
        c.datagram_send_queue = c.datagram_send_queue.clamp(1, QUEUE_LIMIT);
        c.datagram_receive_queue = c.datagram_receive_queue.clamp(1, QUEUE_LIMIT);
        c.max_datagram_payload = c.max_datagram_payload.clamp(1, 65_000);
        c.max_sent_packets = c.max_sent_packets.clamp(1, QUEUE_LIMIT * 64);
        c.max_ack_ranges = c.max_ack_ranges.clamp(1, 64);
        c.failure_probe_timeouts = c.failure_probe_timeouts.clamp(1, 16);
        c.initial_rtt = c.initial_rtt.max(Duration::from_micros(1));
        c.heartbeat_interval = c.heartbeat_interval.max(Duration::from_millis(1));
        c.quiet_heartbeat_interval = c.quiet_heartbeat_interval.max(c.heartbeat_interval);
        c.failed_probe_interval = c.failed_probe_interval.max(Duration::from_millis(1));
        c
    }

    /// The most gaps (plus one) the record of the flows the peer opened holds: a packet whose
    /// OPEN frames would leave it more is refused. An honest peer's gaps are its flows whose
    /// OPEN is late (lost or overtaken), so at most its open flows.
    pub(crate) fn max_peer_flow_ranges(&self) -> usize {
        self.max_flows.max(64)
    }

    /// The most bytes the session's buffers may hold, from the limits above: every flow's send
    /// buffer and receive window, the datagram queues and reassembly, the per-path packet and
    /// range records, the ranges of flows' bytes received out of order and of the peer's flows,
    /// and the session's tables (flow queues, control queue, events, scratch packet tables).
    /// [`super::Session::memory_usage`] stays below it.
    pub fn memory_bound(&self) -> u64 {
        // Each flow's buffers and bookkeeping, its ranges of bytes received out of order, and
        // the record of the flows the peer opened (ranges of flow numbers); a range table that
        // grew by doubling may have twice the room it holds.
        let ranges = 2 * std::mem::size_of::<std::ops::Range<u64>>() as u64;
        // Buffers that grow are counted at their largest.
        let send = self.flow_send_buffer.max(self.flow_send_buffer_max);
        let window = self.flow_receive_window.max(self.flow_receive_window_max);
        let flows = self.max_flows as u64
            * (send
                + window
                + FLOW_OVERHEAD
                + (super::stream::max_recv_ranges(window) as u64 + 1) * ranges)
            + (self.max_peer_flow_ranges() as u64 + 1) * ranges;
        // The send queue and its pool (with the pieces of one datagram being cut), the
        // datagrams of flows not opened yet, each flow's inbox and the datagrams it is putting
        // back together from pieces.
        let datagrams = (2 * self.datagram_send_queue as u64
            + u64::from(super::frame::MAX_FRAGMENTS)
            + super::EARLY_DATAGRAMS as u64
            + (self.datagram_receive_queue + super::reassembly::MAX_PARTIALS) as u64
                * self.max_flows as u64)
            * (self.max_datagram_payload as u64 + DATAGRAM_OVERHEAD);
        let paths = MAX_PATHS as u64
            * (self.max_sent_packets as u64 * SENT_PACKET_SIZE
                + self.max_ack_ranges as u64 * 16
                + PATH_OVERHEAD);
        // The session's two scratch tables for acknowledged and lost packets.
        let scratch = 2 * self.max_sent_packets as u64 * SENT_PACKET_SIZE;
        flows + datagrams + paths + scratch
    }
}

/// Upper limit of `max_flows`.
const MAX_FLOWS_LIMIT: usize = 1 << 16;
/// Upper limit of a flow's buffers.
const BUFFER_LIMIT: u64 = 1 << 30;
/// Upper limit of the queues (datagrams; `max_sent_packets` may be 64 times more).
const QUEUE_LIMIT: usize = 1 << 16;

/// Bookkeeping bytes charged per flow besides its buffers.
pub(crate) const FLOW_OVERHEAD: u64 = 4096;
/// Bookkeeping bytes charged per queued datagram besides its payload.
pub(crate) const DATAGRAM_OVERHEAD: u64 = 64;
/// Bytes charged per tracked sent packet (its record, with the 12-byte delivery-rate snapshot
/// BBR's bandwidth samples come from).
pub(crate) const SENT_PACKET_SIZE: u64 = 136;
/// Bookkeeping bytes charged per path.
pub(crate) const PATH_OVERHEAD: u64 = 4096;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_bad_fields_are_named() {
        SessionConfig::default().validate().unwrap();
        PathConfig::default().validate().unwrap();
        let bad = SessionConfig {
            max_flows: 0,
            ..SessionConfig::default()
        };
        assert_eq!(bad.validate().unwrap_err().field, "max_flows");
        let bad = PathConfig {
            max_datagram_size: 10,
            ..PathConfig::default()
        };
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .contains("max_datagram_size")
        );
    }
}
