//! Range semantics, redirects, errors and limits, checked with a plain HTTP client.

use reqwest::StatusCode;
use reqwest::redirect::Policy;

use super::world::{ALICE, BOB, CAROL, World, rate_limited, standard};

fn client() -> reqwest::Client {
    reqwest::Client::builder().redirect(Policy::none()).build().unwrap()
}

fn shard_url(world: &World) -> String {
    format!("{}/mlx-community/tiny-q4/resolve/main/model.safetensors", world.endpoint())
}

#[test]
fn resolve_redirects_large_files_to_a_range_capable_storage_origin() {
    let world = standard();
    let original = std::fs::read(crate::support::fixture("mlx_lm/q4/model.safetensors")).unwrap();
    let size = original.len();
    world.runtime.block_on(async {
        let c = client();
        let head = c.head(shard_url(&world)).send().await.unwrap();
        assert_eq!(head.status(), StatusCode::FOUND);
        let h = head.headers();
        let commit = h["x-repo-commit"].to_str().unwrap().to_owned();
        assert_eq!(commit.len(), 40);
        assert_eq!(h["x-linked-size"].to_str().unwrap(), size.to_string());
        let sha = hubalign::hashing::sha256_hex(&original);
        assert_eq!(h["x-linked-etag"].to_str().unwrap(), format!("\"{sha}\""));
        assert!(h.contains_key("etag"));
        let location = h["location"].to_str().unwrap().to_owned();
        assert!(
            location.starts_with("http://") && !location.starts_with(&world.endpoint()),
            "another origin: {location}"
        );

        let ranged = |range: &'static str| c.get(&location).header("range", range).send();
        let r = ranged("bytes=0-99").await.unwrap();
        assert_eq!(r.status(), StatusCode::PARTIAL_CONTENT);
        assert_eq!(r.headers()["content-range"].to_str().unwrap(), format!("bytes 0-99/{size}"));
        assert_eq!(r.bytes().await.unwrap(), original[..100]);
        let suffix = ranged("bytes=-16").await.unwrap();
        assert_eq!(suffix.status(), StatusCode::PARTIAL_CONTENT);
        assert_eq!(suffix.bytes().await.unwrap(), original[size - 16..]);
        let clamped = ranged("bytes=65000-999999999").await.unwrap();
        assert_eq!(clamped.headers()["content-range"].to_str().unwrap(), format!("bytes 65000-{}/{size}", size - 1));
        let past = c.get(&location).header("range", format!("bytes={size}-")).send().await.unwrap();
        assert_eq!(past.status(), StatusCode::RANGE_NOT_SATISFIABLE);
        assert_eq!(past.headers()["content-range"].to_str().unwrap(), format!("bytes */{size}"));
        let whole = c.get(&location).send().await.unwrap();
        assert_eq!(whole.status(), StatusCode::OK);
        assert_eq!(whole.bytes().await.unwrap(), original);

        // Old revisions stay addressable by commit; small files are served directly with their git etag.
        let pinned = c
            .get(format!("{}/mlx-community/tiny-q4/resolve/{commit}/config.json", world.endpoint()))
            .send()
            .await
            .unwrap();
        assert_eq!(pinned.status(), StatusCode::OK);
        assert_eq!(pinned.headers()["x-repo-commit"].to_str().unwrap(), commit);
        assert_eq!(
            pinned.bytes().await.unwrap(),
            std::fs::read(crate::support::fixture("mlx_lm/q4/config.json")).unwrap()
        );
        // Following the redirect keeps the range, as clients do.
        let followed = reqwest::Client::new().get(shard_url(&world)).header("range", "bytes=0-7").send().await.unwrap();
        assert_eq!(followed.status(), StatusCode::PARTIAL_CONTENT);
        assert_eq!(followed.bytes().await.unwrap(), original[..8]);
    });
    let counters = world.counters();
    assert!(counters.range_requests >= 5);
    assert!(counters.resolver_requests >= 3);
}

