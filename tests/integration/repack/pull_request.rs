//! `--pr` mode: the repair proposed on the source repo, never twice for one commit, never after a "no".

use super::pipeline::{jobs, worker_cmd};
use crate::audit::world::{assert_ok, audit, audit_world, db};
use crate::support::stdout;

#[test]
fn a_pull_request_is_opened_once_and_a_closed_one_means_no() {
    let world = audit_world(0, |_| {});
    let sim = &world.hub.as_ref().unwrap().sim;
    let main_before = sim.repos().get("mlx-community/tiny-q4").unwrap().refs["main"].clone();
    let run = || {
        let (dir, db) = db();
        assert_ok(&audit(&world, &db, &[]));
        let out = worker_cmd(&world, &db, &["repack", "mlx-community/tiny-q4", "--pr"]);
        assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
        let job = jobs(&world, &db).remove(0);
        drop(dir);
        job
    };

    let first = run();
    assert_eq!(first.1, "published", "{first:?}");
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

    // Another worker (another store) for the same commit finds the open PR.
    let second = run();
    assert_eq!(second.1, "skipped");
    assert!(second.2.as_deref().unwrap_or("").contains("#1 is already open"), "{second:?}");
    assert_eq!(sim.repos().get("mlx-community/tiny-q4").unwrap().pull_requests.len(), 1);

    // The owner closes it: that is a no.
    sim.repos_mut().get_mut("mlx-community/tiny-q4").unwrap().pull_requests[0].open = false;
    let third = run();
    assert_eq!(third.1, "skipped");
    assert!(third.2.as_deref().unwrap_or("").contains("closed #1"), "{third:?}");
    assert_eq!(sim.repos().get("mlx-community/tiny-q4").unwrap().pull_requests.len(), 1);
}
