#!/usr/bin/env python3
"""A crawl of the synthetic Hub population under the Hub's quotas, alone, against its bounds in the same run.

    cargo build --release --workspace --bins
    python3 bench/crawl_bench.py --repos 100000 --compress 100 [--store postgres] [--bin OTHER_BUILD/hubalign]

Serves `hubsim --population N` (seed 1, the rehearsal's population) with the Hub's quotas: 1,000 api and 5,000
resolver requests per window of 300 s divided by --compress, per token. Then, in the same run:
1. the raw listing: every page of the crawl's query (`filter=mlx&full=true&limit=1000`, the same token), read
   to the end with urllib and thrown away. Nothing a crawl does can list faster;
2. `hubalign audit` into a fresh store: the first complete crawl (every repo probed);
3. `hubalign audit` again into the same store: a crawl that finds nothing changed (every repo listed, none
   probed).
The quota bound of a crawl is its own requests over the allowed rate, per bucket, the slower bucket:
max(api / api quota, resolver / resolver quota) x window. Its floor is the larger of that and the raw listing.
Requests are the run's counts as the store recorded them, and the simulator's counters; 429s are the
simulator's count.
"""

import argparse
import json
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scratch_pg import scratch_postgres, _bin as pg_bin_dir  # noqa: E402
from sim import start_hubsim  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TOKEN, USER = "hf_crawl", "crawl"


def start_sim(args, root, window):
    return start_hubsim(args.bin_dir / "hubsim", root / "hub", "--token", f"{TOKEN}:{USER}",
                        "--population", str(args.repos), "--sample", "0", "--seed", str(args.seed),
                        "--rate-limit-api", str(args.api_quota), "--rate-limit-resolvers", str(args.resolver_quota),
                        "--rate-window", str(window), "--error-rate", str(args.error_rate), "--no-xet")


def counters(hub):
    with urllib.request.urlopen(f"{hub}/_sim/counters", timeout=60) as r:
        return json.load(r)


def raw_listing(hub):
    """Every page of the crawl's query, read and dropped; returns (seconds, pages, bytes)."""
    url = f"{hub}/api/models?filter=mlx&full=true&limit=1000"
    pages = size = 0
    started = time.perf_counter()
    while url:
        req = urllib.request.Request(url, headers={"Authorization": f"Bearer {TOKEN}"})
        with urllib.request.urlopen(req, timeout=600) as r:
            size += len(r.read())
            link = r.headers.get("Link") or ""
        pages += 1
        m = re.search(r'<([^>]+)>;\s*rel="next"', link)
        url = m.group(1) if m else None
    return time.perf_counter() - started, pages, size


def last_run(store):
    columns = "status, started_at, finished_at, repos_listed, repos_probed, shards_probed, api_requests, " \
              "resolver_requests, rate_limited"
    sql = f"SELECT {columns} FROM audit_runs WHERE kind = 'crawl' ORDER BY id DESC LIMIT 1"
    if store.startswith("postgres://"):
        m = re.match(r"postgres://postgres@127.0.0.1:(\d+)/(\w+)", store)
        out = subprocess.run([f"{pg_bin_dir()}/psql", "-q", "-At", "-F", "\t", "-h", "127.0.0.1", "-p", m.group(1),
                              "-U", "postgres", "-d", m.group(2), "-c", sql], check=True, capture_output=True,
                             text=True).stdout
        row = out.strip().split("\t")
    else:
        with sqlite3.connect(store) as db:
            row = list(db.execute(sql).fetchone())
    keys = [c.strip() for c in columns.split(",")]
    return dict(zip(keys, row))


def crawl(args, hub, store):
    before = counters(hub)
    started = time.perf_counter()
    subprocess.run([args.bin, "audit", "--endpoint", hub, "--token", TOKEN, "--db", store, "--concurrency",
                    str(args.concurrency), "--max-wait", "600", "-q"], check=True, stdout=subprocess.DEVNULL)
    took = time.perf_counter() - started
    after = counters(hub)
    run = last_run(store)
    assert run["status"] == "finished", run
    return took, run, {k: after[k] - before.get(k, 0) for k in after if isinstance(after[k], int)}


def row(name, took, run, sim, window, args, listing):
    api, res = int(run["api_requests"]), int(run["resolver_requests"])
    quota = max(api / args.api_quota, res / args.resolver_quota) * window
    floor = max(quota, listing)
    return (f"| {name} | {took:.1f} s | {int(run['repos_listed']):,} listed, {int(run['repos_probed']):,} repos and "
            f"{int(run['shards_probed']):,} shards probed; {api:,} api + {res:,} resolver requests; "
            f"{sim.get('rate_limited', 0)} answered 429 | {quota:.1f} s | {took / quota:.2f}x | "
            f"{floor:.1f} s | **{took / floor:.2f}x** |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repos", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--compress", type=float, default=100, help="the quota window is 300 s divided by this")
    ap.add_argument("--api-quota", type=int, default=1000)
    ap.add_argument("--resolver-quota", type=int, default=5000)
    ap.add_argument("--error-rate", type=float, default=0.0, help="5xx answers, as hubsim's --error-rate")
    ap.add_argument("--concurrency", type=int, default=8, help="audit --concurrency")
    ap.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    ap.add_argument("--bin", type=Path, default=ROOT / "target/release/hubalign", help="the hubalign to time")
    ap.add_argument("--bin-dir", type=Path, default=ROOT / "target/release", help="where hubsim is")
    args = ap.parse_args()
    for tool in (args.bin, args.bin_dir / "hubsim"):
        if not tool.exists():
            sys.exit(f"{tool} missing: cargo build --release --workspace --bins")
    window = max(1, round(300 / args.compress))
    with tempfile.TemporaryDirectory(prefix="hubalign-crawl-bench-") as tmp, scratch_postgres() as new_database:
        root = Path(tmp)
        started = time.perf_counter()
        sim, hub = start_sim(args, root, window)
        try:
            print(f"hubsim: {args.repos} repos (seed {args.seed}) made and served in "
                  f"{time.perf_counter() - started:.1f} s; quotas {args.api_quota} api and {args.resolver_quota} "
                  f"resolver requests per {window} s; store {args.store}; {args.bin}", flush=True)
            listing, pages, size = raw_listing(hub)
            print(f"raw listing: {pages} pages, {size / 1e6:.1f} MB in {listing:.1f} s", flush=True)
            time.sleep(window)  # the raw listing's api requests out of the crawl's window
            store = new_database() if args.store == "postgres" else str(root / "crawl.db")
            first = crawl(args, hub, store)
            print(f"first crawl: {first[0]:.1f} s", flush=True)
            time.sleep(window)
            again = crawl(args, hub, store)
        finally:
            sim.terminate()
            sim.wait()
    print()
    print("| crawl | wall time | what it did | quota bound | ratio | floor: max(quota bound, raw listing) | ratio |")
    print("|---|---|---|---|---|---|---|")
    print(row("first complete crawl", *first, window, args, listing))
    print(row("again, nothing changed", *again, window, args, listing))
    print(f"\nraw listing in the same run: {pages} pages, {size / 1e6:.1f} MB, {listing:.1f} s")


if __name__ == "__main__":
    main()
