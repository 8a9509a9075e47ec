#!/usr/bin/env python3
"""The queue's reads with and without the `--pr` bookkeeping, in the same run.

    cargo build --release --workspace --bins && python3 bench/enqueue_bench.py [--repos 400000 --rounds 10]

Every serve cycle (and every webhook re-read, for one repo) reads the affected repos to queue with
`Store::candidates`. In `--pr` mode the queue also reads the repos whose owner closed one of hubalign's pull
requests (`Store::declined_repos`, through a partial index). This times the candidates alone (the baseline:
the queue's read before the bookkeeping, and still its only read in mirror mode) against the candidates plus
the declined repos, alternated, on a store filled as `bench/dashboard_bench.py` fills it (--repos repos, 2.5
shards each), with one job per affected repo and 1% of them holding a closed pull request: on SQLite (median
of --rounds full reads through Python's sqlite3), then on PostgreSQL (the same rows moved with `hubalign store
export | import`; median of --rounds `EXPLAIN ANALYZE` execution times). A first version put the declined
column into the candidates query as a correlated subquery: 1.36× on SQLite and 3.52× on PostgreSQL.
"""

import argparse
import re
import sqlite3
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from dashboard_bench import BIN, fill
from scratch_pg import _bin as pg_bin, scratch_postgres

CANDIDATES = """SELECT s.repo, s.namespace, s.sha, s.shards_header_pad, s.shards_relayout, s.shards_invalid,
       s.misaligned_tensors, s.misaligned_bytes,
       COALESCE(r.private, TRUE) AS private, COALESCE(r.gated, FALSE) AS gated,
       COALESCE(r.disabled, FALSE) AS disabled
FROM repo_sums s LEFT JOIN repos r ON r.id = s.repo
WHERE s.misaligned_bytes > 0 AND s.misaligned_bytes >= 0 AND (NULL IS NULL OR s.repo = NULL)
ORDER BY s.misaligned_bytes DESC, s.repo"""
DECLINED = "SELECT DISTINCT repo_id FROM jobs WHERE pr_status = 'closed' AND (NULL IS NULL OR repo_id = NULL)"
QUERIES = {"candidates (baseline; mirror mode)": [CANDIDATES], "candidates + declined repos (--pr mode)": [CANDIDATES, DECLINED],
           "declined repos alone": [DECLINED]}


def add_jobs(db):
    con = sqlite3.connect(db)
    con.execute("""INSERT INTO jobs (repo_id, source_sha, state, verify_device, created_at, updated_at)
                   SELECT repo, sha, 'skipped', 'cpu', '2026-12-02T00:00:00Z', '2026-12-02T00:00:00Z'
                   FROM repo_sums WHERE misaligned_bytes > 0""")
    con.execute("UPDATE jobs SET pr_num = 1, pr_status = 'closed' WHERE id % 100 = 0")
    con.commit()
    jobs = con.execute("SELECT COUNT(*) FROM jobs").fetchone()[0]
    con.close()
    return jobs


def time_sqlite(db, rounds):
    con = sqlite3.connect(db)
    times = {name: [] for name in QUERIES}
    for _ in range(rounds):
        for name, sqls in QUERIES.items():
            t = time.perf_counter()
            rows = [con.execute(sql).fetchall() for sql in sqls][0]
            times[name].append((time.perf_counter() - t) * 1000)
    con.close()
    return {name: statistics.median(ts) for name, ts in times.items()}, len(rows)


def time_postgres(url, rounds):
    psql = [f"{pg_bin()}/psql", "-q", "-At", url]
    times = {name: [] for name in QUERIES}
    for _ in range(rounds):
        for name, sqls in QUERIES.items():
            spent = 0.0
            for sql in sqls:
                out = subprocess.run(psql + ["-c", f"EXPLAIN (ANALYZE) {sql}"], check=True, capture_output=True, text=True)
                spent += float(re.search(r"Execution Time: ([0-9.]+) ms", out.stdout).group(1))
            times[name].append(spent)
    return {name: statistics.median(ts) for name, ts in times.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repos", type=int, default=400_000)
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = f"{tmp}/hubalign.db"
        subprocess.run([BIN, "report", "--db", db, "--create-db"], check=True, stdout=subprocess.DEVNULL)
        shards = fill(db, args.repos)
        jobs = add_jobs(db)
        sqlite, _ = time_sqlite(db, args.rounds)
        candidates = len(sqlite3.connect(db).execute(CANDIDATES).fetchall())
        subprocess.run([BIN, "store", "export", "--db", db, "--out", f"{tmp}/store.jsonl"], check=True)
        with scratch_postgres() as new_database:
            url = new_database()
            subprocess.run([BIN, "store", "import", "--db", url, f"{tmp}/store.jsonl"], check=True)
            postgres = time_postgres(url, args.rounds)
    print(f"\n{args.repos} repos, {shards} shards, {jobs} jobs, {candidates} candidates; medians of {args.rounds}\n")
    print("| query | SQLite | PostgreSQL |")
    print("|---|---|---|")
    for name in QUERIES:
        print(f"| {name} | {sqlite[name]:.0f} ms | {postgres[name]:.0f} ms |")
    base, now, _ = list(QUERIES)
    print(f"\nagainst the baseline: SQLite {sqlite[now] / sqlite[base]:.2f}×, PostgreSQL {postgres[now] / postgres[base]:.2f}×")


if __name__ == "__main__":
    main()
