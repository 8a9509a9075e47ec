//! The repack worker against hostile repos: lying trees, sources that are not public or stop being public,
//! and two publishers whose repos share a name.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{Value, json};

use super::proxy::{self, Reply, on};
use super::{files_named, hostile_world};
use crate::audit::world::assert_ok;
use crate::sim::world::{ALICE, World};
use crate::support::{hubalign, python, stdout, text};

/// `hubalign ARGS` as alice, publishing to `alice`, checking on the CPU, with its work directory in `work`.
pub(super) fn worker(endpoint: &str, db: &Path, work: &Path, args: &[&str]) -> Output {
    worker_with(endpoint, db, work, args, python())
}

/// [`worker`], its MLX check run by `python`.
pub(super) fn worker_with(endpoint: &str, db: &Path, work: &Path, args: &[&str], python: &Path) -> Output {
    worker_command(endpoint, db, work, args, python).output().unwrap()
}

/// The command [`worker_with`] runs, for a test that signals it.
pub(super) fn worker_command(endpoint: &str, db: &Path, work: &Path, args: &[&str], python: &Path) -> Command {
    let mut command = hubalign();
    command
        .args(args)
        .args(["--endpoint", endpoint, "--token", ALICE, "--db", db.to_str().unwrap()])
        .args(["--target-namespace", "alice", "--verify-device", "cpu"])
        .arg("--work-dir")
        .arg(work)
        .arg("--python")
        .arg(python);
    command
}

pub(super) fn audit(endpoint: &str, db: &Path) {
    let out = hubalign()
        .args(["audit", "--endpoint", endpoint, "--db", db.to_str().unwrap()])
        .env("HF_TOKEN", ALICE)
        .output()
        .unwrap();
    assert_ok(&out);
}

/// Audits the world into `dir/{name}.db`, runs `worker --once ARGS` against it and returns the store.
fn audit_and_work(world: &World, dir: &Path, name: &str, args: &[&str]) -> std::path::PathBuf {
    let (db, work) = (dir.join(format!("{name}.db")), dir.join(format!("{name}-work")));
    audit(&world.endpoint(), &db);
    let out = worker(&world.endpoint(), &db, &work, &[&["worker", "--once"], args].concat());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    db
}

pub(super) fn jobs(db: &Path) -> Vec<hubalign::job::Job> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async { hubalign::store::Store::open(db).await.unwrap().jobs().await.unwrap() })
}

pub(super) fn job<'a>(jobs: &'a [hubalign::job::Job], repo: &str) -> &'a hubalign::job::Job {
    jobs.iter().find(|j| j.repo_id == repo).unwrap_or_else(|| panic!("no job for {repo}: {jobs:?}"))
}

pub(super) fn mirrors(world: &World) -> Vec<String> {
    let sim = &world.hub.as_ref().unwrap().sim;
    sim.repos().keys().filter(|k| k.ends_with("-aligned") || k.contains("-aligned-")).cloned().collect()
}

/// The mirror's manifest, as anyone downloads it.
pub(super) fn manifest(world: &World, mirror: &str) -> Value {
    let url = format!("{}/{mirror}/resolve/main/MEI_ALIGN_MANIFEST.json", world.endpoint());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let text = rt.block_on(async { reqwest::get(&url).await.unwrap().text().await.unwrap() });
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{mirror}: {e}: {text}"))
}

/// A tree listing with files whose paths would land outside the work directory.
fn traversal(tree: &mut Value) {
    let abs = format!("/tmp/hubalign-hostile-{}/abs.txt", std::process::id());
    for path in ["../../../../../escape-1.txt", "../escape-2.txt", "sub/../../../escape-3.txt", abs.as_str()] {
        tree.as_array_mut().unwrap().push(json!({"type": "file", "oid": "a".repeat(40), "size": 5, "path": path}));
    }
}

