//! The sans-IO multipath session core, in the style of quinn-proto: no sockets, no clock, no
//! tokio. One [`Session`] joins K paths (one QUIC connection per link in the daemon, a simulated
//! link in [`harness`]) and carries flows over them: reliable byte streams (proxied TCP) and
//! unreliable datagram flows with optional deadlines (proxied UDP).
//!
//! Call order (the driver owns sockets and the clock):
//!
//! 1. [`Session::new`], then [`Session::add_path`] for every link;
//! 2. for each datagram received on a path: [`Session::handle_datagram`];
//! 3. repeatedly [`Session::poll_transmit`] into the driver's buffer and send `buf[..len]` as one
//!    QUIC DATAGRAM on `transmit.path`, until it returns `None`;
//! 4. arm a timer for [`Session::poll_timeout`]; when it fires, [`Session::handle_timeout`];
//! 5. drain [`Session::poll_event`] and use the flow API ([`Session::open_flow`],
//!    [`Session::write`], [`Session::read`], [`Session::finish`], [`Session::reset`],
//!    [`Session::send_datagram`], [`Session::recv_datagram`]).
//!
//! Every data packet is placed by the scheduler ([`braid_sched_core::Scheduler::select`], called
//! once per packet on a preallocated slice of path views); ACK-only packets and probes belong to
//! one path and bypass it. Each path has one congestion controller ([`congestion`]); loss
//! detection follows RFC 9002 §6 per path, and a lost packet's bytes may be retransmitted on any
//! path. A failed path's packets in flight are all reinjected, and so are the stream bytes in
//! flight on a path whose probe timer fires. While the scheduler links the redundant buffer
//! ([`braid_sched_core::Scheduler::link_redundant_buffer`], EdAR's redundant mode), a path with
//! window room first carries copies of stream packets in flight on the other paths. The wire
//! format is in [`frame`] and `docs/protocol.md`. Nothing on the send path allocates once buffers are warm.

pub mod config;
pub mod congestion;
pub mod error;
pub mod frame;
pub mod harness;
pub mod ranges;
pub mod varint;

mod ack;
mod control;
mod datagram;
mod flow;
mod path;
mod reassembly;
mod recv;
mod reorder;
mod send;
mod sent;
mod stream;

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use braid_sched_core::{
    AnyScheduler, FlowId, MAX_PATHS, PathId, PathState, PathView, ReceiverReport, Scheduler,
    Timestamp,
};

pub use config::{PathConfig, PortSet, RedundantFlows, Role, SessionConfig, Tier};
pub use error::{ConfigError, FlowError, FrameError, PathError, SessionError};
pub use frame::{FlowKind, Target};
pub use path::{PathStats, Reordering};
pub use stream::release_spare_rings;

use datagram::DatagramQueue;
use flow::Flow;
use path::Path;
use ranges::RangeSet;
use send::PendingCopy;
use sent::{Control, SentPacket};

/// A packet for the driver to send: `buf[..len]` as one DATAGRAM on `path`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// The path to send on.
    pub path: PathId,
    /// Bytes written at the start of the caller's buffer.
    pub len: usize,
}

/// Something the application or driver should know about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// The peer opened a flow towards `target`.
    FlowOpened {
        /// The flow.
        flow: FlowId,
        /// Stream or datagram.
        kind: FlowKind,
        /// Where to connect it.
        target: Target,
    },
    /// Stream bytes can be read.
    FlowReadable(FlowId),
    /// Send-buffer space freed up on a flow whose writes had been refused.
    FlowWritable(FlowId),
    /// The peer finished its side of the flow: read returns `None` once drained, unless both
    /// directions are over with every byte read, in which case the flow is already forgotten
    /// ([`Event::FlowClosed`] follows) and a read finds no flow.
    FlowFinished(FlowId),
    /// The peer reset the flow.
    FlowReset {
        /// The flow.
        flow: FlowId,
        /// The peer's code.
        code: u64,
    },
    /// The flow is fully closed and forgotten.
    FlowClosed(FlowId),
    /// A datagram arrived on a datagram flow.
    DatagramReceived(FlowId),
    /// A path stopped answering; its packets in flight were reinjected elsewhere.
    PathFailed(PathId),
    /// A failed path answers again and carries traffic again.
    PathRecovered(PathId),
    /// The peer said the longest datagram payload it takes (DATAGRAM_LIMIT): longer ones are
    /// refused here from now on ([`Session::send_datagram`]).
    PeerDatagramLimit(usize),
    /// The client said its floor for backups (BACKUP_FLOOR, bytes per second): it governs what
    /// this end (the server) sends from now on ([`Session::backup_floor`]).
    PeerBackupFloor(u64),
    /// The client chose the congestion controller of what this end (the server) sends on a
    /// path (PATH_CONGESTION; `None`: the server's own again).
    PeerPathCongestion(PathId, Option<congestion::CongestionAlgorithm>),
    /// The client capped (or lifted the cap on) what this end (a server) sends on one of its
    /// paths (PATH_RATE_CAP), bytes per second.
    PeerPathRateCap(PathId, Option<u64>),
    /// The session is closed.
    Closed {
        /// The code (0: normal).
        code: u64,
        /// Who closed it.
        by_peer: bool,
    },
}

