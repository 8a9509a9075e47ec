#!/usr/bin/env python3
"""Benchmark `serve`'s pages while a worker repacks a 2 GiB bundle, against the same pages with no job.

    cargo build --release --workspace --bins && bash tests/python/setup-venv.sh && \\
        python3 bench/serve_latency_bench.py [--shard-mib 1024 --shards 2] [--other PATH/TO/ANOTHER/hubalign]

Serves the repack benchmark's bundle (`bench/repack_bench.py`'s MLX-layout shards, header padding fixes
them) with `hubsim`, then for each build: runs `serve --workers 0`, which audits the empty store and
queues the job, and samples `/healthz` and `/` for --idle-secs (the baseline), then `serve --workers 1`
(no audit: the last is recent) and samples the same pages from the job's
claim to its end (download, re-lay, verify with the CPU MLX check, publish). One client, a new connection
per request, a request every 5 ms alternating the two pages; latency is the client's wall time per request,
connect included.
`--other` runs a second build through the same phases in the same run.
"""

import argparse
import atexit
import http.client
import json
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from repack_bench import world  # the same bundle, written once for both benchmarks

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "target/release/hubalign"
SIM = ROOT / "target/release/hubsim"
SYNTH = ROOT / "target/release/synth_shard"
PY = ROOT / "target/py-venv/bin/python"
TOKEN = "hf_bench"
PAGES = ("/healthz", "/")
STEPS = ("downloading", "relaying", "verifying", "publishing")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


STARTED = []


