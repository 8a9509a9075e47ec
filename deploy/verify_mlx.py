#!/usr/bin/env python3
"""The MLX load check of the repack worker: every output shard must load in MLX bit-identical to its source.

    verify_mlx.py --output DIR [--device cpu|gpu] [--jobs N] [--max-address-space BYTES]
    verify_mlx.py --wait [--device cpu|gpu]

Loads each `*.safetensors` of DIR with `mlx.core.load`, evaluates every array on the device (the Metal GPU on
Apple silicon, `cpu` elsewhere), and judges the loaded bytes by the digests in DIR's MEI_ALIGN_MANIFEST.json,
which the re-layout took from the source as it read it: each array must hash to its `tensor_sha256` where
the manifest records one (a reordered shard's, taken from the source; then the arrays' lengths must add up
to `payload_bytes`), and otherwise the arrays' bytes in the order of their offsets must hash to the shard's
`payload_sha256` (a header-padded shard's payload is the source's, so this proves every tensor). Shards the manifest lists as skipped (copied as they are) must load. The source is not
read again.

Then the bundle is loaded as its readers load it: `mlx_lm.load(DIR)` at its defaults, model and tokenizer,
every weight evaluated. A bundle larger than half this machine's memory (or of the address-space cap) is
loaded lazily instead: the model is built and every weight checked by name and shape, without being read. A model type mlx-lm does not
support (or a bundle whose config.json names none) is said in the record, not failed: `mlx.core.load` checked it.
Any other failure of `mlx_lm.load` fails the check.

Prints one JSON object: {"ok", "device", "mlx_version", "files", "tensors", "checks", "mlx_lm", "seconds",
"peak_rss_bytes", "cpu_seconds"}, with "error" naming the file and tensor on a mismatch (exit status 1).
"checks" holds what each check after the load found, by its name in CHECKS below.
"checks"["mlx_lm_load"] is {"version", "loaded", "model_type", "lazy"} or {"version", "loaded": false, "why"};
"mlx_lm" repeats it for services that read it there. The worker runs it with `cpu` on Linux (`mlx[cpu]`); the macOS runner in deploy/ runs the same
script with `gpu`.

Memory does not grow with the shard: `mx.load` is lazy, and each array is evaluated, hashed and dropped
before the next one is evaluated (MLX's buffer cache is turned off), so the check holds about one tensor per
shard checked at once (`--jobs`, which the worker chooses from its memory). `--max-address-space` caps the
process's address space (RLIMIT_AS) so that a check that would take more fails instead of pushing the
machine into swap; the worker also kills a check that outlives its deadline.

With `--wait`, the script imports MLX and says so, then reads one JSON line on stdin:
{"output": DIR, "jobs": N, "max_address_space": BYTES}, in place of the three options. The worker starts the
check this way before the bundle is staged, so the import (about a second, mostly mlx-lm's) is done by then.
It then ignores SIGINT and SIGTERM: the worker kills it, or it ends when the worker does.
In both modes "seconds" counts the check itself: from when MLX is imported and the limits are known.
"""

import argparse
import collections
import hashlib
import json
import os
import resource
import signal
import struct
import sys
import threading
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
        return read_header(f, path.name)


def read_header(f, name):
    """`header_of` the shard open as `f` (from its first byte), called `name`."""
    (n,) = struct.unpack("<Q", f.read(8))
    if n > HEADER_CAP:
        raise ValueError(f"{name}: header of {n} bytes")
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


def arrays_in_order(mx, path, header, before):
    """Each array of the shard, in the order of its offsets, evaluated alone once `before(end)` (called with
    the array's end in the data section) returns; the caller drops it before asking for the next, so at most
    one is resident."""
    arrays = mx.load(str(path))
    if sorted(arrays) != sorted(header):
        raise ValueError(f"{path.name}: MLX loaded other tensors than the header lists")
    for name in sorted(header, key=lambda n: header[n]["data_offsets"][0]):
        before(header[name]["data_offsets"][1])
        array = arrays.pop(name)
        mx.eval(array)
        yield name, array
        del array


def read_ahead_arrays(mx, path, header, data_start):
    """`arrays_in_order` of a shard already on disk, with the kernel reading ahead."""
    ahead = ReadAhead(path, data_start)
    try:
        yield from arrays_in_order(mx, path, header, ahead.up_to)
    finally:
        ahead.close()


def bytes_of(path, header, name, array):
    """The loaded bytes of the array `name` (a view of it, and the bytes), as long as its header says."""
    begin, end = header[name]["data_offsets"]
    view = memoryview(array)
    # Cast in place where a view allows it; a scalar or an empty tensor is copied (a few bytes at most).
    data = view.cast("B") if view.ndim and view.nbytes and view.c_contiguous else view.tobytes()
    if len(data) != end - begin:
        raise ValueError(f"{path.name}: {name}: {len(data)} bytes loaded, the header says {end - begin}")
    return view, data


