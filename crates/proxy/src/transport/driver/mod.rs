//! The session driver: one tokio task per session owns the sans-IO [`Session`] and runs the
//! call order of `session/mod.rs` against real connections. It `select!`s over datagrams from
//! every path connection (a reader task per connection), the session's timer, commands from the
//! flow tasks ([`super::flow`]) and a one-second tick for throughput figures; after each step it
//! drains `poll_event` (dispatching flow events) and `poll_transmit` into
//! `Connection::send_datagram`. Paths map 1:1 to quinn connections; a path whose connection
//! closes leaves the session, and a rejoin with the same path id takes its place.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use braid_sched_core::{AnyScheduler, FlowId, MAX_PATHS, PathId, Timestamp};

use bytes::{Buf as _, Bytes};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tracing::{debug, info, warn};

mod readers;
mod report;

use readers::{PathReader, poll_readers, read_next};

use super::arena::Arena;
use super::flow::{CHUNK, FlowHandle, FlowMsg, READ_CHUNKS_IN_FLIGHT, SessionHandle, WRITE_CREDIT};
use super::join::PeerKnows;
use super::quic::datagram_size;
use super::status::{SessionCounters, SessionStatus};
use crate::session::{
    Event, FlowError, FlowKind, PathConfig, Role, Session, SessionConfig, Target,
};

/// Bytes of the buffer outgoing packets are built in: one allocation per this many bytes of
/// packets instead of one allocation and one copy per packet (the buffer is freed when quinn
/// has sent the last packet in it).
const OUT_ARENA: usize = 256 * 1024;
/// Packets built with one clock reading in [`Driver::flush`].
const CLOCK_EVERY: u32 = 8;
/// Datagrams a datagram flow's reader may hold before reporting them consumed.
const DATAGRAMS_IN_FLIGHT: u32 = 256;
/// Reset code for peer-opened flows when this end accepts none.
pub const FLOW_NOT_ACCEPTED: u64 = 0x5301;

/// Requests from flow tasks and path tasks.
#[derive(Debug)]
pub(crate) enum Command {
    AttachPath {
        id: PathId,
        conn: quinn::Connection,
        config: PathConfig,
        name: String,
        /// What the JOIN exchange on this path said the peer knows.
        peer: PeerKnows,
        /// A client's link's own congestion controller (`None`: the session's); a server passes
        /// `None` and keeps what the client said by PATH_CONGESTION.
        congestion: Option<crate::session::congestion::CongestionAlgorithm>,
        /// A client's link's cap on what the server sends on it, bytes per second
        /// (`rate_cap_down_mbps`); a server passes `None` and keeps what the client said by
        /// PATH_RATE_CAP.
        rate_cap_down: Option<u64>,
        /// What else the server said it knows in the JOIN exchange (the answer's second byte;
        /// a server passes none).
        server_knows: super::join::ServerKnows,
    },
    /// The client's end of path `id` is gone (its interface went down, its address away): the
    /// path leaves the session and the peer is told (`Session::abandon_path`), when `conn`
    /// (its `stable_id`) is still the path's connection.
    AbandonPath {
        id: PathId,
        conn: usize,
    },
    /// The client's link on path `id` changed its tier, rate caps or congestion controller (a
    /// reload): the path takes them in place, when `conn` (its `stable_id`) is still the path's
    /// connection. A tier change reaches the peer as PATH_STATUS, a controller's as
    /// PATH_CONGESTION, the cap on what the server sends as PATH_RATE_CAP.
    UpdatePath {
        id: PathId,
        conn: usize,
        tier: crate::session::Tier,
        rate_cap: Option<u64>,
        rate_cap_down: Option<u64>,
        congestion: Option<crate::session::congestion::CongestionAlgorithm>,
    },
    Open {
        kind: FlowKind,
        target: Target,
        reply: oneshot::Sender<Result<FlowHandle, FlowError>>,
    },
    Write {
        flow: FlowId,
        data: Bytes,
    },
    Consumed {
        flow: FlowId,
    },
    Finish {
        flow: FlowId,
    },
    Reset {
        flow: FlowId,
        code: u64,
    },
    Datagram {
        flow: FlowId,
        data: Bytes,
    },
    Status {
        reply: oneshot::Sender<SessionStatus>,
    },
    /// Put this scheduler in place of the session's (a reload).
    Scheduler(AnyScheduler),
    /// Switch every path to another congestion controller (a reload; see
    /// [`crate::session::Session::set_congestion`]).
    Congestion(crate::session::congestion::CongestionAlgorithm),
    /// Other ports whose flows go redundantly, or another bound on their rate (a reload; see
    /// [`crate::session::Session::set_redundant`]).
    Redundant(crate::session::RedundantFlows),
    Close,
}

