//! The event loop: the application acts, both endpoints hand their packets to the links, and
//! virtual time jumps to the next event (a packet arrival, an endpoint timer, or the
//! application's next real-time packet). Packets arriving at the same microsecond are handled
//! in the order they were sent. One run is a pure function of (scenario, scheduler, seed).

use braid_sched_core::{PathId, SchedulerConfig, SchedulerKind, Timestamp};

use super::app::AppModel;
use super::metrics::{Metrics, Recorder, TimeSeries};
use super::queue::EventQueue;
use super::truth;
use super::{APP_SEED_SALT, Endpoint, EndpointError, EndpointSetup, Side};
use crate::link::{Link, LinkConfigError, Verdict};
use crate::scenario::{App, CrossSpec, Scenario};

const CLIENT: usize = 0;
const SERVER: usize = 1;
/// Largest packet the simulator carries.
const MAX_PACKET: usize = 65_536;
/// Timer firings at one instant after which time is nudged forward by 1 µs.
const MAX_STALLS: u32 = 1_000;
/// What a cross download asks for: more than any run moves (it downloads for the whole run).
const CROSS_BYTES: u64 = 1 << 50;
/// Mixed into the run's seed for each cross download's endpoints and application.
const CROSS_SEED_SALT: u64 = 0xc055_7a1f_0000_0001;

/// Why a run could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A path's link configuration was refused.
    #[error("path `{path}`: {source}")]
    Link {
        /// The path's name.
        path: String,
        /// What was wrong.
        source: LinkConfigError,
    },
    /// A cross download's endpoint refused to be built (e.g. an unknown congestion
    /// controller) or refused an application operation.
    #[error("cross[{index}]: {source}")]
    Cross {
        /// Which `[[cross]]` table.
        index: usize,
        /// What the endpoint said.
        source: EndpointError,
    },
    /// An endpoint refused to be built or refused an application operation.
    #[error("scheduler {scheduler}: {source}")]
    Endpoint {
        /// The scheduler's name.
        scheduler: &'static str,
        /// What the endpoint said.
        source: EndpointError,
    },
}

/// What to run a scenario with.
#[derive(Clone, Debug)]
pub struct SimOptions {
    /// The scheduler both ends use.
    pub scheduler: SchedulerConfig,
    /// The congestion controller both ends use, by a name the endpoint implementation knows
    /// (`None`: its default).
    pub congestion: Option<String>,
}

impl SimOptions {
    /// Both ends with `scheduler` and the endpoint's default congestion controller.
    pub fn new(scheduler: SchedulerConfig) -> Self {
        SimOptions {
            scheduler,
            congestion: None,
        }
    }
}

/// The outcome of one run.
#[derive(Clone, Debug, PartialEq)]
pub struct RunResult {
    /// The scheduler's name.
    pub scheduler: &'static str,
    /// The run's seed.
    pub seed: u64,
    /// The metrics.
    pub metrics: Metrics,
    /// Per-bin series for plots.
    pub series: TimeSeries,
    /// Completion time of every finished stream (web objects, the bulk flow), s.
    pub fcts: Vec<f64>,
    /// Virtual seconds simulated.
    pub virtual_s: f64,
    /// Packet events: packets handed to a link plus packets delivered.
    pub packet_events: u64,
    /// Datagrams an endpoint rejected as malformed (a correct run has none).
    pub protocol_errors: u64,
    /// Goodput of the scenario's `[[cross]]` downloads together over the run, Mbit/s (`None`
    /// when it has none).
    pub cross_goodput_mbps: Option<f64>,
}

/// A `[[cross]]` download running beside braid's session (see [`CrossSpec`]): its own client
/// and server with one path over the links of one of the scenario's paths.
struct CrossRun<E> {
    eps: [E; 2],
    /// The scenario path whose links it uses.
    link: usize,
    app: AppModel,
    rec: Recorder,
    timers: [Option<Timestamp>; 2],
}

