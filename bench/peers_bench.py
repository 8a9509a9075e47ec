#!/usr/bin/env python3
"""hubalign's whole repack against `hf download` alone and against the pipeline a person runs without hubalign.

    cargo build --release --workspace --bins && bash tests/python/setup-venv.sh && python3 bench/peers_bench.py [--runs 3] [--json FILE]

One MLX bundle of --bundle-mib MiB (1 GiB by default): half of it one shard that only a reorder fixes, the
rest two shards that header padding fixes (`synth_shard`, pseudo-random payloads, as repack_bench.py's). For
each link speed (`hubsim --storage-mbps`: 150 and 1000 MB/s per connection, and no limit), --runs times, three
measures, each against a fresh simulator (Xet on; a fresh store, so no upload deduplicates against an earlier
measure's):

- repack: `hubalign repack` as repack_bench.py runs it (SQLite, `--verify-device cpu`: the MLX check
  included), after an untimed `hubalign audit`;
- hf download: `hf download REPO --local-dir DIR` from the venv, with a fresh HF_HOME;
- peers: `hf download`, then `hubalign fix DIR --out FIXED` as the repair script, then `hf upload NEW FIXED`
  (which creates the repo).

`hf download` runs with HF_HUB_DISABLE_XET=1: it then fetches through the storage redirect, which
`--storage-mbps` holds, as hubalign's download does. The simulator does not hold its Xet CAS reads, so with
`--hf-xet` (`hf download` over Xet) only the column without a limit compares like with like. `hf upload` uses
Xet, as a person's would. Each measure is its commands' wall time: Python's start and hubalign's checks at start
included. Before each, `sync` (with --cold, the page cache dropped too; root only). The order of the measures
turns with each run. `--build NAME=PATH` also times the repack by PATH, another hubalign build (one without a
mechanism, or an earlier commit), in the same run: the figures drift between runs as much as a small change
moves them. `--repack-only` times the repacks alone, for more rounds in the same time.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from repack_bench import BIN, PY, SIM, SYNTH, TOKEN, ts
from scan_bench import drop_caches

ROOT = Path(__file__).resolve().parent.parent
HF = ROOT / "target/py-venv/bin/hf"
SOURCE = "bench-org/big-q4"
# The token's user is `bench` (hubsim --token hf_bench:bench): the peers' repo goes to its namespace.
PEERS_REPO = "bench/big-q4-peers"


def world(bundle_mib):
    """The simulated Hub directory holding `bench-org/big-q4`: one shard of half the bundle that needs a reorder,
    two of a quarter each that header padding fixes. Written once (aside, then renamed), then reused."""
    root = ROOT / f"target/bench/peers-world-{bundle_mib}"
    if root.exists():
        return root
    partial = root.with_name(root.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    repo = partial / "models" / SOURCE
    repo.mkdir(parents=True)
    shards = [(bundle_mib // 2, "relayout"), (bundle_mib // 4, "pad"), (bundle_mib // 4, "pad")]
    for i, (mib, kind) in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        subprocess.run([SYNTH, repo / name, str(mib), kind], check=True)
    # A type mlx-lm does not build, as the simulator's population says: the check's `mlx_lm.load` says why it
    # did not load it (its synthetic tensors make no whole model) instead of failing the job.
    (repo / "config.json").write_text('{"model_type": "hubsim_synthetic"}')
    (repo / ".hubsim.json").write_text('{"library_name": "mlx", "license": "mit"}')
    partial.rename(root)
    return root


@contextmanager
def simulator(hub_root, mbps, store):
    """`hubsim` over HUB_ROOT, as repack_bench.py starts it, with its store in STORE and each storage answer held
    to MBPS MB/s (0: no limit). Yields its endpoint once it serves (the bundle ingested into its Xet CAS)."""
    sim = subprocess.Popen([SIM, "--root", hub_root, "--store", store, "--port", "0", "--token", f"{TOKEN}:bench",
                            "--storage-mbps", str(mbps)], stdout=subprocess.PIPE, text=True)
    try:
        served = re.search(r"http://[0-9.:]+", sim.stdout.readline())
        if not served:
            sys.exit(f"{SIM} exited before serving (status {sim.wait()})")
        yield served.group(0)
    finally:
        sim.terminate()
        sim.wait()


def settle(cold):
    """Before a timed measure: what earlier ones wrote goes to the disk (`sync`); with `cold`, the page cache is
    dropped as well."""
    subprocess.run(["sync"], check=True)
    if cold and not drop_caches():
        sys.exit("--cold drops the page cache, which needs root")


def timed(argv, env=None):
    """Seconds `argv` took, and its completed process; exits with its output if it failed."""
    t = time.perf_counter()
    run = subprocess.run(argv, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t
    if run.returncode != 0:
        command = " ".join(map(str, argv[:3]))
        sys.exit(f"{command} … failed (exit {run.returncode}):\n{run.stdout[-2000:]}\n{run.stderr[-4000:]}")
    return seconds, run


def hf_env(url, home, xet):
    """`hf` against the simulator: its token, HF_HOME, no telemetry or progress bars. Without `xet`, downloads go
    through the storage redirect that --storage-mbps holds."""
    env = dict(os.environ, HF_ENDPOINT=url, HF_TOKEN=TOKEN, HF_HOME=str(home), HF_HUB_DISABLE_TELEMETRY="1",
               HF_HUB_DISABLE_PROGRESS_BARS="1")
    if not xet:
        env["HF_HUB_DISABLE_XET"] = "1"
    return env


def steps(log, t0, t_end):
    """From the worker's JSON log, read as repack_bench.py reads it: the seconds before its first step (its checks
    at start), each step's, and from the first step to the end (repack_bench.py's "whole repack")."""
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    marks = [(line["fields"]["step"], ts(line)) for line in lines if line.get("fields", {}).get("message") == "step"]
    if not marks:
        sys.exit("no `step` lines in the worker's log (run with --log-json and RUST_LOG=hubalign=info)")
    marks.append(("end", t_end))
    durations = {a[0]: b[1] - a[1] for a, b in zip(marks, marks[1:])}
    return {"before_steps_s": marks[0][1] - t0, "steps": durations, "steps_s": t_end - marks[0][1]}


def repack(url, work, worker, cold):
    """`hubalign repack` of the bundle with repack_bench.py's command line, after an untimed audit: its wall
    time, with its steps from its log."""
    db = work / "store.db"
    timed([worker, "audit", "--endpoint", url, "--token", TOKEN, "--db", db])
    argv = [worker, "--log-json", "repack", SOURCE, "--endpoint", url, "--token", TOKEN, "--db", db,
            "--work-dir", work / "work", "--verify-device", "cpu", "--python", PY]
    settle(cold)
    t0 = time.time()
    seconds, run = timed(argv, dict(os.environ, RUST_LOG="hubalign=info"))
    return {"wall_s": seconds, **steps(run.stderr, t0, time.time())}


def hf_download(url, work, xet, cold):
    """`hf download` of the bundle into a fresh directory, with a fresh HF_HOME: its wall time."""
    settle(cold)
    seconds, _ = timed([HF, "download", SOURCE, "--local-dir", work / "download"], hf_env(url, work / "hf-home", xet))
    return {"wall_s": seconds}


def peers(url, work, xet, cold):
    """The pipeline without hubalign's repack: `hf download`, `hubalign fix` as the repair script, `hf upload` to
    a new repo (it creates the repo). Each command's wall time, and their sum."""
    download, fixed, home = work / "download", work / "fixed", work / "hf-home"
    settle(cold)
    download_s, _ = timed([HF, "download", SOURCE, "--local-dir", download], hf_env(url, home, xet))
    fix_s, _ = timed([BIN, "fix", download, "--out", fixed])
    upload_s, _ = timed([HF, "upload", PEERS_REPO, fixed, "."], hf_env(url, home, xet=True))
    return {"download_s": download_s, "fix_s": fix_s, "upload_s": upload_s,
            "wall_s": download_s + fix_s + upload_s}


