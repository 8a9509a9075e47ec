"""A throwaway PostgreSQL server for the benchmarks, like `hubalign::store::scratch` (Debian's `postgresql`
package): `with scratch_postgres() as new_database: url = new_database()`. As root the cluster belongs to the
`postgres` user (PostgreSQL refuses root). fsync is off: the benchmarks compare the stores, not the disk."""

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time


def _bin():
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda d: int(d.split("/")[-2]), reverse=True)
    for d in dirs + os.environ.get("PATH", "").split(":"):
        if all(os.path.exists(f"{d}/{b}") for b in ("initdb", "postgres", "pg_isready", "psql")):
            return d
    raise SystemExit("no PostgreSQL binaries (apt-get install postgresql)")


@contextlib.contextmanager
def scratch_postgres():
    bin_dir, root = _bin(), os.geteuid() == 0
    owner = ["setpriv", "--reuid", "postgres", "--regid", "postgres", "--init-groups"] if root else []
    tmp = tempfile.mkdtemp(prefix="hubalign-bench-pg-")
    if root:
        subprocess.run(["chown", "-R", "postgres:postgres", tmp], check=True)
    data = f"{tmp}/data"
    subprocess.run(owner + [f"{bin_dir}/initdb", "--auth=trust", "--username=postgres", "--no-sync", "-D", data],
                   check=True, stdout=subprocess.DEVNULL)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(owner + [f"{bin_dir}/postgres", "-D", data, "-k", tmp, "-p", str(port),
                                       "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
                                       "-c", "max_connections=300"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            if subprocess.run([f"{bin_dir}/pg_isready", "-q", "-h", "127.0.0.1", "-p", str(port)]).returncode == 0:
                break
            time.sleep(0.05)
        count = iter(range(1_000_000))

        def new_database():
            name = f"bench{next(count)}"
            subprocess.run([f"{bin_dir}/psql", "-q", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres",
                            "-c", f"CREATE DATABASE {name}"], check=True)
            return f"postgres://postgres@127.0.0.1:{port}/{name}"

        yield new_database
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(tmp, ignore_errors=True)
