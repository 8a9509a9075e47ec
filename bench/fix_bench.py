#!/usr/bin/env python3
"""Benchmark `hubalign fix` against `cp` of the same shard, on the same disk, in the same run.

    cargo build --release --workspace --bins && python3 bench/fix_bench.py [--size-mib 2048] [--reps 3] [--other BIN]

For each layout (`pad`: header padding suffices; `relayout`: tensors must be reordered) it writes a synthetic
MLX-layout shard, warms the page cache with one read, then alternates `cp SRC DST`, `cp SRC DST && sync DST`,
`hubalign fix SRC --out DIR` (which fsyncs its result; default digests) and the same with `--digests all`,
REPS times each, and reports median wall time, throughput and peak RSS (from wait4). The first fix of each
kind has every digest its manifest lists checked against hashlib's. A second, smaller shard shows whether fix's peak RSS depends on shard size. With `--other
BIN`, another build's `fix` is timed in the same loop, for before/after comparisons on a noisy disk. Prints
Markdown tables for BENCHMARKS.md.
"""

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "target/release/hubalign"
SYNTH = ROOT / "target/release/synth_shard"
SHA_RATE = ROOT / "target/release/sha256_rate"


def timed(argv):
    """Runs argv; returns (seconds, peak RSS in MiB)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{argv} failed with {status}")
    return elapsed, usage.ru_maxrss / 1024


def file_digests(path):
    """(file sha256, payload sha256, {tensor: sha256}) of a shard, with hashlib."""
    with open(path, "rb") as f:
        prefix = f.read(8)
        header = f.read(int.from_bytes(prefix, "little"))
        whole, payload = hashlib.sha256(prefix + header), hashlib.sha256()
        while block := f.read(1 << 24):
            whole.update(block)
            payload.update(block)
    tensors = {}
    with open(path, "rb") as f:
        start = 8 + len(header)
        for name, info in json.loads(header).items():
            if name == "__metadata__":
                continue
            begin, end = info["data_offsets"]
            f.seek(start + begin)
            h, left = hashlib.sha256(), end - begin
            while left:
                block = f.read(min(left, 1 << 24))
                h.update(block)
                left -= len(block)
            tensors[name] = h.hexdigest()
    return whole.hexdigest(), payload.hexdigest(), tensors


def check_digests(src, out):
    """Every digest fix wrote in its manifest (those its `digests` field lists) must be hashlib's."""
    shard = json.loads((out / "MEI_ALIGN_MANIFEST.json").read_text())["shards"][0]
    src_file, src_payload, src_tensors = file_digests(src)
    new_file, new_payload, new_tensors = file_digests(out / src.name)
    expected = {"src_file_sha256": src_file, "src_payload_sha256": src_payload, "file_sha256": new_file,
                "payload_sha256": new_payload, "tensor_sha256": src_tensors}
    listed = shard["digests"]
    if "payload_sha256" not in listed or src_tensors != new_tensors:
        sys.exit(f"{src}: no payload digest, or tensors changed")
    for name in expected:
        if (name in listed) != (name in shard) or (name in listed and shard[name] != expected[name]):
            sys.exit(f"{src}: the manifest's {name} differs from hashlib's (listed: {listed})")
    print(f"{src.name} ({'all' if 'file_sha256' in listed else 'minimal'}): {', '.join(listed)} match hashlib",
          file=sys.stderr)


