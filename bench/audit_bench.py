#!/usr/bin/env python3
"""Benchmark `hubalign audit` against huggingface_hub's get_safetensors_metadata, on the simulator.

    cargo build --release --workspace --bins && bash tests/python/setup-venv.sh && python3 bench/audit_bench.py [--repos 5000]

Builds a world of MLX repos (1-4 shards each, MLX-style headers of 50-250 tensors, 0.2-2 MiB per shard,
sharded repos with their index), serves it with `hubsim --latency-ms 50 --no-xet`, then in the same run:
1. `hubalign audit --concurrency C` into a fresh store;
2. huggingface_hub's `get_safetensors_metadata` over the same repos in a thread pool of C workers.
Requests and bytes come from the simulator's counters (reset between the two). The physical minimum of
bytes is the sum of 8 + N over all shards, computed here when the world is written.
"""

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# HUBALIGN_BIN times another build (another commit's, for a before/after in the same run).
BIN = Path(os.environ.get("HUBALIGN_BIN", ROOT / "target/release/hubalign"))
SIM = ROOT / "target/release/hubsim"
PY = ROOT / "target/py-venv/bin/python"

BASELINE = r"""
import os, sys, time
from concurrent.futures import ThreadPoolExecutor
from huggingface_hub import HfApi
api = HfApi()
repos = sys.argv[2:]
t = time.perf_counter()
with ThreadPoolExecutor(int(sys.argv[1])) as pool:
    results = list(pool.map(api.get_safetensors_metadata, repos))
print(time.perf_counter() - t, sum(len(r.files_metadata) for r in results))
"""


def mlx_header(tensors):
    entries = {"__metadata__": {"format": "mlx"}}
    offset = 0
    for name, dtype, shape, nbytes in tensors:
        entries[name] = {"data_offsets": [offset, offset + nbytes], "dtype": dtype, "shape": shape}
        offset += nbytes
    return json.dumps(dict(sorted(entries.items())), separators=(",", ":")).encode(), offset


def build_world(path, repos, seed=7):
    rng = random.Random(seed)
    minimum = 0
    shards_total = 0
    for i in range(repos):
        repo = path / "models" / f"pub{i % 50:02d}" / f"model-{i:05d}"
        repo.mkdir(parents=True)
        (repo / ".hubsim.json").write_text('{"library_name": "mlx"}')
        (repo / "config.json").write_text(json.dumps({"model_type": "llama", "i": i}))
        shards = 1 + i % 4
        weight_map = {}
        for s in range(shards):
            tensors = []
            for t in range(rng.randint(50, 250)):
                kind = rng.choice(["weight", "scales", "biases"])
                dtype = "U32" if kind == "weight" else "BF16"
                rows, cols = rng.choice([64, 128, 256]), rng.choice([2, 8, 16])
                nbytes = rows * cols * (4 if dtype == "U32" else 2)
                tensors.append((f"model.layers.{s * 100 + t}.mlp.proj_{t % 7}.{kind}", dtype, [rows, cols], nbytes))
            header, data_len = mlx_header(tensors)
            name = "model.safetensors" if shards == 1 else f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
            with open(repo / name, "wb") as f:
                f.write(len(header).to_bytes(8, "little") + header)
                f.truncate(8 + len(header) + data_len)  # the payload: zeros, as a hole
            minimum += 8 + len(header)
            shards_total += 1
            for t in tensors:
                weight_map[t[0]] = name
        if shards > 1:
            (repo / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return minimum, shards_total


def counters(url):
    return json.load(urllib.request.urlopen(f"{url}/_sim/counters"))


def reset(url):
    urllib.request.urlopen(urllib.request.Request(f"{url}/_sim/counters/reset", method="POST")).read()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repos", type=int, default=5000)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--latency-ms", type=int, default=50)
    ap.add_argument("--probe-bytes", type=int, nargs="+", default=[65536, 16384])
    args = ap.parse_args()
    for tool in (BIN, SIM, PY):
        if not tool.exists():
            sys.exit(f"{tool} missing: cargo build --release --workspace --bins, and tests/python/setup-venv.sh")
    world = ROOT / f"target/bench/audit-world-{args.repos}"
    meta = world / "world.json"
    if not meta.exists():
        world.mkdir(parents=True, exist_ok=True)
        minimum, shards = build_world(world, args.repos)
        meta.write_text(json.dumps({"minimum": minimum, "shards": shards}))
    info = json.loads(meta.read_text())
    minimum, shards = info["minimum"], info["shards"]

    sim = subprocess.Popen(
        [SIM, "--root", world, "--port", "0", "--latency-ms", str(args.latency_ms), "--no-xet"],
        stdout=subprocess.PIPE, text=True)
    line = sim.stdout.readline()
    url = re.search(r"http://[0-9.:]+", line).group(0)
    try:
        ours = []
        for probe in args.probe_bytes:
            with tempfile.TemporaryDirectory() as tmp:
                t = time.perf_counter()
                subprocess.run([BIN, "audit", "--endpoint", url, "--db", f"{tmp}/audit.db", "--concurrency",
                                str(args.concurrency), "--probe-bytes", str(probe)], check=True, stdout=subprocess.DEVNULL)
                ours.append((probe, counters(url), time.perf_counter() - t))
            reset(url)
        ids = sorted(f"pub{i % 50:02d}/model-{i:05d}" for i in range(args.repos))
        env = dict(os.environ, HF_ENDPOINT=url, HF_HUB_DISABLE_TELEMETRY="1", HF_HOME=tempfile.mkdtemp(),
                   HF_HUB_DISABLE_PROGRESS_BARS="1")
        out = subprocess.run([PY, "-c", BASELINE, str(args.concurrency), *ids], env=env, check=True,
                             capture_output=True, text=True).stdout.split()
        base_s, base_files = float(out[0]), int(out[1])
        base = counters(url)
    finally:
        sim.terminate()
    assert base_files == shards, (base_files, shards)

    def row(name, c, seconds):
        return (f"| {name} | {seconds:.1f} s | {c['resolver_requests'] / shards:.2f} | "
                f"{c['api_requests'] * 1000 / args.repos:.2f} | {c['bytes_served'] / shards / 1024:.1f} KiB | "
                f"{c['bytes_served'] / minimum:.2f}x |")

    print(f"{args.repos} repos, {shards} shards, {args.latency_ms} ms added latency, concurrency "
          f"{args.concurrency}; physical minimum {minimum / shards / 1024:.1f} KiB of header per shard\n")
    print("| client | wall time | resolver requests per shard | API requests per 1,000 repos | bytes served per shard | bytes / minimum (8 + N) |")
    print("|---|---|---|---|---|---|")
    for probe, c, seconds in ours:
        print(row(f"hubalign audit --probe-bytes {probe}", c, seconds))
    print(row("huggingface_hub get_safetensors_metadata (baseline)", base, base_s))
    probe, c, seconds = ours[0]
    print(f"\nhubalign audit (--probe-bytes {probe}) against the baseline: {base_s / seconds:.2f}x faster, "
          f"{base['resolver_requests'] / max(c['resolver_requests'], 1):.2f}x fewer resolver requests, "
          f"{base['bytes_served'] / max(c['bytes_served'], 1):.2f}x fewer bytes")


if __name__ == "__main__":
    main()