#[derive(Debug)]
pub(super) enum PathInput {
    Datagram(PathId, u64, Bytes),
    /// The path's connection ended; `true` when the peer closed it because its session is over
    /// ([`crate::transport::join::SESSION_CLOSED_CODE`]).
    Closed(PathId, u64, bool),
}

/// Called for every flow the peer opens (the server's egress).
pub type FlowAcceptor = Box<dyn FnMut(FlowHandle, FlowKind, Target) + Send>;

/// What a driver needs to start.
pub struct DriverSetup {
    /// Client or server.
    pub role: Role,
    /// Session limits.
    pub config: SessionConfig,
    /// This end's scheduler.
    pub scheduler: AnyScheduler,
    /// The session id, hex (for logs and status).
    pub label: String,
    /// The user.
    pub user: String,
    /// Peer-opened flows go here; `None` refuses them.
    pub acceptor: Option<FlowAcceptor>,
    /// Called with the session's last counters when it ends (the server's per-user totals).
    pub on_end: Option<SessionEnd>,
}

/// Called with a session's last counters when it ends.
pub type SessionEnd = Box<dyn FnOnce(&SessionCounters) + Send>;

impl std::fmt::Debug for DriverSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriverSetup")
            .field("role", &self.role)
            .field("label", &self.label)
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
struct LivePath {
    conn: quinn::Connection,
    generation: u64,
    /// The `max_datagram_size` the session has for this path (followed from the connection).
    max_datagram_size: u16,
    name: String,
    recv_bytes: u64,
    last_sent: u64,
    last_recv: u64,
    send_mbps: f64,
    recv_mbps: f64,
}

#[derive(Debug)]
struct FlowEntry {
    kind: FlowKind,
    to_app: mpsc::UnboundedSender<FlowMsg>,
    in_app: u32,
    pending: VecDeque<Bytes>,
    credit: Arc<Semaphore>,
    finish_pending: bool,
    done_reading: bool,
    /// The code this side reset the flow with, if it did.
    reset_here: Option<u64>,
}

struct Driver {
    session: Session,
    epoch: Instant,
    label: String,
    user: String,
    paths: [Option<LivePath>; MAX_PATHS],
    generation: u64,
    flows: HashMap<FlowId, FlowEntry>,
    commands_tx: mpsc::Sender<Command>,
    readers: Vec<PathReader>,
    acceptor: Option<FlowAcceptor>,
    buf: Vec<u8>,
    /// Outgoing packets are built in place here and handed to quinn as views of it.
    out: Arena<3>,
    /// Received stream bytes are copied into chunks split off these for the relays.
    chunks: Arena<3>,
    counters: SessionCounters,
    closed: bool,
    /// How many paths the session has, for the handles ([`SessionHandle::wait_for_path`]).
    path_count: tokio::sync::watch::Sender<usize>,
    on_end: Option<SessionEnd>,
}

