//! EdAR in the proxy: its shipped weights (`models/edar/edar.safetensors`) and, with the `torch`
//! feature, `braid train edar`: offline pre-training as in EdAR §V-B, Alg. 1. Episodes are
//! simulations of the given scenarios (the deterministic simulator driving the real session)
//! with the scheduler in one of the two fixed policies, always-normal and always-redundant, each
//! recording its transitions `(s_t, a_t, r_t, s_{t+1})` through the experience queue; the DQN
//! (`braid_learners::edar::train`) then trains on the replay buffer of all of them.

use std::sync::OnceLock;

use braid_learners::Model;
use braid_learners::edar::from_model;
use braid_sched_core::SchedulerConfig;
use braid_sched_core::sched::edar::{EdarConfig, EdarNetwork};
use braid_sched_core::slot::weight_slot;

use super::models_dir;
#[cfg(feature = "torch")]
use super::{TrainError, TrainOptions, TrainSummary};

/// The shipped model file, relative to the models directory.
pub const SHIPPED_MODEL: &str = "edar/edar.safetensors";

/// The shipped EdAR network, loaded once per process; `None` (and one line on stderr) when the
/// file is missing or invalid.
pub fn shipped_network() -> Option<&'static EdarNetwork> {
    static SHIPPED: OnceLock<Option<EdarNetwork>> = OnceLock::new();
    SHIPPED
        .get_or_init(|| {
            let path = models_dir().join(SHIPPED_MODEL);
            match Model::load(&path)
                .map_err(|e| e.to_string())
                .and_then(|m| from_model(&m).map_err(|e| format!("{}: {e}", path.display())))
            {
                Ok(network) => Some(network),
                Err(e) => {
                    eprintln!("braid: edar runs without weights (normal transmission): {e}");
                    None
                }
            }
        })
        .as_ref()
}

/// EdAR's default configuration with the shipped weights in a fresh slot (greedy, ε = 0).
pub fn shipped_config() -> SchedulerConfig {
    let weights = shipped_network().map(|n| weight_slot(n.clone()).1);
    SchedulerConfig::Edar(EdarConfig {
        weights,
        ..EdarConfig::default()
    })
}

/// ε of the daemon's online exploration (Alg. 2) with the `torch` feature.
pub const ONLINE_EPSILON: f64 = 0.05;

/// The daemon's EdAR configuration. Without `torch`: the shipped weights, greedy. With `torch`:
/// online learning as in Alg. 2: one learner thread per process (started by the first call)
/// trains a DQN that starts from the shipped weights on every session's transitions and
/// publishes each new network into the weight slot all sessions' schedulers read; actions are
/// ε-greedy with ε = [`ONLINE_EPSILON`]. If the learner cannot start, the shipped weights run
/// greedily and the reason goes to stderr.
pub fn daemon_config() -> SchedulerConfig {
    #[cfg(feature = "torch")]
    if let Some(online) = online::shared() {
        return SchedulerConfig::Edar(EdarConfig {
            epsilon: ONLINE_EPSILON,
            weights: Some(online.reader.clone()),
            experience: Some(online.sender.clone()),
            ..EdarConfig::default()
        });
    }
    shipped_config()
}

#[cfg(feature = "torch")]
mod online;

#[cfg(feature = "torch")]
mod offline;

/// `braid train edar`: collect transitions with the fixed policies, train, write the model and
/// its provenance into `options.out`.
#[cfg(feature = "torch")]
pub fn run(options: &TrainOptions) -> Result<TrainSummary, TrainError> {
    offline::run(options)
}
