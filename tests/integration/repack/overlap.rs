//! The MLX check runs while the mirror is uploaded, and the commit waits for its verdict (`repack::upload`).
//! A stand-in for the check says it started, waits until the upload has asked the Hub how to send each file,
//! lets the uploader run on, and reads the simulator's counters before answering.
//! The check's interpreter starts before the bundle is staged, and reads the bundle only once it is:
//! `repack`'s during the checks at start, a worker's as the download starts.

use std::path::{Path, PathBuf};

use super::pipeline::jobs;
use crate::audit::world::{assert_ok, audit, audit_world, db};
use crate::sim::world::{ALICE, World};
use crate::support::{hubalign, python_for_jobs_running};

/// A stand-in for `python verify_mlx.py` that passes or fails as told, recording what the simulator had
/// seen when it answered.
fn stand_in(dir: &Path, endpoint: &str, passes: bool) -> PathBuf {
    let script = dir.join("check.py");
    std::fs::write(
        &script,
        format!(
            r#"import json, sys, time, urllib.request
def snapshot():
    return json.load(urllib.request.urlopen("{endpoint}/_sim/counters"))
def counters():
    return snapshot()["requests"]
print(json.dumps({{"started": True, "mlx_version": "0.0-stand-in"}}), flush=True)
sys.stdin.readline()  # the bundle and its limits, sent once it is staged
deadline = time.time() + 30
while counters().get("preupload", 0) == 0 and time.time() < deadline:
    time.sleep(0.05)
time.sleep(1.5)  # time enough for a commit that did not wait
whole = snapshot()
seen = whole["requests"]
record = {{"ok": {ok}, "device": "cpu", "mlx_version": "0.0-stand-in", "files": 1, "tensors": 1, "seconds": 1.5,
          "preupload_before_verdict": seen.get("preupload", 0), "commits_before_verdict": seen.get("commit", 0),
          "xet_bytes_before_verdict": whole["xet_bytes_received"]}}
if not record["ok"]:
    record["error"] = "ValueError: model.safetensors: w: bytes differ from the source's"
print(json.dumps(record))
raise SystemExit(0 if record["ok"] else 1)
"#,
            ok = if passes { "True" } else { "False" }
        ),
    )
    .unwrap();
    python_for_jobs_running(dir, &script)
}

/// `hubalign repack REPO` with `python` for the MLX check's interpreter.
fn repack_with(world: &World, db: &Path, repo: &str, python: &Path) -> std::process::Output {
    run_with(world, db, &["repack", repo], python)
}