/// Starts a driver task; returns its handle and the task.
pub fn spawn(setup: DriverSetup) -> (SessionHandle, tokio::task::JoinHandle<()>) {
    let (commands_tx, commands_rx) = mpsc::channel(1024);
    let (path_count, paths) = tokio::sync::watch::channel(0);
    let epoch = Instant::now();
    let session = Session::new(setup.config, setup.role, setup.scheduler, Timestamp::ZERO);
    let driver = Driver {
        session,
        epoch,
        label: setup.label,
        user: setup.user,
        paths: std::array::from_fn(|_| None),
        generation: 0,
        flows: HashMap::new(),
        commands_tx: commands_tx.clone(),
        readers: Vec::with_capacity(MAX_PATHS),
        acceptor: setup.acceptor,
        buf: vec![0; 65_536],
        out: Arena::new(OUT_ARENA),
        chunks: Arena::new(CHUNK),
        counters: SessionCounters::default(),
        closed: false,
        path_count,
        on_end: setup.on_end,
    };
    let task = tokio::spawn(driver.run(commands_rx));
    (
        SessionHandle {
            commands: commands_tx,
            started: tokio::time::Instant::now(),
            paths,
        },
        task,
    )
}

impl Driver {
    fn now(&self) -> Timestamp {
        since(self.epoch)
    }