/// Bytes held by the session, for checking it against [`SessionConfig::memory_bound`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryUsage {
    /// Bytes of storage allocated for buffers and tables.
    pub allocated: u64,
    /// Stream bytes written and not yet acknowledged, all flows.
    pub send_buffered: u64,
    /// Stream bytes received and not yet read (in order or waiting in the reorder buffer).
    pub receive_buffered: u64,
    /// Datagrams queued, both directions.
    pub datagrams_queued: usize,
    /// Flows open.
    pub flows: usize,
    /// Flows open that are sent redundantly ([`RedundantFlows::ports`], or the peer's
    /// mark).
    pub redundant_flows: usize,
}

/// Status of one path, for status displays.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PathStatus {
    /// What the scheduler sees.
    pub view: PathView,
    /// Counters.
    pub stats: PathStats,
    /// How much the path reorders, as its loss detection learned it.
    pub reordering: Reordering,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SessionState {
    Open,
    /// CLOSE queued on every live path (bit set of paths still to send it on).
    Closing {
        code: u64,
        pending: u32,
    },
    Closed,
}

/// Datagrams (or pieces) a session keeps for flows the peer has not opened yet: their OPEN,
/// sent in the same packet or just before, may be overtaken on another path.
pub(crate) const EARLY_DATAGRAMS: usize = 16;

/// A datagram (or a piece) that came before its flow's OPEN.
#[derive(Debug)]
struct EarlyDatagram {
    flow: FlowId,
    /// Its sequence number and, for a piece, which one.
    piece: (u64, Option<frame::Fragment>),
    data: Vec<u8>,
}

/// The receiver report being accumulated for the peer.
#[derive(Clone, Copy, Debug, Default)]
struct ReportAccumulator {
    report: ReceiverReport,
    since: Timestamp,
}

/// One end of a multipath session (see the module docs for the call order).
#[derive(Debug)]
pub struct Session {
    config: SessionConfig,
    role: Role,
    state: SessionState,
    scheduler: AnyScheduler,
    paths: [Option<Path>; MAX_PATHS],
    /// One past the highest slot ever joined: the per-packet loops scan `paths[..path_end]`.
    path_end: usize,
    views: [PathView; MAX_PATHS],
    view_count: usize,
    pacing_wakeup: Option<Timestamp>,
    flows: BTreeMap<FlowId, Flow>,
    next_local_flow: u64,
    peer_flows_seen: RangeSet,
    send_queue: VecDeque<FlowId>,
    retransmit_queue: VecDeque<FlowId>,
    controls: VecDeque<Control>,
    datagrams: DatagramQueue,
    pending_copy: Option<PendingCopy>,
    /// The redundant buffer's cursors: `copy_from[q][p]` is the lowest packet number on path `p`
    /// not yet considered for a copy onto path `q` (see `transmit_redundant`).
    copy_from: [[u64; MAX_PATHS]; MAX_PATHS],
    /// When a paced path may take the next redundant copy.
    copy_wakeup: Option<Timestamp>,
    events: VecDeque<Event>,
    // Session-wide flow control.
    peer_max_data: u64,
    sent_total: u64,
    local_max_data: u64,
    received_total: u64,
    consumed_total: u64,
    // Backlog accounting for the scheduler.
    unsent_bytes: u64,
    lost_bytes: u64,
    locally_dropped_deadlines: u32,
    /// Datagrams dropped before sending, for any reason ([`Session::datagrams_dropped`]).
    datagrams_dropped: u64,
    /// The peer reassembles DATAGRAM_FRAGMENT frames ([`Session::set_peer_reassembles`]).
    peer_reassembles: bool,
    /// The peer knows PATH_ABANDON ([`Session::set_peer_knows_abandon`]).
    peer_knows_abandon: bool,
    /// The peer relays ICMP echoes ([`Session::set_peer_relays_ping`]).
    peer_relays_ping: bool,
    /// DATAGRAM_LIMIT was queued ([`Session::announce_datagram_limit`]).
    datagram_limit_announced: bool,
    /// The longest datagram payload the peer takes, once it said (DATAGRAM_LIMIT).
    peer_datagram_limit: Option<usize>,
    /// BACKUP_FLOOR was queued ([`Session::announce_backup_floor`]).
    backup_floor_announced: bool,
    /// Each path's own congestion controller, where it has one ([`Session::set_path_congestion`];
    /// `None`: the session's). A client's comes from its link; a server's from the client's
    /// PATH_CONGESTION. Kept by path id, for the path's later joins too.
    path_congestion: [Option<congestion::CongestionAlgorithm>; MAX_PATHS],
    /// The peer knows PATH_CONGESTION ([`Session::set_peer_knows_path_congestion`]).
    peer_knows_path_congestion: bool,
    /// Each path's cap on what the server sends on it, bytes per second, where its link has
    /// one (`rate_cap_down_mbps`): a client's to tell the server
    /// ([`Session::set_path_rate_cap_down`]), a server's as told by PATH_RATE_CAP and put on the
    /// path. Kept by path id, for the path's later joins too.
    path_rate_cap_down: [Option<u64>; MAX_PATHS],
    /// The peer knows PATH_RATE_CAP ([`Session::set_peer_knows_path_rate_cap`]).
    peer_knows_path_rate_cap: bool,
    /// The last PATH_RATE_CAP sequence number written.
    path_rate_cap_seq: u64,
    /// The highest PATH_RATE_CAP sequence number taken, per path.
    peer_path_rate_cap_seq: [u64; MAX_PATHS],
    /// The peer knows OPEN's redundant mark ([`Session::set_peer_knows_redundant_flows`]).
    peer_knows_redundant_flows: bool,
    /// Flows held that are sent redundantly ([`RedundantFlows::ports`], or the peer's mark):
    /// while there are any, each packet's flow is looked up before the scheduler is asked (a
    /// session without such flows pays nothing).
    redundant_flows: usize,
    /// Where [`RedundantFlows::max_rate`] has brought the redundant packets sent so far: the
    /// time at which they would have gone at that rate (a packet may go redundantly while it
    /// is at most [`config::REDUNDANT_BURST`] ahead of now).
    redundant_budget_at: Timestamp,
    /// Packets of redundant flows sent once because of [`RedundantFlows::max_rate`].
    redundant_capped: u64,
    /// The last PATH_CONGESTION sequence number written.
    path_congestion_seq: u64,
    /// The highest PATH_CONGESTION sequence number taken, per path.
    peer_path_congestion_seq: [u64; MAX_PATHS],
    /// Datagrams cut into fragments ([`Session::datagrams_split`]).
    datagrams_split: u64,
    /// Datagrams put back together from fragments ([`Session::datagrams_reassembled`]).
    datagrams_reassembled: u64,
    /// Packets refused whole for what they would have made the session hold
    /// ([`Session::packets_refused`]).
    packets_refused: u64,
    /// Datagrams of flows whose OPEN has not come yet, oldest first.
    early: VecDeque<EarlyDatagram>,
    // Scratch tables reused on every ACK (never reallocated in steady state).
    scratch_acked: Vec<SentPacket>,
    scratch_lost: Vec<SentPacket>,
    report: ReportAccumulator,
    next_report_at: Timestamp,
    /// When application data (any frame but PING, ACK and CLOSE) was last sent or received:
    /// from [`SessionConfig::quiet_after`] later, idle paths' heartbeats slow down
    /// ([`path::Heartbeat`]).
    busy_at: Timestamp,
    all_failed_since: Option<Timestamp>,
    path_status_seq: u64,
    peer_report: Option<ReceiverReport>,
    /// The latest time the driver handed in (the reads of flows, which take none, judge a
    /// window's growth by it).
    clock: Timestamp,
}

