//! The daemons' transport over quinn: path set-up ([`quic`]), the authenticated join
//! ([`join`]), the session driver task ([`driver`]) with its async flow handles ([`flow`]), the
//! client's links ([`client`]), the server's accept loop ([`server`]) and the status document
//! ([`status`]).

mod arena;
pub mod client;
pub mod driver;
pub mod flow;
mod ifwatch;
pub mod join;
pub mod quic;
pub mod relay;
pub mod server;
pub mod status;

pub use flow::{
    FlowHandle, FlowMsg, FlowReader, FlowWriter, OpenError, SessionGone, SessionHandle,
};
pub use status::{
    DaemonStatus, InboundStatus, LinkStatus, PathReport, QuicCounters, SessionCounters,
    SessionStatus,
};

/// The default per-flow receive window (`[session] flow_receive_window_kib` in both daemons'
/// files). 2 MiB covers the bandwidth-delay product plus cross-path reordering of links of some
/// 50 Mbit/s with 100+ ms of queueing (the session's 1 MiB default measured 81% of the link sum
/// over the emulated 30 + 20 Mbit/s links, 4 MiB 91%).
pub const DEFAULT_FLOW_RECEIVE_WINDOW: u64 = 2 << 20;

/// The session limits both daemons use, with the configured per-flow receive window, longest
/// UDP payload and congestion controller. A flow's send buffer is 2 MiB; its rings are allocated at first use, so memory
/// grows with the flows that actually move data (1024 flows at most). All flows of a session
/// together may receive 32 MiB ahead of the application, or one flow window where that is
/// larger. A datagram may be the UDP payload with the longest SOCKS5 UDP header of an address.
pub fn session_config(limits: &crate::config::SessionLimits) -> crate::session::SessionConfig {
    crate::session::SessionConfig {
        flow_send_buffer: 2 << 20,
        flow_receive_window: limits.flow_receive_window,
        session_receive_window: limits.flow_receive_window.max(32 << 20),
        max_datagram_payload: limits.max_udp_payload + crate::inbound::socks5::MAX_REPLY,
        congestion: crate::session::congestion::CongestionConfig {
            algorithm: limits.congestion,
            ..crate::session::congestion::CongestionConfig::default()
        },
        ..crate::session::SessionConfig::default()
    }
}
