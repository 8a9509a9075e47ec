#!/usr/bin/env python3
"""Backfill throughput: N `hubalign worker`s draining the queue of a synthetic population's affected sample,
against the simulator's raw transfer of the same bytes at the same parallelism, measured in the same run.

    cargo build --release --workspace --bins && bash tests/python/setup-venv.sh && \\
        python3 bench/backfill_bench.py [--workers 1,2,4] [--sample 64 --sample-hidden 1024] [--report FILE]

For each worker count: a fresh `hubsim --population` (Xet on as on the Hub, no quotas, no faults), a fresh
PostgreSQL database, `hubalign audit` of the sample's namespaces, then N `hubalign worker` processes (the CPU
MLX check) started together and timed until every job is published, failed or skipped. The bound, in the same
run: every file of the affected sample repos fetched through the resolver and written to disk with fsync, N
at a time, then every file a mirror must send again (all but the shards no loader copies from, which keep
their oids) PUT to the simulator's LFS upload URL, N at a time: a backfill fetches every byte once and sends
every changed byte once. Also given: the ratio to the GET alone (no backfill can beat fetching each byte
once; the repack sends while it fetches). Bytes come from the simulator's counters.
"""

import argparse
import hashlib
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scratch_pg import scratch_postgres, _bin as pg_bin_dir  # noqa: E402
from sim import start_hubsim  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TOKEN, USER = "hf_backfill", "backfill"


def get_json(url, token=None):
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)


def psql(url, sql):
    m = re.match(r"postgres://postgres@127.0.0.1:(\d+)/(\w+)", url)
    out = subprocess.run([f"{pg_bin_dir()}/psql", "-q", "-At", "-F", "\t", "-h", "127.0.0.1", "-p", m.group(1),
                          "-U", "postgres", "-d", m.group(2), "-c", sql], check=True, capture_output=True, text=True)
    return [line.split("\t") for line in out.stdout.splitlines() if line]


def start_sim(args, root):
    return start_hubsim(args.bin_dir / "hubsim", root / "hub", "--token", f"{TOKEN}:{USER}",
                        "--population", str(args.population), "--sample", str(args.sample),
                        "--sample-hidden", str(args.sample_hidden), "--seed", str(args.seed))


def affected(hub):
    """The sample repos a backfill mirrors: visible, tagged `mlx`, open, not aligned."""
    sample = get_json(f"{hub}/_sim/population")["sample"]
    return [r for r in sample if r["mlx"] and not (r["private"] or r["gated"] or r["disabled"])
            and r["class"] != "aligned"]


def files_of(hub, repo):
    tree = get_json(f"{hub}/api/models/{repo['id']}/tree/{repo['head']}", TOKEN)
    return [(repo["id"], repo["head"], e["path"], e["size"]) for e in tree if e["type"] == "file"]


def raw_download(hub, files, out, parallel):
    """Every file fetched through the resolver and written to disk, synced; the sha256 of each for the PUT."""
    def one(f):
        repo, head, path, _ = f
        digest = hashlib.sha256()
        req = urllib.request.Request(f"{hub}/{repo}/resolve/{head}/{path}", headers={"Authorization": f"Bearer {TOKEN}"})
        target = out / f"{repo.replace('/', '--')}--{path}"
        with urllib.request.urlopen(req, timeout=600) as r, open(target, "wb") as w:
            while block := r.read(1 << 22):
                w.write(block)
                digest.update(block)
            w.flush()
            os.fsync(w.fileno())
        return target, digest.hexdigest()
    started = time.perf_counter()
    with ThreadPoolExecutor(parallel) as pool:
        done = list(pool.map(one, files))
    return time.perf_counter() - started, done


def raw_upload(storage, done, parallel):
    """The files in `done` PUT to the simulator's LFS upload URL, `parallel` at a time."""
    host, port = storage.removeprefix("http://").split(":")

    def one(item):
        path, oid = item
        conn = http.client.HTTPConnection(host, int(port), timeout=600)
        with open(path, "rb") as f:
            conn.request("PUT", f"/_lfs/upload/{oid}", body=f, headers={"Content-Length": str(path.stat().st_size)})
        status = conn.getresponse()
        status.read()
        if status.status >= 300:
            raise SystemExit(f"raw PUT of {path.name}: HTTP {status.status}")
    started = time.perf_counter()
    with ThreadPoolExecutor(parallel) as pool:
        list(pool.map(one, done))
    return time.perf_counter() - started


def storage_host(hub, f):
    repo, head, path, _ = f
    req = urllib.request.Request(f"{hub}/{repo}/resolve/{head}/{path}", method="HEAD",
                                 headers={"Authorization": f"Bearer {TOKEN}"})
    return re.search(r"http://[0-9.:]+", urllib.request.urlopen(req).url).group(0)