def payload_of(path, header, arrays, per_tensor):
    """The loaded payload's SHA-256 and length, from `arrays` in the order of their offsets; each array
    judged by its digest in `per_tensor` where there is one. A shard judged tensor by tensor has no payload
    digest taken (None): the source's digest of every tensor, at the offsets the header gives and over the
    whole length, already proves every byte, and a second digest of each byte cost the check a third of its
    time."""
    payload = None if per_tensor else hashlib.sha256()
    length = 0
    for name, array in arrays:
        view, data = bytes_of(path, header, name, array)
        if payload is not None:
            payload.update(data)
        length += len(data)
        if name in per_tensor and hashlib.sha256(data).hexdigest() != per_tensor[name]:
            raise ValueError(f"{path.name}: {name}: bytes differ from the source's")
        del view, data
    return (payload and payload.hexdigest()), length


def judge(path, header, record, loaded):
    """Whether the loaded payload (digest, length) is the one the manifest's `record` says: its digest, or,
    for a shard judged tensor by tensor (each tensor already compared), its length."""
    per_tensor = record.get("tensor_sha256") or {}
    if per_tensor and sorted(per_tensor) != sorted(header):
        raise ValueError(f"{path.name}: the manifest's tensor digests name other tensors")
    recorded = (None if per_tensor else record["payload_sha256"], record["payload_bytes"])
    if loaded != recorded:
        raise ValueError(f"{path.name}: the loaded payload differs from the one recorded")
    return len(header)


def check_shard(mx, path, record):
    header, data_start = header_of(path)
    per_tensor = record.get("tensor_sha256") or {}
    loaded = payload_of(path, header, read_ahead_arrays(mx, path, header, data_start), per_tensor)
    return judge(path, header, record, loaded)


def load_only(mx, path):
    """A shard copied as it was: every array must load (one at a time, as above)."""
    return sum(1 for _ in read_ahead_arrays(mx, path, *header_of(path)))


def memory_budget(max_address_space):
    """The memory a whole-model load may take: this machine's physical memory, or the address-space cap if
    smaller. A bundle over half of it is loaded lazily."""
    try:
        physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        physical = 0
    limits = [m for m in (physical, max_address_space) if m > 0]
    return min(limits) if limits else 0


def exit_with_the_worker():
    """Ends this process once the worker that started it is gone (its parent changes): a check the worker
    can no longer read must not go on reading a bundle."""
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(1)
        os._exit(3)

    threading.Thread(target=watch, daemon=True).start()


# What the check reads and within which limits: the staged bundle's directory, the shards checked at once,
# and the address-space cap in bytes (0: none).
Go = collections.namedtuple("Go", ["output", "jobs", "max_address_space"])


def go_from_worker():
    """The bundle and the check's limits, from the line the worker writes on stdin once the bundle is staged."""
    line = sys.stdin.readline(1 << 16)
    if not line:
        raise RuntimeError("the worker sent no bundle: the job ended before it was staged")
    said = json.loads(line)
    return Go(Path(said["output"]), int(said["jobs"]), int(said["max_address_space"]))


# The staged bundle as the checks after the load see it: the mlx_lm module, the bundle's directory, and
# whether to load it lazily (a bundle larger than half the check's memory).
Bundle = collections.namedtuple("Bundle", ["mlx_lm", "output", "lazy"])


def load_as_mlx_lm(bundle):
    """`mlx_lm.load` of the staged bundle, at its defaults unless `lazy`: what a person's `mlx_lm.load(repo)`
    does with the mirror. A model type mlx-lm does not support is said, not failed."""
    mlx_lm, output, lazy = bundle
    said = {"version": mlx_lm.__version__, "loaded": False}
    config = output / "config.json"
    if not config.is_file():
        return {**said, "why": "no config.json: not a model mlx-lm loads"}
    model_type = json.loads(config.read_text()).get("model_type")
    if not isinstance(model_type, str):
        return {**said, "why": "config.json names no model_type: not a model mlx-lm loads"}
    try:
        mlx_lm.load(str(output), lazy=lazy)
    except ValueError as e:
        if str(e).startswith("Model type ") and str(e).endswith(" not supported."):
            return {**said, "model_type": model_type, "why": f"mlx-lm {mlx_lm.__version__}: {e}"}
        raise RuntimeError(f"mlx_lm.load failed: {e}") from e
    except Exception as e:
        raise RuntimeError(f"mlx_lm.load failed: {type(e).__name__}: {e}") from e
    return {**said, "loaded": True, "model_type": model_type, "lazy": lazy}