impl Session {
    /// A session with no paths yet. `config` should have passed [`SessionConfig::validate`];
    /// values outside the accepted ranges are clamped into them (see
    /// [`SessionConfig::clamped`]), so construction never panics or allocates without bound.
    pub fn new(
        config: SessionConfig,
        role: Role,
        scheduler: AnyScheduler,
        now: Timestamp,
    ) -> Session {
        let config = config.clamped();
        let flows_cap = config.max_flows;
        let controls_cap = 3 * flows_cap + 2 * MAX_PATHS + 4;
        Session {
            role,
            state: SessionState::Open,
            scheduler,
            paths: std::array::from_fn(|_| None),
            path_end: 0,
            views: [PathView::new(PathId(0), 0, 0); MAX_PATHS],
            view_count: 0,
            pacing_wakeup: None,
            flows: BTreeMap::new(),
            next_local_flow: role.flow_parity(),
            peer_flows_seen: RangeSet::with_capacity(16),
            send_queue: VecDeque::with_capacity(flows_cap),
            retransmit_queue: VecDeque::with_capacity(flows_cap),
            controls: VecDeque::with_capacity(controls_cap),
            datagrams: DatagramQueue::new(&config),
            pending_copy: None,
            copy_from: [[0; MAX_PATHS]; MAX_PATHS],
            copy_wakeup: None,
            events: VecDeque::with_capacity(4 * flows_cap + 2 * MAX_PATHS),
            peer_max_data: config.session_receive_window,
            sent_total: 0,
            local_max_data: config.session_receive_window,
            received_total: 0,
            consumed_total: 0,
            unsent_bytes: 0,
            lost_bytes: 0,
            locally_dropped_deadlines: 0,
            datagrams_dropped: 0,
            peer_reassembles: false,
            peer_knows_abandon: false,
            peer_relays_ping: false,
            datagram_limit_announced: false,
            peer_datagram_limit: None,
            backup_floor_announced: false,
            path_congestion: [None; MAX_PATHS],
            peer_knows_path_congestion: false,
            path_rate_cap_down: [None; MAX_PATHS],
            peer_knows_path_rate_cap: false,
            path_rate_cap_seq: 0,
            peer_path_rate_cap_seq: [0; MAX_PATHS],
            peer_knows_redundant_flows: false,
            redundant_flows: 0,
            redundant_budget_at: Timestamp::ZERO,
            redundant_capped: 0,
            path_congestion_seq: 0,
            peer_path_congestion_seq: [0; MAX_PATHS],
            datagrams_split: 0,
            datagrams_reassembled: 0,
            packets_refused: 0,
            early: VecDeque::with_capacity(EARLY_DATAGRAMS),
            scratch_acked: Vec::with_capacity(config.max_sent_packets),
            scratch_lost: Vec::with_capacity(config.max_sent_packets),
            report: ReportAccumulator {
                since: now,
                ..ReportAccumulator::default()
            },
            next_report_at: now + config.report_interval,
            busy_at: now,
            all_failed_since: Some(now),
            path_status_seq: 0,
            peer_report: None,
            clock: now,
            config,
        }
    }

