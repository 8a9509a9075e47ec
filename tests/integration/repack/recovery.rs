//! Refusals and crashes: a corrupted download, a failing check, a worker killed at each step.

use std::time::{Duration, Instant};

use super::pipeline::{jobs, worker_cmd};
use crate::audit::world::{assert_ok, audit, audit_world, db};
use crate::support::{hubalign, python, stdout, text};

/// Flips the last byte of a file the simulator serves; returns the original bytes. (The storage serves a
/// directory's file from the disk, so corrupting it corrupts the download.)
fn corrupt(shard: &std::path::Path) -> Vec<u8> {
    let good = std::fs::read(shard).unwrap();
    let mut bad = good.clone();
    let last = bad.len() - 1;
    bad[last] ^= 0xFF;
    std::fs::write(shard, bad).unwrap();
    good
}

#[test]
fn a_corrupted_download_is_refused_and_nothing_is_published() {
    let world = audit_world(0, |_| {});
    let (_dir, db) = db();
    let sim = &world.hub.as_ref().unwrap().sim;
    corrupt(&sim.config.root.join("models/lmstudio/tiny-q8/model.safetensors"));
    let out = worker_cmd(&world, &db, &["repack", "lmstudio/tiny-q8"]);
    assert_eq!(out.status.code(), Some(4), "{}", stdout(&out));
    let jobs = jobs(&world, &db);
    let reason = jobs[0].2.clone().unwrap_or_default();
    assert!(reason.contains("does not match the Hub's hash"), "{reason}");
    assert!(!sim.repos().contains_key(&crate::support::mirror("lmstudio/tiny-q8")), "nothing published");
}