#[test]
fn errors_carry_the_hubs_codes() {
    let world = standard();
    world.runtime.block_on(async {
        let c = client();
        let get = |path: String, token: Option<&'static str>| {
            let mut req = c.get(format!("{}{path}", world.endpoint()));
            if let Some(t) = token {
                req = req.bearer_auth(t);
            }
            req.send()
        };
        let code = |r: &reqwest::Response| r.headers().get("x-error-code").map(|v| v.to_str().unwrap().to_owned());
        let missing = get("/api/models/nobody/nothing".into(), Some(CAROL)).await.unwrap();
        assert_eq!((missing.status(), code(&missing).as_deref()), (StatusCode::NOT_FOUND, Some("RepoNotFound")));
        let anon_missing = get("/api/models/nobody/nothing".into(), None).await.unwrap();
        assert_eq!(anon_missing.status(), StatusCode::UNAUTHORIZED, "deliberately ambiguous without a token");
        let private = get("/api/models/alice/private-q4".into(), Some(CAROL)).await.unwrap();
        assert_eq!(code(&private).as_deref(), Some("RepoNotFound"));
        assert_eq!(get("/api/models/alice/private-q4".into(), Some(ALICE)).await.unwrap().status(), StatusCode::OK);
        let rev = get("/mlx-community/tiny-q4/resolve/nope/config.json".into(), None).await.unwrap();
        assert_eq!(code(&rev).as_deref(), Some("RevisionNotFound"));
        let entry = get("/mlx-community/tiny-q4/resolve/main/nope.json".into(), None).await.unwrap();
        assert_eq!(code(&entry).as_deref(), Some("EntryNotFound"));
        assert!(entry.headers().contains_key("x-repo-commit"));
        let gated_anon = get("/gemma-org/gated-q4/resolve/main/config.json".into(), None).await.unwrap();
        assert_eq!((gated_anon.status(), code(&gated_anon).as_deref()), (StatusCode::UNAUTHORIZED, Some("GatedRepo")));
        let gated_carol = get("/gemma-org/gated-q4/resolve/main/config.json".into(), Some(CAROL)).await.unwrap();
        assert_eq!((gated_carol.status(), code(&gated_carol).as_deref()), (StatusCode::FORBIDDEN, Some("GatedRepo")));
        assert_eq!(
            get("/gemma-org/gated-q4/resolve/main/config.json".into(), Some(BOB)).await.unwrap().status(),
            StatusCode::OK
        );
        assert_eq!(
            get("/api/models/gemma-org/gated-q4".into(), None).await.unwrap().status(),
            StatusCode::OK,
            "metadata stays public"
        );
        let disabled = get("/old-org/disabled-q4/resolve/main/config.json".into(), None).await.unwrap();
        assert_eq!(disabled.status(), StatusCode::FORBIDDEN);
        assert_eq!(disabled.headers()["x-error-message"].to_str().unwrap(), "Access to this resource is disabled.");
        let bad_token = get("/api/whoami-v2".into(), Some("hf_unknown")).await.unwrap();
        assert_eq!(bad_token.status(), StatusCode::UNAUTHORIZED);
        let create = |token: Option<&'static str>, org: &'static str| {
            let mut req = c
                .post(format!("{}/api/repos/create", world.endpoint()))
                .json(&serde_json::json!({"name": "x", "organization": org}));
            if let Some(t) = token {
                req = req.bearer_auth(t);
            }
            req.send()
        };
        assert_eq!(create(None, "alice").await.unwrap().status(), StatusCode::UNAUTHORIZED);
        assert_eq!(create(Some(CAROL), "alice").await.unwrap().status(), StatusCode::FORBIDDEN, "not her namespace");
        assert_eq!(create(Some(ALICE), "alice-org").await.unwrap().status(), StatusCode::OK, "her organisation");
        let twice = create(Some(ALICE), "alice-org").await.unwrap();
        assert_eq!(twice.status(), StatusCode::CONFLICT);
        assert!(twice.json::<serde_json::Value>().await.unwrap()["url"].as_str().unwrap().ends_with("/alice-org/x"));
        let commit = c
            .post(format!("{}/api/models/mlx-community/tiny-q4/commit/main", world.endpoint()))
            .bearer_auth(CAROL)
            .body("{\"key\":\"header\",\"value\":{\"summary\":\"x\"}}\n")
            .send()
            .await
            .unwrap();
        assert_eq!(commit.status(), StatusCode::FORBIDDEN, "no writes to others' repos");
    });
}

#[test]
fn listing_pages_through_link_headers() {
    let world = standard();
    let ids = world.runtime.block_on(async {
        let c = client();
        let mut url = format!("{}/api/models?filter=mlx&full=true", world.endpoint());
        let mut ids = Vec::new();
        let mut pages = 0;
        loop {
            let r = c.get(&url).send().await.unwrap();
            let next = r.headers().get("link").map(|v| v.to_str().unwrap().to_owned());
            let items: Vec<serde_json::Value> = r.json().await.unwrap();
            assert!(items.len() <= 2);
            for item in items {
                assert!(item["sha"].as_str().is_some_and(|s| s.len() == 40));
                assert!(item["siblings"].as_array().is_some_and(|s| !s.is_empty()));
                ids.push(item["id"].as_str().unwrap().to_owned());
            }
            pages += 1;
            match next {
                Some(link) => url = link.trim_start_matches('<').split('>').next().unwrap().to_owned(),
                None => break,
            }
        }
        assert!(pages >= 3);
        ids
    });
    assert_eq!(
        ids.len(),
        7,
        "{ids:?}: every public MLX repo (gated and disabled ones too), not the private or non-MLX ones"
    );
    assert!(!ids.iter().any(|i| i.contains("private") || i.contains("not-mlx")));
    assert_eq!(world.counters().requests["models_list"], 4);
}

