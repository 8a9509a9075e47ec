//! The macOS runner protocol end to end, with the CPU standing in for Metal: a job waits for the check, a
//! runner claims it over HTTP with the token, fetches the staged shards, posts the record, and the next
//! worker pass publishes.

use std::sync::Arc;
use std::time::Duration;

use hubalign::serve::runner_api::{RunnerApi, router};
use hubalign::store::Store;

use super::pipeline::jobs;
use crate::audit::world::{assert_ok, audit, audit_world, db};
use crate::sim::world::ALICE;
use crate::support::{hubalign, python, stdout, text};

const RUNNER_TOKEN: &str = "runner-secret";

#[test]
fn a_metal_job_waits_for_the_runner_then_publishes() {
    let world = audit_world(0, |_| {});
    let (_dir, db) = db();
    let work = tempfile::tempdir().unwrap();
    assert_ok(&audit(&world, &db, &[]));
    let endpoint = world.endpoint();
    let repack = || {
        hubalign()
            .args([
                "repack",
                "mlx-community/tiny-q4",
                "--endpoint",
                endpoint.as_str(),
                "--token",
                ALICE,
                "--db",
                db.to_str().unwrap(),
            ])
            .args([
                "--target-namespace",
                "alice",
                "--verify-device",
                "metal",
                "--work-dir",
                work.path().to_str().unwrap(),
            ])
            .output()
            .unwrap()
    };
    assert_ok(&repack());
    assert_eq!(jobs(&world, &db)[0].1, "awaiting_metal_verify");
    let sim = &world.hub.as_ref().unwrap().sim;
    assert!(
        !sim.repos().contains_key(&crate::support::mirror("mlx-community/tiny-q4")),
        "nothing published before the Metal check"
    );

    // The service side of the protocol, on the test's runtime.
    let service = world.runtime.block_on(async {
        let store = Store::open(&db).await.unwrap();
        let api = Arc::new(RunnerApi {
            store,
            work_dir: work.path().to_owned(),
            token: RUNNER_TOKEN.into(),
            lease: Duration::from_secs(60),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, router(api)).await });
        url
    });
    let runner = |token: &str| {
        hubalign()
            .args([
                "verify-runner",
                "--service",
                service.as_str(),
                "--runner-token",
                token,
                "--verify-device",
                "cpu",
                "--once",
                "--name",
                "test-runner",
            ])
            .arg("--python")
            .arg(python())
            .output()
            .unwrap()
    };
    assert_eq!(runner("wrong-token").status.code(), Some(4), "the token is checked");
    // `--token` is the Hub's token in every command: given as the runner's, it is a usage error that says so.
    let old = hubalign()
        .args(["verify-runner", "--service", service.as_str(), "--token", "secret", "--once"])
        .env_remove("HUBALIGN_RUNNER_TOKEN")
        .output()
        .unwrap();
    assert_eq!(old.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&old.stderr).contains("--runner-token"),
        "{}",
        String::from_utf8_lossy(&old.stderr)
    );
    // A posted result that is not the check's record is refused before anything reads it.
    let job_id = world.runtime.block_on(async { Store::open(&db).await.unwrap().jobs().await.unwrap()[0].id });
    let refused = world.runtime.block_on(async {
        let url = format!("{service}/api/verifier/jobs/{job_id}/result");
        let post = reqwest::Client::new().post(url).bearer_auth(RUNNER_TOKEN).header("x-runner", "test-runner");
        let post = post.header("content-type", "application/json").body(r#"["ok", true]"#);
        post.send().await.unwrap().status()
    });
    assert_eq!(refused, reqwest::StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(jobs(&world, &db)[0].1, "awaiting_metal_verify");
    let out = runner(RUNNER_TOKEN);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(stdout(&out).contains("Metal check passed"), "{}", stdout(&out));
    assert_eq!(jobs(&world, &db)[0].1, "publishing");
    assert_eq!(runner(RUNNER_TOKEN).status.code(), Some(0), "nothing else waits");

    assert_ok(&repack());
    assert_eq!(jobs(&world, &db)[0].1, "published");
    let mirror = sim.repos().get(&crate::support::mirror("mlx-community/tiny-q4")).unwrap().clone();
    assert!(!mirror.meta.private);
    let card_sha = &mirror.head().unwrap().files["README.md"].sha256;
    let card = std::fs::read_to_string(sim.store.join("blobs").join(card_sha)).unwrap();
    assert!(card.contains("test-runner") || card.contains("**cpu** device"), "the card records the check: {card}");
}

/// The Hub as the rendezvous: the worker commits the repaired bundle to the still-private mirror and keeps
/// nothing; a runner that reaches only the store and the Hub (no runner API anywhere) downloads that commit,
/// checks it and records its verdict naming the commit; a second worker, which never saw the files, adds the
/// card on top of exactly that commit and makes the mirror public.
#[test]
fn a_bundle_staged_on_the_hub_is_checked_by_a_runner_that_reaches_only_the_store_and_the_hub() {
    staged_on_the_hub(None);
}

/// The same with the source renamed (and the rename followed) while its repair waits for the check: the
/// staged manifest names the old name, which the mirror records, so the check and the publication accept it.
#[test]
fn a_source_renamed_while_its_repair_is_staged_is_still_published() {
    staged_on_the_hub(Some("mlx-community/tiny-q4-renamed"));
}

fn staged_on_the_hub(renamed: Option<&str>) {
    let world = audit_world(0, |_| {});
    let (_dir, db) = db();
    assert_ok(&audit(&world, &db, &[]));
    let endpoint = world.endpoint();
    let source = "mlx-community/tiny-q4";
    let repack = |work: &std::path::Path, repo: &str| {
        hubalign()
            .args(["repack", repo, "--endpoint", &endpoint, "--token", ALICE])
            .args(["--db", db.to_str().unwrap(), "--target-namespace", "alice", "--verify-device", "metal"])
            .args(["--metal-handoff", "hub", "--work-dir", work.to_str().unwrap()])
            .output()
            .unwrap()
    };
    let (stager, publisher) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    assert_ok(&repack(stager.path(), source));
    assert_eq!(jobs(&world, &db)[0].1, "awaiting_metal_verify");
    let sim = &world.hub.as_ref().unwrap().sim;
    let staged = sim.repos().get(&crate::support::mirror("mlx-community/tiny-q4")).unwrap().clone();
    assert!(staged.meta.private, "staged, not published");
    let staged_files = staged.head().unwrap().files.clone();
    assert!(staged_files.contains_key("MEI_ALIGN_MANIFEST.json") && !staged_files.contains_key("README.md"));
    let left: Vec<_> = std::fs::read_dir(stager.path()).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(!left.iter().any(|n| n.to_string_lossy().starts_with("job-")), "nothing kept on the worker: {left:?}");
    let store = || world.runtime.block_on(async { Store::open(&db).await.unwrap().jobs().await.unwrap() });
    let staged_commit = store()[0].staged.clone().unwrap().0.commit;
    if let Some(new) = renamed {
        // What the service does once the Hub answers the old name with the renamed repo.
        world.rename(source, new);
        world.runtime.block_on(async { Store::open(&db).await.unwrap().follow_move(source, new).await.unwrap() });
    }

    let runner = |name: &str, token: &str| {
        hubalign()
            .args(["verify-runner", "--db", db.to_str().unwrap(), "--endpoint", &endpoint, "--hub-token", token])
            // The former spellings (`--hub-token`, `--device`) still work.
            .args(["--device", "cpu", "--once", "--name", name, "--lease-secs", "1"])
            .arg("--python")
            .arg(python())
            .output()
            .unwrap()
    };
    // A runner without a token cannot see the private mirror: the job stays for the next, unchecked.
    let blind = runner("blind-runner", "hf_not_a_token");
    assert_eq!(blind.status.code(), Some(4), "{}", String::from_utf8_lossy(&blind.stderr));
    assert_eq!(store()[0].verification, None);
    std::thread::sleep(Duration::from_millis(2100)); // its lease lapses
    let out = runner("hub-runner", ALICE);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(stdout(&out).contains("Metal check passed"), "{}", stdout(&out));
    let job = store()[0].clone();
    assert_eq!(job.state, "publishing");
    let record = job.verification.unwrap().0;
    assert_eq!(record.staged_commit, Some(staged_commit.clone()), "the verdict names the commit it judged");

    assert_ok(&repack(publisher.path(), renamed.unwrap_or(source)));
    let job = store()[0].clone();
    assert_eq!(job.state, "published", "{job:?}");
    let mirror = sim.repos().get(&crate::support::mirror("mlx-community/tiny-q4")).unwrap().clone();
    assert!(!mirror.meta.private);
    let head = mirror.head().unwrap();
    assert_eq!(head.parent.as_deref(), Some(staged_commit.as_str()), "the card goes on top of the staged commit");
    assert_eq!(job.published_commit.as_deref(), Some(head.sha.as_str()));
    for (name, file) in &staged_files {
        assert_eq!(head.files[name].sha256, file.sha256, "{name} is the file the runner checked");
    }
    let card = std::fs::read_to_string(sim.store.join("blobs").join(&head.files["README.md"].sha256)).unwrap();
    assert!(card.contains("**cpu** device") || card.contains("hub-runner"), "the card records the check: {card}");
    if let Some(new) = renamed {
        let row = world.runtime.block_on(async { Store::open(&db).await.unwrap().mirror_of(new).await.unwrap() });
        assert_eq!(row.and_then(|m| m.moved_from).as_deref(), Some(source), "its manifest names the old name");
    }
}