/// `hubalign ARGS` against `world` with `python` for the MLX check's interpreter, killed after 40 s.
fn run_with(world: &World, db: &Path, args: &[&str], python: &Path) -> std::process::Output {
    let endpoint = world.endpoint();
    let mut child = hubalign()
        .args(args)
        .args(["--endpoint", endpoint.as_str(), "--token", ALICE])
        .args(["--db", db.to_str().unwrap(), "--target-namespace", "alice", "--verify-device", "cpu"])
        .arg("--python")
        .arg(python)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // A worker whose commit waited for a verdict that never came would hang: the test ends it instead.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(40);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// The standard world audited, then `lmstudio/tiny-q8` repacked with a stand-in check that passes or fails:
/// the world, the store's directory and file, and the worker's output.
fn audited_then_repacked(passes: bool) -> (World, tempfile::TempDir, PathBuf, std::process::Output) {
    let world = audit_world(0, |_| {});
    let (dir, db) = db();
    assert_ok(&audit(&world, &db, &[]));
    let python = stand_in(dir.path(), &world.endpoint(), passes);
    let out = repack_with(&world, &db, "lmstudio/tiny-q8", &python);
    (world, dir, db, out)
}

fn commits(world: &World) -> u64 {
    let sim = &world.hub.as_ref().unwrap().sim;
    sim.counters.snapshot().requests.get("commit").copied().unwrap_or(0)
}

#[test]
fn the_upload_runs_during_the_check_and_the_commit_waits_for_its_verdict() {
    let (world, _dir, db, out) = audited_then_repacked(true);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let job = world.runtime.block_on(async {
        let store = hubalign::store::Store::open(&db).await.unwrap();
        store.jobs().await.unwrap().into_iter().find(|j| j.repo_id == "lmstudio/tiny-q8").unwrap()
    });
    assert_eq!(job.state, "published", "{:?}", job.reason);
    let record = serde_json::to_value(job.verification.unwrap().0).unwrap();
    assert_eq!(record["preupload_before_verdict"], 1, "the upload had asked how to send each file before the verdict");
    assert!(record["xet_bytes_before_verdict"].as_u64().unwrap() > 0, "and sent the shard to the CAS: {record}");
    assert_eq!(record["commits_before_verdict"], 0, "and committed nothing: {record}");
    assert_eq!(commits(&world), 1);
    let sim = &world.hub.as_ref().unwrap().sim;
    let card_sha =
        sim.repos().get(&crate::support::mirror("lmstudio/tiny-q8")).unwrap().head().unwrap().files["README.md"]
            .sha256
            .clone();
    let card = std::fs::read_to_string(sim.store.join("blobs").join(card_sha)).unwrap();
    // The version is the check's own word, escaped as any text the card did not write itself; the card
    // committed after the verdict holds the check's whole record.
    let record = "(MLX 0\\.0\\-stand\\-in) returned\n  1 array in 1 file bit-identical to the source's, in 1.5 s.";
    assert!(card.contains(record), "{card}");
}

#[test]
fn a_check_that_fails_during_the_upload_leaves_no_commit() {
    let (world, _dir, db, out) = audited_then_repacked(false);
    assert_eq!(out.status.code(), Some(4), "{}", String::from_utf8_lossy(&out.stderr));
    let (_, state, reason) = jobs(&world, &db).into_iter().find(|j| j.0 == "lmstudio/tiny-q8").unwrap();
    assert_eq!(state, "failed");
    assert!(reason.unwrap_or_default().contains("MLX load check: ValueError: model.safetensors: w: bytes differ"));
    assert_eq!(commits(&world), 0, "nothing committed");
}

/// A stand-in for the check that records its home and the bytes the simulator had served at its start.
/// Once told the bundle is staged, it records the bytes served again, the shards in the bundle's directory
/// and the line it was told. The test puts `ENDPOINT = "…"` before it.
const WATCHES_THE_DOWNLOAD: &str = r#"import json, os, sys, urllib.request
def served():
    return json.load(urllib.request.urlopen(ENDPOINT + "/_sim/counters"))["bytes_served"]
at_start = {"served": served(), "home": os.environ["HOME"]}
print(json.dumps({"started": True, "mlx_version": "0.0-stand-in"}), flush=True)
go = json.loads(sys.stdin.readline())
shards = sorted(n for n in os.listdir(go["output"]) if n.endswith(".safetensors"))
print(json.dumps({"ok": True, "device": "cpu", "mlx_version": "0.0-stand-in", "files": 1, "tensors": 1,
                  "seconds": 0.0, "at_start": at_start, "at_go": {"served": served(), "shards": shards}, "go": go}))
"#;

/// A world whose 4 MiB shard comes at 1 MB/s per connection, audited: the download takes seconds, the
/// stand-in a fraction of one to start.
struct SlowWorld {
    world: World,
    /// The store's directory, which holds the work directory.
    dir: tempfile::TempDir,
    /// The store.
    db: PathBuf,
    /// The interpreter that runs the stand-in for a job's check.
    python: PathBuf,
}

impl SlowWorld {
    fn start() -> SlowWorld {
        let world =
            crate::sim::world::start_on(super::memory::reordered_bundle(8).0, |c| c.faults.storage_rate = 1_000_000);
        let (dir, db) = db();
        assert_ok(&audit(&world, &db, &[]));
        let script = dir.path().join("check.py");
        std::fs::write(&script, format!("ENDPOINT = {:?}\n{WATCHES_THE_DOWNLOAD}", world.endpoint())).unwrap();
        let python = python_for_jobs_running(dir.path(), &script);
        SlowWorld { world, dir, db, python }
    }

    /// `hubalign ARGS` with the stand-in.
    fn run(&self, args: &[&str]) -> std::process::Output {
        run_with(&self.world, &self.db, args, &self.python)
    }

    /// The stand-in's record of the one job.
    fn watched(&self) -> serde_json::Value {
        let job = self.world.runtime.block_on(async {
            let store = hubalign::store::Store::open(&self.db).await.unwrap();
            store.jobs().await.unwrap().into_iter().next().unwrap()
        });
        serde_json::to_value(job.verification.unwrap().0).unwrap()
    }

    /// The work directory, where the store's directory keeps it by default.
    fn work_dir(&self) -> PathBuf {
        self.db.with_extension("work")
    }
}

/// What every check is told at its go: the staged bundle, and limits taken from its shard. Also that it
/// started before the download was done.
fn assert_told_the_staged_bundle(record: &serde_json::Value) {
    let at_go = &record["at_go"];
    assert!(record["at_start"]["served"].as_u64() < at_go["served"].as_u64(), "started before: {record}");
    assert_eq!(at_go["shards"], serde_json::json!(["model.safetensors"]), "the bundle staged at the go: {record}");
    assert!(record["go"]["output"].as_str().unwrap().ends_with("aligned"), "{record}");
    // The largest tensor (512 KiB) counts in the cap, twice.
    let (jobs, cap) = (record["go"]["jobs"].as_u64().unwrap(), record["go"]["max_address_space"].as_u64());
    assert!(jobs >= 1 && cap >= Some((2 << 30) + jobs * ((256 << 20) + (1 << 20))), "and its limits: {record}");
}

/// The directory the check's home was made in.
fn home_made_in(record: &serde_json::Value) -> PathBuf {
    Path::new(record["at_start"]["home"].as_str().unwrap()).parent().unwrap().to_owned()
}

/// No check's home is left under `dir`.
fn assert_no_check_home_left(dir: &Path) {
    for entry in std::fs::read_dir(dir).unwrap().map(Result::unwrap) {
        let name = entry.file_name();
        assert!(!name.to_string_lossy().starts_with("hubalign-check-home"), "left: {}", entry.path().display());
        if entry.file_type().unwrap().is_dir() {
            assert_no_check_home_left(&entry.path());
        }
    }
}

#[test]
fn a_repacks_check_is_the_one_started_with_the_checks_at_start() {
    let slow = SlowWorld::start();
    let out = slow.run(&["repack", "big-org/moved-q4"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let record = slow.watched();
    // Started before any job's directory existed: its home is in the work directory.
    assert_eq!(home_made_in(&record), slow.work_dir(), "{record}");
    assert_told_the_staged_bundle(&record);
    assert_no_check_home_left(slow.dir.path());
    // Run again, the job is done: the check started ahead is taken by no job, and ends with its home.
    let again = slow.run(&["repack", "big-org/moved-q4"]);
    assert_eq!(again.status.code(), Some(0), "{}", String::from_utf8_lossy(&again.stderr));
    assert!(String::from_utf8_lossy(&again.stdout).contains("already published"), "{again:?}");
    assert_no_check_home_left(slow.dir.path());
}

#[test]
fn a_workers_check_starts_with_its_job() {
    let slow = SlowWorld::start();
    let out = slow.run(&["worker", "--once", "--min-downloads", "0"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let record = slow.watched();
    assert_eq!(home_made_in(&record), slow.work_dir().join("job-1"), "in the job's directory: {record}");
    assert_told_the_staged_bundle(&record);
    assert_no_check_home_left(slow.dir.path());
}