    /// The last receiver report the peer sent (what it received from us), with our own
    /// deadline drops added to its deadline total, as handed to the scheduler.
    pub fn peer_report(&self) -> Option<ReceiverReport> {
        self.peer_report
    }

    /// This end's role.
    pub fn role(&self) -> Role {
        self.role
    }

    /// The configuration.
    pub fn config(&self) -> &SessionConfig {
        &self.config
    }

    /// The scheduler (e.g. to read its statistics).
    pub fn scheduler(&self) -> &AnyScheduler {
        &self.scheduler
    }

    /// Puts `scheduler` in place of the running one (a daemon's reload): it starts as it would
    /// in a new session, told the state of every path; from the next packet on, it places the
    /// packets. Packets in flight stay where they are, and flows, windows and paths are
    /// untouched.
    pub fn replace_scheduler(&mut self, scheduler: AnyScheduler, now: Timestamp) {
        self.scheduler = scheduler;
        for path in self.paths[..self.path_end].iter().flatten() {
            self.scheduler.on_path_state(path.id, path.state, now);
        }
    }

    /// True once the session is closed.
    pub fn is_closed(&self) -> bool {
        self.state == SessionState::Closed
    }

    /// Joins a path.
    pub fn add_path(
        &mut self,
        id: PathId,
        config: PathConfig,
        now: Timestamp,
    ) -> Result<(), PathError> {
        let slot = self
            .paths
            .get_mut(id.index())
            .ok_or(PathError::OutOfRange(id))?;
        if slot.is_some() {
            return Err(PathError::AlreadyJoined(id));
        }
        config
            .validate()
            .map_err(|source| PathError::Config { path: id, source })?;
        let mut path = Path::new(id, config, &self.config, now);
        if let Some(algorithm) = self.path_congestion[id.index()] {
            path.set_congestion(algorithm);
        }
        // What the client's link takes from a server: its cap in place of the server's own.
        if self.role == Role::Server
            && let Some(cap) = self.path_rate_cap_down[id.index()]
        {
            path.set_rate_cap(Some(cap));
        }
        let state = path.state;
        *slot = Some(path);
        // Packet numbers start again at 0 on a (re)joined path.
        self.copy_from[id.index()] = [0; MAX_PATHS];
        for row in &mut self.copy_from {
            row[id.index()] = 0;
        }
        self.path_end = self.path_end.max(id.index() + 1);
        self.all_failed_since = None;
        self.scheduler.on_path_state(id, state, now);
        Ok(())
    }

    /// Removes a path (the link went away); its packets in flight are reinjected elsewhere.
    pub fn remove_path(&mut self, id: PathId, now: Timestamp) -> Result<(), PathError> {
        let mut path = self
            .paths
            .get_mut(id.index())
            .and_then(Option::take)
            .ok_or(PathError::UnknownPath(id))?;
        let mut lost = std::mem::take(&mut self.scratch_lost);
        path.fail(now, &mut lost);
        self.on_packets_lost(id, &mut lost, now);
        self.scratch_lost = lost;
        self.scheduler.on_path_state(id, PathState::Failed, now);
        self.note_path_liveness(now);
        Ok(())
    }

    /// Removes path `id` as [`Session::remove_path`] does, and tells the peer (PATH_ABANDON,
    /// when it knows the frame: [`Session::set_peer_knows_abandon`]) so that it fails the path
    /// at once and sends what it had in flight on it over the other paths, instead of after its
    /// probe timeouts: for a link whose interface went down or whose address went away, which
    /// will carry nothing more. A path already removed (its connection noticed first) is only
    /// told of.
    pub fn abandon_path(&mut self, id: PathId, now: Timestamp) -> Result<(), PathError> {
        match self.paths.get(id.index()) {
            None => return Err(PathError::OutOfRange(id)),
            Some(Some(_)) => self.remove_path(id, now)?,
            Some(None) => {}
        }
        if self.peer_knows_abandon {
            self.push_control(Control::PathAbandon(id));
        }
        Ok(())
    }

    /// Whether the peer knows the PATH_ABANDON frame (the daemon learns it in each path's JOIN
    /// exchange); [`Session::abandon_path`] sends it only then.
    pub fn set_peer_knows_abandon(&mut self, yes: bool) {
        self.peer_knows_abandon = yes;
    }

    /// Whether the peer relays ICMP echoes (the client learns it in each path's JOIN exchange);
    /// [`Session::open_flow`] opens [`FlowKind::Ping`] flows only then.
    pub fn set_peer_relays_ping(&mut self, yes: bool) {
        self.peer_relays_ping = yes;
    }

