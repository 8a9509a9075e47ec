//! A complete crawl: every MLX repo found, per-shard results equal to `scan`, access states recorded;
//! incremental runs probe only what changed.

use std::collections::BTreeMap;

use serde_json::Value;

use super::world::{assert_ok, audit, audit_world, db, expected_shards, repo_states, stored_shards};
use crate::support::{run, stdout};

#[test]
fn every_mlx_repo_is_audited_like_scan_and_access_states_are_recorded() {
    let world = audit_world(6, |_| {});
    let (_dir, db) = db();
    let out = audit(&world, &db, &[]);
    assert_ok(&out);
    let shards = stored_shards(&db);
    assert_eq!(shards.len(), expected_shards(6), "{}", stdout(&out));

    // The same files, scanned locally, give the same per-shard answers.
    let root = world.hub.as_ref().unwrap().sim.config.root.clone();
    for shard in &shards {
        let path = root.join("models").join(shard["repo_id"].as_str().unwrap()).join(shard["path"].as_str().unwrap());
        let scanned: Value =
            serde_json::from_str(stdout(&run(&["scan", "--format", "json", path.to_str().unwrap()])).trim()).unwrap();
        for field in [
            "header_len",
            "data_start",
            "data_start_mod8",
            "tensors",
            "misaligned_tensors",
            "misaligned_bytes",
            "verdict",
            "writer",
            "error",
            "size",
        ] {
            assert_eq!(shard[field], scanned[field], "{}: {field}", path.display());
        }
    }

    let states: BTreeMap<String, String> = repo_states(&world, &db).into_iter().collect();
    assert_eq!(states["gemma-org/gated-q4"], "gated");
    assert_eq!(states["old-org/disabled-q4"], "disabled");
    assert_eq!(states["alice/private-q4"], "ok", "the token's own private repo is audited");
    assert_eq!(states["bad-org/truncated-q4"], "ok");
    assert!(!states.contains_key("pytorch-org/not-mlx"), "not an MLX repo");
    let truncated = shards.iter().find(|s| s["repo_id"] == "bad-org/truncated-q4").unwrap();
    assert_eq!(truncated["verdict"], "invalid");
    assert!(truncated["error"].as_str().unwrap().contains("truncated"), "{truncated}");

    // The reports read the same store.
    let by_publisher = stdout(&run(&["report", "--db", db.to_str().unwrap(), "--by-publisher", "--format", "json"]));
    let rows: Vec<Value> = by_publisher.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let mlx_community = rows.iter().find(|r| r["namespace"] == "mlx-community").unwrap();
    assert_eq!(mlx_community["repos_audited"], 3);
    let duplicated: i64 = shards
        .iter()
        .filter(|s| s["repo_id"].as_str().unwrap().starts_with("mlx-community/"))
        .filter_map(|s| s["misaligned_bytes"].as_i64())
        .sum();
    assert_eq!(mlx_community["misaligned_bytes"], duplicated);
    let bytes: Vec<i64> = rows.iter().map(|r| r["misaligned_bytes"].as_i64().unwrap()).collect();
    assert!(bytes.windows(2).all(|w| w[0] >= w[1]), "sorted by bytes duplicated: {bytes:?}");
    let csv = stdout(&run(&["report", "--db", db.to_str().unwrap(), "--affected", "--format", "csv"]));
    assert!(csv.starts_with("repo_id,namespace,sha,"), "{csv}");
    let table = stdout(&run(&["report", "--db", db.to_str().unwrap()]));
    assert!(table.contains("mlx-community") && table.contains("audited repos affected"), "{table}");
}

