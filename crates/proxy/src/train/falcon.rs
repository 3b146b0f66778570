//! FALCON in the proxy: its shipped weights (`models/falcon/falcon.safetensors`: the deployed
//! policy and the meta-models per condition class) and, with the `torch` feature,
//! `braid train falcon`: FALCON's offline learning module (Alg. 1 lines 1-5) over the
//! deterministic simulator with the real session core ([`offline`]).

use std::sync::{Arc, OnceLock};

use braid_learners::falcon::load;
use braid_sched_core::SchedulerConfig;
use braid_sched_core::sched::falcon::{FalconConfig, FalconWeights};

use super::models_dir;
#[cfg(feature = "torch")]
use super::{TrainError, TrainOptions, TrainSummary};

/// The shipped model file, relative to the models directory.
pub const SHIPPED_MODEL: &str = "falcon/falcon.safetensors";

/// The shipped FALCON weights, loaded once per process; `None` (and one line on stderr) when the
/// file is missing or invalid.
pub fn shipped_weights() -> Option<&'static Arc<FalconWeights>> {
    static SHIPPED: OnceLock<Option<Arc<FalconWeights>>> = OnceLock::new();
    SHIPPED
        .get_or_init(|| {
            let path = models_dir().join(SHIPPED_MODEL);
            match load(&path) {
                Ok(weights) => Some(Arc::new(weights)),
                Err(e) => {
                    eprintln!(
                        "braid: falcon runs without trained weights (minRTT-equivalent network): {}: {e}",
                        path.display()
                    );
                    None
                }
            }
        })
        .as_ref()
}

/// FALCON's default configuration with the shipped weights (no learner: greedy).
pub fn shipped_config() -> SchedulerConfig {
    SchedulerConfig::Falcon(FalconConfig {
        weights: shipped_weights().cloned(),
        ..FalconConfig::default()
    })
}

/// The daemon's FALCON configuration. Without `torch`: the shipped weights, greedy. With
/// `torch`: online learning (Alg. 1's online module): one learner thread per process (started
/// by the first call) fine-tunes the matching meta-model K = 16 steps after each change a
/// scheduler detects and publishes the policy into the slot all sessions' schedulers read;
/// decisions are ε-greedy with ε_s = 0.1 (§V-A). If the learner cannot start, the shipped
/// weights run greedily and the reason goes to stderr.
pub fn daemon_config() -> SchedulerConfig {
    #[cfg(feature = "torch")]
    if let Some(online) = online::shared() {
        return SchedulerConfig::Falcon(FalconConfig {
            weights: shipped_weights().cloned(),
            learner: Some(online.link.clone()),
            ..FalconConfig::default()
        });
    }
    shipped_config()
}

#[cfg(feature = "torch")]
mod online;

#[cfg(feature = "torch")]
pub mod offline;

#[cfg(feature = "torch")]
pub mod evaluate;

/// `braid train falcon`: simulate tasks with exploring FALCON, meta-train with Reptile, write
/// `falcon.safetensors` and `PROVENANCE.md` into `options.out`.
#[cfg(feature = "torch")]
pub fn run(options: &TrainOptions) -> Result<TrainSummary, TrainError> {
    offline::run(options)
}
