//! `braid train falcon`: FALCON's offline learning module (FALCON Alg. 1 lines 1-5, §IV-A,
//! §V-A) over the deterministic simulator driving the real session core.
//!
//! 1. **Tasks** (§IV-A, "randomly sample a task from the task distribution"): one task is one
//!    simulated run. Each `--scenarios` file gives `--episodes` tasks (seeds `seed + i`); on top,
//!    `27 × episodes` synthetic two-path bulk transfers of 2 MB (§V-B) draw, per path, one of the
//!    27 coarse condition classes of §V-A and then loss, mean RTT and RTT deviation uniformly
//!    inside it (open ranges capped at 15 % loss, 400 ms, 120 %), and a rate in
//!    [30, 1100] Mbit/s (Table I's extremes, as §VI-B2 draws its conditions).
//! 2. **Experience**: FALCON runs each task exploring with ε_l = 0.3 (§IV-B, §V-A) and sends its
//!    transitions through the experience queue, exactly as online.
//! 3. **Meta-learning**: Reptile (K = 16 steps of minibatch 32, λ = 0.1) over all tasks gives
//!    the deployed `policy`; from it, Reptile over the tasks in which some path is in class `c`
//!    gives `meta-c`. `--steps` is the gradient-step budget of each model (steps / 16 Reptile
//!    iterations).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use braid_learners::Provenance;
use braid_learners::falcon::to_model;
use braid_learners::falcon::train::{FalconDqn, FalconHyper, meta_train};
use braid_sched_core::SchedulerConfig;
use braid_sched_core::sched::falcon::{
    CLASSES, FalconConfig, FalconLink, FalconTransition, FalconWeights, condition_class,
};
use braid_sched_core::slot::{experience_queue, weight_slot};
use braid_testbed::sim::{self, SimOptions};
use braid_testbed::{Scenario, ScenarioFile};

use crate::session::Session;
use crate::train::{TrainError, TrainOptions, TrainSummary, device};

/// Transitions one task may queue.
const QUEUE_CAPACITY: usize = 1 << 18;
/// ε_l of §V-A, the exploration while building the meta-models.
const EPSILON_LARGE: f64 = 0.3;

/// One task: its experience and the condition class of each path.
pub(crate) struct Task {
    pub(crate) transitions: Vec<FalconTransition>,
    classes: Vec<u8>,
}

fn runtime(e: impl std::fmt::Display) -> TrainError {
    TrainError::Runtime(e.to_string())
}

/// Runs `braid train falcon`.
pub fn run(options: &TrainOptions) -> Result<TrainSummary, TrainError> {
    let started = Instant::now();
    let device = device(&options.device)?;
    if device == braid_learners::torch::tch::Device::Cpu {
        // One intra-op thread, as EdAR's training and every online learner use: the network
        // and minibatches are small, so more threads cost CPU without saving time (22,400
        // steps here: 8.9 s wall and 8.3 s CPU on one thread, 9.8 s and 16.9 s on two).
        braid_learners::torch::tch::set_num_threads(1);
    }
    if options.steps < 16 {
        return Err(TrainError::Usage(format!(
            "--steps {}: FALCON needs at least 16 (one Reptile iteration of K = 16)",
            options.steps
        )));
    }
    std::fs::create_dir_all(&options.out)
        .map_err(|e| TrainError::Usage(format!("--out {}: {e}", options.out.display())))?;
    let tasks = collect_all(options)?;
    let collected_s = started.elapsed().as_secs_f64();
    let samples: usize = tasks.iter().map(|t| t.transitions.len()).sum();
    if samples == 0 {
        return Err(TrainError::Runtime(
            "the simulations produced no transitions".into(),
        ));
    }
    let iterations = usize::try_from(options.steps / 16).unwrap_or(usize::MAX);
    let hyper = FalconHyper {
        seed: options.seed,
        ..FalconHyper::default()
    };
    let mut dqn = FalconDqn::new(hyper, device).map_err(runtime)?;
    let all: Vec<Vec<FalconTransition>> = tasks.iter().map(|t| t.transitions.clone()).collect();
    let final_loss = meta_train(&mut dqn, &all, iterations).map_err(runtime)?;
    let policy = dqn.export().map_err(runtime)?;
    let mut steps = dqn.steps();
    let mut meta = vec![None; CLASSES];
    for (class, slot) in meta.iter_mut().enumerate() {
        let group: Vec<Vec<FalconTransition>> = tasks
            .iter()
            .filter(|t| t.classes.iter().any(|c| usize::from(*c) == class))
            .map(|t| t.transitions.clone())
            .collect();
        if group.iter().all(Vec::is_empty) {
            continue;
        }
        dqn.load(&policy).map_err(runtime)?;
        let before = dqn.steps();
        meta_train(&mut dqn, &group, iterations).map_err(runtime)?;
        steps += dqn.steps() - before;
        *slot = Some(dqn.export().map_err(runtime)?);
    }
    let classes = meta.iter().filter(|m| m.is_some()).count();
    let weights = FalconWeights::new(policy, meta).map_err(runtime)?;
    let seconds = started.elapsed().as_secs_f64();
    let created = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut provenance = Provenance::new(
        created,
        format!(
            "braid train falcon: Reptile (K=16, lambda=0.1, Adam 1e-3, batch 32) over {} \
             simulated tasks, seed {}, {} iterations per model",
            tasks.len(),
            options.seed,
            iterations
        ),
    );
    provenance
        .extra
        .insert("command".into(), options.command.clone());
    provenance
        .extra
        .insert("device".into(), options.device.clone());
    provenance
        .extra
        .insert("transitions".into(), samples.to_string());
    provenance
        .extra
        .insert("final_loss".into(), format!("{final_loss:.6}"));
    let model = options.out.join("falcon.safetensors");
    to_model(&weights, provenance)
        .and_then(|m| m.save(&model))
        .map_err(runtime)?;
    let summary = TrainSummary {
        model,
        samples: samples as u64,
        steps,
        final_loss,
        seconds,
    };
    write_provenance(options, &summary, &tasks, classes, collected_s, created)?;
    Ok(summary)
}

