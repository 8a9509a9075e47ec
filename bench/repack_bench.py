#!/usr/bin/env python3
"""Benchmark a whole-bundle repack on the simulator: each step against its physical baseline.

    cargo build --release --workspace --bins && bash tests/python/setup-venv.sh && python3 bench/repack_bench.py [--shard-mib 1024 --shards 2]

Writes an MLX-layout bundle (pseudo-random payloads whose data starts off 8 bytes, so header padding fixes
it), serves it with `hubsim` (Xet on: the bundle is ingested into the embedded CAS), audits it, and
runs `hubalign repack --verify-device cpu` with JSON logs, whose `step` lines time each step. In the same
run it measures the baselines: the simulator's raw transfer rate for the same bytes (a plain ranged-free GET
of each shard through the storage redirect, and a plain PUT of each shard to its Git LFS upload URL), and
`cp` of the bundle on the same disk, and the raw GET of every shard to disk with fsync, before the repack and
after it (the ratio of the whole repack is taken against the faster). Bytes come from the simulator's
counters. `--worker` runs another build of hubalign (say, one before a change) against the same simulator.
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
import threading
import time
import urllib.request
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "target/release/hubalign"
SIM = ROOT / "target/release/hubsim"
SYNTH = ROOT / "target/release/synth_shard"
PY = ROOT / "target/py-venv/bin/python"
TOKEN = "hf_bench"


def ts(line):
    return datetime.fromisoformat(line["timestamp"].replace("Z", "+00:00")).timestamp()


def world(shards, shard_mib, kind="pad"):
    """The benchmark's simulated Hub directory, holding `bench-org/big-q4`: written once, then reused."""
    suffix = "" if kind == "pad" else f"-{kind}"
    root = ROOT / f"target/bench/repack-world-{shards}x{shard_mib}{suffix}"
    repo = root / "models/bench-org/big-q4"
    if not repo.exists():
        repo.mkdir(parents=True)
        for i in range(shards):
            name = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
            subprocess.run([SYNTH, repo / name, str(shard_mib), kind], check=True)
        (repo / ".hubsim.json").write_text('{"library_name": "mlx", "license": "mit"}')
    # A model type no loader builds: the mlx-lm check says so and passes, as for the simulator's population.
    # Written on every run, so a bundle cached by an older script is mended.
    (repo / "config.json").write_text('{"model_type": "hubsim_synthetic"}')
    return root


