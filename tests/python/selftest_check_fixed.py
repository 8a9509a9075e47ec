#!/usr/bin/env python3
"""Self-test for check_fixed.py against the fixtures (no hubalign needed).

    target/py-venv/bin/python tests/python/selftest_check_fixed.py

Uses a tiny *reference* re-layout written here (reorder by dtype width descending, then
name; back-to-back offsets; trailing-space header padding to 8+N = 0 mod 8) to produce
known-good "fixed" copies, then checks that check_fixed.py
  * passes every good re-layout (with --mlx-lm for the mlx_lm model dirs),
  * passes byte copies of already-aligned fixtures and fails byte copies of misaligned
    ones *only* on the alignment check,
  * fails hand-corrupted copies (flipped payload byte, changed metadata, changed dtype,
    extra shard, wrong MEI manifest hash), naming the file/tensor.
"""

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parent / "fixtures"
CHECK = HERE / "check_fixed.py"

WIDTH = {
    "BOOL": 1, "F4": 1, "F6_E2M3": 1, "F6_E3M2": 1, "U8": 1, "I8": 1,
    "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1, "F8_E4M3FNUZ": 1, "F8_E5M2FNUZ": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4,
    "C64": 8, "F64": 8, "I64": 8, "U64": 8,
}


def read(path):
    raw = Path(path).read_bytes()
    n = int.from_bytes(raw[:8], "little")
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def write(path, hdr, data, pad_to=8):
    hb = json.dumps(hdr, separators=(",", ":")).encode()
    hb += b" " * ((-(8 + len(hb))) % pad_to)
    Path(path).write_bytes(len(hb).to_bytes(8, "little") + hb + data)


def relayout(src, dst):
    hdr, data = read(src)
    names = sorted((k for k in hdr if k != "__metadata__"),
                   key=lambda k: (-WIDTH[hdr[k]["dtype"]], k))
    out = {"__metadata__": hdr["__metadata__"]} if "__metadata__" in hdr else {}
    chunks, off = [], 0
    for k in names:
        b, e = hdr[k]["data_offsets"]
        out[k] = {"dtype": hdr[k]["dtype"], "shape": hdr[k]["shape"], "data_offsets": [off, off + e - b]}
        chunks.append(data[b:e])
        off += e - b
    write(dst, out, b"".join(chunks))


def relayout_dir(src, dst):
    shutil.copytree(src, dst)
    for f in sorted(dst.glob("*.safetensors")):
        relayout(f, f)


def write_manifest(d, corrupt=False):
    shards = []
    for f in sorted(d.glob("*.safetensors")):
        raw = f.read_bytes()
        n = int.from_bytes(raw[:8], "little")
        h = hashlib.sha256(raw[8 + n:]).hexdigest()
        if corrupt:
            h = "0" * 64
        shards.append({"file": f.name, "payload_sha256": h})
    (d / "MEI_ALIGN_MANIFEST.json").write_text(json.dumps({"shards": shards}))


def flip_payload_byte(path):
    hdr, _ = read(path)
    raw = bytearray(Path(path).read_bytes())
    n = int.from_bytes(raw[:8], "little")
    # the first byte of the largest tensor
    name = max((k for k in hdr if k != "__metadata__"),
               key=lambda k: hdr[k]["data_offsets"][1] - hdr[k]["data_offsets"][0])
    raw[8 + n + hdr[name]["data_offsets"][0]] ^= 0x01
    Path(path).write_bytes(bytes(raw))
    return name


