#!/usr/bin/env python3
"""The MLX load check of the repack worker: every output shard must load in MLX bit-identical to its source.

    verify_mlx.py --source DIR --output DIR [--device cpu|gpu]

Loads each `*.safetensors` of the output with `mlx.core.load` and its namesake in the source, evaluates every
array on the device (the Metal GPU on Apple silicon, `cpu` elsewhere), and compares names, dtypes, shapes,
bytes and metadata. Prints one JSON object: {"ok", "device", "mlx_version", "files", "tensors", "seconds"},
with "error" naming the file and tensor on a mismatch (exit status 1). The worker runs it with `cpu` on Linux
(`mlx[cpu]`); the macOS runner in deploy/ runs the same script with `gpu`.
"""

import argparse
import json
import sys
import time
from pathlib import Path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True, type=Path)
    ap.add_argument("--output", required=True, type=Path)
    ap.add_argument("--device", default="cpu", choices=["cpu", "gpu"])
    args = ap.parse_args()
    started = time.perf_counter()
    record = {"ok": False, "device": args.device, "files": 0, "tensors": 0}
    try:
        import mlx.core as mx

        record["mlx_version"] = mx.__version__
        mx.set_default_device(mx.gpu if args.device == "gpu" else mx.cpu)
        outputs = sorted(args.output.glob("*.safetensors"))
        if not outputs:
            raise ValueError(f"no .safetensors files in {args.output}")
        for out in outputs:
            src = args.source / out.name
            a, meta_a = mx.load(str(src), return_metadata=True)
            b, meta_b = mx.load(str(out), return_metadata=True)
            if sorted(a) != sorted(b):
                raise ValueError(f"{out.name}: tensor names differ")
            if meta_a != meta_b:
                raise ValueError(f"{out.name}: metadata differs")
            mx.eval(list(a.values()) + list(b.values()))
            for name in a:
                x, y = a[name], b[name]
                if x.dtype != y.dtype or x.shape != y.shape:
                    raise ValueError(f"{out.name}: {name}: dtype or shape differs")
                if bytes(memoryview(x)) != bytes(memoryview(y)):
                    raise ValueError(f"{out.name}: {name}: bytes differ")
            record["files"] += 1
            record["tensors"] += len(a)
        record["ok"] = True
    except Exception as e:  # the record says what failed; the exit status says that it did
        record["error"] = f"{type(e).__name__}: {e}"
    record["seconds"] = round(time.perf_counter() - started, 3)
    print(json.dumps(record))
    sys.exit(0 if record["ok"] else 1)


if __name__ == "__main__":
    main()