def one_run(args, workers, new_database):
    tmp = Path(tempfile.mkdtemp(prefix="hubalign-backfill-"))
    if os.geteuid() == 0:
        os.chmod(tmp, 0o755)
    sim, hub = start_sim(args, tmp)
    procs = []
    try:
        db = new_database()
        namespaces = [f"sample-{i}" for i in range(4)]
        for ns in namespaces:
            subprocess.run([args.bin_dir / "hubalign", "audit", "--endpoint", hub, "--token", TOKEN, "--db", db,
                            "--author", ns, "-q"], check=True, stdout=subprocess.DEVNULL)
        repos = affected(hub)
        files = [f for r in repos for f in files_of(hub, r)]
        total = sum(f[3] for f in files)
        urllib.request.urlopen(urllib.request.Request(f"{hub}/_sim/counters/reset", method="POST")).read()
        flags = ["--endpoint", hub, "--token", TOKEN, "--db", db, "--target-namespace", USER, "--verify-device", "cpu",
                 "--python", args.python, "--min-downloads", "0", "--min-likes", "0",
                 "--max-new-mirrors", "100000", "--max-new-mirrors-per-namespace", "100000"]
        for ns in namespaces:
            flags += ["--include", ns]
        started = time.perf_counter()
        for i in range(workers):
            work = tmp / f"worker-{i}"
            work.mkdir()
            log = open(tmp / f"worker-{i}.log", "wb")
            procs.append(subprocess.Popen([args.bin_dir / "hubalign", "worker", *flags, "--work-dir", work],
                                          stdout=log, stderr=subprocess.STDOUT))
            log.close()
        deadline = started + args.timeout
        while True:
            rows = psql(db, "SELECT state, COUNT(*) FROM jobs GROUP BY state")
            states = {s: int(n) for s, n in rows}
            finished = sum(n for s, n in states.items() if s in ("published", "failed", "skipped"))
            if sum(states.values()) >= len(repos) and finished == sum(states.values()):
                break
            if time.perf_counter() > deadline:
                raise SystemExit(f"{workers} workers: the queue did not drain within {args.timeout} s: {states}")
            for p in procs:
                if p.poll() is not None:
                    raise SystemExit(f"a worker exited ({p.returncode}): see {tmp}")
            time.sleep(0.2)
        backfill = time.perf_counter() - started
        # Each worker's memory once the queue is drained: what it holds now, and the most it held.
        memory = []
        for p in procs:
            status = Path(f"/proc/{p.pid}/status").read_text()
            memory.append({k: int(re.search(rf"{k}:\s+(\d+)", status).group(1)) * 1024 for k in ("VmRSS", "VmHWM")})
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=60)
        counters = get_json(f"{hub}/_sim/counters")
        published = states.get("published", 0)
        if published != len(repos):
            raise SystemExit(f"{workers} workers: {published} of {len(repos)} published: {states}; logs in {tmp}")
        # The bound, same run, same simulator: every file fetched, and the files a mirror must send again
        # PUT (a shard no loader copies from keeps its oid, and the Hub already holds it).
        aligned = {(r, p) for r, p in psql(db, "SELECT lower(repo_id), path FROM shards WHERE verdict = 'aligned'")}
        raw = tmp / "raw"
        raw.mkdir()
        down, done = raw_download(hub, files, raw, workers)
        sent = [d for f, d in zip(files, done) if (f[0].lower(), f[2]) not in aligned]
        shard = next(f for f in files if f[2].endswith(".safetensors"))
        up = raw_upload(storage_host(hub, shard), sent, workers)
        put_bytes = sum(f[3] for f in files if (f[0].lower(), f[2]) not in aligned)
        return {
            "workers": workers, "repos": len(repos), "files": len(files), "bytes": total,
            "backfill_seconds": backfill, "raw_download_to_disk_seconds": down, "raw_upload_seconds": up,
            "ratio_to_raw_transfer": backfill / (down + up), "ratio_to_raw_download": backfill / down,
            "backfill_mb_per_s": total / backfill / 1e6, "raw_mb_per_s": total / (down + up) / 1e6,
            "bytes_served": counters["bytes_served"], "bytes_received": counters["bytes_received"],
            "raw_put_bytes": put_bytes, "api_requests": counters.get("api_requests"), "jobs": states,
            "worker_memory_when_drained": memory,
        }
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        sim.terminate()
        sim.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", default="1,2,4", help="worker counts to run, comma-separated")
    ap.add_argument("--population", type=int, default=2000)
    ap.add_argument("--sample", type=int, default=64)
    ap.add_argument("--sample-hidden", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bin-dir", type=Path, default=ROOT / "target/release")
    ap.add_argument("--python", default=str(ROOT / "target/py-venv/bin/python"))
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--report", help="write the figures here as JSON")
    args = ap.parse_args()
    for tool in (args.bin_dir / "hubsim", args.bin_dir / "hubalign", Path(args.python)):
        if not tool.exists():
            sys.exit(f"{tool} missing: cargo build --release --workspace --bins; bash tests/python/setup-venv.sh")
    rows = []
    with scratch_postgres() as new_database:
        for n in [int(w) for w in args.workers.split(",")]:
            row = one_run(args, n, new_database)
            rows.append(row)
            print(json.dumps(row), flush=True)
    print("\n| workers | repos | GB fetched | GB sent (raw PUT) | backfill | raw GET to disk + PUT, same parallelism "
          "| ratio | ratio to the GET alone | MB/s fetched |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['workers']} | {r['repos']} | {r['bytes'] / 1e9:.2f} | {r['bytes_received'] / 1e9:.2f} "
              f"({r['raw_put_bytes'] / 1e9:.2f}) | {r['backfill_seconds']:.1f} s | "
              f"{r['raw_download_to_disk_seconds']:.1f} + {r['raw_upload_seconds']:.1f} s | "
              f"{r['ratio_to_raw_transfer']:.2f}x | {r['ratio_to_raw_download']:.2f}x | {r['backfill_mb_per_s']:.0f} |")
    if args.report:
        Path(args.report).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
