#!/usr/bin/env python3
"""The public dataset of a crawl of the synthetic Hub population: its rows, bytes and write time, and how
much of it an incremental update rewrites, against bounds in the same run.

    cargo build --release --workspace --bins
    python3 bench/dataset_bench.py --repos 100000 [--pushes 20]

Serves `hubsim --population N` (seed 1, the rehearsal's population; no quotas: the crawl is not what is
timed), crawls it into a fresh SQLite store, then:
1. `hubalign dataset write` of the snapshot, timed, against `report --shards --format csv` of the same store
   (reading every shard row out of it once, the least any export of them costs);
2. `hubalign dataset push` of it to a dataset repo on the simulator (created by the push), timed, with the
   bytes the simulator received (its counters: request bodies, Xet included);
3. --pushes updates to population repos (`/_sim/population/push?kind=update`), a crawl that audits them,
   `dataset write` again (the files whose bytes changed are what an incremental commit carries; bound: the
   parts of the buckets a push touched, at most), and `dataset push` again, with the bytes it sent against the
   first push's;
4. `dataset push` once more with nothing changed: no commit.
"""

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sim import start_hubsim  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "hf_dataset"
DATE = "2026-12-04"


def files_of(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def write(bin_, store, out):
    started = time.perf_counter()
    run = subprocess.run([bin_, "dataset", "write", "--db", store, "--out", out, "--date", DATE],
                         check=True, capture_output=True, text=True)
    return time.perf_counter() - started, run.stderr.strip()


def counters(hub):
    with urllib.request.urlopen(f"{hub}/_sim/counters", timeout=60) as r:
        return json.load(r)


def push(bin_, store, hub):
    """`dataset push` to bench/mlx-audit; (seconds, its line, bytes the simulator received, commit requests)."""
    before = counters(hub)
    started = time.perf_counter()
    run = subprocess.run([bin_, "dataset", "push", "--db", store, "--repo", "bench/mlx-audit", "--date", DATE,
                          "--endpoint", hub, "--token", TOKEN], check=True, capture_output=True, text=True)
    took = time.perf_counter() - started
    after = counters(hub)
    commits = after["requests"].get("commit", 0) - before["requests"].get("commit", 0)
    return took, run.stderr.strip().splitlines()[-1], after["bytes_received"] - before["bytes_received"], commits


def bucket(namespace):
    return hashlib.sha256(namespace.encode()).digest()[0] % 16


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repos", type=int, default=100_000)
    ap.add_argument("--pushes", type=int, default=20)
    ap.add_argument("--bin", type=Path, default=ROOT / "target/release/hubalign")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hubalign-dataset-bench-"))
    sim, hub = start_hubsim(ROOT / "target/release/hubsim", work / "hub", "--token", f"{TOKEN}:bench",
                            "--population", str(args.repos), "--sample", "0", "--seed", "1")
    try:
        store = str(work / "store.db")
        audit = [args.bin, "audit", "--endpoint", hub, "--token", TOKEN, "--db", store, "--concurrency", "8", "-q"]
        started = time.perf_counter()
        subprocess.run(audit, check=True, stdout=subprocess.DEVNULL)
        crawl_s = time.perf_counter() - started

        first = work / "first"
        write_s, said = write(args.bin, store, first)
        started = time.perf_counter()
        subprocess.run([args.bin, "report", "--db", store, "--shards", "--format", "csv"], check=True,
                       stdout=subprocess.DEVNULL)
        report_s = time.perf_counter() - started
        before = files_of(first)
        total = sum(len(b) for b in before.values())
        first_push = push(args.bin, store, hub)

        touched = set()
        for _ in range(args.pushes):
            req = urllib.request.Request(f"{hub}/_sim/population/push?kind=update", data=b"", method="POST")
            with urllib.request.urlopen(req, timeout=60) as r:
                event = json.load(r)
            touched.add(event["repo"].split("/")[0])
        subprocess.run(audit, check=True, stdout=subprocess.DEVNULL)
        second = work / "second"
        write2_s, _ = write(args.bin, store, second)
        after = files_of(second)
        second_push = push(args.bin, store, hub)
        third_push = push(args.bin, store, hub)
        changed = {p for p in set(before) | set(after) if before.get(p) != after.get(p)}
        changed_bytes = sum(len(after.get(p, b"")) for p in changed)
        parts = [p for p in changed if p.endswith(".parquet")]
        # The least a cut by publisher rewrites: each table's part of each bucket a touched namespace is in
        # (a table where the push changed no row keeps its part).
        least = {(p.split("/")[0], p.split("/")[-1]) for p in parts}
        buckets = {f"part-{bucket(ns):02d}.parquet" for ns in touched}
    finally:
        sim.terminate()

    print(f"population: {args.repos:,} repos; crawl {crawl_s:.1f} s; {said}\n")
    print("| figure | value | bound (same run) | ratio |")
    print("|---|---|---|---|")
    print(f"| `dataset write` of the snapshot | {write_s:.1f} s, {total:,} bytes in {len(before)} files | "
          f"`report --shards --format csv` of the same store: {report_s:.1f} s | {write_s / report_s:.2f}x |")
    print(f"| incremental update after {args.pushes} pushes ({len(touched)} publishers) | {len(changed)} files, "
          f"{changed_bytes:,} bytes (`dataset write` {write2_s:.1f} s) | the whole snapshot: {total:,} bytes | "
          f"{changed_bytes / total:.3f}x |")
    print(f"| first `dataset push` (creates the repo) | {first_push[0]:.1f} s, {first_push[2]:,} bytes received by "
          f"the simulator, {first_push[3]} commit | the snapshot's files: {total:,} bytes | "
          f"{first_push[2] / total:.3f}x |")
    print(f"| `dataset push` after the {args.pushes} pushes | {second_push[0]:.1f} s, {second_push[2]:,} bytes received, "
          f"{second_push[3]} commit | the first push: {first_push[2]:,} bytes | {second_push[2] / first_push[2]:.3f}x |")
    print(f"| `dataset push` with nothing changed | {third_push[0]:.1f} s, {third_push[2]:,} bytes received, "
          f"{third_push[3]} commits | | |")
    print(f"\npushes said:\n  {first_push[1]}\n  {second_push[1]}\n  {third_push[1]}")
    print(f"| parts rewritten | {len(parts)} | parts of the touched publishers' buckets "
          f"({len(buckets)} buckets x 4 tables): {4 * len(buckets)} | {len(parts) / max(1, 4 * len(buckets)):.2f}x |")
    print(f"\nchanged: {sorted(changed)}")
    print(f"touched buckets: {sorted(buckets)}; changed parts by (table, part): {sorted(least)}")


if __name__ == "__main__":
    main()
