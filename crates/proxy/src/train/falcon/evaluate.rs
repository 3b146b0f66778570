//! `braid train falcon --evaluate`: FALCON's adaptation measured in the deterministic simulator
//! with online learning, as FALCON §VI-B1 (convergence) and §VI-B2 (stress test) measure it.
//!
//! `braid sim` attaches no learner. Here the learner runs in **lockstep with virtual time**:
//! every simulated endpoint is the real [`Session`] wrapped in [`Lockstep`]; the server's, after
//! each packet it sends (each scheduling decision), drains the experience queue and runs the
//! learner's [`TrainStep`] synchronously, publishing into the weight slot the scheduler reads at
//! its next decision. The server sends the data; the client (ACKs and requests) runs the
//! shipped weights without learning, as it would in its own process. No thread, no wall clock:
//! the same scenario and seed give the same result, and learning costs no virtual time (an
//! optimistic bound on what a learner thread can do).
//!
//! Every measurement is one 2 MB download on a fresh connection (§V-B: an HTTP GET of a 2 MB
//! file, the transport reset before each request); the learners carry over from one download
//! to the next. The **relative score** (§VI-B1) is the median download time of **DQN-Off**
//! divided by the variant's: DQN-Off is FALCON's network trained offline, off-policy, on each
//! condition beforehand ([`dqn_off`], cached under `--out`/`dqn-off/`), run greedily.
//!
//! - A scenario file without changes is a static condition: the **convergence test** runs 32
//!   downloads in a row per variant and run and reports the score per point of downloads (1, 2,
//!   3-4, 5-8, 9-16, 17-32) with the packets sent before it, and the packets until the score
//!   stays ≥ 0.9.
//! - A file with changes is a **stress test**: its first 24 conditions, each held for the
//!   change interval, downloads back to back on the conditions in force; DQN-Off switches to
//!   the model of each condition at its start. Score over all downloads.
//!
//! Variants ([`Variant`]): `dqn-off` (the reference), `minrtt`, `peekaboo` (its bandit lives
//! in the connection, so it restarts with each download), `falcon` (shipped weights, greedy),
//! `falcon-online` ([`FalconOnline`]: K = 16 fine-tuning steps from the matching meta-model
//! after each detected change, ε_s = 0.1, as the daemon runs it), `dqn-on` ([`DqnOnline`] from
//! the shipped policy without meta-models, one step per 32 transitions, policy published after
//! every step, ε = 0.1: DQN-On of §VI) and `dqn-on-z` (the same from a fresh initialisation,
//! DQN-On(Z) of §VI-B1).

use std::cell::RefCell;
use std::fmt::Write as _;
use std::rc::Rc;
use std::time::Instant;

use braid_learners::TrainStep;
use braid_learners::falcon::train::{
    DqnOnline, FalconDqn, FalconHyper, FalconOnline, FalconTrainError,
};
use braid_learners::torch::tch;
use braid_sched_core::sched::falcon::{
    FalconConfig, FalconLink, FalconStats, FalconTransition, FalconWeights,
};
use braid_sched_core::slot::{ExperienceReceiver, SlotWriter, experience_queue, weight_slot};
use braid_sched_core::{FlowId, PathId, SchedulerConfig, SchedulerKind, Timestamp};
use braid_testbed::sim::{
    self, DataFrame, Endpoint, EndpointError, EndpointEvent, EndpointSetup, RunResult, Side,
    SimOptions,
};
use braid_testbed::{Scenario, ScenarioFile};

use crate::session::Session;
use crate::sim_endpoint::SIM_MAX_DATAGRAM_SIZE;
use crate::train::{TrainError, TrainOptions};

/// Transitions one run may hold between two learner steps (one decision's worth is typical).
const QUEUE_CAPACITY: usize = 1 << 16;
/// ε of the learning variants (FALCON's ε_s, §V-A; the daemon's value).
const EPSILON: f64 = 0.1;
/// The relative score adaptation waits for (§VI-B1).
const THRESHOLD: f64 = 0.9;
/// The most runs per scenario and variant `--evaluate` accepts (window mode needs a few
/// hundred for the score of a window to be known within ±0.1).
const MAX_RUNS: u32 = 1_000;

/// A run's learner, shared by the endpoints and the harness.
type Shared = Rc<RefCell<Learning>>;

/// Per variant: the convergence curve `(packets before the point, score)` and the policies
/// published.
type Curves = Vec<(Variant, Vec<(f64, f64)>, u64)>;

/// Per variant: every download time of the stress test and the policies published.
type StressTimes = Vec<(Variant, Vec<f64>, u64)>;

/// A boxed online trainer.
type Trainer = Box<dyn TrainStep<FalconTransition, FalconWeights, Error = FalconTrainError>>;

/// The learner of one run (or of a sequence of downloads), stepped by the endpoints: an online
/// trainer, or (DQN-Off in the stress test) a schedule of per-condition policies published at
/// the virtual times the conditions change.
struct Learning {
    receiver: ExperienceReceiver<FalconTransition>,
    writer: SlotWriter<FalconWeights>,
    trainer: Option<Trainer>,
    /// (µs since the run's start, weights), in time order; published once due.
    schedule: std::collections::VecDeque<(u64, FalconWeights)>,
    batch: Vec<FalconTransition>,
    published: u64,
    error: Option<String>,
}

impl Learning {
    /// Publishes the scheduled weights due by `now`, drains the queue and trains on what was
    /// there; publishes what the trainer returns.
    fn step(&mut self, now: Timestamp) {
        while self
            .schedule
            .front()
            .is_some_and(|(at, _)| *at <= now.as_micros())
        {
            if let Some((_, weights)) = self.schedule.pop_front() {
                self.writer.publish(weights);
            }
        }
        self.batch.clear();
        self.receiver.drain_into(&mut self.batch, usize::MAX);
        let Some(trainer) = self.trainer.as_mut() else {
            return;
        };
        if self.batch.is_empty() {
            return;
        }
        match trainer.train(&self.batch) {
            Ok(Some(weights)) => {
                self.writer.publish(weights);
                self.published += 1;
            }
            Ok(None) => {}
            Err(e) => {
                self.error.get_or_insert_with(|| e.to_string());
            }
        }
    }
}

thread_local! {
    /// The learner the next [`Lockstep::create`] calls attach to (set around one run).
    static CURRENT: RefCell<Option<Rc<RefCell<Learning>>>> = const { RefCell::new(None) };
    /// The server's FALCON statistics after the last run on this thread (set when its endpoint
    /// is dropped at the end of the run).
    static SERVER_STATS: std::cell::Cell<Option<FalconStats>> = const { std::cell::Cell::new(None) };
    /// Server → client packets the server endpoint of the current run has sent.
    static SERVER_SENT: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// The client's delivery timeline of the current run: at each multiple of
    /// [`Timeline::chunk`] bytes read, (µs, server packets sent by then). Off when `chunk` is 0.
    static TIMELINE: RefCell<Timeline> = const { RefCell::new(Timeline { chunk: 0, read: 0, marks: Vec::new() }) };
}

/// Where the client's reads crossed each multiple of `chunk` bytes (window mode).
#[derive(Debug)]
struct Timeline {
    chunk: u64,
    read: u64,
    /// (µs since the run's start, server packets sent by then), one per multiple crossed.
    marks: Vec<(u64, u64)>,
}

/// The real session as a simulator endpoint, stepping the run's learner after every packet it
/// sends.
pub struct Lockstep {
    session: Session,
    learning: Option<Rc<RefCell<Learning>>>,
    server: bool,
    /// The latest virtual time the endpoint was handed (reads happen at it).
    now: Timestamp,
}

impl Drop for Lockstep {
    fn drop(&mut self) {
        if let (true, braid_sched_core::AnyScheduler::Falcon(falcon)) =
            (self.server, self.session.scheduler())
        {
            SERVER_STATS.with(|c| c.set(Some(falcon.stats())));
        }
    }
}

impl std::fmt::Debug for Lockstep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lockstep")
            .field("learning", &self.learning.is_some())
            .finish_non_exhaustive()
    }
}

