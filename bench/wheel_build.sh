#!/usr/bin/env bash
# Times a clean release build of the PyPI wheel (maturin, as .github/workflows/release.yml builds it) against
# a clean `cargo build --release` of the same binary, one after the other, and prints both sizes.
# Needs the interop venv (bash tests/python/setup-venv.sh), which pins maturin. Takes about 20 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
scratch=${SCRATCH:-/tmp/hubalign-wheel-bench}
rm -rf "$scratch" && mkdir -p "$scratch"
seconds() { local s e; s=$(date +%s.%N); "$@" >"$scratch/log" 2>&1; e=$(date +%s.%N); echo "$e - $s" | bc; }
echo "cargo build --release: $(seconds env CARGO_TARGET_DIR="$scratch/cargo" cargo build --release --locked --bin hubalign) s"
cp "$scratch/cargo/release/hubalign" "$scratch/stripped" && strip "$scratch/stripped"
echo "binary: $(stat -c %s "$scratch/cargo/release/hubalign") bytes, stripped: $(stat -c %s "$scratch/stripped") bytes"
echo "maturin build --release: $(seconds env CARGO_TARGET_DIR="$scratch/maturin" target/py-venv/bin/maturin build --release --locked -o "$scratch/dist") s"
echo "wheel: $(stat -c %s "$scratch"/dist/*.whl) bytes ($(basename "$scratch"/dist/*.whl))"