    /// Tells the peer the longest datagram payload this end takes (its `max_datagram_payload`,
    /// DATAGRAM_LIMIT), so that it sends none longer: call it once the peer said in the JOIN
    /// exchange that it knows the frame; later calls do nothing.
    pub fn announce_datagram_limit(&mut self) {
        if !self.datagram_limit_announced {
            self.datagram_limit_announced = true;
            self.push_control(Control::DatagramLimit);
        }
    }

    /// Tells the server this client's floor for backups (BACKUP_FLOOR), so that it governs what
    /// the server sends too: call it once the server said in the JOIN exchange that it knows
    /// the frame. Only a client whose [`SessionConfig::tell_backup_floor`] is set sends it, once
    /// per session; other calls do nothing.
    pub fn announce_backup_floor(&mut self) {
        if self.role == Role::Client
            && self.config.tell_backup_floor
            && !self.backup_floor_announced
        {
            self.backup_floor_announced = true;
            self.push_control(Control::BackupFloor);
        }
    }

    /// The rate, bytes per second, below which a busy primary path counts as degraded and lets
    /// backups help with what this end sends ([`SessionConfig::backup_below_rate`]; on a
    /// server, the client's once it said one).
    pub fn backup_floor(&self) -> u64 {
        self.config.backup_below_rate
    }

    /// Applies the client's floor (BACKUP_FLOOR) to every path, present and future.
    pub(crate) fn set_backup_floor(&mut self, rate: u64) {
        if self.config.backup_below_rate == rate {
            return;
        }
        self.config.backup_below_rate = rate;
        for path in self.paths.iter_mut().flatten() {
            path.set_degraded_below(rate);
        }
        self.push_event(Event::PeerBackupFloor(rate));
    }

    /// The longest datagram payload the peer takes, once it said (DATAGRAM_LIMIT).
    pub fn peer_datagram_limit(&self) -> Option<usize> {
        self.peer_datagram_limit
    }

    /// The longest datagram payload this end sends: its own `max_datagram_payload`, or the
    /// peer's limit where that is lower.
    pub fn datagram_limit(&self) -> usize {
        self.config
            .max_datagram_payload
            .min(self.peer_datagram_limit.unwrap_or(usize::MAX))
    }

    /// Changes a path's tier and tells the peer (PATH_STATUS); the path's tier already: nothing.
    pub fn set_path_tier(
        &mut self,
        id: PathId,
        tier: Tier,
        now: Timestamp,
    ) -> Result<(), PathError> {
        let path = self.path_mut(id)?;
        if path.config.tier == tier {
            return Ok(());
        }
        path.set_tier(tier);
        let state = path.state;
        self.scheduler.on_path_state(id, state, now);
        self.push_control(Control::PathStatus(id));
        Ok(())
    }

    /// The rate cap of what this end sends on path `id`, bytes per second (for status
    /// displays): a client's link's `rate_cap_mbps`, or on a server the client's
    /// `rate_cap_down_mbps` (PATH_RATE_CAP).
    pub fn path_rate_cap(&self, id: PathId) -> Option<u64> {
        self.paths.get(id.index())?.as_ref()?.config.rate_cap
    }

    /// The congestion controller of path `id` (for status displays).
    pub fn path_controller(&self, id: PathId) -> Option<&congestion::AnyController> {
        self.paths.get(id.index())?.as_ref().map(|p| &p.cc)
    }

    /// Switches every path's congestion controller to `algorithm` (a daemon's reload), and the
    /// paths that join later, but for those with a controller of their own
    /// ([`Session::set_path_congestion`]). Each path's new controller continues from the old one's window
    /// and slow-start threshold (`AnyController::take_over`; BBR alone starts from the initial
    /// window and measures its model afresh), with the bytes already in flight counted against
    /// it; its RTT estimates, packets in flight and delivery-rate state are kept, and so are the
    /// flows. Nothing changes when the session already runs `algorithm`.
    pub fn set_congestion(&mut self, algorithm: congestion::CongestionAlgorithm) {
        if self.config.congestion.algorithm == algorithm {
            return;
        }
        self.config.congestion.algorithm = algorithm;
        for (i, slot) in self.paths[..self.path_end].iter_mut().enumerate() {
            if let Some(path) = slot
                && self.path_congestion[i].is_none()
            {
                path.set_congestion(algorithm);
            }
        }
    }

    /// Gives path `id` a congestion controller of its own (`None`: the session's again), now if
    /// it has joined, else when it does, and at each later join under that id. The switch
    /// continues from the old controller's window as [`Session::set_congestion`]'s does; nothing
    /// changes when the path already runs it. A client calls it with its link's choice before
    /// the path joins and on a reload ([`Session::announce_path_congestion`] tells the server);
    /// a server takes the client's PATH_CONGESTION so.
    pub fn set_path_congestion(
        &mut self,
        id: PathId,
        algorithm: Option<congestion::CongestionAlgorithm>,
    ) {
        let Some(own) = self.path_congestion.get_mut(id.index()) else {
            return;
        };
        *own = algorithm;
        let algorithm = algorithm.unwrap_or(self.config.congestion.algorithm);
        if let Some(path) = self.paths[id.index()].as_mut()
            && path.cc.algorithm() != algorithm
        {
            path.set_congestion(algorithm);
        }
    }

    /// Path `id`'s own congestion controller, if it has one ([`Session::set_path_congestion`]).
    pub fn path_congestion(&self, id: PathId) -> Option<congestion::CongestionAlgorithm> {
        self.path_congestion.get(id.index()).copied().flatten()
    }

