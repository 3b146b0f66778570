#!/usr/bin/env bash
# braid's whole test gate, runnable on a fresh machine: it does every set-up step itself.
#   format check, clippy with warnings as errors, then every test of the workspace.
# CI (.ci/run) calls exactly this script.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== toolchain"
rustup component add rustfmt clippy >/dev/null 2>&1 || true
cargo --version

echo "== cargo fmt --check"
cargo fmt --all --check

echo "== cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings

echo "== cargo test"
cargo test --workspace
