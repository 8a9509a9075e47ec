#!/usr/bin/env python3
"""Check that a re-laid-out ("fixed") safetensors file or model directory holds exactly the
same tensors as the original, that the real readers agree, and that every tensor is aligned.

    check_fixed.py --original PATH --fixed PATH [--mlx-lm]

PATH is a single .safetensors file or a bundle directory; for directories every
*.safetensors file (top level) is compared by file name, and both sides must hold the same
set of names.  For each pair:

  * safetensors.safe_open(fixed, framework="numpy") opens it and lists the same keys and
    metadata; every tensor numpy can represent is read through it and must equal the raw
    bytes (BF16/F8/F4/F6 are only read by slicing the file via our own header parser);
  * every tensor's dtype, shape and raw bytes equal the original's (by name); metadata equal;
  * mx.load(fixed, return_metadata=True) gives arrays bit-identical to mx.load(original)
    (dtype, shape, bytes) and equal metadata;
  * every tensor in the fixed file satisfies (8 + N + begin) % width == 0;
  * directories: model.safetensors.index.json (if the original has one) is unchanged, and
    MEI_ALIGN_MANIFEST.json (if the fixed dir has one) passes Mei's verification snippet;
  * --mlx-lm: mlx_lm.load(fixed) works and a forward pass gives logits bit-identical to
    mlx_lm.load(original).

Prints one line per check and `check_fixed: OK (<n> files, <m> tensors)`; on the first
mismatch prints `check_fixed: FAIL: ...` naming the file and tensor and exits 1 (2 for
usage errors).
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import argparse  # noqa: E402
import json  # noqa: E402
import mmap  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

# Alignment width in bytes = bytes per element; 1 for 8-bit and sub-byte types.
DTYPE_WIDTH = {
    "BOOL": 1, "F4": 1, "F6_E2M3": 1, "F6_E3M2": 1, "U8": 1, "I8": 1,
    "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1, "F8_E4M3FNUZ": 1, "F8_E5M2FNUZ": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "C64": 8, "F64": 8, "I64": 8, "U64": 8,
}
# dtypes safetensors' numpy backend can return via get_tensor.
NUMPY_READABLE = {"BOOL", "U8", "I8", "I16", "U16", "F16", "I32", "U32", "F32",
                  "C64", "F64", "I64", "U64"}

MEI_SNIPPET = '''\
import json, hashlib, os
man = json.load(open("MEI_ALIGN_MANIFEST.json"))
for s in man["shards"]:
    with open(s["file"], "rb") as f:
        hlen = int.from_bytes(f.read(8), "little")
        f.seek(8 + hlen)
        h = hashlib.sha256()
        while (b := f.read(1 << 24)):
            h.update(b)
    assert h.hexdigest() == s["payload_sha256"], s["file"]
    assert (8 + hlen) % 8 == 0, "data segment not aligned"
'''

# Fixed token sequence for the --mlx-lm forward pass (ids are reduced mod vocab size).
FORWARD_IDS = [1, 17, 42, 99, 3, 250, 7, 128, 64, 2]


class Fail(Exception):
    pass


def ok(msg):
    print(f"  ok  {msg}", flush=True)


def require(cond, msg):
    if not cond:
        raise Fail(msg)


class Parsed:
    """Our own view of a safetensors file: N, header, tensors, and an mmap of the file."""

    def __init__(self, path):
        self.path = Path(path)
        self._f = open(path, "rb")
        size = os.fstat(self._f.fileno()).st_size
        self.mm = mmap.mmap(self._f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        require(size >= 8, f"{path}: shorter than 8 bytes")
        self.n = int.from_bytes(self.mm[:8], "little")
        self.data_start = 8 + self.n
        require(self.data_start <= size, f"{path}: header length {self.n} runs past EOF ({size} bytes)")
        try:
            hdr = json.loads(bytes(self.mm[8:self.data_start]).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise Fail(f"{path}: header is not valid JSON: {e}") from e
        require(isinstance(hdr, dict), f"{path}: header is not a JSON object")
        self.has_meta_key = "__metadata__" in hdr
        self.metadata = hdr.get("__metadata__")
        self.tensors = {}
        for name, info in hdr.items():
            if name == "__metadata__":
                continue
            b, e = info["data_offsets"]
            require(0 <= b <= e and self.data_start + e <= size,
                    f"{path}: tensor {name}: offsets {b}..{e} outside the file")
            self.tensors[name] = (info["dtype"], list(info["shape"]), b, e)

    def raw(self, name):
        _, _, b, e = self.tensors[name]
        return self.mm[self.data_start + b:self.data_start + e]

    def close(self):
        if isinstance(self.mm, mmap.mmap):
            self.mm.close()
        self._f.close()


def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def norm_meta(m):
    return {} if m is None else m


def mx_bytes(arr):
    import mlx.core as mx

    mx.eval(arr)
    # memoryview works for every MLX dtype incl. bfloat16 and rank-0 arrays
    # (np.array(bf16) does not, and .view(mx.uint8) rejects scalars).
    return bytes(memoryview(arr))


def check_pair(orig_path, fixed_path, label):
    """Compare one file pair. Returns the number of tensors."""
    import mlx.core as mx
    import safetensors

    print(f"[{label}] {orig_path} -> {fixed_path}", flush=True)
    orig = Parsed(orig_path)
    fixed = Parsed(fixed_path)
    try:
        # 1. reference reader opens the fixed file, same keys and metadata
        try:
            with safetensors.safe_open(str(fixed_path), framework="numpy") as f:
                st_keys = set(f.keys())
                st_meta = f.metadata()
                require(st_keys == set(orig.tensors),
                        f"{label}: safe_open keys differ: missing {sorted(set(orig.tensors) - st_keys)}, "
                        f"extra {sorted(st_keys - set(orig.tensors))}")
                require(norm_meta(st_meta) == norm_meta(orig.metadata),
                        f"{label}: safe_open metadata {st_meta!r} != original {orig.metadata!r}")
                n_np = 0
                for name in sorted(st_keys):
                    dtype = fixed.tensors[name][0]
                    if dtype not in NUMPY_READABLE:
                        continue
                    arr = f.get_tensor(name)
                    got = arr.tobytes()
                    want = fixed.raw(name)
                    require(list(arr.shape) == fixed.tensors[name][1] and got == want,
                            f"{label}: tensor {name}: safe_open get_tensor disagrees with the file bytes")
                    n_np += 1
        except Fail:
            raise
        except Exception as e:  # noqa: BLE001
            raise Fail(f"{label}: safetensors.safe_open rejects the fixed file: {type(e).__name__}: {e}") from e
        ok(f"{label}: safe_open accepts fixed file ({len(st_keys)} keys, metadata {st_meta!r}; "
           f"{n_np} read via get_tensor, {len(st_keys) - n_np} via raw slices)")

        # 2. dtype, shape, raw bytes, metadata equal to the original (own parser)
        require(set(fixed.tensors) == set(orig.tensors),
                f"{label}: tensor names differ: missing {sorted(set(orig.tensors) - set(fixed.tensors))}, "
                f"extra {sorted(set(fixed.tensors) - set(orig.tensors))}")
        require(norm_meta(fixed.metadata) == norm_meta(orig.metadata),
                f"{label}: __metadata__ {fixed.metadata!r} != original {orig.metadata!r}")
        for name in sorted(orig.tensors):
            od, os_, ob, oe = orig.tensors[name]
            fd, fs, fb, fe = fixed.tensors[name]
            require(fd == od, f"{label}: tensor {name}: dtype {fd} != original {od}")
            require(fs == os_, f"{label}: tensor {name}: shape {fs} != original {os_}")
            require(fe - fb == oe - ob, f"{label}: tensor {name}: {fe - fb} bytes != original {oe - ob}")
            a, b = orig.raw(name), fixed.raw(name)
            if a != b:
                raise Fail(f"{label}: tensor {name}: raw bytes differ (first difference at byte "
                           f"{first_diff(a, b)} of {len(a)})")
        ok(f"{label}: {len(orig.tensors)} tensors have identical dtype, shape and raw bytes; metadata equal")

        # 3. mx.load agrees bit for bit
        try:
            o_arrs, o_meta = mx.load(str(orig_path), return_metadata=True)
            o_err = None
        except Exception as e:  # noqa: BLE001
            o_err = f"{type(e).__name__}: {e}"
        if o_err is not None:
            try:
                mx.load(str(fixed_path))
                raise Fail(f"{label}: mx.load cannot read the original ({o_err}) but reads the fixed file")
            except Fail:
                raise
            except Exception:  # noqa: BLE001
                ok(f"{label}: mx.load skipped: it cannot read the original either ({o_err})")
        else:
            try:
                f_arrs, f_meta = mx.load(str(fixed_path), return_metadata=True)
            except Exception as e:  # noqa: BLE001
                raise Fail(f"{label}: mx.load rejects the fixed file: {type(e).__name__}: {e}") from e
            require(set(f_arrs) == set(o_arrs), f"{label}: mx.load key sets differ")
            require(f_meta == o_meta, f"{label}: mx.load metadata {f_meta!r} != original {o_meta!r}")
            for name in sorted(o_arrs):
                oa, fa = o_arrs[name], f_arrs[name]
                require(fa.dtype == oa.dtype, f"{label}: tensor {name}: mx dtype {fa.dtype} != {oa.dtype}")
                require(fa.shape == oa.shape, f"{label}: tensor {name}: mx shape {fa.shape} != {oa.shape}")
                a, b = mx_bytes(oa), mx_bytes(fa)
                if a != b:
                    raise Fail(f"{label}: tensor {name}: mx.load bytes differ (first difference at byte "
                               f"{first_diff(a, b)} of {len(a)})")
            ok(f"{label}: mx.load arrays bit-identical ({len(o_arrs)} arrays), metadata {f_meta!r}")

        # 4. alignment of every tensor in the fixed file
        bad = []
        for name, (dtype, _, b, e) in sorted(fixed.tensors.items(), key=lambda kv: kv[1][2]):
            require(dtype in DTYPE_WIDTH, f"{label}: tensor {name}: unknown dtype {dtype}")
            if (fixed.data_start + b) % DTYPE_WIDTH[dtype] != 0:
                bad.append(f"{name} ({dtype} at file offset {fixed.data_start + b})")
        require(not bad, f"{label}: {len(bad)} misaligned tensor(s): " + ", ".join(bad[:10]))
        ok(f"{label}: all {len(fixed.tensors)} tensors naturally aligned "
           f"(N={fixed.n}, data start {fixed.data_start}, data start % 8 = {fixed.data_start % 8})")
        return len(orig.tensors)
    finally:
        orig.close()
        fixed.close()


def check_index(orig_dir, fixed_dir):
    name = "model.safetensors.index.json"
    o, f = orig_dir / name, fixed_dir / name
    if not o.exists():
        return
    require(f.exists(), f"{name}: present in the original but missing from the fixed dir")
    oj, fj = json.loads(o.read_text()), json.loads(f.read_text())
    require(fj.get("weight_map") == oj.get("weight_map"), f"{name}: weight_map changed")
    require(fj.get("metadata") == oj.get("metadata"), f"{name}: metadata changed")
    ok(f"{name}: weight_map ({len(oj.get('weight_map', {}))} entries) and metadata unchanged")


def check_manifest(fixed_dir):
    if not (fixed_dir / "MEI_ALIGN_MANIFEST.json").exists():
        return
    r = subprocess.run([sys.executable, "-c", MEI_SNIPPET], cwd=fixed_dir,
                       capture_output=True, text=True)
    require(r.returncode == 0,
            f"MEI_ALIGN_MANIFEST.json: verification snippet failed:\n{r.stdout}{r.stderr}")
    ok("MEI_ALIGN_MANIFEST.json: Mei verification snippet passes")


def check_mlx_lm(orig_dir, fixed_dir):
    import mlx.core as mx
    from mlx.utils import tree_flatten
    import mlx_lm

    def run(d):
        try:
            model, tokenizer = mlx_lm.load(str(d))
        except Exception as e:  # noqa: BLE001
            raise Fail(f"mlx_lm.load({d}) failed: {type(e).__name__}: {e}") from e
        vocab = model.args.vocab_size if hasattr(model, "args") else 256
        ids = [i % vocab for i in FORWARD_IDS]
        logits = model(mx.array([ids]))
        mx.eval(logits)
        params = dict(tree_flatten(model.parameters()))
        return model, tokenizer, ids, logits, params

    _, _, ids, o_logits, o_params = run(orig_dir)
    _, _, _, f_logits, f_params = run(fixed_dir)
    ok(f"mlx_lm.load works on the fixed dir ({len(f_params)} parameters)")
    require(set(o_params) == set(f_params), "mlx_lm: parameter names differ")
    for k in sorted(o_params):
        a, b = o_params[k], f_params[k]
        require(a.dtype == b.dtype and a.shape == b.shape and mx_bytes(a) == mx_bytes(b),
                f"mlx_lm: parameter {k} differs after loading")
    require(o_logits.dtype == f_logits.dtype and o_logits.shape == f_logits.shape,
            f"mlx_lm: logits {f_logits.dtype}{f_logits.shape} != {o_logits.dtype}{o_logits.shape}")
    require(mx_bytes(o_logits) == mx_bytes(f_logits), "mlx_lm: forward-pass logits differ")
    ok(f"mlx_lm: loaded parameters identical; logits {tuple(o_logits.shape)} {o_logits.dtype} "
       f"bit-identical for ids {ids}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--original", required=True, type=Path)
    ap.add_argument("--fixed", required=True, type=Path)
    ap.add_argument("--mlx-lm", action="store_true",
                    help="also mlx_lm.load both directories and compare a forward pass")
    args = ap.parse_args(argv)
    orig, fixed = args.original, args.fixed

    try:
        if orig.is_file() and fixed.is_file():
            if args.mlx_lm:
                print("check_fixed: --mlx-lm needs directories", file=sys.stderr)
                return 2
            pairs = [(orig, fixed, fixed.name)]
        elif orig.is_dir() and fixed.is_dir():
            o_names = sorted(p.name for p in orig.glob("*.safetensors"))
            f_names = sorted(p.name for p in fixed.glob("*.safetensors"))
            require(o_names, f"{orig}: no *.safetensors files")
            require(o_names == f_names,
                    f"*.safetensors sets differ: missing {sorted(set(o_names) - set(f_names))}, "
                    f"extra {sorted(set(f_names) - set(o_names))}")
            ok(f"same {len(o_names)} *.safetensors file names in both directories")
            pairs = [(orig / n, fixed / n, n) for n in o_names]
        else:
            print(f"check_fixed: --original and --fixed must both be files or both directories "
                  f"({orig}, {fixed})", file=sys.stderr)
            return 2

        n_tensors = sum(check_pair(o, f, label) for o, f, label in pairs)
        if fixed.is_dir():
            check_index(orig, fixed)
            check_manifest(fixed)
            if args.mlx_lm:
                check_mlx_lm(orig, fixed)
    except Fail as e:
        sys.stdout.flush()
        print(f"check_fixed: FAIL: {e}", file=sys.stderr)
        return 1

    print(f"check_fixed: OK ({len(pairs)} files, {n_tensors} tensors)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