impl<E: Endpoint> CrossRun<E> {
    fn start(
        index: usize,
        spec: &CrossSpec,
        scenario: &Scenario,
        duration_s: f64,
    ) -> Result<Self, SimError> {
        let err = |source| SimError::Cross { index, source };
        let seed = scenario.seed ^ CROSS_SEED_SALT.wrapping_mul(index as u64 + 1);
        let setup = |side: Side| EndpointSetup {
            side,
            scheduler: SchedulerConfig::new(SchedulerKind::MinRtt),
            paths: 1,
            receive_buffer_bytes: None,
            window_hint_bytes: window_hint(scenario),
            congestion: spec.congestion.clone(),
            path_congestion: Vec::new(),
            now: Timestamp::ZERO,
        };
        let eps = [
            E::create(&setup(Side::Client)).map_err(err)?,
            E::create(&setup(Side::Server)).map_err(err)?,
        ];
        let path = std::slice::from_ref(&scenario.paths[spec.path]);
        Ok(CrossRun {
            eps,
            link: spec.path,
            app: AppModel::new(&App::Bulk { bytes: CROSS_BYTES }, seed),
            rec: Recorder::new(path, None, duration_s),
            timers: [None; 2],
        })
    }
}

/// The queue's destination code of `side` of cross download `index` (0 and 1 are braid's
/// client and server).
fn cross_destination(index: usize, side: usize) -> u8 {
    (2 + 2 * index + side) as u8
}

/// The cross download and side a destination code names (`None`: braid's own endpoints).
fn cross_of(to: u8) -> Option<(usize, usize)> {
    let code = usize::from(to).checked_sub(2)?;
    Some((code / 2, code % 2))
}

fn seeded(config: &SchedulerConfig, seed: u64) -> SchedulerConfig {
    let mut c = config.clone();
    if c.kind().info().params.iter().any(|p| p.name == "seed") {
        // In range by construction (below 2^53); a refusal keeps the default seed.
        let _ = c.set("seed", (seed % (1 << 53)) as f64);
    }
    c
}

/// See [`EndpointSetup::window_hint_bytes`].
fn window_hint(scenario: &Scenario) -> u64 {
    let rate_bytes: f64 = scenario
        .paths
        .iter()
        .map(|p| truth::rate_mbps(p, 0.0) * 1e6 / 8.0)
        .sum();
    let rtt_s = scenario
        .paths
        .iter()
        .map(|p| truth::rtt_ms(p, 0.0) / 1e3)
        .fold(0.0, f64::max);
    let bytes = (4.0 * rate_bytes * (rtt_s + 0.2)) as u64;
    // A flow never has more than its whole size outstanding: no buffer beyond the largest
    // stream (web objects are small, and a buffer is allocated whole per flow).
    let largest_stream = match &scenario.app {
        App::Bulk { bytes } => *bytes,
        App::Web { objects } => objects.iter().copied().max().unwrap_or(0),
        App::Realtime { .. } => 0,
    };
    bytes
        .clamp(2 << 20, 16 << 20)
        .min(largest_stream.saturating_add(64 << 10))
}

/// Runs `scenario` (already resolved with the run's seed) with `options`; the schedulers'
/// `seed` parameter, where they have one, is set from the run's seed (see the module's
/// conventions).
pub fn run<E: Endpoint>(scenario: &Scenario, options: &SimOptions) -> Result<RunResult, SimError> {
    run_seeding::<E>(scenario, options, true)
}

/// [`run`], but both ends keep the scheduler's `seed` parameter as `options` sets it instead of
/// drawing it from the run's seed: the control for tests of that seeding.
pub fn run_keeping_scheduler_seed<E: Endpoint>(
    scenario: &Scenario,
    options: &SimOptions,
) -> Result<RunResult, SimError> {
    run_seeding::<E>(scenario, options, false)
}

