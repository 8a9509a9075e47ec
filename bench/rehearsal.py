#!/usr/bin/env python3
"""A day of the Hub, compressed: the whole service against a synthetic Hub population, under faults, with
kills, a database restart and a full disk, and the invariants checked at the end.

    cargo build --release --workspace --bins && bash tests/python/setup-venv.sh && \\
        python3 bench/rehearsal.py [--repos 100000 --sample 200 --minutes 30] [--report target/rehearsal.json]
    python3 bench/rehearsal.py --ci --bin-dir target/debug      # the CI-size run (tests run it)

What runs (as root, or with sudo for the tmpfs):
- `hubsim --population N`: N repos generated from --seed (the sample, small models in `sample-*`, lists real
  digests), the Hub's quotas (1,000 api and 5,000 resolver requests per window; the window is 300 s divided
  by --compress), 2% 5xx and 1% truncated bodies, and its webhook payloads sent to both replicas;
- a scratch PostgreSQL (initdb in a temp dir, as `postgres` when root);
- two `serve` replicas (the scheduler lease decides which one crawls), a third with `--no-scheduler` that
  only serves pages and webhooks, and four `worker`s (`--drain-only`), mirroring the sample's namespaces
  into `rehearsal/`, checking with the CPU MLX check;
- the faults: pushes at --push-per-minute (commits, new repos, deletions), every --kill-every seconds the
  replica holding the scheduler lease and one of workers 0-2 killed with SIGKILL and restarted 3 s later
  (the third replica and the last worker are never killed, so their memory is followed over the whole run),
  PostgreSQL restarted once (at 40% of the run), worker 0's work directory (a tmpfs) filled for 20 to 60 s once
  (at 60%), then the operator's fix: the filler removed, the held jobs released (`hubalign jobs retry`) and
  the worker restarted.

At the end pushes and kills stop, an audit is asked for (`POST /api/admin/audit`), the queue drains, and the
invariants are checked (each failure is listed, and the exit status is 1):
- every visible, `mlx`-tagged, affected sample repo is mirrored exactly once at its current commit, every
  other sample repo has no mirror and the store says why (gated, disabled; aligned repos recorded `ok`);
- no two jobs for one repo and commit; the Hub's mirrors are exactly the store's, one per source; no
  mirror with one commit title twice;
- every push is reflected in the store (a live repo audited at its head, a deleted one recorded gone);
- 429s: no more than one per quota window and bucket over the run (the pacing's single probe);
- the scheduler lease taken over within its lease time after each kill of its holder (plus 2 s: leases
  lapse on whole seconds, and the lease table is read by polling), and a crawl the holder left running
  resumed within the lease time plus 10 s;
- the store's kept sums (repo_sums, namespace_sums, job_sums) equal the live aggregates;
- no read of a payload the simulator could not have listed honestly (`unverifiable_payload_reads` = 0).

Figures (printed, and with --report written as JSON): the crawl against its quota bound, RSS and open
descriptors of every process per 10-minute slice (first and last sample of each) and per minute (the last
sample of each, in the JSON only), and of the processes never
restarted from the end of the first 10 minutes (the warm-up) to the end, the dashboard's p50/p99
while all this runs, failover times, the store's size per 100,000 repos.
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scratch_pg import _bin as pg_bin_dir  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TOKEN, USER = "hf_rehearsal", "rehearsal"
ADMIN, SECRET = "rehearsal-admin", "rehearsal-hook"
PAGES = ["/", "/namespaces", "/jobs", "/search?q=sample", "/ns/mlx-community", "/api/publishers", "/metrics"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Proc:
    """A process the rehearsal starts, kills and restarts; its output appended to one log file."""

    def __init__(self, name, argv, logs, env=None):
        self.name, self.argv, self.env = name, [str(a) for a in argv], env
        self.log_path = logs / f"{name}.log"
        self.p = None
        self.samples = []  # (t, rss_bytes, fds)

    def start(self):
        self.starts = getattr(self, "starts", 0) + 1
        out = open(self.log_path, "ab")
        self.p = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, env=self.env)
        out.close()

    def alive(self):
        return self.p is not None and self.p.poll() is None

    def kill9(self):
        if self.alive():
            self.p.send_signal(signal.SIGKILL)
            self.p.wait()

    def stop(self):
        if self.alive():
            self.p.terminate()
            try:
                self.p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill9()

    def sample(self, t):
        if not self.alive():
            return
        try:
            rss = int(re.search(r"VmRSS:\s+(\d+)", Path(f"/proc/{self.p.pid}/status").read_text()).group(1)) * 1024
            fds = len(os.listdir(f"/proc/{self.p.pid}/fd"))
        except (OSError, AttributeError):
            return
        self.samples.append((t, rss, fds))


class Postgres:
    """A scratch server that can be stopped and started again on the same data and port."""

    def __init__(self, tmp):
        self.bin = pg_bin_dir()
        self.root = os.geteuid() == 0
        self.owner = ["setpriv", "--reuid", "postgres", "--regid", "postgres", "--init-groups"] if self.root else []
        self.dir = Path(tmp) / "pg"
        self.dir.mkdir()
        if self.root:
            subprocess.run(["chown", "-R", "postgres:postgres", self.dir], check=True)
        subprocess.run(self.owner + [f"{self.bin}/initdb", "--auth=trust", "--username=postgres", "--no-sync",
                                     "-D", self.dir / "data"], check=True, stdout=subprocess.DEVNULL)
        self.port = free_port()
        self.server = None
        self.start()
        self.psql("CREATE DATABASE rehearsal", db="postgres")
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/rehearsal"

    def start(self):
        self.server = subprocess.Popen(
            self.owner + [f"{self.bin}/postgres", "-D", self.dir / "data", "-k", self.dir, "-p", str(self.port),
                          "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "max_connections=400"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(600):
            if subprocess.run([f"{self.bin}/pg_isready", "-q", "-h", "127.0.0.1", "-p", str(self.port)]).returncode == 0:
                return
            time.sleep(0.05)
        raise SystemExit("PostgreSQL did not start")

    def stop(self):
        # A fast shutdown: SIGTERM's smart one would wait for the service's pooled connections to close.
        self.server.send_signal(signal.SIGINT)
        self.server.wait()

    def psql(self, sql, db="rehearsal"):
        """Rows of a query, as lists of strings."""
        out = subprocess.run([f"{self.bin}/psql", "-q", "-At", "-F", "\t", "-h", "127.0.0.1", "-p", str(self.port),
                              "-U", "postgres", "-d", db, "-c", sql], check=True, capture_output=True, text=True)
        return [line.split("\t") for line in out.stdout.splitlines() if line]


def get(url, timeout=30, data=None, headers=None, tries=1):
    """The body of a GET (a POST with `data`); with `tries`, 5xx, 429 and broken connections are tried again
    (the simulator's faults hit the rehearsal's own reads too)."""
    for attempt in range(tries):
        req = urllib.request.Request(url, data=data, headers=headers or {}, method="POST" if data is not None else "GET")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.read()
        except urllib.error.HTTPError as e:
            if attempt + 1 == tries or (e.code < 500 and e.code != 429):
                raise
        except OSError:
            if attempt + 1 == tries:
                raise
        time.sleep(0.5)


def get_json(url, **kw):
    return json.loads(get(url, **kw))


class Rehearsal:
    def __init__(self, args, tmp):
        self.args, self.tmp = args, Path(tmp)
        self.logs = Path(args.logs or self.tmp / "logs")
        self.logs.mkdir(parents=True, exist_ok=True)
        self.bins = Path(args.bin_dir)
        self.failures, self.timeline, self.failovers = [], [], []
        self.page_times, self.page_errors = [], 0
        self.disk_full_held = None
        self.resumes = []
        self.stop_probe = threading.Event()

    # ---- set-up -------------------------------------------------------------------------------------------------
    def start_sim(self):
        # Two replicas that are killed in turn, and a third (`--no-scheduler`) that never is: the processes
        # whose memory and descriptors over the whole run the figures follow, beside the simulator and worker 3.
        self.ports = [free_port(), free_port(), free_port()]
        window = max(1, round(300 / self.args.compress))
        a = self.args
        argv = [self.bins / "hubsim", "--root", self.tmp / "hub", "--port", "0", "--token", f"{TOKEN}:{USER}",
                "--population", a.repos, "--sample", a.sample, "--seed", a.seed,
                "--rate-limit-api", a.api_quota, "--rate-limit-resolvers", a.resolver_quota, "--rate-window", window,
                "--error-rate", a.error_rate, "--truncate-rate", a.truncate_rate]
        for port in self.ports:
            argv += ["--webhook", f"http://127.0.0.1:{port}/api/hub/webhook#{SECRET}"]
        (self.tmp / "hub/models").mkdir(parents=True)
        self.sim = Proc("hubsim", argv, self.logs)
        started = time.time()
        self.sim.start()
        while not (m := re.search(r"at (http://[0-9.:]+)", self.sim.log_path.read_text())):
            if not self.sim.alive():
                raise SystemExit(f"hubsim exited: see {self.sim.log_path}")
            time.sleep(0.2)
        self.hub = m.group(1)
        self.window = window
        log(f"hubsim: {a.repos} repos made and served in {time.time() - started:.1f} s at {self.hub}")

    def common(self, work):
        a = self.args
        flags = ["--endpoint", self.hub, "--token", TOKEN, "--db", self.pg.url, "--target-namespace", USER,
                 "--verify-device", "cpu", "--python", a.python, "--work-dir", work, "--min-downloads", "0",
                 "--min-likes", "0", "--max-new-mirrors", "100000", "--max-new-mirrors-per-namespace", "100000",
                 "--lease-secs", str(a.job_lease), "--max-wait", "120", "--log-json"]
        for ns in range(4):
            flags += ["--include", f"sample-{ns}"]
        return flags

    def start_service(self):
        a = self.args
        self.replicas = []
        for i, port in enumerate(self.ports):
            argv = [self.bins / "hubalign", "serve", *self.common(self.tmp / f"serve-{i}-work"), "--workers", "0",
                    "--listen", f"127.0.0.1:{port}", "--interval", a.interval, "--scheduler-lease", a.scheduler_lease,
                    "--webhook-secret", SECRET, "--admin-token", ADMIN, "--concurrency", "16"]
            if i == SPARED_REPLICA:
                argv.append("--no-scheduler")
            self.replicas.append(Proc(f"serve-{i}", argv, self.logs, self.service_env()))
        self.workers = []
        for i in range(a.workers):
            work = self.tmp / f"worker-{i}-work"
            work.mkdir()
            if i == 0:
                self.mount_small_disk(work)
            health = free_port()
            argv = [self.bins / "hubalign", "worker", *self.common(work), "--drain-only",
                    "--health-listen", f"127.0.0.1:{health}"]
            self.workers.append(Proc(f"worker-{i}", argv, self.logs, self.service_env()))
        for p in self.replicas + self.workers:
            p.start()
        for port in self.ports:
            self.wait_http(f"http://127.0.0.1:{port}/healthz", 120)
        log(f"service: 3 replicas on {self.ports} (serve-2 without the scheduler, never killed), {a.workers} "
            f"workers (worker-{a.workers - 1} never killed)")

    def service_env(self):
        """The environment `serve` and `worker` run in: deploy/'s malloc setting (two arenas), unless the run
        asks for glibc's default (`--malloc-arena-max 0`), to compare."""
        env = dict(os.environ)
        if self.args.malloc_arena_max > 0:
            env["MALLOC_ARENA_MAX"] = str(self.args.malloc_arena_max)
        return env

    def mount_small_disk(self, path):
        sudo = [] if os.geteuid() == 0 else ["sudo"]
        subprocess.run(sudo + ["mount", "-t", "tmpfs", "-o", f"size={self.args.disk_mib}m", "tmpfs", path], check=True)
        self.small_disk = path

    def wait_http(self, url, seconds):
        deadline = time.time() + seconds
        while time.time() < deadline:
            try:
                get(url, timeout=5)
                return
            except (OSError, urllib.error.HTTPError):
                time.sleep(0.2)
        raise SystemExit(f"{url} did not answer within {seconds} s")

    # ---- during the run -----------------------------------------------------------------------------------------
    def live_replica(self, turn=0):
        """A live replica's address: the first from `turn` on, round the three."""
        n = len(self.replicas)
        for k in range(n):
            p, port = self.replicas[(turn + k) % n], self.ports[(turn + k) % n]
            if p.alive():
                return f"http://127.0.0.1:{port}"
        return None

    def probe_pages(self):
        """The dashboard as a reader sees it, all run long: one page after another, the replicas in turn."""
        i = 0
        while not self.stop_probe.is_set():
            base = self.live_replica(i)
            if base:
                page = PAGES[i % len(PAGES)]
                i += 1
                started = time.perf_counter()
                try:
                    get(base + page, timeout=30)
                    self.page_times.append(time.perf_counter() - started)
                except (OSError, urllib.error.HTTPError):
                    self.page_errors += 1
            self.stop_probe.wait(0.25)

    def holder(self):
        try:
            rows = self.pg.psql("SELECT holder, expires_at FROM leases WHERE name = 'scheduler'")
        except subprocess.CalledProcessError:
            return None
        return rows[0][0] if rows else None

    def replica_of(self, holder):
        """Which replica holds the lease: the holder is `HOST-PID`."""
        for p in self.replicas:
            if p.alive() and holder and holder.rsplit("-", 1)[-1] == str(p.p.pid):
                return p
        return None

    def kill_round(self, n):
        holder = self.holder()
        crawling = int(self.pg.psql(
            "SELECT COALESCE(MAX(id), 0) FROM audit_runs WHERE kind = 'crawl' AND status = 'running'")[0][0])
        leader = self.replica_of(holder)
        victim = leader or self.replicas[n % 2]
        # The last worker is spared: its memory and descriptors are followed over the whole run.
        worker = self.workers[n % max(1, len(self.workers) - 1)]
        killed_at = time.time()
        victim.kill9()
        worker.kill9()
        self.timeline.append((killed_at, f"SIGKILL {victim.name} (lease: {holder}) and {worker.name}"))
        log(f"killed {victim.name} (the scheduler lease was {holder}) and {worker.name}")
        restarted = False
        while time.time() - killed_at < self.args.scheduler_lease * 3:
            now = self.holder()
            if not restarted and time.time() - killed_at >= 3:
                victim.start()
                worker.start()
                restarted = True
            if holder and now and now != holder:
                self.failovers.append(time.time() - killed_at)
                log(f"lease taken over by {now} after {self.failovers[-1]:.1f} s")
                break
            time.sleep(0.1)
        else:
            if holder:
                self.failures.append(f"the scheduler lease of {holder} was not taken over within "
                                     f"{self.args.scheduler_lease * 3} s of its holder's kill")
        if not restarted:
            victim.start()
            worker.start()
        if crawling and leader is victim:
            self.check_resumed(crawling, killed_at)

    def check_resumed(self, crawl, killed_at):
        """The crawl the killed leader left running is resumed by whoever takes the lease, at once."""
        bound = self.args.scheduler_lease + 10
        while time.time() - killed_at < bound:
            if int(self.pg.psql(f"SELECT COUNT(*) FROM audit_runs WHERE kind = 'crawl' AND id > {crawl}")[0][0]):
                self.resumes.append(time.time() - killed_at)
                log(f"crawl {crawl} resumed {self.resumes[-1]:.1f} s after its leader's kill")
                return
            time.sleep(0.5)
        self.failures.append(f"crawl {crawl}, left running by the killed leader, was not resumed within {bound} s")

    def restart_postgres(self):
        log("PostgreSQL: stopping")
        self.timeline.append((time.time(), "PostgreSQL stopped"))
        self.pg.stop()
        time.sleep(3)
        self.pg.start()
        self.timeline.append((time.time(), "PostgreSQL started"))
        log("PostgreSQL: started again")

    def fill_disk(self):
        """Worker 0's disk fills while jobs arrive: the other workers are paused (SIGSTOP) and three sample repos
        pushed, so worker 0 is the one to meet the full disk. After 20 s (up to 60 s while no job has met it) the
        operator's fix: the filler removed, the held jobs released with `hubalign jobs retry`, the others resumed,
        worker 0 restarted."""
        filler = self.small_disk / "filler"
        log(f"disk full: filling {self.small_disk}, pausing the other workers, pushing to the sample")
        self.timeline.append((time.time(), "worker-0's disk filled, workers 1-3 paused"))
        others = [w for w in self.workers[1:] if w.alive()]
        for w in others:
            w.p.send_signal(signal.SIGSTOP)
        subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=1M"], stderr=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL)
        sample = get_json(f"{self.hub}/_sim/population", timeout=600)["sample"]
        open_repos = [r["id"] for r in sample if r["mlx"] and not (r["private"] or r["gated"] or r["disabled"])
                      and r["class"] != "aligned"]
        for repo in open_repos[:3]:
            self.pushes.append(get_json(f"{self.hub}/_sim/population/push?kind=update&repo={repo}", data=b""))
        # The operator looks after 20 s, or later (up to 60 s) while no job has met the full disk yet: a loaded
        # machine takes longer from the push to worker 0's claim.
        started = time.time()
        while True:
            time.sleep(2)
            held = [r[0] for r in self.pg.psql("SELECT id FROM jobs WHERE state = 'queued' AND failure_kind = 'needs_operator'")]
            waited = time.time() - started
            if (held and waited >= 20) or waited >= 60:
                break
        self.disk_full_held = len(held)
        filler.unlink()
        # The operator, having freed the disk, releases what it held (`jobs retry`), then restarts worker 0,
        # which had stopped claiming for a while.
        for job in held:
            subprocess.run([self.bins / "hubalign", "jobs", "retry", job, "--db", self.pg.url, "-q"], check=True,
                           stdout=subprocess.DEVNULL)
        still = int(self.pg.psql("SELECT COUNT(*) FROM jobs WHERE state = 'queued' AND failure_kind = 'needs_operator'")[0][0])
        if still:
            self.failures.append(f"{still} jobs still held for the operator after `hubalign jobs retry`")
        for w in others:
            w.p.send_signal(signal.SIGCONT)
        self.workers[0].stop()
        self.workers[0].start()
        self.timeline.append((time.time(), f"worker-0's disk freed ({self.disk_full_held} jobs were held for the "
                                           "operator, released by `jobs retry`), workers resumed, worker-0 restarted"))
        log(f"disk freed ({self.disk_full_held} jobs held for the operator), worker-0 restarted")

    def push(self):
        try:
            event = get_json(f"{self.hub}/_sim/population/push", data=b"")
            self.pushes.append(event)
        except (OSError, urllib.error.HTTPError) as e:
            self.failures.append(f"a push failed: {e}")

    def run(self):
        a = self.args
        self.pushes = []
        probe = threading.Thread(target=self.probe_pages, daemon=True)
        probe.start()
        started = time.time()
        length = a.minutes * 60
        # The first kill comes early, while the first crawl runs.
        next_kill, next_push, next_sample = started + a.kill_every / 2, started, started
        pg_done, disk_done, kills = False, False, 0
        while (now := time.time()) - started < length:
            if now >= next_sample:
                for p in [self.sim] + self.replicas + self.workers:
                    p.sample(now - started)
                next_sample = now + 5
            if now >= next_push and a.push_per_minute > 0:
                self.push()
                next_push = now + 60 / a.push_per_minute
            if now >= next_kill:
                self.kill_round(kills)
                kills += 1
                next_kill = time.time() + a.kill_every
            if not pg_done and now - started >= 0.4 * length:
                self.restart_postgres()
                pg_done = True
            if not disk_done and now - started >= 0.6 * length:
                self.fill_disk()
                disk_done = True
            for p in self.replicas + self.workers:
                if not p.alive():
                    self.failures.append(f"{p.name} exited on its own (status {p.p.returncode}): see {p.log_path}")
                    p.start()
            time.sleep(0.2)
        self.kills = kills
        log(f"run over after {time.time() - started:.0f} s: {len(self.pushes)} pushes, {kills} kill rounds")
        self.finish()
        self.stop_probe.set()
        probe.join()

    def finish(self):
        """The last audit, asked of a live replica, and the queue drained."""
        before = int(self.pg.psql("SELECT COALESCE(MAX(id), 0) FROM audit_runs")[0][0])
        asked = time.time()
        base = self.live_replica()
        get(f"{base}/api/admin/audit", data=b"", headers={"Authorization": f"Bearer {ADMIN}"}, tries=10)
        deadline = asked + self.args.drain_timeout
        while time.time() < deadline:
            rows = self.pg.psql(f"SELECT status FROM audit_runs WHERE kind = 'crawl' AND id > {before} ORDER BY id")
            if rows and rows[-1][0] != "running":
                break
            time.sleep(1)
        else:
            self.failures.append(f"the audit asked for at the end did not finish within {self.args.drain_timeout} s")
        done = time.time()
        log(f"final audit done after {done - asked:.0f} s")
        # The scheduler queues jobs after the audit: drained once nothing waits (held jobs count as waiting) in
        # five readings in a row, the first at least 10 s after the audit ended.
        quiet = 0
        while time.time() < deadline and quiet < 5:
            waiting = int(self.pg.psql("SELECT COUNT(*) FROM jobs WHERE state NOT IN ('published', 'failed', 'skipped')")[0][0])
            quiet = quiet + 1 if waiting == 0 and time.time() - done > 10 else 0
            time.sleep(1)
        if quiet < 5:
            self.failures.append(f"the queue did not drain within {self.args.drain_timeout} s of the last audit's request")
        log(f"queue drained after {time.time() - asked:.0f} s")

    # ---- the invariants -----------------------------------------------------------------------------------------
    def check(self):
        q = self.pg.psql
        population = get_json(f"{self.hub}/_sim/population", timeout=600)
        counters = get_json(f"{self.hub}/_sim/counters")
        mirrors = [m["id"] for m in self.list_models(f"author={USER}")]
        sources = {r[0].lower(): r for r in q("SELECT source_repo, target_repo FROM mirrors")}
        jobs = q("SELECT repo_id, source_sha, state, COALESCE(reason, ''), COALESCE(target_repo, '') FROM jobs")
        repos = {r[0].lower(): r for r in q("SELECT id, state, COALESCE(audited_sha, ''), was_affected FROM repos")}
        for sample in population["sample"]:
            rid = sample["id"].lower()
            visible = not sample["private"] and sample["mlx"]
            if not visible:
                continue
            affected = sample["class"] != "aligned"
            published = [j for j in jobs if j[0].lower() == rid and j[1] == sample["head"] and j[2] == "published"]
            if sample["gated"] or sample["disabled"]:
                if rid in sources:
                    self.failures.append(f"{sample['id']}: gated or disabled, yet mirrored")
                if repos.get(rid, [None, None])[1] not in ("gated", "disabled"):
                    self.failures.append(f"{sample['id']}: gated or disabled, the store says {repos.get(rid)}")
            elif affected:
                if len(published) != 1:
                    self.failures.append(f"{sample['id']}: affected ({sample['class']}) at {sample['head'][:12]}, "
                                         f"published jobs for it: {len(published)}; jobs: "
                                         f"{[j for j in jobs if j[0].lower() == rid]}")
            else:
                if rid in sources:
                    self.failures.append(f"{sample['id']}: aligned, yet mirrored")
                if repos.get(rid, [None, None])[1] != "ok":
                    self.failures.append(f"{sample['id']}: aligned, and the store says {repos.get(rid)}")
        live = {s["id"].lower() for s in population["sample"]}
        for source, row in sources.items():
            if source.split("/")[0].startswith("sample-") and source not in live:
                hidden = q(f"SELECT COALESCE(hidden_reason, '') FROM mirrors WHERE lower(source_repo) = '{source}'")
                if not hidden or not hidden[0][0]:
                    self.failures.append(f"mirror {row[1]} of deleted {source} is neither hidden nor recorded")
        # Uniqueness: jobs per repo and commit, mirrors per source, on the store and on the Hub.
        for dup in q("SELECT lower(repo_id), source_sha, COUNT(*) FROM jobs GROUP BY 1, 2 HAVING COUNT(*) > 1"):
            self.failures.append(f"duplicate jobs: {dup}")
        # Every repo under the target namespace is the one mirror of one source the store records, and back.
        targets = [r[1].lower() for r in sources.values()]
        if sorted(m.lower() for m in mirrors) != sorted(targets) or len(set(targets)) != len(targets):
            self.failures.append(f"the Hub's mirrors {sorted(mirrors)} are not the store's {sorted(targets)}")
        for m in mirrors:
            commits = get_json(f"{self.hub}/api/models/{m}/commits/main", headers=self.auth(), tries=20)
            titles = [c["title"] for c in commits]
            if len(titles) != len(set(titles)):
                self.failures.append(f"{m}: one commit title twice: {titles}")
        # Every push reflected: audited at its head, or recorded gone.
        heads = {}
        for e in population["events"]:
            heads[e["repo"].lower()] = e
        for rid, e in heads.items():
            row = repos.get(rid)
            if e["kind"] == "delete":
                if row and row[1] != "vanished":
                    self.failures.append(f"pushed delete of {e['repo']} not recorded: {row}")
            elif row is None:
                if self.visible(e["repo"]):
                    self.failures.append(f"push {e['seq']} ({e['kind']} {e['repo']}) never audited")
            elif row[1] in ("vanished", "renamed"):
                self.failures.append(f"push {e['seq']} to {e['repo']}: live on the Hub, recorded {row[1]}")
            elif row[1] == "ok" and row[2] != e["head"]:
                self.failures.append(f"push {e['seq']} to {e['repo']}: the store audited {row[2][:12]}, "
                                     f"the Hub's head is {e['head'][:12]}")
        # Quotas: no more 429s than one per window and bucket (the pacing's single probe), over the whole run.
        windows = (time.time() - self.sim_started) / self.window
        if counters["rate_limited"] > 2 * (windows + 1):
            self.failures.append(f"{counters['rate_limited']} 429s in {windows:.0f} windows of 2 buckets")
        if counters.get("unverifiable_payload_reads", 0):
            self.failures.append(f"{counters['unverifiable_payload_reads']} reads of payloads outside the policy")
        # Failover within the lease.
        for f in self.failovers:
            if f > self.args.scheduler_lease + 2:
                self.failures.append(f"failover took {f:.1f} s, the lease is {self.args.scheduler_lease} s")
        # Kept sums against live aggregates.
        for name, sql in SUM_CHECKS.items():
            diff = q(sql)
            if diff:
                self.failures.append(f"{name} differs from the live aggregate in {len(diff)} rows: {diff[:3]}")
        return population, counters

    def list_models(self, query):
        out, url = [], f"{self.hub}/api/models?{query}&limit=1000"
        while url:
            for attempt in range(20):
                try:
                    with urllib.request.urlopen(urllib.request.Request(url, headers=self.auth()), timeout=60) as r:
                        out += json.load(r)
                        link = r.headers.get("Link") or ""
                    break
                except (OSError, json.JSONDecodeError):
                    if attempt == 19:
                        raise
                    time.sleep(0.5)
            m = re.search(r"<([^>]+)>;\s*rel=\"next\"", link)
            url = m.group(1) if m else None
        return out

    def auth(self):
        return {"Authorization": f"Bearer {TOKEN}"}

    def visible(self, repo):
        try:
            info = get_json(f"{self.hub}/api/models/{repo}", headers=self.auth(), tries=20)
        except urllib.error.HTTPError:
            return False
        return "mlx" in info.get("tags", [])

    # ---- figures ------------------------------------------------------------------------------------------------
    def figures(self, population, counters):
        q = self.pg.psql
        crawls = q("SELECT id, started_at, finished_at, status, repos_listed, repos_probed, shards_probed, "
                   "api_requests, resolver_requests, rate_limited FROM audit_runs WHERE kind = 'crawl' ORDER BY id")
        crawl_rows = []
        for c in crawls:
            if c[3] != "finished" or not c[2]:
                continue
            from datetime import datetime
            took = (datetime.fromisoformat(c[2].replace("Z", "+00:00")) -
                    datetime.fromisoformat(c[1].replace("Z", "+00:00"))).total_seconds()
            api, res = int(c[7]), int(c[8])
            bound = max(api / self.args.api_quota, res / self.args.resolver_quota) * self.window
            crawl_rows.append({"run": int(c[0]), "seconds": took, "repos": int(c[4]), "shards": int(c[6]),
                               "api_requests": api, "resolver_requests": res, "rate_limited": int(c[9]),
                               "quota_bound_seconds": bound, "ratio": took / bound if bound else None})
        size = q("SELECT pg_database_size('rehearsal')")[0][0]
        repos_stored = int(q("SELECT COUNT(*) FROM repos")[0][0])
        # The same records in a SQLite store: exported from PostgreSQL and imported, as an operator moves them.
        export, sqlite = self.tmp / "store.jsonl", self.tmp / "store.db"
        hubalign = self.bins / "hubalign"
        subprocess.run([hubalign, "store", "export", "--db", self.pg.url, "--out", export, "-q"], check=True)
        subprocess.run([hubalign, "store", "import", "--db", sqlite, export, "-q"], check=True)
        sqlite_size = sqlite.stat().st_size
        times = sorted(self.page_times)
        pct = lambda p: times[min(len(times) - 1, int(p * len(times)))] * 1000 if times else None  # noqa: E731
        slices = {}
        for p in [self.sim] + self.replicas + self.workers:
            per = {}
            for t, rss, fds in p.samples:
                per.setdefault(int(t // 600), []).append((rss, fds))
            slices[p.name] = [{"slice": k, "rss_first": v[0][0], "rss_last": v[-1][0], "fds_first": v[0][1],
                               "fds_last": v[-1][1]} for k, v in sorted(per.items())]
        # Each process's last sample of every minute: when a warm-up ends is read here, not guessed.
        by_minute = {p.name: sorted({int(t // 60): {"minute": int(t // 60), "rss": rss, "fds": fds}
                                     for t, rss, fds in p.samples}.values(), key=lambda m: m["minute"])
                     for p in [self.sim] + self.replicas + self.workers}
        # The processes never restarted: from the end of the first 10 minutes (the warm-up) to the end.
        steady = {}
        for p in [self.sim] + self.replicas + self.workers:
            after = [s for s in p.samples if s[0] >= 600]
            if p.starts == 1 and len(after) >= 2:
                steady[p.name] = {"rss_after_warm_up": after[0][1], "rss_at_end": after[-1][1],
                                  "rss_change": after[-1][1] / after[0][1] - 1, "rss_max": max(s[1] for s in after),
                                  "fds_after_warm_up": after[0][2], "fds_at_end": after[-1][2],
                                  "fds_max": max(s[2] for s in after)}
        return {
            "population": population["census"],
            "pushes": len(self.pushes),
            "kill_rounds": self.kills,
            "jobs_held_by_the_full_disk": self.disk_full_held,
            "crawls": crawl_rows,
            "jobs": dict((r[0], int(r[1])) for r in q("SELECT state, COUNT(*) FROM jobs GROUP BY state")),
            "failovers_seconds": self.failovers,
            "crawl_resumed_after_kill_seconds": self.resumes,
            "dashboard": {"requests": len(times), "errors": self.page_errors, "p50_ms": pct(0.5), "p99_ms": pct(0.99)},
            "store_repos": repos_stored,
            "store_bytes_postgres": int(size),
            "store_bytes_per_100k_repos_postgres": int(size) * 100_000 // max(repos_stored, 1),
            "store_bytes_sqlite": sqlite_size,
            "store_bytes_per_100k_repos_sqlite": sqlite_size * 100_000 // max(repos_stored, 1),
            "hub_counters": counters,
            "never_restarted_after_warm_up": steady,
            "restarts": {p.name: p.starts - 1 for p in [self.sim] + self.replicas + self.workers},
            "processes": slices,
            "by_minute": by_minute,
            "timeline": [(round(t - self.sim_started, 1), what) for t, what in self.timeline],
        }


# The replica started with `--no-scheduler` and never killed.
SPARED_REPLICA = 2

SUM_CHECKS = {
    "repo_sums": """
        SELECT * FROM (SELECT repo, namespace, sha, shards_aligned, shards_header_pad, shards_relayout, shards_invalid,
                              misaligned_tensors, misaligned_bytes FROM repo_sums
                       EXCEPT SELECT repo, namespace, sha, shards_aligned, shards_header_pad, shards_relayout,
                              shards_invalid, misaligned_tensors, misaligned_bytes FROM repo_sums_live) d
        UNION ALL
        SELECT * FROM (SELECT repo, namespace, sha, shards_aligned, shards_header_pad, shards_relayout, shards_invalid,
                              misaligned_tensors, misaligned_bytes FROM repo_sums_live
                       EXCEPT SELECT repo, namespace, sha, shards_aligned, shards_header_pad, shards_relayout,
                              shards_invalid, misaligned_tensors, misaligned_bytes FROM repo_sums) e""",
    "namespace_sums": """
        SELECT * FROM (SELECT namespace, shards_aligned, shards_header_pad, shards_relayout, shards_invalid,
                              misaligned_tensors, misaligned_bytes FROM namespace_sums
                       WHERE repos_audited > 0
                       EXCEPT SELECT namespace, SUM(shards_aligned), SUM(shards_header_pad), SUM(shards_relayout),
                              SUM(shards_invalid), SUM(misaligned_tensors), SUM(misaligned_bytes)
                       FROM repo_sums GROUP BY namespace) d""",
    "job_sums": """
        SELECT * FROM (SELECT state, SUM(jobs) FROM job_sums GROUP BY state HAVING SUM(jobs) <> 0
                       EXCEPT SELECT state, COUNT(*) FROM jobs GROUP BY state) d""",
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ci", action="store_true", help="the CI size: 3,000 repos, 16 in the sample, 3 minutes")
    ap.add_argument("--bin-dir", default=str(ROOT / "target/release"))
    ap.add_argument("--python", default=str(ROOT / "target/py-venv/bin/python"))
    ap.add_argument("--malloc-arena-max", type=int, default=2,
                    help="MALLOC_ARENA_MAX for serve and the workers, as deploy/ sets it (0: glibc's default)")
    ap.add_argument("--repos", type=int, default=100_000)
    ap.add_argument("--sample", type=int, default=200)
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--compress", type=float, default=100, help="the quota window is 300 s divided by this")
    ap.add_argument("--api-quota", type=int, default=1000)
    ap.add_argument("--resolver-quota", type=int, default=5000)
    ap.add_argument("--error-rate", type=float, default=0.02)
    ap.add_argument("--truncate-rate", type=float, default=0.01)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--interval", type=int, default=600, help="seconds between scheduled crawls")
    ap.add_argument("--scheduler-lease", type=int, default=15)
    ap.add_argument("--job-lease", type=int, default=120)
    ap.add_argument("--kill-every", type=float, default=300)
    ap.add_argument("--push-per-minute", type=float, default=20)
    ap.add_argument("--disk-mib", type=int, default=1024)
    ap.add_argument("--drain-timeout", type=float, default=1800)
    ap.add_argument("--logs", help="keep the processes' logs here")
    ap.add_argument("--report", help="write the figures and failures here as JSON")
    args = ap.parse_args()
    if args.ci:
        args.repos, args.sample, args.minutes, args.kill_every = 3000, 16, 3, 50
        args.interval, args.push_per_minute, args.drain_timeout, args.disk_mib = 90, 30, 600, 320
    for tool in (Path(args.bin_dir) / "hubsim", Path(args.bin_dir) / "hubalign", Path(args.python)):
        if not tool.exists():
            sys.exit(f"{tool} missing: cargo build --workspace --bins; bash tests/python/setup-venv.sh")
    tmp = tempfile.mkdtemp(prefix="hubalign-rehearsal-")
    if os.geteuid() == 0:
        os.chmod(tmp, 0o755)
    r = Rehearsal(args, tmp)
    code = 1
    try:
        r.pg = Postgres(tmp)
        r.start_sim()
        r.sim_started = time.time()
        r.start_service()
        r.run()
        population, counters = r.check()
        figures = r.figures(population, counters)
        figures["failures"] = r.failures
        print(json.dumps({k: v for k, v in figures.items() if k not in ("processes", "by_minute", "hub_counters")}, indent=1))
        if args.report:
            Path(args.report).write_text(json.dumps(figures, indent=1))
        for f in r.failures:
            print(f"FAILED: {f}", flush=True)
        code = 1 if r.failures else 0
    finally:
        for p in getattr(r, "replicas", []) + getattr(r, "workers", []) + ([r.sim] if hasattr(r, "sim") else []):
            p.stop()
        if hasattr(r, "pg"):
            r.pg.stop()
        if hasattr(r, "small_disk"):
            subprocess.run(([] if os.geteuid() == 0 else ["sudo"]) + ["umount", "-l", r.small_disk])
        if code == 0 and not args.logs:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"logs kept in {r.logs}", flush=True)
    sys.exit(code)


if __name__ == "__main__":
    main()
