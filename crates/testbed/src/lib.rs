//! braid's testbed: the deterministic simulator, the real-time link emulator, scenario files
//! and comparison reports.
#![warn(missing_docs)]
