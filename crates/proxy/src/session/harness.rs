//! A deterministic in-memory harness: two [`Session`]s (client and server) joined by K simulated
//! paths, in virtual time, with a seeded RNG. Each path is a pair of links (one per direction)
//! with one-way delay, a rate (serialisation time plus a droptail queue), random loss,
//! reordering (extra delay for some packets), duplication and outage windows. Paths can share a
//! link (one queue: a common bottleneck, [`Harness::route`]), and other single-path session pairs
//! can compete for a link ([`Harness::add_competitor`]).
//!
//! IO-free and public so that the testbed simulator and the property tests build on it. The same
//! seed always gives the same run.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

use braid_sched_core::{FlowId, PathId, SchedulerConfig, SchedulerKind, Timestamp};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use super::{PathConfig, PathError, Role, Session, SessionConfig, SessionError};

/// An application that writes `len` bytes into a stream flow as fast as the session takes them,
/// `chunk` bytes a write, and finishes the flow once all are written.
#[derive(Debug)]
pub struct BulkWriter {
    flow: FlowId,
    len: u64,
    written: u64,
    finished: bool,
    data: Vec<u8>,
}

impl BulkWriter {
    /// A writer of `len` bytes (all `7`) into `flow`.
    pub fn new(flow: FlowId, len: u64, chunk: usize) -> Self {
        BulkWriter {
            flow,
            len,
            written: 0,
            finished: false,
            data: vec![7; chunk.max(1)],
        }
    }

    /// Writes what `session` takes now; finishes the flow once every byte is written.
    pub fn write(&mut self, session: &mut Session) {
        while self.written < self.len {
            let n = (self.len - self.written).min(self.data.len() as u64) as usize;
            match session.write(self.flow, &self.data[..n]) {
                Ok(0) | Err(_) => break,
                Ok(w) => self.written += w as u64,
            }
        }
        if self.written == self.len && !self.finished && session.finish(self.flow).is_ok() {
            self.finished = true;
        }
    }
}

/// One direction of a simulated path.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkConfig {
    /// One-way propagation delay.
    pub delay: Duration,
    /// Bytes per second; 0 means unlimited (no serialisation delay, no queue).
    pub rate_bytes_per_sec: u64,
    /// Packets the droptail queue holds.
    pub queue_packets: usize,
    /// Probability a packet is lost.
    pub loss: f64,
    /// Probability a packet is held back by `reorder_delay` (and so overtaken).
    pub reorder: f64,
    /// Extra delay of reordered packets.
    pub reorder_delay: Duration,
    /// Probability a packet is delivered twice.
    pub duplicate: f64,
    /// Windows `[start, end)` during which everything sent or arriving is lost.
    pub outages: Vec<(Timestamp, Timestamp)>,
}

impl LinkConfig {
    /// A lossless link of `rate_mbps` Mbit/s (0: unlimited) and `delay_ms` one-way delay with a
    /// queue of about twice the bandwidth-delay product (at least 64 packets).
    pub fn new(rate_mbps: f64, delay_ms: f64) -> Self {
        let rate = (rate_mbps * 1e6 / 8.0) as u64;
        let bdp_packets = (rate as f64 * 2.0 * delay_ms / 1e3 / 1200.0) as usize;
        LinkConfig {
            delay: Duration::from_secs_f64(delay_ms / 1e3),
            rate_bytes_per_sec: rate,
            queue_packets: (2 * bdp_packets).max(64),
            loss: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::from_millis(5),
            duplicate: 0.0,
            outages: Vec::new(),
        }
    }

    fn down_at(&self, t: Timestamp) -> bool {
        self.outages.iter().any(|&(s, e)| s <= t && t < e)
    }
}

/// What the links did, summed over all of them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Packets offered to a link.
    pub offered: u64,
    /// Packets delivered (duplicates included).
    pub delivered: u64,
    /// Lost to random loss.
    pub lost: u64,
    /// Dropped by a full queue.
    pub queue_drops: u64,
    /// Lost to an outage.
    pub outage_drops: u64,
    /// Extra copies delivered.
    pub duplicated: u64,
    /// Refused as larger than the path's datagram limit (see
    /// [`Harness::set_max_datagram_size`]).
    pub too_large: u64,
    /// Packets delayed for reordering.
    pub reordered: u64,
}