    /// Whether the peer knows OPEN's redundant mark (the client learns it in each path's JOIN
    /// exchange): this end's OPENs of flows it sends redundantly carry the mark only then.
    pub fn set_peer_knows_redundant_flows(&mut self, yes: bool) {
        self.peer_knows_redundant_flows = yes;
    }

    /// Whether the server knows PATH_CONGESTION (the client learns it in each path's JOIN
    /// exchange); [`Session::announce_path_congestion`] sends it only then.
    pub fn set_peer_knows_path_congestion(&mut self, yes: bool) {
        self.peer_knows_path_congestion = yes;
    }

    /// Tells the server the controller this client chose for path `id`'s link (its own, or
    /// `None`: the server's), so that what the server sends on the path runs it too
    /// (PATH_CONGESTION): call it after the path joined (each join) when the link chose one,
    /// and when a reload changed the choice. Only a client whose server knows the frame sends
    /// it; other calls do nothing.
    pub fn announce_path_congestion(&mut self, id: PathId) {
        if self.role == Role::Client && self.peer_knows_path_congestion && id.index() < MAX_PATHS {
            self.push_control(Control::PathCongestion(id));
        }
    }

    /// Whether the server knows PATH_RATE_CAP (the client learns it in each path's JOIN
    /// exchange); [`Session::announce_path_rate_cap`] sends it only then.
    pub fn set_peer_knows_path_rate_cap(&mut self, yes: bool) {
        self.peer_knows_path_rate_cap = yes;
    }

    /// Sets the cap (bytes per second; `None`: none) a client asks the server to keep to on
    /// path `id`, for its link's `rate_cap_down_mbps`; [`Session::announce_path_rate_cap`]
    /// tells the server. On a server: what the client asked (PATH_RATE_CAP).
    pub fn set_path_rate_cap_down(&mut self, id: PathId, rate: Option<u64>) {
        if let Some(own) = self.path_rate_cap_down.get_mut(id.index()) {
            *own = rate.filter(|&r| r > 0);
        }
    }

    /// Path `id`'s cap on what the server sends on it ([`Session::set_path_rate_cap_down`]).
    pub fn path_rate_cap_down(&self, id: PathId) -> Option<u64> {
        self.path_rate_cap_down.get(id.index()).copied().flatten()
    }

    /// Tells the server the cap this client's link on path `id` takes (PATH_RATE_CAP; none
    /// lifts it): call it after the path joined (each join) and when a reload changed it. Only
    /// a client whose server knows the frame sends it; other calls do nothing.
    pub fn announce_path_rate_cap(&mut self, id: PathId) {
        if self.role == Role::Client && self.peer_knows_path_rate_cap && id.index() < MAX_PATHS {
            self.push_control(Control::PathRateCap(id));
        }
    }

    /// The congestion control algorithm the session's paths run.
    pub fn congestion(&self) -> congestion::CongestionAlgorithm {
        self.config.congestion.algorithm
    }

    /// Changes a path's rate cap (bytes per second; `None` lifts it), from the next packet on.
    /// Local: the peer paces what it sends by its own settings. A zero cap is refused, as at
    /// [`Session::add_path`].
    pub fn set_path_rate_cap(
        &mut self,
        id: PathId,
        rate_cap: Option<u64>,
    ) -> Result<(), PathError> {
        let path = self.path_mut(id)?;
        PathConfig {
            rate_cap,
            ..path.config
        }
        .validate()
        .map_err(|source| PathError::Config { path: id, source })?;
        path.set_rate_cap(rate_cap);
        Ok(())
    }

    /// Changes the largest datagram payload `id` carries, effective for the next packet built
    /// on it: the driver calls it when the path's transport reports a new limit (quinn's
    /// `Connection::max_datagram_size` after path MTU discovery or black-hole detection). The
    /// packetiser, the pacer's burst, the rate cap's burst and the congestion controller's
    /// datagram-counted values follow it.
    ///
    /// Shrinking loses nothing: stream bytes are retransmitted by byte range, so data first
    /// sent in larger packets (in flight, or lost and waiting) is re-framed into packets of the
    /// new size; a packet the transport refuses as too large (built before the call) is simply
    /// lost and repaired the same way. A queued datagram (unreliable) that no longer fits the
    /// path the scheduler picks goes on the largest usable path it fits, and is dropped when it
    /// fits no live path. Below [`config::MIN_DATAGRAM_SIZE`] is an error.
    pub fn set_max_datagram_size(&mut self, id: PathId, size: u16) -> Result<(), PathError> {
        let path = self.path_mut(id)?;
        PathConfig {
            max_datagram_size: size,
            ..path.config
        }
        .validate()
        .map_err(|source| PathError::Config { path: id, source })?;
        path.set_max_datagram_size(size);
        Ok(())
    }

