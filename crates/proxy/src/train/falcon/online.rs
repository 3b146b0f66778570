//! FALCON's online learning module in the daemon (feature `torch`; FALCON Alg. 1 lines 6-15,
//! §IV-B "asynchronous learning"): one learner thread per process, fed by every session's
//! scheduler through one experience queue. On a transition flagged as a detected change it loads
//! the matching meta-model, fine-tunes it K = 16 steps and publishes the new policy into the
//! weight slot that every scheduler reads (latest wins, never waits).

use std::sync::OnceLock;

use braid_learners::falcon::train::{FalconHyper, FalconOnline};
use braid_learners::torch::tch;
use braid_learners::{Learner, LearnerConfig};
use braid_sched_core::sched::falcon::{FalconLink, FalconWeights};
use braid_sched_core::slot::{experience_queue, weight_slot};

/// Transitions waiting for the learner (one per decision and session).
const QUEUE_CAPACITY: usize = 1 << 16;

/// The process's online learner and the ends the schedulers use.
pub(super) struct Online {
    /// The schedulers' ends of the learner.
    pub link: FalconLink,
}

fn start() -> Result<Online, String> {
    let weights = super::shipped_weights()
        .map(|w| FalconWeights::clone(w))
        .unwrap_or_else(FalconWeights::minrtt);
    // Small steps: more threads only contend with the I/O threads.
    tch::set_num_threads(1);
    let online =
        FalconOnline::new(FalconHyper::default(), weights.clone()).map_err(|e| e.to_string())?;
    let (sender, receiver) = experience_queue(QUEUE_CAPACITY).map_err(|e| e.to_string())?;
    let (writer, reader) = weight_slot(weights);
    let config = LearnerConfig {
        name: "braid-falcon-learner".to_owned(),
        max_batch: 64,
        min_batch: 1,
        ..LearnerConfig::default()
    };
    crate::train::keep_until_stopped(
        Learner::spawn(config, receiver, writer, online).map_err(|e| e.to_string())?,
    );
    Ok(Online {
        link: FalconLink {
            weights: reader,
            experience: sender,
        },
    })
}

/// The process's online learner, started on first use; `None` if it could not start.
pub(super) fn shared() -> Option<&'static Online> {
    static ONLINE: OnceLock<Option<Online>> = OnceLock::new();
    crate::train::process_learner(&ONLINE, "falcon", start)
}
