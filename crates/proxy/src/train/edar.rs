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

#[cfg(feature = "torch")]
mod offline;

/// `braid train edar`: collect transitions with the fixed policies, train, write the model and
/// its provenance into `options.out`.
#[cfg(feature = "torch")]
pub fn run(options: &TrainOptions) -> Result<TrainSummary, TrainError> {
    offline::run(options)
}
