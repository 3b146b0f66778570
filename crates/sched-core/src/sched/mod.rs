//! The built-in schedulers, one module each.

pub mod minrtt;
pub mod rr;