def bench_layout(work, kind, size_mib, reps, other):
    src = work / f"{kind}-{size_mib}.safetensors"
    if not src.exists():
        subprocess.run([SYNTH, src, str(size_mib), kind], check=True)
    size = src.stat().st_size
    with open(src, "rb") as f:  # warm the page cache so every contender reads from memory
        while f.read(1 << 24):
            pass
    results = {"cp": [], "cp+sync": [], "fix": [], "fix-all": [], "other": []}
    rss = []
    checked = set()
    for _ in range(reps):
        dst = work / "cp-out.safetensors"
        results["cp"].append(timed(["cp", src, dst])[0])
        dst.unlink()
        results["cp+sync"].append(timed(["sh", "-c", f'cp "{src}" "{dst}" && sync "{dst}"'])[0])
        dst.unlink()
        # Outside the shard's directory: fix refuses an --out inside the bundle it copies.
        out = work.parent / f"{work.name}-fix-out"
        for key, flags in (("fix", []), ("fix-all", ["--digests", "all"])):
            seconds, peak = timed([BIN, "fix", src, "--out", out, *flags])
            results[key].append(seconds)
            rss.append(peak)
            if key not in checked:
                # In a process of its own: fork copies this one's RSS into every later child's ru_maxrss.
                subprocess.run([sys.executable, __file__, "--check", src, out], check=True)
                checked.add(key)
            shutil.rmtree(out)
        if other:
            results["other"].append(timed([other, "fix", src, "--out", out])[0])
            shutil.rmtree(out)
    med = {k: statistics.median(v) for k, v in results.items() if v}
    return size, med, max(rss)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mib", type=int, default=2048)
    ap.add_argument("--small-mib", type=int, default=256)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--work", type=Path, default=ROOT / "target/bench")
    ap.add_argument("--other", type=Path, help="another hubalign binary to time in the same loop (A/B)")
    ap.add_argument("--check", nargs=2, type=Path, metavar=("SRC", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.check:
        return check_digests(*args.check)
    for tool in (BIN, SYNTH):
        if not tool.exists():
            sys.exit(f"{tool} missing: run `cargo build --release --workspace --bins` first")
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
    # One lane per core at once, as fix runs them: two digests in step each, and for comparison one.
    def aggregate(*flags):
        runs = [subprocess.Popen([SHA_RATE, *flags, probe], stdout=subprocess.PIPE, text=True) for _ in range(cores)]
        return sum(float(r.communicate()[0].split()[0]) for r in runs)
    single, paired = aggregate(), aggregate("--pair")
    print(f"SHA-256 with {cores} cores hashing at once: {single:.2f} GB/s one digest per core, {paired:.2f} GB/s "
          f"two in step per core; four digests per byte (--digests all) bound fix at {paired / 4:.2f} GB/s, one "
          f"(header_pad by default) at {single / cores:.2f} GB/s\n")
    print("| layout | shard | cp | cp + sync | fix (default digests) | / (cp + sync) | fix --digests all | "
          "/ (cp + sync) | fix peak RSS |")
    print("|---|---|---|---|---|---|---|---|---|")
    others = []
    for kind in ("pad", "relayout"):
        for size_mib in (args.size_mib, args.small_mib):
            size, med, rss = bench_layout(args.work, kind, size_mib, args.reps, args.other)
            gb = size / 1e9
            rate = {k: gb / v for k, v in med.items()}
            print(
                f"| {kind} | {size_mib} MiB | {med['cp']:.2f} s ({rate['cp']:.2f} GB/s) "
                f"| {med['cp+sync']:.2f} s ({rate['cp+sync']:.2f} GB/s) "
                f"| {med['fix']:.2f} s ({rate['fix']:.2f} GB/s) | {rate['fix'] / rate['cp+sync']:.2f}x "
                f"| {med['fix-all']:.2f} s ({rate['fix-all']:.2f} GB/s) | {rate['fix-all'] / rate['cp+sync']:.2f}x "
                f"| {rss:.1f} MiB |",
                flush=True,
            )
            if args.other:
                others.append((kind, size_mib, med["fix"], med["other"]))
    if others:
        print(f"\nThe same loop also timed `{args.other}`:\n")
        print("| layout | shard | fix (this build) | other build | this build's speed-up |")
        print("|---|---|---|---|---|")
        for kind, size_mib, this, other in others:
            print(f"| {kind} | {size_mib} MiB | {this:.2f} s | {other:.2f} s | {other / this:.2f}x |")


if __name__ == "__main__":
    main()