/// Repacks tiny-q4 through a proxy whose tree listings add traversal paths from the `from`-th on. Returns
/// the world, the directory holding the store and the work directory, the store, the tree requests made and
/// the run's output.
fn repack_through_lying_trees(from: u64) -> (World, tempfile::TempDir, std::path::PathBuf, usize, Output) {
    let world = hostile_world();
    let dir = tempfile::tempdir().unwrap();
    let (db, work) = (dir.path().join("a.db"), dir.path().join("a/b/c/work"));
    // Deep, so that a path climbing out of it would still land in the test's directory.
    std::fs::create_dir_all(work.parent().unwrap()).unwrap();
    let tree = "/api/models/mlx-community/tiny-q4/tree/";
    let proxy = proxy::start(&world, vec![on(tree, from, || Reply::Edit(vec![], Some(Box::new(traversal))))]);
    let out = worker(&proxy.base_url, &db, &work, &["repack", "mlx-community/tiny-q4"]);
    assert!(files_named(dir.path(), "escape").is_empty(), "a file was written outside the work directory");
    assert!(!Path::new(&format!("/tmp/hubalign-hostile-{}", std::process::id())).exists());
    let trees = proxy.count(tree);
    (world, dir, db, trees, out)
}

#[test]
fn a_tree_listing_that_lies_later_cannot_write_outside_the_work_directory() {
    // Honest on the first tree request, traversal paths on any later one (where hf-hub's snapshot download
    // listed the tree a second time and wrote whatever that listing said).
    let (world, _dir, _db, trees, out) = repack_through_lying_trees(1);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(trees, 1, "the files fetched are exactly those of one listing");
    let files = &world
        .hub
        .as_ref()
        .unwrap()
        .sim
        .repos()
        .get(&crate::support::mirror("mlx-community/tiny-q4"))
        .unwrap()
        .head()
        .unwrap()
        .files
        .clone();
    assert!(!files.keys().any(|f| f.contains("escape")), "{:?}", files.keys());
}

#[test]
fn a_tree_listing_with_traversal_paths_fails_the_job_for_good_and_publishes_nothing() {
    let (world, _dir, db, _, out) = repack_through_lying_trees(0);
    assert_eq!(out.status.code(), Some(4), "{}", stdout(&out));
    let jobs = jobs(&db);
    let j = job(&jobs, "mlx-community/tiny-q4");
    assert_eq!(j.state, "failed", "a refusal is permanent, not retried: {j:?}");
    assert_eq!(j.attempts, 1);
    let reason = j.reason.as_deref().unwrap_or("");
    assert!(reason.contains("refused") && reason.contains("file path"), "{j:?}");
    assert!(mirrors(&world).is_empty(), "nothing published");
}

#[test]
fn private_gated_and_disabled_sources_get_no_mirror() {
    let world = hostile_world();
    let dir = tempfile::tempdir().unwrap();
    let jobs = jobs(&audit_and_work(&world, dir.path(), "a", &[]));
    let reason = |repo: &str| job(&jobs, repo).reason.clone().unwrap_or_default();
    assert_eq!(job(&jobs, "gatedco/gated-q4").state, "skipped");
    assert_eq!(reason("gatedco/gated-q4"), "gated: the licence gate cannot be carried over");
    for private in ["alice-org/private-q4", "alice/own-private-q4"] {
        assert_eq!(job(&jobs, private).state, "skipped");
        assert!(reason(private).starts_with("private:"), "{}", reason(private));
    }
    assert!(!jobs.iter().any(|j| j.repo_id == "old-org/disabled-q4" && j.state != "skipped"), "{jobs:?}");
    let published = mirrors(&world);
    for source in ["private-q4", "own-private-q4", "gated-q4", "disabled-q4"] {
        assert!(!published.iter().any(|m| m.contains(source)), "{source} mirrored: {published:?}");
    }
    assert!(published.contains(&crate::support::mirror("mlx-community/tiny-q4")), "{published:?}");

    // An operator may allow private mirrors of the target namespace's own private repos: private, and only
    // those.
    audit_and_work(&world, dir.path(), "b", &["--private-mirrors"]);
    let sim = &world.hub.as_ref().unwrap().sim;
    let own = sim.repos().get(&crate::support::mirror("alice/own-private-q4")).map(|r| r.meta.private);
    assert_eq!(own, Some(true), "a private mirror of alice's own private repo, and only that");
    let private_mirrors: Vec<String> = mirrors(&world).into_iter().filter(|m| m.contains("private")).collect();
    assert_eq!(private_mirrors, [crate::support::mirror("alice/own-private-q4")]);
}