impl Endpoint for Lockstep {
    fn create(setup: &EndpointSetup) -> Result<Self, EndpointError> {
        let learning = CURRENT.with(|c| c.borrow().clone());
        if learning.is_some() && setup.side == Side::Client {
            // The learner serves the server, which sends the data; the client (ACKs and
            // requests) runs the shipped weights greedily, so that its transitions and its
            // detected changes do not reach the server's learner.
            let client = EndpointSetup {
                scheduler: super::shipped_config(),
                ..setup.clone()
            };
            return Ok(Lockstep {
                session: <Session as Endpoint>::create(&client)?,
                learning: None,
                server: false,
                now: Timestamp::ZERO,
            });
        }
        if setup.side == Side::Server {
            SERVER_SENT.with(|c| c.set(0));
        }
        Ok(Lockstep {
            session: <Session as Endpoint>::create(setup)?,
            learning,
            server: setup.side == Side::Server,
            now: Timestamp::ZERO,
        })
    }

    fn handle_datagram(
        &mut self,
        path: PathId,
        data: &[u8],
        now: Timestamp,
    ) -> Result<(), EndpointError> {
        self.now = now;
        Endpoint::handle_datagram(&mut self.session, path, data, now)
    }

    fn poll_transmit(&mut self, now: Timestamp, buf: &mut [u8]) -> Option<(PathId, usize)> {
        self.now = now;
        let sent = Endpoint::poll_transmit(&mut self.session, now, buf);
        if sent.is_some() && self.server {
            SERVER_SENT.with(|c| c.set(c.get() + 1));
        }
        if sent.is_some()
            && let Some(learning) = &self.learning
        {
            learning.borrow_mut().step(now);
        }
        sent
    }

    fn poll_timeout(&self) -> Option<Timestamp> {
        Endpoint::poll_timeout(&self.session)
    }

    fn handle_timeout(&mut self, now: Timestamp) {
        self.now = now;
        Endpoint::handle_timeout(&mut self.session, now);
    }

    fn poll_event(&mut self) -> Option<EndpointEvent> {
        Endpoint::poll_event(&mut self.session)
    }

    fn open_flow(&mut self, datagram: bool) -> Result<FlowId, EndpointError> {
        Endpoint::open_flow(&mut self.session, datagram)
    }

    fn write(&mut self, flow: FlowId, data: &[u8]) -> Result<usize, EndpointError> {
        Endpoint::write(&mut self.session, flow, data)
    }

    fn finish(&mut self, flow: FlowId) -> Result<(), EndpointError> {
        Endpoint::finish(&mut self.session, flow)
    }

    fn read(&mut self, flow: FlowId, out: &mut [u8]) -> Result<Option<usize>, EndpointError> {
        let read = Endpoint::read(&mut self.session, flow, out)?;
        if let (false, Some(n)) = (self.server, read) {
            let at = self.now.as_micros();
            TIMELINE.with(|t| {
                let mut t = t.borrow_mut();
                if t.chunk == 0 {
                    return;
                }
                t.read += n as u64;
                while t.read >= t.chunk * (t.marks.len() as u64 + 1) {
                    let sent = SERVER_SENT.with(std::cell::Cell::get);
                    t.marks.push((at, sent));
                }
            });
        }
        Ok(read)
    }

    fn send_datagram(
        &mut self,
        flow: FlowId,
        data: &[u8],
        budget_us: Option<u32>,
        now: Timestamp,
    ) -> Result<(), EndpointError> {
        Endpoint::send_datagram(&mut self.session, flow, data, budget_us, now)
    }

    fn recv_datagram(
        &mut self,
        flow: FlowId,
        out: &mut [u8],
    ) -> Result<Option<usize>, EndpointError> {
        Endpoint::recv_datagram(&mut self.session, flow, out)
    }

    fn inspect(packet: &[u8], visit: impl FnMut(DataFrame)) {
        <Session as Endpoint>::inspect(packet, visit);
    }
}

/// One scheduler set-up under evaluation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// DQN-Off (§VI): the same DQN trained offline on each condition, greedy; the reference.
    DqnOff,
    /// minRTT.
    MinRtt,
    /// Peekaboo.
    Peekaboo,
    /// FALCON with the shipped weights, no learning.
    Falcon,
    /// FALCON learning online (meta-model fine-tuning on detected changes).
    FalconOnline,
    /// The plain online DQN from the shipped policy.
    DqnOn,
    /// The plain online DQN from a fresh initialisation (DQN-On(Z)).
    DqnOnScratch,
}

impl Variant {
    /// Every variant, the reference first.
    pub const ALL: [Variant; 7] = [
        Variant::DqnOff,
        Variant::MinRtt,
        Variant::Peekaboo,
        Variant::Falcon,
        Variant::FalconOnline,
        Variant::DqnOn,
        Variant::DqnOnScratch,
    ];

    /// The name in tables.
    pub fn name(self) -> &'static str {
        match self {
            Variant::DqnOff => "dqn-off",
            Variant::MinRtt => "minrtt",
            Variant::Peekaboo => "peekaboo",
            Variant::Falcon => "falcon",
            Variant::FalconOnline => "falcon-online",
            Variant::DqnOn => "dqn-on",
            Variant::DqnOnScratch => "dqn-on-z",
        }
    }
}

fn runtime(e: impl std::fmt::Display) -> TrainError {
    TrainError::Runtime(e.to_string())
}

/// The shipped weights (the built-in minRTT network when no file is shipped).
fn shipped() -> FalconWeights {
    super::shipped_weights()
        .map(|w| FalconWeights::clone(w))
        .unwrap_or_else(FalconWeights::minrtt)
}

/// What one run of a variant gave.
#[cfg(test)]
struct Run {
    result: RunResult,
    published: u64,
}

/// The scheduler configuration of `variant` and, for the learning variants and DQN-Off, its
/// learner (seed `seed`). DQN-Off's learner only publishes the policies scheduled into it.
fn setup(
    variant: Variant,
    seed: u64,
    params: &[(String, f64)],
) -> Result<(SchedulerConfig, Option<Shared>), TrainError> {
    let (gamma, scheduler_params) = split_params(params);
    let (mut config, learning) = setup_plain(variant, seed, gamma)?;
    if config.kind() == SchedulerKind::Falcon {
        for (name, value) in &scheduler_params {
            config
                .set(name, *value)
                .map_err(|e| TrainError::Usage(e.to_string()))?;
        }
    }
    Ok((config, learning))
}

/// [`setup`], with `reference` (the offline-trained policy) published into DQN-Off's learner.
fn setup_with_reference(
    variant: Variant,
    seed: u64,
    params: &[(String, f64)],
    reference: &FalconWeights,
) -> Result<(SchedulerConfig, Option<Shared>), TrainError> {
    let (scheduler, learning) = setup(variant, seed, params)?;
    if let Some(l) = &learning
        && variant == Variant::DqnOff
    {
        l.borrow_mut().writer.publish(reference.clone());
    }
    Ok((scheduler, learning))
}

/// The parameter that sets the learners' discount γ rather than a scheduler's.
const GAMMA_PARAM: &str = "gamma";

/// `params` split into the learners' γ (`gamma`, for every DQN, DQN-Off's included) and the
/// FALCON scheduler parameters.
fn split_params(params: &[(String, f64)]) -> (Option<f64>, Vec<(String, f64)>) {
    let gamma = params
        .iter()
        .rev()
        .find(|(n, _)| n == GAMMA_PARAM)
        .map(|p| p.1);
    let rest = params
        .iter()
        .filter(|(n, _)| n != GAMMA_PARAM)
        .cloned()
        .collect();
    (gamma, rest)
}

/// [`setup`] with FALCON's default parameters (and the learners' γ when given).
fn setup_plain(
    variant: Variant,
    seed: u64,
    gamma: Option<f64>,
) -> Result<(SchedulerConfig, Option<Shared>), TrainError> {
    let hyper = FalconHyper {
        seed,
        gamma: gamma.unwrap_or(FalconHyper::default().gamma),
        ..FalconHyper::default()
    };
    let (initial, trainer, epsilon): (FalconWeights, Option<Trainer>, f64) = match variant {
        Variant::MinRtt => return Ok((SchedulerConfig::new(SchedulerKind::MinRtt), None)),
        Variant::Peekaboo => return Ok((SchedulerConfig::new(SchedulerKind::Peekaboo), None)),
        Variant::Falcon => return Ok((super::shipped_config(), None)),
        Variant::DqnOff => (FalconWeights::minrtt(), None, 0.0),
        Variant::FalconOnline => {
            let weights = shipped();
            (
                weights.clone(),
                Some(Box::new(
                    FalconOnline::new(hyper, weights).map_err(runtime)?,
                )),
                EPSILON,
            )
        }
        Variant::DqnOn | Variant::DqnOnScratch => {
            let online = if variant == Variant::DqnOn {
                DqnOnline::new(hyper, &shipped(), 1)
            } else {
                DqnOnline::from_scratch(hyper, 1)
            }
            .map_err(runtime)?;
            (online.weights().clone(), Some(Box::new(online)), EPSILON)
        }
    };
    let (writer, reader) = weight_slot(initial);
    let (sender, receiver) = experience_queue(QUEUE_CAPACITY).map_err(runtime)?;
    let config = SchedulerConfig::Falcon(FalconConfig {
        epsilon,
        learner: Some(FalconLink {
            weights: reader,
            experience: sender,
        }),
        ..FalconConfig::default()
    });
    let learning = Learning {
        receiver,
        writer,
        trainer,
        schedule: Default::default(),
        batch: Vec::with_capacity(256),
        published: 0,
        error: None,
    };
    Ok((config, Some(Rc::new(RefCell::new(learning)))))
}

