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