/// Simulates every task.
fn collect_all(options: &TrainOptions) -> Result<Vec<Task>, TrainError> {
    let mut tasks = Vec::new();
    for path in &options.scenarios {
        let file = ScenarioFile::load(path).map_err(|e| TrainError::Usage(e.to_string()))?;
        for episode in 0..options.episodes {
            let seed = options.seed.wrapping_add(u64::from(episode));
            let mut scenario = file
                .resolve(seed)
                .map_err(|e| TrainError::Usage(e.to_string()))?;
            if let Some(d) = options.duration_s {
                scenario.duration = std::time::Duration::from_secs_f64(d.max(0.001));
            }
            tasks.push(collect(&scenario, seed)?);
        }
    }
    let mut rng = options.seed | 1;
    let synthetic = 27 * options.episodes as usize;
    for i in 0..synthetic {
        let text = synthetic_task(&mut rng, i);
        let name = PathBuf::from(format!("synthetic-task-{i}.toml"));
        let seed = options.seed.wrapping_add(1_000 + i as u64);
        let scenario = ScenarioFile::parse(&text, &name)
            .and_then(|f| f.resolve(seed))
            .map_err(runtime)?;
        tasks.push(collect(&scenario, seed)?);
    }
    Ok(tasks)
}

/// Simulates `scenario` with exploring FALCON and returns its experience.
pub(crate) fn collect(scenario: &Scenario, seed: u64) -> Result<Task, TrainError> {
    collect_with(scenario, seed, &[])
}

/// [`collect`] with FALCON parameters `params` (`(name, value)`, e.g. `choose_congested`).
pub(crate) fn collect_with(
    scenario: &Scenario,
    seed: u64,
    params: &[(String, f64)],
) -> Result<Task, TrainError> {
    let (_writer, reader) = weight_slot(FalconWeights::minrtt());
    let (sender, mut receiver) = experience_queue(QUEUE_CAPACITY).map_err(runtime)?;
    let mut config = FalconConfig {
        epsilon: EPSILON_LARGE,
        seed,
        learner: Some(FalconLink {
            weights: reader,
            experience: sender,
        }),
        ..FalconConfig::default()
    };
    for (name, value) in params {
        match config.set(name, *value) {
            Ok(true) => {}
            Ok(false) => {
                return Err(TrainError::Usage(format!(
                    "falcon has no parameter `{name}`"
                )));
            }
            Err(e) => return Err(TrainError::Usage(e.to_string())),
        }
    }
    let options = SimOptions::new(SchedulerConfig::Falcon(config));
    sim::run::<Session>(scenario, &options)
        .map_err(|e| TrainError::Runtime(format!("simulating {}: {e}", scenario.name)))?;
    let classes = scenario
        .paths
        .iter()
        .map(|p| {
            let rtt_ms = 2.0 * p.forward.delay_ms;
            let deviation_ms = p.forward.jitter_ms * std::f64::consts::SQRT_2;
            condition_class(
                p.forward.loss as f32,
                (rtt_ms * 1_000.0) as u32,
                (deviation_ms * 1_000.0) as u32,
            )
        })
        .collect();
    let mut transitions = Vec::new();
    while let Some(t) = receiver.recv() {
        transitions.push(t);
    }
    Ok(Task {
        transitions,
        classes,
    })
}

