//! Client inbounds: how applications hand traffic to braid.
//!
//! The codecs here are sans-IO: they parse bytes the caller has buffered and encode replies into
//! caller buffers, so they can be fuzzed and property-tested without sockets. Each parser answers
//! `Ok(None)` while it needs more bytes, `Ok(Some((value, consumed)))` once a whole message is
//! there, and a typed error for malformed input (never a panic). The servers
//! ([`socks5_server`], [`http_server`]) put them on sockets and hand flows to the session; the
//! TUN inbound ([`tun`]) turns IP packets from a TUN device into flows.

pub mod dns_names;
pub mod http_connect;
pub(crate) mod http_forward;
pub mod http_message;
pub mod http_server;
pub mod route;
pub mod server;
pub mod socks4;
pub mod socks5;
pub mod socks5_server;
pub mod tun;
