//! A colleague in the same organisation: a dataset repo or a collection that exists under the name the
//! service would use, and a listing that shows a collection of another namespace. The service writes only to
//! what it made: each of these is refused or ignored, and left as it was.

use std::path::Path;
use std::process::Output;

use hubalign::hub::commit::Change;
use hubalign::hub::repo_ref::RepoRef;
use hubalign::hub::retry::RetryPolicy;
use hubalign::hub::{HubClient, HubConfig};
use serde_json::{Value, json};

use super::proxy::{self, Reply};
use crate::audit::world::{assert_ok, audit, audit_world, db};
use crate::sim::world::{ALICE, World};
use crate::support::{hubalign, stdout, text};

fn client(world: &World) -> HubClient {
    let token = Some(hubalign::hub::Token::new(ALICE.to_owned()));
    HubClient::new(HubConfig { endpoint: world.endpoint(), token }, RetryPolicy::default()).unwrap()
}

/// Alice's request to the simulator, as a colleague makes it by hand; its JSON answer.
fn as_alice(world: &World, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
    let url = format!("{}{path}", world.endpoint());
    world.runtime.block_on(async {
        let mut asked = reqwest::Client::new().request(method, url).bearer_auth(ALICE);
        if let Some(body) = body {
            asked = asked.json(&body);
        }
        let answer = asked.send().await.unwrap();
        assert!(answer.status().is_success(), "{path}: {}", answer.status());
        answer.json().await.unwrap_or(Value::Null)
    })
}

/// A colleague's collection `title` in `namespace` holding `items`; its slug.
fn colleague_collection(world: &World, namespace: &str, title: &str, items: &[&str]) -> String {
    let made = json!({"title": title, "namespace": namespace, "description": "The team's picks."});
    let slug =
        as_alice(world, reqwest::Method::POST, "/api/collections", Some(made))["slug"].as_str().unwrap().to_owned();
    for id in items {
        let item = json!({"item": {"type": "model", "id": id}});
        as_alice(world, reqwest::Method::POST, &format!("/api/collections/{slug}/items"), Some(item));
    }
    slug
}

/// The model ids the collection `slug` holds.
fn items_of(world: &World, slug: &str) -> Vec<String> {
    let full = as_alice(world, reqwest::Method::GET, &format!("/api/collections/{slug}"), None);
    full["items"].as_array().unwrap().iter().map(|i| i["id"].as_str().unwrap().to_owned()).collect()
}

/// The files of the dataset repo `repo` on the simulator, by path.
fn dataset_files(world: &World, repo: &str) -> Vec<String> {
    let tree = as_alice(world, reqwest::Method::GET, &format!("/api/datasets/{repo}/tree/main?recursive=true"), None);
    tree.as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "file")
        .map(|e| e["path"].as_str().unwrap().to_owned())
        .collect()
}

fn findable(endpoint: &str, db: &Path, extra: &[&str]) -> Output {
    hubalign()
        .args(["findable", "--collections", "--target-namespace", "alice", "--endpoint", endpoint, "--token", ALICE])
        .args(["--db", db.to_str().unwrap()])
        .args(extra)
        .output()
        .unwrap()
}