#[test]
fn a_second_run_only_lists_and_a_changed_repo_alone_is_probed_again() {
    let world = audit_world(3, |_| {});
    let (_dir, db) = db();
    assert_ok(&audit(&world, &db, &[]));
    let first = stored_shards(&db);
    let sim = &world.hub.as_ref().unwrap().sim;

    sim.counters.reset();
    assert_ok(&audit(&world, &db, &[]));
    let c = sim.counters.snapshot();
    assert_eq!(c.resolver_requests, 0, "nothing changed, nothing probed: {c:?}");
    assert_eq!(c.requests.get("models_list").copied(), Some(c.api_requests), "only listing requests: {c:?}");
    assert_eq!(stored_shards(&db), first);

    // Replace one repo's shard with its repaired copy and let the simulator see the new commit.
    let repo = sim.config.root.join("models/mlx-community/tiny-q4");
    let fixed = tempfile::tempdir().unwrap();
    let out = run(&["fix", repo.join("model.safetensors").to_str().unwrap(), "--out", fixed.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    std::fs::copy(fixed.path().join("model.safetensors"), repo.join("model.safetensors")).unwrap();
    let changed = world.runtime.block_on(sim.rescan()).unwrap();
    assert_eq!(changed, ["mlx-community/tiny-q4"]);
    sim.counters.reset();
    assert_ok(&audit(&world, &db, &[]));
    let c = sim.counters.snapshot();
    assert_eq!(c.resolver_requests, 1, "only the changed repo's one shard: {c:?}");
    let after = stored_shards(&db);
    let q4 = after.iter().find(|s| s["repo_id"] == "mlx-community/tiny-q4").unwrap();
    assert_eq!(q4["verdict"], "aligned");
    assert_eq!(after.len(), first.len());
}

/// Found by the rehearsal: a `serve` replica's crawls share one Hub client, and each run stored the
/// client's totals since the process started, so a replica's second crawl claimed the first one's
/// requests too. Each run now stores its own, as the simulator counts them.
#[test]
fn two_runs_on_one_client_each_store_their_own_requests() {
    use hubalign::hub::retry::RetryPolicy;
    use hubalign::hub::{HubClient, HubConfig};
    let world = audit_world(3, |_| {});
    let (_dir, db) = db();
    let hub = HubClient::new(HubConfig { endpoint: world.endpoint(), token: None }, RetryPolicy::default()).unwrap();
    let runs = world.runtime.block_on(async {
        let store = hubalign::store::Store::open(&db).await.unwrap();
        let opts = hubalign::audit::AuditOptions::default();
        let mut served = Vec::new();
        for _ in 0..2 {
            let before = world.counters();
            let summary = hubalign::audit::audit(&hub, &store, &opts, &mut |_| {}).await.unwrap();
            let after = world.counters();
            served.push((
                summary.stats,
                after.api_requests - before.api_requests,
                after.resolver_requests - before.resolver_requests,
            ));
        }
        served
    });
    for (i, (stats, api, resolvers)) in runs.iter().enumerate() {
        assert_eq!((stats.api_requests, stats.resolver_requests), (*api, *resolvers), "run {i}: {stats:?}");
    }
    assert!(runs[0].2 > 0 && runs[1].2 == 0, "the second run only lists: {runs:?}");
}

/// The probes start while the listing is still being read. With the Hub's API quota held to one request a
/// second, a listing of four pages takes three seconds or more, and the first page's repos are probed and
/// recorded before the last page arrives; the run's counts are whole all the same. (A crawl used to read
/// every page before its first probe: the rehearsal's listing of 94,000 repos came first, then the probes.)
#[test]
fn the_first_pages_repos_are_probed_while_the_next_pages_are_listed() {
    use hubalign::audit::AuditEvent;
    use hubalign::hub::retry::RetryPolicy;
    use hubalign::hub::{HubClient, HubConfig};
    use hubsim::faults::{Bucket, Quota};
    let world = audit_world(6, |c| {
        c.page_size = 4;
        c.quotas = vec![(Bucket::Api, Quota { requests: 1, window: std::time::Duration::from_secs(1) })];
    });
    let (_dir, db) = db();
    let hub = HubClient::new(HubConfig { endpoint: world.endpoint(), token: None }, RetryPolicy::default()).unwrap();
    let mut events = Vec::new();
    let summary = world.runtime.block_on(async {
        let store = hubalign::store::Store::open(&db).await.unwrap();
        let opts = hubalign::audit::AuditOptions::default();
        hubalign::audit::audit(&hub, &store, &opts, &mut |e| events.push(e)).await.unwrap()
    });
    let pages = events.iter().filter(|e| matches!(e, AuditEvent::Listed { .. })).count();
    assert!(pages >= 4, "a listing of several pages: {events:?}");
    let last_page = events.iter().rposition(|e| matches!(e, AuditEvent::Listed { .. })).unwrap();
    let first_record = events.iter().position(|e| matches!(e, AuditEvent::Recorded { .. })).unwrap();
    assert!(first_record < last_page, "a repo recorded before the last page was listed: {events:?}");
    let recorded = events.iter().filter(|e| matches!(e, AuditEvent::Recorded { .. })).count() as u64;
    let Some(AuditEvent::Listed { repos, pending }) = events.get(last_page) else { unreachable!() };
    assert_eq!((summary.stats.repos_listed, summary.stats.repos_probed), (*repos, *pending), "{summary:?}");
    assert_eq!(summary.stats.repos_probed, recorded);
    assert_eq!(repo_states(&world, &db).len() as u64, *repos, "every listed repo recorded");
    assert!(summary.interrupted.is_none(), "{summary:?}");
}