#[test]
fn a_failed_download_resumes_with_the_files_it_had_verified() {
    let world = audit_world(0, |_| {});
    let (_dir, db) = db();
    let sim = &world.hub.as_ref().unwrap().sim;
    let shard = sim.config.root.join("models/mlx-community/tiny-sharded/model-00002-of-00004.safetensors");
    let good = corrupt(&shard);
    let out = worker_cmd(&world, &db, &["repack", "mlx-community/tiny-sharded"]);
    assert_eq!(out.status.code(), Some(4), "{}", stdout(&out));
    let first = sim.counters.snapshot();
    let storage_per_shard = first.requests["storage"] / 4;
    assert!(storage_per_shard > 0, "all four shards fetched from the storage: {first:?}");

    std::fs::write(&shard, good).unwrap();
    sim.counters.reset();
    let out = worker_cmd(&world, &db, &["repack", "mlx-community/tiny-sharded"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let second = sim.counters.snapshot();
    assert_eq!(second.requests["storage"], storage_per_shard, "only the refused shard is fetched again: {second:?}");
    // One resolve for the refused shard; the other three read the mirror's manifest (free when the name is
    // chosen, then before creating and before committing).
    assert_eq!(second.requests.get("resolve"), Some(&4), "no other file is fetched again: {second:?}");
    let job = world
        .runtime
        .block_on(async { hubalign::store::Store::open(&db).await.unwrap().jobs().await.unwrap().remove(0) });
    assert_eq!(job.state, "published");
    let bundle = bundle_bytes(&sim.config.root.join("models/mlx-community/tiny-sharded"));
    let refetched = std::fs::metadata(&shard).unwrap().len() as i64;
    assert_eq!(job.bytes_downloaded, bundle + refetched, "the bundle once, then the refused shard again");
    // The re-laid shards went up ahead in the first attempt, while the others downloaded, so the second
    // sends less: the CAS holds their chunks already.
    assert!(first.xet_bytes_received > 0, "{first:?}");
    assert!(second.xet_bytes_received < first.xet_bytes_received, "sent again: {first:?} then {second:?}");
}

#[test]
fn a_worker_killed_at_each_step_finishes_once_with_one_mirror_and_one_commit() {
    let world = audit_world(0, |c| c.faults.latency = Duration::from_millis(150));
    let (_dir, db) = db();
    assert_ok(&audit(&world, &db, &[]));
    let sim = &world.hub.as_ref().unwrap().sim;
    let endpoint = world.endpoint();
    for step in ["downloading", "relaying", "verifying", "publishing"] {
        let mut child = lingering(&endpoint, &db, &["repack", "mlx-community/tiny-sharded", "--lease-secs", "1"]);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let now = jobs(&world, &db);
            if now.first().is_some_and(|j| j.1 == step) {
                break;
            }
            assert!(now.first().is_none_or(|j| j.1 != "published"), "finished before the kill at {step}");
            assert!(child.try_wait().unwrap().is_none(), "the worker stopped before {step}: {now:?}");
            assert!(Instant::now() < deadline, "never reached {step}: {now:?}");
            std::thread::sleep(Duration::from_millis(5));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        // The dead worker's lease (1 s, kept in whole seconds) runs out.
        std::thread::sleep(Duration::from_millis(2100));
    }
    let out = worker_cmd(&world, &db, &["repack", "mlx-community/tiny-sharded"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(jobs(&world, &db)[0].1, "published");
    let repos = sim.repos();
    let mirrors: Vec<&String> = repos.keys().filter(|k| k.ends_with("-aligned")).collect();
    assert_eq!(mirrors, [&crate::support::mirror("mlx-community/tiny-sharded")]);
    let mirror = &repos.get(&crate::support::mirror("mlx-community/tiny-sharded")).unwrap();
    let uploads = mirror.commits.values().filter(|c| c.files.contains_key("MEI_ALIGN_MANIFEST.json")).count();
    assert_eq!(uploads, 1, "one upload commit, whatever the kills");
    assert!(!mirror.meta.private);
}

/// Starts `repack REPO` with a work directory of the test's and waits until its job's row says `step`, then
/// kills the worker there and lets its lease run out.
/// `hubalign ARGS` as alice, publishing to `alice` and checking on the CPU, started in the background. Each
/// step's work is done before the worker lingers 400 ms, so a kill or a signal lands while a job is in hand,
/// after the step's record.
fn lingering(endpoint: &str, db: &std::path::Path, args: &[&str]) -> std::process::Child {
    hubalign()
        .args(args)
        .args(["--endpoint", endpoint, "--token", crate::sim::world::ALICE, "--db", db.to_str().unwrap()])
        .args(["--target-namespace", "alice", "--verify-device", "cpu"])
        .arg("--python")
        .arg(python())
        .env("HUBALIGN_DEBUG_STEP_PAUSE_MS", "400")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

fn kill_at(world: &crate::sim::world::World, db: &std::path::Path, work: &std::path::Path, step: &str) {
    let work = work.to_str().unwrap();
    let args = ["repack", "mlx-community/tiny-sharded", "--lease-secs", "1", "--work-dir", work];
    let mut child = lingering(&world.endpoint(), db, &args);
    let deadline = Instant::now() + Duration::from_secs(60);
    while jobs(world, db).first().is_none_or(|j| j.1 != step) {
        assert!(child.try_wait().unwrap().is_none(), "the worker stopped before {step}: {:?}", jobs(world, db));
        assert!(Instant::now() < deadline, "never reached {step}");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    std::thread::sleep(Duration::from_millis(2100));
}

/// Runs `repack mlx-community/tiny-sharded` to its end in `work`, and returns what the simulator served.
fn repack_in(
    world: &crate::sim::world::World,
    db: &std::path::Path,
    work: &std::path::Path,
) -> hubsim::counters::CounterSnapshot {
    let sim = &world.hub.as_ref().unwrap().sim;
    sim.counters.reset();
    let work = work.to_str().unwrap();
    let out = worker_cmd(world, db, &["repack", "mlx-community/tiny-sharded", "--work-dir", work]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(jobs(world, db)[0].1, "published");
    let repos = sim.repos();
    let mirror = repos.get(&crate::support::mirror("mlx-community/tiny-sharded")).unwrap();
    let uploads = mirror.commits.values().filter(|c| c.files.contains_key("MEI_ALIGN_MANIFEST.json")).count();
    assert_eq!(uploads, 1, "one upload commit");
    assert!(!mirror.meta.private);
    drop(repos);
    sim.counters.snapshot()
}

#[test]
fn a_worker_killed_after_a_step_takes_up_the_work_from_its_record_without_fetching_again() {
    for step in ["relaying", "verifying"] {
        let world = audit_world(0, |_| {});
        let (_dir, db) = db();
        let work = tempfile::tempdir().unwrap();
        kill_at(&world, &db, work.path(), step);
        let served = repack_in(&world, &db, work.path());
        // The tree is not listed and no file is fetched again: only the mirror's side is asked.
        assert_eq!(served.requests.get("storage"), None, "after {step}, nothing downloaded again: {served:?}");
        assert_eq!(served.requests.get("tree"), None, "after {step}, the tree is not listed again: {served:?}");
        let job = world
            .runtime
            .block_on(async { hubalign::store::Store::open(&db).await.unwrap().jobs().await.unwrap().remove(0) });
        let bundle =
            bundle_bytes(&world.hub.as_ref().unwrap().sim.config.root.join("models/mlx-community/tiny-sharded"));
        assert_eq!(job.bytes_downloaded, bundle, "after {step}, the bundle was downloaded once");
    }
}

#[test]
fn a_downloaded_file_changed_after_a_kill_is_checked_and_fetched_again() {
    let world = audit_world(0, |_| {});
    let (_dir, db) = db();
    let work = tempfile::tempdir().unwrap();
    kill_at(&world, &db, work.path(), "relaying");
    // The same length, other bytes: only a file the record does not vouch for any more.
    let config = std::fs::read_dir(work.path())
        .unwrap()
        .map(|e| e.unwrap().path().join("source/config.json"))
        .find(|p| p.exists())
        .expect("the job's download is in the work directory");
    let mut bytes = std::fs::read(&config).unwrap();
    bytes[0] ^= 0x01;
    std::fs::write(&config, &bytes).unwrap();
    let changed = bytes.len() as i64;
    let served = repack_in(&world, &db, work.path());
    assert_eq!(served.requests.get("tree"), Some(&1), "the download starts again: {served:?}");
    assert_eq!(served.requests.get("storage"), None, "no shard fetched again (each matched its hash): {served:?}");
    let job = world
        .runtime
        .block_on(async { hubalign::store::Store::open(&db).await.unwrap().jobs().await.unwrap().remove(0) });
    let bundle = bundle_bytes(&world.hub.as_ref().unwrap().sim.config.root.join("models/mlx-community/tiny-sharded"));
    assert_eq!(job.bytes_downloaded, bundle + changed, "the bundle once, then the changed file again");
    let left: Vec<_> = std::fs::read_dir(work.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().starts_with("job-"))
        .collect();
    assert!(left.is_empty(), "the job's files are gone once it is published: {left:?}");
}

/// Total size of the files the simulator serves for a repo.
fn bundle_bytes(dir: &std::path::Path) -> i64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name() != ".hubsim.json")
        .map(|e| e.metadata().unwrap().len() as i64)
        .sum()
}

#[test]
fn a_download_cut_again_and_again_resumes_by_range_and_fetches_each_byte_once() {
    // Every storage body is cut after 20,000 bytes: the 125,675-byte shard arrives only by resuming.
    let world = audit_world(0, |c| c.faults.storage_cut = 20_000);
    let (_dir, db) = db();
    let sim = &world.hub.as_ref().unwrap().sim;
    let out = worker_cmd(&world, &db, &["repack", "lmstudio/tiny-q8"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let counters = sim.counters.snapshot();
    assert!(counters.requests["storage"] >= 7, "the shard took seven requests at least: {counters:?}");
    assert!(counters.range_requests >= 6, "each resumed from where the last stopped: {counters:?}");
    let job = world
        .runtime
        .block_on(async { hubalign::store::Store::open(&db).await.unwrap().jobs().await.unwrap().remove(0) });
    assert_eq!(job.state, "published");
    let bundle = bundle_bytes(&sim.config.root.join("models/lmstudio/tiny-q8"));
    assert_eq!(job.bytes_downloaded, bundle, "no byte fetched twice");
    assert!(sim.repos().contains_key(&crate::support::mirror("lmstudio/tiny-q8")));
}

#[test]
fn a_server_that_cuts_every_answer_short_gets_a_bounded_number_of_requests() {
    // Each answer brings 1,000 bytes: progress every time, so no request counts as a failed attempt, but the
    // 125,675-byte shard would take 126 of them. The bound (8 attempts + one per MiB of the file) stops it.
    let world = audit_world(0, |c| c.faults.storage_cut = 1_000);
    let (_dir, db) = db();
    let sim = &world.hub.as_ref().unwrap().sim;
    let out = worker_cmd(&world, &db, &["repack", "lmstudio/tiny-q8"]);
    assert_eq!(out.status.code(), Some(4), "{}", stdout(&out));
    let reason = jobs(&world, &db)[0].2.clone().unwrap_or_default();
    assert!(reason.contains("model.safetensors"), "the reason names the file: {reason}");
    let storage = sim.counters.snapshot().requests["storage"];
    assert!((8..=9).contains(&storage), "8 requests for the shard (and at most one for a small file): {storage}");
    assert!(!sim.repos().contains_key(&crate::support::mirror("lmstudio/tiny-q8")), "nothing published");
}

#[test]
fn a_range_that_returns_other_bytes_is_refused_and_nothing_is_published() {
    // Cut every body, and answer each resumed range with the bytes from one before the asked start.
    let world = audit_world(0, |c| {
        c.faults.storage_cut = 40_000;
        c.faults.range_skew = 1;
    });
    let (_dir, db) = db();
    let sim = &world.hub.as_ref().unwrap().sim;
    let out = worker_cmd(&world, &db, &["repack", "lmstudio/tiny-q8"]);
    assert_eq!(out.status.code(), Some(4), "{}", stdout(&out));
    let reason = jobs(&world, &db)[0].2.clone().unwrap_or_default();
    assert!(reason.contains("model.safetensors: content does not match the Hub's hash"), "{reason}");
    assert!(sim.counters.snapshot().range_requests > 0);
    assert!(!sim.repos().contains_key(&crate::support::mirror("lmstudio/tiny-q8")), "nothing published");
}

#[test]
fn a_commit_whose_answer_is_lost_is_sent_again_and_lands_once() {
    // The simulator makes the first commit, then cuts its answer short: the worker cannot tell whether it
    // landed. Its resend names the same parent, so the Hub refuses it (412), and the worker finds its
    // manifest on the mirror.
    let world = audit_world(0, |c| c.faults.lost_commit_answers = 1);
    let (_dir, db) = db();
    let sim = &world.hub.as_ref().unwrap().sim;
    let out = worker_cmd(&world, &db, &["repack", "lmstudio/tiny-q8"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(sim.counters.snapshot().requests["commit"], 2, "the commit was sent again once");
    let job = &jobs(&world, &db)[0];
    assert_eq!(job.1, "published", "{job:?}");
    let repos = sim.repos();
    let mirror = &repos.get(&crate::support::mirror("lmstudio/tiny-q8")).unwrap();
    let uploads = mirror.commits.values().filter(|c| c.files.contains_key("MEI_ALIGN_MANIFEST.json")).count();
    assert_eq!(uploads, 1, "one commit, though it was sent twice");
    assert!(!mirror.meta.private);
}

/// SIGTERM (what systemd and Kubernetes send to stop a service) stops `worker` as Ctrl-C does: the job in
/// hand finishes and is published, no other is claimed, and nothing is left half-done.
#[test]
fn sigterm_lets_the_worker_finish_the_job_in_hand_and_stop() {
    let world = audit_world(0, |_| {});
    let (_dir, db) = db();
    assert_ok(&audit(&world, &db, &[]));
    let work = tempfile::tempdir().unwrap();
    let mut child = lingering(&world.endpoint(), &db, &["worker", "--work-dir", work.path().to_str().unwrap()]);
    let running = ["downloading", "relaying", "verifying", "publishing"];
    let deadline = Instant::now() + Duration::from_secs(60);
    let in_hand = loop {
        assert!(child.try_wait().unwrap().is_none(), "the worker stopped by itself: {:?}", jobs(&world, &db));
        assert!(Instant::now() < deadline, "no job was taken up: {:?}", jobs(&world, &db));
        if let Some(job) = jobs(&world, &db).into_iter().find(|j| j.1 == "relaying") {
            break job.0;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let pid = child.id().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the worker did not stop after SIGTERM: {:?}", jobs(&world, &db));
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0), "stopped cleanly, not killed by the signal");
    let after = jobs(&world, &db);
    let job = after.iter().find(|j| j.0 == in_hand).unwrap();
    assert_eq!(job.1, "published", "the job in hand finished: {after:?}");
    assert!(after.iter().all(|j| !running.contains(&j.1.as_str())), "nothing left half-done: {after:?}");
}

/// `hubalign ARGS…` lingering at each step, told to stop once a job is at `step`, with no grace left: it
/// stops at once, and the job in hand is released as it stands. A next `repack` takes it up without waiting
/// for a lease and publishes one mirror, public only once checked.
fn stopped_past_the_grace_period(args: &[&str], audited: bool, step: &str) {
    stopped_at(args, audited, step, ("0", 1));
}

/// [`stopped_past_the_grace_period`] with `grace` seconds of grace and `signals` SIGTERMs sent.
fn stopped_at(args: &[&str], audited: bool, step: &str, (grace, signals): (&str, usize)) {
    // Each request to the Hub takes 150 ms, so that a step outlasts the signal sent as it begins.
    let world = audit_world(0, |c| c.faults.latency = Duration::from_millis(150));
    let (_dir, db) = db();
    if audited {
        assert_ok(&audit(&world, &db, &[]));
    }
    let sim = &world.hub.as_ref().unwrap().sim;
    let work = tempfile::tempdir().unwrap();
    let mut args = args.to_vec();
    args.extend(["--stop-grace-secs", grace, "--work-dir", work.path().to_str().unwrap()]);
    let mut child = lingering(&world.endpoint(), &db, &args);
    let deadline = Instant::now() + Duration::from_secs(90);
    let source = loop {
        assert!(child.try_wait().unwrap().is_none(), "{args:?} stopped by itself: {:?}", jobs(&world, &db));
        assert!(Instant::now() < deadline, "{args:?}: no job reached {step}: {:?}", jobs(&world, &db));
        if let Some(job) = jobs(&world, &db).into_iter().find(|j| j.1 == step) {
            break job.0;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let pid = child.id().to_string();
    for _ in 0..signals {
        assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        std::thread::sleep(Duration::from_millis(100));
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "{args:?} did not stop at {step}: {:?}", jobs(&world, &db));
        std::thread::sleep(Duration::from_millis(20));
    };
    let expected = if args[0] == "repack" { 130 } else { 0 };
    assert_eq!(status.code(), Some(expected), "{args:?} at {step}: stopped by itself, not killed by the signal");

    let store = || world.runtime.block_on(hubalign::store::Store::open(&db)).unwrap();
    let all = world.runtime.block_on(store().jobs()).unwrap();
    let job = all.iter().find(|j| j.repo_id == source).unwrap();
    let running = ["downloading", "relaying", "verifying", "publishing"];
    assert!(running.contains(&job.state.as_str()), "{args:?} at {step}: kept where it was: {job:?}");
    assert_eq!((job.lease_owner.as_deref(), job.attempts), (None, 0), "{args:?} at {step}: released, refunded");
    let name = crate::support::mirror(&source);
    let public = sim.repos().get(&name).is_some_and(|m| !m.meta.private);
    assert!(!public, "{args:?} at {step}: nothing public before the job ends");

    // The next run takes it up at once: no lease to wait out.
    let out = crate::repack::pipeline::worker_cmd(
        &world,
        &db,
        &["repack", &source, "--work-dir", work.path().to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let repos = sim.repos();
    let mirror = repos.get(&name).unwrap();
    assert!(!mirror.meta.private, "{args:?} at {step}");
    let uploads = mirror.commits.values().filter(|c| c.files.contains_key("MEI_ALIGN_MANIFEST.json")).count();
    assert_eq!(uploads, 1, "{args:?} at {step}: one upload commit");
}

#[test]
fn repack_stopped_past_its_grace_period_releases_the_job_mid_download_check_and_publish() {
    for step in ["downloading", "verifying", "publishing"] {
        stopped_past_the_grace_period(&["repack", "mlx-community/tiny-sharded"], true, step);
    }
    // Run by hand, a second signal releases the job at once, whatever grace is left.
    stopped_at(&["repack", "mlx-community/tiny-sharded"], true, "downloading", ("600", 2));
}

#[test]
fn worker_stopped_past_its_grace_period_releases_the_job_mid_download_check_and_publish() {
    for step in ["downloading", "verifying", "publishing"] {
        stopped_past_the_grace_period(&["worker"], true, step);
    }
}

#[test]
fn serve_stopped_past_its_grace_period_releases_the_job_mid_download_check_and_publish() {
    for step in ["downloading", "verifying", "publishing"] {
        stopped_past_the_grace_period(&["serve", "--listen", "127.0.0.1:0", "--workers", "1"], false, step);
    }
}
