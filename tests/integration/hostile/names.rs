//! Mirror names no one can squat: each follows from its source's id alone, is checked against the manifest
//! of the very commit it builds on, and a failed attempt's empty repo is reused or removed.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hubalign::repack::publish::mirror_name;
use hubsim::Sim;
use hubsim::model::{Commit, FileEntry, Storage};

use super::hostile_world;
use super::proxy::{self, Req, Rule};
use super::publish::{audit, job, jobs, manifest, mirrors, worker, worker_command, worker_with};
use crate::sim::world::{ALICE, World, bundle, start_on};
use crate::support::{mirror, python, stdout, text};

/// Runs Python's `huggingface_hub` as alice against the world.
fn as_alice(world: &World, script: &str, args: &[&str]) {
    let out = std::process::Command::new(python())
        .args(["-c", script])
        .args(args)
        .env("HF_ENDPOINT", world.endpoint())
        .env("HF_TOKEN", ALICE)
        .env("HF_HUB_DISABLE_XET", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

fn store_mirror_of(db: &Path, source: &str) -> Option<String> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let store = hubalign::store::Store::open(db).await.unwrap();
        store.mirror_of(source).await.unwrap().map(|row| row.target_repo)
    })
}

#[test]
fn a_squatter_seen_first_and_a_name_alike_but_for_case_take_no_other_sources_mirror() {
    let root = tempfile::tempdir().unwrap();
    let sidecar = |downloads: u64| format!(r#"{{"library_name":"mlx","license":"mit","downloads":{downloads}}}"#);
    bundle(root.path(), "squatter/Llama-tiny-4bit", "mlx_lm/q4", &sidecar(0));
    bundle(root.path(), "mlx-community/Llama-tiny-4bit", "mlx_lm/q4", &sidecar(50_000));
    bundle(root.path(), "alice-org/Tiny-Model-4bit", "mlx_lm/q4", &sidecar(10));
    bundle(root.path(), "bob/tiny-model-4bit", "mlx_lm/q4", &sidecar(10));
    let world = start_on(root, |_| {});
    let dir = tempfile::tempdir().unwrap();
    let (db, work) = (dir.path().join("a.db"), dir.path().join("work"));
    audit(&world.endpoint(), &db);
    // The squatter's job runs first, as a squatter who pushed first would have it.
    for source in [
        "squatter/Llama-tiny-4bit",
        "mlx-community/Llama-tiny-4bit",
        "bob/tiny-model-4bit",
        "alice-org/Tiny-Model-4bit",
    ] {
        let out = worker(&world.endpoint(), &db, &work, &["repack", source]);
        assert_eq!(out.status.code(), Some(0), "{source}: {}", text(&out));
    }
    let jobs = jobs(&db);
    let mut names = Vec::new();
    for source in [
        "squatter/Llama-tiny-4bit",
        "mlx-community/Llama-tiny-4bit",
        "alice-org/Tiny-Model-4bit",
        "bob/tiny-model-4bit",
    ] {
        let j = job(&jobs, source);
        assert_eq!(j.state, hubalign::job::JobState::Published, "{j:?}");
        assert_eq!(j.target_repo.as_deref(), Some(mirror(source).as_str()), "{source}: named from its id alone");
        assert_eq!(manifest(&world, &mirror(source))["source_repo"], source);
        names.push(mirror(source).to_ascii_lowercase());
    }
    names.sort();
    names.dedup();
    assert_eq!(names.len(), 4, "four names, distinct without regard to case");
    assert_eq!(mirrors(&world).len(), 4, "one mirror each: {:?}", mirrors(&world));
    // A case-insensitive Hub: the other spelling of a source is the same repo, and the same mirror name.
    let sim = &world.hub.as_ref().unwrap().sim;
    assert_eq!(sim.repos().get("ALICE-ORG/tiny-model-4bit").unwrap().id, "alice-org/Tiny-Model-4bit");
    assert_eq!(mirror("ALICE-ORG/tiny-model-4bit"), mirror("alice-org/Tiny-Model-4bit"));
}

#[test]
fn an_empty_repo_a_failed_attempt_left_is_reused_by_its_own_source() {
    let world = hostile_world();
    let dir = tempfile::tempdir().unwrap();
    let (db, work) = (dir.path().join("a.db"), dir.path().join("work"));
    let name = mirror("mlx-community/tiny-q4");
    // What a worker that died after creating the mirror left: an empty private repo at the source's name.
    as_alice(
        &world,
        "import sys; from huggingface_hub import HfApi; HfApi().create_repo(sys.argv[1], private=True)",
        &[&name],
    );
    let out = worker(&world.endpoint(), &db, &work, &["repack", "mlx-community/tiny-q4"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let j = job(&jobs(&db), "mlx-community/tiny-q4").clone();
    assert_eq!(j.target_repo.as_deref(), Some(name.as_str()), "{j:?}");
    let sim = &world.hub.as_ref().unwrap().sim;
    let repo = sim.repos().get(&name).unwrap().clone();
    assert!(!repo.meta.private, "published");
    assert_eq!(repo.commits.len(), 2, "the empty repo's first commit, then the mirror's");
    assert_eq!(mirrors(&world), [name], "no second name");
}

#[test]
fn a_job_that_fails_after_creating_its_mirror_leaves_no_repo_and_no_name() {
    let world = hostile_world();
    let dir = tempfile::tempdir().unwrap();
    let (db, work) = (dir.path().join("a.db"), dir.path().join("work"));
    // An interpreter whose MLX check fails: the job fails for good after the download, once the mirror was
    // created for the uploads that go ahead of the check.
    let failing = crate::support::python_for_jobs(dir.path(), crate::support::CHECK_FAILS);
    let out = crate::support::hubalign()
        .args(["repack", "mlx-community/tiny-q4", "--endpoint", &world.endpoint(), "--token", ALICE])
        .args(["--db", db.to_str().unwrap(), "--target-namespace", "alice", "--verify-device", "cpu"])
        .arg("--work-dir")
        .arg(&work)
        .arg("--python")
        .arg(&failing)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4), "{}", text(&out));
    let j = job(&jobs(&db), "mlx-community/tiny-q4").clone();
    assert_eq!(j.state, hubalign::job::JobState::Failed, "{j:?}");
    let counts = world.counters().requests;
    assert!(counts.get("repo_create").copied().unwrap_or(0) >= 1, "the mirror was created: {counts:?}");
    assert_eq!(counts.get("repo_delete").copied(), Some(1), "and removed: {counts:?}");
    assert!(mirrors(&world).is_empty(), "{:?}", mirrors(&world));
    assert_eq!(store_mirror_of(&db, "mlx-community/tiny-q4"), None, "the name is released");
}

/// The hostile world behind a proxy that holds each repo delete 3 s, audited into `db`, with an MLX check
/// that fails every job.
struct SlowDeletes {
    world: World,
    proxy: proxy::Proxy,
    db: std::path::PathBuf,
    work: std::path::PathBuf,
    failing: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl SlowDeletes {
    fn audited() -> SlowDeletes {
        let world = hostile_world();
        let dir = tempfile::tempdir().unwrap();
        let (db, work) = (dir.path().join("a.db"), dir.path().join("work"));
        let failing = crate::support::python_for_jobs(dir.path(), crate::support::CHECK_FAILS);
        let late = || proxy::Reply::Late(std::time::Duration::from_secs(3));
        let proxy = proxy::start(&world, vec![proxy::on("/api/repos/delete", 0, late)]);
        audit(&proxy.base_url, &db);
        SlowDeletes { world, proxy, db, work, failing, _dir: dir }
    }
}

/// A Hub slow to delete a failed job's empty mirror, slower than the job's lease. The job's outcome is
/// recorded before the delete, and the worker lets the delete finish: each repo and its name still go.
#[test]
fn a_mirror_slow_to_delete_is_removed_all_the_same() {
    let SlowDeletes { world, proxy, db, work, failing, _dir } = SlowDeletes::audited();
    let out = worker_with(&proxy.base_url, &db, &work, &["worker", "--once"], &failing);
    let log = text(&out);
    assert_eq!(out.status.code(), Some(4), "{log}");
    let jobs = jobs(&db);
    let failed = jobs.iter().filter(|j| j.state == hubalign::job::JobState::Failed).count();
    assert!(failed >= 1, "{jobs:?}");
    assert_eq!(proxy.count("/api/repos/delete"), failed, "one empty mirror removed per failed job: {log}");
    assert!(mirrors(&world).is_empty(), "{:?}: {log}", mirrors(&world));
    for j in &jobs {
        assert_eq!(store_mirror_of(&db, &j.repo_id), None, "the name is released: {log}");
    }
}

/// A worker told to stop, with no grace, while it removes a failed job's empty mirror. The outcome was
/// recorded before the delete, so it stands: the stop cuts short only the cleanup, and the log says so.
#[test]
fn a_stop_during_the_cleanup_keeps_the_recorded_outcome() {
    let SlowDeletes { world: _world, proxy, db, work, failing, _dir } = SlowDeletes::audited();
    let args = ["worker", "--once", "--stop-grace-secs", "0"];
    let mut command = worker_command(&proxy.base_url, &db, &work, &args, &failing);
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while proxy.count("/api/repos/delete") == 0 {
        assert!(child.try_wait().unwrap().is_none(), "the worker ended before any cleanup");
        assert!(Instant::now() < deadline, "no empty mirror was removed: {:?}", jobs(&db));
        std::thread::sleep(Duration::from_millis(10));
    }
    let pid = child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let out = child.wait_with_output().unwrap();
    let log = text(&out);
    assert!(log.contains("the job's outcome is recorded; its cleanup was cut short"), "{log}");
    assert!(!log.contains("another worker held it"), "{log}");
    let failed: Vec<_> = jobs(&db).into_iter().filter(|j| j.state == hubalign::job::JobState::Failed).collect();
    assert_eq!(failed.len(), 1, "the outcome stands: {log}");
    assert_eq!(failed[0].lease_owner, None, "{log}");
}

/// Another writer's manifest.
const FOREIGN: &[u8] = br#"{"source_repo": "someone/else"}"#;

/// Commits a manifest naming `someone/else` onto `repo`'s main branch, as another writer would.
fn foreign_commit(sim: &Sim, repo: &str, dir: &Path) {
    let body = FOREIGN;
    let sha = hubalign::hashing::sha256_hex(body);
    let path = dir.join(&sha);
    std::fs::write(&path, body).unwrap();
    sim.add_blob(sha.clone(), path);
    let mut repos = sim.repos_mut();
    let repo = repos.get_mut(repo).unwrap();
    let head = repo.head().unwrap().clone();
    let mut files = head.files.clone();
    let entry = FileEntry::new(body.len() as u64, sha, Storage::Regular, Some(body));
    files.insert("MEI_ALIGN_MANIFEST.json".into(), entry);
    let commit = Commit::new(Some(head.sha), files, "taken".into(), "2026-12-02T00:00:00.000Z".into());
    repo.refs.insert("main".into(), commit.sha.clone());
    repo.commits.insert(commit.sha.clone(), commit);
}

#[test]
fn a_commit_lands_only_on_the_manifest_it_was_checked_against() {
    let world = hostile_world();
    let dir = tempfile::tempdir().unwrap();
    let (db, work) = (dir.path().join("a.db"), dir.path().join("work"));
    let name = mirror("mlx-community/tiny-q4");
    // Another writer commits its own manifest just as the worker reads the mirror's head for its commit. A
    // worker that checked the holder first and read the head after would build on that commit and replace
    // the other writer's manifest; this one checks the manifest of the very commit it builds on.
    let (sim, blobs, target) = (Arc::clone(&world.hub.as_ref().unwrap().sim), dir.path().to_owned(), name.clone());
    let once = AtomicBool::new(false);
    let race: Rule = Box::new(move |req: &Req| {
        if req.path == format!("/api/models/{target}") && !once.swap(true, Ordering::SeqCst) {
            foreign_commit(&sim, &target, &blobs);
        }
        None
    });
    let proxy = proxy::start(&world, vec![race]);
    let out = worker(&proxy.base_url, &db, &work, &["repack", "mlx-community/tiny-q4"]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out));
    let j = job(&jobs(&db), "mlx-community/tiny-q4").clone();
    assert!(j.reason.as_deref().unwrap_or("").contains("holds the mirror of \"someone/else\""), "{j:?}");
    let sim = &world.hub.as_ref().unwrap().sim;
    let repo = sim.repos().get(&name).unwrap().clone();
    let manifest_sha = &repo.head().unwrap().files["MEI_ALIGN_MANIFEST.json"].sha256;
    assert_eq!(*manifest_sha, hubalign::hashing::sha256_hex(FOREIGN), "the other writer's manifest stands");
    assert_eq!(repo.commits.len(), 2, "the initial commit and the other writer's, none of the worker's");
}

#[test]
fn a_mirror_published_under_a_former_name_is_kept_there() {
    let world = hostile_world();
    let dir = tempfile::tempdir().unwrap();
    let (db, work) = (dir.path().join("a.db"), dir.path().join("work"));
    // Published before names followed from the source alone, and unknown to this (new) store.
    let former = "alice/tiny-q4-aligned";
    as_alice(
        &world,
        "import sys, json; from huggingface_hub import HfApi; api = HfApi(); api.create_repo(sys.argv[1]); \
         api.upload_file(path_or_fileobj=json.dumps({'source_repo': sys.argv[2]}).encode(), \
                         path_in_repo='MEI_ALIGN_MANIFEST.json', repo_id=sys.argv[1])",
        &[former, "mlx-community/tiny-q4"],
    );
    let out = worker(&world.endpoint(), &db, &work, &["repack", "mlx-community/tiny-q4"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let j = job(&jobs(&db), "mlx-community/tiny-q4").clone();
    assert_eq!(j.target_repo.as_deref(), Some(former), "{j:?}");
    assert_eq!(manifest(&world, former)["source_revision"].as_str().map(str::len), Some(40), "updated in place");
    assert_eq!(mirrors(&world), [former], "no second mirror under the new name");
    assert_ne!(mirror_name("mlx-community/tiny-q4", "alice"), former);
}

/// A repo id in another letter case names the same repo, as on the Hub, at every entry point it reaches
/// besides the webhook (`webhook::…other_spellings…`): `repack`, `report --repo`, the API's shards and jobs,
/// and the repo's page. One repo is one job and one mirror, whatever the spelling typed.
#[test]
fn a_repo_id_in_any_letter_case_reaches_the_same_repo_at_every_entry_point() {
    let world = hostile_world();
    let dir = tempfile::tempdir().unwrap();
    let (db, work) = (dir.path().join("a.db"), dir.path().join("work"));
    audit(&world.endpoint(), &db);
    let run = |args: &[&str]| worker(&world.endpoint(), &db, &work, args);
    let first = run(&["repack", "MLX-Community/Tiny-Q4"]);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first));
    assert!(stdout(&first).starts_with("mlx-community/tiny-q4@"), "the store's spelling: {}", stdout(&first));
    let again = run(&["repack", "mlx-community/TINY-q4"]);
    assert!(stdout(&again).contains("already published"), "{}", stdout(&again));
    let all = jobs(&db);
    assert_eq!(all.iter().filter(|j| j.repo_id.eq_ignore_ascii_case("mlx-community/tiny-q4")).count(), 1, "{all:?}");
    assert_eq!(mirrors(&world), [mirror("mlx-community/tiny-q4")]);

    let report = crate::support::hubalign()
        .args(["report", "--db", db.to_str().unwrap(), "--repo", "MLX-COMMUNITY/tiny-q4", "--format", "json"])
        .output()
        .unwrap();
    assert_eq!(report.status.code(), Some(0), "{}", String::from_utf8_lossy(&report.stderr));
    assert!(stdout(&report).contains("model.safetensors"), "{}", stdout(&report));

    let (_serve, base) = crate::serve::start_serve(&world.endpoint(), &db, 86_400, &["--workers", "0"], &[]);
    let shards = crate::serve::try_get(&format!("{base}/api/repos/Mlx-Community/TINY-Q4/shards")).unwrap();
    assert!(shards.contains("model.safetensors"), "{shards}");
    let listed = crate::serve::try_get(&format!("{base}/api/jobs?repo=MLX-community/Tiny-q4")).unwrap();
    assert!(listed.contains("\"repo_id\":\"mlx-community/tiny-q4\""), "{listed}");
    let (status, url, _) = crate::serve::fetch(&format!("{base}/repo/mlx-COMMUNITY/tiny-Q4"));
    assert_eq!(
        (status, url),
        (200, format!("{base}/repo/mlx-community/tiny-q4")),
        "redirected to the store's spelling"
    );
}