    fn instant(&self, t: Timestamp) -> Instant {
        self.epoch
            .checked_add(Duration::from_micros(t.as_micros()))
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400))
    }

    async fn run(mut self, mut commands: mpsc::Receiver<Command>) {
        let mut batch = Vec::with_capacity(256);
        // The paths' rates for `braid status`, each second while the session is busy: a quiet
        // one (`Session::is_quiet`) sleeps until its next heartbeat or datagram, so that an idle
        // daemon wakes its CPU as seldom as its links' radios.
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let timer = tokio::time::sleep(Duration::from_secs(86_400));
        tokio::pin!(timer);
        let mut armed: Option<Instant> = None;
        info!(session = %self.label, user = %self.user, "session started");
        while !self.closed {
            self.process_events();
            self.follow_datagram_sizes();
            self.flush();
            if self.closed {
                break;
            }
            // One timer for the driver's life, moved only when the session's deadline changes
            // (a new timer per wake-up cost a registration and a removal in the runtime's timer
            // wheel each time).
            let deadline = self.session.poll_timeout().map(|t| self.instant(t));
            if deadline != armed {
                if let Some(d) = deadline {
                    timer.as_mut().reset(d.into());
                }
                armed = deadline;
            }
            tokio::select! {
                () = std::future::poll_fn(|cx| poll_readers(&mut self.readers, cx, &mut batch)) => {
                    // One clock read for the burst: quinn had these datagrams queued already,
                    // they arrived together as far as the session can tell.
                    let now = self.now();
                    for input in batch.drain(..) {
                        self.on_path_input(input, now);
                    }
                }
                cmd = commands.recv() => {
                    let Some(cmd) = cmd else { break };
                    self.on_command(cmd);
                    for _ in 0..256 {
                        match commands.try_recv() {
                            Ok(cmd) => self.on_command(cmd),
                            Err(_) => break,
                        }
                    }
                }
                () = timer.as_mut(), if armed.is_some() => {
                    armed = None;
                    let now = self.now();
                    self.session.handle_timeout(now);
                }
                _ = tick.tick(), if !self.session.is_quiet(self.now()) => self.update_rates(),
            }
        }
        for p in self.paths.iter().flatten() {
            p.conn.close(
                quinn::VarInt::from_u32(crate::transport::join::SESSION_CLOSED_CODE),
                b"session closed",
            );
        }
        for (_, entry) in self.flows.drain() {
            entry.credit.close();
        }
        if let Some(on_end) = self.on_end.take() {
            on_end(&self.counters);
        }
        info!(session = %self.label, "session ended");
    }

    fn on_path_input(&mut self, input: PathInput, now: Timestamp) {
        match input {
            PathInput::Datagram(id, generation, data) => {
                let Some(p) = self.paths[id.index()].as_mut() else {
                    return;
                };
                if p.generation != generation {
                    return;
                }
                p.recv_bytes += data.len() as u64;
                if let Err(e) = self.session.handle_datagram(id, &data, now) {
                    self.counters.bad_packets += 1;
                    debug!(session = %self.label, path = id.0, error = %e, "packet rejected");
                }
            }
            PathInput::Closed(id, generation, session_over) => {
                self.readers
                    .retain(|r| r.id != id || r.generation != generation);
                let current = self.paths[id.index()]
                    .as_ref()
                    .is_some_and(|p| p.generation == generation);
                if current {
                    let name = self.paths[id.index()]
                        .take()
                        .map(|p| p.name)
                        .unwrap_or_default();
                    let _ = self.session.remove_path(id, now);
                    self.note_path_count();
                    info!(session = %self.label, path = id.0, link = %name, "path left");
                }
                if session_over {
                    // As if its CLOSE had come (it may have been lost with the connection).
                    self.session.peer_closed();
                }
            }
        }
    }

    fn attach_path(
        &mut self,
        id: PathId,
        conn: quinn::Connection,
        config: PathConfig,
        name: String,
    ) {
        let now = self.now();
        if id.index() >= MAX_PATHS {
            conn.close(quinn::VarInt::from_u32(0), b"");
            return;
        }
        if let Some(old) = self.paths[id.index()].take() {
            old.conn.close(quinn::VarInt::from_u32(0), b"replaced");
            let _ = self.session.remove_path(id, now);
        }
        if let Err(e) = self.session.add_path(id, config, now) {
            warn!(session = %self.label, path = id.0, error = %e, "path refused");
            conn.close(quinn::VarInt::from_u32(0), b"");
            return;
        }
        // The connection's handshake (and the JOIN exchange) measured the link's round trip:
        // the path starts from it instead of the session's 100 ms guess.
        let _ = self.session.seed_path_rtt(id, conn.rtt());
        self.generation += 1;
        let generation = self.generation;
        self.readers.retain(|r| r.id != id);
        self.readers.push(PathReader {
            id,
            generation,
            next: read_next(&conn),
            conn: conn.clone(),
        });
        info!(session = %self.label, path = id.0, link = %name, remote = %crate::transport::canonical(conn.remote_address()), "path joined");
        self.counters.path_joins += 1;
        self.paths[id.index()] = Some(LivePath {
            conn,
            generation,
            max_datagram_size: config.max_datagram_size,
            name,
            recv_bytes: 0,
            last_sent: 0,
            last_recv: 0,
            send_mbps: 0.0,
            recv_mbps: 0.0,
        });
        self.note_path_count();
    }

    /// Tells the handles how many paths the session has now.
    fn note_path_count(&self) {
        let count = self.paths.iter().flatten().count();
        self.path_count
            .send_if_modified(|n| std::mem::replace(n, count) != count);
    }

    fn new_flow(&mut self, id: FlowId, kind: FlowKind) -> FlowHandle {
        let (to_app, incoming) = mpsc::unbounded_channel();
        let credit = Arc::new(Semaphore::new(WRITE_CREDIT));
        self.counters.flows_total += 1;
        self.flows.insert(
            id,
            FlowEntry {
                kind,
                to_app,
                in_app: 0,
                pending: VecDeque::new(),
                credit: credit.clone(),
                finish_pending: false,
                done_reading: false,
                reset_here: None,
            },
        );
        FlowHandle {
            id,
            commands: self.commands_tx.clone(),
            incoming,
            credit,
        }
    }

    fn on_command(&mut self, cmd: Command) {
        match cmd {
            Command::AttachPath {
                id,
                conn,
                config,
                name,
                peer,
                congestion,
                rate_cap_down,
                server_knows,
            } => {
                if self.session.role() == Role::Client {
                    self.session.set_path_congestion(id, congestion);
                    self.session.set_path_rate_cap_down(id, rate_cap_down);
                }
                if server_knows.path_congestion {
                    self.session.set_peer_knows_path_congestion(true);
                }
                if server_knows.path_rate_cap {
                    self.session.set_peer_knows_path_rate_cap(true);
                }
                if server_knows.redundant_flows {
                    self.session.set_peer_knows_redundant_flows(true);
                }
                if peer.fragments {
                    self.session.set_peer_reassembles(true);
                }
                if peer.abandon {
                    self.session.set_peer_knows_abandon(true);
                }
                if peer.ping {
                    self.session.set_peer_relays_ping(true);
                }
                self.attach_path(id, conn, config, name);
                if peer.datagram_limit {
                    self.session.announce_datagram_limit();
                }
                if peer.backup_floor {
                    self.session.announce_backup_floor();
                }
                // Say the link's controller at each join, its own or none: the server keeps what
                // it was told by path id, and this join may follow a reload that changed it.
                self.session.announce_path_congestion(id);
                // And its cap on what the server sends, for the same reasons.
                self.session.announce_path_rate_cap(id);
            }
            Command::AbandonPath { id, conn } => {
                // Its connection may have ended first (the path is gone here already); a
                // connection that joined since under the same id is another path.
                let Some(slot) = self.paths.get_mut(id.index()) else {
                    return;
                };
                if slot.as_ref().is_none_or(|p| p.conn.stable_id() == conn) {
                    if let Some(path) = slot.take() {
                        path.conn
                            .close(quinn::VarInt::from_u32(0), b"path abandoned");
                    }
                    let now = self.now();
                    let _ = self.session.abandon_path(id, now);
                    info!(session = %self.label, path = id.0, "path abandoned");
                }
            }
            Command::UpdatePath {
                id,
                conn,
                tier,
                rate_cap,
                rate_cap_down,
                congestion,
            } => {
                let current = self.paths.get(id.index()).and_then(Option::as_ref);
                if current.is_some_and(|p| p.conn.stable_id() == conn) {
                    let now = self.now();
                    let _ = self.session.set_path_tier(id, tier, now);
                    if let Err(e) = self.session.set_path_rate_cap(id, rate_cap) {
                        warn!(session = %self.label, path = id.0, error = %e, "rate cap not changed");
                    }
                    if self.session.path_congestion(id) != congestion {
                        self.session.set_path_congestion(id, congestion);
                        self.session.announce_path_congestion(id);
                    }
                    if self.session.path_rate_cap_down(id) != rate_cap_down {
                        self.session.set_path_rate_cap_down(id, rate_cap_down);
                        self.session.announce_path_rate_cap(id);
                    }
                    let congestion = congestion.map(|c| c.name());
                    info!(session = %self.label, path = id.0, ?tier, ?rate_cap, ?rate_cap_down, ?congestion, "path updated");
                }
            }
            Command::Open {
                kind,
                target,
                reply,
            } => self.open(kind, target, reply),
            Command::Write { flow, data } => {
                if let Some(entry) = self.flows.get_mut(&flow) {
                    entry.pending.push_back(data);
                    self.push_pending(flow);
                }
            }
            Command::Consumed { flow } => {
                if let Some(entry) = self.flows.get_mut(&flow) {
                    entry.in_app = entry.in_app.saturating_sub(1);
                    self.deliver(flow);
                }
            }
            Command::Finish { flow } => {
                if let Some(entry) = self.flows.get_mut(&flow) {
                    entry.finish_pending = true;
                    self.push_pending(flow);
                }
            }
            Command::Reset { flow, code } => {
                let _ = self.session.reset(flow, code);
                if let Some(entry) = self.flows.get_mut(&flow) {
                    entry.pending.clear();
                    entry.credit.close();
                    entry.reset_here = Some(code);
                }
            }
            Command::Datagram { flow, data } => {
                mark_if_redundant(&mut self.session, flow, &data);
                let now = self.now();
                if self.session.send_datagram(flow, &data, None, now).is_ok() {
                    self.counters.bytes_written += data.len() as u64;
                }
            }
            Command::Status { reply } => {
                let _ = reply.send(self.status());
            }
            Command::Scheduler(scheduler) => {
                info!(session = %self.label, scheduler = scheduler.kind().name(), "scheduler replaced");
                let now = self.now();
                self.session.replace_scheduler(scheduler, now);
            }
            Command::Congestion(algorithm) => {
                if self.session.congestion() != algorithm {
                    info!(session = %self.label, congestion = algorithm.name(), "congestion controller replaced");
                    self.session.set_congestion(algorithm);
                }
            }
            Command::Redundant(redundant) => {
                if self.session.config().redundant != redundant {
                    let max_mbps = redundant.max_rate.map(|r| r as f64 * 8.0 / 1e6);
                    info!(session = %self.label, ports = ?redundant.ports.ranges(), ?max_mbps, "redundant flows replaced");
                    self.session.set_redundant(redundant);
                }
            }
            Command::Close => {
                let now = self.now();
                self.session.close(0, now);
            }
        }
    }

    fn open(
        &mut self,
        kind: FlowKind,
        target: Target,
        reply: oneshot::Sender<Result<FlowHandle, FlowError>>,
    ) {
        // Without any path the flow could only wait; the application gets a quick failure.
        if self.paths.iter().all(Option::is_none) {
            let _ = reply.send(Err(FlowError::NoPath));
            return;
        }
        match self.session.open_flow(kind, target) {
            Ok(id) => {
                let handle = self.new_flow(id, kind);
                if reply.send(Ok(handle)).is_err() {
                    let _ = self.session.reset(id, 0);
                }
            }
            Err(e) => {
                let _ = reply.send(Err(e));
            }
        }
    }

    /// Moves a flow's pending writes into the session as far as its send buffer allows, giving
    /// the writer its credit back for what was accepted.
    fn push_pending(&mut self, flow: FlowId) {
        let Some(entry) = self.flows.get_mut(&flow) else {
            return;
        };
        while let Some(front) = entry.pending.front_mut() {
            match self.session.write(flow, front) {
                Ok(n) => {
                    entry.credit.add_permits(n);
                    self.counters.bytes_written += n as u64;
                    if n < front.len() {
                        front.advance(n);
                        return;
                    }
                    entry.pending.pop_front();
                }
                Err(_) => {
                    entry.pending.clear();
                    entry.credit.close();
                    return;
                }
            }
        }
        if entry.finish_pending {
            entry.finish_pending = false;
            let _ = self.session.finish(flow);
        }
    }

    /// Hands a flow's readable bytes (or datagrams) to its reader, within the chunk budget.
    fn deliver(&mut self, flow: FlowId) {
        let Some(entry) = self.flows.get_mut(&flow) else {
            return;
        };
        if entry.kind.is_datagram() {
            while entry.in_app < DATAGRAMS_IN_FLIGHT {
                match self.session.recv_datagram(flow, &mut self.buf) {
                    Ok(Some(n)) => {
                        entry.in_app += 1;
                        self.counters.bytes_read += n as u64;
                        // A server's `redundant_ports` cover the datagrams' destinations.
                        mark_if_redundant(&mut self.session, flow, &self.buf[..n]);
                        let _ = entry
                            .to_app
                            .send(FlowMsg::Datagram(Bytes::copy_from_slice(&self.buf[..n])));
                    }
                    _ => return,
                }
            }
            return;
        }
        while entry.in_app < READ_CHUNKS_IN_FLIGHT && !entry.done_reading {
            // Straight from the session's receive ring into the chunk handed to the socket
            // writer: one copy (a bounce through a scratch buffer cost a second).
            // (Both parts when the read wraps around the ring.)
            let chunk = self.chunks.room(CHUNK);
            let read = self
                .session
                .read_with(flow, CHUNK, |part| chunk.extend_from_slice(part));
            let data = chunk.split().freeze();
            match read {
                Ok(Some(0)) => return,
                Ok(Some(n)) => {
                    entry.in_app += 1;
                    self.counters.bytes_read += n as u64;
                    let _ = entry.to_app.send(FlowMsg::Data(data));
                }
                Ok(None) => {
                    entry.done_reading = true;
                    let _ = entry.to_app.send(FlowMsg::Finished);
                }
                Err(FlowError::Reset { code, .. }) => {
                    entry.done_reading = true;
                    let _ = entry.to_app.send(FlowMsg::Reset(code));
                }
                Err(_) => return,
            }
        }
    }

    fn process_events(&mut self) {
        while let Some(event) = self.session.poll_event() {
            match event {
                Event::FlowOpened { flow, kind, target } => {
                    if self.acceptor.is_some() {
                        let handle = self.new_flow(flow, kind);
                        if let Some(accept) = self.acceptor.as_mut() {
                            accept(handle, kind, target);
                        }
                    } else {
                        let _ = self.session.reset(flow, FLOW_NOT_ACCEPTED);
                    }
                }
                Event::FlowReadable(flow)
                | Event::FlowFinished(flow)
                | Event::DatagramReceived(flow) => {
                    self.deliver(flow);
                }
                Event::FlowWritable(flow) => self.push_pending(flow),
                Event::FlowReset { flow, code } => {
                    if let Some(entry) = self.flows.get_mut(&flow) {
                        entry.pending.clear();
                        entry.credit.close();
                        if !entry.done_reading {
                            entry.done_reading = true;
                            let _ = entry.to_app.send(FlowMsg::Reset(code));
                        }
                    }
                }
                Event::FlowClosed(flow) => {
                    if let Some(entry) = self.flows.remove(&flow) {
                        entry.credit.close();
                        // The session forgets a stream once both directions are over, which
                        // can come before its reader was handed the end: the peer's FIN came
                        // alone after the last bytes were read, or this side's FIN was
                        // acknowledged after they were. Every byte was handed over (the
                        // direction is over only once all were read), so the end is clean,
                        // unless this side reset the flow. A peer's reset was handed over
                        // at its `FlowReset`.
                        if entry.kind == FlowKind::Stream && !entry.done_reading {
                            let end = entry.reset_here.map_or(FlowMsg::Finished, FlowMsg::Reset);
                            let _ = entry.to_app.send(end);
                        }
                    }
                }
                Event::PathFailed(id) => {
                    info!(session = %self.label, path = id.0, "path failed; its packets were reinjected");
                }
                Event::PathRecovered(id) => {
                    info!(session = %self.label, path = id.0, "path recovered")
                }
                Event::PeerDatagramLimit(peer) => {
                    let own = self.session.config().max_datagram_payload;
                    if peer < own {
                        // In the files' terms: the UDP payload, less the SOCKS5 header room.
                        let header = crate::inbound::socks5::MAX_REPLY;
                        warn!(
                            session = %self.label,
                            peer_max_udp_payload = peer.saturating_sub(header),
                            max_udp_payload = own.saturating_sub(header),
                            "the peer takes shorter UDP datagrams than this end: longer ones are dropped here and counted (set [session] max_udp_payload alike on both daemons)"
                        );
                    }
                }
                Event::PeerPathCongestion(path, algorithm) => {
                    let own = self.session.congestion().name();
                    info!(
                        session = %self.label,
                        path = path.0,
                        congestion = algorithm.map_or(own, |a| a.name()),
                        "the client's link chose the congestion controller of what this end sends on the path"
                    );
                }
                Event::PeerPathRateCap(path, rate) => {
                    info!(
                        session = %self.label,
                        path = path.0,
                        rate_cap_mbps = rate.map(|r| r as f64 * 8.0 / 1e6),
                        "the client's link set the cap on what this end sends on the path (none: no cap)"
                    );
                }
                Event::PeerBackupFloor(rate) => {
                    info!(
                        session = %self.label,
                        backup_below_mbps = rate as f64 * 8.0 / 1e6,
                        "the client's [session] backup_below_mbps governs what this end sends on the session"
                    );
                }
                Event::Closed { code, by_peer } => {
                    info!(session = %self.label, code, by_peer, "session closed");
                    self.closed = true;
                }
            }
        }
    }

    /// Feeds every path's current datagram size limit (quinn's path MTU discovery raises it,
    /// black-hole detection lowers it) to the session. One lock of each path's connection per
    /// wake-up.
    fn follow_datagram_sizes(&mut self) {
        for (index, slot) in self.paths.iter_mut().enumerate() {
            let Some(p) = slot.as_mut() else { continue };
            let size = datagram_size(&p.conn);
            if size == p.max_datagram_size {
                continue;
            }
            let id = PathId(index as u8);
            match self.session.set_max_datagram_size(id, size) {
                Ok(()) => {
                    debug!(session = %self.label, path = id.0, from = p.max_datagram_size, to = size, "datagram size changed");
                }
                Err(e) => {
                    warn!(session = %self.label, path = id.0, size, error = %e, "datagram size not taken");
                }
            }
            // Taken or not, not offered again until the connection reports another size.
            p.max_datagram_size = size;
        }
    }

    fn flush(&mut self) {
        // The clock is read again every `CLOCK_EVERY` packets and once more when the session has
        // nothing to send: building and handing over packets takes time, and the session's
        // pacer releases what that time earned within the same flush (a read per packet cost
        // about 1% of the CPU of a download; quinn itself takes one `now` per transmit burst).
        // Each packet is built straight into `out`, with room for the largest packet any path
        // takes, and split off it for quinn.
        let room = self
            .paths
            .iter()
            .flatten()
            .map(|p| usize::from(p.max_datagram_size))
            .max()
            .unwrap_or(1200);
        let mut now = self.now();
        let mut since_read = 0;
        loop {
            if since_read == CLOCK_EVERY {
                now = self.now();
                since_read = 0;
            }
            let out = self.out.room(room);
            out.resize(room, 0);
            let mut sent = self.session.poll_transmit(now, out);
            if sent.is_none() {
                // Nothing at `now`: ask again with what the flush's own time earned the pacer.
                let later = since(self.epoch);
                if later > now {
                    now = later;
                    since_read = 0;
                    sent = self.session.poll_transmit(now, out);
                }
            }
            let Some(t) = sent else {
                out.clear();
                return;
            };
            since_read += 1;
            out.truncate(t.len);
            let packet = out.split().freeze();
            let Some(p) = self.paths[t.path.index()].as_ref() else {
                continue;
            };
            match p.conn.send_datagram(packet) {
                Ok(()) => {}
                Err(quinn::SendDatagramError::TooLarge) => {
                    // The path's limit shrank (black-hole detection) since the last check: the
                    // packet is lost (the session repairs it) and the next ones are built smaller.
                    self.counters.datagrams_too_large += 1;
                    debug!(session = %self.label, path = t.path.0, len = t.len, "datagram too large");
                    self.follow_datagram_sizes();
                }
                Err(e) => {
                    self.counters.send_errors += 1;
                    debug!(session = %self.label, path = t.path.0, error = %e, "datagram not sent");
                }
            }
        }
    }
}

/// Microseconds since `epoch`, the session's clock.
fn since(epoch: Instant) -> Timestamp {
    Timestamp::from_micros(epoch.elapsed().as_micros() as u64)
}

/// Marks datagram flow `flow` redundant when `datagram` (a SOCKS5 UDP header and its payload,
/// as a client's inbounds send them) names a port of the session's
/// `redundant.ports`: the flow's target is the association's, not the destination's, so
/// [`Session::open_flow`] could not. Nothing is parsed once the flow is marked, or without ports.
fn mark_if_redundant(session: &mut Session, flow: FlowId, datagram: &[u8]) {
    let ports = &session.config().redundant.ports;
    if !ports.is_empty()
        && !session.is_redundant(flow)
        && crate::inbound::socks5::parse_udp_datagram(datagram)
            .is_ok_and(|(target, _)| ports.contains(target.port()))
    {
        session.mark_redundant(flow);
    }
}
