//! The daemons' transport over quinn: path set-up ([`quic`]), the authenticated join
//! ([`join`]), the session driver task ([`driver`]) with its async flow handles ([`flow`]), the
//! client's links ([`client`]), the server's accept loop ([`server`]) and the status document
//! ([`status`]).

pub mod client;
pub mod driver;
pub mod flow;
pub mod join;
pub mod quic;
pub mod relay;
pub mod server;
pub mod status;

pub use flow::{
    FlowHandle, FlowMsg, FlowReader, FlowWriter, OpenError, SessionGone, SessionHandle,
};
pub use status::{DaemonStatus, PathReport, SessionCounters, SessionStatus};

/// The session limits both daemons use. Flow windows of 2 MiB cover the bandwidth-delay
/// product plus cross-path reordering of links of some 50 Mbit/s with 100+ ms of queueing (the
/// session's 1 MiB default measured 81% of the link sum over the emulated 30 + 20 Mbit/s links,
/// 4 MiB 91%); a flow's rings are allocated at first use, so memory grows with the flows that
/// actually move data: at most 4 MiB per flow, 1024 flows.
pub fn session_config() -> crate::session::SessionConfig {
    crate::session::SessionConfig {
        flow_send_buffer: 2 << 20,
        flow_receive_window: 2 << 20,
        session_receive_window: 32 << 20,
        ..crate::session::SessionConfig::default()
    }
}
