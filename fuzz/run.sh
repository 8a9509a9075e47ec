#!/usr/bin/env bash
# Fuzz the strict header parser and the planner: `bash fuzz/run.sh [SECONDS]` (default 600).
# Seeds the corpus with the small fixtures; needs `cargo install cargo-fuzz`. cargo-fuzz wants nightly
# flags, which RUSTC_BOOTSTRAP=1 unlocks on the stable toolchain this project builds with.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
corpus=fuzz/corpus/parse_header
mkdir -p "$corpus"
find tests/fixtures -name '*.safetensors' -size -8k -exec cp -n {} "$corpus/" \;
RUSTC_BOOTSTRAP=1 cargo fuzz run parse_header "$corpus" -- \
    -dict=fuzz/parse_header.dict -max_len=8192 -max_total_time="$seconds" -print_final_stats=1
