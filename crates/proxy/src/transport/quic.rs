//! quinn set-up for the paths: a transport configuration under which quinn never limits or
//! delays the session's datagrams (a permissive congestion controller, large datagram buffers;
//! the session's own per-path controller is authoritative, see `docs/congestion.md`), and UDP
//! sockets bound to a link's local address and, where permitted, its device.

use std::any::Any;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;

use quinn::congestion::{Controller, ControllerFactory};

/// The window the permissive controller reports: far above anything the session's controller
/// allows, so quinn's congestion check and pacer never hold a datagram back.
pub const PERMISSIVE_WINDOW: u64 = 1 << 32;

/// Datagram send and receive buffers of every path connection, bytes.
pub const DATAGRAM_BUFFER: usize = 32 << 20;

/// A quinn congestion controller with a constant, very large window.
#[derive(Clone, Copy, Debug, Default)]
pub struct Permissive;

impl Controller for Permissive {
    fn on_congestion_event(
        &mut self,
        _now: std::time::Instant,
        _sent: std::time::Instant,
        _is_persistent_congestion: bool,
        _lost_bytes: u64,
    ) {
    }

    fn on_mtu_update(&mut self, _new_mtu: u16) {}

    fn window(&self) -> u64 {
        PERMISSIVE_WINDOW
    }

    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(*self)
    }

    fn initial_window(&self) -> u64 {
        PERMISSIVE_WINDOW
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

impl ControllerFactory for Permissive {
    fn build(self: Arc<Self>, _now: std::time::Instant, _current_mtu: u16) -> Box<dyn Controller> {
        Box::new(Permissive)
    }
}

/// How many ack-eliciting QUIC packets a path's quinn receiver takes before it must send a QUIC
/// ACK (the ACK frequency extension's threshold, which each end asks of its peer), where QUIC's
/// default is 1 (an ACK every second packet). The session acknowledges its own packets (ACK
/// frames inside the datagrams, every second packet, at once on a gap); quinn's ACKs of the
/// same packets serve only quinn's bookkeeping (its loss detection, which resends nothing of a
/// datagram; its RTT; path MTU probes, which it asks to be acknowledged at once). Every second
/// packet they were half the UDP packets a download's receiver sent, and the sender of the
/// download acknowledged each of the receiver's ACK datagrams in turn.
pub const QUIC_ACK_ELICITING_THRESHOLD: u32 = 31;

/// How long a path's connection lives with nothing heard from the peer: over twice the longest
/// `[session] keepalive_s`, so that a quiet session's paths live on one lost heartbeat.
pub const PATH_IDLE_TIMEOUT_MS: u32 = 60_000;

/// The transport configuration of every path connection (both ends).
pub fn transport_config() -> quinn::TransportConfig {
    let mut t = quinn::TransportConfig::default();
    let mut acks = quinn::AckFrequencyConfig::default();
    // Also no QUIC ACK at once for a packet out of order: quinn resends no datagram, so its
    // loss detection needs no haste (the session's own ACKs still go at once on a gap). The
    // ACK delay stays the peer's own (25 ms by default).
    acks.ack_eliciting_threshold(quinn::VarInt::from_u32(QUIC_ACK_ELICITING_THRESHOLD))
        .reordering_threshold(quinn::VarInt::from_u32(0));
    t.congestion_controller_factory(Arc::new(Permissive))
        .ack_frequency_config(Some(acks))
        .datagram_send_buffer_size(DATAGRAM_BUFFER)
        .datagram_receive_buffer_size(Some(DATAGRAM_BUFFER))
        // The session's heartbeats keep a path alive (every second while it is busy, every
        // `keepalive_s` once quiet); a keep-alive of quinn's own would wake the links' radios
        // in a quiet session. A path silent for the idle timeout closes (a link in an outage
        // then looks for the server anew: `transport::client`).
        .keep_alive_interval(None)
        .max_idle_timeout(Some(quinn::IdleTimeout::from(quinn::VarInt::from_u32(
            PATH_IDLE_TIMEOUT_MS,
        ))))
        // quinn's path MTU discovery (its defaults: probes up to 1452-byte UDP payloads, again
        // every 10 minutes, black-hole detection falling back to 1200) runs; the session driver
        // feeds every change of `Connection::max_datagram_size` to the session
        // (`Session::set_max_datagram_size`), so packets grow as the path allows and shrink
        // when a black hole is detected. 1452 instead of 1200 cuts the packets per byte, and
        // with them the per-packet work (encryption, system calls), by a sixth.
        .mtu_discovery_config(Some(quinn::MtuDiscoveryConfig::default()))
        // Paths carry datagrams; only the join uses a stream.
        .max_concurrent_uni_streams(quinn::VarInt::from_u32(0))
        .max_concurrent_bidi_streams(quinn::VarInt::from_u32(1));
    t
}

/// The largest session packet `conn` carries now: quinn's `max_datagram_size` (the path MTU
/// less the QUIC packet and DATAGRAM frame overhead), at least the session's minimum; 1200 when
/// the peer accepts no datagrams (a join refuses such a peer).
pub fn datagram_size(conn: &quinn::Connection) -> u16 {
    let size = conn.max_datagram_size().unwrap_or(1200);
    size.clamp(
        usize::from(crate::session::config::MIN_DATAGRAM_SIZE),
        usize::from(u16::MAX),
    ) as u16
}

/// What went wrong binding a link's socket.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// Creating or binding the socket failed.
    #[error("binding {addr}: {source}")]
    Bind {
        /// The local address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// `SO_BINDTODEVICE` failed and the link requires it.
    #[error("binding to device {device}: {source}")]
    Device {
        /// The device.
        device: String,
        /// Why (EPERM without CAP_NET_RAW).
        source: std::io::Error,
    },
}

/// A UDP socket bound to `local` and, when given, to `device`. When binding to the device is
/// refused and `device_required` is false, a warning is logged and the socket stays unbound to
/// any device. Bound to `[::]`, it is dual-stack (IPv4 through IPv4-mapped addresses).
pub fn bind_link_socket(
    local: SocketAddr,
    device: Option<&str>,
    device_required: bool,
) -> Result<UdpSocket, BindError> {
    use socket2::{Domain, Protocol, Socket, Type};
    let bind_err = |source| BindError::Bind {
        addr: local,
        source,
    };
    let socket = Socket::new(Domain::for_address(local), Type::DGRAM, Some(Protocol::UDP))
        .map_err(bind_err)?;
    // `[::]:0` takes IPv4 too (its addresses IPv4-mapped), whatever `net.ipv6.bindv6only` says:
    // a link tries a server's addresses of both families over one socket.
    if local.ip() == std::net::IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED) {
        socket.set_only_v6(false).map_err(bind_err)?;
    }
    if let Some(dev) = device {
        match socket.bind_device(Some(dev.as_bytes())) {
            Ok(()) => {}
            Err(source) if device_required => {
                return Err(BindError::Device {
                    device: dev.to_owned(),
                    source,
                });
            }
            Err(e) => {
                tracing::warn!(device = dev, error = %e, "cannot bind to device; using the routing table instead")
            }
        }
    }
    socket.bind(&local.into()).map_err(bind_err)?;
    Ok(socket.into())
}
