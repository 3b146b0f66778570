//! braid's daemon: the sans-IO multipath session protocol ([`session`]), quinn paths, client
//! inbounds (SOCKS5, HTTP CONNECT), server egress and the `braid` command line.
#![warn(missing_docs)]

pub mod cli;
pub mod inbound;
pub mod session;