def measures(args):
    """Each measure by name: what it runs against an endpoint and a fresh work directory."""
    table = {"repack": lambda url, work: repack(url, work, args.worker, args.cold)}
    if not args.repack_only:
        table["hf download"] = lambda url, work: hf_download(url, work, args.hf_xet, args.cold)
        table["peers"] = lambda url, work: peers(url, work, args.hf_xet, args.cold)
    for name, build in args.build:
        table[f"build {name}"] = lambda url, work, build=build: repack(url, work, build, args.cold)
    return table


def measure(run, hub_root, mbps):
    """One measure against a fresh simulator held to MBPS, in a fresh temporary directory: its figures, with
    the seconds a `sync` took after it (what it left in the page cache, not in its time) and the bytes the
    simulator served and received, of which by Xet and by LFS (the repack's untimed audit is in them: a few
    headers)."""
    with tempfile.TemporaryDirectory(prefix="hubalign-peers-") as tmp, \
            simulator(hub_root, mbps, Path(tmp) / "store") as url:
        figures = run(url, Path(tmp))
        t = time.perf_counter()
        subprocess.run(["sync"], check=True)
        figures["sync_after_s"] = time.perf_counter() - t
        with urllib.request.urlopen(f"{url}/_sim/counters") as r:
            counters = json.load(r)
        for key in ("bytes_served", "bytes_received", "xet_bytes_received", "lfs_bytes_received"):
            figures[key] = counters[key]
    return figures


