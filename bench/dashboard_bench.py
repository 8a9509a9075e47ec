#!/usr/bin/env python3
"""Time the dashboard and the JSON API with 50,000 repos in the store.

    cargo build --release --workspace --bins && python3 bench/dashboard_bench.py [--repos 50000]  # HUBALIGN_BIN=... for another build

Creates a store with `hubalign report` (which runs the migrations), fills it with --repos audited repos
(2.5 shards each, 500 namespaces, one of them holding a fifth of all repos) straight through SQLite,
starts `hubalign serve` on it (against an empty `hubsim`, so its audit changes nothing; `--include` of a
publisher that does not exist, so no jobs run), and times
each page as the median of --rounds GETs. The baseline is /healthz in the same run: the HTTP round trip plus a
`SELECT 1`, i.e. everything but the page's own queries and rendering.
"""

import argparse
import os
import random
import re
import sqlite3
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from scratch_pg import scratch_postgres

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(os.environ.get("HUBALIGN_BIN", ROOT / "target/release/hubalign"))
SIM = ROOT / "target/release/hubsim"
# serve checks at start that its MLX check can run (it refuses to start otherwise): the test venv has MLX.
PYTHON = ROOT / "target/py-venv/bin/python"
VERDICTS = ["aligned", "header_pad", "header_pad", "relayout", "invalid"]


def fill(db, repos, seed=11):
    rng = random.Random(seed)
    con = sqlite3.connect(db)
    con.execute("INSERT INTO audit_runs (started_at, finished_at, status, endpoint, query) "
                "VALUES ('2026-11-29T00:00:00Z', '2026-11-29T01:00:00Z', 'finished', 'bench', '{}')")
    repo_rows, shard_rows = [], []
    for i in range(repos):
        ns = "mlx-community" if i % 5 == 0 else f"pub{i % 499:03d}"
        rid = f"{ns}/model-{i:06d}"
        sha = f"{i:040x}"
        repo_rows.append((rid, ns, sha, sha, "ok", 1, 1, "2026-11-29T00:30:00Z"))
        for s in range(rng.choice([1, 2, 3, 4])):
            verdict = rng.choice(VERDICTS)
            bad = 0 if verdict in ("aligned", "invalid") else rng.randrange(1, 300)
            shard_rows.append((rid, f"model-{s:05d}.safetensors", f"{i:032x}{s:032x}", 5 << 30, 40_000, 40_008,
                               0, 300, bad, bad * 4_000_000, verdict, "mlx"))
    con.executemany("INSERT INTO repos (id, namespace, listed_sha, audited_sha, state, last_listed_run, "
                    "last_audited_run, last_audited_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", repo_rows)
    con.executemany("INSERT INTO shards (repo_id, path, sha, size, header_len, data_start, data_start_mod8, tensors, "
                    "misaligned_tensors, misaligned_bytes, verdict, writer) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                    shard_rows)
    con.commit()
    con.close()
    return len(shard_rows)


def time_pages(db, tmp, rounds):
    """Starts `serve` on `db` (against an empty simulator) and times each page: (page, median ms) pairs."""
    hub = Path(tmp) / "hub"
    hub.mkdir(exist_ok=True)
    sim = subprocess.Popen([SIM, "--root", hub, "--port", "0", "--token", "hf_bench:bench"],
                           stdout=subprocess.PIPE, text=True)
    endpoint = re.search(r"http://[0-9.:]+", sim.stdout.readline()).group(0)
    serve = subprocess.Popen([BIN, "serve", "--endpoint", endpoint, "--token", "hf_bench", "--db", db,
                              "--listen", "127.0.0.1:18391", "--verify-device", "cpu", "--python", PYTHON,
                              "--work-dir", f"{tmp}/work",
                              "--include", "no-such-publisher"],
                             stdout=subprocess.DEVNULL)
    base = "http://127.0.0.1:18391"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"{base}/healthz").read()
                break
            except OSError:
                time.sleep(0.1)
        settle(base)
        return [(p, median_ms(base + p, rounds)) for p in PAGES]
    finally:
        serve.terminate()
        sim.terminate()
        serve.wait()
        sim.wait()


def settle(base, timeout=1800):
    """Waits for serve's first cycle to end (its audit of the empty simulator, then the queueing of every
    affected repo as a skipped job, in one transaction), so that no page is timed while it writes."""
    t, last, steady = time.perf_counter(), None, 0
    while time.perf_counter() - t < timeout:
        metrics = urllib.request.urlopen(f"{base}/metrics").read().decode()
        jobs = int(re.search(r'hubalign_jobs\{state="skipped"\} (\d+)', metrics).group(1))
        steady = steady + 1 if jobs and jobs == last else 0
        if steady >= 3:
            print(f"serve settled in {time.perf_counter() - t:.1f} s ({jobs} jobs)", flush=True)
            return
        last = jobs
        time.sleep(1)
    raise SystemExit("serve did not settle")


PAGES = ["/healthz", "/", "/?sort=repos", "/ns/mlx-community", "/ns/mlx-community?page=99", "/ns/pub007",
         "/repo/mlx-community/model-000005", "/api/publishers", "/api/repos?namespace=mlx-community", "/metrics",
         # Issue 26's ways in: every namespace, and a search (a scan of every name: one that finds nothing
         # reads them all).
         "/namespaces", "/namespaces?page=1", "/search?q=Model-00000", "/search?q=no-such-name", "/jobs"]


def median_ms(url, rounds):
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        with urllib.request.urlopen(url) as r:
            r.read()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repos", type=int, default=50_000)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--backends", nargs="+", default=["sqlite", "postgres"], choices=["sqlite", "postgres"])
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = f"{tmp}/hubalign.db"
        subprocess.run([BIN, "report", "--db", db, "--create-db"], check=True, stdout=subprocess.DEVNULL)
        shards = fill(db, args.repos)
        columns = [("SQLite", time_pages(db, tmp, args.rounds))]
        if "postgres" in args.backends:
            # The same rows on PostgreSQL, moved with the store's own export and import.
            subprocess.run([BIN, "store", "export", "--db", db, "--out", f"{tmp}/store.jsonl"], check=True)
            with scratch_postgres() as new_database:
                url = new_database()
                t = time.perf_counter()
                subprocess.run([BIN, "store", "import", "--db", url, f"{tmp}/store.jsonl"], check=True)
                print(f"imported into PostgreSQL in {time.perf_counter() - t:.1f} s")
                columns.append(("PostgreSQL", time_pages(url, tmp, args.rounds)))
    print(f"{args.repos} repos, {shards} shards; median of {args.rounds} GETs each\n")
    print("| page | " + " | ".join(f"{name} median | against {name} /healthz" for name, _ in columns) + " |")
    print("|---|" + "---|---|" * len(columns))
    for i, page in enumerate(PAGES):
        cells = [f"{r[i][1]:.1f} ms | {r[i][1] / r[0][1]:.1f}×" for _, r in columns]
        print(f"| `{page}` | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
