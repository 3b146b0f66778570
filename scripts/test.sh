#!/usr/bin/env bash
# braid's whole test gate, runnable on a fresh machine: it does every set-up step itself.
#   format check, clippy with warnings as errors, then every test of the workspace.
# CI (.ci/run) calls exactly this script.
set -euo pipefail
cd "$(dirname "$0")/.."

# A fresh clone gains nothing from incremental compilation, and its caches cost disk.
if [ "${CI:-}" = "true" ]; then
    export CARGO_INCREMENTAL=0
fi

echo "== toolchain"
rustup component add rustfmt clippy >/dev/null 2>&1 || true
cargo --version
# curl for the daemon tests that drive real curl through the SOCKS5 and HTTP CONNECT inbounds.
command -v curl >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq curl >/dev/null; } || true

echo "== cargo fmt --check"
cargo fmt --all --check

echo "== cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings

# --- fuzz (session frame decoder, a session fed a hostile peer, JOIN decoder, HTTP responses,
# DNS answers) ---------------------------------------------------------------------------------
# The stable-Rust smoke pass of the five target bodies (200k seeded random and mutated inputs
# each) is a test of the `braid-fuzz` workspace member (fuzz/tests/smoke.rs): `cargo test` below
# runs it. Real libFuzzer runs only where nightly and cargo-fuzz are installed.
if cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "== libFuzzer"
    (cd fuzz && cargo +nightly fuzz run frame_decoder --features libfuzzer -- -max_total_time=30)
    (cd fuzz && cargo +nightly fuzz run session_peer --features libfuzzer -- -max_total_time=30)
    (cd fuzz && cargo +nightly fuzz run join_decoder --features libfuzzer -- -max_total_time=30)
    (cd fuzz && cargo +nightly fuzz run http_response --features libfuzzer -- -max_total_time=30)
    (cd fuzz && cargo +nightly fuzz run dns_answer --features libfuzzer -- -max_total_time=30)
fi
# --- end fuzz --------------------------------------------------------------------------------

echo "== cargo test"
# Property tests draw fresh random cases on every local run; CI uses one fixed seed so that a
# result can be reproduced (override with PROPTEST_RNG_SEED=<u64>).
if [ "${CI:-}" = "true" ]; then
    export PROPTEST_RNG_SEED="${PROPTEST_RNG_SEED:-20261121}"
    echo "PROPTEST_RNG_SEED=$PROPTEST_RNG_SEED"
fi
cargo test --workspace

# --- learner hand-off under loom, and the `torch` feature ----------------------------------
# The experience queue and weight slot (sched-core::slot) over every interleaving loom finds.
echo "== loom: learner hand-off"
cargo test -p braid-sched-core --features loom --release --test loom_slot
# PyTorch 2.13.0 in ${BRAID_TORCH_VENV:-~/.cache/braid/torch-venv} (installed when missing),
# then braid-learners with tch: clippy, its tests (tch parity within 1e-5), the tch benches build.
echo "== torch: set-up"
# shellcheck source=scripts/setup-torch.sh
source scripts/setup-torch.sh
echo "== torch: clippy and tests of braid-learners --features torch"
cargo clippy -p braid-learners -p braid-benches --all-targets --features torch -- -D warnings
cargo test -p braid-learners --features torch
echo "== torch: the daemons learn online (braid status model version advances)"
cargo test -p braid-proxy --features torch --test learn_online
# --- end loom and torch --------------------------------------------------------------------