/// A page in the default order is read from its cursor's key on, a sorted one by offset: either way, the
/// pages hold what one page of them all holds, in that order.
#[test]
fn pages_by_key_and_by_offset_hold_what_one_page_holds() {
    let world = standard();
    let ids = |query: &str| {
        world.runtime.block_on(async {
            let mut url = format!("{}/api/models?{query}", world.endpoint());
            let mut ids = Vec::new();
            loop {
                let r = client().get(&url).send().await.unwrap();
                let next = r.headers().get("link").map(|v| v.to_str().unwrap().to_owned());
                let items: Vec<serde_json::Value> = r.json().await.unwrap();
                ids.extend(items.iter().map(|i| i["id"].as_str().unwrap().to_owned()));
                match next {
                    Some(link) => url = link.trim_start_matches('<').split('>').next().unwrap().to_owned(),
                    None => return ids,
                }
            }
        })
    };
    for query in ["", "sort=downloads&", "author=mlx-community&"] {
        let whole = ids(&format!("{query}limit=1000"));
        assert!(whole.len() >= 3, "{query}: {whole:?}");
        assert_eq!(ids(&format!("{query}limit=1")), whole, "{query}");
    }
    // A cursor past every repo is an empty page, with no next one.
    let past = ids("cursor=after:zzzz&limit=1");
    assert!(past.is_empty(), "{past:?}");
}

#[test]
fn the_author_filter_matches_a_namespace_in_any_case_as_the_hub_does() {
    let world = standard();
    let ids = |author: &str| {
        world.runtime.block_on(async {
            let url = format!("{}/api/models?author={author}&limit=1000", world.endpoint());
            let items: Vec<serde_json::Value> = client().get(&url).send().await.unwrap().json().await.unwrap();
            items.iter().map(|i| i["id"].as_str().unwrap().to_owned()).collect::<Vec<_>>()
        })
    };
    let exact = ids("mlx-community");
    assert!(!exact.is_empty());
    assert_eq!(ids("MLX-Community"), exact);
}

#[test]
fn rate_limits_answer_429_with_the_hubs_headers() {
    let world = rate_limited(2, 30);
    world.runtime.block_on(async {
        let c = client();
        let url = format!("{}/api/models", world.endpoint());
        let first = c.get(&url).send().await.unwrap();
        assert_eq!(first.headers()["ratelimit"].to_str().unwrap(), "\"api\";r=1;t=30");
        assert_eq!(first.headers()["ratelimit-policy"].to_str().unwrap(), "\"fixed window\";\"api\";q=2;w=30");
        c.get(&url).send().await.unwrap();
        let third = c.get(&url).send().await.unwrap();
        assert_eq!(third.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(third.headers()["retry-after"].to_str().unwrap().parse::<u64>().unwrap() <= 30);
        assert!(third.headers()["ratelimit"].to_str().unwrap().starts_with("\"api\";r=0;t="));
        // Resolvers are a separate bucket.
        let resolve =
            c.get(format!("{}/mlx-community/tiny-q4/resolve/main/config.json", world.endpoint())).send().await.unwrap();
        assert_eq!(resolve.status(), StatusCode::OK);
        // The quota is the caller's: a token has its own window beside the anonymous one just spent.
        let with_token = c.get(&url).bearer_auth(BOB).send().await.unwrap();
        assert_eq!(with_token.status(), StatusCode::OK);
        assert_eq!(with_token.headers()["ratelimit"].to_str().unwrap(), "\"api\";r=1;t=30");
    });
    assert_eq!(world.counters().rate_limited, 1);
    world.runtime.block_on(async {
        let c = client();
        let counters = format!("{}/_sim/counters", world.endpoint());
        let before: serde_json::Value = c.get(&counters).send().await.unwrap().json().await.unwrap();
        assert_eq!(before["rate_limited"], 1);
        assert!(before["api_requests"].as_u64().unwrap() >= 3);
        c.post(format!("{}/_sim/counters/reset", world.endpoint())).send().await.unwrap();
        let after: serde_json::Value = c.get(&counters).send().await.unwrap().json().await.unwrap();
        assert_eq!(after["rate_limited"], 0);
    });
}

#[test]
fn faults_are_injected_as_configured_and_counted() {
    let root = tempfile::tempdir().unwrap();
    super::world::populate(root.path());
    let world = super::world::start_on(root, |c| {
        c.faults = hubsim::faults::FaultConfig {
            error_rate: 0.5,
            truncate_rate: 0.5,
            seed: 42,
            latency: std::time::Duration::from_millis(20),
            ..Default::default()
        };
    });
    let original = std::fs::read(crate::support::fixture("mlx_lm/q4/model.safetensors")).unwrap();
    let outcomes = world.runtime.block_on(async {
        let c = reqwest::Client::new();
        let mut outcomes = (0, 0, 0);
        for _ in 0..40 {
            let started = std::time::Instant::now();
            match c.get(shard_url(&world)).send().await {
                Ok(r) if r.status().is_server_error() => outcomes.0 += 1,
                Ok(r) => match r.bytes().await {
                    Ok(body) if body == original => outcomes.2 += 1,
                    _ => outcomes.1 += 1,
                },
                Err(_) => outcomes.1 += 1,
            }
            assert!(started.elapsed() >= std::time::Duration::from_millis(20), "latency added");
        }
        outcomes
    });
    let (errors, truncated, whole) = outcomes;
    assert!(errors > 0 && truncated > 0 && whole > 0, "{outcomes:?}");
    let c = world.counters();
    assert!(c.faults_injected >= (errors + truncated) as u64, "{c:?}");
}
