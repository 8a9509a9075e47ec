#!/usr/bin/env python3
"""How fast an audit records repos, on SQLite and on PostgreSQL, in the same run.

    cargo build --release --workspace --bins && python3 bench/audit_write_bench.py [--repos 5000] [--rounds 2]

The audit benchmark's world (bench/audit_bench.py: 5,000 MLX repos, 12,500 shards) served by `hubsim`
with no added latency and no Xet, so the network costs little and the store's writes show: `hubalign audit
--concurrency 8` into a fresh SQLite file and into a fresh database on a scratch PostgreSQL server
(bench/scratch_pg.py, `fsync` off), alternated, --rounds times each. Prints repos recorded per second.
"""

import argparse
import json
import re
import statistics
import subprocess
import tempfile
import time

from audit_bench import BIN, ROOT, SIM, build_world
from scratch_pg import scratch_postgres


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repos", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    world = ROOT / f"target/bench/audit-world-{args.repos}"
    meta = world / "world.json"
    if not meta.exists():
        world.mkdir(parents=True, exist_ok=True)
        minimum, shards = build_world(world, args.repos)
        meta.write_text(json.dumps({"minimum": minimum, "shards": shards}))
    shards = json.loads(meta.read_text())["shards"]
    sim = subprocess.Popen([SIM, "--root", world, "--port", "0", "--latency-ms", "0", "--no-xet"],
                           stdout=subprocess.PIPE, text=True)
    url = re.search(r"http://[0-9.:]+", sim.stdout.readline()).group(0)
    times = {"SQLite": [], "PostgreSQL": []}
    try:
        with scratch_postgres() as new_database, tempfile.TemporaryDirectory() as tmp:
            for r in range(args.rounds):
                for backend in times:
                    db = f"{tmp}/audit-{r}.db" if backend == "SQLite" else new_database()
                    t = time.perf_counter()
                    subprocess.run([BIN, "audit", "--endpoint", url, "--db", db, "--concurrency", "8"], check=True,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    times[backend].append(time.perf_counter() - t)
    finally:
        sim.terminate()
        sim.wait()
    print(f"{args.repos} repos, {shards} shards; `audit --concurrency 8`, simulator without latency\n")
    print("| store | runs | median | repos/s | shards/s |")
    print("|---|---|---|---|---|")
    for backend, runs in times.items():
        m = statistics.median(runs)
        print(f"| {backend} | {', '.join(f'{s:.1f} s' for s in runs)} | {m:.1f} s | {args.repos / m:.0f} | {shards / m:.0f} |")


if __name__ == "__main__":
    main()
