#!/usr/bin/env python3
"""One small safetensors file per dtype name, packed as MLX packs (no padding, back to back), and which of
them the reference reader accepts.

    target/py-venv/bin/python tests/python/dtype_files.py OUTDIR

No writer here can emit every dtype (numpy has no F8, F6 or F4), so each header is written by this script,
and the verdict on it is the reference reader's: `safetensors.safe_open` opens the file and lists its
keys, or refuses it. Each file holds a 3-byte U8 tensor first (so whatever follows starts at an odd offset
within the data), then the dtype under test, then an F64, with pseudo-random bytes. Candidate names are
every name the safetensors format documents plus two it does not (`F128`, `X`). Prints one JSON object:
{name: true|false} for whether safe_open accepted the file `OUTDIR/NAME.safetensors`.
"""

import json
import random
import sys
from pathlib import Path

from safetensors import safe_open

# Bits per element; sub-byte types need a whole number of bytes, so every shape here is [8].
BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32,
    "I64": 64, "U64": 64, "F64": 64, "C64": 64, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
    "F128": 128, "X": 8,
}


def write(path, dtype, rng):
    tensors = [("a_u8", "U8", [3], 3), ("b_x", dtype, [8], 8 * BITS[dtype] // 8), ("c_f64", "F64", [2], 16)]
    header, offset, data = {"__metadata__": {"format": "mlx"}}, 0, b""
    for name, dt, shape, nbytes in tensors:
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [offset, offset + nbytes]}
        data += bytes(rng.randrange(256) for _ in range(nbytes))
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + data)


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(7)
    verdicts = {}
    for dtype in BITS:
        path = out / f"{dtype}.safetensors"
        write(path, dtype, rng)
        try:
            with safe_open(str(path), framework="numpy") as f:
                verdicts[dtype] = sorted(f.keys()) == ["a_u8", "b_x", "c_f64"]
        except Exception:  # noqa: BLE001 - any refusal is the reference's "invalid"
            verdicts[dtype] = False
    print(json.dumps(verdicts))


if __name__ == "__main__":
    main()
