//! braid's learners: the learner thread fed by the hot path's experience queue, the model store
//! (versioned safetensors files, `docs/models.md`), and, behind the `torch` feature, training
//! with tch and export of tch networks into sched-core's pure-Rust inference parts.
//!
//! The hand-off primitives themselves (the experience queue and the weight slot) live in
//! [`braid_sched_core::slot`], so that the hot path can use them without this crate; a
//! [`Learner`] owns the consuming ends on its own thread:
//!
//! ```
//! use braid_learners::{Learner, LearnerConfig};
//! use braid_sched_core::slot::{experience_queue, weight_slot};
//!
//! let (sender, receiver) = experience_queue::<f32>(1024)?;  // hot path keeps `sender`
//! let (writer, mut reader) = weight_slot(0.0f32);            // scheduler keeps `reader`
//! sender.send(1.0);                                           // never blocks
//! sender.send(3.0);
//! let learner = Learner::spawn(LearnerConfig::default(), receiver, writer, |batch: &[f32]| {
//!     Some(batch.iter().sum::<f32>() / batch.len() as f32)  // a "training step"
//! })?;
//! let stats = learner.stop()?;
//! reader.refresh();                                           // at the next decision
//! assert_eq!((*reader.weights(), stats.experiences), (2.0, 2));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Without the `torch` feature everything here builds and runs (learned schedulers use shipped
//! weights); with it, `scripts/setup-torch.sh` provides PyTorch and the `torch` module trains and
//! exports.
#![warn(missing_docs)]

#[cfg(feature = "torch")]
pub mod dqn;
pub mod edar;
pub mod falcon;
pub mod learner;
pub mod model;
#[cfg(feature = "torch")]
pub mod torch;

pub use learner::{Learner, LearnerConfig, LearnerError, LearnerStats, TrainStep};
pub use model::{Component, Model, ModelError, Provenance};
