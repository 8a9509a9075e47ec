#!/usr/bin/env python3
"""The MLX load check of the repack worker: every output shard must load in MLX bit-identical to its source.

    verify_mlx.py --output DIR [--device cpu|gpu]

Loads each `*.safetensors` of DIR with `mlx.core.load`, evaluates every array on the device (the Metal GPU on
Apple silicon, `cpu` elsewhere), and judges the loaded bytes by the digests in DIR's MEI_ALIGN_MANIFEST.json,
which the re-layout took from the source as it read it: the arrays' bytes in the order of their offsets must
hash to the shard's `payload_sha256` (a header-padded shard's payload is the source's, so this proves every
tensor), and each array to its `tensor_sha256` where the manifest records one (a reordered shard's, taken
from the source). Shards the manifest lists as skipped (copied as they are) must load. The source is not
read again. Prints one JSON object: {"ok", "device", "mlx_version",
"files", "tensors", "seconds"}, with "error" naming the file and tensor on a mismatch (exit status 1). The
worker runs it with `cpu` on Linux (`mlx[cpu]`); the macOS runner in deploy/ runs the same script with `gpu`.
"""

import argparse
import hashlib
import json
import struct
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

MANIFEST = "MEI_ALIGN_MANIFEST.json"
HEADER_CAP = 100_000_000  # the reference reader's limit on N


def header_of(path):
    """The shard's JSON header, read as the reference reader reads it (8-byte length, then at most 100 MB)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        if n > HEADER_CAP:
            raise ValueError(f"{path.name}: header of {n} bytes")
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return header


def check_shard(mx, path, record):
    arrays = mx.load(str(path))
    header = header_of(path)
    if sorted(arrays) != sorted(header):
        raise ValueError(f"{path.name}: MLX loaded other tensors than the header lists")
    mx.eval(list(arrays.values()))
    per_tensor = record.get("tensor_sha256") or {}
    payload = hashlib.sha256()
    length = 0
    for name in sorted(header, key=lambda n: header[n]["data_offsets"][0]):
        begin, end = header[name]["data_offsets"]
        view = memoryview(arrays[name])
        # Cast in place where a view allows it; a scalar or an empty tensor is copied (a few bytes at most).
        data = view.cast("B") if view.ndim and view.nbytes and view.c_contiguous else view.tobytes()
        if len(data) != end - begin:
            raise ValueError(f"{path.name}: {name}: {len(data)} bytes loaded, the header says {end - begin}")
        payload.update(data)
        length += len(data)
        if name in per_tensor and hashlib.sha256(data).hexdigest() != per_tensor[name]:
            raise ValueError(f"{path.name}: {name}: bytes differ from the source's")
    if per_tensor and sorted(per_tensor) != sorted(header):
        raise ValueError(f"{path.name}: the manifest's tensor digests name other tensors")
    if length != record["payload_bytes"] or payload.hexdigest() != record["payload_sha256"]:
        raise ValueError(f"{path.name}: the loaded payload differs from the one recorded")
    return len(arrays)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--output", required=True, type=Path)
    ap.add_argument("--device", default="cpu", choices=["cpu", "gpu"])
    args = ap.parse_args()
    started = time.perf_counter()
    record = {"ok": False, "device": args.device, "files": 0, "tensors": 0}
    try:
        import mlx.core as mx

        record["mlx_version"] = mx.__version__
        # Said at once: a worker that publishes while the check runs names this version in the card.
        print(json.dumps({"started": True, "mlx_version": mx.__version__}), flush=True)
        mx.set_default_device(mx.gpu if args.device == "gpu" else mx.cpu)
        manifest = json.loads((args.output / MANIFEST).read_text())
        shards = {s["file"]: s for s in manifest["shards"]}
        # Shards no loader copies from are copied as they are (the download checked them against the Hub's
        # digests): they must load, and have no new digest to be judged by.
        copied = {s["file"] for s in manifest.get("skipped", [])}
        outputs = sorted(args.output.glob("*.safetensors"))
        if not outputs:
            raise ValueError(f"no .safetensors files in {args.output}")
        if sorted(p.name for p in outputs) != sorted([*shards, *copied]):
            raise ValueError("the shards on disk are not the ones the manifest lists")
        def one(out):
            if out.name in shards:
                return check_shard(mx, out, shards[out.name])
            arrays = mx.load(str(out))
            mx.eval(list(arrays.values()))
            return len(arrays)

        # Two shards at a time: the reads and the hashing (which releases the GIL) overlap, and the memory
        # held at once is what the check held when it loaded each source beside its output.
        with ThreadPoolExecutor(max_workers=2) as pool:
            for tensors in pool.map(one, outputs):
                record["tensors"] += tensors
                record["files"] += 1
        record["ok"] = True
    except Exception as e:  # the record says what failed; the exit status says that it did
        record["error"] = f"{type(e).__name__}: {e}"
    record["seconds"] = round(time.perf_counter() - started, 3)
    print(json.dumps(record))
    sys.exit(0 if record["ok"] else 1)


if __name__ == "__main__":
    main()
