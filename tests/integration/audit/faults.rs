//! Faults: a tight rate limit, random 5xx, truncated bodies, and a kill -9 halfway; each run ends with the
//! store a fault-free run builds.

use std::time::{Duration, Instant};

use hubsim::faults::{Bucket, FaultConfig, Quota};

use super::world::{assert_ok, audit, audit_world, comparable, db, expected_shards, repo_states, stored_shards};
use crate::sim::world::ALICE;
use crate::support::hubalign;

const FILLER: usize = 12;

/// The store a fault-free run builds over the same world.
fn reference() -> (Vec<serde_json::Value>, Vec<(String, String)>) {
    let world = audit_world(FILLER, |_| {});
    let (_dir, db) = db();
    assert_ok(&audit(&world, &db, &[]));
    (comparable(stored_shards(&db)), repo_states(&world, &db))
}

#[test]
fn a_rate_limit_far_below_the_crawl_rate_is_paced_not_hit() {
    let (want_shards, want_states) = reference();
    let window = Duration::from_secs(1);
    let world = audit_world(FILLER, |c| {
        c.quotas =
            vec![(Bucket::Api, Quota { requests: 2, window }), (Bucket::Resolvers, Quota { requests: 6, window })];
    });
    let (_dir, db) = db();
    let started = Instant::now();
    assert_ok(&audit(&world, &db, &[]));
    let elapsed = started.elapsed();
    assert_eq!(comparable(stored_shards(&db)), want_shards);
    assert_eq!(repo_states(&world, &db), want_states);
    let c = world.counters();
    let windows = (c.resolver_requests as f64 / 6.0).floor() as u64;
    assert!(
        elapsed >= window * windows.saturating_sub(1) as u32,
        "{elapsed:?} for {} resolver requests",
        c.resolver_requests
    );
    // The first request of each bucket learns the quota; the crawler then waits for resets instead of
    // sending into a closed window.
    assert_eq!(c.rate_limited, 0, "{c:?}");
}

#[test]
fn random_server_errors_and_truncated_bodies_are_retried_to_the_same_result() {
    let (want_shards, want_states) = reference();
    let world = audit_world(FILLER, |c| {
        c.faults = FaultConfig {
            error_rate: 0.05,
            truncate_rate: 0.05,
            seed: 9,
            latency: Duration::ZERO,
            ..FaultConfig::default()
        };
    });
    let (_dir, db) = db();
    assert_ok(&audit(&world, &db, &[]));
    assert_eq!(comparable(stored_shards(&db)), want_shards);
    assert_eq!(repo_states(&world, &db), want_states);
    assert!(world.counters().faults_injected > 0);
}

#[test]
fn a_crawl_killed_halfway_resumes_without_probing_again() {
    let (want_shards, want_states) = reference();
    let world = audit_world(FILLER, |c| c.faults.latency = Duration::from_millis(40));
    let (_dir, db) = db();
    let endpoint = world.endpoint();
    let mut child = hubalign()
        .args(["audit", "--endpoint", endpoint.as_str(), "--db", db.to_str().unwrap(), "--concurrency", "2"])
        .env("HF_TOKEN", ALICE)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while world.counters().resolver_requests < 10 {
        assert!(Instant::now() < deadline, "the crawl never got going");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let recorded = stored_shards(&db).len();
    assert!(recorded > 0 && recorded < expected_shards(FILLER), "killed halfway: {recorded} shards stored");
    // Probing the gated repo costs one request and stores no shard.
    let gated_done = repo_states(&world, &db).iter().any(|(id, state)| id == "gemma-org/gated-q4" && state == "gated");

    world.hub.as_ref().unwrap().sim.counters.reset();
    assert_ok(&audit(&world, &db, &[]));
    assert_eq!(comparable(stored_shards(&db)), want_shards);
    assert_eq!(repo_states(&world, &db), want_states);
    let c = world.counters();
    let remaining = expected_shards(FILLER) - recorded + usize::from(!gated_done);
    assert_eq!(c.resolver_requests as usize, remaining, "stored repos are not probed again");
    let runs =
        world.runtime.block_on(async { hubalign::store::Store::open(&db).await.unwrap().runs(10).await.unwrap() });
    assert_eq!(runs.iter().map(|r| r.status.as_str()).collect::<Vec<_>>(), ["finished", "interrupted"]);
}
