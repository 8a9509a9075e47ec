//! The store on PostgreSQL, end to end: the demo's whole cycle (audit → jobs → verify → publish) through the
//! binary with `--db postgres://…` records what the same cycle records on SQLite, row for row; and a SQLite
//! store moves to PostgreSQL with `hubalign store export | import`.

use std::collections::BTreeMap;
use std::path::Path;

use hubalign_test_support::scratch::ScratchPostgres;

use crate::serve::{demo_first_cycle, get};
use crate::support::hubalign;

/// A database of its own on the test process's scratch server.
pub(crate) fn postgres_url() -> String {
    ScratchPostgres::shared()
        .and_then(hubalign_test_support::scratch::ScratchPostgres::database)
        .expect("a scratch PostgreSQL server (tests/run.sh installs it)")
}

/// Runs `hubalign demo` on `db` in `dir` until its first cycle is done (the report printed); returns its output.
fn demo_cycle(dir: &Path, db: &str) -> String {
    let (service, printed, port) = demo_first_cycle(dir, &["--db", db]);
    // Every page and API answers from this store (each query of the pages runs on this backend).
    assert!(get(&format!("http://127.0.0.1:{port}/")).contains("mlx-community"));
    let pages = [
        "/",
        "/?sort=mirrored",
        "/ns/mlx-community",
        "/ns/mlx-community?page=2",
        "/repo/mlx-community/Tiny-Llama-4bit",
        "/healthz",
        "/metrics",
        "/api/publishers",
        "/api/repos",
        "/api/repos?namespace=mlx-community&affected=true",
        "/api/repos/mlx-community/Tiny-Llama-4bit/shards",
        "/api/runs",
        "/api/jobs",
    ];
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    for page in pages {
        let status =
            rt.block_on(async { reqwest::get(format!("http://127.0.0.1:{port}{page}")).await.unwrap().status() });
        assert_eq!(status, 200, "{page} on {db}");
    }
    drop(service);
    printed
}

/// Columns whose values differ between any two runs of the same cycle: times, the simulator's address, the
/// worker's name and lease, the check's timings, and what the upload sent (Xet deduplicates against a cache).
const VOLATILE: &[&str] = &[
    "started_at",
    "finished_at",
    "created_at",
    "updated_at",
    "at",
    "last_audited_at",
    "last_modified",
    "hidden_at",
    "endpoint",
    "started_by",
    "lease_owner",
    "lease_expires_at",
    "not_before",
    "verification",
    "bytes_uploaded",
    "detail",
];

