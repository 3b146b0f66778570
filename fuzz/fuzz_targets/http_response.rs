//! libFuzzer target: `cargo +nightly fuzz run --features libfuzzer http_response`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| braid_fuzz::http_response(data));