#[derive(Debug)]
struct Link {
    config: LinkConfig,
    busy_until: Timestamp,
    departures: VecDeque<Timestamp>,
    /// Largest packet the link takes (what the transport below a path would refuse).
    max_len: Option<usize>,
}

impl Link {
    /// Arrival times of the packet (and of its duplicate), or nothing when it is lost.
    fn offer(
        &mut self,
        now: Timestamp,
        len: usize,
        rng: &mut StdRng,
        stats: &mut LinkStats,
    ) -> [Option<Timestamp>; 2] {
        stats.offered += 1;
        if self.max_len.is_some_and(|max| len > max) {
            stats.too_large += 1;
            return [None, None];
        }
        let c = &self.config;
        if c.down_at(now) {
            stats.outage_drops += 1;
            return [None, None];
        }
        let mut depart = now;
        if c.rate_bytes_per_sec > 0 {
            while self.departures.front().is_some_and(|&d| d <= now) {
                self.departures.pop_front();
            }
            if self.departures.len() >= c.queue_packets {
                stats.queue_drops += 1;
                return [None, None];
            }
            let tx = Duration::from_secs_f64(len as f64 / c.rate_bytes_per_sec as f64);
            depart = self.busy_until.max(now) + tx;
            self.busy_until = depart;
            self.departures.push_back(depart);
        }
        if c.loss > 0.0 && rng.random_bool(c.loss.min(1.0)) {
            stats.lost += 1;
            return [None, None];
        }
        let mut arrive = depart + c.delay;
        if c.reorder > 0.0 && rng.random_bool(c.reorder.min(1.0)) {
            stats.reordered += 1;
            arrive += c.reorder_delay;
        }
        if c.down_at(arrive) {
            stats.outage_drops += 1;
            return [None, None];
        }
        let copy = (c.duplicate > 0.0 && rng.random_bool(c.duplicate.min(1.0))).then(|| {
            stats.duplicated += 1;
            arrive + Duration::from_micros(rng.random_range(0..2_000))
        });
        [Some(arrive), copy]
    }
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct InFlight {
    at: Timestamp,
    seq: u64,
    /// 0: the main pair; `1 + i`: competitor `i`.
    pair: usize,
    to: usize,
    path: u8,
    data: Vec<u8>,
}

/// Another client and server, joined by one path over a link of the harness, competing with
/// the main pair for it (cross traffic that runs a congestion controller of its own).
#[derive(Debug)]
pub struct Competitor {
    /// Its client (index [`CLIENT`]) and server (index [`SERVER`]).
    pub endpoints: [Session; 2],
    link: usize,
}

/// Index of the client in [`Harness::endpoints`].
pub const CLIENT: usize = 0;
/// Index of the server in [`Harness::endpoints`].
pub const SERVER: usize = 1;

/// Two sessions joined by simulated paths.
#[derive(Debug)]
pub struct Harness {
    now: Timestamp,
    /// The client (index [`CLIENT`]) and the server (index [`SERVER`]).
    pub endpoints: [Session; 2],
    /// Other session pairs sharing the links ([`Harness::add_competitor`]).
    pub competitors: Vec<Competitor>,
    links: Vec<[Link; 2]>,
    /// The link each path of the main pair runs over (its own unless [`Harness::route`]d).
    routes: Vec<usize>,
    rng: StdRng,
    in_flight: BinaryHeap<Reverse<InFlight>>,
    seq: u64,
    buf: Vec<u8>,
    stalls: u32,
    /// What the links did.
    pub stats: LinkStats,
    /// Protocol errors the sessions reported (a correct run has none).
    pub errors: Vec<SessionError>,
}

impl Harness {
    /// A client and a server with `links.len()` paths (the same link model both directions),
    /// each scheduling with `scheduler`.
    pub fn new(
        seed: u64,
        config: SessionConfig,
        scheduler: SchedulerKind,
        links: &[LinkConfig],
        path: PathConfig,
    ) -> Self {
        Harness::with_scheduler(seed, config, &SchedulerConfig::new(scheduler), links, path)
    }

    /// As [`Harness::new`], each side scheduling with a scheduler built from `scheduler` (e.g.
    /// with parameters set).
    pub fn with_scheduler(
        seed: u64,
        config: SessionConfig,
        scheduler: &SchedulerConfig,
        links: &[LinkConfig],
        path: PathConfig,
    ) -> Self {
        Harness::with_configs(seed, [config.clone(), config], scheduler, links, path)
    }

