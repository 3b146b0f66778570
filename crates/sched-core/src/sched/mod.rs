//! The built-in schedulers, one module each.

pub mod blest;
pub mod damps;
pub mod ecf;
pub mod edar;
pub mod edf;
pub mod falcon;
pub mod linucb;
pub mod minrtt;
pub mod olms;
pub mod peekaboo;
pub mod redundant;
pub mod rr;
pub mod wrr;
