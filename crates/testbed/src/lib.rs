//! braid's testbed: the deterministic simulator, the real-time link emulator, scenario files
//! and comparison reports.
#![warn(missing_docs)]

pub mod emu;
pub mod input;
pub mod link;
pub mod report;
pub mod scenario;
pub mod sim;
pub mod trace;

pub use link::{Capacity, DropReason, JitterDistribution, Link, LinkConfig, LinkStats, Verdict};
pub use scenario::{
    App, CrossSpec, Objective, ObjectiveKind, PathSpec, Scenario, ScenarioError, ScenarioFile,
};
pub use trace::{Trace, TraceError};