/// xorshift64 step, uniform in [0, 1).
fn uniform(state: &mut u64) -> f64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    (*state >> 11) as f64 / (1u64 << 53) as f64
}

/// The scenario text of synthetic task `index` (see the module docs).
fn synthetic_task(rng: &mut u64, index: usize) -> String {
    const LOSS: [(f64, f64); 3] = [(0.0, 0.01), (0.01, 0.05), (0.05, 0.15)];
    const RTT_MS: [(f64, f64); 3] = [(10.0, 50.0), (50.0, 200.0), (200.0, 400.0)];
    const DEVIATION: [(f64, f64); 3] = [(0.0, 0.4), (0.4, 0.8), (0.8, 1.2)];
    let mut text = format!("name = \"falcon-task-{index}\"\nduration_s = 30.0\nseed = {index}\n");
    for p in 0..2 {
        let class = ((uniform(rng) * 27.0) as usize).min(26);
        let mut pick = |r: (f64, f64)| r.0 + (r.1 - r.0) * uniform(rng);
        let loss = pick(LOSS[class / 9]);
        let rtt = pick(RTT_MS[(class / 3) % 3]);
        let deviation = pick(DEVIATION[class % 3]);
        let rate = pick((30.0, 1_100.0));
        let _ = write!(
            text,
            "[[path]]\nname = \"p{p}\"\nrate_mbps = {rate:.1}\ndelay_ms = {:.3}\n\
             jitter_ms = {:.3}\nloss = {loss:.4}\nqueue_packets = 1000\n",
            rtt / 2.0,
            rtt * deviation / std::f64::consts::SQRT_2,
        );
    }
    text.push_str("[app]\nkind = \"bulk\"\nbytes = 2_000_000\n");
    text
}

fn write_provenance(
    options: &TrainOptions,
    summary: &TrainSummary,
    tasks: &[Task],
    classes: usize,
    collected_s: f64,
    created: u64,
) -> Result<(), TrainError> {
    let mut text = crate::train::provenance_header(
        "FALCON weights",
        options,
        created,
        "scenario episode i uses seed + i; synthetic task j uses seed + 1000 + j",
        &format!("scenarios ({} episodes each)", options.episodes),
    );
    let _ = writeln!(
        text,
        "- synthetic tasks: {} (27 x episodes; two paths, classes of §V-A drawn uniformly)",
        27 * options.episodes
    );
    let _ = writeln!(
        text,
        "- tasks: {}, transitions: {} (exploration ε_l = 0.3)",
        tasks.len(),
        summary.samples
    );
    let _ = writeln!(
        text,
        "- training: Reptile, K = 16 steps of batch 32 per iteration, λ = 0.1, Adam lr 1e-3, \
         γ = 0.9, τ = 0.01; {} gradient steps in all (policy + {classes} meta-models)",
        summary.steps
    );
    let _ = writeln!(
        text,
        "- final loss (policy's last inner step): {:.6}",
        summary.final_loss
    );
    crate::train::write_provenance_file(options, text, summary, ("simulating", collected_s))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn synthetic_tasks_parse_and_cover_the_classes() {
        let mut rng = 7;
        let mut seen = [false; CLASSES];
        for i in 0..200 {
            let text = synthetic_task(&mut rng, i);
            let scenario = ScenarioFile::parse(&text, Path::new("t.toml"))
                .unwrap()
                .resolve(1)
                .unwrap();
            assert_eq!(scenario.paths.len(), 2);
            for p in &scenario.paths {
                let c = condition_class(
                    p.forward.loss as f32,
                    (2_000.0 * p.forward.delay_ms) as u32,
                    (1_000.0 * p.forward.jitter_ms * std::f64::consts::SQRT_2) as u32,
                );
                seen[usize::from(c)] = true;
            }
        }
        assert!(seen.iter().filter(|s| **s).count() >= 25);
    }
}
