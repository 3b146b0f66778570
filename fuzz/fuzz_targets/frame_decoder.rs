//! libFuzzer target: `cargo +nightly fuzz run --features libfuzzer frame_decoder`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| braid_fuzz::frame_decoder(data));
