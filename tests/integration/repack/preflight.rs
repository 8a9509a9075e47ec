//! The operator's mistake is not the job's: the checks at start stop a worker whose interpreter, token or
//! paths cannot work before any job is spent; an interpreter that breaks while jobs run holds them instead of
//! failing them, and a fixed one releases them; `doctor` says every finding; `jobs` lists and retries.

use std::path::Path;
use std::process::Output;

use super::pipeline::{jobs, worker_cmd};
use crate::audit::world::{assert_ok, audit, audit_world, db};
use crate::sim::world::{ALICE, CAROL, World};
use crate::support::{CHECK_FAILS, hubalign, python, python_for_jobs, stdout};

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `hubalign ARGS` as `worker_cmd` runs it, with `python` for the interpreter and `token` for the Hub's.
fn with(world: &World, db: &Path, token: &str, python: &Path, args: &[&str]) -> Output {
    let endpoint = world.endpoint();
    hubalign()
        .args(args)
        .args(["--endpoint", endpoint.as_str(), "--token", token, "--db", db.to_str().unwrap()])
        .args(["--target-namespace", "alice", "--verify-device", "cpu"])
        .arg("--python")
        .arg(python)
        .output()
        .unwrap()
}

/// MLX is gone: the script's record of a failed import, with no start announced.
const NO_MLX: &str = "import json; print(json.dumps({\"ok\": False, \"device\": \"cpu\", \
    \"error\": \"ModuleNotFoundError: No module named mlx\"})); raise SystemExit(1)";

fn job_count(world: &World, db: &Path) -> usize {
    world.runtime.block_on(async { hubalign::store::Store::open(db).await.unwrap().jobs().await.unwrap().len() })
}

#[test]
fn a_mistyped_python_stops_repack_worker_and_serve_at_start_and_spends_no_job() {
    let world = audit_world(0, |_| {});
    let (_dir, db) = db();
    assert_ok(&audit(&world, &db, &[]));
    world.hub.as_ref().unwrap().sim.counters.reset();
    let typo = Path::new("/nonexistent/python3");
    for args in [&["repack", "lmstudio/tiny-q8"][..], &["worker", "--once"], &["serve", "--listen", "127.0.0.1:0"]] {
        let out = with(&world, &db, ALICE, typo, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}{}", stdout(&out), stderr(&out));
        let said = stderr(&out);
        assert!(said.contains("not started") && said.contains("/nonexistent/python3"), "{said}");
        assert!(said.contains("fix: give --python"), "names the fix: {said}");
    }
    assert_eq!(job_count(&world, &db), 0, "no job was made, let alone spent");
    let counters = world.counters();
    assert_eq!((counters.requests.get("resolve"), counters.requests.get("storage")), (None, None), "{counters:?}");
}

