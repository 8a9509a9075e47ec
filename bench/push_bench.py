#!/usr/bin/env python3
"""Push to published mirror: a webhook against the scheduled audit, in the same run.

    cargo build --release --workspace --bins && bash tests/python/setup-venv.sh && python3 bench/push_bench.py [--shard-mib 1024 --pushes 5]

A publisher pushes a header-padded MLX bundle (one shard of --shard-mib MiB, pseudo-random payloads whose
data starts off 8 bytes) to a new repo with `huggingface_hub.upload_folder`, --pushes times. Each time is
measured from the upload's return (the commit is on the Hub) to the mirror being public. Two services run
against `hubsim`, one after the other, on SQLite, checking on the CPU:

- webhook: `serve --webhook-secret`, the simulator sending the Hub's payloads (`sim --webhook`), the
  scheduled audit a year away;
- baseline: `serve --interval 60` without a webhook: the push waits for the next audit. Each baseline push
  waits a random 0–60 s first (seeded), so that pushes land at random points of the audit cycle instead of
  right after the audit that published the previous mirror.
"""

import argparse
import json
import os
import random
import re
import socket
import statistics
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
SYNTH = ROOT / "target/release/synth_shard"
PY = ROOT / "target/py-venv/bin/python"
SECRET = "bench-secret"
PUSH = r"""
import sys
from huggingface_hub import HfApi
api = HfApi()
api.create_repo(sys.argv[2], exist_ok=True)
api.upload_folder(repo_id=sys.argv[2], folder_path=sys.argv[1], commit_message="weights")
"""


def bundle(shard_mib):
    """The publisher's bundle: written once, then reused."""
    folder = ROOT / f"target/bench/push-bundle-{shard_mib}"
    if not folder.exists():
        folder.mkdir(parents=True)
        subprocess.run([SYNTH, folder / "model.safetensors", str(shard_mib), "pad"], check=True)
        (folder / "README.md").write_text("---\nlibrary_name: mlx\nlicense: mit\n---\n# bench\n")
    # A model type no loader builds: the mlx-lm check says so and passes, as for the simulator's population.
    # Written on every run, so a bundle cached by an older script is mended.
    (folder / "config.json").write_text('{"model_type": "hubsim_synthetic"}')
    return folder


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mirror_public(hub, source):
    """Whether the mirror of `source` is public on the Hub: anonymous listings show public repos only, and a
    mirror's name follows from its source's id (lower-case `namespace-name`, a 64-bit digest, `-aligned`)."""
    ns, name = source.lower().split("/")
    mine = re.compile(rf"^bench/{re.escape(ns)}-{re.escape(name)}-[0-9a-f]{{16}}-aligned$")
    try:
        with urllib.request.urlopen(f"{hub}/api/models?author=bench&search={ns}-{name}-") as r:
            return any(mine.match(m["id"]) and not m.get("private", False) for m in json.load(r))
    except OSError:
        return False


def run_mode(mode, folder, pushes, tmp):
    root = Path(tmp) / f"hub-{mode}"
    root.mkdir()
    port = free_port()
    sim_args = [SIM, "--root", root, "--port", "0", "--token", "hf_pub:pub:pubco", "--token", "hf_bench:bench"]
    if mode == "webhook":
        sim_args += ["--webhook", f"http://127.0.0.1:{port}/api/hub/webhook#{SECRET}"]
    sim = subprocess.Popen(sim_args, stdout=subprocess.PIPE, text=True)
    hub = re.search(r"http://[0-9.:]+", sim.stdout.readline()).group(0)
    serve_args = [BIN, "serve", "--endpoint", hub, "--token", "hf_bench", "--db", f"{tmp}/{mode}.db",
                  "--listen", f"127.0.0.1:{port}", "--verify-device", "cpu", "--python", PY,
                  "--work-dir", f"{tmp}/{mode}-work", "--include", "pubco", "--target-namespace", "bench",
                  # A fresh push has no downloads yet: the publisher is trusted, or the popularity floor holds it.
                  "--trusted-publisher", "pubco"]
    serve_args += ["--webhook-secret", SECRET, "--interval", "31536000"] if mode == "webhook" else ["--interval", "60"]
    serve = subprocess.Popen(serve_args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    latencies = []
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz").read()
                break
            except OSError:
                time.sleep(0.1)
        phase = random.Random(7)
        for i in range(pushes):
            repo = f"pubco/big-{i}"
            if mode == "baseline":
                time.sleep(phase.uniform(0, 60))
            env = dict(os.environ, HF_ENDPOINT=hub, HF_TOKEN="hf_pub", HF_HUB_DISABLE_TELEMETRY="1")
            subprocess.run([PY, "-c", PUSH, folder, repo], check=True, env=env, stdout=subprocess.DEVNULL)
            pushed = time.perf_counter()
            while not mirror_public(hub, repo):
                if time.perf_counter() - pushed > 600:
                    sys.exit(f"{mode}: {repo} was not mirrored within 600 s")
                time.sleep(0.2)
            latencies.append(time.perf_counter() - pushed)
            print(f"{mode}: push {i + 1}: {latencies[-1]:.1f} s", flush=True)
    finally:
        serve.terminate()
        sim.terminate()
        serve.wait()
        sim.wait()
    return latencies


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shard-mib", type=int, default=1024)
    ap.add_argument("--pushes", type=int, default=5)
    args = ap.parse_args()
    for tool in (BIN, SIM, SYNTH, PY):
        if not tool.exists():
            sys.exit(f"{tool} missing: cargo build --release --workspace --bins; tests/python/setup-venv.sh")
    folder = bundle(args.shard_mib)
    with tempfile.TemporaryDirectory() as tmp:
        results = {mode: run_mode(mode, folder, args.pushes, tmp) for mode in ("webhook", "baseline")}
    web, base = statistics.median(results["webhook"]), statistics.median(results["baseline"])
    print(f"\n{args.shard_mib} MiB header-padded bundle, {args.pushes} pushes each; push to public mirror:\n")
    print("| service | median | min–max |")
    print("|---|---|---|")
    for name, mode in (("`serve --webhook-secret` (webhook)", "webhook"), ("`serve --interval 60` (baseline)", "baseline")):
        r = results[mode]
        print(f"| {name} | {statistics.median(r):.1f} s | {min(r):.1f}–{max(r):.1f} s |")
    print(f"\nwebhook against baseline: {web / base:.2f}× the time ({base / web:.1f}× faster)")


if __name__ == "__main__":
    main()
