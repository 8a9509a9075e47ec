#!/usr/bin/env python3
"""The webhook lag's read (`/metrics`' `hubalign_webhook_last_lag_seconds`, the overview's webhook line),
before and after it walked the publications newest first, in the same run.

    cargo build --release --workspace --bins && python3 bench/lag_bench.py [--jobs 200000 --rounds 10]

A store holds --jobs published jobs, each with the run that recorded its commit. Three shapes:

- webhook-led: half the runs are webhooks' runs, spread over the whole history (the newest publication was
  led by one, as in a service that receives webhooks);
- no webhook runs: webhooks are served but none has led to a run yet;
- webhooks from late on: only the last 1% of the runs are webhooks', and none of them led to a publication.

Baseline: the query before the change (every published job joined to its history, then sorted), on the same
rows without the change's two indexes (`jobs_published`, `audit_runs_kind`). SQLite: median of --rounds full reads through Python's sqlite3. PostgreSQL 15
(scratch server, the same rows moved with `hubalign store export | import`): median of --rounds `EXPLAIN
ANALYZE` execution times.
"""

import argparse
import datetime
import shutil
import re
import sqlite3
import statistics
import subprocess
import tempfile
import time

from dashboard_bench import BIN
from scratch_pg import _bin as pg_bin, scratch_postgres

BEFORE = """SELECT j.finished_at, COALESCE(r.requested_at, r.started_at) FROM jobs j
JOIN repo_history h ON h.repo_id = j.repo_id AND h.sha = j.source_sha
JOIN audit_runs r ON r.id = h.run_id AND r.kind = 'webhook'
WHERE j.state = 'published' ORDER BY j.finished_at DESC, r.id DESC LIMIT 1"""
AFTER = """SELECT j.finished_at,
       (SELECT COALESCE(r.requested_at, r.started_at) FROM repo_history h JOIN audit_runs r ON r.id = h.run_id
        WHERE h.repo_id = j.repo_id AND h.sha = j.source_sha AND r.kind = 'webhook'
        ORDER BY r.id DESC LIMIT 1) AS arrived
FROM jobs j
WHERE j.state = 'published'
  AND j.finished_at >= (SELECT started_at FROM audit_runs WHERE kind = 'webhook' ORDER BY id LIMIT 1)
  AND EXISTS (SELECT 1 FROM repo_history h JOIN audit_runs r ON r.id = h.run_id
              WHERE h.repo_id = j.repo_id AND h.sha = j.source_sha AND r.kind = 'webhook')
ORDER BY j.finished_at DESC, j.id DESC LIMIT 1"""
QUERIES = {"before (baseline)": BEFORE, "after": AFTER}
NEW_INDEXES = ["jobs_published", "audit_runs_kind"]
START = datetime.datetime(2026, 1, 1)
SHAPES = ["webhook-led", "no webhook runs", "webhooks from late on"]


