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
}

/// The real session as a simulator endpoint, stepping the run's learner after every packet it
/// sends.
pub struct Lockstep {
    session: Session,
    learning: Option<Rc<RefCell<Learning>>>,
    server: bool,
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
            });
        }
        Ok(Lockstep {
            session: <Session as Endpoint>::create(setup)?,
            learning,
            server: setup.side == Side::Server,
        })
    }

    fn handle_datagram(
        &mut self,
        path: PathId,
        data: &[u8],
        now: Timestamp,
    ) -> Result<(), EndpointError> {
        Endpoint::handle_datagram(&mut self.session, path, data, now)
    }

    fn poll_transmit(&mut self, now: Timestamp, buf: &mut [u8]) -> Option<(PathId, usize)> {
        let sent = Endpoint::poll_transmit(&mut self.session, now, buf);
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
        Endpoint::read(&mut self.session, flow, out)
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
fn setup(variant: Variant, seed: u64) -> Result<(SchedulerConfig, Option<Shared>), TrainError> {
    let hyper = FalconHyper {
        seed,
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
    let result = sim::run::<Lockstep>(
        scenario,
        &SimOptions {
            scheduler: scheduler.clone(),
        },
    );
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
    let (scheduler, learning) = setup(variant, seed)?;
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
) -> Result<FalconWeights, TrainError> {
    let probe = download_at(
        &file
            .resolve(50_000)
            .map_err(|e| TrainError::Usage(e.to_string()))?,
        t,
        false,
    );
    let key = format!(
        "{}|{DQN_OFF_DOWNLOADS}|{DQN_OFF_STEPS}|{DQN_OFF_SEED}|{DOWNLOAD_BYTES}",
        condition_key(&probe)
    );
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
        data.extend(super::offline::collect(&scenario, seed)?.transitions);
    }
    if data.is_empty() {
        return Err(runtime(format!("{}: DQN-Off data is empty", file.name())));
    }
    let hyper = FalconHyper {
        seed: DQN_OFF_SEED,
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
) -> Result<Curves, TrainError> {
    let reference = dqn_off(&options.out, file, 0.0)?;
    let mut times: Vec<(Variant, Vec<Vec<Download>>, u64)> = Vec::new();
    for variant in DOWNLOAD_VARIANTS {
        let mut per_run = Vec::new();
        let mut published = 0;
        for r in 0..runs {
            let learner_seed = options.seed.wrapping_add(u64::from(r));
            let (scheduler, learning) = setup(variant, learner_seed)?;
            if let Some(l) = &learning
                && variant == Variant::DqnOff
            {
                l.borrow_mut().writer.publish(reference.clone());
            }
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
        .map(|&t| dqn_off(&options.out, file, t))
        .collect::<Result<_, _>>()?;
    let mut out = Vec::new();
    for variant in DOWNLOAD_VARIANTS {
        let mut fcts = Vec::new();
        let mut published = 0;
        for r in 0..runs {
            let learner_seed = options.seed.wrapping_add(u64::from(r));
            let (scheduler, learning) = setup(variant, learner_seed)?;
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
    Ok((interval, out))
}

/// Runs the evaluation over `options.scenarios` with `runs` seeds each; returns the report.
/// A file without changes is a static condition (§VI-B1 convergence test); one with changes a
/// stress-test timeline (§VI-B2).
pub fn run(options: &TrainOptions, runs: u32) -> Result<String, TrainError> {
    if runs == 0 || runs > 100 {
        return Err(TrainError::Usage(format!(
            "--runs {runs}: expected 1..=100"
        )));
    }
    // Small steps, one thread: the measurement must not depend on the machine's cores.
    tch::set_num_threads(1);
    std::fs::create_dir_all(&options.out)
        .map_err(|e| TrainError::Usage(format!("--out {}: {e}", options.out.display())))?;
    let started = Instant::now();
    let mut report = String::new();
    let _ = writeln!(
        report,
        "# FALCON adaptation in the simulator (online learning in lockstep)\n\n\
         Command: `{}`\n\nEvery measurement is a 2 MB download on a fresh connection; learners \
         carry over from one download to the next. Relative score = median download time of \
         DQN-Off (the same DQN trained offline on each condition, cached in `{}/dqn-off/`) / \
         median download time of the variant. {runs} run(s), learner seeds {}..{}.\n",
        options.command,
        options.out.display(),
        options.seed,
        options.seed + u64::from(runs) - 1
    );
    let mut convergence_rows = String::new();
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
        if change_times(&probe).is_empty() {
            let curves = convergence(options, &file, runs, started)?;
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
            let (interval, results) = stress(options, &file, runs, started)?;
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
            sim::run::<Session>(
                &scenario,
                &SimOptions {
                    scheduler: super::super::shipped_config()
                }
            )
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
            command: format!("evaluate_from_env (runs {runs})"),
        };
        let report = run(&options, runs).unwrap();
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
            let result = sim::run::<Lockstep>(&scenario, &SimOptions { scheduler }).unwrap();
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
