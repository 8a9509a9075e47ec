#!/usr/bin/env python3
r"""Which files of `src/` one repack job runs code in: measured, not read off the code.

    LLVM_PROFILE_FILE=/tmp/cov/build-%p.profraw RUSTFLAGS="-C instrument-coverage" CARGO_TARGET_DIR=/tmp/cov \
        cargo build --bin hubalign
    cargo build --release --workspace --bins && bash tests/python/setup-venv.sh
    python3 docs/job_files.py /tmp/cov/debug/hubalign [--src src] [--list]

Serves a two-shard header-padded bundle with `hubsim` (the benchmark's world, 8 MiB shards), audits it with
the instrumented binary, then runs `hubalign repack --verify-device cpu` with its own coverage profile, and
counts the files of `--src` (the build's own source tree) whose code ran during the repack: the files a job
crosses, start-up and argument parsing included, and grouped by top-level module. Needs `llvm-profdata` and
`llvm-cov` of rustc's LLVM (`rustup component add llvm-tools`).
"""

import argparse
import collections
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import repack_bench  # noqa: E402  (the benchmark's world, simulator and venv)


def llvm_tool(name):
    sysroot = subprocess.run(["rustc", "--print", "sysroot"], capture_output=True, text=True, check=True).stdout.strip()
    found = glob.glob(f"{sysroot}/lib/rustlib/*/bin/{name}")
    if not found:
        sys.exit(f"{name} of rustc's LLVM is missing: rustup component add llvm-tools")
    return found[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary", type=Path, help="hubalign built with -C instrument-coverage")
    ap.add_argument("--src", type=Path, default=repack_bench.ROOT / "src",
                    help="the source tree the binary was built from")
    ap.add_argument("--list", action="store_true", help="print each file")
    args = ap.parse_args()
    hub_root = repack_bench.world(2, 8)
    work = Path(tempfile.mkdtemp(prefix="hubalign-job-files-"))
    store = work / "sim-store"
    sim = subprocess.Popen([repack_bench.SIM, "--root", hub_root, "--store", store, "--port", "0",
                            "--token", f"{repack_bench.TOKEN}:bench"], stdout=subprocess.PIPE, text=True)
    try:
        url = re.search(r"http://[0-9.:]+", sim.stdout.readline()).group(0)
        db = work / "store.db"
        common = ["--endpoint", url, "--token", repack_bench.TOKEN, "--db", db]
        env = dict(os.environ, LLVM_PROFILE_FILE=str(work / "audit.profraw"))
        subprocess.run([args.binary, "audit", *common], check=True, stdout=subprocess.DEVNULL, env=env)
        env = dict(os.environ, LLVM_PROFILE_FILE=str(work / "repack.profraw"))
        run = subprocess.run([args.binary, "repack", "bench-org/big-q4", *common, "--work-dir", work / "work",
                              "--verify-device", "cpu", "--python", repack_bench.PY],
                             capture_output=True, text=True, env=env)
        if run.returncode != 0 or "published" not in run.stdout:
            sys.exit(f"the repack did not publish:\n{run.stdout}\n{run.stderr[-3000:]}")
    finally:
        sim.terminate()
    profdata = work / "repack.profdata"
    subprocess.run([llvm_tool("llvm-profdata"), "merge", "-sparse", work / "repack.profraw", "-o", profdata],
                   check=True)
    exported = subprocess.run([llvm_tool("llvm-cov"), "export", "-summary-only", "-instr-profile", profdata,
                               args.binary], capture_output=True, text=True, check=True).stdout
    src = args.src.resolve()
    ran = []
    for f in json.loads(exported)["data"][0]["files"]:
        path = Path(f["filename"]).resolve()
        if src in path.parents and f["summary"]["lines"]["covered"] > 0:
            ran.append(path.relative_to(src))
    modules = collections.Counter(p.parts[0].removesuffix(".rs") if len(p.parts) > 1 else p.stem for p in ran)
    under_repack = sum(1 for p in ran if p.parts[0] == "repack")
    in_repack = sum(1 for p in src.glob("repack/**/*.rs"))
    print(f"{len(ran)} files of {src} ran code during one repack job, in {len(modules)} top-level modules; "
          f"{under_repack} of the {in_repack} files under repack/")
    for module, count in sorted(modules.items()):
        print(f"  {module}: {count}")
    if args.list:
        for p in sorted(ran):
            print(f"    {p}")


if __name__ == "__main__":
    main()
