//! braid's linear programs: the OLMS and DaMPS LPs modelled with good_lp, their exact fast
//! solvers for hot-path sizes, and dependent rounding.
//!
//! - [`MaxRttProblem`]: OLMS eq. (4), maximise bandwidth with every `r_i v_i <= C_r`.
//! - [`BandwidthProblem`]: OLMS eq. (8), minimise `max_i v_i r_i` with `vᵀb <= C_b`, solved as
//!   its epigraph LP.
//! - [`BatchProblem`]: DaMPS eq. (1) with `s_ij ∈ [0, 1]`.
//! - [`dependent_round`]: Gandhi et al. (JACM 2006) rounding of a vector with `Σ v = L` into
//!   exactly `L` paths with `P(i chosen) = v_i` (OLMS §III-B, ref. [25]).
//!
//! Each problem has `solve` (exact, allocation-free, fixed capacity [`MAX_PATHS`] /
//! [`MAX_BATCH`]) and `solve_good_lp` (the LP as written in the paper, solved by good_lp with the
//! pure-Rust microlp backend; allocates, for validation and benchmarks). Infeasibility is
//! [`LpError::Infeasible`], never a panic; bad input is an [`LpError`] naming the input.
//! There is no state and no clock: every call is a pure function of its arguments (and of the
//! caller's RNG for rounding). See `docs/lp.md` for the formulations and the paper's numbers.
#![warn(missing_docs)]

mod chi_model;
mod damps;
mod error;
mod olms_bandwidth;
mod olms_max_rtt;
mod rounding;
mod schedule;

pub use damps::{BatchProblem, BatchSchedule};
pub use error::{LpError, LpKind, TOLERANCE};
pub use olms_bandwidth::BandwidthProblem;
pub use olms_max_rtt::MaxRttProblem;
pub use rounding::{PathMask, dependent_round};
pub use schedule::Schedule;

/// The most paths the fast solvers and rounding handle (`braid_sched_core::MAX_PATHS` asserts
/// it agrees).
pub const MAX_PATHS: usize = 16;

/// The most packets in one DaMPS batch (the paper uses `M = 6`).
pub const MAX_BATCH: usize = 16;