fn run_seeding<E: Endpoint>(
    scenario: &Scenario,
    options: &SimOptions,
    seed_schedulers: bool,
) -> Result<RunResult, SimError> {
    let name = options.scheduler.kind().name();
    let endpoint_err = |source| SimError::Endpoint {
        scheduler: name,
        source,
    };
    let mut forward = Vec::with_capacity(scenario.paths.len());
    let mut reverse = Vec::with_capacity(scenario.paths.len());
    for p in &scenario.paths {
        let (f, r) = p.links().map_err(|source| SimError::Link {
            path: p.name.clone(),
            source,
        })?;
        forward.push(f);
        reverse.push(r);
    }
    let setup = |side: Side, seed: u64| EndpointSetup {
        side,
        scheduler: if seed_schedulers {
            seeded(&options.scheduler, seed)
        } else {
            options.scheduler.clone()
        },
        paths: scenario.paths.len(),
        receive_buffer_bytes: scenario.receive_buffer_bytes,
        window_hint_bytes: window_hint(scenario),
        congestion: options.congestion.clone(),
        path_congestion: scenario
            .paths
            .iter()
            .map(|p| p.congestion.clone())
            .collect(),
        now: Timestamp::ZERO,
    };
    let s = scenario.seed;
    let mut eps = [
        E::create(&setup(Side::Client, s.wrapping_mul(2))).map_err(endpoint_err)?,
        E::create(&setup(Side::Server, s.wrapping_mul(2).wrapping_add(1))).map_err(endpoint_err)?,
    ];
    let duration_s = scenario.duration.as_secs_f64();
    let end = Timestamp::from_secs_f64(duration_s);
    let mut rec = Recorder::new(&scenario.paths, scenario.objective, duration_s);
    let mut app = AppModel::new(&scenario.app, s ^ APP_SEED_SALT);
    let mut crosses = scenario
        .cross
        .iter()
        .enumerate()
        .map(|(i, spec)| CrossRun::<E>::start(i, spec, scenario, duration_s))
        .collect::<Result<Vec<_>, _>>()?;
    let mut sim = Loop {
        queue: EventQueue::new(),
        buf: vec![0; MAX_PACKET],
        now: Timestamp::ZERO,
        events: 0,
        errors: 0,
        stall_at: Timestamp::ZERO,
        stalls: 0,
        timers: [None; 2],
    };
    loop {
        app.step(&mut eps, &mut rec, sim.now, end)
            .map_err(endpoint_err)?;
        if app.done_at().is_some() {
            break;
        }
        for (index, c) in crosses.iter_mut().enumerate() {
            c.app
                .step(&mut c.eps, &mut c.rec, sim.now, end)
                .map_err(|source| SimError::Cross { index, source })?;
        }
        sim.flush(&mut eps, &mut forward, &mut reverse, &mut rec);
        sim.flush_crosses(&mut crosses, &mut forward, &mut reverse);
        if !sim.advance(&mut eps, &mut crosses, &mut rec, app.next_wakeup(end), end) {
            break;
        }
    }
    let finished = app.done_at();
    let stop = finished.unwrap_or(end).min(end);
    let (on_time, total) = app.deadline_counts(stop);
    rec.deadline_on_time = on_time;
    rec.deadline_total = total;
    let fct_s = finished.map(|t| t.as_secs_f64());
    let active_s = fct_s.unwrap_or(duration_s);
    let (metrics, series) = rec.finish(
        active_s,
        fct_s,
        matches!(scenario.app, App::Realtime { .. }),
    );
    let cross_goodput_mbps = (!crosses.is_empty()).then(|| {
        crosses
            .into_iter()
            .filter_map(|c| c.rec.finish(active_s, None, false).0.goodput_mbps)
            .sum()
    });
    Ok(RunResult {
        scheduler: name,
        seed: s,
        metrics,
        series,
        fcts: app.fcts.clone(),
        virtual_s: stop.as_secs_f64(),
        packet_events: sim.events,
        protocol_errors: sim.errors,
        cross_goodput_mbps,
    })
}

struct Loop {
    queue: EventQueue,
    buf: Vec<u8>,
    now: Timestamp,
    events: u64,
    errors: u64,
    stall_at: Timestamp,
    stalls: u32,
    /// Per side: the timer read after its last flush (read once per step: it is not free, the
    /// session scans its paths; a timer that a delivery moves to now fires on the next step, at
    /// the same instant).
    timers: [Option<Timestamp>; 2],
}

impl Loop {
    /// Hands everything both endpoints want to send now to the links.
    fn flush<E: Endpoint>(
        &mut self,
        eps: &mut [E; 2],
        forward: &mut [Link],
        reverse: &mut [Link],
        rec: &mut Recorder,
    ) {
        for side in [SERVER, CLIENT] {
            while let Some((path, len)) = eps[side].poll_transmit(self.now, &mut self.buf) {
                self.events += 1;
                let links = if side == SERVER {
                    &mut *forward
                } else {
                    &mut *reverse
                };
                let Some(link) = links.get_mut(path.index()) else {
                    continue;
                };
                let data = &self.buf[..len];
                if side == SERVER && rec.wants_sent_data() {
                    let mut carries_data = false;
                    E::inspect(data, |_| carries_data = true);
                    if carries_data {
                        rec.on_data_sent(self.now, path.index());
                    }
                }
                if let Verdict::Deliver { at } = link.enqueue(self.now, len as u32) {
                    self.queue
                        .push(at, (1 - side) as u8, path.0, self.now, data);
                }
            }
            self.timers[side] = eps[side].poll_timeout();
        }
    }