#[cfg(feature = "system-tests")]
#[test]
fn a_token_that_cannot_publish_where_the_mirrors_go_stops_at_start() {
    let world = audit_world(0, |c| c.tokens.push("hf_dave_read:dave:alice:read".parse().unwrap()));
    let (_dir, db) = db();
    // carol is not alice and not in her organisation.
    let out = with(&world, &db, CAROL, python(), &["repack", "lmstudio/tiny-q8"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("cannot publish to alice") && stderr(&out).contains("--target-namespace carol"));
    // dave may write to alice's namespace, but his token has the read role.
    let out = with(&world, &db, "hf_dave_read", python(), &["repack", "lmstudio/tiny-q8"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("read token"), "{}", stderr(&out));
    let out = with(&world, &db, "hf_nobody", python(), &["repack", "lmstudio/tiny-q8"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("refused the token (HTTP 401)"), "{}", stderr(&out));
    assert_eq!(job_count(&world, &db), 0);
}

#[cfg(feature = "system-tests")]
#[test]
fn an_interpreter_that_loses_mlx_holds_the_job_and_a_fixed_one_publishes_it() {
    let world = audit_world(0, |_| {});
    let (dir, db) = db();
    let broken = python_for_jobs(dir.path(), NO_MLX);
    let out = with(&world, &db, ALICE, &broken, &["repack", "lmstudio/tiny-q8"]);
    assert_eq!(out.status.code(), Some(5), "needs the operator: {}{}", stdout(&out), stderr(&out));
    let job = world.runtime.block_on(async { hubalign::store::Store::open(&db).await.unwrap().jobs().await.unwrap() });
    assert_eq!(job[0].state.as_str(), "queued", "held, not failed: {job:?}");
    assert_eq!(job[0].failure_kind, Some(hubalign::job::FailureKind::NeedsOperator));
    assert_eq!(job[0].attempts, 0, "no attempt spent");
    assert!(job[0].reason.as_deref().unwrap_or("").contains("cannot import mlx"), "{:?}", job[0].reason);
    assert!(job[0].not_before > hubalign::job::unix_now(), "held for a while");

    // The same mistake, again and again, never spends the job (each start's checks pass, as they use the real
    // interpreter, so each releases the hold).
    for _ in 0..4 {
        let out = with(&world, &db, ALICE, &broken, &["repack", "lmstudio/tiny-q8"]);
        assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
    }
    // The operator fixes the interpreter: the checks pass, the hold is released, the job publishes.
    let out = worker_cmd(&world, &db, &["repack", "lmstudio/tiny-q8"]);
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    assert_eq!(jobs(&world, &db)[0].1, "published");
    let events = world.runtime.block_on(async {
        hubalign::store::Store::open(&db).await.unwrap().repo_job_events("lmstudio/tiny-q8").await.unwrap()
    });
    let held =
        events.iter().filter(|e| e.detail.as_deref().unwrap_or("").starts_with("held for the configuration")).count();
    assert_eq!(held, 5, "each hold in the job's history: {events:?}");
}

#[cfg(feature = "system-tests")]
#[test]
fn a_failing_check_is_not_published_the_job_says_why_and_jobs_retry_puts_it_back() {
    let world = audit_world(0, |_| {});
    let (dir, db) = db();
    let failing = python_for_jobs(dir.path(), CHECK_FAILS);
    let out = with(&world, &db, ALICE, &failing, &["repack", "lmstudio/tiny-mixed"]);
    assert_eq!(out.status.code(), Some(4), "{}{}", stdout(&out), stderr(&out));
    let listed = jobs(&world, &db);
    assert_eq!(listed[0].1, "failed");
    assert!(listed[0].2.as_deref().unwrap_or("").starts_with("MLX load check: ValueError: differs"), "{listed:?}");
    // The shard went up to the mirror's CAS while the bundle downloaded, so the mirror may exist, but private
    // and with nothing committed.
    let repos = world.hub.as_ref().unwrap().sim.repos();
    if let Some(mirror) = repos.get(&crate::support::mirror("lmstudio/tiny-mixed")) {
        assert!(mirror.meta.private, "an unpublished mirror stays private");
        assert!(mirror.commits.values().all(|c| !c.files.contains_key("MEI_ALIGN_MANIFEST.json")), "nothing committed");
    }
    drop(repos);

    let db_arg = db.to_str().unwrap();
    let list = hubalign().args(["jobs", "list", "--state", "failed", "--json", "--db", db_arg]).output().unwrap();
    assert_eq!(list.status.code(), Some(0), "{}", stderr(&list));
    let rows: Vec<serde_json::Value> = stdout(&list).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["repo_id"], "lmstudio/tiny-mixed");
    let table = hubalign().args(["jobs", "list", "--db", db_arg]).output().unwrap();
    assert!(stdout(&table).contains("lmstudio/tiny-mixed") && stdout(&table).contains("differs"), "{}", stdout(&table));
    let none = hubalign().args(["jobs", "list", "--state", "queued", "--db", db_arg]).output().unwrap();
    assert_eq!(stdout(&none).trim(), "no jobs");
    let bad = hubalign().args(["jobs", "list", "--state", "broken", "--db", db_arg]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2), "an unknown state is a usage error");

    let retry = hubalign().args(["jobs", "retry", "--failed", "--db", db_arg]).output().unwrap();
    assert_eq!(retry.status.code(), Some(0), "{}", stderr(&retry));
    assert!(stdout(&retry).contains("queued again"), "{}", stdout(&retry));
    assert_eq!(jobs(&world, &db)[0].1, "queued");
    let again = hubalign().args(["jobs", "retry", &rows[0]["id"].to_string(), "--db", db_arg]).output().unwrap();
    assert_eq!(again.status.code(), Some(4), "a queued job is not retried: {}", stderr(&again));
    // With a working interpreter the retried job publishes.
    let out = worker_cmd(&world, &db, &["worker", "--once", "--drain-only"]);
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    assert_eq!(jobs(&world, &db)[0].1, "published");
}

#[cfg(feature = "system-tests")]
#[test]
fn doctor_prints_every_check_with_its_fix() {
    let world = audit_world(0, |c| c.tokens.push("hf_dave_read:dave:alice:read".parse().unwrap()));
    let (_dir, db) = db();
    let good = with(&world, &db, ALICE, python(), &["doctor"]);
    assert_eq!(good.status.code(), Some(0), "{}{}", stdout(&good), stderr(&good));
    let said = stdout(&good);
    for line in [
        "[ok  ] token",
        "[ok  ] store",
        "[ok  ] work directory",
        "[ok  ] python",
        "a worker with these settings starts",
    ] {
        assert!(said.contains(line), "{line}: {said}");
    }
    assert!(said.contains("from --token (not shown)") && !said.contains(ALICE), "the token is never shown: {said}");

    let bad = with(&world, &db, "hf_dave_read", Path::new("/nonexistent/python3"), &["doctor", "--json"]);
    assert_eq!(bad.status.code(), Some(4), "{}", stderr(&bad));
    let doc: serde_json::Value = serde_json::from_str(&stdout(&bad)).unwrap();
    let checks = doc["checks"].as_array().unwrap();
    let status = |name: &str| checks.iter().find(|c| c["check"] == name).map(|c| c["status"].clone());
    assert_eq!(status("token"), Some("fail".into()), "{doc}");
    assert_eq!(status("python"), Some("fail".into()), "{doc}");
    assert_eq!(status("store"), Some("ok".into()), "every check runs whatever the others found: {doc}");
    assert!(checks.iter().all(|c| c["status"] != "fail" || c["fix"].is_string()), "each failure has its fix: {doc}");
}

/// The checks at start write the MLX script by a rename. A symlink planted at its name is replaced, and
/// what it pointed at is left as it was.
#[cfg(feature = "system-tests")]
#[test]
fn the_checks_at_start_replace_a_symlink_at_the_scripts_name() {
    let world = audit_world(0, |_| {});
    let (dir, db) = db();
    let work = db.with_extension("work");
    std::fs::create_dir_all(&work).unwrap();
    let elsewhere = dir.path().join("elsewhere.py");
    std::fs::write(&elsewhere, "kept").unwrap();
    std::os::unix::fs::symlink(&elsewhere, work.join("verify_mlx.py")).unwrap();
    let out = with(&world, &db, ALICE, python(), &["doctor"]);
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), "kept");
    let script = std::fs::symlink_metadata(work.join("verify_mlx.py")).unwrap();
    assert!(script.is_file(), "a file of its own, not the symlink");
}