#[test]
fn a_source_that_turns_private_after_the_audit_is_not_published() {
    let world = hostile_world();
    let dir = tempfile::tempdir().unwrap();
    let (db, work) = (dir.path().join("a.db"), dir.path().join("work"));
    audit(&world.endpoint(), &db);
    world.hub.as_ref().unwrap().sim.repos_mut().get_mut("pubco/public-4bit").unwrap().meta.private = true;
    let out = worker(&world.endpoint(), &db, &work, &["worker", "--once"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let jobs = jobs(&db);
    let j = job(&jobs, "pubco/public-4bit");
    assert_eq!(j.state, "skipped", "{j:?}");
    assert!(j.reason.as_deref().unwrap_or("").starts_with("gone:"), "private to another owner reads as gone: {j:?}");
    assert!(!mirrors(&world).iter().any(|m| m.contains("pubco")), "{:?}", mirrors(&world));
}

#[test]
fn two_sources_with_one_name_get_two_mirrors_each_naming_its_source() {
    let world = hostile_world();
    let dir = tempfile::tempdir().unwrap();
    let jobs = jobs(&audit_and_work(&world, dir.path(), "a", &[]));
    let (a, b) = (job(&jobs, "pubco/public-4bit"), job(&jobs, "otherco/public-4bit"));
    assert_eq!((a.state.as_str(), b.state.as_str()), ("published", "published"));
    let (ta, tb) = (a.target_repo.clone().unwrap(), b.target_repo.clone().unwrap());
    assert_ne!(ta, tb, "one mirror each");
    assert_eq!(manifest(&world, &ta)["source_repo"], "pubco/public-4bit");
    assert_eq!(manifest(&world, &tb)["source_repo"], "otherco/public-4bit");

    // A second deployment (a fresh store) finds the names taken on the Hub by their manifests, commits
    // nothing to the other source's mirror, and finds its own.
    let (db2, work2) = (dir.path().join("b.db"), dir.path().join("work2"));
    audit(&world.endpoint(), &db2);
    let sim = &world.hub.as_ref().unwrap().sim;
    let commits = |m: &str| sim.repos().get(m).unwrap().commits.len();
    let before = (commits(&ta), commits(&tb));
    let out = worker(&world.endpoint(), &db2, &work2, &["repack", "pubco/public-4bit"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let again = jobs_of(&db2, "pubco/public-4bit");
    assert_eq!(again.target_repo.as_deref(), Some(ta.as_str()), "the same mirror as before: {again:?}");
    assert_eq!((commits(&ta), commits(&tb)), before, "already there: nothing committed to either");
    assert_eq!(manifest(&world, &tb)["source_repo"], "otherco/public-4bit");
}

fn jobs_of(db: &Path, repo: &str) -> hubalign::job::Job {
    job(&jobs(db), repo).clone()
}

#[test]
fn a_repo_whose_manifest_names_another_source_is_never_committed_to() {
    let world = hostile_world();
    let dir = tempfile::tempdir().unwrap();
    let (db, work) = (dir.path().join("a.db"), dir.path().join("work"));
    // A mirror of another source already sits at this source's name (made by hand: no other source's name
    // can be this one).
    let squatter = &crate::support::mirror("mlx-community/tiny-q4");
    let upload = std::process::Command::new(python())
        .args([
            "-c",
            "import sys, json; from huggingface_hub import HfApi; api = HfApi(); \
                      api.create_repo(sys.argv[1]); \
                      api.upload_file(path_or_fileobj=json.dumps({'source_repo': 'someone/else'}).encode(), \
                                      path_in_repo='MEI_ALIGN_MANIFEST.json', repo_id=sys.argv[1])",
            squatter,
        ])
        .env("HF_ENDPOINT", world.endpoint())
        .env("HF_TOKEN", ALICE)
        .env("HF_HUB_DISABLE_XET", "1")
        .output()
        .unwrap();
    assert!(upload.status.success(), "{}", String::from_utf8_lossy(&upload.stderr));
    let sim = &world.hub.as_ref().unwrap().sim;
    let before = sim.repos().get(squatter).unwrap().commits.len();
    let out = worker(&world.endpoint(), &db, &work, &["repack", "mlx-community/tiny-q4"]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out));
    assert_eq!(
        sim.repos().get(squatter).unwrap().commits.len(),
        before,
        "nothing committed to another source's mirror"
    );
    let j = jobs_of(&db, "mlx-community/tiny-q4");
    assert_eq!(j.state, hubalign::job::JobState::Failed, "{j:?}");
    assert!(j.reason.as_deref().unwrap_or("").contains("holds the mirror of \"someone/else\""), "{j:?}");
    assert_eq!(manifest(&world, squatter)["source_repo"], "someone/else", "kept as it was");
    assert_eq!(mirrors(&world), std::slice::from_ref(squatter), "and no mirror under another name");
}

/// A token the Hub stops honouring midway (revoked, expired): the job is the operator's to mend, not the
/// repo's fault. It goes back to the queue without spending its attempt, and `worker --once` stops there
/// (exit 5) instead of failing every other job the same way.
#[test]
fn a_refused_token_holds_the_job_for_the_operator_and_stops_the_worker() {
    use hubalign::job::FailureKind;
    let world = hostile_world();
    let dir = tempfile::tempdir().unwrap();
    let (db, work) = (dir.path().join("a.db"), dir.path().join("work"));
    audit(&world.endpoint(), &db);
    let refused = br#"{"error":"Invalid credentials in Authorization header"}"#.to_vec();
    let proxy = proxy::start(&world, vec![on("/api/models/", 0, move || Reply::Fixed(401, vec![], refused.clone()))]);
    let out = worker(&proxy.base_url, &db, &work, &["worker", "--once"]);
    assert_eq!(out.status.code(), Some(5), "{}", text(&out));
    assert!(stdout(&out).contains("1 need the operator"), "{}", stdout(&out));
    let jobs = jobs(&db);
    let held: Vec<_> = jobs.iter().filter(|j| j.failure_kind == Some(FailureKind::NeedsOperator)).collect();
    assert_eq!(held.len(), 1, "the worker stopped at the first: {jobs:?}");
    let j = held[0];
    assert_eq!((j.state, j.attempts), (hubalign::job::JobState::Queued, 0), "{j:?}");
    assert!(j.reason.as_deref().unwrap_or("").contains("HTTP 401"), "{j:?}");
    assert!(j.not_before > 0, "held back: {j:?}");
    let claimed: Vec<_> = jobs.iter().filter(|j| j.id != held[0].id && j.attempts > 0).collect();
    assert!(claimed.is_empty(), "no other job was tried: {claimed:?}");
    assert!(mirrors(&world).is_empty());
}

/// A token that may not write to the target namespace although the Hub said it may when the worker started
/// (a membership revoked since; the checks at start refuse it otherwise): hf-hub's 403 on creating the
/// mirror holds the job for the operator as well.
#[test]
fn a_namespace_the_token_may_not_write_holds_the_job_for_the_operator() {
    use hubalign::job::FailureKind;
    let world = hostile_world();
    let dir = tempfile::tempdir().unwrap();
    let (db, work) = (dir.path().join("a.db"), dir.path().join("work"));
    audit(&world.endpoint(), &db);
    let said = br#"{"type":"user","name":"alice","orgs":[{"name":"pubco","type":"org","roleInOrg":"write"}],
        "auth":{"type":"access_token","accessToken":{"displayName":"t","role":"write"}}}"#
        .to_vec();
    let json = || vec![("content-type", "application/json".to_owned())];
    let proxy = proxy::start(&world, vec![on("/api/whoami-v2", 0, move || Reply::Fixed(200, json(), said.clone()))]);
    let out = hubalign()
        .args(["repack", "mlx-community/tiny-q4", "--endpoint", &proxy.base_url, "--token", ALICE])
        .args(["--db", db.to_str().unwrap(), "--target-namespace", "pubco", "--verify-device", "cpu"])
        .arg("--work-dir")
        .arg(&work)
        .arg("--python")
        .arg(python())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5), "{}", text(&out));
    assert!(stdout(&out).contains("needs the operator"), "{}", stdout(&out));
    let j = job(&jobs(&db), "mlx-community/tiny-q4").clone();
    assert_eq!((j.failure_kind, j.attempts), (Some(FailureKind::NeedsOperator), 0), "{j:?}");
    let name = hubalign::repack::publish::mirror_name("mlx-community/tiny-q4", "pubco");
    assert!(j.reason.as_deref().unwrap_or("").contains(&name), "{j:?}");
    assert!(mirrors(&world).is_empty());
}

