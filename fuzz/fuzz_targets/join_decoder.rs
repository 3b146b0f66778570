//! libFuzzer target: `cargo +nightly fuzz run --features libfuzzer join_decoder`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| braid_fuzz::join_decoder(data));
