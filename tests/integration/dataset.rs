//! `hubalign dataset write`: the audit as Parquet tables, read back by pyarrow and DuckDB as their users read
//! them, agreeing with `hubalign report`, and holding nothing the Hub does not show anyone.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use crate::audit::world::{assert_ok, audit, audit_world, db, stored_shards};
use crate::support::{hubalign, mirror, python, root, run, stdout};

/// What `tests/python/read_dataset.py` read from `dir`: per reader, per table, the rows.
pub(crate) fn read(dir: &Path) -> Value {
    let out = Command::new(python()).arg(root().join("tests/python/read_dataset.py")).arg(dir).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `report` rows as JSON (one object per line).
fn report(db: &Path, view: &[&str]) -> Vec<Value> {
    let mut args = vec!["report", "--db", db.to_str().unwrap(), "--format", "json"];
    args.extend_from_slice(view);
    stdout(&run(&args)).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[cfg(feature = "system-tests")]
#[test]
fn the_published_tables_hold_only_public_repos_and_agree_with_the_report() {
    let world = audit_world(0, |_| {});
    let (_dir, db) = db();
    assert_ok(&audit(&world, &db, &[]));
    // One mirror published, for the mirrors table.
    let out =
        crate::repack::pipeline::worker_command(&world, &db, &["repack", "mlx-community/tiny-q4"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));

    let data = tempfile::tempdir().unwrap();
    write(&db, data.path(), "ops/mlx-audit");
    let seen = read(data.path());
    // Every reader reads the same rows: datasets through the card's configs.
    assert_eq!(seen["pyarrow"], seen["duckdb"], "pyarrow and DuckDB disagree");
    assert_eq!(seen["pyarrow"], seen["datasets"], "pyarrow and datasets disagree");
    let tables = &seen["pyarrow"];

    // The store holds a private repo (the crawler's token sees it) and a gated one; neither is published,
    // nor named anywhere in the files.
    let all = stored_shards(&db);
    assert!(all.iter().any(|s| s["repo_id"] == "alice/private-q4"), "the store has the private repo");
    let public = |id: &str| !["alice/private-q4", "gemma-org/gated-q4", "old-org/disabled-q4"].contains(&id);
    let every_value = tables.to_string();
    for hidden in ["private-q4", "gated-q4", "disabled-q4"] {
        assert!(!every_value.contains(hidden), "a table names {hidden}");
    }
    // Nor in any file's bytes (the card's text; a Parquet file's uncompressed parts).
    for path in walk(data.path()) {
        let bytes = std::fs::read(&path).unwrap();
        for hidden in ["private-q4", "gated-q4", "disabled-q4"] {
            assert!(!contains(&bytes, hidden.as_bytes()), "{} names {hidden}", path.display());
        }
    }

    // Shards: exactly the report's, for public repos.
    let expected: Vec<Value> = all
        .iter()
        .filter(|s| public(s["repo_id"].as_str().unwrap()))
        .map(|s| {
            json!({"repo_id": s["repo_id"], "file": s["path"], "verdict": s["verdict"], "size": s["size"],
                   "tensors": s["tensors"], "misaligned_bytes": s["misaligned_bytes"], "data_start": s["data_start"]})
        })
        .collect();
    let got: Vec<Value> = tables["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            json!({"repo_id": s["repo_id"], "file": s["file"], "verdict": s["verdict"], "size": s["size"],
                   "tensors": s["tensors"], "misaligned_bytes": s["misaligned_bytes"], "data_start": s["data_start"]})
        })
        .collect();
    assert!(!got.is_empty());
    assert_eq!(got, expected);
    assert!(tables["shards"].as_array().unwrap().iter().all(|s| s["snapshot_date"] == "2026-12-04"));

    // Publishers: the report's sums, for every namespace without a hidden repo; alice's without its private one.
    let by_publisher: BTreeMap<String, Value> = report(&db, &["--by-publisher"])
        .into_iter()
        .map(|p| (p["namespace"].as_str().unwrap().to_owned(), p))
        .collect();
    let published: BTreeMap<String, &Value> = tables["publishers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["namespace"].as_str().unwrap().to_owned(), p))
        .collect();
    assert!(!published.contains_key("alice") && !published.contains_key("gemma-org"), "{published:?}");
    for (namespace, row) in &published {
        let reported = &by_publisher[namespace];
        for column in [
            "repos_audited",
            "repos_affected",
            "shards_aligned",
            "shards_header_pad",
            "shards_relayout",
            "shards_invalid",
            "misaligned_tensors",
            "misaligned_bytes",
        ] {
            assert_eq!(row[column], reported[column], "{namespace}.{column}");
        }
    }
    assert_eq!(
        published.len(),
        by_publisher.keys().filter(|n| !["alice", "gemma-org", "old-org"].contains(&n.as_str())).count()
    );

    // Repos: one row per public audited repo, with its mirror.
    let repos = tables["repos"].as_array().unwrap();
    let tiny = repos.iter().find(|r| r["repo_id"] == "mlx-community/tiny-q4").unwrap();
    assert_eq!((&tiny["state"], &tiny["mirror"]), (&json!("mirrored"), &json!(mirror("mlx-community/tiny-q4"))));
    assert!(repos.iter().all(|r| public(r["repo_id"].as_str().unwrap())));
    let affected = report(&db, &["--affected"]);
    let affected_public: Vec<&Value> = affected.iter().filter(|r| public(r["repo_id"].as_str().unwrap())).collect();
    assert_eq!(repos.iter().filter(|r| r["affected"] == true).count(), affected_public.len());

    // Mirrors: the one published, with its check's record.
    let mirrors = tables["mirrors"].as_array().unwrap();
    assert_eq!(mirrors.len(), 1, "{mirrors:?}");
    assert_eq!(mirrors[0]["source"], "mlx-community/tiny-q4");
    assert_eq!(mirrors[0]["check_device"], "cpu");
    assert!(mirrors[0]["check_tensors"].as_i64().unwrap() > 0);

    // The card: a config per table, each column described.
    let card = std::fs::read_to_string(data.path().join("README.md")).unwrap();
    for table in ["repos", "shards", "mirrors", "publishers"] {
        assert!(card.contains(&format!("- config_name: {table}\n  data_files: \"{table}/*/*.parquet\"")), "{card}");
        for column in seen["schema"][table].as_object().unwrap().keys() {
            assert!(card.contains(&format!("| `{column}` |")), "{table}.{column} undocumented");
        }
    }
    assert!(card.contains("hf://datasets/ops/mlx-audit/publishers/*/*.parquet"), "{card}");
}

