//! Mirrors people can find, and the audit published by `serve`: after each audit, the dataset pushed
//! (`--publish-dataset`), each public mirror in its source namespace's collection and the one for all
//! (`--collections`), kept in step when a mirror goes private, and one note on each source's discussion tab
//! (`--note-sources`) that its namespace can close to hear no more. Read back with the official client.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};

use hubalign::findable::collections::ALL_TITLE;
use hubalign::findable::notes::{NOTE_TITLE, NotePolicy};
use hubalign::hub::retry::RetryPolicy;
use hubalign::hub::{HubClient, HubConfig};
use serde_json::Value;

use crate::audit::world::{assert_ok, audit, audit_world, db};
use crate::repack::pipeline::worker_command;
use crate::serve::{start_serve, try_get};
use crate::sim::world::{ALICE, World};
use crate::support::{mirror, python, root, run, text};

/// The sources the standard world's worker mirrors publicly (under `alice`), in order.
const MIRRORED: [&str; 4] =
    ["lmstudio/tiny-mixed", "lmstudio/tiny-q8", "mlx-community/tiny-q4", "mlx-community/tiny-sharded"];

/// The items of the collection titled `title` under `alice`, as alice reads them (she sees private repos
/// too, so an item only hidden from others still counts); `None` if there is no such collection.
fn items(world: &World, title: &str) -> Option<BTreeSet<String>> {
    let endpoint = world.endpoint();
    let get = |url: String| {
        world.runtime.block_on(async {
            let sent = reqwest::Client::new().get(url).bearer_auth(ALICE).send().await.ok()?;
            sent.status().is_success().then_some(())?;
            sent.json::<Value>().await.ok()
        })
    };
    let listed = get(format!("{endpoint}/api/collections?owner=alice"))?;
    let slug = listed.as_array()?.iter().find(|c| c["title"] == title)?["slug"].as_str()?.to_owned();
    let full = get(format!("{endpoint}/api/collections/{slug}"))?;
    Some(full["items"].as_array()?.iter().filter_map(|i| i["id"].as_str().map(str::to_owned)).collect())
}

/// The dataset repo's head on the simulator, if it exists.
fn dataset_head(world: &World) -> Option<String> {
    let sim = &world.hub.as_ref().unwrap().sim;
    let datasets = sim.repos_of(hubsim::kind::RepoKind::Dataset);
    datasets.get("alice/mlx-audit").and_then(|r| r.refs.get("main").cloned())
}

fn set(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|s| (*s).to_owned()).collect()
}

