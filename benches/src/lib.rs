//! Shared inputs for braid's criterion benches: realistic, varying path states.
#![warn(missing_docs)]