/// `hubalign dataset write` of `db`'s snapshot of 2026-12-04 into `out`, its card naming `repo`.
pub(crate) fn write(db: &Path, out: &Path, repo: &str) {
    let done = hubalign()
        .args(["dataset", "write", "--db", db.to_str().unwrap(), "--out", out.to_str().unwrap()])
        .args(["--date", "2026-12-04", "--repo", repo])
        .output()
        .unwrap();
    assert_eq!(done.status.code(), Some(0), "{}", String::from_utf8_lossy(&done.stderr));
}

/// The files of the dataset written in `dir`, by path, as a repo holding them lists them (with the
/// `.gitattributes` its creation wrote), sorted.
fn as_on_the_hub(dir: &Path) -> Vec<String> {
    let mut files: Vec<String> =
        walk(dir).iter().map(|p| p.strip_prefix(dir).unwrap().to_string_lossy().into_owned()).collect();
    files.push(".gitattributes".to_owned());
    files.sort();
    files
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() { out.extend(walk(&path)) } else { out.push(path) }
    }
    out
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// `value` with what differs between two runs over equal worlds masked: commit ids (40 hex digits) and
/// publication times.
pub(crate) fn mask_run_specific(value: &mut Value) {
    match value {
        Value::String(s) if s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit()) => *s = "<commit>".into(),
        Value::Array(items) => items.iter_mut().for_each(mask_run_specific),
        Value::Object(fields) => {
            for (key, field) in fields.iter_mut() {
                if key == "published_at" {
                    *field = Value::String("<time>".into());
                } else {
                    mask_run_specific(field);
                }
            }
        }
        _ => {}
    }
}