/// `hubalign store export` of `db`, as table → sorted rows without their volatile columns. The simulator's
/// commit ids differ between runs, so each is replaced by the order in which the export first names it (the
/// export's order is the store's keys, the same in both): the same commit gets the same name throughout.
fn records(db: &str) -> BTreeMap<String, Vec<String>> {
    let out = hubalign().args(["store", "export", "--db", db]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut tables: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut commits: BTreeMap<String, usize> = BTreeMap::new();
    for line in String::from_utf8(out.stdout).unwrap().lines().skip(1) {
        let mut entry: serde_json::Value = serde_json::from_str(line).unwrap();
        let row = entry["row"].as_object_mut().unwrap();
        for column in VOLATILE {
            row.remove(*column);
        }
        // History rows are numbered in the order concurrent probes and steps ended, which differs run to run.
        if ["repo_history", "job_events"].contains(&entry["table"].as_str().unwrap_or_default()) {
            entry["row"].as_object_mut().unwrap().remove("id");
        }
        let row = entry["row"].as_object_mut().unwrap();
        for value in row.values_mut() {
            if let Some(text) = value.as_str().filter(|t| t.len() == 40 && t.bytes().all(|b| b.is_ascii_hexdigit())) {
                let next = commits.len();
                *value = format!("commit#{}", commits.entry(text.to_owned()).or_insert(next)).into();
            }
        }
        tables.entry(entry["table"].as_str().unwrap().to_owned()).or_default().push(entry["row"].to_string());
    }
    for rows in tables.values_mut() {
        rows.sort();
    }
    tables
}

#[cfg(feature = "system-tests")]
#[test]
fn the_demo_cycle_on_postgres_records_what_it_records_on_sqlite() {
    let (sqlite_dir, postgres_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let sqlite = sqlite_dir.path().join("hubalign.db").to_string_lossy().into_owned();
    let postgres = postgres_url();
    let on_sqlite = demo_cycle(sqlite_dir.path(), &sqlite);
    let on_postgres = demo_cycle(postgres_dir.path(), &postgres);
    // The same report, by publisher.
    let report = |printed: &str| {
        let after = printed.split("By publisher:").nth(1).unwrap_or_default();
        after.split("Dashboard:").next().unwrap_or_default().to_owned()
    };
    assert_eq!(report(&on_postgres), report(&on_sqlite));
    let (a, b) = (records(&sqlite), records(&postgres));
    assert_eq!(
        a.keys().collect::<Vec<_>>(),
        ["audit_runs", "job_events", "jobs", "mirrors", "repo_history", "repos", "shards"]
    );
    for (table, rows) in &a {
        assert_eq!(&b[table], rows, "{table}: PostgreSQL against SQLite");
    }
    let published = a["jobs"].iter().filter(|j| j.contains(r#""state":"published""#)).count();
    assert_eq!(published, 4, "{:?}", a["jobs"]);
    // Every report view reads the same from both stores.
    for view in [
        vec!["--by-publisher"],
        vec!["--by-writer"],
        vec!["--affected"],
        vec!["--shards"],
        vec!["--repo", "lmstudio-community/Tiny-Sharded-4bit"],
    ] {
        let report = |db: &str| {
            let out = hubalign().arg("report").args(&view).args(["--format", "csv", "--db", db]).output().unwrap();
            assert!(out.status.success(), "{view:?}: {}", String::from_utf8_lossy(&out.stderr));
            // The simulator's commit ids differ between the two runs.
            let text = String::from_utf8(out.stdout).unwrap();
            text.split(',').map(|f| if f.len() == 40 { "<commit>" } else { f }).collect::<Vec<_>>().join(",")
        };
        assert_eq!(report(&postgres), report(&sqlite), "report {view:?}");
    }
    // The public dataset reads the same from both stores (commit ids and publication times apart).
    let dataset = |db: &str| {
        let dir = tempfile::tempdir().unwrap();
        let out =
            hubalign().args(["dataset", "write", "--db", db, "--date", "2026-12-04", "--out"]).arg(dir.path()).output();
        let out = out.unwrap();
        assert!(out.status.success(), "dataset write: {}", String::from_utf8_lossy(&out.stderr));
        let mut seen = crate::dataset::read(dir.path())["pyarrow"].take();
        crate::dataset::mask_run_specific(&mut seen);
        seen
    };
    let on_sqlite = dataset(&sqlite);
    assert!(
        !on_sqlite["shards"].as_array().unwrap().is_empty() && !on_sqlite["mirrors"].as_array().unwrap().is_empty()
    );
    assert_eq!(dataset(&postgres), on_sqlite, "dataset: PostgreSQL against SQLite");

    // The SQLite store moves to a fresh PostgreSQL database, and reads back the same.
    let export = sqlite_dir.path().join("store.jsonl");
    let out = hubalign().args(["store", "export", "--db", &sqlite, "--out"]).arg(&export).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let moved = postgres_url();
    let out = hubalign().args(["store", "import", "--db", &moved]).arg(&export).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("shards "), "it says what it imported");
    assert_eq!(records(&moved), a);
    let report = |db: &str| {
        hubalign().args(["report", "--by-publisher", "--format", "json", "--db", db]).output().unwrap().stdout
    };
    assert_eq!(report(&moved), report(&sqlite));
    // Importing again is refused: the store is not empty.
    let again = hubalign().args(["store", "import", "--db", &moved]).arg(&export).output().unwrap();
    assert_eq!(again.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&again.stderr).contains("import into an empty store"));
}

#[test]
fn a_database_url_with_a_password_is_never_printed_with_it() {
    // Nothing listens on port 1: the open fails, and the message names the server without the password.
    let out = hubalign().args(["report", "--db", "postgres://hubalign:hunter2@127.0.0.1:1/hubalign"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(stderr.contains("postgres://hubalign:***@127.0.0.1:1/hubalign"), "{stderr}");
    assert!(!stderr.contains("hunter2"), "{stderr}");
}