# The checks after every shard loaded, by their names in hubalign's list (src/repack/checks/mod.rs).
# Each takes the Bundle and returns its figures, or raises to fail the check.
CHECKS = {"mlx_lm_load": load_as_mlx_lm}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--output", type=Path, help="the staged bundle, with its manifest")
    ap.add_argument("--device", default="cpu", choices=["cpu", "gpu"])
    ap.add_argument("--jobs", type=int, help="shards checked at once (default 1)")
    ap.add_argument("--max-address-space", type=int, help="RLIMIT_AS in bytes (default 0: none)")
    ap.add_argument("--wait", action="store_true",
                    help="import MLX, then read the bundle and the limits as a JSON line on stdin")
    args = ap.parse_args()
    given = [args.output, args.jobs, args.max_address_space]
    if args.wait and any(option is not None for option in given):
        ap.error("--wait reads the bundle and the limits on stdin: drop --output, --jobs and --max-address-space")
    if not args.wait and args.output is None:
        ap.error("give the bundle as --output DIR, or with --wait on stdin")
    exit_with_the_worker()
    if args.wait:
        # The worker ends this check itself, and the watch above ends it with the worker. A Ctrl-C or a
        # service manager's stop reaches every process of the worker; here it must not look like a failed import.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    started = time.perf_counter()
    record = {"ok": False, "device": args.device, "files": 0, "tensors": 0}
    try:
        import mlx.core as mx
        # Imported before the check is said to start: an interpreter without mlx-lm is the worker's setting
        # to mend, not the bundle's failure.
        import mlx_lm

        record["mlx_version"] = mx.__version__
        # Said at once: a worker that publishes while the check runs names this version in the card.
        print(json.dumps({"started": True, "mlx_version": mx.__version__}), flush=True)
        mx.set_default_device(mx.gpu if args.device == "gpu" else mx.cpu)
        # MLX starts its threads on its first evaluation: here, before the address-space cap, so that a shard
        # that needs more than the cap fails with a record, not in a thread MLX could not start (glibc aborts
        # the process then).
        mx.eval(mx.zeros(1))
        # Freed buffers go back to the system at once instead of into MLX's cache.
        mx.set_cache_limit(CACHE_LIMIT)
        told = go_from_worker() if args.wait else Go(args.output, args.jobs or 1, args.max_address_space or 0)
        output, jobs, max_address_space = told
        # The time the check says is its own: from here, not from the start of the download it waited for.
        started = time.perf_counter()
        if max_address_space > 0:
            resource.setrlimit(resource.RLIMIT_AS, (max_address_space, max_address_space))
        manifest = json.loads((output / MANIFEST).read_text())
        shards = {s["file"]: s for s in manifest["shards"]}
        # Shards no loader copies from are copied as they are (the download checked them against the Hub's
        # digests): they must load, and have no new digest to be judged by.
        copied = {s["file"] for s in manifest.get("skipped", [])}
        outputs = sorted(output.glob("*.safetensors"))
        if not outputs:
            raise ValueError(f"no .safetensors files in {output}")
        if sorted(p.name for p in outputs) != sorted([*shards, *copied]):
            raise ValueError("the shards on disk are not the ones the manifest lists")
        def one(out):
            """The tensors of `out`."""
            if out.name not in shards:
                return load_only(mx, out)
            return check_shard(mx, out, shards[out.name])

        # Several shards at a time when the worker's memory allows: the reads and the hashing (which releases
        # the GIL) overlap.
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            for tensors in pool.map(one, outputs):
                record["tensors"] += tensors
                record["files"] += 1
        size = sum(p.stat().st_size for p in outputs)
        lazy = 2 * size > memory_budget(max_address_space)
        bundle = Bundle(mlx_lm=mlx_lm, output=output, lazy=lazy)
        record["checks"] = {name: check(bundle) for name, check in CHECKS.items()}
        record["mlx_lm"] = record["checks"]["mlx_lm_load"]  # where services before the list read it
        record["ok"] = True
    except Exception as e:  # the record says what failed; the exit status says that it did
        record["error"] = f"{type(e).__name__}: {e}"
    record["seconds"] = round(time.perf_counter() - started, 3)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    record["peak_rss_bytes"] = usage.ru_maxrss * 1024
    record["cpu_seconds"] = round(usage.ru_utime + usage.ru_stime, 3)
    print(json.dumps(record))
    sys.exit(0 if record["ok"] else 1)


if __name__ == "__main__":
    main()