fn dataset_push(world: &World, db: &Path, repo: &str, extra: &[&str]) -> Output {
    hubalign()
        .args(["dataset", "push", "--db", db.to_str().unwrap(), "--repo", repo, "--date", "2026-12-04"])
        .args(["--endpoint", world.endpoint().as_str(), "--token", ALICE])
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn a_colleague_s_dataset_repo_is_refused_and_left_as_it_was_and_a_dry_run_writes_nothing() {
    let world = audit_world(0, |_| {});
    let (_dir, db) = db();
    assert_ok(&audit(&world, &db, &[]));
    // A colleague's dataset in the same namespace, with a card and data of their own.
    let hub = client(&world);
    world.runtime.block_on(async {
        hub.create_dataset_repo("alice/model-stats", false).await.unwrap();
        let (head, _) = hub.head_of(RepoRef::dataset("alice/model-stats")).await.unwrap().unwrap();
        let changes = [
            Change::Inline { path: "README.md", content: b"# Our model stats\n".to_vec() },
            Change::Inline { path: "data/train.csv", content: b"a,b\n1,2\n".to_vec() },
        ];
        hub.commit(RepoRef::dataset("alice/model-stats").into(), &head, "ours".into(), &changes).await.unwrap();
    });
    let before = dataset_files(&world, "alice/model-stats");

    for extra in [&[][..], &["--dry-run"][..]] {
        let out = dataset_push(&world, &db, "alice/model-stats", extra);
        assert_eq!(out.status.code(), Some(4), "{}", text(&out));
        let said = text(&out);
        assert!(said.contains("alice/model-stats exists and hubalign did not make it"), "{said}");
        assert!(said.contains("--repo"), "names the flag to choose another: {said}");
    }
    assert_eq!(dataset_files(&world, "alice/model-stats"), before, "nothing written");

    // A dry run to a new name says what it would write, and creates nothing.
    let out = dataset_push(&world, &db, "alice/mlx-audit", &["--dry-run"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(stdout(&out).contains("would create alice/mlx-audit") && stdout(&out).contains("would write README.md"));
    let sim = &world.hub.as_ref().unwrap().sim;
    assert!(!sim.repos_of(hubsim::kind::RepoKind::Dataset).contains_key("alice/mlx-audit"), "nothing created");

    // Made by the service, it is recorded and its card marked: another store knows it by the mark.
    assert_ok(&dataset_push(&world, &db, "alice/mlx-audit", &[]));
    let (_other_dir, other) = crate::audit::world::db();
    assert_ok(&audit(&world, &other, &[]));
    let out = dataset_push(&world, &other, "alice/MLX-audit", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));

    // Deleted, then made again by a colleague with a card of their own: the store's record does not make it ours.
    let gone = json!({"type": "dataset", "name": "mlx-audit", "organization": "alice"});
    as_alice(&world, reqwest::Method::DELETE, "/api/repos/delete", Some(gone));
    world.runtime.block_on(async {
        hub.create_dataset_repo("alice/mlx-audit", false).await.unwrap();
        let (head, _) = hub.head_of(RepoRef::dataset("alice/mlx-audit")).await.unwrap().unwrap();
        let card = [Change::Inline { path: "README.md", content: b"# Our audit\n".to_vec() }];
        hub.commit(RepoRef::dataset("alice/mlx-audit").into(), &head, "ours".into(), &card).await.unwrap();
    });
    let out = dataset_push(&world, &db, "alice/mlx-audit", &[]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out));
    assert_eq!(dataset_files(&world, "alice/mlx-audit"), [".gitattributes", "README.md"], "left as it was");
}

#[test]
fn a_colleague_s_collection_of_a_managed_title_is_refused_and_keeps_its_items() {
    let world = audit_world(0, |_| {});
    let (_dir, db) = db();
    assert_ok(&audit(&world, &db, &[]));
    let picks = ["mlx-community/tiny-q4", "lmstudio/tiny-q8"];
    let all = colleague_collection(&world, "alice", hubalign::findable::collections::ALL_TITLE, &picks);
    let theirs = colleague_collection(&world, "alice", "Aligned MLX: lmstudio", &picks[1..]);

    // The store has no public mirror: the old pass emptied every managed collection it found by title.
    for extra in [&["--dry-run"][..], &[][..]] {
        let out = findable(&world.endpoint(), &db, extra);
        assert_eq!(out.status.code(), Some(4), "{}", text(&out));
        let said = text(&out);
        assert!(said.contains(&all) && said.contains(&theirs), "both named: {said}");
        assert!(said.contains("hubalign did not make") && said.contains("--target-namespace"), "{said}");
        assert!(said.contains("2 refused as not ours"), "{said}");
    }
    assert_eq!(items_of(&world, &all), picks);
    assert_eq!(items_of(&world, &theirs), &picks[1..]);
}

#[test]
fn a_collection_of_another_namespace_in_the_listing_is_ignored() {
    let world = audit_world(0, |_| {});
    let (_dir, db) = db();
    assert_ok(&audit(&world, &db, &[]));
    // alice is a member of alice-org; its collection of the managed title turns up in the listing of alice's.
    let foreign = colleague_collection(
        &world,
        "alice-org",
        hubalign::findable::collections::ALL_TITLE,
        &["mlx-community/tiny-q4"],
    );
    let shown = as_alice(&world, reqwest::Method::GET, &format!("/api/collections/{foreign}"), None);
    let listed = move |body: &mut Value| body.as_array_mut().unwrap().push(shown.clone());
    let rule: proxy::Rule = Box::new(move |req| {
        (req.path == "/api/collections" && req.query.contains("owner=alice"))
            .then(|| Reply::Edit(vec![], Some(Box::new(listed.clone()))))
    });
    let proxy = proxy::start(&world, vec![rule]);
    let out = findable(&proxy.base_url, &db, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(items_of(&world, &foreign), ["mlx-community/tiny-q4"], "left as it was");
    assert_eq!(proxy.count(&format!("/api/collections/{foreign}")), 0, "never asked about, let alone written");
}

/// A collection an earlier release made (its description word for word, no marker, no record in a new
/// store) is still the service's after an upgrade: kept, and recorded.
#[test]
fn a_collection_an_earlier_release_made_is_kept_after_an_upgrade() {
    use hubalign::findable::collections::{ALL_TITLE, EARLIER_DESCRIPTION};
    let world = audit_world(0, |_| {});
    let (_dir, db) = db();
    assert_ok(&audit(&world, &db, &[]));
    let made = json!({"title": ALL_TITLE, "namespace": "alice", "description": EARLIER_DESCRIPTION});
    let slug =
        as_alice(&world, reqwest::Method::POST, "/api/collections", Some(made))["slug"].as_str().unwrap().to_owned();
    let item = json!({"item": {"type": "model", "id": "mlx-community/tiny-q4"}});
    as_alice(&world, reqwest::Method::POST, &format!("/api/collections/{slug}/items"), Some(item));
    let out = findable(&world.endpoint(), &db, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("1 removed, 0 mirrors gone from the Hub, 0 refused"), "kept as ours: {}", text(&out));
    let store = world.runtime.block_on(hubalign::store::Store::open(&db)).unwrap();
    let owned = world.runtime.block_on(store.owns(hubalign::store::owned::OwnedKind::Collection, &slug)).unwrap();
    assert!(owned, "recorded");
}