/// A weight map that names a path outside the bundle, a shard in a subfolder, a shard that does not exist, or
/// a tensor no shard holds: the mirror would send loaders elsewhere, or fail them. The job fails for good,
/// saying which entry, and nothing is published.
#[test]
fn an_index_that_names_what_the_bundle_does_not_hold_is_never_published() {
    let root = tempfile::tempdir().unwrap();
    let mlx = r#"{"library_name":"mlx","license":"mit","downloads":1000}"#;
    let cases = [
        ("evil/traversal", "model.embed_tokens.weight", "../../../../etc/passwd"),
        ("evil/subfolder", "model.embed_tokens.weight", "sub/model-00001-of-00004.safetensors"),
        ("evil/missing", "model.embed_tokens.weight", "model-00009-of-00009.safetensors"),
        ("evil/nowhere", "model.no_such_tensor", "model-00001-of-00004.safetensors"),
    ];
    for (repo, tensor, shard) in cases {
        crate::sim::world::bundle(root.path(), repo, "mlx_lm/sharded", mlx);
        let index = root.path().join("models").join(repo).join("model.safetensors.index.json");
        let mut map: Value = serde_json::from_slice(&std::fs::read(&index).unwrap()).unwrap();
        map["weight_map"][tensor] = json!(shard);
        std::fs::write(&index, serde_json::to_vec_pretty(&map).unwrap()).unwrap();
    }
    let world = crate::sim::world::start_on(root, |_| {});
    let dir = tempfile::tempdir().unwrap();
    let (db, work) = (dir.path().join("index.db"), dir.path().join("work"));
    audit(&world.endpoint(), &db);
    let out = worker(&world.endpoint(), &db, &work, &["worker", "--once"]);
    assert_eq!(out.status.code(), Some(4), "the jobs failed: {}", String::from_utf8_lossy(&out.stderr));
    let jobs = jobs(&db);
    for (repo, tensor, _) in cases {
        let job = job(&jobs, repo);
        assert_eq!(job.state.as_str(), "failed", "{job:?}");
        let reason = job.reason.as_deref().unwrap_or("");
        assert!(reason.contains("index check") && reason.contains(tensor), "{repo}: {reason}");
    }
    let log = String::from_utf8_lossy(&out.stderr);
    assert_eq!(mirrors(&world), Vec::<String>::new(), "nothing published: {log}");
}