def require(*tools):
    """Exits naming the first of `tools` that is missing, and how to build it."""
    for tool in tools:
        if not tool.exists():
            sys.exit(f"{tool} missing: cargo build --release --workspace --bins; tests/python/setup-venv.sh")


def run_rounds(table, hub_root, speeds, runs):
    """Every measure of `table` at every speed, `runs` times, each against a fresh simulator. The order of the
    measures turns with each run. Returns the figures by speed, then by measure, run by run."""
    names = list(table)
    results = {link(mbps): {name: [] for name in names} for mbps in speeds}
    for r in range(runs):
        order = names[r % len(names):] + names[:r % len(names)]
        for mbps in speeds:
            for name in order:
                figures = measure(table[name], hub_root, mbps)
                results[link(mbps)][name].append(figures)
                print(f"run {r + 1}, {link(mbps)}: {name}: {figures['wall_s']:.1f} s", flush=True)
    return results


def link(mbps):
    """A link speed as the tables name it."""
    return f"{mbps:g} MB/s" if mbps else "no limit"


def spread(values):
    """Median and range of seconds: `7.8 s (7.6–8.1)`."""
    return f"{statistics.median(values):.1f} s ({min(values):.1f}–{max(values):.1f})"


def ratio(a, b):
    """Median of `a` over median of `b`, with the range of the ratios run by run."""
    per_run = [x / y for x, y in zip(a, b)]
    return f"{statistics.median(a) / statistics.median(b):.2f}× ({min(per_run):.2f}–{max(per_run):.2f})"


def walls(results, speed, name, key="wall_s"):
    """One figure of one measure at one speed, run by run."""
    return [r[key] for r in results[speed][name]]


def print_headline(results):
    """The table for BENCHMARKS.md: each measure's median and range, and the repack's ratios."""
    print("| storage per connection | `hubalign repack` (MLX check included) | `hf download` | "
          "`hf download` → `hubalign fix` → `hf upload` | repack / `hf download` | repack / pipeline |")
    print("|---|---|---|---|---|---|")
    for speed in results:
        a, b, c = (walls(results, speed, name) for name in ("repack", "hf download", "peers"))
        print(f"| {speed} | {spread(a)} | {spread(b)} | {spread(c)} | {ratio(a, b)} | {ratio(a, c)} |")


def print_parts(results):
    """Where each one's time goes, medians: the repack's checks at start, download and the rest; the pipeline's
    three commands."""
    print("| storage per connection | repack: checks at start | repack: download | repack: after the download | "
          "pipeline: `hf download` | pipeline: `hubalign fix` | pipeline: `hf upload` |")
    print("|---|---|---|---|---|---|---|")
    for speed in results:
        runs = results[speed]["repack"]
        download = [r["steps"].get("downloading", 0.0) for r in runs]
        rest = [r["steps_s"] - d for r, d in zip(runs, download)]
        cells = [statistics.median(walls(results, speed, "repack", "before_steps_s")), statistics.median(download),
                 statistics.median(rest)]
        cells += [statistics.median(walls(results, speed, "peers", k)) for k in ("download_s", "fix_s", "upload_s")]
        print(f"| {speed} | " + " | ".join(f"{s:.1f} s" for s in cells) + " |")


