#!/usr/bin/env python3
"""Mirrors people can find at the scale of the synthetic Hub population: what keeping the Collections and
posting the notes on sources costs in requests to the Hub, from the simulator's counters, against the least
such a pass can make and the Hub's API quota, in the same run.

    cargo build --release --workspace --bins
    python3 bench/findable_bench.py --repos 100000 --mirrors 2000

Serves `hubsim --population N` (seed 1, no quotas), crawls it into a fresh SQLite store, then gives the first
--mirrors public affected repos (taken in the order of their commit ids, which spreads them over the
namespaces) a mirror: the repo created on the simulator under `bench`, and the
store's rows a worker leaves when it publishes (a `published` job and the `mirrors` row). Then, timed, each
with the requests the simulator counted:
1. `hubalign findable --collections` on the empty namespace: every collection created and filled;
2. the same with nothing changed;
3. the same after 1% of the sources turned private in the store (as the audit records it);
4. `hubalign findable --note-sources --max-notes 20`, twice.
"""

import argparse
import datetime
import json
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sim import start_hubsim  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "hf_findable"
OWNER = "bench"
# The Hub's API quota of a free user's token, per 5-minute window (hub-docs rate-limits, September 2025).
FREE_API_QUOTA = 1000


def counters(hub):
    with urllib.request.urlopen(f"{hub}/_sim/counters", timeout=60) as r:
        return json.load(r)


def post_json(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.status


def give_mirrors(hub, store, count):
    """Creates a mirror repo for each of the first `count` public affected repos and records it as published."""
    db = sqlite3.connect(store)
    sources = db.execute(
        """SELECT r.id, r.audited_sha FROM repos r JOIN repo_sums s ON s.repo = r.id
           WHERE r.state = 'ok' AND r.audited_sha IS NOT NULL AND NOT r.private AND NOT r.gated
             AND NOT r.disabled AND s.misaligned_bytes > 0 ORDER BY r.audited_sha LIMIT ?""", (count,)).fetchall()
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    for source, sha in sources:
        name = source.replace("/", "-")[:80] + "-aligned"
        post_json(f"{hub}/api/repos/create", {"name": name, "organization": OWNER, "type": "model"})
        target = f"{OWNER}/{name}"
        db.execute("""INSERT INTO jobs (repo_id, source_sha, state, target_repo, published_commit, created_at,
                                        updated_at, finished_at) VALUES (?, ?, 'published', ?, ?, ?, ?, ?)""",
                   (source, sha, target, "0" * 40, now, now, now))
        db.execute("INSERT INTO mirrors (target_repo, source_repo, created_at) VALUES (?, ?, ?)",
                   (target, source, now))
    db.commit()
    namespaces = {s.split("/")[0] for s, _ in sources}
    return [s for s, _ in sources], namespaces


def findable(bin_, store, hub, *flags):
    """One `findable` pass: (seconds, its lines, requests by class, total requests)."""
    before = counters(hub)
    started = time.perf_counter()
    run = subprocess.run([bin_, "findable", "--db", store, "--target-namespace", OWNER, "--endpoint", hub,
                          "--token", TOKEN, *flags], capture_output=True, text=True)
    took = time.perf_counter() - started
    if run.returncode != 0:
        raise SystemExit(f"findable failed ({run.returncode}): {run.stderr}")
    after = counters(hub)
    by_class = {k: v - before["requests"].get(k, 0) for k, v in after["requests"].items()
                if v - before["requests"].get(k, 0) and k != "sim_control"}
    return took, run.stderr.strip(), by_class, sum(by_class.values())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repos", type=int, default=100_000)
    ap.add_argument("--mirrors", type=int, default=2000)
    ap.add_argument("--bin", type=Path, default=ROOT / "target/release/hubalign")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hubalign-findable-bench-"))
    sim, hub = start_hubsim(ROOT / "target/release/hubsim", work / "hub", "--token", f"{TOKEN}:{OWNER}",
                            "--population", str(args.repos), "--sample", "0", "--seed", "1")
    try:
        store = str(work / "store.db")
        subprocess.run([args.bin, "audit", "--endpoint", hub, "--token", TOKEN, "--db", store, "--concurrency",
                        "8", "-q"], check=True, stdout=subprocess.DEVNULL)
        sources, namespaces = give_mirrors(hub, store, args.mirrors)
        fill = findable(args.bin, store, hub, "--collections")
        again = findable(args.bin, store, hub, "--collections")
        hidden = sources[:: 100]
        db = sqlite3.connect(store)
        db.executemany("UPDATE repos SET private = 1 WHERE id = ?", [(s,) for s in hidden])
        db.commit()
        after_hide = findable(args.bin, store, hub, "--collections")
        settled = findable(args.bin, store, hub, "--collections")
        notes1 = findable(args.bin, store, hub, "--note-sources", "--max-notes", "20")
        notes2 = findable(args.bin, store, hub, "--note-sources", "--max-notes", "20")
    finally:
        sim.terminate()

    collections = len(namespaces) + 1
    # The least requests a pass that reads the Hub back makes: the listing (100 a page, each collection's
    # first four items in it), one read of each collection the listing may have cut (four items or more),
    # and each change once (a create, an add, a remove). A new collection is not read: it holds nothing.
    pages = -(-collections // 100)
    per_namespace = {}
    for source in sources:
        per_namespace[source.split("/")[0]] = per_namespace.get(source.split("/")[0], 0) + 1
    kept = [s for s in sources if s not in set(hidden)]
    kept_per_namespace = {}
    for source in kept:
        kept_per_namespace[source.split("/")[0]] = kept_per_namespace.get(source.split("/")[0], 0) + 1
    cut = sum(1 for n in per_namespace.values() if n >= 4) + 1
    cut_after = sum(1 for n in kept_per_namespace.values() if n >= 4) + 1
    least_fill = 1 + collections + 2 * len(sources)
    least_again = pages + cut
    least_hide = pages + cut + 2 * len(hidden)
    least_again_after = pages + cut_after
    print(f"population: {args.repos:,} repos; {len(sources):,} mirrors of {len(namespaces):,} source namespaces; "
          f"{collections:,} collections\n")
    print("| pass | time | requests (simulator) | least such a pass makes | ratio | share of a free token's 5-min API quota |")
    print("|---|---|---|---|---|---|")
    for label, (took, _, _, total), least in [
        ("first fill (`--collections`)", fill, least_fill),
        ("nothing changed", again, least_again),
        (f"{len(hidden)} sources turned private", after_hide, least_hide),
        ("nothing changed, after that", settled, least_again_after),
    ]:
        print(f"| {label} | {took:.1f} s | {total:,} | {least:,} | {total / least:.2f}x | {total / FREE_API_QUOTA:.2f} |")
    for label, (took, _, _, total) in [("notes, first pass (`--max-notes 20`)", notes1),
                                       ("notes, second pass", notes2)]:
        print(f"| {label} | {took:.1f} s | {total:,} | 41 (who the token is; each note: the source's "
              f"discussions read, the note posted) | {total / 41:.2f}x | {total / FREE_API_QUOTA:.2f} |")
    for label, (_, said, by_class, _) in [("fill", fill), ("again", again), ("hide", after_hide),
                                          ("notes 1", notes1), ("notes 2", notes2)]:
        print(f"\n{label}: {said}\n  requests: {json.dumps(by_class, sort_keys=True)}")


if __name__ == "__main__":
    main()
