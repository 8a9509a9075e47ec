//! A whole cycle, and what the published mirrors look like to huggingface_hub.

use std::path::Path;
use std::process::{Command, Output};

use crate::audit::world::{assert_ok, audit, audit_world, db};
use crate::sim::world::{ALICE, CAROL, World};
use crate::support::{fixture, hubalign, python, root, stdout, text};

/// Runs `hubalign ARGS --endpoint E --token ALICE --db DB --target-namespace alice --verify-device cpu`.
pub(super) fn worker_cmd(world: &World, db: &Path, args: &[&str]) -> Output {
    worker_command(world, db, args).output().unwrap()
}

/// The command [`worker_cmd`] runs, to be started by the caller.
pub(crate) fn worker_command(world: &World, db: &Path, args: &[&str]) -> Command {
    let endpoint = world.endpoint();
    let mut cmd = hubalign();
    cmd.args(args)
        .args(["--endpoint", endpoint.as_str(), "--token", ALICE, "--db", db.to_str().unwrap()])
        .args(["--target-namespace", "alice", "--verify-device", "cpu"])
        .arg("--python")
        .arg(python());
    cmd
}

/// Jobs as `(repo, state, reason)`.
pub(super) fn jobs(world: &World, db: &Path) -> Vec<(String, String, Option<String>)> {
    world.runtime.block_on(async {
        let store = hubalign::store::Store::open(db).await.unwrap();
        store.jobs().await.unwrap().into_iter().map(|j| (j.repo_id, j.state.to_string(), j.reason)).collect()
    })
}

#[cfg(feature = "system-tests")]
#[test]
fn audit_then_worker_publishes_mirrors_the_official_client_verifies() {
    let world = audit_world(0, |_| {});
    let (_dir, db) = db();
    assert_ok(&audit(&world, &db, &[]));
    let out = worker_cmd(&world, &db, &["worker", "--once"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));

    let jobs = jobs(&world, &db);
    let state = |repo: &str| jobs.iter().find(|j| j.0 == repo).map(|j| j.1.clone());
    for repo in ["mlx-community/tiny-q4", "mlx-community/tiny-sharded", "lmstudio/tiny-q8", "lmstudio/tiny-mixed"] {
        assert_eq!(state(repo).as_deref(), Some("published"), "{repo}: {jobs:?}");
    }
    assert_eq!(state("mlx-community/tiny-bf16"), None, "nothing duplicated, nothing to repack");
    // Each mirror's check loaded it with mlx_lm.load at its defaults, and its card says so.
    let stored =
        world.runtime.block_on(async { hubalign::store::Store::open(&db).await.unwrap().jobs().await.unwrap() });
    for job in stored.iter().filter(|j| j.state == hubalign::job::JobState::Published) {
        let record = job.verification.as_ref().map(|v| v.0.clone()).unwrap_or_default();
        let loaded = record.mlx_lm.unwrap_or_default();
        assert!(loaded.loaded && !loaded.lazy, "{}: {loaded:?}", job.repo_id);
        let url = format!("{}/{}/resolve/main/README.md", world.endpoint(), crate::support::mirror(&job.repo_id));
        let asked = reqwest::Client::new().get(&url).bearer_auth(CAROL);
        let card = world.runtime.block_on(async { asked.send().await.unwrap().text().await.unwrap() });
        assert!(
            card.contains(r"`mlx_lm.load` (mlx-lm 0\.32\.2) loaded the model and its tokenizer at its defaults"),
            "{card}"
        );
    }
    assert_eq!(state("bad-org/truncated-q4"), None, "an invalid shard duplicates nothing");

    // Download each mirror with the official client (as someone else) and judge it against the source.
    let sim = &world.hub.as_ref().unwrap().sim;
    for (source, fixture_dir) in [
        ("mlx-community/tiny-q4", "mlx_lm/q4"),
        ("mlx-community/tiny-sharded", "mlx_lm/sharded"),
        ("lmstudio/tiny-mixed", "mlx_lm/mixed"),
    ] {
        let mirror = &crate::support::mirror(source);
        assert!(!sim.repos().get(mirror).unwrap().meta.private, "{mirror} was made public");
        let home = tempfile::tempdir().unwrap();
        let fetch = Command::new(python())
            .args([
                "-c",
                "import sys; from huggingface_hub import snapshot_download; print(snapshot_download(sys.argv[1]))",
                mirror,
            ])
            .env("HF_ENDPOINT", world.endpoint())
            .env("HF_TOKEN", CAROL)
            .env("HF_HOME", home.path())
            .output()
            .unwrap();
        assert!(fetch.status.success(), "{}", String::from_utf8_lossy(&fetch.stderr));
        let snapshot = stdout(&fetch).trim().to_owned();
        let check = Command::new(python())
            .arg(root().join("tests/python/check_fixed.py"))
            .args(["--original", fixture(fixture_dir).to_str().unwrap(), "--fixed", &snapshot, "--mlx-lm"])
            .env("HF_HUB_OFFLINE", "1")
            .output()
            .unwrap();
        let text = text(&check);
        assert!(
            check.status.success() && text.contains("check_fixed: OK") && text.contains("MEI_ALIGN_MANIFEST"),
            "{mirror}: {text}"
        );
        let card = Command::new(python())
            .args([
                "-c",
                "import sys, yaml; t = open(sys.argv[1]).read(); m = yaml.safe_load(t.split('---')[1]); \
                 assert m['base_model'] == sys.argv[2], m; assert m['library_name'] == 'mlx'; \
                 assert {'mlx', 'safetensors'} <= set(m['tags']); print(m.get('license'))",
                &format!("{snapshot}/README.md"),
                source,
            ])
            .output()
            .unwrap();
        assert!(card.status.success(), "{mirror} card: {}", String::from_utf8_lossy(&card.stderr));
        let manifest: serde_json::Value =
            serde_json::from_slice(&std::fs::read(format!("{snapshot}/MEI_ALIGN_MANIFEST.json")).unwrap()).unwrap();
        assert_eq!(manifest["source_repo"], source);
        assert_eq!(manifest["source_revision"].as_str().unwrap().len(), 40);
    }
    let meta = sim.repos().get(&crate::support::mirror("mlx-community/tiny-q4")).unwrap().meta.clone();
    assert_eq!(meta.library_name.as_deref(), Some("mlx"), "the card makes the mirror an MLX repo");
    assert_eq!(meta.license.as_deref(), Some("mit"), "the source's licence is carried over");

    // Running the worker again changes nothing.
    let commits = sim.repos().get(&crate::support::mirror("mlx-community/tiny-q4")).unwrap().commits.len();
    let again = worker_cmd(&world, &db, &["worker", "--once"]);
    assert_eq!(again.status.code(), Some(0));
    assert_eq!(
        sim.repos().get(&crate::support::mirror("mlx-community/tiny-q4")).unwrap().commits.len(),
        commits,
        "no new commit"
    );
}