/// Simulates `scenario` with `scheduler` and `learning` attached to the server's endpoint.
fn simulate(
    scenario: &Scenario,
    scheduler: &SchedulerConfig,
    learning: Option<&Rc<RefCell<Learning>>>,
) -> Result<RunResult, TrainError> {
    CURRENT.with(|c| *c.borrow_mut() = learning.cloned());
    let result = sim::run::<Lockstep>(scenario, &SimOptions::new(scheduler.clone()));
    CURRENT.with(|c| *c.borrow_mut() = None);
    let result = result.map_err(|e| runtime(format!("{}: {e}", scenario.name)))?;
    if let Some(e) = learning.and_then(|l| l.borrow().error.clone()) {
        return Err(runtime(format!("{}: learner: {e}", scenario.name)));
    }
    Ok(result)
}

/// Simulates `scenario` with `variant` (seed `seed` for the learner).
#[cfg(test)]
fn run_variant(scenario: &Scenario, variant: Variant, seed: u64) -> Result<Run, TrainError> {
    let (scheduler, learning) = setup(variant, seed, &[])?;
    let result = simulate(scenario, &scheduler, learning.as_ref())?;
    let published = learning.map_or(0, |l| l.borrow().published);
    Ok(Run { result, published })
}

/// The times (s) at which the scenario's forward links change, merged over paths.
fn change_times(scenario: &Scenario) -> Vec<f64> {
    let end = scenario.duration.as_secs_f64();
    let mut times = Vec::new();
    for p in &scenario.paths {
        let link = &p.forward;
        let period = link.changes_period_s;
        for c in &link.changes {
            let mut t = c.at_s;
            while t < end && t > 0.0 {
                times.push(t);
                match period {
                    Some(p) if p > 0.0 => t += p,
                    _ => break,
                }
            }
        }
    }
    times.sort_by(f64::total_cmp);
    times.dedup_by(|a, b| (*a - *b).abs() < 1e-9);
    times
}

/// Bytes of each download (§V-B: an HTTP GET of a 2 MB file).
const DOWNLOAD_BYTES: u64 = 2_000_000;
/// Longest a download may take (s); one that does not finish counts as this long.
const DOWNLOAD_CAP_S: f64 = 20.0;
/// Downloads in a row on each static condition (convergence test); learners carry over.
const CONVERGENCE_DOWNLOADS: usize = 32;
/// The convergence curve's points: downloads `[POINTS[i], POINTS[i + 1])` of each sequence
/// (spaced like the paper's logarithmic axis).
const CONVERGENCE_POINTS: [usize; 7] = [0, 1, 2, 4, 8, 16, CONVERGENCE_DOWNLOADS];
/// Conditions of a stress-test file that are used (its first ones; the files hold 24).
const STRESS_CONDITIONS: usize = 24;
/// DQN-Off: downloads simulated per condition with exploring FALCON (ε_l = 0.3) for its data.
const DQN_OFF_DOWNLOADS: u64 = 12;
/// DQN-Off: gradient steps (minibatch 32) on that data.
const DQN_OFF_STEPS: usize = 3_000;
/// DQN-Off: the seed of its network and minibatches; its data uses seeds 50,000 + i.
const DQN_OFF_SEED: u64 = 7;

/// Applies one step change to a link.
fn apply_change(link: &mut braid_testbed::link::LinkConfig, c: &braid_testbed::link::LinkChange) {
    if let (Some(rate), braid_testbed::link::Capacity::Rate { mbps }) =
        (c.rate_mbps, &mut link.capacity)
    {
        *mbps = rate;
    }
    if let Some(d) = c.delay_ms {
        link.delay_ms = d;
    }
    if let Some(j) = c.jitter_ms {
        link.jitter_ms = j;
    }
    if let Some(l) = c.loss {
        link.loss = l;
    }
}

/// `base` as it stands at `t` s: every link with the changes due by `t` applied; the later
/// changes shifted by `t` when `keep_later`, dropped otherwise. The app becomes one 2 MB
/// download capped at [`DOWNLOAD_CAP_S`].
fn download_at(base: &Scenario, t: f64, keep_later: bool) -> Scenario {
    let mut s = base.clone();
    for p in &mut s.paths {
        for link in [&mut p.forward, &mut p.reverse] {
            let changes = std::mem::take(&mut link.changes);
            for c in changes.iter().filter(|c| c.at_s <= t + 1e-9) {
                apply_change(link, c);
            }
            if keep_later {
                link.changes = changes
                    .into_iter()
                    .filter(|c| c.at_s > t + 1e-9)
                    .map(|mut c| {
                        c.at_s -= t;
                        c
                    })
                    .collect();
            }
        }
    }
    s.app = braid_testbed::scenario::App::Bulk {
        bytes: DOWNLOAD_BYTES,
    };
    s.duration = std::time::Duration::from_secs_f64(DOWNLOAD_CAP_S);
    s
}

/// A key naming the condition of `scenario`'s links (rates, delays, jitter, loss, queues).
fn condition_key(scenario: &Scenario) -> String {
    let mut key = String::new();
    for p in &scenario.paths {
        for l in [&p.forward, &p.reverse] {
            let rate = match &l.capacity {
                braid_testbed::link::Capacity::Rate { mbps } => *mbps,
                braid_testbed::link::Capacity::Trace(_) => -1.0,
            };
            let _ = write!(
                key,
                "{rate:.3}/{:.3}/{:.3}/{:.5}/{};",
                l.delay_ms, l.jitter_ms, l.loss, l.queue_packets
            );
        }
    }
    key
}

/// FNV-1a of `text`.
fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// DQN-Off for the condition `file` has at `t` s (§VI: "a DQN trained offline", on the
/// examined condition beforehand): [`DQN_OFF_DOWNLOADS`] downloads on that static condition
/// with exploring FALCON (ε_l = 0.3 around minRTT, as `braid train falcon` collects its data),
/// then [`DQN_OFF_STEPS`] DQN steps from a fresh network (FALCON's network, loss and
/// hyper-parameters). Cached in `<out>/dqn-off/` under a hash of the condition and the
/// training constants.
fn dqn_off(
    out: &std::path::Path,
    file: &ScenarioFile,
    t: f64,
    params: &[(String, f64)],
) -> Result<FalconWeights, TrainError> {
    let probe = download_at(
        &file
            .resolve(50_000)
            .map_err(|e| TrainError::Usage(e.to_string()))?,
        t,
        false,
    );
    let mut key = format!(
        "{}|{DQN_OFF_DOWNLOADS}|{DQN_OFF_STEPS}|{DQN_OFF_SEED}|{DOWNLOAD_BYTES}",
        condition_key(&probe)
    );
    // FALCON parameters change the data (the action space); none keeps the earlier keys.
    for (name, value) in params {
        let _ = write!(key, "|{name}={value}");
    }
    let (gamma, scheduler_params) = split_params(params);
    let dir = out.join("dqn-off");
    let path = dir.join(format!("{}-{:016x}.safetensors", file.name(), fnv(&key)));
    if path.exists() {
        return braid_learners::falcon::load(&path).map_err(runtime);
    }
    std::fs::create_dir_all(&dir).map_err(|e| runtime(format!("{}: {e}", dir.display())))?;
    let mut data = Vec::new();
    for i in 0..DQN_OFF_DOWNLOADS {
        let seed = 50_000 + i;
        let scenario = download_at(
            &file
                .resolve(seed)
                .map_err(|e| TrainError::Usage(e.to_string()))?,
            t,
            false,
        );
        data.extend(super::offline::collect_with(&scenario, seed, &scheduler_params)?.transitions);
    }
    if data.is_empty() {
        return Err(runtime(format!("{}: DQN-Off data is empty", file.name())));
    }
    let hyper = FalconHyper {
        seed: DQN_OFF_SEED,
        gamma: gamma.unwrap_or(FalconHyper::default().gamma),
        ..FalconHyper::default()
    };
    let mut dqn = FalconDqn::new(hyper, tch::Device::Cpu).map_err(runtime)?;
    for _ in 0..DQN_OFF_STEPS {
        dqn.step_on(&data);
    }
    let weights = FalconWeights::new(
        dqn.export().map_err(runtime)?,
        vec![None; braid_sched_core::sched::falcon::CLASSES],
    )
    .map_err(runtime)?;
    let created = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut provenance = braid_learners::Provenance::new(
        created,
        format!(
            "braid train falcon --evaluate: DQN-Off for {} at {t} s, {} transitions, {} steps",
            file.name(),
            data.len(),
            DQN_OFF_STEPS
        ),
    );
    provenance.extra.insert("condition".into(), key);
    braid_learners::falcon::to_model(&weights, provenance)
        .and_then(|m| m.save(&path))
        .map_err(runtime)?;
    Ok(weights)
}

