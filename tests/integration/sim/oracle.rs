//! The official client as the oracle for hubalign's writes: each operation made by `huggingface_hub`
//! (`tests/python/write_oracle.py`) and by hubalign's client against the same simulator, both recorded by
//! its journal and compared request by request. Every difference must stand in `docs/HUB_REQUESTS.md` with
//! its reason, and every difference there must still be one.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use hubalign::hub::commit::{Message, WriteTo};
use hubalign::hub::retry::RetryPolicy;
use hubalign::hub::webhooks::Watched;
use hubalign::hub::{HubClient, HubConfig, Token};
use hubalign::repack::upload;
use serde_json::Value;

use super::world::{ALICE, World, populate, start_on};
use crate::support::{python, root};

/// The official client's new repo, and hubalign's; both in alice's namespace.
const OFFICIAL: &str = "alice/oracle-official";
const OURS: &str = "alice/oracle-ours";
/// A repo alice may not write to: it gets a pull request and a discussion from each.
const SOURCE: &str = "mlx-community/tiny-q4";

type Journal = BTreeMap<String, Vec<Value>>;

/// What `huggingface_hub` asked, by operation.
fn official(world: &World) -> Journal {
    let home = tempfile::tempdir().unwrap();
    let out = Command::new(python())
        .arg(root().join("tests/python/write_oracle.py"))
        .args([OFFICIAL, SOURCE])
        .env("HF_ENDPOINT", world.endpoint())
        .env("HF_TOKEN", ALICE)
        .env("HF_HOME", home.path())
        .env("HF_HUB_DISABLE_TELEMETRY", "1")
        .env("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        .env_remove("HF_HUB_OFFLINE")
        .output()
        .unwrap();
    assert!(out.status.success(), "write_oracle.py failed:\n{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A file with `bytes`, for hubalign's upload, which reads files.
fn file(dir: &std::path::Path, name: &str, bytes: &[u8]) -> upload::BundleFile {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    upload::BundleFile { rel: name.to_owned(), path, size: bytes.len() as u64 }
}

/// An upload as the mirrors and pull requests make it: preupload, Xet for what goes to LFS, one commit.
async fn upload_to(hub: &HubClient, to: WriteTo<'_>, files: Vec<upload::BundleFile>, message: Message<'_>) {
    let parent = hub.model_info(to.repo.id).await.unwrap().sha.unwrap();
    let sent = upload::send_files(hub, to, files, &[]).await.unwrap();
    upload::commit(hub, to, &parent, message, &sent.stored, &sent.inline).await.unwrap();
}

/// What hubalign's client asked, by operation: the same operations as `write_oracle.py`, in the same order.
fn ours(world: &World) -> Journal {
    let sim = &world.hub.as_ref().unwrap().sim;
    let config = HubConfig { endpoint: world.endpoint(), token: Some(Token::new(ALICE.to_owned())) };
    let hub = &HubClient::new(config, RetryPolicy::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let shard: Vec<u8> = (0..=255u8).cycle().take(256 * 4096).collect();
    let mut asked = Journal::new();
    let mut record = |name: &str, operation: &mut dyn FnMut()| {
        sim.journal.clear();
        operation();
        asked.insert(name.to_owned(), sim.journal.entries().iter().map(|a| serde_json::to_value(a).unwrap()).collect());
    };
    let rt = &world.runtime;
    let created = hubalign::hub::repos::Created::New;
    record("create", &mut || assert_eq!(rt.block_on(hub.create_private_repo(OURS)).unwrap(), created));
    record("visibility", &mut || rt.block_on(hub.set_private(OURS, false)).unwrap());
    let config = file(dir.path(), "config.json", br#"{"a": 1}"#);
    record("commit", &mut || {
        rt.block_on(upload_to(hub, OURS.into(), vec![config.clone()], "Upload config.json".into()));
    });
    let model = file(dir.path(), "model.safetensors", &shard);
    record("commit through Xet", &mut || {
        rt.block_on(upload_to(hub, OURS.into(), vec![model.clone()], "Upload model.safetensors".into()));
    });
    let reversed: Vec<u8> = shard.iter().rev().copied().collect();
    std::fs::create_dir(dir.path().join("proposed")).unwrap();
    let proposed = file(&dir.path().join("proposed"), "model.safetensors", &reversed);
    record("pull request", &mut || {
        let message = Message { summary: "Align safetensors", description: "An automated pull request." };
        rt.block_on(upload_to(hub, WriteTo::pull_request(SOURCE.into()), vec![proposed.clone()], message));
    });
    record("discussion", &mut || {
        assert!(rt.block_on(hub.open_discussion(SOURCE, "A note", "An aligned copy.")).unwrap() > 0);
    });
    record("collection", &mut || {
        rt.block_on(async {
            let slug = match hub.create_collection("alice", ("Our collection", "d"), false).await.unwrap() {
                hubalign::hub::collections::CollectionCreated::New(slug) => slug,
                existed => panic!("{existed:?}"),
            };
            hub.add_to_collection(&slug, OURS, "n").await.unwrap();
        });
    });
    let watched = [Watched { kind: "user".into(), name: "alice".into() }];
    record("webhook", &mut || drop(rt.block_on(hub.create_webhook("http://127.0.0.1:9/hook", &watched, "s")).unwrap()));
    record("delete", &mut || rt.block_on(hub.delete_repo(OURS)).unwrap());
    asked
}

/// A request's path with the repos and collections named by what they are, so both clients' match.
fn template(path: &str) -> String {
    let path = path.replace(OFFICIAL, "{repo}").replace(OURS, "{repo}").replace(SOURCE, "{source}");
    match path.strip_prefix("/api/collections/alice/") {
        Some(rest) => match rest.split_once('/') {
            Some((_, tail)) => format!("/api/collections/{{slug}}/{tail}"),
            None => "/api/collections/{slug}".to_owned(),
        },
        None => path,
    }
}

/// The requests of an operation that write, or fetch a token to write: reads are each client's own way of
/// finding out (hubalign reads a head it then names as the commit's parent).
fn writes(asked: &[Value]) -> BTreeMap<String, Value> {
    asked
        .iter()
        .filter(|a| a["method"] != "GET" || a["path"].as_str().unwrap().contains("xet-write-token"))
        .map(|a| (format!("{} {}", a["method"].as_str().unwrap(), template(a["path"].as_str().unwrap())), a.clone()))
        .collect()
}

/// Every difference between the two clients' requests, one line each: `operation | request | difference`.
fn differences(official: &Journal, ours: &Journal) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (operation, theirs) in official {
        let (theirs, mine) = (writes(theirs), writes(&ours[operation]));
        for request in theirs.keys().filter(|r| !mine.contains_key(*r)) {
            out.insert(format!("{operation} | {request} | only huggingface_hub sends it"));
        }
        for request in mine.keys().filter(|r| !theirs.contains_key(*r)) {
            out.insert(format!("{operation} | {request} | only hubalign sends it"));
        }
        for (request, t) in theirs.iter().filter_map(|(r, t)| Some((r, t, mine.get(r)?))).map(|(r, t, m)| (r, (t, m))) {
            let (t, m) = t;
            let set = |v: &Value, key: &str| -> BTreeSet<String> {
                v[key].as_array().into_iter().flatten().filter_map(Value::as_str).map(str::to_owned).collect()
            };
            for key in ["query", "body_keys"] {
                let (ts, ms) = (set(t, key), set(m, key));
                for k in ts.difference(&ms) {
                    out.insert(format!("{operation} | {request} | {key} `{k}` only from huggingface_hub"));
                }
                for k in ms.difference(&ts) {
                    out.insert(format!("{operation} | {request} | {key} `{k}` only from hubalign"));
                }
            }
            // `*/*` says nothing more than no `Accept` at all.
            let accept = |v: &Value| v["accept"].as_str().filter(|a| *a != "*/*").map(str::to_owned);
            for key in ["content_type"] {
                if t[key] != m[key] {
                    out.insert(format!("{operation} | {request} | {key} {} vs {}", t[key], m[key]));
                }
            }
            if accept(t) != accept(m) {
                out.insert(format!("{operation} | {request} | accept {:?} vs {:?}", accept(t), accept(m)));
            }
        }
    }
    out
}

/// The differences `docs/HUB_REQUESTS.md` lists: its table's first three cells, for each row that has a reason.
fn documented() -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(root().join("docs/HUB_REQUESTS.md")).unwrap();
    text.lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| operation") && !l.starts_with("|---"))
        .filter_map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split(" | ").map(str::trim).collect();
            let [operation, request, difference, reason] = cells[..] else { return None };
            let unquote = |s: &str| s.trim_matches('`').to_owned();
            Some((format!("{operation} | {} | {difference}", unquote(request)), reason.to_owned()))
        })
        .collect()
}

#[test]
fn hubalign_asks_the_hub_as_huggingface_hub_does_but_where_the_table_says_why() {
    let root_dir = tempfile::tempdir().unwrap();
    populate(root_dir.path());
    let world = start_on(root_dir, |_| {});
    let official = official(&world);
    let ours = ours(&world);
    assert_eq!(official.keys().collect::<Vec<_>>(), ours.keys().collect::<Vec<_>>(), "the same operations");
    for (operation, asked) in &official {
        assert!(!writes(asked).is_empty(), "{operation}: huggingface_hub's requests were recorded");
    }
    // What the Hub wants of a pull request, both clients ask: `create_pr=1` on each of its three writes.
    for asked in [&official, &ours] {
        let pr = writes(&asked["pull request"]);
        for request in [
            "POST /api/models/{source}/preupload/main",
            "GET /api/models/{source}/xet-write-token/None",
            "POST /api/models/{source}/commit/main",
        ] {
            assert_eq!(
                pr.get(request).map(|r| &r["query"]),
                Some(&serde_json::json!(["create_pr"])),
                "{request}: {pr:?}"
            );
        }
    }
    let found = differences(&official, &ours);
    let documented = documented();
    let undocumented: Vec<_> = found.iter().filter(|d| !documented.contains_key(*d)).collect();
    let gone: Vec<_> = documented.keys().filter(|d| !found.contains(*d)).collect();
    assert!(
        undocumented.is_empty() && gone.is_empty(),
        "differences not in docs/HUB_REQUESTS.md:\n{}\n\nrows of docs/HUB_REQUESTS.md that are no longer differences:\n{}",
        undocumented.iter().map(|d| format!("| {d} | |")).collect::<Vec<_>>().join("\n"),
        gone.iter().map(|d| format!("| {d} |")).collect::<Vec<_>>().join("\n"),
    );
    assert!(documented.values().all(|reason| !reason.is_empty()), "every difference has its reason");
}
