#!/usr/bin/env python3
"""`hubalign pull` against what a person types without it: `hf download`, then a repair.

    cargo build --release --workspace --bins && bash tests/python/setup-venv.sh && python3 bench/pull_bench.py [--runs 3]

The bundle is peers_bench.py's: one shard to reorder, two that header padding fixes (1 GiB by default).
Each measure runs against a fresh simulator, held to each --storage-mbps per connection.

Without a mirror, the source is repaired on the way:
- pull: `hubalign pull SOURCE --local-dir DIR`, which finds no mirror, downloads and repairs as it streams;
- hf download: `hf download SOURCE --local-dir DIR` alone, the floor;
- hf download + fix: `hf download`, then `hubalign fix DIR --out FIXED`, a person's two steps.

With a mirror, both fetch the same bytes into a fresh Hugging Face cache (HF_HOME):
- pull (mirror): `hubalign pull SOURCE`, which finds the mirror by one search and downloads it;
- hf download (mirror): `hf download MIRROR`.
The mirror is made first by an untimed `hubalign repack` against the same simulator.

`hf download` runs with HF_HUB_DISABLE_XET=1, so the rate holds it as it holds hubalign's download.
With --hf-xet it fetches over Xet instead, as it does from the real Hub by default; the simulator does not
hold Xet reads to the rate, so only the column without a limit compares like with like.
Each figure is a command's wall time after a `sync`.
"""

import argparse
import json
import os
import statistics
import sys
import urllib.request
from pathlib import Path

from peers_bench import (HF, SOURCE, commit, hf_download, hf_env, ratio, repack, require, run_rounds, settle,
                         spread, timed, walls, world)
from repack_bench import BIN, PY, SIM, SYNTH

# The simulator's token user: the untimed repack publishes its mirror under this namespace.
MIRRORS = "bench"


def pull(url, work, into_cache):
    """`hubalign pull SOURCE` into `work/pulled`, or into a fresh cache under `work/hf-home`: its wall time."""
    argv = [BIN, "pull", SOURCE, "--endpoint", url, "--mirrors", MIRRORS]
    if not into_cache:
        argv += ["--local-dir", work / "pulled"]
    env = dict(os.environ, HF_HOME=str(work / "hf-home"))
    env.pop("HF_HUB_CACHE", None)
    settle(cold=False)
    seconds, run = timed(argv, env)
    return {"wall_s": seconds, "said": run.stdout[-400:]}


def mirror_of(url):
    """The mirror the untimed repack published: the one model under MIRRORS named `…-aligned`."""
    with urllib.request.urlopen(f"{url}/api/models?author={MIRRORS}") as r:
        found = [m["id"] for m in json.load(r) if m["id"].endswith("-aligned")]
    if len(found) != 1:
        sys.exit(f"expected one mirror under {MIRRORS}, found {found}")
    return found[0]


def with_mirror(url, work):
    """An untimed repack publishes the mirror; its name is read back from the simulator."""
    (work / "repack").mkdir()
    repack(url, work / "repack", BIN, cold=False)
    return mirror_of(url)


def pull_mirror(url, work):
    """`hubalign pull SOURCE` once the mirror exists, into a fresh cache."""
    mirror = with_mirror(url, work)
    figures = pull(url, work, into_cache=True)
    if mirror not in figures["said"]:
        sys.exit(f"pull did not take the mirror {mirror}:\n{figures['said']}")
    return figures


def hf_download_mirror(url, work, xet):
    """`hf download MIRROR` once the mirror exists, into a fresh cache."""
    mirror = with_mirror(url, work)
    settle(cold=False)
    seconds, _ = timed([HF, "download", mirror], hf_env(url, work / "hf-home", xet))
    return {"wall_s": seconds}


def hf_download_then_fix(url, work, xet):
    """peers_bench.py's `hf download SOURCE --local-dir DIR`, then `hubalign fix DIR --out FIXED`: the two
    commands' sum."""
    download_s = hf_download(url, work, xet, cold=False)["wall_s"]
    fix_s, _ = timed([BIN, "fix", work / "download", "--out", work / "fixed"])
    return {"wall_s": download_s + fix_s, "download_s": download_s, "fix_s": fix_s}


def measures(xet):
    """Each measure by name: what it runs against an endpoint and a fresh work directory."""
    return {
        "pull": lambda url, work: pull(url, work, into_cache=False),
        "hf download": lambda url, work: hf_download(url, work, xet, cold=False),
        "hf download + fix": lambda url, work: hf_download_then_fix(url, work, xet),
        "pull (mirror)": pull_mirror,
        "hf download (mirror)": lambda url, work: hf_download_mirror(url, work, xet),
    }


def print_tables(results):
    """The two tables for BENCHMARKS.md."""
    print("| storage per connection | `hubalign pull` | `hf download` | `hf download` → `hubalign fix` | "
          "pull / `hf download` | pull / download + fix |")
    print("|---|---|---|---|---|---|")
    for speed in results:
        a, b, c = (walls(results, speed, n) for n in ("pull", "hf download", "hf download + fix"))
        print(f"| {speed} | {spread(a)} | {spread(b)} | {spread(c)} | {ratio(a, b)} | {ratio(a, c)} |")
    print()
    print("| storage per connection | `hubalign pull` (mirror) | `hf download MIRROR` | pull / `hf download` |")
    print("|---|---|---|---|")
    for speed in results:
        a, b = (walls(results, speed, n) for n in ("pull (mirror)", "hf download (mirror)"))
        print(f"| {speed} | {spread(a)} | {spread(b)} | {ratio(a, b)} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundle-mib", type=int, default=1024, help="the bundle's size, as peers_bench.py's")
    ap.add_argument("--storage-mbps", type=float, nargs="+", default=[150, 1000, 0],
                    help="each storage answer held to this rate per connection (0: no limit)")
    ap.add_argument("--runs", type=int, default=3, help="rounds of every measure at every speed")
    ap.add_argument("--hf-xet", action="store_true", help="let `hf download` fetch over Xet (not held to the rate)")
    ap.add_argument("--json", type=Path, help="write every measure's raw figures here")
    args = ap.parse_args()
    require(BIN, SIM, SYNTH, PY, HF)
    table = measures(args.hf_xet)
    results = run_rounds(table, world(args.bundle_mib), args.storage_mbps, args.runs)
    how = "over Xet" if args.hf_xet else "through the storage redirect (HF_HUB_DISABLE_XET=1)"
    print(f"\nbundle: {args.bundle_mib} MiB; `hf download` {how}; "
          f"medians of {args.runs} runs (range); build {commit()}\n")
    print_tables(results)
    medians = {n: statistics.median(r["sync_after_s"] for s in results for r in results[s][n]) for n in table}
    print("\na `sync` after each, medians (not in its time): "
          + "; ".join(f"{n} {s:.1f} s" for n, s in medians.items()))
    if args.json:
        args.json.write_text(json.dumps({"build": commit(), "runs": args.runs, "results": results}, indent=2))


if __name__ == "__main__":
    main()
