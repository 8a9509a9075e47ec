//! The crawler against a Hub that lies in its headers, its pagination, its bodies and its ids.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::hostile_world;
use super::proxy::{self, Reply, on};
use super::run_measured;
use crate::audit::world::db;
use crate::sim::world::ALICE;
use crate::support::{hubalign, run, stdout};

fn audit(endpoint: &str, db: &Path, extra: &[&str]) -> super::Measured {
    run_measured(
        hubalign()
            .args(["audit", "--endpoint", endpoint, "--db", db.to_str().unwrap(), "--concurrency", "2"])
            .args(extra)
            .env("HF_TOKEN", ALICE)
            .env("RUST_LOG", "warn"),
    )
}

fn runs(db: &Path) -> Vec<hubalign::store::queries::RunRow> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async { hubalign::store::Store::open(db).await.unwrap().runs(10).await.unwrap() })
}

#[cfg(feature = "system-tests")]
#[test]
fn waits_of_u64_max_or_a_day_end_the_run_as_interrupted_and_the_next_run_resumes() {
    let world = hostile_world();
    let max = u64::MAX.to_string();
    let day = "86400".to_owned();
    let too_many = |headers: Vec<(&'static str, String)>| move || Reply::Fixed(429, headers.clone(), b"{}".to_vec());
    let variants: Vec<(&str, proxy::Rule, &str)> = vec![
        ("Retry-After u64::MAX", on("/api/models", 0, too_many(vec![("retry-after", max.clone())])), &max),
        (
            "RateLimit reset u64::MAX",
            on("/api/models", 0, too_many(vec![("ratelimit", format!("\"api\";r=0;t={max}"))])),
            &max,
        ),
        ("Retry-After a day", on("/api/models", 0, too_many(vec![("retry-after", day.clone())])), &day),
        (
            "a 200 whose RateLimit closes the window for u64::MAX seconds",
            on("/api/models", 0, || Reply::Edit(vec![("ratelimit", format!("\"api\";r=0;t={}", u64::MAX))], None)),
            &max,
        ),
    ];
    for (name, rule, seconds) in variants {
        let proxy = proxy::start(&world, vec![rule]);
        let (_dir, db) = db();
        let started = Instant::now();
        let out = audit(&proxy.base_url, &db, &[]);
        let took = started.elapsed();
        assert_eq!(out.code, Some(4), "{name}: no panic, a failure exit: {}", out.output);
        assert!(took < Duration::from_secs(30), "{name}: took {took:?}");
        let run = &runs(&db)[0];
        assert_eq!(run.status, "interrupted", "{name}: {run:?}");
        let error = run.error.clone().unwrap_or_default();
        assert!(
            error.contains(&format!("asked to wait {seconds} s")) && error.contains("360 s allowed"),
            "{name}: {error}"
        );
        assert!(out.output.contains("interrupted"), "{name}: {}", out.output);

        // The Hub behaves again: the next run resumes and finishes.
        let out = audit(&world.endpoint(), &db, &[]);
        assert_eq!(out.code, Some(0), "{name}: {}", out.output);
        assert_eq!(runs(&db)[0].status, "finished", "{name}");
    }
}

#[cfg(feature = "system-tests")]
#[test]
fn pagination_that_loops_or_leaves_the_hub_ends_the_listing() {
    let world = hostile_world();
    let cases: Vec<(&str, proxy::Rule, &str)> = vec![
        (
            "a page that links to itself",
            Box::new(|req: &proxy::Req| {
                req.path
                    .ends_with("/api/models")
                    .then(|| Reply::Edit(vec![("link", format!("</api/models?{}>; rel=\"next\"", req.query))], None))
            }),
            "points back to a page already read",
        ),
        (
            "a page that links to another host",
            on("/api/models", 0, || {
                Reply::Edit(vec![("link", "<http://evil.example/api/models?c=2>; rel=\"next\"".into())], None)
            }),
            "leaves the Hub's origin",
        ),
    ];
    for (name, rule, why) in cases {
        let proxy = proxy::start(&world, vec![rule]);
        let (_dir, db) = db();
        let started = Instant::now();
        let out = audit(&proxy.base_url, &db, &[]);
        assert_eq!(out.code, Some(4), "{name}: {}", out.output);
        assert!(started.elapsed() < Duration::from_secs(30), "{name}: stalled");
        assert!(proxy.count("/api/models") <= 2, "{name}: {} listing requests", proxy.count("/api/models"));
        let run = &runs(&db)[0];
        assert_eq!(run.status, "failed", "{name}");
        assert!(run.error.as_deref().unwrap_or("").contains(why), "{name}: {run:?}");
    }
}

#[cfg(feature = "system-tests")]
#[test]
fn an_endless_listing_body_is_cut_at_its_cap_with_memory_bounded() {
    let world = hostile_world();
    let proxy = proxy::start(&world, vec![on("/api/models", 0, || Reply::Endless)]);
    let (_dir, db) = db();
    let out = audit(&proxy.base_url, &db, &[]);
    assert_eq!(out.code, Some(4), "{}", out.output);
    let error = runs(&db)[0].error.clone().unwrap_or_default();
    assert!(error.contains("larger than the 67108864-byte cap"), "{error}");
    // The cap is 64 MiB: the listing buffer, its one reallocation and the process itself, nowhere near the
    // gigabytes an unbounded read reaches before the allocator gives up.
    assert!(out.max_rss < 400 << 20, "peak RSS {} MiB", out.max_rss >> 20);
}

fn evil_entries(listing: &mut Value) {
    let sha = "0123456789abcdef0123456789abcdef01234567";
    let items = listing.as_array_mut().unwrap();
    items.push(json!({"id": "evil/\u{1b}[2J\u{1b}[31mx\nforged row", "sha": sha, "siblings": []}));
    items.push(json!({"id": "evil/paths", "sha": sha, "siblings": [{"rfilename": "\u{1b}]0;owned\u{7}.safetensors"}]}));
    items.push(json!({"id": "evil/../../etc", "sha": sha, "siblings": []}));
}

#[cfg(feature = "system-tests")]
#[test]
fn control_characters_in_listed_ids_never_reach_a_terminal_a_url_or_a_path() {
    let world = hostile_world();
    let proxy = proxy::start(&world, vec![on("/api/models", 0, || Reply::Edit(vec![], Some(Box::new(evil_entries))))]);
    let (dir, db) = db();
    let out = audit(&proxy.base_url, &db, &[]);
    assert_eq!(out.code, Some(0), "{}", out.output);
    let clean = |what: &str, text: &str| {
        assert!(!text.contains(['\u{1b}', '\u{7}']), "{what} prints a raw control character:\n{text:?}");
        assert!(!text.lines().any(|l| l.starts_with("forged row")), "{what} lets a newline forge a row:\n{text}");
    };
    clean("audit", &out.output);
    assert!(out.output.contains("invalid listing entry"), "{}", out.output);
    assert_eq!(proxy.count("evil"), 0, "an invalid id reached a URL");
    assert!(super::files_named(dir.path(), "evil").is_empty());

    let store = run(&["report", "--db", db.to_str().unwrap(), "--shards", "--format", "json"]);
    assert!(!stdout(&store).contains("evil"), "invalid entries are never probed");
    let d = db.to_str().unwrap();
    for view in ["--by-publisher", "--by-writer", "--affected", "--shards"] {
        for format in ["table", "json", "csv"] {
            let out = run(&["report", "--db", d, view, "--format", format]);
            clean(&format!("report {view} --format {format}"), &stdout(&out));
        }
    }
    let repos = {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async { hubalign::store::Store::open(&db).await.unwrap().repos().await.unwrap() })
    };
    let invalid: Vec<_> = repos.iter().filter(|r| r.state == "invalid_listing").collect();
    assert_eq!(invalid.len(), 3, "{repos:?}");
    for r in &invalid {
        assert!(!r.id.contains(['\u{1b}', '\u{7}', '\n']), "stored escaped: {:?}", r.id);
        assert!(r.last_error.as_deref().is_some_and(|e| !e.is_empty()), "with the reason: {r:?}");
    }
    assert!(invalid.iter().any(|r| r.id == "evil/\\u{1b}[2J\\u{1b}[31mx\\u{a}forged row"), "{invalid:?}");
}

