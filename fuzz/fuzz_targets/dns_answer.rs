//! libFuzzer target: `cargo +nightly fuzz run --features libfuzzer dns_answer`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| braid_fuzz::dns_answer(data));
