//! The JSON API, judged by code that is not the service's: every answer validated by `jsonschema` against
//! `deploy/openapi.json`, page by page, and its figures compared with sums a Python script computes from the
//! store's raw tables with SQL of its own (`tests/python/check_api.py`).

use std::time::{Duration, Instant};

use crate::audit::world::{audit_world, db};
use crate::serve::{get, start_serve, try_get};
use crate::support::{python, root, text};

#[cfg(feature = "system-tests")]
#[test]
fn every_api_answer_matches_the_document_and_the_raw_tables() {
    let world = audit_world(6, |_| {});
    let (_dir, db) = db();
    let endpoint = world.endpoint();
    let (_service, base) = start_serve(&endpoint, &db, 86_400, &["--workers", "1", "--include", "mlx-community"], &[]);
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        std::thread::sleep(Duration::from_millis(300));
        assert!(Instant::now() < deadline, "the audit and its jobs did not settle");
        let Some(jobs) = try_get(&format!("{base}/api/jobs?limit=1000")) else { continue };
        let jobs: Vec<serde_json::Value> = serde_json::from_str(&jobs).unwrap_or_default();
        let settled =
            jobs.iter().all(|j| ["published", "skipped", "failed"].contains(&j["state"].as_str().unwrap_or("")));
        if !jobs.is_empty() && settled {
            let published = jobs.iter().find(|j| j["state"] == "published").expect("a published job");
            assert!(published["verification"].is_object(), "the MLX record is a JSON object: {published}");
            assert!(published["finished_at"].is_string() && published["created_at"].is_string(), "{published}");
            // The dashboard links the mirror on the Hub; the simulator serves that page as the Hub does.
            let mirror = published["target_repo"].as_str().unwrap();
            assert!(get(&format!("{endpoint}/{mirror}")).contains(&format!("<h1>{mirror}</h1>")));
            break;
        }
    }
    // A few checks the document cannot say: filters, an unknown namespace, an out-of-range page.
    let repos: Vec<serde_json::Value> = serde_json::from_str(&get(&format!("{base}/api/repos?limit=1000"))).unwrap();
    let gated = repos.iter().find(|r| r["repo_id"] == "gemma-org/gated-q4").expect("gated repos are listed");
    assert_eq!(gated["state"], "gated");
    let affected: Vec<serde_json::Value> =
        serde_json::from_str(&get(&format!("{base}/api/repos?affected=true&limit=1000"))).unwrap();
    assert!(affected.iter().all(|r| r["misaligned_bytes"].as_i64().unwrap() > 0) && !affected.is_empty());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let status =
        |path: &str| rt.block_on(async { reqwest::get(format!("{base}{path}")).await.unwrap().status().as_u16() });
    assert_eq!(status("/api/jobs?limit=0"), 400);
    assert_eq!(status("/api/jobs?limit=1001"), 400);
    assert_eq!(status("/api/jobs?state=broken"), 400);
    assert_eq!(status("/api/jobs?failure_kind=broken"), 400);
    let all: Vec<serde_json::Value> = serde_json::from_str(&get(&format!("{base}/api/jobs?limit=1000"))).unwrap();
    for state in ["published", "skipped", "failed", "queued"] {
        let filtered: Vec<serde_json::Value> =
            serde_json::from_str(&get(&format!("{base}/api/jobs?state={state}&limit=1000"))).unwrap();
        let expected = all.iter().filter(|j| j["state"] == state).count();
        assert_eq!(filtered.len(), expected, "{state}: the filter is applied");
        assert!(filtered.iter().all(|j| j["state"] == state), "{state}: {filtered:?}");
    }
    let one = all[0]["repo_id"].as_str().unwrap();
    let of_repo: Vec<serde_json::Value> =
        serde_json::from_str(&get(&format!("{base}/api/jobs?repo={one}&limit=1000"))).unwrap();
    assert!(!of_repo.is_empty() && of_repo.iter().all(|j| j["repo_id"] == one), "{of_repo:?}");
    assert_eq!(status("/ns/doesnotexist"), 404);
    assert_eq!(status("/repo/gemma-org/gated-q4"), 200, "a gated repo has a page saying so");
    assert!(get(&format!("{base}/repo/gemma-org/gated-q4")).contains("Not audited: gated"));

    let out = std::process::Command::new(python())
        .arg(root().join("tests/python/check_api.py"))
        .args(["--base", &base, "--schema", root().join("deploy/openapi.json").to_str().unwrap()])
        .args(["--db", db.to_str().unwrap()])
        .output()
        .unwrap();
    let text = text(&out);
    assert!(out.status.success() && text.contains("check_api: OK"), "{text}");
}