/// One download of a sequence.
#[derive(Clone, Copy, Debug)]
struct Download {
    /// Download time, s (capped at [`DOWNLOAD_CAP_S`]).
    fct: f64,
    /// Server → client packets of the download.
    packets: f64,
}

/// One download with `scheduler` (and `learning`) on `scenario`.
fn download(
    scenario: &Scenario,
    scheduler: &SchedulerConfig,
    learning: Option<&Rc<RefCell<Learning>>>,
) -> Result<Download, TrainError> {
    let result = simulate(scenario, scheduler, learning)?;
    let fct = result
        .fcts
        .first()
        .copied()
        .unwrap_or(DOWNLOAD_CAP_S)
        .min(DOWNLOAD_CAP_S);
    let packet_bits = f64::from(SIM_MAX_DATAGRAM_SIZE) * 8.0;
    let bin_s = result.series.bin_s;
    let packets = result
        .series
        .path_mbps
        .iter()
        .flatten()
        .map(|mbps| mbps * 1e6 * bin_s / packet_bits)
        .sum();
    Ok(Download { fct, packets })
}

/// The median of `values` (0 when empty).
fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Packets until a curve of `(packets before the point, score)` stays at or above the
/// threshold: the packets before the first point from which every later one is ≥ it;
/// `None` when the last point is below it.
fn packets_to_threshold(curve: &[(f64, f64)]) -> Option<f64> {
    match curve.iter().rposition(|&(_, s)| s < THRESHOLD) {
        None => Some(curve.first().map_or(0.0, |c| c.0)),
        Some(k) if k + 1 == curve.len() => None,
        Some(k) => Some(curve[k + 1].0),
    }
}

/// The variants the download tests compare (DQN-Off first: the reference).
const DOWNLOAD_VARIANTS: [Variant; 7] = Variant::ALL;

/// DQN-Off (the reference, first) and `variants` in [`DOWNLOAD_VARIANTS`]' order; every
/// variant when `variants` is empty.
fn chosen(variants: &[Variant]) -> impl Iterator<Item = Variant> + '_ {
    DOWNLOAD_VARIANTS
        .into_iter()
        .filter(|v| *v == Variant::DqnOff || variants.is_empty() || variants.contains(v))
}

/// §VI-B1 convergence test on one static condition: for each variant and run, a sequence of
/// [`CONVERGENCE_DOWNLOADS`] downloads (a fresh connection each, as the paper resets the
/// transport before each request) with the learner carried over; per point of
/// [`CONVERGENCE_POINTS`], relative score = median download time of DQN-Off (over all its
/// downloads) / median of the variant's downloads at that point. Returns, per variant, the
/// curve `(mean packets sent before the point, score)` and the policies published.
fn convergence(
    options: &TrainOptions,
    file: &ScenarioFile,
    runs: u32,
    started: Instant,
    params: &[(String, f64)],
) -> Result<Curves, TrainError> {
    let reference = dqn_off(&options.out, file, 0.0, params)?;
    let mut times: Vec<(Variant, Vec<Vec<Download>>, u64)> = Vec::new();
    for variant in DOWNLOAD_VARIANTS {
        let mut per_run = Vec::new();
        let mut published = 0;
        for r in 0..runs {
            let learner_seed = options.seed.wrapping_add(u64::from(r));
            let (scheduler, learning) =
                setup_with_reference(variant, learner_seed, params, &reference)?;
            let mut list = Vec::new();
            for d in 0..CONVERGENCE_DOWNLOADS {
                let seed = options
                    .seed
                    .wrapping_add(1_000 * u64::from(r))
                    .wrapping_add(d as u64);
                let scenario = download_at(
                    &file
                        .resolve(seed)
                        .map_err(|e| TrainError::Usage(e.to_string()))?,
                    0.0,
                    false,
                );
                list.push(download(&scenario, &scheduler, learning.as_ref())?);
            }
            published += learning.map_or(0, |l| l.borrow().published);
            per_run.push(list);
        }
        eprintln!(
            "braid train falcon --evaluate: {} {} done ({:.0} s)",
            file.name(),
            variant.name(),
            started.elapsed().as_secs_f64()
        );
        times.push((variant, per_run, published));
    }
    let all_reference: Vec<f64> = times[0].1.iter().flatten().map(|d| d.fct).collect();
    let reference_median = median(&all_reference);
    let mut curves = Vec::new();
    for (variant, per_run, published) in &times {
        let mut curve = Vec::new();
        for w in CONVERGENCE_POINTS.windows(2) {
            let (start, end) = (w[0], w[1]);
            let fcts: Vec<f64> = per_run
                .iter()
                .flat_map(|l| l[start..end].iter().map(|d| d.fct))
                .collect();
            let before: f64 = per_run
                .iter()
                .map(|l| l[..start].iter().map(|d| d.packets).sum::<f64>())
                .sum::<f64>()
                / per_run.len().max(1) as f64;
            // (An empty sum is −0.)
            let before = before.max(0.0);
            let m = median(&fcts);
            curve.push((before, if m > 0.0 { reference_median / m } else { 0.0 }));
        }
        curves.push((*variant, curve, *published));
    }
    Ok(curves)
}

/// §VI-B2 stress test on one file: its first [`STRESS_CONDITIONS`] conditions, each held for
/// the file's change interval; for each variant and run, 2 MB downloads back to back from
/// t = 0 to the end of the last condition, each on the conditions in force (with the changes
/// that fall inside it); the learners carry over. DQN-Off runs the model trained on each
/// condition, switched at the condition's start. Returns per variant all download times and
/// the policies published.
fn stress(
    options: &TrainOptions,
    file: &ScenarioFile,
    runs: u32,
    started: Instant,
    params: &[(String, f64)],
    variants: &[Variant],
) -> Result<(f64, StressTimes), TrainError> {
    let probe = file
        .resolve(options.seed)
        .map_err(|e| TrainError::Usage(e.to_string()))?;
    let changes = change_times(&probe);
    let interval = changes.first().copied().unwrap_or(0.0);
    let end = changes
        .get(STRESS_CONDITIONS - 1)
        .copied()
        .unwrap_or(probe.duration.as_secs_f64());
    let mut starts = vec![0.0];
    starts.extend(changes.iter().copied().take_while(|&c| c < end));
    let models: Vec<FalconWeights> = starts
        .iter()
        .map(|&t| dqn_off(&options.out, file, t, params))
        .collect::<Result<_, _>>()?;
    let mut out = Vec::new();
    // Every download, for statistics outside (bootstrap intervals).
    let mut raw = String::from("variant,run,download,start_s,fct_s\n");
    for variant in chosen(variants) {
        let mut fcts = Vec::new();
        let mut published = 0;
        for r in 0..runs {
            let learner_seed = options.seed.wrapping_add(u64::from(r));
            let (scheduler, learning) = setup(variant, learner_seed, params)?;
            let mut t = 0.0;
            let mut d = 0u64;
            while t < end {
                let seed = options
                    .seed
                    .wrapping_add(100_000 * u64::from(r))
                    .wrapping_add(d);
                let scenario = download_at(
                    &file
                        .resolve(seed)
                        .map_err(|e| TrainError::Usage(e.to_string()))?,
                    t,
                    true,
                );
                if let Some(l) = &learning
                    && variant == Variant::DqnOff
                {
                    let mut l = l.borrow_mut();
                    let current = starts.iter().rposition(|&s| s <= t + 1e-9).unwrap_or(0);
                    l.writer.publish(models[current].clone());
                    l.schedule = starts
                        .iter()
                        .zip(&models)
                        .filter(|(s, _)| **s > t + 1e-9)
                        .map(|(s, m)| (((s - t) * 1e6) as u64, m.clone()))
                        .collect();
                }
                let done = download(&scenario, &scheduler, learning.as_ref())?;
                let _ = writeln!(raw, "{},{r},{d},{t:.6},{:.6}", variant.name(), done.fct);
                fcts.push(done.fct);
                t += done.fct.max(1e-3);
                d += 1;
            }
            published += learning.map_or(0, |l| l.borrow().published);
        }
        eprintln!(
            "braid train falcon --evaluate: {} {} done ({} downloads, {:.0} s)",
            file.name(),
            variant.name(),
            fcts.len(),
            started.elapsed().as_secs_f64()
        );
        out.push((variant, fcts, published));
    }
    let raw_path = options.out.join(format!("stress-runs-{}.csv", file.name()));
    std::fs::write(&raw_path, raw).map_err(|e| runtime(format!("{}: {e}", raw_path.display())))?;
    Ok((interval, out))
}

