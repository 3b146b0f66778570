//! The real-time link emulator (`braid emu -c FILE`): one userspace UDP relay per path on
//! loopback, shaping each direction with the testbed's link model ([`crate::link`]: rate or
//! trace, delay, jitter, loss, droptail queue, outages, step changes), the scenario path model
//! of the design guide ("Testbed: scenario files and the link model") in real time. The model
//! follows netem's order, which the OLMS, DaMPS and FALCON testbeds used; the emulator plays
//! the role netem/mahimahi play there, without root and confined to 127.0.0.0/8 and ::1.
//!
//! ```text
//! client ──► listen ─[forward Link]─► clock ─► upstream socket ──► forward (server)
//! client ◄── listen ◄─ clock ◄─[reverse Link]─ upstream socket ◄── server
//! ```
//!
//! A path can also lose its NAT mappings at given times (`rebind_at`): every client mapping
//! then leaves from a new upstream socket (see [`relay`]).
//!
//! Time is a [`Timestamp`] in µs since [`Emulator::start`] (outage, change and rebinding times
//! in the file are relative to it); only the clock ([`clock`]) reads the system clock. Receiving runs
//! on tokio tasks; delivery runs on one thread that sleeps until the next due datagram (see
//! [`clock`] for why). The configuration format is in `docs/emu.md`.

mod clock;
mod config;
mod relay;
#[cfg(test)]
mod tests;

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering as AtomicOrdering;

use braid_sched_core::Timestamp;
use tokio::task::JoinHandle;

pub use clock::{Lateness, MAX_PENDING};
pub use config::{DEFAULT_STATS_INTERVAL, EmuConfig, EmuConfigError, EmuPath, MAX_REBINDS};
pub use relay::{MAX_CLIENTS, ReceiveCounters};

use crate::link::{LinkConfigError, LinkStats};
use clock::Clock;
use relay::PathShared;

/// Why the emulator could not start.
#[derive(Debug, thiserror::Error)]
pub enum EmuError {
    /// The configuration.
    #[error(transparent)]
    Config(#[from] EmuConfigError),
    /// A link configuration the link model refused.
    #[error("path {path}: {source}")]
    Link {
        /// The path's name.
        path: String,
        /// Why.
        source: LinkConfigError,
    },
    /// A listen socket could not be bound.
    #[error("path {path}: binding {addr}: {source}")]
    Bind {
        /// The path's name.
        path: String,
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The delivery thread could not be started.
    #[error("starting the delivery thread: {0}")]
    Thread(std::io::Error),
}

/// The emulator's entry point.
#[derive(Debug)]
pub struct Emulator;

impl Emulator {
    /// Binds every path's listen socket and starts relaying; time zero is now. Must be called
    /// inside a tokio runtime (the relay tasks run on it).
    pub async fn start(config: &EmuConfig) -> Result<EmuHandle, EmuError> {
        let clock = Arc::new(Clock::new(config.paths.len()));
        let mut paths = Vec::with_capacity(config.paths.len());
        let mut sockets = Vec::with_capacity(config.paths.len());
        for (index, path) in config.paths.iter().enumerate() {
            let name = path.link.name.clone();
            let (forward, reverse) = path.link.links().map_err(|source| EmuError::Link {
                path: name.clone(),
                source,
            })?;
            let bind_err = |source| EmuError::Bind {
                path: name.clone(),
                addr: path.listen,
                source,
            };
            let (listen_std, listen) = relay::bind_udp(path.listen).map_err(bind_err)?;
            let listen_addr = listen.local_addr().map_err(bind_err)?;
            let shared = Arc::new(PathShared::new(
                index,
                path.forward,
                forward,
                reverse,
                path.rebind_at.clone(),
            ));
            paths.push(EmuPathHandle {
                name,
                listen: listen_addr,
                forward: path.forward,
                shared,
            });
            sockets.push((Arc::new(listen_std), listen));
        }
        let runner = clock.clone();
        let thread = std::thread::Builder::new()
            .name("braid-emu-clock".into())
            .spawn(move || runner.run())
            .map_err(EmuError::Thread)?;
        let tasks = paths
            .iter()
            .zip(sockets)
            .map(|(p, (listen_std, listen))| {
                tokio::spawn(relay::listen_loop(
                    p.shared.clone(),
                    clock.clone(),
                    listen_std,
                    listen,
                ))
            })
            .collect();
        Ok(EmuHandle {
            paths,
            clock,
            thread: Some(thread),
            tasks,
        })
    }
}

#[derive(Debug)]
struct EmuPathHandle {
    name: String,
    listen: SocketAddr,
    forward: SocketAddr,
    shared: Arc<PathShared>,
}

/// A running emulator; dropping it stops it.
#[derive(Debug)]
pub struct EmuHandle {
    paths: Vec<EmuPathHandle>,
    clock: Arc<Clock>,
    thread: Option<std::thread::JoinHandle<()>>,
    tasks: Vec<JoinHandle<()>>,
}

/// Counters of one direction of one path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirectionStats {
    /// What arrived at the relay.
    pub received: ReceiveCounters,
    /// What the link model did (delivered counts include datagrams still propagating).
    pub link: LinkStats,
    /// Datagrams sent on.
    pub sent_packets: u64,
    /// Their payload bytes.
    pub sent_bytes: u64,
    /// Datagrams the socket refused to send (counted as lost).
    pub send_errors: u64,
}

/// Counters of one path at one moment.
#[derive(Clone, Debug, PartialEq)]
pub struct PathStats {
    /// The path's name.
    pub name: String,
    /// Where the relay listens.
    pub listen: SocketAddr,
    /// Where it forwards to.
    pub forward: SocketAddr,
    /// When the snapshot was taken (emulator time).
    pub at: Timestamp,
    /// Whether the link is inside an outage window.
    pub down: bool,
    /// Client addresses seen.
    pub clients: usize,
    /// Client mappings given a new upstream socket by `rebind_at` so far.
    pub rebinds: u64,
    /// Client to server.
    pub forward_dir: DirectionStats,
    /// Server to client.
    pub reverse_dir: DirectionStats,
}

impl EmuHandle {
    /// The listen addresses, in path order (ephemeral ports resolved).
    pub fn listen_addrs(&self) -> Vec<SocketAddr> {
        self.paths.iter().map(|p| p.listen).collect()
    }