def stamp(seconds):
    return (START + datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def fill(db, jobs, shape):
    """`jobs` runs, each recording one repo's commit, and that commit's published job, in time order."""
    def kind(i):
        if shape == "webhook-led":
            return "webhook" if i % 2 else "crawl"
        if shape == "webhooks from late on":
            return "webhook" if i > jobs * 99 // 100 and i % 2 == 0 else "crawl"
        return "crawl"

    con = sqlite3.connect(db)
    con.executemany("""INSERT INTO audit_runs (id, started_at, status, endpoint, query, kind, requested_at)
                       VALUES (?, ?, 'finished', 'bench', 'q', ?, ?)""",
                    [(i, stamp(i * 10), kind(i), stamp(i * 10) if kind(i) == "webhook" else None) for i in range(1, jobs + 1)])
    con.executemany("""INSERT INTO repo_history (repo_id, run_id, at, sha, state, affected, misaligned_bytes)
                       VALUES (?, ?, ?, ?, 'ok', 1, 1000)""",
                    [(f"ns{i % 500}/r{i}", i, stamp(i * 10), f"{i:040x}") for i in range(1, jobs + 1)])
    # In the late shape the webhooks' runs read commits that were never published.
    published = [i for i in range(1, jobs + 1) if not (shape == "webhooks from late on" and kind(i) == "webhook")]
    con.executemany("""INSERT INTO jobs (repo_id, source_sha, state, verify_device, created_at, updated_at, finished_at)
                       VALUES (?, ?, 'published', 'cpu', ?, ?, ?)""",
                    [(f"ns{i % 500}/r{i}", f"{i:040x}", stamp(i * 10), stamp(i * 10), stamp(i * 10 + 5)) for i in published])
    con.commit()
    con.close()


def time_sqlite(dbs, rounds):
    """`dbs`: each query's store (the baseline's without the new indexes)."""
    cons = {name: sqlite3.connect(db) for name, db in dbs.items()}
    times, answers = {name: [] for name in QUERIES}, {}
    for _ in range(rounds):
        for name, sql in QUERIES.items():
            t = time.perf_counter()
            answers[name] = cons[name].execute(sql).fetchall()
            times[name].append((time.perf_counter() - t) * 1000)
    for con in cons.values():
        con.close()
    return {name: statistics.median(ts) for name, ts in times.items()}, answers


def psql(url, sql):
    out = subprocess.run([f"{pg_bin()}/psql", "-q", "-At", url, "-c", sql], check=True, capture_output=True, text=True)
    return out.stdout


def time_postgres(urls, rounds):
    times = {name: [] for name in QUERIES}
    for _ in range(rounds):
        for name, sql in QUERIES.items():
            out = psql(urls[name], f"EXPLAIN (ANALYZE) {sql}")
            times[name].append(float(re.search(r"Execution Time: ([0-9.]+) ms", out).group(1)))
    return {name: statistics.median(ts) for name, ts in times.items()}


def without_new_indexes(run_sql):
    for index in NEW_INDEXES:
        run_sql(f"DROP INDEX {index}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args()
    rows = []
    with scratch_postgres() as new_database:
        for shape in SHAPES:
            with tempfile.TemporaryDirectory() as tmp:
                db = f"{tmp}/hubalign.db"
                subprocess.run([BIN, "report", "--db", db, "--create-db"], check=True, stdout=subprocess.DEVNULL)
                fill(db, args.jobs, shape)
                old = f"{tmp}/before.db"
                shutil.copy(db, old)
                with sqlite3.connect(old) as con:
                    without_new_indexes(con.execute)
                dbs = {"before (baseline)": old, "after": db}
                sqlite, answers = time_sqlite(dbs, args.rounds)
                if answers["before (baseline)"] != answers["after"]:
                    raise SystemExit(f"{shape}: the two reads disagree: {answers}")
                subprocess.run([BIN, "store", "export", "--db", db, "--out", f"{tmp}/store.jsonl"], check=True,
                               stdout=subprocess.DEVNULL)
                urls = {}
                for name in QUERIES:
                    urls[name] = new_database()
                    subprocess.run([BIN, "store", "import", "--db", urls[name], f"{tmp}/store.jsonl"], check=True,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                without_new_indexes(lambda sql: psql(urls["before (baseline)"], sql))
                postgres = time_postgres(urls, args.rounds)
                rows.append((shape, sqlite, postgres))
    print(f"\n{args.jobs} published jobs; medians of {args.rounds}\n")
    print("| store | SQLite before | SQLite after | PostgreSQL before | PostgreSQL after |")
    print("|---|---|---|---|---|")
    for shape, sqlite, postgres in rows:
        b, a = "before (baseline)", "after"
        print(f"| {shape} | {sqlite[b]:.1f} ms | {sqlite[a]:.2f} ms ({sqlite[a] / sqlite[b]:.4f}×) "
              f"| {postgres[b]:.1f} ms | {postgres[a]:.2f} ms ({postgres[a] / postgres[b]:.4f}×) |")


if __name__ == "__main__":
    main()
