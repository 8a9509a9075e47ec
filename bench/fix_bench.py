#!/usr/bin/env python3
"""Benchmark `hubalign fix` against `cp` of the same shard, on the same disk, in the same run.

    cargo build --release --bins --examples && python3 bench/fix_bench.py [--size-mib 2048] [--reps 3]

For each layout (`pad`: header padding suffices; `relayout`: tensors must be reordered) it writes a synthetic
MLX-layout shard, warms the page cache with one read, then alternates `cp SRC DST`, `cp SRC DST && sync DST`
and `hubalign fix SRC --out DIR` (which fsyncs its result), REPS times each, and reports median wall time,
throughput and peak RSS (from wait4). A second, smaller shard shows whether fix's peak RSS depends on shard
size. Prints a Markdown table for BENCHMARKS.md.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "target/release/hubalign"
SYNTH = ROOT / "target/release/examples/synth_shard"
SHA_RATE = ROOT / "target/release/examples/sha256_rate"


def timed(argv):
    """Runs argv; returns (seconds, peak RSS in MiB)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{argv} failed with {status}")
    return elapsed, usage.ru_maxrss / 1024


def bench_layout(work, kind, size_mib, reps):
    src = work / f"{kind}-{size_mib}.safetensors"
    if not src.exists():
        subprocess.run([SYNTH, src, str(size_mib), kind], check=True)
    size = src.stat().st_size
    with open(src, "rb") as f:  # warm the page cache so every contender reads from memory
        while f.read(1 << 24):
            pass
    results = {"cp": [], "cp+sync": [], "fix": []}
    rss = []
    for _ in range(reps):
        dst = work / "cp-out.safetensors"
        results["cp"].append(timed(["cp", src, dst])[0])
        dst.unlink()
        results["cp+sync"].append(timed(["sh", "-c", f'cp "{src}" "{dst}" && sync "{dst}"'])[0])
        dst.unlink()
        out = work / "fix-out"
        seconds, peak = timed([BIN, "fix", src, "--out", out])
        results["fix"].append(seconds)
        rss.append(peak)
        shutil.rmtree(out)
    med = {k: statistics.median(v) for k, v in results.items()}
    return size, med, max(rss)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mib", type=int, default=2048)
    ap.add_argument("--small-mib", type=int, default=256)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--work", type=Path, default=ROOT / "target/bench")
    args = ap.parse_args()
    for tool in (BIN, SYNTH):
        if not tool.exists():
            sys.exit(f"{tool} missing: run `cargo build --release --bins --examples` first")
    args.work.mkdir(parents=True, exist_ok=True)
    # The hashing floor: fix computes four SHA-256 digests of every payload byte (source file, payload, new
    # file, per tensor); on this machine's cores that alone bounds its throughput.
    probe = args.work / f"pad-{args.size_mib}.safetensors"
    if not probe.exists():
        subprocess.run([SYNTH, probe, str(args.size_mib), "pad"], check=True)
    cores = os.cpu_count() or 1
    with open(probe, "rb") as f:  # from the page cache, as fix reads it below
        while f.read(1 << 24):
            pass
    # One hasher per core at once, as fix runs them.
    runs = [subprocess.Popen([SHA_RATE, probe], stdout=subprocess.PIPE, text=True) for _ in range(cores)]
    rates = [float(r.communicate()[0].split()[0]) for r in runs]
    aggregate = sum(rates)
    print(f"SHA-256, {cores} cores hashing at once: {aggregate:.2f} GB/s in all; "
          f"four digests per byte bound fix at {aggregate / 4:.2f} GB/s\n")
    print("| layout | shard | cp | cp + sync | fix (fsynced) | fix / cp | fix / (cp + sync) | fix peak RSS |")
    print("|---|---|---|---|---|---|---|---|")
    for kind in ("pad", "relayout"):
        for size_mib in (args.size_mib, args.small_mib):
            size, med, rss = bench_layout(args.work, kind, size_mib, args.reps)
            gb = size / 1e9
            rate = {k: gb / v for k, v in med.items()}
            print(
                f"| {kind} | {size_mib} MiB | {med['cp']:.2f} s ({rate['cp']:.2f} GB/s) "
                f"| {med['cp+sync']:.2f} s ({rate['cp+sync']:.2f} GB/s) "
                f"| {med['fix']:.2f} s ({rate['fix']:.2f} GB/s) "
                f"| {rate['fix'] / rate['cp']:.2f}x | {rate['fix'] / rate['cp+sync']:.2f}x | {rss:.1f} MiB |",
                flush=True,
            )


if __name__ == "__main__":
    main()
