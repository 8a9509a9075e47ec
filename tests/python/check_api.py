#!/usr/bin/env python3
"""Check a running `hubalign serve`'s JSON API against deploy/openapi.json, and its figures against the store.

    target/py-venv/bin/python tests/python/check_api.py --base http://127.0.0.1:8080 --schema deploy/openapi.json --db hubalign.db

- Every list endpoint is fetched page by page (`limit=2`, following `Link: <...>; rel="next"`), and every
  item is validated with `jsonschema` against the component the document names for that path.
- `/api/publishers` is compared with sums computed here, with SQL written here, from the store's raw tables
  (`repos`, `shards`), not from the per-repo and per-namespace sums the service keeps.
- `/api/repos` and `/api/jobs` are compared with the raw tables' counts.
Prints `check_api: OK` and exits 0, or names the first disagreement and exits 1.
"""

import argparse
import json
import re
import sqlite3
import sys
import urllib.request

import jsonschema


def fetch(url):
    with urllib.request.urlopen(url, timeout=30) as r:
        body = json.loads(r.read())
        return body, r.headers.get("Link")


def all_pages(base, path):
    url = f"{base}{path}{'&' if '?' in path else '?'}limit=2"
    items, pages = [], 0
    while url:
        body, link = fetch(url)
        if not isinstance(body, list):
            raise SystemExit(f"check_api: {url} is not a JSON array")
        items += body
        pages += 1
        m = re.match(r'<([^>]+)>; rel="next"', link or "")
        url = f"{base}{m.group(1)}" if m else None
        if pages > 10_000:
            raise SystemExit(f"check_api: {path}: pagination does not end")
    return items


def validate(doc, path_key, items, where):
    schema = doc["paths"][path_key]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    ref = schema["items"]["$ref"].rsplit("/", 1)[-1]
    item_schema = doc["components"]["schemas"][ref]
    for i, item in enumerate(items):
        try:
            jsonschema.validate(item, item_schema)
        except jsonschema.ValidationError as e:
            raise SystemExit(f"check_api: {where} item {i} does not match {ref}: {e.message}\n{json.dumps(item)}")
    return ref


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--schema", required=True)
    ap.add_argument("--db", required=True)
    args = ap.parse_args()
    doc = json.load(open(args.schema))
    jsonschema.Draft202012Validator.check_schema({"$defs": doc["components"]["schemas"]})
    db = sqlite3.connect(f"file:{args.db}?mode=ro", uri=True)

    counts = {}
    for path in ["/api/publishers", "/api/repos", "/api/runs", "/api/jobs"]:
        items = all_pages(args.base, path) if path != "/api/publishers" else fetch(args.base + path)[0]
        validate(doc, path, items, path)
        counts[path] = items
    repos = counts["/api/repos"]
    for r in repos[:5]:
        ns, name = r["repo_id"].split("/", 1) if r["state"] != "invalid_listing" else (None, None)
        if ns:
            shards, _ = fetch(f"{args.base}/api/repos/{ns}/{name}/shards")
            validate(doc, "/api/repos/{ns}/{name}/shards", shards, r["repo_id"])

    # The figures, from the raw tables with this script's own SQL.
    (n_repos,) = db.execute("SELECT COUNT(*) FROM repos").fetchone()
    if len(repos) != n_repos:
        raise SystemExit(f"check_api: /api/repos lists {len(repos)} repos, the store has {n_repos}")
    (n_jobs,) = db.execute("SELECT COUNT(*) FROM jobs").fetchone()
    if len(counts["/api/jobs"]) != n_jobs:
        raise SystemExit(f"check_api: /api/jobs lists {len(counts['/api/jobs'])} jobs, the store has {n_jobs}")
    want = {}
    rows = db.execute(
        "SELECT r.namespace, r.id, COALESCE(SUM(s.misaligned_bytes), 0) FROM repos r LEFT JOIN shards s ON s.repo_id = r.id "
        "WHERE r.state = 'ok' AND r.audited_sha IS NOT NULL GROUP BY r.id"
    ).fetchall()
    for ns, _, wasted in rows:
        audited, affected, total = want.get(ns, (0, 0, 0))
        want[ns] = (audited + 1, affected + (wasted > 0), total + wasted)
    got = {p["namespace"]: (p["repos_audited"], p["repos_affected"], p["misaligned_bytes"]) for p in counts["/api/publishers"]}
    got = {ns: v for ns, v in got.items() if v != (0, 0, 0)}
    if got != want:
        raise SystemExit(f"check_api: /api/publishers disagrees with the raw tables:\n  api   {got}\n  store {want}")
    print(f"check_api: OK ({len(repos)} repos, {len(counts['/api/jobs'])} jobs, {len(counts['/api/runs'])} runs, "
          f"{len(got)} publishers)")


if __name__ == "__main__":
    sys.exit(main())