#[cfg(feature = "system-tests")]
#[test]
fn an_endless_tree_body_fails_the_download_at_its_cap() {
    let world = hostile_world();
    let proxy = proxy::start(&world, vec![on("/api/models/mlx-community/tiny-q4/tree/", 0, || Reply::Endless)]);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("a.db");
    let out = run_measured(
        hubalign()
            .args(["repack", "mlx-community/tiny-q4", "--endpoint", &proxy.base_url, "--token", ALICE])
            .args(["--db", db.to_str().unwrap(), "--target-namespace", "alice", "--verify-device", "cpu"])
            .arg("--python")
            .arg(crate::support::python()),
    );
    assert_eq!(out.code, Some(4), "{}", out.output);
    assert!(out.output.contains("larger than the 16777216-byte cap"), "{}", out.output);
    assert!(out.max_rss < 300 << 20, "peak RSS {} MiB", out.max_rss >> 20);
}

/// `hubalign webhook list` against a Hub whose answer carries terminal escapes in every field, then one that
/// never ends: the first is printed escaped, the second is cut at its cap and fails naming the endpoint.
#[test]
fn a_hostile_webhook_listing_never_reaches_the_terminal_raw() {
    let world = hostile_world();
    let evil = json!([{"id": "6390e855e30d9209411de93b\u{1b}[2J", "url": "https://x.example/\u{1b}]0;owned\u{7}",
        "watched": [{"type": "org", "name": "mlx\u{1b}[31m"}], "domains": ["repo"], "disabled": false}]);
    let body = serde_json::to_vec(&evil).unwrap();
    let proxy =
        proxy::start(&world, vec![on("/api/settings/webhooks", 0, move || Reply::Fixed(200, vec![], body.clone()))]);
    let out =
        hubalign().args(["webhook", "list", "--endpoint", &proxy.base_url]).env("HF_TOKEN", ALICE).output().unwrap();
    let printed = stdout(&out);
    assert!(!printed.contains('\u{1b}') && !printed.contains('\u{7}'), "{printed:?}");
    assert!(printed.contains("6390e855e30d9209411de93b"), "{printed}");

    let endless = serde_json::to_vec(&json!([{"id": "x".repeat(4 << 20), "url": "u", "watched": []}])).unwrap();
    let proxy =
        proxy::start(&world, vec![on("/api/settings/webhooks", 0, move || Reply::Fixed(200, vec![], endless.clone()))]);
    let out =
        hubalign().args(["webhook", "list", "--endpoint", &proxy.base_url]).env("HF_TOKEN", ALICE).output().unwrap();
    assert_ne!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("/api/settings/webhooks"), "{stderr}");
    assert!(stdout(&out).is_empty(), "nothing printed from a cut answer");
}
