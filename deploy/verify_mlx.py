#!/usr/bin/env python3
"""The MLX load check of the repack worker: every output shard must load in MLX bit-identical to its source.

    verify_mlx.py --output DIR [--device cpu|gpu] [--jobs N] [--max-address-space BYTES]

Loads each `*.safetensors` of DIR with `mlx.core.load`, evaluates every array on the device (the Metal GPU on
Apple silicon, `cpu` elsewhere), and judges the loaded bytes by the digests in DIR's MEI_ALIGN_MANIFEST.json,
which the re-layout took from the source as it read it: the arrays' bytes in the order of their offsets must
hash to the shard's `payload_sha256` (a header-padded shard's payload is the source's, so this proves every
tensor), and each array to its `tensor_sha256` where the manifest records one (a reordered shard's, taken
from the source). Shards the manifest lists as skipped (copied as they are) must load. The source is not
read again. Prints one JSON object: {"ok", "device", "mlx_version",
"files", "tensors", "seconds", "peak_rss_bytes"}, with "error" naming the file and tensor on a mismatch (exit
status 1). The worker runs it with `cpu` on Linux (`mlx[cpu]`); the macOS runner in deploy/ runs the same
script with `gpu`.

Memory does not grow with the shard: `mx.load` is lazy, and each array is evaluated, hashed and dropped
before the next one is evaluated (MLX's buffer cache is turned off), so the check holds about one tensor per
shard checked at once (`--jobs`, which the worker chooses from its memory). `--max-address-space` caps the
process's address space (RLIMIT_AS) so that a check that would take more fails instead of pushing the
machine into swap; the worker also kills a check that outlives its deadline.
"""

import argparse
import hashlib
import json
import os
import resource
import struct
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

MANIFEST = "MEI_ALIGN_MANIFEST.json"
HEADER_CAP = 100_000_000  # the reference reader's limit on N
# MLX may keep this much of freed buffers for reuse (a fresh buffer for every tensor costs its page faults).
CACHE_LIMIT = 256 << 20
# How far ahead of the tensor being checked the kernel is asked to read the shard.
READ_AHEAD = 256 << 20


def header_of(path):
    """The shard's JSON header, read as the reference reader reads it (8-byte length, then at most 100 MB),
    and where its data starts in the file."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        if n > HEADER_CAP:
            raise ValueError(f"{path.name}: header of {n} bytes")
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return header, 8 + n


class ReadAhead:
    """Asks the kernel to read the next READ_AHEAD bytes of the shard while this thread hashes: the
    repaired shards were written past the page cache, so without it each tensor's read from the disk and its
    hashing take turns. The pages are the page cache's, not this process's, and at most a window ahead."""

    def __init__(self, path, data_start):
        self.fd = os.open(path, os.O_RDONLY)
        self.data_start, self.asked = data_start, data_start

    def up_to(self, end):
        """Everything up to data offset `end` plus the window is asked for (once)."""
        want = self.data_start + end + READ_AHEAD
        if want > self.asked and hasattr(os, "posix_fadvise"):
            os.posix_fadvise(self.fd, self.asked, want - self.asked, os.POSIX_FADV_WILLNEED)
            self.asked = want

    def close(self):
        os.close(self.fd)


def arrays_in_order(mx, path, header, data_start):
    """Each array of the shard, in the order of its offsets, evaluated alone; the caller drops it before
    asking for the next, so at most one is resident."""
    arrays = mx.load(str(path))
    if sorted(arrays) != sorted(header):
        raise ValueError(f"{path.name}: MLX loaded other tensors than the header lists")
    ahead = ReadAhead(path, data_start)
    try:
        for name in sorted(header, key=lambda n: header[n]["data_offsets"][0]):
            ahead.up_to(header[name]["data_offsets"][1])
            array = arrays.pop(name)
            mx.eval(array)
            yield name, array
            del array
    finally:
        ahead.close()


def check_shard(mx, path, record):
    header, data_start = header_of(path)
    per_tensor = record.get("tensor_sha256") or {}
    payload = hashlib.sha256()
    length = 0
    for name, array in arrays_in_order(mx, path, header, data_start):
        begin, end = header[name]["data_offsets"]
        view = memoryview(array)
        # Cast in place where a view allows it; a scalar or an empty tensor is copied (a few bytes at most).
        data = view.cast("B") if view.ndim and view.nbytes and view.c_contiguous else view.tobytes()
        if len(data) != end - begin:
            raise ValueError(f"{path.name}: {name}: {len(data)} bytes loaded, the header says {end - begin}")
        payload.update(data)
        length += len(data)
        if name in per_tensor and hashlib.sha256(data).hexdigest() != per_tensor[name]:
            raise ValueError(f"{path.name}: {name}: bytes differ from the source's")
        del view, data
    if per_tensor and sorted(per_tensor) != sorted(header):
        raise ValueError(f"{path.name}: the manifest's tensor digests name other tensors")
    if length != record["payload_bytes"] or payload.hexdigest() != record["payload_sha256"]:
        raise ValueError(f"{path.name}: the loaded payload differs from the one recorded")
    return len(header)


def load_only(mx, path):
    """A shard copied as it was: every array must load (one at a time, as above)."""
    return sum(1 for _ in arrays_in_order(mx, path, *header_of(path)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--output", required=True, type=Path)
    ap.add_argument("--device", default="cpu", choices=["cpu", "gpu"])
    ap.add_argument("--jobs", default=1, type=int, help="shards checked at once")
    ap.add_argument("--max-address-space", default=0, type=int, help="RLIMIT_AS in bytes (0: none)")
    args = ap.parse_args()
    if args.max_address_space > 0:
        resource.setrlimit(resource.RLIMIT_AS, (args.max_address_space, args.max_address_space))
    started = time.perf_counter()
    record = {"ok": False, "device": args.device, "files": 0, "tensors": 0}
    try:
        import mlx.core as mx

        record["mlx_version"] = mx.__version__
        # Said at once: a worker that publishes while the check runs names this version in the card.
        print(json.dumps({"started": True, "mlx_version": mx.__version__}), flush=True)
        mx.set_default_device(mx.gpu if args.device == "gpu" else mx.cpu)
        # Freed buffers go back to the system at once instead of into MLX's cache.
        mx.set_cache_limit(CACHE_LIMIT)
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
            return load_only(mx, out)

        # Several shards at a time when the worker's memory allows: the reads and the hashing (which releases
        # the GIL) overlap.
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            for tensors in pool.map(one, outputs):
                record["tensors"] += tensors
                record["files"] += 1
        record["ok"] = True
    except Exception as e:  # the record says what failed; the exit status says that it did
        record["error"] = f"{type(e).__name__}: {e}"
    record["seconds"] = round(time.perf_counter() - started, 3)
    record["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps(record))
    sys.exit(0 if record["ok"] else 1)


if __name__ == "__main__":
    main()
