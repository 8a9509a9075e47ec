//! `--pr` mode: the repair proposed on the source repo by a token that may not write to it, once while it is
//! open, never after a "no".

use super::pipeline::{jobs, worker_cmd};
use crate::audit::world::{assert_ok, audit, audit_world, db};
use crate::support::text;

/// The pull request number each run's store recorded, with the job's state and reason.
fn recorded_pull_request(world: &crate::sim::world::World, db: &std::path::Path) -> Option<i64> {
    world.runtime.block_on(async {
        let store = hubalign::store::Store::open(db).await.unwrap();
        store.jobs().await.unwrap().remove(0).pr_num
    })
}

#[test]
fn a_pull_request_is_opened_once_and_a_closed_one_means_no() {
    // alice may not write to mlx-community: the simulator refuses her uploads and commits there unless each
    // asks for a pull request (`create_pr=1`), as the Hub does.
    let world = audit_world(0, |_| {});
    let sim = &world.hub.as_ref().unwrap().sim;
    let main_before = sim.repos().get("mlx-community/tiny-q4").unwrap().refs["main"].clone();
    let run = || {
        let (dir, db) = db();
        assert_ok(&audit(&world, &db, &[]));
        let out = worker_cmd(&world, &db, &["repack", "mlx-community/tiny-q4", "--pr"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        let job = jobs(&world, &db).remove(0);
        let num = recorded_pull_request(&world, &db);
        drop(dir);
        (job, num)
    };

    let (first, num) = run();
    assert_eq!(first.1, "published", "{first:?}");
    assert_eq!(num, Some(1), "the number the Hub's pullRequestUrl names is recorded");
    {
        let repos = sim.repos();
        let repo = &repos.get("mlx-community/tiny-q4").unwrap();
        assert_eq!(repo.pull_requests.len(), 1);
        assert_eq!(repo.pull_requests[0].author, "alice");
        assert_eq!(repo.refs["main"], main_before, "main is untouched");
        let pr = repo.resolve("refs/pr/1").unwrap();
        assert!(pr.files.contains_key("MEI_ALIGN_MANIFEST.json"));
        assert_ne!(
            pr.files["model.safetensors"].sha256,
            repo.head().unwrap().files["model.safetensors"].sha256,
            "the repaired shard"
        );
        assert!(!repos.contains_key(&crate::support::mirror("mlx-community/tiny-q4")), "no mirror in --pr mode");
    }

    // Another worker with an empty store finds the open PR and opens none.
    let (second, num) = run();
    assert_eq!(num, None);
    assert_eq!(second.1, "skipped");
    assert!(second.2.as_deref().unwrap_or("").contains("#1 is already open"), "{second:?}");
    assert_eq!(sim.repos().get("mlx-community/tiny-q4").unwrap().pull_requests.len(), 1);

    // The owner closes it: that is a no.
    sim.repos_mut().get_mut("mlx-community/tiny-q4").unwrap().pull_requests[0].open = false;
    let (third, _) = run();
    assert_eq!(third.1, "skipped");
    assert!(third.2.as_deref().unwrap_or("").contains("closed #1"), "{third:?}");
    assert_eq!(sim.repos().get("mlx-community/tiny-q4").unwrap().pull_requests.len(), 1);
}

#[test]
fn a_spent_quota_on_commits_defers_the_job_without_spending_an_attempt() {
    let world = audit_world(0, |c| {
        c.action_quotas = hubsim::actions::ActionQuotas {
            limits: vec![(hubsim::actions::Action::Commit, 0)],
            window: std::time::Duration::from_secs(3600),
        };
    });
    let (_dir, db) = db();
    assert_ok(&audit(&world, &db, &[]));
    let started = hubalign::time::unix_seconds_after(std::time::SystemTime::now());
    let out = worker_cmd(&world, &db, &["repack", "mlx-community/tiny-q4", "--pr"]);
    let job = world
        .runtime
        .block_on(async { hubalign::store::Store::open(&db).await.unwrap().jobs().await.unwrap().remove(0) });
    assert_eq!(job.state.to_string(), "queued", "{job:?}\n{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(job.attempts, 0, "the user's quota spends no attempt of the job's");
    assert!(job.reason.as_deref().unwrap_or("").contains("hourly quotas for action: commit"), "{job:?}");
    assert!(job.not_before >= started + 299, "deferred for the pause: {} from {started}", job.not_before);
    assert_eq!(world.counters().requests["commit"], 1, "one commit refused, none resent");
}
