//! braid's packet schedulers and the contract between them and the session.
//!
//! This crate is sans-IO: nothing here reads a clock, allocates per packet, logs per packet or
//! touches a socket. The session (in `braid-proxy`) owns the paths and calls in this order for
//! every packet it is about to send:
//!
//! 1. it refreshes a slice of [`PathView`]s (one per joined path, in any order, each carrying its
//!    stable [`PathId`]);
//! 2. it calls [`Scheduler::select`] with the views, the packet's [`PacketMeta`] and `now`, and
//!    acts on the returned [`Decision`] (send on one path, send copies on a [`PathSet`], wait until
//!    a path frees up, or drop the packet);
//! 3. as feedback arrives it calls the `on_*` hooks: [`Scheduler::on_sent`],
//!    [`Scheduler::on_ack`], [`Scheduler::on_loss`], [`Scheduler::on_path_state`] and
//!    [`Scheduler::on_report`] (the receiver's periodic report: goodput, deadlines met, …).
//!
//! Time is always an argument ([`Timestamp`], microseconds from an arbitrary origin). Schedulers
//! are members of one enum, [`AnyScheduler`], so the hot path dispatches statically; they are
//! chosen by name through [`SchedulerKind`] (case-insensitive `FromStr`) and built from a
//! [`SchedulerConfig`].
#![warn(missing_docs)]

pub mod changepoint;
pub mod decision;
pub mod nn;
pub mod packet;
pub mod path;
pub mod sched;
pub mod scheduler;
pub mod slot;
pub mod testing;
pub mod tier;
pub mod time;

pub use decision::{Decision, PathSet};
pub use packet::{FlowId, PacketMeta, TrafficClass};
pub use path::{MAX_PATHS, PathId, PathState, PathView};
pub use scheduler::{
    AckInfo, AnyScheduler, ParamError, ParamInfo, PathDeadlines, ReceiverReport, Scheduler,
    SchedulerConfig, SchedulerInfo, SchedulerKind, UnknownScheduler,
};
pub use time::Timestamp;

// OLMS and DaMPS hand per-path arrays of this size to braid-lp's solvers.
const _: () = assert!(MAX_PATHS == braid_lp::MAX_PATHS);