    /// Hands everything the cross downloads want to send now to the links of the paths they
    /// cross (the server's packets forward, the client's in reverse, as braid's).
    fn flush_crosses<E: Endpoint>(
        &mut self,
        crosses: &mut [CrossRun<E>],
        forward: &mut [Link],
        reverse: &mut [Link],
    ) {
        for (index, c) in crosses.iter_mut().enumerate() {
            for side in [SERVER, CLIENT] {
                while let Some((_, len)) = c.eps[side].poll_transmit(self.now, &mut self.buf) {
                    self.events += 1;
                    let links = if side == SERVER {
                        &mut *forward
                    } else {
                        &mut *reverse
                    };
                    let Some(link) = links.get_mut(c.link) else {
                        continue;
                    };
                    if let Verdict::Deliver { at } = link.enqueue(self.now, len as u32) {
                        let to = cross_destination(index, 1 - side);
                        self.queue.push(at, to, 0, self.now, &self.buf[..len]);
                    }
                }
                c.timers[side] = c.eps[side].poll_timeout();
            }
        }
    }

    /// Moves to the next event no later than `end` and processes it; false when there is none.
    fn advance<E: Endpoint>(
        &mut self,
        eps: &mut [E; 2],
        crosses: &mut [CrossRun<E>],
        rec: &mut Recorder,
        app_wakeup: Option<Timestamp>,
        end: Timestamp,
    ) -> bool {
        let timers = self.timers;
        let candidates = [self.queue.next_at(), timers[0], timers[1], app_wakeup];
        let cross_timers = crosses.iter().flat_map(|c| c.timers);
        let Some(next) = candidates
            .into_iter()
            .chain(cross_timers)
            .flatten()
            .min()
            .filter(|&t| t <= end)
        else {
            return false;
        };
        if next > self.now {
            self.now = next;
        } else {
            // A timer that keeps firing without effect must not stall virtual time.
            self.events_at_instant_guard();
        }
        while let Some(p) = self.queue.pop_due(self.now) {
            self.events += 1;
            let data = self.queue.bytes(&p);
            if let Some((index, side)) = cross_of(p.to) {
                if let Some(c) = crosses.get_mut(index)
                    && c.eps[side]
                        .handle_datagram(PathId(p.path), data, self.now)
                        .is_err()
                {
                    self.errors += 1;
                }
                self.queue.release(&p);
                continue;
            }
            let path = usize::from(p.path);
            if usize::from(p.to) == CLIENT {
                rec.on_arrival(self.now, path, data.len());
                let mut carries_data = false;
                E::inspect(data, |f| {
                    carries_data = true;
                    rec.on_frame(f);
                });
                if carries_data {
                    rec.on_data_arrival(self.now, path, p.sent_at);
                }
            }
            if eps[usize::from(p.to)]
                .handle_datagram(PathId(p.path), data, self.now)
                .is_err()
            {
                self.errors += 1;
            }
            self.queue.release(&p);
        }
        for (side, ep) in eps.iter_mut().enumerate() {
            if timers[side].is_some_and(|t| t <= self.now) {
                ep.handle_timeout(self.now);
            }
        }
        for c in crosses.iter_mut() {
            for (side, ep) in c.eps.iter_mut().enumerate() {
                if c.timers[side].is_some_and(|t| t <= self.now) {
                    ep.handle_timeout(self.now);
                }
            }
        }
        true
    }

    /// Counts events at one instant; past [`MAX_STALLS`], time moves on by 1 µs.
    fn events_at_instant_guard(&mut self) {
        self.stalls = if self.stall_at == self.now {
            self.stalls + 1
        } else {
            0
        };
        self.stall_at = self.now;
        if self.stalls > MAX_STALLS {
            self.now += std::time::Duration::from_micros(1);
            self.stalls = 0;
        }
    }
}