    /// As [`Harness::with_scheduler`], the client and the server each with its own session
    /// configuration (`configs[CLIENT]`, `configs[SERVER]`), as two daemons' files may differ.
    pub fn with_configs(
        seed: u64,
        configs: [SessionConfig; 2],
        scheduler: &SchedulerConfig,
        links: &[LinkConfig],
        path: PathConfig,
    ) -> Self {
        let now = Timestamp::ZERO;
        let [client_config, server_config] = configs;
        let mut client = Session::new(client_config, Role::Client, scheduler.build(), now);
        let mut server = Session::new(server_config, Role::Server, scheduler.build(), now);
        for i in 0..links.len() {
            let id = PathId(i as u8);
            // Paths beyond MAX_PATHS or with a bad config are left out; tests pass valid ones.
            let _ = client.add_path(id, path, now);
            let _ = server.add_path(id, path, now);
        }
        let link = |c: &LinkConfig| Link {
            config: c.clone(),
            busy_until: now,
            departures: VecDeque::new(),
            max_len: None,
        };
        Harness {
            now,
            endpoints: [client, server],
            competitors: Vec::new(),
            links: links.iter().map(|c| [link(c), link(c)]).collect(),
            routes: (0..links.len()).collect(),
            rng: StdRng::seed_from_u64(seed),
            in_flight: BinaryHeap::new(),
            seq: 0,
            buf: vec![0; 65_536],
            stalls: 0,
            stats: LinkStats::default(),
            errors: Vec::new(),
        }
    }

    /// The virtual time.
    pub fn now(&self) -> Timestamp {
        self.now
    }

    /// The client session.
    pub fn client(&mut self) -> &mut Session {
        &mut self.endpoints[CLIENT]
    }

    /// The server session.
    pub fn server(&mut self) -> &mut Session {
        &mut self.endpoints[SERVER]
    }

    /// Changes the link model of `path` (both directions) from now on.
    pub fn set_link(&mut self, path: usize, config: LinkConfig) {
        if let Some(pair) = self.links.get_mut(path) {
            pair[0].config = config.clone();
            pair[1].config = config;
        }
    }

    /// From now on `path` runs over the link of path `link` (both directions, with its model,
    /// queue and rate): paths routed to one link share a bottleneck. Out-of-range indices
    /// change nothing.
    pub fn route(&mut self, path: usize, link: usize) {
        if link < self.links.len()
            && let Some(route) = self.routes.get_mut(path)
        {
            *route = link;
        }
    }

    /// Adds another client and server, built like the main pair from `config` and
    /// `scheduler`, joined by one path (id 0, `path`'s configuration) over the link of path
    /// `link`; returns its index in [`Harness::competitors`]. The harness runs it with the main
    /// pair; the test drives its flows.
    pub fn add_competitor(
        &mut self,
        config: SessionConfig,
        scheduler: &SchedulerConfig,
        link: usize,
        path: PathConfig,
    ) -> usize {
        let mut client = Session::new(config.clone(), Role::Client, scheduler.build(), self.now);
        let mut server = Session::new(config, Role::Server, scheduler.build(), self.now);
        // A valid config cannot fail to add path 0; the tests pass valid ones.
        let _ = client.add_path(PathId(0), path, self.now);
        let _ = server.add_path(PathId(0), path, self.now);
        self.competitors.push(Competitor {
            endpoints: [client, server],
            link: link.min(self.links.len().saturating_sub(1)),
        });
        self.competitors.len() - 1
    }

    fn pair_mut(&mut self, pair: usize) -> Option<&mut [Session; 2]> {
        match pair {
            0 => Some(&mut self.endpoints),
            i => self.competitors.get_mut(i - 1).map(|c| &mut c.endpoints),
        }
    }

