#!/usr/bin/env bash
# Create or refresh the interop venv at <repo>/target/py-venv from tests/python/requirements.txt.
#
# Idempotent: a stamp file inside the venv holds the sha256 of requirements.txt; when it
# matches, the script exits 0 at once. Concurrency-safe: the slow path runs under an
# exclusive lock on <repo>/target/py-venv.lock (flock(1) if installed, else Python's fcntl),
# and re-checks the stamp after taking it, so parallel callers build the venv only once.
# Non-interactive (CI=true, no stdin). Progress goes to stderr; stdout stays empty.
#
# Env: PYTHON  interpreter used to create the venv (default: python3)
set -euo pipefail

script_dir=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
repo_root=$(cd -- "$script_dir/../.." && pwd -P)
req="$script_dir/requirements.txt"
venv="$repo_root/target/py-venv"
lock="$repo_root/target/py-venv.lock"
stamp="$venv/.requirements.sha256"
PYTHON=${PYTHON:-python3}

log() { printf 'setup-venv: %s\n' "$*" >&2; }

sha256_of() {
    if command -v sha256sum >/dev/null 2>&1; then
        sha256sum "$1" | cut -d' ' -f1
    else
        shasum -a 256 "$1" | cut -d' ' -f1
    fi
}

[[ -f "$req" ]] || { log "missing $req"; exit 1; }
want=$(sha256_of "$req")

up_to_date() {
    [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]
}

# Fast path: nothing to do (the stamp is written last, so it implies a finished install).
if up_to_date; then
    log "up to date: $venv"
    exit 0
fi

# Slow path: take the lock (re-exec this script under it once).
if [[ "${_HUBALIGN_SETUP_VENV_LOCKED:-}" != 1 ]]; then
    mkdir -p "$repo_root/target"
    export _HUBALIGN_SETUP_VENV_LOCKED=1
    log "waiting for lock $lock"
    if command -v flock >/dev/null 2>&1; then
        exec flock "$lock" bash "${BASH_SOURCE[0]}" "$@"
    else
        exec "$PYTHON" -c '
import fcntl, subprocess, sys
with open(sys.argv[1], "a") as f:
    fcntl.flock(f, fcntl.LOCK_EX)
    sys.exit(subprocess.call(sys.argv[2:]))
' "$lock" bash "${BASH_SOURCE[0]}" "$@"
    fi
fi

if up_to_date; then
    log "up to date (built by another process): $venv"
    exit 0
fi

if [[ -x "$venv/bin/python" ]] && "$venv/bin/python" -c 'import sys' </dev/null >/dev/null 2>&1; then
    log "requirements changed (or install incomplete); updating $venv"
else
    log "creating venv $venv with $PYTHON ($("$PYTHON" --version 2>&1))"
    rm -rf "$venv"
    "$PYTHON" -m venv "$venv" </dev/null >&2
fi

rm -f "$stamp"
export PIP_NO_INPUT=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_PROGRESS_BAR=off
log "installing $req"
"$venv/bin/python" -m pip install -r "$req" </dev/null >&2

printf '%s\n' "$want" >"$stamp.tmp"
mv -f "$stamp.tmp" "$stamp"
log "done: $venv"
