#!/usr/bin/env python3
"""Benchmark `hubalign scan` over a tree of many shards, against the physical minimum and the reference reader.

    cargo build --release --workspace --bins && python3 bench/scan_bench.py [--shards 1000]

Builds a tree of bundles of sparse synthetic MLX shards (each header real, each payload a hole, 256 MiB each),
then measures with a cold page cache (`drop_caches`, root only; otherwise warm) and warm:
- `hubalign scan --format json TREE`: wall time, the bytes read as it reports them, and the bytes read as
  the kernel counts them (one more run under `strace`, summing what `read`/`pread64` returned for every
  `.safetensors` file it opened);
- the physical minimum: the sum of 8 + N over all shards, computed here from each file's first 8 bytes;
- the reference reader as baseline: `safetensors.safe_open(...).metadata()` plus `keys()` over the same files in
  one Python process (run with target/py-venv, created by tests/python/setup-venv.sh).
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "target/release/hubalign"
SYNTH = ROOT / "target/release/synth_shard"
PY = ROOT / "target/py-venv/bin/python"

SAFE_OPEN = r"""
import sys, time
from safetensors import safe_open
paths = sys.argv[1:]
t = time.perf_counter()
n = 0
for p in paths:
    with safe_open(p, framework="numpy") as f:
        f.metadata(); n += len(list(f.keys()))
print(time.perf_counter() - t, n)
"""


def drop_caches():
    try:
        subprocess.run(["sync"], check=True)
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def kernel_bytes(args):
    """Bytes the kernel returned to `args` from `.safetensors` files, from an strace of one run.

    `-y` names descriptors in the call (`3</p>`) only where strace can read the tracee's /proc/<pid>/fd;
    elsewhere the descriptor table is rebuilt from openat/close in trace order (one process, so one table).
    Same rules as tests/integration/kernel_reads.rs.
    """
    import re
    import tempfile
    with tempfile.NamedTemporaryFile("r") as trace:
        run = subprocess.run(["strace", "-f", "-qq", "-s", "0", "-y", "-e", "trace=open,openat,close,read,pread64",
                              "-o", trace.name, "--", *map(str, args)], stdout=subprocess.DEVNULL)
        if run.returncode not in (0, 1, 3):  # scan's exit codes for a finished scan
            sys.exit(f"{args}: exit {run.returncode} under strace")
        # A call another thread interrupts comes in two lines, `read(5, <unfinished ...>` and
        # `<... read resumed>...) = n`, tied by the thread id: joined before parsing.
        unfinished, open_files, total = {}, {}, 0
        for line in trace:
            tid, _, call = line.rstrip("\n").partition(" ")
            call = call.lstrip()  # strace pads the thread id to five columns
            if call.endswith("<unfinished ...>"):
                unfinished[tid] = call[: -len("<unfinished ...>")]
                continue
            if call.startswith("<... "):
                if tid not in unfinished or "resumed>" not in call:
                    continue
                call = unfinished.pop(tid) + call.split("resumed>", 1)[1]
            m = re.match(r'(\w+)\((.*)\)\s+= (-?\d+)', call)
            if not m:
                continue
            name, call_args, ret = m.group(1), m.group(2), int(m.group(3))
            if name in ("open", "openat") and ret >= 0:
                quoted = call_args.split('"')
                open_files[ret] = quoted[1] if len(quoted) > 1 else ""
            elif name == "close":
                fd = re.match(r'\d+', call_args)
                if fd:
                    open_files.pop(int(fd.group(0)), None)
            elif name in ("read", "pread64") and ret > 0:
                fd = re.match(r'(\d+)(?:<([^>]*)>)?', call_args)
                if not fd:
                    continue
                path = fd.group(2) if fd.group(2) is not None else open_files.get(int(fd.group(1)), "")
                if path.endswith(".safetensors"):
                    total += ret
        return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shards", type=int, default=1000)
    ap.add_argument("--work", type=Path, default=ROOT / "target/bench/scan-tree")
    args = ap.parse_args()
    for tool in (BIN, SYNTH, PY):
        if not tool.exists():
            sys.exit(f"{tool} missing: run `cargo build --release --workspace --bins` and tests/python/setup-venv.sh")
    tree = args.work / str(args.shards)
    if not tree.exists():
        for i in range(args.shards):
            bundle = tree / f"org{i % 11}" / f"model{i // 4}"
            bundle.mkdir(parents=True, exist_ok=True)
            kind = "relayout" if i % 3 == 0 else "pad"
            subprocess.run([SYNTH, bundle / f"model-{i % 4 + 1:05d}-of-00004.safetensors", "256", kind, "sparse"], check=True)
    paths = sorted(str(p) for p in tree.rglob("*.safetensors"))
    minimum = 0
    logical = 0
    for p in paths:
        with open(p, "rb") as f:
            minimum += 8 + int.from_bytes(f.read(8), "little")
        logical += os.path.getsize(p)

    rows = []
    for cache in ("cold", "warm"):
        if cache == "cold" and not drop_caches():
            print("(cannot drop caches here: cold run skipped)", file=sys.stderr)
            continue
        t = time.perf_counter()
        out = subprocess.run([BIN, "scan", "--format", "json", tree], capture_output=True, text=True)
        ours = time.perf_counter() - t
        shards = [json.loads(line) for line in out.stdout.splitlines()]
        assert len(shards) == len(paths), (len(shards), len(paths))
        read = sum(s["bytes_read"] for s in shards)
        if cache == "cold":
            drop_caches()
        ref = subprocess.run([PY, "-c", SAFE_OPEN, *paths], capture_output=True, text=True, check=True)
        ref_seconds = float(ref.stdout.split()[0])
        rows.append((cache, ours, read, ref_seconds, kernel_bytes([BIN, "scan", "--format", "json", tree])))

    print(f"{len(paths)} shards, {logical / 1e9:.1f} GB logical; physical minimum (sum of 8 + N) {minimum / 1e6:.2f} MB")
    print("| cache | hubalign scan | bytes read (reported) | bytes read (kernel) | kernel / minimum | safe_open loop (baseline) | scan speed vs baseline |")
    print("|---|---|---|---|---|---|---|")
    for cache, ours, read, ref, kernel in rows:
        print(f"| {cache} | {ours:.3f} s | {read / 1e6:.2f} MB | {kernel / 1e6:.2f} MB | {kernel / minimum:.4f}x | {ref:.3f} s | {ref / ours:.2f}x |")


if __name__ == "__main__":
    main()