def serve(binary, url, db, work, workers):
    port = free_port()
    proc = subprocess.Popen(
        [binary, "serve", "--endpoint", url, "--token", TOKEN, "--db", db, "--work-dir", work,
         "--listen", f"127.0.0.1:{port}", "--interval", "86400", "--workers", str(workers),
         "--verify-device", "cpu", "--python", PY, "--min-downloads", "0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    STARTED.append(proc)
    base = f"127.0.0.1:{port}"
    deadline = time.time() + 60
    while True:
        try:
            urllib.request.urlopen(f"http://{base}/healthz", timeout=1).read()
            return proc, base
        except OSError:
            if time.time() > deadline or proc.poll() is not None:
                sys.exit(f"{binary} serve never answered")
            time.sleep(0.1)


@atexit.register
def stop_services():
    """No `serve` outlives the benchmark, even one that exits early with an error."""
    for proc in STARTED:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def sample(base, until, label=lambda: "idle"):
    """(page, seconds, label) for each request until `until()` says stop."""
    out, i = [], 0
    while not until():
        page = PAGES[i % 2]
        i += 1
        t = time.perf_counter()
        # A connection per request, as a liveness probe or a first page load makes: the accept is timed too.
        conn = http.client.HTTPConnection(*base.split(":"), timeout=30)
        conn.request("GET", page)
        r = conn.getresponse()
        r.read()
        conn.close()
        out.append((page, time.perf_counter() - t, label()))
        if r.status != 200:
            sys.exit(f"GET {page}: HTTP {r.status}")
        time.sleep(0.005)
    return out


def job_state(base):
    jobs = json.load(urllib.request.urlopen(f"http://{base}/api/jobs", timeout=30))
    items = jobs["items"] if isinstance(jobs, dict) else jobs
    return items[0]["state"] if items else None


def stats(samples, page, step=None):
    xs = sorted(s for p, s, at in samples if p == page and step in (None, at))
    if not xs:
        return None
    pick = lambda q: xs[min(len(xs) - 1, int(q * len(xs)))]
    return {"n": len(xs), "p50": pick(0.5), "p99": pick(0.99), "max": xs[-1], "over_100ms": sum(x > 0.1 for x in xs)}


def measure(binary, url, idle_secs):
    work = Path(tempfile.mkdtemp(prefix="hubalign-serve-bench-"))
    try:
        db = work / "store.db"
        # The first `serve` audits the empty store at once and queues the job; the idle sample starts once
        # it has (any build, with or without the pass a leader runs when it takes the lease).
        proc, base = serve(binary, url, db, work / "work", 0)
        deadline = time.time() + 120
        while job_state(base) != "queued":
            if time.time() > deadline:
                sys.exit(f"{binary}: the first serve queued no job")
            time.sleep(0.2)
        end = time.time() + idle_secs
        idle = sample(base, lambda: time.time() > end)
        proc.terminate()
        proc.wait()
        proc, base = serve(binary, url, db, work / "work", 1)
        state = {"last": None, "checked": 0.0}

        def running():
            # The job's state, polled every half second outside the timed requests.
            if time.time() - state["checked"] > 0.5:
                state["last"] = job_state(base)
                state["checked"] = time.time()
            return state["last"] in STEPS

        deadline = time.time() + 120
        while not running():
            if time.time() > deadline:
                sys.exit(f"{binary}: no job started (last state {state['last']})")
            time.sleep(0.05)
        t = time.time()
        busy = sample(base, lambda: not running(), lambda: state["last"])
        job_s = time.time() - t
        final = job_state(base)
        proc.terminate()
        proc.wait()
        if final != "published":
            sys.exit(f"{binary}: the job ended {final}")
        return idle, busy, job_s
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shard-mib", type=int, default=1024)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--idle-secs", type=float, default=15)
    ap.add_argument("--other", type=Path, help="a second hubalign build, measured in the same run")
    args = ap.parse_args()
    for tool in (BIN, SIM, SYNTH, PY):
        if not tool.exists():
            sys.exit(f"{tool} missing: cargo build --release --workspace --bins; tests/python/setup-venv.sh")
    root = world(args.shards, args.shard_mib)
    builds = [("this build", BIN)] + ([(f"`{args.other}`", args.other)] if args.other else [])
    results = []
    for name, binary in builds:
        # A fresh simulated Hub per build, so that each publishes a new mirror.
        store = Path(tempfile.mkdtemp(prefix="hubsim-store-"))
        sim = subprocess.Popen([SIM, "--root", root, "--store", store, "--port", "0", "--token",
                                f"{TOKEN}:bench"], stdout=subprocess.PIPE, text=True)
        try:
            url = re.search(r"http://[0-9.:]+", sim.stdout.readline()).group(0)
            results.append((name, *measure(binary, url, args.idle_secs)))
        finally:
            sim.terminate()
            sim.wait()
            shutil.rmtree(store, ignore_errors=True)
    size = sum(p.stat().st_size for p in (root / "models/bench-org/big-q4").glob("*.safetensors"))
    print(f"bundle: {args.shards} shards, {size / 1e9:.2f} GB; one client, a new connection per request, a request every 5 ms\n")
    print("| build | page | while | requests | p50 | p99 | max | over 100 ms | p99 / idle p99 |")
    print("|---|---|---|---|---|---|---|---|---|")
    ms = lambda s: f"{s * 1000:.1f} ms"
    for name, idle, busy, job_s in results:
        for page in PAGES:
            i, b = stats(idle, page), stats(busy, page)
            print(f"| {name} | `{page}` | idle | {i['n']} | {ms(i['p50'])} | {ms(i['p99'])} | {ms(i['max'])} | {i['over_100ms']} | 1.00x |")
            print(f"| {name} | `{page}` | repack ({job_s:.1f} s) | {b['n']} | {ms(b['p50'])} | {ms(b['p99'])} | {ms(b['max'])} | "
                  f"{b['over_100ms']} | {b['p99'] / i['p99']:.2f}x |")
            for step in STEPS:
                b = stats(busy, page, step)
                if b:
                    print(f"| {name} | `{page}` | {step} | {b['n']} | {ms(b['p50'])} | {ms(b['p99'])} | {ms(b['max'])} | "
                          f"{b['over_100ms']} | {b['p99'] / i['p99']:.2f}x |")


if __name__ == "__main__":
    main()
