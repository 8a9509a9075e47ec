//! `hubalign selftest` against the simulator: every write path passes, and nothing it made is left behind.

use serde_json::Value;

use crate::sim::world::{ALICE, World, standard};
use crate::support::{run, stdout};

/// The steps a self-test that passes takes, in order.
const STEPS: [&str; 10] = [
    "the token may write to the namespace",
    "create a private repo",
    "a shard through Xet, committed on the head read",
    "a commit on a moved branch is refused",
    "open a pull request (create_pr=1)",
    "open a discussion",
    "a private collection holds the repo",
    "make the repo public, then private",
    "delete the collection",
    "delete the repo",
];

fn selftest(world: &World, namespace: &str) -> (Option<i32>, Vec<Value>) {
    let endpoint = world.endpoint();
    let out =
        run(&["selftest", "--namespace", namespace, "--endpoint", &endpoint, "--token", ALICE, "--format", "json"]);
    let steps = stdout(&out).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    (out.status.code(), steps)
}

/// Alice's collections, as she sees them.
fn collections(world: &World) -> Vec<Value> {
    world.runtime.block_on(async {
        let url = format!("{}/api/collections?owner=alice", world.endpoint());
        reqwest::Client::new().get(url).bearer_auth(ALICE).send().await.unwrap().json().await.unwrap()
    })
}

#[test]
fn every_write_path_passes_against_the_simulator_and_nothing_is_left() {
    let world = standard();
    let (code, steps) = selftest(&world, "alice");
    assert_eq!(code, Some(0), "{steps:#?}");
    let names: Vec<&str> = steps.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, STEPS);
    assert!(steps.iter().all(|s| s["passed"] == true), "{steps:#?}");
    let sim = &world.hub.as_ref().unwrap().sim;
    let left: Vec<String> = sim.repos().keys().filter(|id| id.contains("hubalign-selftest")).cloned().collect();
    assert!(left.is_empty(), "repos left: {left:?}");
    assert_eq!(collections(&world), Vec::<Value>::new(), "no collection left");
    // What each write asked is what the journal holds: the pull request said create_pr=1.
    let journal = sim.journal.entries();
    assert!(journal.iter().any(|a| a.path.ends_with("/commit/main") && a.query == ["create_pr"]), "{journal:?}");
}

#[test]
fn a_namespace_the_token_may_not_write_to_fails_at_the_first_step_and_makes_nothing() {
    let world = standard();
    let (code, steps) = selftest(&world, "mlx-community");
    assert_eq!(code, Some(4), "{steps:#?}");
    assert_eq!(steps.len(), 1, "{steps:#?}");
    assert_eq!(steps[0]["passed"], false);
    assert!(steps[0]["detail"].as_str().unwrap().contains("mlx-community"), "{steps:#?}");
    let sim = &world.hub.as_ref().unwrap().sim;
    assert!(!sim.repos().keys().any(|id| id.contains("hubalign-selftest")));
}
