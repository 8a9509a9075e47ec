//! Who gets mirrored is the operator's policy, not the pusher's: a flood of fresh pushes gets no mirror, a
//! day's new mirrors are capped per namespace, mirrors are never audited as sources, and a repo listing more
//! shards than any real one costs the crawl no probe.

use std::path::Path;

use hubalign::job::JobState;

use super::proxy;
use super::publish::{jobs, worker};
use crate::sim::world::{bundle, start_on};
use crate::support::{fixture, stdout, text};

fn known(db: &Path, id: &str) -> Option<hubalign::store::queries::RepoListing> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async { hubalign::store::Store::open(db).await.unwrap().repo(id).await.unwrap() })
}

#[test]
fn a_flood_of_pushes_gets_no_mirror_a_day_caps_new_ones_and_mirrors_are_never_sources() {
    let root = tempfile::tempdir().unwrap();
    let sidecar = |downloads: u64, likes: u64| {
        format!(r#"{{"library_name":"mlx","license":"mit","downloads":{downloads},"likes":{likes}}}"#)
    };
    for i in 0..5 {
        bundle(root.path(), &format!("spam/r{i}"), "mlx_lm/q4", &sidecar(0, 0));
    }
    for name in ["a", "b", "c"] {
        bundle(root.path(), &format!("popular/{name}"), "mlx_lm/q4", &sidecar(5_000, 0));
    }
    bundle(root.path(), "liked/x", "mlx_lm/q4", &sidecar(0, 10));
    // Somebody's mirror: popular, tagged as mirrors are.
    let peer = r#"{"library_name":"mlx","downloads":5000,"tags":["mlx","aligned-safetensors"]}"#;
    bundle(root.path(), "peer/x-aligned", "mlx_lm/q4", peer);
    // 300 shards listed: more than any real MLX repo has.
    bundle(root.path(), "huge/many", "mlx_lm/q4", &sidecar(5_000, 0));
    for i in 0..300 {
        let shard = root.path().join(format!("models/huge/many/extra-{i:05}.safetensors"));
        std::fs::copy(fixture("mlx/padfixable.safetensors"), shard).unwrap();
    }
    let world = start_on(root, |_| {});
    let dir = tempfile::tempdir().unwrap();
    let (db, work) = (dir.path().join("a.db"), dir.path().join("work"));
    let counting = proxy::start(&world, vec![]);
    let out = crate::support::hubalign()
        .args(["audit", "--endpoint", &counting.base_url, "--db", db.to_str().unwrap()])
        .env("HF_TOKEN", crate::sim::world::ALICE)
        .output()
        .unwrap();
    // The over-cap repo is the one the run reports as failed.
    assert_eq!(out.status.code(), Some(4), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout(&out).contains("1 repo failed"), "{}", stdout(&out));

    assert!(known(&db, "peer/x-aligned").is_none(), "a mirror is never recorded as a source");
    let huge = known(&db, "huge/many").expect("the over-cap repo is recorded");
    assert!(huge.last_error.as_deref().unwrap_or("").contains("over the cap"), "{huge:?}");
    assert_eq!(counting.count("/huge/many/resolve/"), 0, "none of its 301 shards probed");

    let out = worker(&world.endpoint(), &db, &work, &["worker", "--once", "--max-new-mirrors-per-namespace", "2"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let jobs = jobs(&db);
    assert!(!jobs.iter().any(|j| j.repo_id.starts_with("spam/")), "below the floor, no job: {jobs:?}");
    let state = |repo: &str| jobs.iter().find(|j| j.repo_id == repo).map(|j| j.state);
    assert_eq!(state("liked/x"), Some(JobState::Published), "likes reach the floor too");
    let popular: Vec<_> = jobs.iter().filter(|j| j.repo_id.starts_with("popular/")).collect();
    let published = popular.iter().filter(|j| j.state == JobState::Published).count();
    assert_eq!(published, 2, "two new mirrors of one namespace a day: {popular:?}");
    let waiting: Vec<_> = popular.iter().filter(|j| j.state == JobState::Queued).collect();
    assert_eq!(waiting.len(), 1, "{popular:?}");
    let w = waiting[0];
    assert!(w.reason.as_deref().unwrap_or("").contains("cap of new mirrors"), "{w:?}");
    assert_eq!(w.attempts, 0, "a deferred job spends no attempt: {w:?}");
    let tomorrow = hubalign::job::unix_now() / 86_400 * 86_400 + 86_400;
    assert_eq!(w.not_before, tomorrow, "tried again at the next UTC midnight: {w:?}");
    assert!(world.hub.as_ref().unwrap().sim.repos().get(&crate::support::mirror(&w.repo_id)).is_none());

    // The next crawl lists the mirrors just published (tagged, in the target namespace): none is a source.
    let out = crate::support::hubalign()
        .args(["audit", "--endpoint", &world.endpoint(), "--db", db.to_str().unwrap(), "--target-namespace", "alice"])
        .env("HF_TOKEN", crate::sim::world::ALICE)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4), "only the over-cap repo failed: {}", String::from_utf8_lossy(&out.stderr));
    for j in jobs.iter().filter(|j| j.state == JobState::Published) {
        let mirror = j.target_repo.as_deref().unwrap();
        assert!(known(&db, mirror).is_none(), "{mirror} recorded as a source");
    }
}
