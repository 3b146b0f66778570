//! `braid train edar` (feature `torch`): EdAR §V-B, Alg. 1. Data collection: for every scenario,
//! `episodes` simulations with the always-normal policy, as many with the always-redundant one
//! and as many with a random action per interval (seeds `seed`, `seed + 1`, …; each seed is a
//! new random realisation of the scenario's ranges and of the links' randomness); offline
//! learning: `steps` DQN steps on the replay buffer of all their transitions. Writes
//! `edar.safetensors` and `PROVENANCE.md` into the output directory.
//!
//! The switching episodes are braid's addition to Alg. 1: with the two fixed policies alone,
//! every transition has `a_{t−1} = a_t` (the previous action is part of the state), so the
//! Q-value of changing the mode is never trained, and the greedy policy of such a model was
//! measured to alternate between the modes interval by interval (docs/schedulers.md, EdAR).

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use braid_learners::Provenance;
use braid_learners::edar::to_model;
use braid_learners::edar::train::{EdarDqn, EdarHyper};
use braid_learners::torch::tch::{self, Device};
use braid_sched_core::SchedulerConfig;
use braid_sched_core::sched::edar::{EdarConfig, EdarPolicy, EdarTransition};
use braid_sched_core::slot::{ExperienceReceiver, experience_queue};
use braid_testbed::ScenarioFile;
use braid_testbed::sim::{self, SimOptions};

use crate::session::Session;
use crate::train::{TrainError, TrainOptions, TrainSummary, device};

/// Transitions one episode may queue before the trainer drains them.
const QUEUE_CAPACITY: usize = 1 << 18;

fn drain(receiver: &mut ExperienceReceiver<EdarTransition>, into: &mut Vec<EdarTransition>) -> u64 {
    let mut n = 0;
    while let Some(t) = receiver.recv() {
        into.push(t);
        n += 1;
    }
    n
}

/// Collects the transitions of every (scenario, policy, episode) into `into`; returns how many.
fn collect(options: &TrainOptions, into: &mut Vec<EdarTransition>) -> Result<u64, TrainError> {
    let (sender, mut receiver) = experience_queue::<EdarTransition>(QUEUE_CAPACITY)
        .map_err(|e| TrainError::Runtime(e.to_string()))?;
    let mut total = 0;
    for path in &options.scenarios {
        let file = ScenarioFile::load(path).map_err(|e| TrainError::Usage(e.to_string()))?;
        for policy in [
            EdarPolicy::Normal,
            EdarPolicy::Redundant,
            EdarPolicy::Switching,
        ] {
            for episode in 0..options.episodes {
                let seed = options.seed.wrapping_add(u64::from(episode));
                let mut scenario = file
                    .resolve(seed)
                    .map_err(|e| TrainError::Usage(e.to_string()))?;
                if let Some(d) = options.duration_s {
                    scenario.duration = Duration::from_secs_f64(d);
                }
                let config = EdarConfig {
                    policy,
                    seed,
                    receive_buffer_bytes: scenario
                        .receive_buffer_bytes
                        .map_or(131_072.0, |b| b as f64),
                    experience: Some(sender.clone()),
                    ..EdarConfig::default()
                };
                let options = SimOptions::new(SchedulerConfig::Edar(config));
                sim::run::<Session>(&scenario, &options)
                    .map_err(|e| TrainError::Runtime(format!("{}: {e}", path.display())))?;
                let n = drain(&mut receiver, into);
                eprintln!(
                    "braid train edar: {} {policy:?} seed {seed}: {n} transitions",
                    file.name()
                );
                total += n;
            }
        }
    }
    if sender.dropped() > 0 {
        eprintln!(
            "braid train edar: {} transitions dropped (queue full)",
            sender.dropped()
        );
    }
    Ok(total)
}