#[test]
fn the_checks_at_start_print_each_failure_on_a_line_of_its_own() {
    let world = audit_world(0, |_| {});
    let (_dir, db) = db();
    // Two failures at once: carol may not publish to alice, and the interpreter is mistyped.
    let out = with(&world, &db, CAROL, Path::new("/nonexistent/python3"), &["worker", "--once"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(!said.contains("\\u{a}"), "a newline escaped instead of a line: {said}");
    let lines: Vec<&str> = said.lines().collect();
    assert!(lines.iter().any(|l| l.starts_with("error: not started")), "{said}");
    assert!(lines.iter().any(|l| l.starts_with("  token: ")), "{said}");
    assert!(lines.iter().any(|l| l.starts_with("  python: ")), "{said}");
}

#[cfg(feature = "system-tests")]
#[test]
fn a_store_of_a_newer_release_is_refused_saying_to_upgrade() {
    let world = audit_world(0, |_| {});
    let (_dir, db) = db();
    assert_ok(&audit(&world, &db, &[]));
    // A migration this release does not know, as a newer release would have recorded it.
    world.runtime.block_on(async {
        let url = format!("sqlite://{}", db.display());
        let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
        sqlx::query(
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
             VALUES (99990101000000, 'from the future', 1, x'00', 0)",
        )
        .execute(&pool)
        .await
        .unwrap();
        pool.close().await;
    });
    for args in [&["doctor"][..], &["worker", "--once"]] {
        let out = with(&world, &db, ALICE, python(), args);
        let said = format!("{}{}", stdout(&out), stderr(&out));
        assert!(said.contains("written by a newer release of hubalign"), "{args:?}: {said}");
        assert!(said.contains("upgrade hubalign"), "{args:?}: {said}");
        assert!(!said.contains("check that the database answers"), "{args:?}: {said}");
    }
}