/// Window mode: bytes of each run's one long-lived connection.
const WINDOW_BYTES: u64 = 20_000_000;
/// Window mode: the chunk whose delivery time is scored (about 180 packets of 1,400 bytes).
const WINDOW_CHUNK: u64 = 250_000;
/// Window mode: longest a connection may run (s); a chunk not delivered by then counts as
/// this long.
const WINDOW_CAP_S: f64 = 120.0;
/// Window mode: chunks per scored window: 8 × 250 kB = one 2 MB download (§V-B), started at
/// every chunk mark. (A single chunk is too short to score: the client reads the bytes held
/// up behind a lost packet at once, so several chunk marks often fall at the same instant.)
const WINDOW_SPAN: usize = 8;
/// Window mode: the windows shown in the report's curves (all of them go to the CSV file).
const WINDOW_SHOWN: [usize; 16] = [0, 1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 24, 32, 40, 56, 72];

/// How `--evaluate` measures (beyond [`TrainOptions`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EvalConfig {
    /// FALCON parameters (`(name, value)`) applied to every FALCON-based variant and to the
    /// collection of DQN-Off's data (e.g. `choose_congested`, `start_change`), and `gamma`, the
    /// discount of every DQN (DQN-Off, FALCON's fine-tuning, DQN-On); all part of the DQN-Off
    /// cache key.
    pub params: Vec<(String, f64)>,
    /// Static conditions: score chunks of one long-lived connection per run (window mode)
    /// instead of 2 MB downloads on fresh connections.
    pub window: bool,
    /// Window mode and stress test: the variants to run besides DQN-Off (the reference
    /// always runs first); empty: every variant.
    pub variants: Vec<Variant>,
}

/// Per variant (window mode): the curve `(mean server packets sent before the chunk, score)`
/// per chunk, the policies published, and FALCON's decision counters summed over runs
/// (decisions, decisions with a choice, greedy decisions not minRTT's, waits).
type WindowCurves = Vec<(Variant, Vec<(f64, f64)>, u64, Option<[u64; 4]>)>;

/// Per variant (window mode): per run, per window (time s, packets before), the policies
/// published and the decision counters (see [`WindowCurves`]).
type WindowRuns = Vec<(Variant, Vec<Vec<(f64, f64)>>, u64, Option<[u64; 4]>)>;

/// Window mode on one static condition: per variant and run, one connection carrying
/// [`WINDOW_BYTES`] (the learners start as in the other tests: shipped weights or scratch,
/// no experience). The client's reads mark each [`WINDOW_CHUNK`] bytes; window `k` (a 2 MB
/// download on the warm connection) runs from mark `k − 1` (the request for `k = 0`) to mark
/// `k + WINDOW_SPAN − 1`. Score of window `k` = median over runs of DQN-Off's window-`k` time /
/// median over runs of the variant's. Its learning cost is the server's packets sent before
/// it (mean over runs).
fn window(
    options: &TrainOptions,
    file: &ScenarioFile,
    runs: u32,
    started: Instant,
    params: &[(String, f64)],
    variants: &[Variant],
) -> Result<(WindowCurves, Vec<(f64, f64)>), TrainError> {
    let reference = dqn_off(&options.out, file, 0.0, params)?;
    let chunks = (WINDOW_BYTES / WINDOW_CHUNK) as usize;
    // Per variant: per run, per chunk (time s, packets before).
    let mut measured: WindowRuns = Vec::new();
    // Every run's raw chunk marks, for statistics outside (bootstrap intervals).
    let mut raw = String::from("variant,run,chunk,us,packets_before\n");
    for variant in chosen(variants) {
        let mut per_run = Vec::new();
        let mut published = 0;
        let mut counters: Option<[u64; 4]> = None;
        for r in 0..runs {
            let learner_seed = options.seed.wrapping_add(u64::from(r));
            let (scheduler, learning) =
                setup_with_reference(variant, learner_seed, params, &reference)?;
            let seed = options.seed.wrapping_add(1_000 * u64::from(r));
            let mut scenario = file
                .resolve(seed)
                .map_err(|e| TrainError::Usage(e.to_string()))?;
            scenario.app = braid_testbed::scenario::App::Bulk {
                bytes: WINDOW_BYTES,
            };
            scenario.duration = std::time::Duration::from_secs_f64(WINDOW_CAP_S);
            TIMELINE.with(|t| {
                *t.borrow_mut() = Timeline {
                    chunk: WINDOW_CHUNK,
                    read: 0,
                    marks: Vec::with_capacity(chunks),
                }
            });
            SERVER_STATS.with(|c| c.set(None));
            let result = simulate(&scenario, &scheduler, learning.as_ref());
            let marks = TIMELINE.with(|t| {
                let mut t = t.borrow_mut();
                t.chunk = 0;
                std::mem::take(&mut t.marks)
            });
            result?;
            for (c, (us, before)) in marks.iter().enumerate() {
                let _ = writeln!(raw, "{},{r},{c},{us},{before}", variant.name());
            }
            per_run.push(window_times(
                &marks,
                chunks,
                SERVER_SENT.with(std::cell::Cell::get),
            ));
            if let Some(stats) = SERVER_STATS.with(std::cell::Cell::take) {
                let c = counters.get_or_insert([0; 4]);
                c[0] += stats.decisions;
                c[1] += stats.choices;
                c[2] += stats.not_minrtt;
                c[3] += stats.waits;
            }
            published += learning.map_or(0, |l| l.borrow().published);
        }
        eprintln!(
            "braid train falcon --evaluate --window: {} {} done ({:.0} s)",
            file.name(),
            variant.name(),
            started.elapsed().as_secs_f64()
        );
        measured.push((variant, per_run, published, counters));
    }
    let raw_path = options.out.join(format!("window-runs-{}.csv", file.name()));
    std::fs::write(&raw_path, raw).map_err(|e| runtime(format!("{}: {e}", raw_path.display())))?;
    let chunk_median = |per_run: &[Vec<(f64, f64)>], k: usize| {
        median(&per_run.iter().map(|r| r[k].0).collect::<Vec<_>>())
    };
    let windows = chunks - WINDOW_SPAN + 1;
    let reference: Vec<f64> = (0..windows)
        .map(|k| chunk_median(&measured[0].1, k))
        .collect();
    // The noise of a curve: DQN-Off's even runs scored against its odd runs.
    let halves = |parity: usize| -> Vec<Vec<(f64, f64)>> {
        measured[0]
            .1
            .iter()
            .enumerate()
            .filter(|(r, _)| r % 2 == parity)
            .map(|(_, run)| run.clone())
            .collect()
    };
    let (even, odd) = (halves(0), halves(1));
    let noise = (0..windows)
        .map(|k| {
            let m = chunk_median(&even, k);
            let before = measured[0].1.iter().map(|r| r[k].1).sum::<f64>()
                / measured[0].1.len().max(1) as f64;
            (
                before,
                if m > 0.0 {
                    chunk_median(&odd, k) / m
                } else {
                    0.0
                },
            )
        })
        .collect();
    let curves = measured
        .iter()
        .map(|(variant, per_run, published, counters)| {
            let curve = (0..windows)
                .map(|k| {
                    let before =
                        per_run.iter().map(|r| r[k].1).sum::<f64>() / per_run.len().max(1) as f64;
                    let m = chunk_median(per_run, k);
                    (before, if m > 0.0 { reference[k] / m } else { 0.0 })
                })
                .collect();
            (*variant, curve, *published, *counters)
        })
        .collect();
    Ok((curves, noise))
}