/// Runs `braid train edar`.
pub fn run(options: &TrainOptions) -> Result<TrainSummary, TrainError> {
    if options.scenarios.is_empty() {
        return Err(TrainError::Usage("--scenarios: at least one file".into()));
    }
    if options.episodes == 0 || options.steps == 0 {
        return Err(TrainError::Usage(
            "--episodes and --steps must be at least 1".into(),
        ));
    }
    if options
        .duration_s
        .is_some_and(|d| !(d.is_finite() && d > 0.0 && d <= 86_400.0))
    {
        return Err(TrainError::Usage(format!(
            "--duration-s {:?}: expected seconds in (0, 86400]",
            options.duration_s
        )));
    }
    let device = device(&options.device)?;
    if device == Device::Cpu {
        // One intra-op thread: the small batches gain nothing from more, and the machine's
        // cores are shared.
        tch::set_num_threads(1);
    }
    let started = Instant::now();
    let mut transitions = Vec::new();
    let samples = collect(options, &mut transitions)?;
    // Alg. 1 line 10: the replay buffer holds every collected transition.
    let defaults = EdarHyper::default();
    let hyper = EdarHyper {
        seed: options.seed,
        replay_capacity: defaults.replay_capacity.max(transitions.len()),
        ..defaults
    };
    let mut dqn =
        EdarDqn::new(hyper.clone(), device).map_err(|e| TrainError::Runtime(e.to_string()))?;
    for t in transitions {
        dqn.push(t);
    }
    let collected_s = started.elapsed().as_secs_f64();
    let mut recent = std::collections::VecDeque::with_capacity(100);
    for step in 1..=options.steps {
        let loss = dqn
            .train_step()
            .map_err(|e| TrainError::Runtime(e.to_string()))?
            .ok_or_else(|| TrainError::Runtime("no transitions were collected".into()))?;
        if recent.len() == 100 {
            recent.pop_front();
        }
        recent.push_back(loss);
        if step % 500 == 0 || step == options.steps {
            let mean = recent.iter().sum::<f64>() / recent.len() as f64;
            eprintln!("braid train edar: step {step}: loss (mean of last 100) {mean:.5}");
        }
    }
    let final_loss = recent.iter().sum::<f64>() / recent.len().max(1) as f64;
    let seconds = started.elapsed().as_secs_f64();
    let network = dqn
        .export()
        .map_err(|e| TrainError::Runtime(e.to_string()))?;
    let created = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let scenarios: Vec<String> = options
        .scenarios
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    let source = format!(
        "EdAR offline DQN (Alg. 1): policies normal+redundant+switching, {} episodes each of {}; \
         seed {}; \
         {} transitions; {} steps, batch {}, Adam lr {}, gamma {}, tau {}",
        options.episodes,
        scenarios.join(", "),
        options.seed,
        samples,
        options.steps,
        hyper.batch,
        hyper.learning_rate,
        hyper.gamma,
        hyper.tau
    );
    let mut provenance = Provenance::new(created, source);
    provenance
        .extra
        .insert("command".into(), options.command.clone());
    provenance
        .extra
        .insert("final_loss".into(), format!("{final_loss:.6}"));
    provenance
        .extra
        .insert("train_seconds".into(), format!("{seconds:.1}"));
    provenance
        .extra
        .insert("device".into(), options.device.clone());
    let model = to_model(&network, provenance).map_err(|e| TrainError::Runtime(e.to_string()))?;
    std::fs::create_dir_all(&options.out)
        .map_err(|e| TrainError::Runtime(format!("{}: {e}", options.out.display())))?;
    let model_path = options.out.join("edar.safetensors");
    model
        .save(&model_path)
        .map_err(|e| TrainError::Runtime(e.to_string()))?;
    let summary = TrainSummary {
        model: model_path,
        samples,
        steps: options.steps,
        final_loss,
        seconds,
    };
    write_provenance(options, &summary, collected_s, created)?;
    Ok(summary)
}

fn write_provenance(
    options: &TrainOptions,
    summary: &TrainSummary,
    collected_s: f64,
    created: u64,
) -> Result<(), TrainError> {
    let mut text = crate::train::provenance_header(
        "EdAR weights",
        options,
        created,
        "episode i uses seed + i",
        "scenarios",
    );
    let _ = writeln!(
        text,
        "- data collection (Alg. 1): always-normal, always-redundant and switching (a random \
         action per interval), {} episodes each per scenario, {} simulated s per episode",
        options.episodes,
        options
            .duration_s
            .map_or("the scenario's".to_owned(), |d| format!("{d}"))
    );
    let _ = writeln!(
        text,
        "- transitions: {} (the replay buffer holds them all)",
        summary.samples
    );
    let _ = writeln!(
        text,
        "- training: {} DQN steps, batch 32, Adam lr 1e-4, gamma 0.6, tau 0.01",
        summary.steps
    );
    let _ = writeln!(
        text,
        "- final loss (mean of the last 100 steps): {:.6}",
        summary.final_loss
    );
    let path =
        crate::train::write_provenance_file(options, text, summary, ("collecting", collected_s))?;
    if Path::new(&summary.model).exists() {
        eprintln!(
            "braid train edar: wrote {} and {}",
            summary.model.display(),
            path.display()
        );
    }
    Ok(())
}
