#!/usr/bin/env bash
# The suite's build with full debug info against line tables only (Cargo.toml's [profile.dev]): the wall time
# of a clean `cargo test --no-run` and the size of its target folder, one after the other in one run.
#   bash bench/dev_profile.sh
set -euo pipefail
cd "$(dirname "$0")/.."
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
for settings in "CARGO_PROFILE_DEV_DEBUG=true" "CARGO_PROFILE_DEV_DEBUG=line-tables-only"; do
    start=$(date +%s)
    env "$settings" CARGO_INCREMENTAL=0 CARGO_TARGET_DIR="$scratch/t" \
        cargo test --workspace --all-features --locked --no-run --quiet 2>/dev/null
    echo "$settings: $(($(date +%s) - start)) s, target $(du -sm "$scratch/t" | cut -f1) MB"
    rm -rf "$scratch/t"
done