    /// Gives path `id` a round-trip time its transport measured before the path joined (the
    /// driver passes the QUIC handshake's, quinn's `Connection::rtt`), taken as the path's
    /// first RTT sample if it has none of its own yet; returns whether it was taken. Without
    /// it a joining path reports `initial_rtt` (100 ms) until its first packet is
    /// acknowledged: the scheduler would send the first packets of a session, or of a path
    /// that comes back, on a slow path it takes for a fast one, and the path's probe timeout
    /// would fire early on a path slower than that. A zero `rtt` is ignored.
    pub fn seed_path_rtt(&mut self, id: PathId, rtt: Duration) -> Result<bool, PathError> {
        let path = self.path_mut(id)?;
        Ok(path.seed_rtt(rtt))
    }

    /// The joined paths' current views and counters.
    pub fn path_status(&mut self, now: Timestamp) -> impl Iterator<Item = PathStatus> + '_ {
        let mut wake = None;
        self.paths.iter_mut().flatten().map(move |p| PathStatus {
            view: p.view(now, &mut wake),
            stats: p.stats,
            reordering: p.reordering(),
        })
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Datagrams given to [`Session::send_datagram`] and dropped instead of sent since the
    /// session started: longer than `max_datagram_payload`, the send queue full, their deadline
    /// passed, the scheduler's choice, or longer than every live path takes.
    pub fn datagrams_dropped(&self) -> u64 {
        self.datagrams_dropped
    }

    /// Whether the peer reassembles datagrams cut into DATAGRAM_FRAGMENT frames (`docs/protocol.md`):
    /// the daemon learns it in each path's JOIN exchange. From then on, a datagram that fits no
    /// live path whole when it comes to be sent is cut into at most
    /// [`frame::MAX_FRAGMENTS`] pieces that fit the smallest live path, instead of being
    /// dropped. Off by default: a peer that does not know the frame rejects the packets carrying
    /// it. Fragments are always accepted.
    pub fn set_peer_reassembles(&mut self, yes: bool) {
        self.peer_reassembles = yes;
    }

    /// Datagrams cut into fragments for sending since the session started.
    pub fn datagrams_split(&self) -> u64 {
        self.datagrams_split
    }

    /// Datagrams received as fragments and put back together since the session started.
    pub fn datagrams_reassembled(&self) -> u64 {
        self.datagrams_reassembled
    }

    /// Packets received and refused whole (not acknowledged, so that the peer sends their
    /// frames again) because a flow would have held too many separate pieces of its bytes, or
    /// the record of the peer's flows too many gaps (see `Session::handle_datagram`).
    pub fn packets_refused(&self) -> u64 {
        self.packets_refused
    }

    /// Bytes and records held now.
    pub fn memory_usage(&self) -> MemoryUsage {
        let mut usage = MemoryUsage {
            flows: self.flows.len(),
            datagrams_queued: self.datagrams.queued(),
            ..MemoryUsage::default()
        };
        for flow in self.flows.values() {
            usage.redundant_flows += usize::from(flow.redundant);
            let (allocated, send, recv, datagrams) = flow.memory();
            usage.allocated += allocated + std::mem::size_of::<Flow>() as u64;
            usage.send_buffered += send;
            usage.receive_buffered += recv;
            usage.datagrams_queued += datagrams;
        }
        usage.allocated += self
            .early
            .iter()
            .map(|e| e.data.capacity() as u64)
            .sum::<u64>()
            + (self.early.capacity() * std::mem::size_of::<EarlyDatagram>()) as u64
            + self.peer_flows_seen.capacity_bytes() as u64;
        usage.allocated += self.datagrams.allocated()
            + ((self.send_queue.capacity() + self.retransmit_queue.capacity())
                * std::mem::size_of::<FlowId>()
                + self.controls.capacity() * std::mem::size_of::<Control>()
                + self.events.capacity() * std::mem::size_of::<Event>()
                + (self.scratch_acked.capacity() + self.scratch_lost.capacity())
                    * std::mem::size_of::<SentPacket>()) as u64;
        for p in self.paths.iter().flatten() {
            usage.allocated += p.allocated();
        }
        debug_assert_eq!(
            usage.redundant_flows, self.redundant_flows,
            "the count kept"
        );
        usage
    }

    /// Closes the session: CLOSE goes out on every live path, then the session is closed.
    pub fn close(&mut self, code: u64, now: Timestamp) {
        if self.state != SessionState::Open {
            return;
        }
        let mut pending = 0u32;
        for p in self.paths.iter().flatten() {
            pending |= 1 << p.id.0;
        }
        self.state = SessionState::Closing { code, pending };
        if pending == 0 {
            self.finish_close(code, false);
        }
        let _ = now;
    }

    /// The peer's session is over, as its path's connection closing said (its CLOSE may have
    /// been lost): this one closes too, as on a CLOSE with code 0.
    pub fn peer_closed(&mut self) {
        self.finish_close(0, true);
    }

    fn finish_close(&mut self, code: u64, by_peer: bool) {
        if self.state == SessionState::Closed {
            return;
        }
        self.state = SessionState::Closed;
        self.events.push_back(Event::Closed { code, by_peer });
    }