def run(orig, fixed, *extra):
    r = subprocess.run([sys.executable, str(CHECK), "--original", str(orig), "--fixed", str(fixed), *extra],
                       capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


FAILS = []


def expect(desc, rc, out, want_rc, must_contain=()):
    good = rc == want_rc and all(s in out for s in must_contain)
    print(f"{'PASS' if good else 'FAIL'}  {desc} (rc={rc})")
    if not good:
        FAILS.append(desc)
        print("      " + out.strip().replace("\n", "\n      "))


def main():
    expected = json.loads((FIXTURES / "expected.json").read_text())
    valid_files = [FIXTURES / k for k, v in sorted(expected.items())
                   if v["valid"] and not k.startswith("mlx_lm/")]
    model_dirs = sorted(p for p in (FIXTURES / "mlx_lm").iterdir() if p.is_dir())

    with tempfile.TemporaryDirectory() as td:
        td = Path(td)
        for i, f in enumerate(valid_files):
            rel = str(f.relative_to(FIXTURES))
            copy = td / f"copy{i}.safetensors"
            shutil.copyfile(f, copy)
            rc, out = run(f, copy)
            if expected[rel]["misaligned_tensors"] == 0:
                expect(f"{rel}: byte copy passes (already aligned)", rc, out, 0, ["check_fixed: OK"])
            else:
                expect(f"{rel}: byte copy fails only on alignment", rc, out, 1,
                       ["mx.load arrays bit-identical", "misaligned tensor(s)"])

            good = td / f"good{i}.safetensors"
            relayout(f, good)
            rc, out = run(f, good)
            expect(f"{rel}: reference re-layout passes", rc, out, 0, ["check_fixed: OK"])

            bad = td / f"flip{i}.safetensors"
            shutil.copyfile(good, bad)
            name = flip_payload_byte(bad)
            rc, out = run(f, bad)
            expect(f"{rel}: flipped payload byte in {name} fails", rc, out, 1,
                   [f"tensor {name}: ", "differ"])

        # metadata and dtype tampering on one file
        src = FIXTURES / "mlx/hostile.safetensors"
        good = td / "meta.safetensors"
        relayout(src, good)
        hdr, data = read(good)
        hdr["__metadata__"] = {"format": "pt"}
        write(good, hdr, data)
        rc, out = run(src, good)
        expect("metadata changed fails", rc, out, 1, ["metadata"])
        relayout(src, good)
        hdr, data = read(good)
        hdr["h_u32"]["dtype"] = "I32"
        write(good, hdr, data)
        rc, out = run(src, good)
        expect("dtype changed fails", rc, out, 1, ["h_u32", "dtype"])
        # an MLX-written original with "__metadata__": null
        src = FIXTURES / "mlx/nometa.safetensors"
        relayout(src, good)
        hdr, data = read(good)
        del hdr["__metadata__"]
        write(good, hdr, data)
        rc, out = run(src, good)
        expect("null metadata -> key dropped is accepted", rc, out, 0, ["check_fixed: OK"])

        for d in model_dirs:
            rel = str(d.relative_to(FIXTURES))
            fixed = td / f"{d.name}-fixed"
            relayout_dir(d, fixed)
            write_manifest(fixed)
            rc, out = run(d, fixed, "--mlx-lm")
            expect(f"{rel}: reference re-layout passes with --mlx-lm and MEI manifest", rc, out, 0,
                   ["Mei verification snippet passes", "bit-identical for ids", "check_fixed: OK"])

            copy = td / f"{d.name}-copy"
            shutil.copytree(d, copy)
            rc, out = run(d, copy, "--mlx-lm")
            aligned = all(expected[k]["misaligned_tensors"] == 0 for k in expected if k.startswith(rel + "/"))
            if aligned:
                expect(f"{rel}: byte copy passes (already aligned)", rc, out, 0, ["check_fixed: OK"])
            else:
                expect(f"{rel}: byte copy fails on alignment", rc, out, 1, ["misaligned tensor(s)"])

        d = FIXTURES / "mlx_lm/sharded"
        fixed = td / "sharded-bad"
        relayout_dir(d, fixed)
        shard = sorted(fixed.glob("*.safetensors"))[-1]
        name = flip_payload_byte(shard)
        rc, out = run(d, fixed, "--mlx-lm")
        expect(f"sharded: flipped byte in {shard.name}/{name} fails", rc, out, 1, [shard.name, name])

        fixed = td / "sharded-manifest"
        relayout_dir(d, fixed)
        write_manifest(fixed, corrupt=True)
        rc, out = run(d, fixed)
        expect("sharded: wrong MEI manifest hash fails", rc, out, 1, ["MEI_ALIGN_MANIFEST.json"])

        fixed = td / "sharded-extra"
        relayout_dir(d, fixed)
        shutil.copyfile(sorted(fixed.glob("*.safetensors"))[0], fixed / "model-extra.safetensors")
        rc, out = run(d, fixed)
        expect("sharded: extra shard file fails", rc, out, 1, ["extra ['model-extra.safetensors']"])

        fixed = td / "sharded-index"
        relayout_dir(d, fixed)
        idx = json.loads((fixed / "model.safetensors.index.json").read_text())
        idx["weight_map"]["lm_head.weight"] = sorted(fixed.glob("*.safetensors"))[0].name
        (fixed / "model.safetensors.index.json").write_text(json.dumps(idx))
        rc, out = run(d, fixed)
        expect("sharded: changed index weight_map fails", rc, out, 1, ["weight_map"])

        rc, out = run(FIXTURES / "mlx/hostile.safetensors", FIXTURES / "mlx_lm/q4")
        expect("file vs directory is a usage error", rc, out, 2)

    print(f"selftest_check_fixed: {'OK' if not FAILS else 'FAILED: ' + '; '.join(FAILS)}")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
