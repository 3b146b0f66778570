//! libFuzzer target: `cargo +nightly fuzz run --features libfuzzer session_peer`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| braid_fuzz::session_peer(data));