    /// The emulator's time now (µs since start).
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// How late datagrams were sent compared with their modelled arrival.
    pub fn lateness(&self) -> Lateness {
        self.clock.lateness()
    }

    /// A snapshot of every path's counters.
    pub fn stats(&self) -> Vec<PathStats> {
        let now = self.clock.now();
        self.paths
            .iter()
            .map(|p| {
                let dir = |d: usize| {
                    let (link, received) = p.shared.link_stats(d);
                    let mut s = DirectionStats {
                        received,
                        link,
                        ..DirectionStats::default()
                    };
                    if let Some(c) = self.clock.counters(p.shared.index).and_then(|c| c.get(d)) {
                        s.sent_packets = c.sent_packets.load(AtomicOrdering::Relaxed);
                        s.sent_bytes = c.sent_bytes.load(AtomicOrdering::Relaxed);
                        s.send_errors = c.send_errors.load(AtomicOrdering::Relaxed);
                    }
                    s
                };
                // A separate statement: the guard must be released before `dir` locks again.
                let down = p.shared.direction(0).link.is_down(now);
                PathStats {
                    name: p.name.clone(),
                    listen: p.listen,
                    forward: p.forward,
                    at: now,
                    down,
                    clients: p.shared.clients.load(AtomicOrdering::Relaxed),
                    rebinds: p.shared.rebinds.load(AtomicOrdering::Relaxed),
                    forward_dir: dir(0),
                    reverse_dir: dir(1),
                }
            })
            .collect()
    }

    /// Stops relaying and the delivery thread; datagrams still queued are discarded.
    pub fn shutdown(&mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
        self.clock.stop();
        if let Some(thread) = self.thread.take() {
            // The thread returns as soon as it sees the stop flag.
            let _ = thread.join();
        }
    }
}

impl Drop for EmuHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl fmt::Display for DirectionStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "in {} pkts / {} B, out {} pkts / {} B, lost {}, queue-full {}, outage {}, \
             overflow {}, send-err {}",
            self.received.packets,
            self.received.bytes,
            self.sent_packets,
            self.sent_bytes,
            self.link.lost,
            self.link.queue_full,
            self.link.outage,
            self.received.overflow,
            self.send_errors
        )
    }
}

impl fmt::Display for PathStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:>8.1}s {} {} -> {} ({}, {} client(s), {} rebind(s))\n  fwd: {}\n  rev: {}",
            self.at.as_secs_f64(),
            self.name,
            self.listen,
            self.forward,
            if self.down { "DOWN" } else { "up" },
            self.clients,
            self.rebinds,
            self.forward_dir,
            self.reverse_dir
        )
    }
}
