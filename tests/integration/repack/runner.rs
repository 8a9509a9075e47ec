//! The macOS runner protocol end to end, with the CPU standing in for Metal: a job waits for the check, a
//! runner claims it over HTTP with the token, fetches the staged shards, posts the record, and the next
//! worker pass publishes.

use std::sync::Arc;
use std::time::Duration;

use hubalign::repack::runner::{RunnerApi, router};
use hubalign::store::Store;

use super::pipeline::jobs;
use crate::audit::world::{assert_ok, audit, audit_world, db};
use crate::sim::world::ALICE;
use crate::support::{hubalign, python, stdout};

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
    assert!(!sim.repos().contains_key("alice/tiny-q4-aligned"), "nothing published before the Metal check");

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
                "--token",
                token,
                "--device",
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
    let out = runner(RUNNER_TOKEN);
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
    assert!(stdout(&out).contains("Metal check passed"), "{}", stdout(&out));
    assert_eq!(jobs(&world, &db)[0].1, "publishing");
    assert_eq!(runner(RUNNER_TOKEN).status.code(), Some(0), "nothing else waits");

    assert_ok(&repack());
    assert_eq!(jobs(&world, &db)[0].1, "published");
    let mirror = &sim.repos()["alice/tiny-q4-aligned"];
    assert!(!mirror.meta.private);
    let card_sha = &mirror.head().unwrap().files["README.md"].sha256;
    let card = std::fs::read_to_string(sim.store.join("blobs").join(card_sha)).unwrap();
    assert!(card.contains("test-runner") || card.contains("**cpu** device"), "the card records the check: {card}");
}
