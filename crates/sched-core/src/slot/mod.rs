//! The hand-off between the hot path and a learner thread (DESIGN.md "learners"; STYLE rule 6):
//! experience flows out through a bounded queue whose producer never blocks
//! ([`experience_queue`]), and weights flow back through a latest-wins, versioned slot that a
//! scheduler reads at its next decision without ever waiting ([`weight_slot`]).
//!
//! Both are built on the primitives of the private `sync` module, which the `loom` feature swaps
//! for loom's model types; `tests/loom_slot.rs` explores every interleaving of small scenarios.

mod experience;
mod sync;
mod weights;

pub use experience::{
    ExperienceReceiver, ExperienceSender, MAX_QUEUE_CAPACITY, QueueCapacityError, experience_queue,
};
pub use weights::{SlotReader, SlotWriter, weight_slot};