    /// Changes `path`'s datagram limit the way a path MTU change reaches a session: the links
    /// of the path refuse from now on any packet larger than `size`, the larger ones still on
    /// the wire are lost (all counted in [`LinkStats::too_large`]), and both sessions are told
    /// with [`Session::set_max_datagram_size`]. Errors are the session's (unknown path, too
    /// small a size); nothing changes then.
    pub fn set_max_datagram_size(&mut self, path: usize, size: u16) -> Result<(), PathError> {
        let id = PathId(u8::try_from(path).map_err(|_| PathError::OutOfRange(PathId(u8::MAX)))?);
        for side in [CLIENT, SERVER] {
            self.endpoints[side].set_max_datagram_size(id, size)?;
        }
        if let Some(pair) = self.links.get_mut(path) {
            for link in pair {
                link.max_len = Some(usize::from(size));
            }
        }
        let before = self.in_flight.len();
        self.in_flight.retain(|Reverse(p)| {
            p.pair != 0 || p.path != id.0 || p.data.len() <= usize::from(size)
        });
        self.stats.too_large += (before - self.in_flight.len()) as u64;
        Ok(())
    }

    /// Hands everything both sessions want to send now to the links.
    pub fn flush(&mut self) {
        for pair in 0..=self.competitors.len() {
            for side in [CLIENT, SERVER] {
                loop {
                    let (session, route) = match pair {
                        0 => (&mut self.endpoints[side], None),
                        i => {
                            let c = &mut self.competitors[i - 1];
                            (&mut c.endpoints[side], Some(c.link))
                        }
                    };
                    let Some(t) = session.poll_transmit(self.now, &mut self.buf) else {
                        break;
                    };
                    let link = route.or_else(|| self.routes.get(t.path.index()).copied());
                    let Some(links) = link.and_then(|l| self.links.get_mut(l)) else {
                        continue;
                    };
                    let arrivals =
                        links[side].offer(self.now, t.len, &mut self.rng, &mut self.stats);
                    for at in arrivals.into_iter().flatten() {
                        self.seq += 1;
                        self.in_flight.push(Reverse(InFlight {
                            at,
                            seq: self.seq,
                            pair,
                            to: 1 - side,
                            path: t.path.0,
                            data: self.buf[..t.len].to_vec(),
                        }));
                    }
                }
            }
        }
    }

    fn sessions(&self) -> impl Iterator<Item = &Session> {
        self.endpoints
            .iter()
            .chain(self.competitors.iter().flat_map(|c| c.endpoints.iter()))
    }

    /// Sends what is ready, then advances to the next event (a delivery or a timer) no later
    /// than `until` and processes it. Returns false when nothing happens before `until` (the
    /// clock is then at `until`).
    pub fn step(&mut self, until: Timestamp) -> bool {
        self.flush();
        let mut next = self.in_flight.peek().map(|Reverse(p)| p.at);
        for s in self.sessions() {
            if let Some(t) = s.poll_timeout() {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        }
        let Some(mut next) = next.filter(|&n| n <= until) else {
            self.now = self.now.max(until);
            return false;
        };
        if next <= self.now {
            // A timer that keeps firing without effect must not stall virtual time.
            self.stalls += 1;
            if self.stalls > 1_000 {
                next = self.now + Duration::from_micros(1);
                self.stalls = 0;
            }
        } else {
            self.stalls = 0;
        }
        self.now = self.now.max(next);
        while self
            .in_flight
            .peek()
            .is_some_and(|Reverse(p)| p.at <= self.now)
        {
            let Some(Reverse(p)) = self.in_flight.pop() else {
                break;
            };
            let now = self.now;
            let Some(pair) = self.pair_mut(p.pair) else {
                continue;
            };
            match pair[p.to].handle_datagram(PathId(p.path), &p.data, now) {
                // The path left while the packet was on the wire (the daemon would have closed
                // its connection): dropped, not a protocol error.
                Ok(()) | Err(SessionError::UnknownPath(_)) => {}
                Err(e) => self.errors.push(e),
            }
            self.stats.delivered += 1;
        }
        let now = self.now;
        let competing = self
            .competitors
            .iter_mut()
            .flat_map(|c| c.endpoints.iter_mut());
        for s in self.endpoints.iter_mut().chain(competing) {
            if s.poll_timeout().is_some_and(|t| t <= now) {
                s.handle_timeout(now);
            }
        }
        true
    }

    /// Runs until `until`, calling `app` before every step (and once at the end).
    pub fn run_until(&mut self, until: Timestamp, mut app: impl FnMut(&mut Harness)) {
        loop {
            app(self);
            if !self.step(until) {
                app(self);
                return;
            }
        }
    }
}