#[cfg(feature = "system-tests")]
#[test]
fn the_official_clients_publish_the_tables_to_the_simulator_and_read_them_back_from_it() {
    let world = audit_world(0, |_| {});
    let (_dir, db) = db();
    assert_ok(&audit(&world, &db, &[]));
    let data = tempfile::tempdir().unwrap();
    write(&db, data.path(), "alice/mlx-audit");

    let (scratch, home) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let endpoint = world.endpoint();
    let out = Command::new(python())
        .arg(root().join("tests/python/dataset_on_hub.py"))
        .args([endpoint.as_str(), crate::sim::world::ALICE, "alice/mlx-audit"])
        .arg(data.path())
        .arg(scratch.path())
        .env("HF_ENDPOINT", &endpoint)
        .env("HF_HOME", home.path())
        .env("HF_HUB_DISABLE_TELEMETRY", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let hub: Value = serde_json::from_slice(&out.stdout).unwrap();

    // The Hub holds the dataset as written, lists it among datasets and not among models.
    let written = as_on_the_hub(data.path());
    let files: Vec<String> = serde_json::from_value(hub["files"].clone()).unwrap();
    assert_eq!(files, written);
    assert_eq!(
        (&hub["listed"], &hub["in_models"], &hub["info_id"]),
        (&json!(true), &json!(false), &json!("alice/mlx-audit"))
    );
    // A model of the same name is another repo: none exists.
    let model = format!("{endpoint}/api/models/alice/mlx-audit");
    let asked = reqwest::Client::new().get(&model).bearer_auth(crate::sim::world::ALICE);
    let status = world.runtime.block_on(async { asked.send().await.unwrap().status() });
    assert_eq!(status, reqwest::StatusCode::NOT_FOUND);

    // What the Hub serves reads as what was written, with each reader; datasets reads it from the Hub itself.
    let here = read(data.path());
    let there = read(Path::new(hub["copy"].as_str().unwrap()));
    assert_eq!(there["pyarrow"], here["pyarrow"]);
    assert_eq!(there["duckdb"], here["duckdb"]);
    for table in ["repos", "shards", "publishers"] {
        let rows = here["pyarrow"][table].as_array().unwrap().len();
        assert!(rows > 0, "{table}");
        assert_eq!(hub["rows"][table], json!(rows), "datasets.load_dataset of {table} from the Hub");
    }
    // No mirror yet: the card has no config for the empty table (one matching no file breaks the viewer), and
    // asking for it says that config does not exist rather than failing on a file.
    assert!(here["pyarrow"]["mirrors"].as_array().unwrap().is_empty());
    let card = std::fs::read_to_string(data.path().join("README.md")).unwrap();
    assert!(!card.contains("config_name: mirrors") && card.contains("config_name: repos"), "{card}");
    let said = hub["rows"]["mirrors"].as_str().unwrap_or_default();
    assert!(said.contains("mirrors") && said.contains("not found"), "{said}");
}

/// `dataset push` of `db`'s snapshot of 2026-12-04 to `alice/mlx-audit`; its printed line.
fn push(world: &crate::sim::world::World, db: &Path) -> String {
    push_of(world, db, "2026-12-04")
}

/// `dataset push` of `db`'s snapshot of `date` to `alice/mlx-audit`; its printed line.
fn push_of(world: &crate::sim::world::World, db: &Path, date: &str) -> String {
    let endpoint = world.endpoint();
    let out = hubalign()
        .args(["dataset", "push", "--db", db.to_str().unwrap(), "--repo", "alice/mlx-audit", "--date", date])
        .args(["--endpoint", endpoint.as_str(), "--token", crate::sim::world::ALICE])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{said}");
    said
}

#[test]
fn a_push_commits_only_the_files_that_changed_and_nothing_when_nothing_did() {
    let world = audit_world(0, |_| {});
    let (_dir, db) = db();
    assert_ok(&audit(&world, &db, &[]));
    let sim = &world.hub.as_ref().unwrap().sim;

    // The first push creates the dataset repo and writes every file.
    let first = push(&world, &db);
    assert!(first.contains("deleted, 0 unchanged"), "{first}");
    // Again, with nothing changed: no commit.
    sim.counters.reset();
    let again = push(&world, &db);
    assert!(again.contains("unchanged") && again.contains("nothing committed"), "{again}");
    assert_eq!(sim.counters.snapshot().requests.get("commit"), None, "no commit request");

    // One repo changes (its shard repaired, as a new commit): only its publisher's parts and the card go.
    let repo = sim.config.root.join("models/mlx-community/tiny-q4");
    let fixed = tempfile::tempdir().unwrap();
    let out = run(&["fix", repo.join("model.safetensors").to_str().unwrap(), "--out", fixed.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    std::fs::copy(fixed.path().join("model.safetensors"), repo.join("model.safetensors")).unwrap();
    assert_eq!(world.runtime.block_on(sim.rescan()).unwrap(), ["mlx-community/tiny-q4"]);
    assert_ok(&audit(&world, &db, &[]));
    let before = tree(&world);
    let third = push(&world, &db);
    let after = tree(&world);
    let changed: Vec<&String> = after.keys().filter(|p| before.get(*p) != after.get(*p)).collect();
    let part =
        |table: &str| hubalign::dataset::part_path(table, "2026-12-04", hubalign::dataset::bucket("mlx-community"));
    let allowed = [part("repos"), part("shards"), part("publishers"), "README.md".to_owned()];
    assert!(changed.contains(&&part("repos")) && changed.contains(&&part("shards")), "{changed:?}");
    assert!(changed.iter().all(|p| allowed.contains(p)), "only mlx-community's parts and the card: {changed:?}");
    assert!(third.contains("commit ") && third.contains(&format!("{} files written", changed.len())), "{third}");

    // What the Hub serves is, file for file, what `dataset write` writes of the same store.
    let data = tempfile::tempdir().unwrap();
    write(&db, data.path(), "alice/mlx-audit");
    let endpoint = world.endpoint();
    let client = reqwest::Client::new();
    for path in walk(data.path()) {
        let rel = path.strip_prefix(data.path()).unwrap().to_string_lossy().into_owned();
        let url = format!("{endpoint}/datasets/alice/mlx-audit/resolve/main/{rel}");
        let asked = client.get(&url).bearer_auth(crate::sim::world::ALICE);
        let served = world.runtime.block_on(async { asked.send().await.unwrap().bytes().await.unwrap() });
        assert_eq!(served.as_ref(), std::fs::read(&path).unwrap().as_slice(), "{rel}");
    }
    // The commit touched the changed publisher's parts and the card, and no other publisher's part.
    let commits = format!("{endpoint}/api/datasets/alice/mlx-audit/commits/main");
    let asked = client.get(&commits).bearer_auth(crate::sim::world::ALICE);
    let listed: Value = world.runtime.block_on(async { asked.send().await.unwrap().json().await.unwrap() });
    assert_eq!(listed.as_array().unwrap().len(), 3, "the repo's creation and two pushes: {listed}");
    assert!(sim.counters.snapshot().xet_bytes_received > 0, "the parts went up through Xet");

    // Every lmstudio repo turns private (its namespace alone in its bucket): the day's parts of that bucket
    // go, and the repo then holds exactly what `dataset write` writes.
    for id in ["lmstudio/tiny-q8", "lmstudio/tiny-mixed"] {
        sim.repos_mut().get_mut(id).unwrap().meta.private = true;
    }
    assert_ok(&audit(&world, &db, &[]));
    let fourth = push(&world, &db);
    assert!(fourth.contains(", 3 deleted,"), "{fourth}");
    write(&db, data.path(), "alice/mlx-audit");
    let written = as_on_the_hub(data.path());
    assert_eq!(tree(&world).into_keys().collect::<Vec<_>>(), written, "the write removed the same parts");
    assert!(!written.iter().any(|p| p.ends_with("part-08.parquet")), "{written:?}");
}

/// A repo public on one day and private the next is named by no file the dataset repo still holds: the
/// tables that name repos keep the newest day only, and earlier days stay as publishers' sums.
#[cfg(feature = "system-tests")]
#[test]
fn a_repo_that_leaves_the_public_is_named_by_no_published_file_after_the_next_snapshot() {
    let world = audit_world(0, |_| {});
    let (_dir, db) = db();
    assert_ok(&audit(&world, &db, &[]));
    let sim = &world.hub.as_ref().unwrap().sim;
    push_of(&world, &db, "2026-12-03");
    let day_one = tree(&world);
    let gone = "lmstudio/tiny-q8";
    let bucket = hubalign::dataset::bucket("lmstudio");
    let named = hubalign::dataset::part_path("repos", "2026-12-03", bucket);
    assert!(day_one.contains_key(&named), "day one names it in {named}: {day_one:?}");

    sim.repos_mut().get_mut(gone).unwrap().meta.private = true;
    assert_ok(&audit(&world, &db, &[]));
    let said = push_of(&world, &db, "2026-12-04");
    let files: Vec<String> = tree(&world).into_keys().collect();
    let earlier: Vec<&String> = files.iter().filter(|p| p.contains("/2026-12-03/")).collect();
    assert!(!earlier.is_empty(), "the sums of day one stay: {files:?}");
    assert!(earlier.iter().all(|p| p.starts_with("publishers/")), "only the sums of day one: {earlier:?}");
    assert!(said.contains("deleted"), "{said}");

    // What stays names the repo nowhere: each file read back from the Hub, by pyarrow and DuckDB.
    let copy = tempfile::tempdir().unwrap();
    let client = reqwest::Client::new();
    for rel in files.iter().filter(|p| p.ends_with(".parquet") || *p == "README.md") {
        let url = format!("{}/datasets/alice/mlx-audit/resolve/main/{rel}", world.endpoint());
        let asked = client.get(&url).bearer_auth(crate::sim::world::ALICE);
        let bytes = world.runtime.block_on(async { asked.send().await.unwrap().bytes().await.unwrap() });
        let path = copy.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
    let read = read(copy.path()).to_string();
    assert!(!read.contains(gone), "{read}");
    assert!(read.contains("lmstudio/tiny-mixed"), "the rest is still there: {read}");

    // A snapshot older than the newest day would delete that day's tables: refused, nothing written.
    let before = tree(&world);
    let out = hubalign()
        .args(["dataset", "push", "--db", db.to_str().unwrap(), "--repo", "alice/mlx-audit", "--date", "2026-12-03"])
        .args(["--endpoint", world.endpoint().as_str(), "--token", crate::sim::world::ALICE])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{said}");
    assert!(said.contains("holds 2026-12-04, newer than the snapshot's 2026-12-03"), "{said}");
    assert_eq!(tree(&world), before);

    // `dataset write` into a directory of both days does the same.
    let data = tempfile::tempdir().unwrap();
    let day = |date: &str| {
        let done = hubalign()
            .args(["dataset", "write", "--db", db.to_str().unwrap(), "--out", data.path().to_str().unwrap()])
            .args(["--date", date])
            .output()
            .unwrap();
        assert_eq!(done.status.code(), Some(0), "{}", String::from_utf8_lossy(&done.stderr));
    };
    day("2026-12-03");
    day("2026-12-04");
    assert!(!data.path().join("repos/2026-12-03").read_dir().unwrap().any(|_| true), "day one's repos removed");
    assert!(data.path().join("publishers/2026-12-03").read_dir().unwrap().any(|_| true), "day one's sums kept");
}

/// The dataset repo's files on the Hub: path → the oid its tree names (the LFS oid where there is one).
fn tree(world: &crate::sim::world::World) -> BTreeMap<String, String> {
    let url = format!("{}/api/datasets/alice/mlx-audit/tree/main?recursive=true", world.endpoint());
    let asked = reqwest::Client::new().get(&url).bearer_auth(crate::sim::world::ALICE);
    let listed: Value = world.runtime.block_on(async { asked.send().await.unwrap().json().await.unwrap() });
    let files = listed.as_array().unwrap().iter().filter(|e| e["type"] == "file");
    files
        .map(|e| {
            let oid = e["lfs"]["oid"].as_str().or(e["oid"].as_str()).unwrap_or_default();
            (e["path"].as_str().unwrap().to_owned(), oid.to_owned())
        })
        .collect()
}