/// `deploy/openapi.json` names every route the service serves, with its method, and nothing it does not:
/// read from the routers' source, so a route added without its document fails here.
#[test]
fn the_document_names_every_route_with_its_method() {
    let mut served = std::collections::BTreeSet::new();
    for file in crate::rules::sources(&root().join("src/serve")) {
        let text = std::fs::read_to_string(file).unwrap();
        for call in text.split(".route(\"").skip(1) {
            let (path, rest) = call.split_once('"').unwrap();
            let call = rest.trim_start_matches([',', ' ', '\n']).split('(').next().unwrap().trim();
            let method = call.rsplit("::").next().unwrap().to_owned();
            served.insert((path.to_owned(), method));
        }
    }
    assert!(served.len() >= 15, "the routes were read: {served:?}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("deploy/openapi.json")).unwrap()).unwrap();
    let documented: std::collections::BTreeSet<(String, String)> = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, item)| item.as_object().unwrap().keys().map(move |m| (path.clone(), m.clone())))
        .collect();
    assert_eq!(served, documented, "routes served (left) and documented (right)");
    // Every API error the document names is the one JSON shape.
    for (path, item) in doc["paths"].as_object().unwrap().iter().filter(|(p, _)| p.starts_with("/api/")) {
        for (method, op) in item.as_object().unwrap() {
            for (code, answer) in op["responses"].as_object().unwrap().iter().filter(|(c, _)| c.starts_with(['4', '5']))
            {
                if code == "422" {
                    continue;
                }
                let schema = &answer["content"]["application/json"]["schema"]["$ref"];
                assert_eq!(schema, "#/components/schemas/Error", "{method} {path} {code}");
            }
        }
    }
}

/// API errors are JSON a client can read, whatever the endpoint.
#[cfg(feature = "system-tests")]
#[test]
fn api_errors_are_json() {
    let world = audit_world(0, |_| {});
    let (_dir, db) = db();
    let (_service, base) = start_serve(&world.endpoint(), &db, 86_400, &["--workers", "0"], &[]);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let answer = |method: reqwest::Method, path: &str| {
        rt.block_on(async {
            let r = reqwest::Client::new().request(method, format!("{base}{path}")).send().await.unwrap();
            let status = r.status().as_u16();
            let kind = r.headers()["content-type"].to_str().unwrap().to_owned();
            (status, kind, r.json::<serde_json::Value>().await.unwrap())
        })
    };
    for (method, path, status) in [
        (reqwest::Method::GET, "/api/jobs?limit=0", 400),
        (reqwest::Method::GET, "/api/jobs?state=broken", 400),
        (reqwest::Method::GET, "/api/repos/nobody/nothing/shards", 404),
        (reqwest::Method::POST, "/api/admin/audit", 401),
        (reqwest::Method::POST, "/api/admin/jobs/1/retry", 401),
        // What axum itself turns away (a query or a path that does not parse, a path no route takes).
        (reqwest::Method::GET, "/api/repos?limit=many", 400),
        (reqwest::Method::GET, "/api/runs?offset=-x", 400),
        (reqwest::Method::POST, "/api/admin/jobs/first/retry", 400),
        (reqwest::Method::GET, "/api/no-such-endpoint", 404),
    ] {
        let (got, kind, body) = answer(method, path);
        assert_eq!(got, status, "{path}");
        assert_eq!(kind, "application/json", "{path}");
        assert!(body["error"].as_str().is_some_and(|e| !e.is_empty()), "{path}: {body}");
    }
    // A page's query that does not parse is an error page.
    let page = rt.block_on(async { reqwest::get(format!("{base}/jobs?page=last")).await.unwrap() });
    assert_eq!(page.status().as_u16(), 400);
    assert!(page.headers()["content-type"].to_str().unwrap().starts_with("text/html"));
    assert!(rt.block_on(page.text()).unwrap().contains("id=\"error\" data-status=\"400\""));
}