/// What `tests/python/findable_on_hub.py` reads with the official client.
fn read_with_the_official_client(world: &World, repos: &[&str]) -> Value {
    let home = tempfile::tempdir().unwrap();
    let endpoint = world.endpoint();
    let out = Command::new(python())
        .arg(root().join("tests/python/findable_on_hub.py"))
        .args([endpoint.as_str(), ALICE, "alice"])
        .args(repos)
        .env("HF_ENDPOINT", &endpoint)
        .env("HF_HOME", home.path())
        .env("HF_HUB_DISABLE_TELEMETRY", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The discussions titled as the note on `repo`, straight from the simulator (whoever may see the repo).
fn notes_on(world: &World, repo: &str) -> Vec<(String, bool)> {
    let sim = &world.hub.as_ref().unwrap().sim;
    let repos = sim.repos();
    repos
        .get(repo)
        .unwrap()
        .pull_requests
        .iter()
        .filter(|d| d.title == NOTE_TITLE)
        .map(|d| (d.author.clone(), d.open))
        .collect()
}

#[test]
fn serve_publishes_the_dataset_and_keeps_public_mirrors_in_collections_and_notes_each_source_once() {
    let world = audit_world(0, |_| {});
    let (_dir, db) = db();
    let endpoint = world.endpoint();
    let flags = ["--workers", "2", "--publish-dataset", "alice/mlx-audit", "--collections", "--note-sources"];
    let (_service, base) = start_serve(&endpoint, &db, 2, &flags, &[]);

    let names: Vec<String> = MIRRORED.iter().map(|s| mirror(s)).collect();
    let mirrors: Vec<&str> = names.iter().map(String::as_str).collect();
    let deadline = Instant::now() + Duration::from_secs(240);
    while items(&world, ALL_TITLE) != Some(set(&mirrors)) {
        assert!(
            Instant::now() < deadline,
            "the collection never held the mirrors: {}",
            try_get(&format!("{base}/api/jobs")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(items(&world, "Aligned MLX: lmstudio"), Some(set(&mirrors[..2])));
    assert_eq!(items(&world, "Aligned MLX: mlx-community"), Some(set(&mirrors[2..])));
    // alice's own private repo got a private mirror: in no collection, and no collection of its namespace.
    assert_eq!(items(&world, "Aligned MLX: alice"), None);

    // The service created the dataset repo and pushed to it (this test has pushed nothing). Once its head
    // holds still for a few audits, it is today's snapshot exactly: a push of the snapshot commits nothing.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let head = dataset_head(&world);
        std::thread::sleep(Duration::from_secs(5));
        if head.is_some() && head == dataset_head(&world) {
            break;
        }
        assert!(Instant::now() < deadline, "the service never settled the dataset: {head:?}");
    }
    let db_path = db.to_str().unwrap();
    let pushed = run(&[
        "dataset",
        "push",
        "--repo",
        "alice/mlx-audit",
        "--endpoint",
        &endpoint,
        "--token",
        ALICE,
        "--db",
        db_path,
    ]);
    let said = String::from_utf8_lossy(&pushed.stderr).to_string();
    assert_eq!(pushed.status.code(), Some(0), "{said}");
    assert!(said.contains("unchanged"), "the service's dataset is not today's snapshot: {said}");

    // Each source has exactly one note, by alice, and the official client reads the collections as kept.
    let deadline = Instant::now() + Duration::from_secs(60);
    while MIRRORED.iter().any(|source| notes_on(&world, source).len() != 1) {
        assert!(Instant::now() < deadline, "not every source got its note");
        std::thread::sleep(Duration::from_millis(300));
    }
    let sources = MIRRORED;
    let seen = read_with_the_official_client(&world, &sources);
    let all = &seen["collections"][ALL_TITLE];
    assert_eq!(all["items"], serde_json::json!(mirrors), "{seen}");
    assert_eq!(all["types"], serde_json::json!(["model"]));
    assert_eq!(all["notes"], serde_json::json!([hubalign::findable::collections::ITEM_NOTE]));
    assert_eq!(seen["listed_items"][ALL_TITLE], 4, "the listing shows at most four items");
    for source in &sources {
        let notes = seen["notes"][*source].as_array().unwrap();
        assert_eq!(notes.len(), 1, "{source}: {notes:?}");
        assert_eq!(
            (&notes[0]["title"], &notes[0]["author"], &notes[0]["pr"]),
            (&Value::from(NOTE_TITLE), &Value::from("alice"), &Value::from(false))
        );
    }
    let scratch = &seen["scratch"];
    assert_eq!(
        (&scratch["same_slug"], &scratch["emptied"], &scratch["deleted"]),
        (&Value::from(true), &Value::from(0), &Value::from(true)),
        "{scratch}"
    );
    assert_eq!(scratch["item"], "lmstudio/tiny-mixed");
    assert!(scratch["url"].as_str().unwrap().starts_with(&format!("{endpoint}/collections/alice/")), "{scratch}");

    // A source turning private: the next audit makes its mirror private, and it leaves every collection, as
    // its owner reads them too.
    world.hub.as_ref().unwrap().sim.repos_mut().get_mut("mlx-community/tiny-sharded").unwrap().meta.private = true;
    let deadline = Instant::now() + Duration::from_secs(60);
    while items(&world, ALL_TITLE) != Some(set(&mirrors[..3]))
        || items(&world, "Aligned MLX: mlx-community") != Some(set(&mirrors[2..3]))
    {
        assert!(Instant::now() < deadline, "the private mirror stayed in a collection");
        std::thread::sleep(Duration::from_millis(300));
    }
    let seen = read_with_the_official_client(&world, &[]);
    assert_eq!(seen["collections"]["Aligned MLX: mlx-community"]["items"], serde_json::json!([mirrors[2]]));
    assert_eq!(seen["collections"][ALL_TITLE]["items"], serde_json::json!(mirrors[..3]));

    // A mirror deleted on the Hub by hand: the store stops calling it public, so the collections keep without
    // it and the next dataset has no row of it.
    let gone = mirrors[1];
    let deleted = world.hub.as_ref().unwrap().sim.repos_mut().remove(gone);
    assert!(deleted.is_some());
    let deadline = Instant::now() + Duration::from_secs(60);
    let store = || world.runtime.block_on(hubalign::store::Store::open(&db)).unwrap();
    loop {
        let public = world.runtime.block_on(store().public_mirrors()).unwrap();
        if public.iter().all(|m| m.mirror != gone) {
            break;
        }
        assert!(Instant::now() < deadline, "the deleted mirror is still public in the store");
        std::thread::sleep(Duration::from_millis(300));
    }
    // Recorded with the reason the dashboard shows, and in no table of the next snapshot.
    let mirror_row = world.runtime.block_on(store().mirror_of(MIRRORED[1])).unwrap().unwrap();
    assert!(mirror_row.private, "{mirror_row:?}");
    assert_eq!(mirror_row.hidden_reason.as_deref(), Some(hubalign::findable::collections::GONE));
    let data = tempfile::tempdir().unwrap();
    crate::dataset::write(&db, data.path(), "alice/mlx-audit");
    let tables = crate::dataset::read(data.path());
    let listed: Vec<&str> =
        tables["pyarrow"]["mirrors"].as_array().unwrap().iter().map(|m| m["mirror"].as_str().unwrap()).collect();
    assert!(!listed.contains(&gone) && listed.contains(&mirrors[0]), "{listed:?}");
}

#[test]
fn a_source_gets_one_note_ever_and_a_namespace_that_closed_one_gets_no_more() {
    let world = audit_world(0, |_| {});
    let (_dir, db) = db();
    assert_ok(&audit(&world, &db, &[]));
    let out = worker_command(&world, &db, &["worker", "--once"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));

    let token = Some(hubalign::hub::Token::new(ALICE.to_owned()));
    let hub = HubClient::new(HubConfig { endpoint: world.endpoint(), token }, RetryPolicy::default()).unwrap();
    let policy = NotePolicy { author: "alice".into(), max_per_pass: 1 };
    let pass = || {
        world.runtime.block_on(async {
            let store = hubalign::store::Store::open(&db).await.unwrap();
            hubalign::findable::notes::post(&hub, &store, &policy).await.unwrap()
        })
    };
    // One a pass, the operator's cap, in order of source.
    let first = pass();
    assert_eq!(first.posted, ["lmstudio/tiny-mixed"], "{first:?}");
    // lmstudio closes it: lmstudio/tiny-q8 is never noted; the other namespace goes on.
    {
        let sim = &world.hub.as_ref().unwrap().sim;
        let mut repos = sim.repos_mut();
        let note =
            repos.get_mut("lmstudio/tiny-mixed").unwrap().pull_requests.iter_mut().find(|d| d.title == NOTE_TITLE);
        note.unwrap().open = false;
    }
    // mlx-community/tiny-q4 is deleted on the Hub before the next audit: the store still calls it public, the
    // Hub refuses its note for good, and it is recorded and never asked again (it takes no cap from the others).
    assert!(world.hub.as_ref().unwrap().sim.repos_mut().remove("mlx-community/tiny-q4").is_some());
    let second = pass();
    assert_eq!(second.declined, ["lmstudio"], "{second:?}");
    assert_eq!((second.posted.len(), second.refused.as_slice()), (0, &["mlx-community/tiny-q4".to_owned()][..]));
    assert_eq!(pass().posted, ["mlx-community/tiny-sharded"]);
    let done = pass();
    assert!(done.posted.is_empty() && done.failed.is_empty() && done.refused.is_empty(), "{done:?}");
    assert!(notes_on(&world, "lmstudio/tiny-q8").is_empty());
    for source in ["lmstudio/tiny-mixed", "mlx-community/tiny-sharded"] {
        assert_eq!(notes_on(&world, source).len(), 1, "{source}");
        assert_eq!(notes_on(&world, source)[0].0, "alice");
    }

    // A store that lost its records finds the notes on the Hub and posts none again.
    world.runtime.block_on(async {
        let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", db.display())).await.unwrap();
        sqlx::query("DELETE FROM source_notes").execute(&pool).await.unwrap();
        pool.close().await;
    });
    let mut found = 0;
    for _ in 0..4 {
        let again = pass();
        assert!(again.posted.is_empty(), "{again:?}");
        found += again.found;
    }
    assert!(found >= 1, "the notes were found again");
    for source in ["lmstudio/tiny-mixed", "mlx-community/tiny-sharded"] {
        assert_eq!(notes_on(&world, source).len(), 1, "{source}: posted twice");
    }
    assert!(notes_on(&world, "lmstudio/tiny-q8").is_empty());
}

/// The operator's mistakes in the publishing flags are said at start, naming the fix, before any audit.
#[test]
fn serve_refuses_at_start_a_dataset_repo_the_token_may_not_write_or_that_is_not_a_repo_id() {
    let world = audit_world(0, |_| {});
    let (_dir, db) = db();
    let endpoint = world.endpoint();
    let serve = |extra: &[&str]| {
        let mut cmd = crate::support::hubalign();
        cmd.args(["serve", "--endpoint", endpoint.as_str(), "--db", db.to_str().unwrap(), "--workers", "0"])
            .args(["--listen", "127.0.0.1:0", "--target-namespace", "alice", "--verify-device", "cpu"])
            .arg("--python")
            .arg(python())
            .args(["--token", ALICE])
            .args(extra);
        let out = cmd.output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).to_string())
    };
    let (code, said) = serve(&["--publish-dataset", "bob/audit"]);
    assert_ne!(code, Some(0));
    assert!(said.contains("--publish-dataset bob/audit") && said.contains("may not write to bob"), "{said}");
    let (code, said) = serve(&["--publish-dataset", "no-slash"]);
    assert_ne!(code, Some(0));
    assert!(said.contains("--publish-dataset no-slash") && said.contains("NAMESPACE/NAME"), "{said}");
    // Nothing was audited: the store has no run.
    let runs = world.runtime.block_on(async {
        match hubalign::store::Store::open(&db).await {
            Ok(store) => store.runs(10).await.map_or(0, |r| r.len()),
            Err(_) => 0,
        }
    });
    assert_eq!(runs, 0);
}