#[cfg(feature = "system-tests")]
#[test]
fn a_source_that_moves_on_gets_a_new_commit_on_the_same_mirror() {
    let world = audit_world(0, |_| {});
    let (_dir, db) = db();
    let sim = &world.hub.as_ref().unwrap().sim;
    assert_ok(&audit(&world, &db, &["--author", "lmstudio"]));
    let out = worker_cmd(&world, &db, &["repack", "lmstudio/tiny-q8"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let uploads = |sim: &hubsim::Sim| {
        let repos = sim.repos();
        repos
            .get(&crate::support::mirror("lmstudio/tiny-q8"))
            .unwrap()
            .commits
            .values()
            .filter(|c| c.files.contains_key("MEI_ALIGN_MANIFEST.json"))
            .count()
    };
    assert_eq!(uploads(sim), 1);

    // The publisher pushes a new commit (another shard); the audit sees it, the worker republishes.
    let repo = sim.config.root.join("models/lmstudio/tiny-q8");
    std::fs::copy(fixture("mlx/padfixable.safetensors"), repo.join("extra.safetensors")).unwrap();
    assert_eq!(world.runtime.block_on(sim.rescan()).unwrap(), ["lmstudio/tiny-q8"]);
    assert_ok(&audit(&world, &db, &["--author", "lmstudio"]));
    let out = worker_cmd(&world, &db, &["worker", "--once", "--include", "lmstudio"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(uploads(sim), 2, "a new commit on the same mirror");
    assert_eq!(
        sim.repos().keys().filter(|k| k.ends_with("-aligned")).count(),
        2,
        "tiny-q8 and tiny-mixed, no second tiny-q8 mirror"
    );
    let head = sim.repos().get(&crate::support::mirror("lmstudio/tiny-q8")).unwrap().head().unwrap().files.clone();
    assert!(head.contains_key("extra.safetensors"));
}