/// The windows of one run from its chunk marks (`(µs, server packets sent by then)` at each
/// [`WINDOW_CHUNK`] bytes read): per window `k` of [`WINDOW_SPAN`] chunks, its delivery time
/// (s; [`WINDOW_CAP_S`] when it did not complete) and the packets sent before it
/// (`sent_at_end` when its start was never reached).
fn window_times(marks: &[(u64, u64)], chunks: usize, sent_at_end: u64) -> Vec<(f64, f64)> {
    (0..=chunks.saturating_sub(WINDOW_SPAN))
        .map(|k| {
            let start = match k {
                0 => Some((0, 0)),
                _ => marks.get(k - 1).copied(),
            };
            let end = marks.get(k + WINDOW_SPAN - 1).map(|m| m.0);
            match (start, end) {
                (Some((from, before)), Some(to)) => {
                    (to.saturating_sub(from) as f64 / 1e6, before as f64)
                }
                (Some((_, before)), None) => (WINDOW_CAP_S, before as f64),
                (None, _) => (WINDOW_CAP_S, sent_at_end as f64),
            }
        })
        .collect()
}

/// The window-mode rows of one condition (or of the mean over conditions) for the report, and
/// its CSV lines; `noise` is DQN-Off's even runs against its odd runs, when there are two.
fn window_rows(
    name: &str,
    curves: &WindowCurves,
    noise: Option<&[(f64, f64)]>,
    rows: &mut String,
    csv: &mut String,
) {
    let noise_row = noise.map(|n| ("dqn-off odd/even runs (noise)", n.to_vec(), None, None));
    let all = curves
        .iter()
        .map(|(v, c, p, n)| (v.name(), c.clone(), Some(*p), *n))
        .chain(noise_row);
    for (variant, curve, published, counters) in all {
        let curve = &curve;
        let published = published.map_or("-".to_owned(), |p| p.to_string());
        let to = match packets_to_threshold(curve) {
            Some(p) => format!("{p:.0}"),
            None => "never".to_owned(),
        };
        let points: Vec<String> = WINDOW_SHOWN
            .iter()
            .filter_map(|&k| curve.get(k))
            .map(|(p, s)| format!("{s:.2} @{p:.0}"))
            .collect();
        let late: Vec<f64> = curve.iter().skip(curve.len() / 2).map(|c| c.1).collect();
        let counters = match counters {
            Some([decisions, choices, not_minrtt, waits]) if decisions > 0 => {
                let pct = |x: u64| 100.0 * x as f64 / decisions as f64;
                format!(
                    "{:.1} / {:.1} / {:.1}",
                    pct(choices),
                    pct(not_minrtt),
                    pct(waits)
                )
            }
            _ => "-".to_owned(),
        };
        let _ = writeln!(
            rows,
            "| {name} | {variant} | {to} | {:.3} | {} | {counters} | {published} |",
            median(&late),
            points.join(", ")
        );
        for (k, (p, s)) in curve.iter().enumerate() {
            let _ = writeln!(csv, "{name},{variant},{k},{p:.0},{s:.4}");
        }
    }
}

/// Runs the evaluation over `options.scenarios` with `runs` seeds each; returns the report.
/// A file without changes is a static condition (§VI-B1 convergence test); one with changes a
/// stress-test timeline (§VI-B2).
pub fn run(options: &TrainOptions, runs: u32) -> Result<String, TrainError> {
    run_with(options, runs, &EvalConfig::default())
}