    /// When [`Session::handle_timeout`] should next be called.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        if self.state == SessionState::Closed {
            return None;
        }
        let mut t: Option<Timestamp> = None;
        let mut take = |x: Timestamp| t = Some(t.map_or(x, |y: Timestamp| y.min(x)));
        let heartbeat = self.heartbeats();
        for p in self.paths[..self.path_end].iter().flatten() {
            if let Some(x) = p.next_timeout(&self.config, heartbeat(p.state)) {
                take(x);
            }
        }
        if let Some(since) = self.all_failed_since {
            take(since + self.config.idle_timeout);
        }
        if let Some(w) = self.pacing_wakeup
            && self.has_backlog()
        {
            take(w);
        }
        if let Some(w) = self.copy_wakeup {
            take(w);
        }
        t
    }

    /// Runs every timer that expired by `now`.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        if self.state == SessionState::Closed {
            return;
        }
        self.clock = self.clock.max(now);
        if self.pacing_wakeup.is_some_and(|w| w <= now) {
            self.pacing_wakeup = None;
        }
        if self.copy_wakeup.is_some_and(|w| w <= now) {
            self.copy_wakeup = None;
        }
        let mut lost = std::mem::take(&mut self.scratch_lost);
        // The ACK table is empty between ACK frames: it holds the probe-timeout reinjections.
        let mut reinject = std::mem::take(&mut self.scratch_acked);
        let heartbeat = self.heartbeats();
        for i in 0..self.path_end {
            let Some(path) = self.paths[i].as_mut() else {
                continue;
            };
            let failed = path.on_timeout(
                now,
                &self.config,
                heartbeat(path.state),
                &mut lost,
                &mut reinject,
            );
            let id = path.id;
            if failed {
                self.scheduler.on_path_state(id, PathState::Failed, now);
                self.events.push_back(Event::PathFailed(id));
            }
            self.on_packets_lost(id, &mut lost, now);
            self.reinject(&mut reinject);
        }
        self.scratch_lost = lost;
        self.scratch_acked = reinject;
        self.note_path_liveness(now);
        if let Some(since) = self.all_failed_since
            && now - since >= self.config.idle_timeout
        {
            self.finish_close(error::IDLE_TIMEOUT_CODE, false);
        }
    }

    /// The idle paths' heartbeats now: slower once the session is quiet.
    fn heartbeat(&self) -> path::Heartbeat {
        path::Heartbeat::new(&self.config, self.busy_at)
    }

    /// The heartbeat of a path in a given state now: the backups' ([`Self::standby_heartbeat`])
    /// or the others' ([`Self::heartbeat`]).
    fn heartbeats(&self) -> impl Fn(PathState) -> path::Heartbeat + use<> {
        let (heartbeat, standby) = (self.heartbeat(), self.standby_heartbeat());
        move |state| {
            if state == PathState::Backup {
                standby
            } else {
                heartbeat
            }
        }
    }

    /// The heartbeats of the backup paths: as a quiet session's while a primary path is live
    /// (a standby link, often a metered LTE modem, is then checked once per
    /// `quiet_heartbeat_interval`, not every second while the primary carries the traffic),
    /// else as the others' (a primary that may be dark or is degraded: the backup may carry
    /// traffic any moment).
    fn standby_heartbeat(&self) -> path::Heartbeat {
        let primary_live = self.paths[..self.path_end]
            .iter()
            .flatten()
            .any(|p| p.is_live_primary(self.clock));
        let heartbeat = self.heartbeat();
        if primary_live {
            path::Heartbeat {
                quiet_from: Timestamp::ZERO,
                ..heartbeat
            }
        } else {
            heartbeat
        }
    }

    /// Whether the session is quiet (no application data for [`SessionConfig::quiet_after`])
    /// at `now`, its idle paths' heartbeats slowed down.
    pub fn is_quiet(&self, now: Timestamp) -> bool {
        now >= self.heartbeat().quiet_from
    }

    fn note_path_liveness(&mut self, now: Timestamp) {
        let any_live = self.paths.iter().flatten().any(|p| !p.is_failed());
        if any_live {
            self.all_failed_since = None;
        } else if self.all_failed_since.is_none() {
            self.all_failed_since = Some(now);
        }
    }

    fn has_backlog(&self) -> bool {
        self.unsent_bytes > 0
            || self.lost_bytes > 0
            || self.datagrams.queued() > 0
            || !self.controls.is_empty()
    }

    /// Path `id`, if joined.
    fn path_mut(&mut self, id: PathId) -> Result<&mut path::Path, PathError> {
        self.paths
            .get_mut(id.index())
            .and_then(Option::as_mut)
            .ok_or(PathError::UnknownPath(id))
    }

    /// The coupling of the path at `index` among the session's coupled paths (LIA, OLIA), to
    /// be handed to its controller before an ACK of it; `None` when that controller is not
    /// coupled (or the path is unknown).
    fn coupling_of(&self, index: usize) -> Option<congestion::Coupling> {
        let target = self.paths.get(index)?.as_ref()?;
        if !target.cc.algorithm().is_coupled() {
            return None;
        }
        let inputs = self.paths.iter().enumerate().filter_map(|(i, p)| {
            let input = p.as_ref()?.coupling_input()?;
            Some((i == index, input))
        });
        Some(congestion::Coupling::compute(inputs))
    }

    fn push_control(&mut self, c: Control) {
        if !self.controls.contains(&c) {
            self.controls.push_back(c);
        }
    }

    fn push_event(&mut self, e: Event) {
        if !self.events.contains(&e) {
            self.events.push_back(e);
        }
    }
}
