//! The deterministic discrete-event simulator (DESIGN.md "testbed"): a virtual clock, seeded
//! random draws and one event queue drive two real session endpoints (client and server, each
//! with its own scheduler and per-path congestion controllers) over the modelled links of a
//! [`Scenario`](crate::Scenario), run an application model on top, and measure the papers'
//! metrics ([`Metrics`], defined in `docs/metrics.md`).
//!
//! The simulator does not depend on the session crate (braid-proxy depends on braid-testbed):
//! it is generic over [`Endpoint`], the small set of transport and flow operations it needs,
//! which `braid_proxy::sim_endpoint` implements for the real `Session`.
//!
//! Conventions:
//! - **Direction**: data flows server → client in every application model (downloads: a bulk
//!   file, a web page's objects, a real-time stream the server sends). A path's *forward* link
//!   carries server → client packets, its *reverse* link client → server packets (ACKs and
//!   requests). The client opens stream flows; the server opens the real-time datagram flow.
//! - **Seeds**: run `r` of `--runs N` uses seed `seed + r`. The seed draws the scenario's
//!   parameter ranges and link RNGs ([`ScenarioFile::resolve`](crate::ScenarioFile::resolve)),
//!   the application's deadline draws (`seed ^ APP_SEED_SALT`), and the schedulers' `seed`
//!   parameter when they have one (client `2·seed`, server `2·seed + 1`, modulo 2^53;
//!   [`run_keeping_scheduler_seed`] leaves it as configured, for tests).
//! - **Time**: everything is virtual; nothing reads the wall clock, so the same scenario, seed
//!   and scheduler give the same [`RunResult`] bit for bit.

mod app;
mod engine;
mod metrics;
mod queue;
mod summary;
mod truth;

use braid_sched_core::{FlowId, PathId, SchedulerConfig, Timestamp};

pub use engine::{RunResult, SimError, SimOptions, run, run_keeping_scheduler_seed};
pub use metrics::{Metrics, TimeSeries};
pub use summary::{
    Aggregate, Interval, SchedulerSummary, aggregate, cross_aggregate, format_json, format_table,
};

/// Salt mixed into the run seed for the application model's own draws.
pub const APP_SEED_SALT: u64 = 0x5eed_a99e_0000_0001;

/// Which end of the session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The client (device): receives the data.
    Client,
    /// The server: sends the data.
    Server,
}

impl Side {
    /// Index into two-element per-side arrays (client 0, server 1).
    pub fn index(self) -> usize {
        match self {
            Side::Client => 0,
            Side::Server => 1,
        }
    }
}

/// What the simulator tells an [`Endpoint`] implementation to build.
#[derive(Clone, Debug)]
pub struct EndpointSetup {
    /// Which end.
    pub side: Side,
    /// The scheduler, its seed already set where it has one.
    pub scheduler: SchedulerConfig,
    /// Paths to join, ids `0..paths`.
    pub paths: usize,
    /// The scenario's receiver buffer limit in bytes, when it sets one.
    pub receive_buffer_bytes: Option<u64>,
    /// Flow window the scenario needs: 4 × (sum of the paths' forward rates) × (largest base
    /// RTT + 200 ms), clamped to 2–16 MiB, and at most the largest stream's size + 64 KiB
    /// (implementations may size buffers by it).
    pub window_hint_bytes: u64,
    /// The congestion controller, by a name the implementation knows (`None`: its default;
    /// an unknown name is the implementation's error).
    pub congestion: Option<String>,
    /// Each path's own congestion controller, by id (`None`, or no entry: `congestion`); both
    /// endpoints run it, as if the client had told the server.
    pub path_congestion: Vec<Option<String>>,
    /// The virtual time at construction.
    pub now: Timestamp,
}

/// An event of an endpoint that the application models react to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndpointEvent {
    /// The peer opened a flow (`datagram`: a datagram flow, else a stream).
    FlowOpened {
        /// The flow.
        flow: FlowId,
        /// Whether it is a datagram flow.
        datagram: bool,
    },
    /// Stream bytes can be read.
    Readable(FlowId),
    /// Send-buffer space freed up.
    Writable(FlowId),
    /// The peer finished its side of the flow.
    Finished(FlowId),
    /// A datagram arrived.
    DatagramReceived(FlowId),
    /// Anything else (path failure, recovery, close, ...).
    Other,
}

/// Application data found in one packet on the wire (for receiver-side metrics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataFrame {
    /// Stream bytes `[offset, offset + len)` of `flow`.
    Stream {
        /// The flow.
        flow: FlowId,
        /// First byte's offset.
        offset: u64,
        /// Bytes.
        len: u64,
    },
    /// Datagram number `seq` of `flow`, `len` payload bytes.
    Datagram {
        /// The flow.
        flow: FlowId,
        /// Per-flow sequence number.
        seq: u64,
        /// Payload bytes.
        len: u64,
    },
}

/// Why an endpoint refused an operation (the message names the input).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct EndpointError(pub String);

/// One end of a multipath session as the simulator drives it: the sans-IO transport calls in
/// the session core's call order, the flow operations the application models use, and a
/// decoder that tells which application data a packet carries.
pub trait Endpoint: Sized {
    /// Builds an endpoint with `setup.paths` paths joined.
    fn create(setup: &EndpointSetup) -> Result<Self, EndpointError>;
    /// A datagram arrived on `path`.
    fn handle_datagram(
        &mut self,
        path: PathId,
        data: &[u8],
        now: Timestamp,
    ) -> Result<(), EndpointError>;
    /// The next packet to send, written at the start of `buf`: `(path, len)`.
    fn poll_transmit(&mut self, now: Timestamp, buf: &mut [u8]) -> Option<(PathId, usize)>;
    /// When [`Endpoint::handle_timeout`] should next run.
    fn poll_timeout(&self) -> Option<Timestamp>;
    /// Runs the timers that expired by `now`.
    fn handle_timeout(&mut self, now: Timestamp);
    /// The next event.
    fn poll_event(&mut self) -> Option<EndpointEvent>;
    /// Opens a stream flow (`datagram` false) or a datagram flow.
    fn open_flow(&mut self, datagram: bool) -> Result<FlowId, EndpointError>;
    /// Buffers stream bytes; returns how many were taken.
    fn write(&mut self, flow: FlowId, data: &[u8]) -> Result<usize, EndpointError>;
    /// Ends the flow's sending side.
    fn finish(&mut self, flow: FlowId) -> Result<(), EndpointError>;
    /// Reads stream bytes: `Some(n)` (0: none yet), `None`: finished and drained.
    fn read(&mut self, flow: FlowId, out: &mut [u8]) -> Result<Option<usize>, EndpointError>;
    /// Queues a datagram with an optional deadline budget (µs from now).
    fn send_datagram(
        &mut self,
        flow: FlowId,
        data: &[u8],
        budget_us: Option<u32>,
        now: Timestamp,
    ) -> Result<(), EndpointError>;
    /// Takes a received datagram into `out`; its length, or `None` when none waits.
    fn recv_datagram(
        &mut self,
        flow: FlowId,
        out: &mut [u8],
    ) -> Result<Option<usize>, EndpointError>;
    /// Calls `visit` for every piece of application data in `packet` (as sent on the wire).
    /// A packet that does not decode is skipped.
    fn inspect(packet: &[u8], visit: impl FnMut(DataFrame));
}