/// [`run`] with FALCON parameters and, for static conditions, window mode ([`EvalConfig`]).
pub fn run_with(
    options: &TrainOptions,
    runs: u32,
    eval: &EvalConfig,
) -> Result<String, TrainError> {
    let params = eval.params.as_slice();
    if runs == 0 || runs > MAX_RUNS {
        return Err(TrainError::Usage(format!(
            "--runs {runs}: expected 1..={MAX_RUNS}"
        )));
    }
    // Small steps, one thread: the measurement must not depend on the machine's cores.
    tch::set_num_threads(1);
    std::fs::create_dir_all(&options.out)
        .map_err(|e| TrainError::Usage(format!("--out {}: {e}", options.out.display())))?;
    let started = Instant::now();
    let mut report = String::new();
    let measure = if eval.window {
        "Static conditions are measured in window mode (2 MB windows of one long-lived \
         connection per run, below); a file with changes as 2 MB downloads on fresh connections, \
         learners carried over from one download to the next"
    } else {
        "Every measurement is a 2 MB download on a fresh connection; learners carry over from \
         one download to the next"
    };
    let _ = writeln!(
        report,
        "# FALCON adaptation in the simulator (online learning in lockstep)\n\n\
         Command: `{}`\n\n{measure}. Relative score = median download time of \
         DQN-Off (the same DQN trained offline on each condition, cached in `{}/dqn-off/`) / \
         median download time of the variant. {runs} run(s), learner seeds {}..{}.\n",
        options.command,
        options.out.display(),
        options.seed,
        options.seed + u64::from(runs) - 1
    );
    if !params.is_empty() {
        let list: Vec<String> = params.iter().map(|(n, v)| format!("{n} = {v}")).collect();
        let _ = writeln!(
            report,
            "FALCON parameters of every FALCON-based variant and of DQN-Off's data: {}.\n",
            list.join(", ")
        );
    }
    let mut convergence_rows = String::new();
    let mut window_table = String::new();
    let mut window_curves: Vec<WindowCurves> = Vec::new();
    let mut window_csv = String::from("condition,variant,window,packets_before,score\n");
    let mut stress_rows = String::new();
    let mut static_curves: Vec<Curves> = Vec::new();
    for path in &options.scenarios {
        let file = ScenarioFile::load(path).map_err(|e| TrainError::Usage(e.to_string()))?;
        let probe = file
            .resolve(options.seed)
            .map_err(|e| TrainError::Usage(e.to_string()))?;
        if probe
            .paths
            .iter()
            .any(|p| p.forward.changes_period_s.is_some() || p.reverse.changes_period_s.is_some())
        {
            return Err(TrainError::Usage(format!(
                "{}: periodic changes are not supported by --evaluate",
                path.display()
            )));
        }
        if change_times(&probe).is_empty() && eval.window {
            let (curves, noise) = window(options, &file, runs, started, params, &eval.variants)?;
            let noise = (runs >= 2).then_some(noise.as_slice());
            window_rows(
                file.name(),
                &curves,
                noise,
                &mut window_table,
                &mut window_csv,
            );
            window_curves.push(curves);
        } else if change_times(&probe).is_empty() {
            let curves = convergence(options, &file, runs, started, params)?;
            for (variant, curve, published) in &curves {
                let points: Vec<String> = curve
                    .iter()
                    .map(|(p, s)| format!("{s:.3} @{p:.0}"))
                    .collect();
                let to = match packets_to_threshold(curve) {
                    Some(p) => format!("{p:.0}"),
                    None => "never".to_owned(),
                };
                let _ = writeln!(
                    convergence_rows,
                    "| {} | {} | {to} | {} | {published} |",
                    file.name(),
                    variant.name(),
                    points.join(", ")
                );
            }
            static_curves.push(curves);
        } else {
            let (interval, results) =
                stress(options, &file, runs, started, params, &eval.variants)?;
            let reference = median(&results[0].1);
            for (variant, fcts, published) in &results {
                let m = median(fcts);
                let _ = writeln!(
                    stress_rows,
                    "| {} | {interval} | {} | {} | {:.4} | {:.3} | {published} |",
                    file.name(),
                    variant.name(),
                    fcts.len(),
                    m,
                    if m > 0.0 { reference / m } else { 0.0 }
                );
            }
        }
    }
    if !static_curves.is_empty() {
        let _ = writeln!(
            report,
            "## Convergence (§VI-B1): static conditions, {CONVERGENCE_DOWNLOADS} downloads in a \
             row, points = downloads {CONVERGENCE_POINTS:?} (from, to)\n\n\
             Curve: relative score @ mean server → client packets sent before the point. \
             Packets to 0.9: before the first point from which the score stays ≥ {THRESHOLD}.\n\n\
             | condition | variant | packets to 0.9 | curve | policies published |\n|---|---|---|---|---|"
        );
        report.push_str(&convergence_rows);
        // The mean curve over the conditions.
        let _ = writeln!(
            report,
            "\nMean over the {} condition(s):\n\n| variant | packets to 0.9 | mean curve |\n|---|---|---|",
            static_curves.len()
        );
        for (i, (variant, first, _)) in static_curves[0].iter().enumerate() {
            let mean: Vec<(f64, f64)> = (0..first.len())
                .map(|k| {
                    let n = static_curves.len() as f64;
                    let p = static_curves.iter().map(|c| c[i].1[k].0).sum::<f64>() / n;
                    let s = static_curves.iter().map(|c| c[i].1[k].1).sum::<f64>() / n;
                    (p, s)
                })
                .collect();
            let to = match packets_to_threshold(&mean) {
                Some(p) => format!("{p:.0}"),
                None => "never".to_owned(),
            };
            let points: Vec<String> = mean
                .iter()
                .map(|(p, s)| format!("{s:.3} @{p:.0}"))
                .collect();
            let _ = writeln!(
                report,
                "| {} | {to} | {} |",
                variant.name(),
                points.join(", ")
            );
        }
    }
    if !window_table.is_empty() {
        let csv = options.out.join("window.csv");
        std::fs::write(&csv, &window_csv)
            .map_err(|e| runtime(format!("{}: {e}", csv.display())))?;
        let _ = writeln!(
            report,
            "## Convergence (§VI-B1) on one long-lived connection per run: 2 MB windows \
             ({WINDOW_SPAN} chunks of {WINDOW_CHUNK} bytes) started at every chunk of a \
             {WINDOW_BYTES}-byte transfer\n\n\
             Score of window k = median over runs of DQN-Off's window-k delivery time / the \
             variant's; learning cost = server packets sent before the window (mean over \
             runs). Packets to 0.9: before the first window from which every window's score is \
             ≥ {THRESHOLD}. Late: median score of the second half of the windows. Counters \
             (FALCON variants, % of decisions): with ≥ 2 paths that have room / greedy and not \
             minRTT's choice / waits. Every window's score: `{}`.\n\n\
             | condition | variant | packets to 0.9 | late | curve (score @packets, windows \
             {WINDOW_SHOWN:?}) | choice / not minRTT / wait % | policies published |\n\
             |---|---|---|---|---|---|---|",
            csv.display()
        );
        report.push_str(&window_table);
        if window_curves.len() > 1 {
            // The mean curve over the conditions (packets and scores averaged per window).
            let n = window_curves.len() as f64;
            let mean: WindowCurves = window_curves[0]
                .iter()
                .enumerate()
                .map(|(i, (variant, first, _, _))| {
                    let curve = (0..first.len())
                        .map(|k| {
                            let p = window_curves.iter().map(|c| c[i].1[k].0).sum::<f64>() / n;
                            let s = window_curves.iter().map(|c| c[i].1[k].1).sum::<f64>() / n;
                            (p, s)
                        })
                        .collect();
                    let published = window_curves.iter().map(|c| c[i].2).sum();
                    let counters = window_curves
                        .iter()
                        .filter_map(|c| c[i].3)
                        .reduce(|a, b| [a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3]]);
                    (*variant, curve, published, counters)
                })
                .collect();
            let _ = writeln!(
                report,
                "\nMean over the {} conditions (scores averaged per window):\n\n\
                 | condition | variant | packets to 0.9 | late | curve | choice / not minRTT / wait % | policies published |\n\
                 |---|---|---|---|---|---|---|",
                window_curves.len()
            );
            let mut rows = String::new();
            let mut ignored = String::new();
            window_rows("mean", &mean, None, &mut rows, &mut ignored);
            report.push_str(&rows);
        }
    }
    if !stress_rows.is_empty() {
        let _ = writeln!(
            report,
            "\n## Stress test (§VI-B2): the first {STRESS_CONDITIONS} conditions of each file\n\n\
             | file | change interval s | variant | downloads | median download s | relative score | policies published |\n|---|---|---|---|---|---|---|"
        );
        report.push_str(&stress_rows);
    }
    let _ = writeln!(
        report,
        "\n{:.0} s wall clock.",
        started.elapsed().as_secs_f64()
    );
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packets_to_threshold_waits_until_the_score_stays_above_it() {
        let curve = [
            (0.0, 0.5),
            (10.0, 0.95),
            (20.0, 0.8),
            (30.0, 0.92),
            (40.0, 1.0),
        ];
        assert_eq!(packets_to_threshold(&curve), Some(30.0));
        assert_eq!(packets_to_threshold(&[(0.0, 1.0), (5.0, 0.5)]), None);
        assert_eq!(packets_to_threshold(&[(0.0, 0.9), (5.0, 1.0)]), Some(0.0));
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
    }

    #[test]
    fn gamma_goes_to_the_learners_and_the_rest_to_the_scheduler() {
        let params = vec![
            ("choose_congested".to_owned(), 1.0),
            ("gamma".to_owned(), 0.99),
        ];
        let (gamma, rest) = split_params(&params);
        assert_eq!(gamma, Some(0.99));
        assert_eq!(rest, vec![("choose_congested".to_owned(), 1.0)]);
        assert_eq!(split_params(&[]), (None, Vec::new()));
        // A bad scheduler parameter is refused, not ignored.
        assert!(setup(Variant::Falcon, 1, &[("nope".to_owned(), 1.0)]).is_err());
        assert!(setup(Variant::DqnOn, 1, &params).is_ok());
    }

    #[test]
    fn windows_span_eight_chunks_from_the_previous_mark() {
        let marks: Vec<(u64, u64)> = (1..=10).map(|i| (i * 100_000, i * 10)).collect();
        let w = window_times(&marks, 10, 999);
        assert_eq!(w.len(), 3);
        assert!((w[0].0 - 0.8).abs() < 1e-9 && w[0].1 == 0.0, "{w:?}");
        assert!((w[1].0 - 0.8).abs() < 1e-9 && w[1].1 == 10.0, "{w:?}");
        assert!((w[2].0 - 0.8).abs() < 1e-9 && w[2].1 == 20.0, "{w:?}");
        // A transfer that stopped after 8 chunks: the later windows never completed.
        let w = window_times(&marks[..8], 10, 999);
        assert_eq!(w[0].0, 0.8f64.max(w[0].0));
        assert_eq!(w[1], (WINDOW_CAP_S, 10.0));
        assert_eq!(w[2], (WINDOW_CAP_S, 20.0));
        let w = window_times(&[], 10, 999);
        assert_eq!(w[0], (WINDOW_CAP_S, 0.0));
        assert_eq!(w[1], (WINDOW_CAP_S, 999.0));
    }

    #[test]
    fn the_client_timeline_marks_each_chunk_read() {
        let text = "name = \"t\"\nduration_s = 10.0\nseed = 1\n\
            [[path]]\nname = \"a\"\nrate_mbps = 20.0\ndelay_ms = 10.0\n\
            [app]\nkind = \"bulk\"\nbytes = 1_000_000\n";
        let scenario = ScenarioFile::parse(text, std::path::Path::new("t.toml"))
            .unwrap()
            .resolve(1)
            .unwrap();
        TIMELINE.with(|t| {
            *t.borrow_mut() = Timeline {
                chunk: 250_000,
                read: 0,
                marks: Vec::new(),
            }
        });
        let (scheduler, learning) = setup(Variant::MinRtt, 1, &[]).unwrap();
        let result = simulate(&scenario, &scheduler, learning.as_ref()).unwrap();
        let marks = TIMELINE.with(|t| {
            let mut t = t.borrow_mut();
            t.chunk = 0;
            std::mem::take(&mut t.marks)
        });
        assert_eq!(marks.len(), 4, "{marks:?}");
        assert!(
            marks
                .windows(2)
                .all(|m| m[0].0 <= m[1].0 && m[0].1 < m[1].1)
        );
        // The last mark is the download's end; 250 kB at 20 Mbit/s take at least 100 ms.
        let fct_us = result.fcts[0] * 1e6;
        assert!(
            (marks[3].0 as f64 - fct_us).abs() < 1_000.0,
            "{marks:?} {fct_us}"
        );
        assert!(marks[3].0 - marks[2].0 >= 100_000, "{marks:?}");
        // About 1,400-byte packets: 250 kB is at least 178 of them.
        assert!(marks[1].1 - marks[0].1 >= 178, "{marks:?}");
    }

    #[test]
    fn downloads_start_from_the_conditions_in_force() {
        let text = "name = \"t\"\nduration_s = 10.0\nseed = 1\n\
            [[path]]\nname = \"a\"\nrate_mbps = 20.0\ndelay_ms = 10.0\n\
            changes = [{ at_s = 1.0, delay_ms = 60.0 }, { at_s = 2.0, rate_mbps = 5.0 }]\n\
            [app]\nkind = \"bulk\"\nbytes = 100_000_000\n";
        let scenario = ScenarioFile::parse(text, std::path::Path::new("t.toml"))
            .unwrap()
            .resolve(1)
            .unwrap();
        let d = download_at(&scenario, 1.5, true);
        let link = &d.paths[0].forward;
        assert_eq!(link.delay_ms, 60.0);
        assert_eq!(link.changes.len(), 1);
        assert!((link.changes[0].at_s - 0.5).abs() < 1e-9);
        assert_eq!(
            d.app,
            braid_testbed::scenario::App::Bulk {
                bytes: DOWNLOAD_BYTES
            }
        );
        let later = download_at(&scenario, 3.0, false);
        assert!(later.paths[0].forward.changes.is_empty());
        assert_ne!(condition_key(&later), condition_key(&d));
    }

    #[test]
    fn lockstep_learning_is_deterministic_and_publishes() {
        let text = "name = \"t\"\nduration_s = 3.0\nseed = 1\n\
            [[path]]\nname = \"a\"\nrate_mbps = 20.0\ndelay_ms = 10.0\n\
            changes = [{ at_s = 1.0, delay_ms = 60.0 }, { at_s = 2.0, delay_ms = 10.0 }]\n\
            [[path]]\nname = \"b\"\nrate_mbps = 10.0\ndelay_ms = 30.0\n\
            [app]\nkind = \"bulk\"\nbytes = 100_000_000\n";
        let scenario = ScenarioFile::parse(text, std::path::Path::new("t.toml"))
            .unwrap()
            .resolve(1)
            .unwrap();
        assert_eq!(change_times(&scenario), vec![1.0, 2.0]);
        let a = run_variant(&scenario, Variant::DqnOn, 3).unwrap();
        let b = run_variant(&scenario, Variant::DqnOn, 3).unwrap();
        assert!(a.published > 10, "{}", a.published);
        assert_eq!(a.result, b.result);
        assert_eq!(a.published, b.published);
        // Without a learner nothing is published and the endpoints are plain sessions.
        let plain = run_variant(&scenario, Variant::Falcon, 3).unwrap();
        assert_eq!(plain.published, 0);
        assert_eq!(
            plain.result,
            sim::run::<Session>(&scenario, &SimOptions::new(super::super::shipped_config()))
                .unwrap()
        );
    }

    /// `braid train falcon --evaluate` from the test binary (no separate build of the
    /// `braid` binary needed): the scenario files in `BRAID_EVAL_SCENARIOS` (comma-separated),
    /// the DQN-Off cache and `evaluation.md` in `BRAID_EVAL_OUT`, `BRAID_EVAL_RUNS` runs
    /// (default 2), seed 1. Run: `BRAID_EVAL_SCENARIOS=config/scenarios/falcon-static-4g-5g.toml
    /// BRAID_EVAL_OUT=/tmp/falcon-eval cargo test -p braid-proxy --features torch --lib
    /// evaluate_from_env -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement (docs/schedulers.md, falcon), not a check"]
    fn evaluate_from_env() {
        let scenarios: Vec<std::path::PathBuf> = std::env::var("BRAID_EVAL_SCENARIOS")
            .expect("BRAID_EVAL_SCENARIOS")
            .split(',')
            .map(|s| {
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../..")
                    .join(s)
            })
            .collect();
        let out =
            std::path::PathBuf::from(std::env::var("BRAID_EVAL_OUT").expect("BRAID_EVAL_OUT"));
        let runs = std::env::var("BRAID_EVAL_RUNS")
            .ok()
            .and_then(|r| r.parse().ok())
            .unwrap_or(2);
        let options = TrainOptions {
            scenarios,
            out: out.clone(),
            device: "cpu".into(),
            seed: 1,
            episodes: 1,
            steps: 16,
            duration_s: None,
            command: format!(
                "evaluate_from_env (runs {runs}{}{})",
                std::env::var("BRAID_EVAL_PARAMS")
                    .map(|p| format!(", BRAID_EVAL_PARAMS={p}"))
                    .unwrap_or_default(),
                if std::env::var_os("BRAID_EVAL_WINDOW").is_some() {
                    ", BRAID_EVAL_WINDOW=1"
                } else {
                    ""
                }
            ),
        };
        let params = std::env::var("BRAID_EVAL_PARAMS")
            .unwrap_or_default()
            .split(',')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (name, value) = p
                    .split_once('=')
                    .expect("BRAID_EVAL_PARAMS: name=value,...");
                (name.to_owned(), value.parse().expect("a number"))
            })
            .collect();
        let eval = EvalConfig {
            params,
            window: std::env::var_os("BRAID_EVAL_WINDOW").is_some(),
            variants: std::env::var("BRAID_EVAL_VARIANTS")
                .unwrap_or_default()
                .split(',')
                .filter(|v| !v.is_empty())
                .map(|v| {
                    Variant::ALL
                        .into_iter()
                        .find(|k| k.name() == v)
                        .expect("BRAID_EVAL_VARIANTS: variant names, comma-separated")
                })
                .collect(),
        };
        let report = run_with(&options, runs, &eval).unwrap();
        println!("{report}");
        let name = std::env::var("BRAID_EVAL_NAME").unwrap_or_else(|_| "evaluation".into());
        std::fs::write(out.join(format!("{name}.md")), report).unwrap();
    }

    /// The daemon check's links in the simulator (30 and 20 Mbit/s, 300-packet queues, the first
    /// link's one-way delay 10 ↔ 60 ms every 6 s, a bulk transfer for 30 s): how many changes
    /// FALCON's detectors declare on the server, with both detectors and without any delay
    /// step, for each propagation-delay window of `BRAID_RTT_WINDOWS` (ms, comma-separated;
    /// default `0,10000`; 0: group means), and with `BRAID_LOSS_OFF` set also with the loss
    /// detector off (`loss_group` 100,000). Run: `BRAID_LOSS_OFF=1
    /// BRAID_RTT_WINDOWS=0,500,1000,10000 cargo test -p braid-proxy --features torch --lib
    /// falcon_change_counts -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement (docs/schedulers.md, falcon), not a check"]
    fn falcon_change_counts_on_the_daemon_check_links() {
        let text = "name = \"d\"\nduration_s = 30.0\nseed = 1\n\
            [[path]]\nname = \"wifi\"\nrate_mbps = 30.0\ndelay_ms = 10.0\nqueue_packets = 300\n\
            changes = [{ at_s = 0.0, delay_ms = 10.0 }, { at_s = 6.0, delay_ms = 60.0 }]\n\
            changes_period_s = 12.0\n\
            [[path]]\nname = \"lte\"\nrate_mbps = 20.0\ndelay_ms = 20.0\nqueue_packets = 300\n\
            [app]\nkind = \"bulk\"\nbytes = 1_000_000_000\n";
        let scenario = ScenarioFile::parse(text, std::path::Path::new("d.toml"))
            .unwrap()
            .resolve(1)
            .unwrap();
        let mut rows = Vec::new();
        let windows: Vec<f64> = std::env::var("BRAID_RTT_WINDOWS")
            .ok()
            .map(|w| w.split(',').filter_map(|x| x.parse().ok()).collect())
            .unwrap_or_else(|| vec![0.0, 10_000.0]);
        for window in windows {
            rows.push(("both detectors", 32.0, true, window));
            if std::env::var_os("BRAID_LOSS_OFF").is_some() {
                rows.push(("loss detector off", 100_000.0, true, window));
                rows.push((
                    "loss detector off, no delay steps",
                    100_000.0,
                    false,
                    window,
                ));
            }
            rows.push(("no delay steps", 32.0, false, window));
        }
        for (name, loss_group, steps, window) in rows {
            let mut scenario = scenario.clone();
            if !steps {
                scenario.paths[0].forward.changes.clear();
                scenario.paths[0].reverse.changes.clear();
            }
            let mut scheduler = super::super::shipped_config();
            scheduler.set("loss_group", loss_group).unwrap();
            scheduler.set("rtt_window_ms", window).unwrap();
            let result = sim::run::<Lockstep>(&scenario, &SimOptions::new(scheduler)).unwrap();
            let stats = SERVER_STATS.with(|c| c.take()).unwrap();
            println!(
                "rtt_window_ms {window}, {name}: {} changes declared in 30 s (true delay steps: \
                 {}), goodput {:.1} Mbit/s, {} of {} decisions by the minRTT fallback",
                stats.changes,
                if steps { 4 } else { 0 },
                result.metrics.goodput_mbps.unwrap_or(0.0),
                stats.fallbacks,
                stats.decisions
            );
        }
    }
}
