"""hubsim for the benchmarks: started on a free port, its endpoint read from the line it prints once it
serves, as `scratch_pg.py` is the benchmarks' PostgreSQL."""

import re
import subprocess


def start_hubsim(exe, root, *flags):
    """Starts `exe --root ROOT --port 0 FLAGS…` over a fresh Hub directory; returns (process, endpoint)."""
    (root / "models").mkdir(parents=True)
    sim = subprocess.Popen([exe, "--root", root, "--port", "0", *flags], stdout=subprocess.PIPE, text=True)
    for line in sim.stdout:
        if m := re.search(r"at (http://[0-9.:]+)", line):
            return sim, m.group(1)
    raise SystemExit(f"{exe} exited before serving (status {sim.wait()})")
