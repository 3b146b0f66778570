//! Client inbounds: how applications hand traffic to braid.
//!
//! The codecs here are sans-IO: they parse bytes the caller has buffered and encode replies into
//! caller buffers, so they can be fuzzed and property-tested without sockets. Each parser answers
//! `Ok(None)` while it needs more bytes, `Ok(Some((value, consumed)))` once a whole message is
//! there, and a typed error for malformed input (never a panic).

pub mod http_connect;
pub mod socks5;