def print_builds(results, names):
    """Each other build's repack against this tree's, in the same run."""
    print("| storage per connection | other build | repack by this tree | by the other build | other / this |")
    print("|---|---|---|---|---|")
    for speed in results:
        for name in names:
            this, other = walls(results, speed, "repack"), walls(results, speed, f"build {name}")
            print(f"| {speed} | {name} | {spread(this)} | {spread(other)} | {ratio(other, this)} |")


def print_aside(results, names):
    """Per measure, over every speed, medians: the `sync` after it, and the bytes the simulator served and
    received (an upload that Xet deduplicated against the source sends little)."""
    def median(key, name):
        return statistics.median(r[key] for speed in results for r in results[speed][name])
    print("\nmedians over every speed, per measure: " + "; ".join(
        f"{name}: a `sync` after it {median('sync_after_s', name):.1f} s (not in its time), "
        f"served {median('bytes_served', name) / 1e9:.2f} GB, "
        f"received {median('bytes_received', name) / 1e6:.1f} MB "
        f"(Xet {median('xet_bytes_received', name) / 1e6:.1f} MB, LFS {median('lfs_bytes_received', name) / 1e6:.1f} MB)"
        for name in names))


def other_build(spec):
    """`--build NAME=PATH`: a name for the table, and the hubalign binary at PATH."""
    name, sep, path = spec.partition("=")
    if not name or not sep:
        raise argparse.ArgumentTypeError("NAME=PATH: a name for the table, and another hubalign build")
    return name, Path(path)


def commit():
    """The commit this tree is at, and whether it has changes, for the record."""
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain"], capture_output=True, text=True)
    return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundle-mib", type=int, default=1024,
                    help="the bundle's size: half a shard that needs a reorder, two quarters that header padding fixes")
    ap.add_argument("--storage-mbps", type=float, nargs="+", default=[150, 1000, 0],
                    help="the link speeds: each storage answer held to this rate, as a CDN holds each connection "
                         "(0: no limit)")
    ap.add_argument("--runs", type=int, default=3, help="rounds of every measure at every speed")
    ap.add_argument("--worker", type=Path, default=BIN,
                    help="the hubalign that audits and repacks (another build, to compare; `fix` is this one's)")
    ap.add_argument("--build", type=other_build, action="append", default=[], metavar="NAME=PATH",
                    help="also time the repack by PATH, another hubalign build (one without a mechanism, or an "
                         "earlier commit), shown as NAME")
    ap.add_argument("--repack-only", action="store_true",
                    help="time only the repacks (this tree's and each --build's), not `hf download` or the pipeline")
    ap.add_argument("--hf-xet", action="store_true",
                    help="let `hf download` use Xet, whose CAS reads --storage-mbps does not hold")
    ap.add_argument("--cold", action="store_true", help="drop the page cache before each measure (root only)")
    ap.add_argument("--json", type=Path, help="write every measure's raw figures here")
    args = ap.parse_args()
    require(BIN, SIM, SYNTH, PY, HF, args.worker, *(path for _, path in args.build))
    hub_root = world(args.bundle_mib)
    shards = sorted((hub_root / "models" / SOURCE).glob("*.safetensors"))
    size = sum(p.stat().st_size for p in shards)
    table = measures(args)
    names = list(table)
    results = run_rounds(table, hub_root, args.storage_mbps, args.runs)

    print(f"\nbundle: {len(shards)} shards, {size / 1e9:.2f} GB ({args.bundle_mib // 2} MiB to reorder, two of "
          f"{args.bundle_mib // 4} MiB header-padded); Xet on; `hf download` "
          f"{'over Xet' if args.hf_xet else 'through the storage redirect (HF_HUB_DISABLE_XET=1)'}; "
          f"{'cold' if args.cold else 'warm'} page cache; medians of {args.runs} runs (range); build {commit()}\n")
    if not args.repack_only:
        print_headline(results)
        print()
        print_parts(results)
    if args.build:
        print()
        print_builds(results, [name for name, _ in args.build])
    print_aside(results, names)
    if args.json:
        args.json.write_text(json.dumps({
            "build": commit(), "cores": os.cpu_count(), "bundle_bytes": size,
            "shards": {p.name: p.stat().st_size for p in shards}, "runs": args.runs, "hf_xet": args.hf_xet,
            "cold": args.cold, "repack_only": args.repack_only, "worker": str(args.worker),
            "builds": {n: str(p) for n, p in args.build},
            "results": results,
        }, indent=2))


if __name__ == "__main__":
    main()
