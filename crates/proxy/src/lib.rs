//! braid's daemon: the sans-IO multipath session protocol ([`session`]), quinn paths, client
//! inbounds (SOCKS5, HTTP CONNECT), server egress and the `braid` command line. The daemons are
//! assembled in [`daemon`] from [`transport`] (quinn paths, join, session driver), [`inbound`],
//! [`egress`], [`config`], [`tls`] and [`control`].
#![warn(missing_docs)]

pub mod cli;
pub mod config;
pub mod control;
pub mod daemon;
pub mod demo;
pub mod egress;
pub mod icmp_echo;
pub mod inbound;
pub mod metrics;
pub mod process;
pub mod session;
pub mod sim_endpoint;
pub mod tls;
pub mod train;
pub mod transport;
