//! EdAR's online learning in the daemon (feature `torch`; EdAR §V-C, Alg. 2): one learner
//! thread per process, fed by every session's scheduler through one experience queue, training a
//! DQN that starts from the shipped (pre-trained) weights and publishing each new network into
//! the weight slot that every scheduler reads (latest wins, never waits).

use std::sync::OnceLock;

use braid_learners::edar::train::{EdarDqn, EdarHyper};
use braid_learners::torch::tch::{self, Device};
use braid_learners::{Learner, LearnerConfig};
use braid_sched_core::sched::edar::{EdarNetwork, EdarTransition};
use braid_sched_core::slot::{ExperienceSender, SlotReader, experience_queue, weight_slot};

/// Transitions waiting for the learner (one per min-RTT interval and session).
const QUEUE_CAPACITY: usize = 1 << 16;

/// The process's online learner and the ends the schedulers use.
pub(super) struct Online {
    /// Where schedulers take their weights.
    pub reader: SlotReader<EdarNetwork>,
    /// Where schedulers send their transitions.
    pub sender: ExperienceSender<EdarTransition>,
}

fn start() -> Result<Online, String> {
    let network = super::shipped_network()
        .cloned()
        .unwrap_or_else(|| EdarNetwork::initial(0));
    // Small batches: more threads only contend with the I/O threads.
    tch::set_num_threads(1);
    let mut dqn = EdarDqn::new(
        EdarHyper {
            steps_per_batch: 1,
            ..EdarHyper::default()
        },
        Device::Cpu,
    )
    .map_err(|e| e.to_string())?;
    dqn.load(&network).map_err(|e| e.to_string())?;
    let (sender, receiver) = experience_queue(QUEUE_CAPACITY).map_err(|e| e.to_string())?;
    let (writer, reader) = weight_slot(network);
    let config = LearnerConfig {
        name: "braid-edar-learner".to_owned(),
        max_batch: 32,
        min_batch: 8,
        ..LearnerConfig::default()
    };
    crate::train::keep_until_stopped(
        Learner::spawn(config, receiver, writer, dqn).map_err(|e| e.to_string())?,
    );
    Ok(Online { reader, sender })
}

/// The process's online learner, started on first use; `None` if it could not start.
pub(super) fn shared() -> Option<&'static Online> {
    static ONLINE: OnceLock<Option<Online>> = OnceLock::new();
    crate::train::process_learner(&ONLINE, "edar", start)
}
