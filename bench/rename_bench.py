#!/usr/bin/env python3
"""A renamed source: its mirror followed, against the same bundle mirrored afresh, in the same run.

    cargo build --release --workspace --bins && bash tests/python/setup-venv.sh && python3 bench/rename_bench.py [--shard-mib 1024 --rounds 3]

`serve --webhook-secret` runs against `hubsim --webhook` (SQLite, CPU check). Each round a publisher
pushes a header-padded bundle (one shard of --shard-mib MiB) with `huggingface_hub` and waits for its public
mirror. Then, with the simulator's counters zeroed each time:

- rename: the publisher renames the repo with `HfApi.move_repo`; measured until the service's page for the
  new name shows the mirror followed it. What the service asked of the Hub is read from the counters.
- baseline: what a rename costs a service that does not follow it: the same bundle under a new name, mirrored
  from scratch (the publisher's push is done before the counters are zeroed); measured until its mirror is
  public.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from push_bench import BIN, PUSH, PY, SECRET, SIM, SYNTH, bundle, free_port, mirror_public

MOVE = "import sys\nfrom huggingface_hub import HfApi\nHfApi().move_repo(from_id=sys.argv[1], to_id=sys.argv[2])"


def fetch(url, method="GET"):
    with urllib.request.urlopen(urllib.request.Request(url, method=method)) as r:
        return r.read()


def wait(what, done, limit=600):
    start = time.perf_counter()
    while not done():
        if time.perf_counter() - start > limit:
            sys.exit(f"{what}: not within {limit} s")
        time.sleep(0.1)
    return time.perf_counter() - start


def counted(hub):
    c = json.loads(fetch(f"{hub}/_sim/counters"))
    out = {"api": c["api_requests"], "resolver": c["resolver_requests"], "served": c["bytes_served"],
           "received": c["bytes_received"]}
    out.update({f"{k} requests": v for k, v in c["requests"].items()})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shard-mib", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    for tool in (BIN, SIM, SYNTH, PY):
        if not tool.exists():
            sys.exit(f"{tool} missing: cargo build --release --workspace --bins; tests/python/setup-venv.sh")
    folder = bundle(args.shard_mib)
    env = dict(os.environ, HF_TOKEN="hf_pub", HF_HUB_DISABLE_TELEMETRY="1")
    results = {"rename": [], "baseline": []}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "hub"
        root.mkdir()
        port = free_port()
        sim = subprocess.Popen([SIM, "--root", root, "--port", "0", "--token", "hf_pub:pub:pubco",
                                "--token", "hf_bench:bench", "--webhook",
                                f"http://127.0.0.1:{port}/api/hub/webhook#{SECRET}"], stdout=subprocess.PIPE, text=True)
        hub = re.search(r"http://[0-9.:]+", sim.stdout.readline()).group(0)
        env["HF_ENDPOINT"] = hub
        base = f"http://127.0.0.1:{port}"
        serve = subprocess.Popen([BIN, "serve", "--endpoint", hub, "--token", "hf_bench", "--db", f"{tmp}/s.db",
                                  "--listen", f"127.0.0.1:{port}", "--verify-device", "cpu", "--python", PY,
                                  "--work-dir", f"{tmp}/work", "--include", "pubco", "--target-namespace", "bench",
                                  "--trusted-publisher", "pubco",
                                  "--webhook-secret", SECRET, "--interval", "31536000"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait("serve", lambda: _up(base), 30)
            for i in range(args.rounds):
                old, new, fresh = f"pubco/big-{i}", f"pubco/renamed-{i}", f"pubco/fresh-{i}"
                subprocess.run([PY, "-c", PUSH, folder, old], check=True, env=env, stdout=subprocess.DEVNULL)
                wait(f"{old}'s mirror", lambda: mirror_public(hub, old))

                fetch(f"{hub}/_sim/counters/reset", "POST")
                start = time.perf_counter()
                subprocess.run([PY, "-c", MOVE, old, new], check=True, env=env, stdout=subprocess.DEVNULL)
                followed = f"followed the rename from {old}".replace("/", "&#x2f;")
                wait(f"{new} followed", lambda: followed in fetch(f"{base}/repo/{new}").decode())
                seconds = time.perf_counter() - start
                # Read before the script's own checks below, which are requests too.
                results["rename"].append((seconds, counted(hub)))
                if not mirror_public(hub, old) or mirror_public(hub, new):
                    sys.exit("the rename was not followed by the same public mirror")

                subprocess.run([PY, "-c", PUSH, folder, fresh], check=True, env=env, stdout=subprocess.DEVNULL)
                fetch(f"{hub}/_sim/counters/reset", "POST")
                seconds = wait(f"{fresh}'s mirror", lambda: mirror_public(hub, fresh))
                # The script's polling of the mirror is in these counts; the service's own requests are the rest.
                results["baseline"].append((seconds, counted(hub)))
                for mode in ("rename", "baseline"):
                    s, c = results[mode][-1]
                    print(f"round {i + 1}: {mode}: {s:.2f} s, {c}", flush=True)
        finally:
            serve.terminate()
            sim.terminate()
            serve.wait()
            sim.wait()
    print(f"\n{args.shard_mib} MiB header-padded bundle, {args.rounds} rounds; medians, the service's requests from the simulator's counters:\n")
    print("| | time | API requests | resolver requests | bytes served | bytes received |")
    print("|---|---|---|---|---|---|")
    med = {}
    for name, mode in (("rename followed (`move_repo`, webhook)", "rename"), ("same bundle mirrored afresh (baseline)", "baseline")):
        rows = results[mode]
        m = {k: statistics.median(c.get(k, 0) for _, c in rows) for k in ("api", "resolver", "served", "received")}
        m["time"] = statistics.median(s for s, _ in rows)
        med[mode] = m
        print(f"| {name} | {m['time']:.2f} s | {m['api']:.0f} | {m['resolver']:.0f} | {m['served']:,.0f} | {m['received']:,.0f} |")
    r, b = med["rename"], med["baseline"]
    print(f"\nrename against baseline: {r['time'] / b['time']:.3f}× the time, {r['served'] / max(b['served'], 1):.5f}× the bytes served")


def _up(base):
    try:
        fetch(f"{base}/healthz")
        return True
    except OSError:
        return False


if __name__ == "__main__":
    main()
