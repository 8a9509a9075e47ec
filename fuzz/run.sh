#!/usr/bin/env bash
# Fuzz one target: `bash fuzz/run.sh [TARGET] [SECONDS]` (defaults: parse_header, 600 s). Targets:
#   parse_header  the strict header parser and the planner (corpus seeded with the small fixtures)
#   listing       a listing page through the checks of `untrusted`
#   link          `Link` headers through pagination
#   rate_limit    `RateLimit`/`Retry-After` values through the pacer
# Needs `cargo install cargo-fuzz`. cargo-fuzz wants nightly flags, which RUSTC_BOOTSTRAP=1 unlocks on the
# stable toolchain this project builds with. libFuzzer prints its final statistics (executions, coverage).
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:-parse_header}
seconds=${2:-600}
corpus=fuzz/corpus/$target
mkdir -p "$corpus"
args=(-max_total_time="$seconds" -print_final_stats=1)
case "$target" in
    parse_header)
        find tests/fixtures -name '*.safetensors' -size -8k -exec cp -n {} "$corpus/" \;
        args+=(-dict=fuzz/parse_header.dict -max_len=8192) ;;
    listing)
        cp -n fuzz/seeds/listing/* "$corpus/" 2>/dev/null || true
        args+=(-dict=fuzz/listing.dict -max_len=4096) ;;
    link)
        cp -n fuzz/seeds/link/* "$corpus/" 2>/dev/null || true
        args+=(-max_len=512) ;;
    rate_limit)
        cp -n fuzz/seeds/rate_limit/* "$corpus/" 2>/dev/null || true
        args+=(-max_len=256) ;;
    *) echo "unknown target $target" >&2; exit 2 ;;
esac
RUSTC_BOOTSTRAP=1 cargo fuzz run "$target" "$corpus" -- "${args[@]}"