def repack_sampled(argv, env):
    """Runs the repack, sampling its process's resident memory every 20 ms from /proc: the completed process
    and the peaks of its own memory (RssAnon) and of the file pages it maps (RssFile), in bytes. VmHWM, which
    the worker logs, counts both: a mapped page of a file is the page cache's, not the worker's own."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    peaks = {"RssAnon": 0, "RssFile": 0}

    def sample():
        while proc.poll() is None:
            try:
                with open(f"/proc/{proc.pid}/status") as f:
                    for line in f:
                        key, _, value = line.partition(":")
                        if key in peaks:
                            peaks[key] = max(peaks[key], int(value.split()[0]) * 1024)
            except (OSError, ValueError):
                pass
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate()
    sampler.join()
    return subprocess.CompletedProcess(argv, proc.returncode, out, err), peaks


def sim_cpu(pid):
    """User and system CPU seconds the process `pid` has used so far (from /proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def raw_to_disk(url, shards, work, tag):
    """Seconds to fetch every shard from the simulator and write it to disk with fsync (then removed)."""
    t = time.perf_counter()
    for p in shards:
        with urllib.request.urlopen(f"{url}/bench-org/big-q4/resolve/main/{p.name}") as r, \
                open(work / f"raw-{tag}-{p.name}", "wb") as out:
            while block := r.read(1 << 22):
                out.write(block)
            out.flush()
            os.fsync(out.fileno())
    seconds = time.perf_counter() - t
    for p in shards:
        (work / f"raw-{tag}-{p.name}").unlink()
    return seconds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shard-mib", type=int, default=1024)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--kind", choices=["pad", "relayout"], default="pad",
                    help="pad: header padding fixes the shards; relayout: they need a reorder")
    ap.add_argument("--worker", type=Path, default=BIN,
                    help="the hubalign that audits and repacks (another build, to compare; the simulator is this one)")
    ap.add_argument("--storage-mbps", type=float, default=0,
                    help="hold each storage answer to this rate, as a CDN holds each connection (0: no limit)")
    ap.add_argument("--connections", type=int,
                    help="the repack's --download-connections (default: the worker's own default)")
    args = ap.parse_args()
    for tool in (BIN, SIM, SYNTH, PY):
        if not tool.exists():
            sys.exit(f"{tool} missing: cargo build --release --workspace --bins; tests/python/setup-venv.sh")
    hub_root = world(args.shards, args.shard_mib, args.kind)
    repo = hub_root / "models/bench-org/big-q4"
    shards = sorted(repo.glob("*.safetensors"))
    size = sum(p.stat().st_size for p in shards)
    store = Path(tempfile.mkdtemp(prefix="hubsim-store-"))
    started = time.perf_counter()
    sim = subprocess.Popen([SIM, "--root", hub_root, "--store", store, "--port", "0", "--token", f"{TOKEN}:bench",
                            "--storage-mbps", str(args.storage_mbps)],
                           stdout=subprocess.PIPE, text=True)
    url = re.search(r"http://[0-9.:]+", sim.stdout.readline()).group(0)
    ingest_s = time.perf_counter() - started
    work = Path(tempfile.mkdtemp(prefix="hubalign-bench-"))
    try:
        db = work / "store.db"
        subprocess.run([args.worker, "audit", "--endpoint", url, "--token", TOKEN, "--db", db], check=True, stdout=subprocess.DEVNULL)
        # The bound is measured before the repack too: right after a repack it was up to twice as slow here
        # (1.0-4.3 s for the same GiB); the faster of the two is the one the ratio is taken against.
        raw_disk_before = raw_to_disk(url, shards, work, "before")
        urllib.request.urlopen(urllib.request.Request(f"{url}/_sim/counters/reset", method="POST")).read()
        import resource
        inblock = resource.getrusage(resource.RUSAGE_CHILDREN).ru_inblock
        cpu_before = (resource.getrusage(resource.RUSAGE_CHILDREN), sim_cpu(sim.pid))
        t0 = time.time()
        run, rss = repack_sampled([args.worker, "--log-json", "repack", "bench-org/big-q4", "--endpoint", url, "--token", TOKEN,
                                   "--db", db, "--work-dir", work / "work", "--verify-device", "cpu", "--python", PY,
                                   *(["--download-connections", str(args.connections)] if args.connections else [])],
                                  env=dict(os.environ, RUST_LOG="hubalign=info"))
        t_end = time.time()
        # What the repack and the processes it started read from storage (512-byte blocks; page-cache hits
        # are not reads of the disk and do not count).
        read_from_disk = (resource.getrusage(resource.RUSAGE_CHILDREN).ru_inblock - inblock) * 512
        # CPU time of the repack (the worker and its MLX check, both reaped by now) and of the simulator.
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        repack_cpu = (after.ru_utime + after.ru_stime) - (cpu_before[0].ru_utime + cpu_before[0].ru_stime)
        simulator_cpu = sim_cpu(sim.pid) - cpu_before[1]
        if run.returncode != 0:
            sys.exit(f"repack failed:\n{run.stdout}\n{run.stderr[-4000:]}")
        counters = json.load(urllib.request.urlopen(f"{url}/_sim/counters"))
        # The MLX check's own timer, from the record the job keeps (it runs inside the publish step).
        import sqlite3
        with sqlite3.connect(db) as conn:
            record = json.loads(conn.execute("SELECT verification FROM jobs").fetchone()[0] or "{}")
            # The job's own meter: everything it sent, ahead of the publish step included.
            metered = conn.execute("SELECT bytes_uploaded FROM jobs").fetchone()[0]
        # An earlier build ran the check inside the verify step; this one runs it beside the upload.
        mlx_s = record.get("seconds", float("nan"))
        steps = [json.loads(l) for l in run.stderr.splitlines() if l.startswith("{")]
        # The worker's whole log, each line's time from the repack's start, for a look at what a step waited on.
        with open(ROOT / "target/bench/last-repack.log", "w") as f:
            for l in steps:
                f.write(f"{ts(l) - t0:7.3f} {l.get('target', '')} {json.dumps(l.get('fields', {}))}\n")
        marks = [(l["fields"]["step"], ts(l)) for l in steps if l.get("fields", {}).get("message") == "step"]
        marks.append(("end", t_end))
        marks.insert(0, ("start", t0))
        durations = {a[0]: b[1] - a[1] for a, b in zip(marks[1:], marks[2:])}

        # Baselines, same run: the simulator's raw transfer of the same bytes, and cp on the same disk.
        t = time.perf_counter()
        for p in shards:
            with urllib.request.urlopen(f"{url}/bench-org/big-q4/resolve/main/{p.name}") as r:
                while r.read(1 << 22):
                    pass
        raw_down = time.perf_counter() - t
        # The same transfer written to disk and synced: what any download of the bundle costs at least.
        raw_disk_after = raw_to_disk(url, shards, work, "after")
        raw_disk = min(raw_disk_before, raw_disk_after)
        oids = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in shards}
        storage = re.search(r"http://[0-9.:]+", urllib.request.urlopen(
            urllib.request.Request(f"{url}/bench-org/big-q4/resolve/main/{shards[0].name}", method="HEAD")).url).group(0)
        host, port = storage.removeprefix("http://").split(":")
        t = time.perf_counter()
        for p in shards:
            conn = http.client.HTTPConnection(host, int(port))
            with open(p, "rb") as f:
                conn.request("PUT", f"/_lfs/upload/{oids[p]}", body=f, headers={"Content-Length": str(p.stat().st_size)})
            conn.getresponse().read()
        raw_up = time.perf_counter() - t
        t = time.perf_counter()
        shutil.copytree(repo, work / "cp", ignore=shutil.ignore_patterns(".*"))
        subprocess.run(["sync"], check=True)
        cp_s = time.perf_counter() - t
    finally:
        sim.terminate()
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(store, ignore_errors=True)

    gb = size / 1e9
    # Every byte sent to the Hub: the commit's body and every API call's included, not only Xet and LFS.
    up = counters["bytes_received"]
    memory = [l["fields"] for l in steps if l.get("fields", {}).get("message") == "worker memory"]
    print(f"bundle: {args.shards} {args.kind} shards, {gb:.2f} GB; simulator start (Xet ingest of the bundle) {ingest_s:.1f} s\n")
    print("| step | wall time | bytes moved | baseline (same run) | step / baseline |")
    print("|---|---|---|---|---|")
    rows = [
        ("download", durations.get("downloading"), counters["bytes_served"], "raw GET of the shards", raw_down),
        ("download", durations.get("downloading"), counters["bytes_served"], "raw GET to disk, synced", raw_disk),
        ("re-lay", durations.get("relaying"), size, "cp + sync of the bundle", cp_s),
        ("verify (structural, mmap)", durations.get("verifying"), size, "cp + sync of the bundle", cp_s),
        ("MLX check (CPU), inside the next step", mlx_s, size, "cp + sync of the bundle", cp_s),
        ("publish (upload, commit, settings) with the MLX check", durations.get("publishing"), up,
         "raw PUT of the shards", raw_up),
    ]
    for name, seconds, moved, base_name, base in rows:
        print(f"| {name} | {seconds:.1f} s | {moved / 1e9:.2f} GB | {base_name}: {base:.1f} s | {seconds / base:.2f}x |")
    total = sum(d for d in durations.values())
    print(f"| whole repack | {total:.1f} s | | raw GET to disk, synced: {raw_disk:.1f} s | {total / raw_disk:.2f}x |")
    print(f"\nraw GET to disk, synced: {raw_disk_before:.1f} s before the repack, {raw_disk_after:.1f} s after; "
          f"ratios are to the faster")
    if memory:
        # The peak so far as each step starts: what the steps before it held at most.
        so_far = {l["fields"]["step"]: l["fields"].get("rss.peak_bytes", 0) / 2**20 for l in steps
                  if l.get("fields", {}).get("message") == "step"}
        print(f"\npeak of the worker's own memory (RssAnon, sampled every 20 ms): {rss['RssAnon'] / 2**20:.1f} MiB; "
              f"of the file pages it maps (RssFile): {rss['RssFile'] / 2**20:.1f} MiB")
        print(f"\npeak RSS of the worker (VmHWM, both of the above; the MLX check's process apart): "
              f"{memory[0]['rss.peak_bytes'] / 2**20:.1f} MiB; before the download {so_far.get('downloading', float('nan')):.1f} MiB, by its end "
              f"{so_far.get('relaying', float('nan')):.1f} MiB, before publishing {so_far.get('publishing', float('nan')):.1f} MiB")
    # What went up ahead of the publish step, and under how many digests the download had already taken.
    for l in steps:
        if l.get("fields", {}).get("message") == "uploaded ahead":
            f = l["fields"]
            print(f"\nuploaded ahead of the publish step: {f.get('files')} files, {f.get('sha256.named', 0)} of them "
                  f"named by the SHA-256 taken as they were written; ended {ts(l) - t0:.1f} s after the start")
    for l in steps:
        if l.get("fields", {}).get("message") == "uploaded as it was written":
            f = l["fields"]
            print(f"sent as it was written: {f.get('shard.file')}, {f.get('bytes.before_whole', 0) / 1e9:.2f} GB chunked "
                  f"before its last byte landed; ended {ts(l) - t0:.1f} s after the start")
    cores = os.cpu_count()
    print(f"\nCPU over the whole repack ({total:.1f} s on {cores} cores, {total * cores:.1f} core-s): the worker and its MLX "
          f"check {repack_cpu:.1f} core-s, the simulator {simulator_cpu:.1f} core-s; spread perfectly over the cores "
          f"that work takes {(repack_cpu + simulator_cpu) / cores:.1f} s at least, "
          f"{(repack_cpu + simulator_cpu) / cores / raw_disk:.2f}x the raw GET to disk")
    print(f"\nread from storage by the repack and its children (getrusage ru_inblock): {read_from_disk / 1e9:.2f} GB, "
          f"{read_from_disk / size:.2f} per byte of bundle")
    print(f"\nbytes uploaded for the header-padded republish (the simulator's count of request bodies): {up:,} bytes, "
          f"{100 * up / size:.4f}% of the bundle; of which Xet {counters['xet_bytes_received']:,}, LFS "
          f"{counters['lfs_bytes_received']:,}; the job's own meter: {metered:,} bytes ({metered / up:.3f}x)")


if __name__ == "__main__":
    main()
