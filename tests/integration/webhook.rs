//! `serve --webhook-secret`: the Hub's webhook payloads as hints. A push to a watched repo is read again
//! alone (one info request, one range probe per shard, no listing) with the scheduled audit a year away; a
//! replayed payload for a head already audited asks the Hub nothing; wrong secrets, malformed, oversized
//! and unknown payloads are turned away or ignored, never acted on.

use std::time::{Duration, Instant};

use hubsim::model::Commit;
use serde_json::{Value, json};

use hubsim::SimConfig;

use crate::audit::world::{audit_world, db};
use crate::serve::{Service, get, start_serve};
use crate::sim::world::World;

const SECRET: &str = "hook-secret";
const REPO: &str = "mlx-community/tiny-sharded";

/// A service the simulator sends the Hub's payloads to (`sim --webhook`), with `extra` flags and the scheduled
/// audit a year away, once its first audit finished. Bind its fields in this order, so that the service
/// stops before the Hub.
struct Hooked {
    world: World,
    _dir: tempfile::TempDir,
    base: String,
    service: Service,
}

fn hooked(extra: &[&str], tune: impl FnOnce(&mut SimConfig)) -> Hooked {
    let port = crate::serve::free_port();
    let target = format!("http://127.0.0.1:{port}/api/hub/webhook#{SECRET}");
    let world = audit_world(0, |c| {
        c.webhooks = vec![target.parse().unwrap()];
        tune(c);
    });
    let (dir, db) = db();
    let args = [&["--webhook-secret", SECRET, "--min-downloads", "0"], extra].concat();
    let (service, base) = crate::serve::start_serve_on(port, &world.endpoint(), &db, 365 * 24 * 3600, &args, &[]);
    wait_until("the first audit", || {
        let runs: Vec<Value> = serde_json::from_str(&get(&format!("{base}/api/runs"))).unwrap();
        runs.iter().any(|r| r["status"] == "finished")
    });
    Hooked { service, base, _dir: dir, world }
}

/// POSTs `body` to the webhook endpoint, with the secret in the header if given.
fn deliver(base: &str, secret: Option<&str>, query: &str, body: Vec<u8>) -> (u16, String) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let mut request = reqwest::Client::new()
            .post(format!("{base}/api/hub/webhook{query}"))
            .header("content-type", "application/json")
            .body(body);
        if let Some(s) = secret {
            request = request.header("X-Webhook-Secret", s);
        }
        let answer = request.send().await.unwrap();
        (answer.status().as_u16(), answer.text().await.unwrap())
    })
}

/// The Hub's payload for a new commit on `repo`, whose `main` is now at `head`.
fn pushed(repo: &str, head: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "event": {"action": "update", "scope": "repo.content"},
        "repo": {"type": "model", "name": repo, "id": "6366c000a2abcdf2fd69a080", "private": false,
                 "url": {"web": "w", "api": "a"}, "headSha": head, "owner": {"id": "61d2000c3c2083e1c08af22d"}},
        "updatedRefs": [{"ref": "refs/heads/main", "oldSha": null, "newSha": head}],
        "webhook": {"id": "6390e855e30d9209411de93b", "version": 3}
    }))
    .unwrap()
}

fn metric(metrics: &str, line: &str) -> u64 {
    metrics.lines().find_map(|l| l.strip_prefix(line)).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_push_is_read_again_alone_and_bad_payloads_change_nothing() {
    let world = audit_world(0, |_| {});
    let (_dir, db) = db();
    let (_service, base) = start_serve(
        &world.endpoint(),
        &db,
        365 * 24 * 3600,
        &["--webhook-secret", SECRET, "--min-downloads", "0", "--workers", "0"],
        &[],
    );
    // The first (and, for a year, only) scheduled audit.
    wait_until("the first audit", || {
        let runs: Vec<Value> = serde_json::from_str(&get(&format!("{base}/api/runs"))).unwrap();
        runs.iter().any(|r| r["status"] == "finished")
    });
    let sim = &world.hub.as_ref().unwrap().sim;
    let head = sim.repos().get(REPO).unwrap().head().unwrap().sha.clone();
    let shards =
        sim.repos().get(REPO).unwrap().head().unwrap().files.keys().filter(|f| f.ends_with(".safetensors")).count();
    assert!(shards > 1, "a sharded bundle");
    // A public mirror whose source the crawl does not list: the crawl's pass rechecks it, a webhook about
    // another repo must not.
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
        let store = hubalign::store::Store::open(&db).await.unwrap();
        assert!(store.claim_mirror("alice/elsewhere-aligned", "someone/elsewhere", false).await.unwrap());
    });
    sim.counters.reset();

    // Turned away: no secret, a wrong one (header or query), malformed and oversized bodies.
    assert_eq!(deliver(&base, None, "", pushed(REPO, &head)).0, 401);
    assert_eq!(deliver(&base, Some("wrong"), "", pushed(REPO, &head)).0, 401);
    assert_eq!(deliver(&base, None, "?secret=wrong", pushed(REPO, &head)).0, 401);
    assert_eq!(deliver(&base, Some(SECRET), "", b"{not json".to_vec()).0, 400);
    assert_eq!(deliver(&base, Some(SECRET), "", b"{\"event\": {}}".to_vec()).0, 400);
    assert_eq!(deliver(&base, Some(SECRET), "", vec![b' '; 300 << 10]).0, 413);
    // Ignored: another repo type, a comment, a scope the Hub may add one day for something else.
    let dataset = String::from_utf8(pushed(REPO, &head)).unwrap().replace("\"model\"", "\"dataset\"");
    assert_eq!(deliver(&base, Some(SECRET), "", dataset.into_bytes()).0, 202);
    let unknown = String::from_utf8(pushed(REPO, &head)).unwrap().replace("repo.content", "spaces.runtime");
    assert_eq!(deliver(&base, Some(SECRET), "", unknown.into_bytes()).0, 202);
    // A replay of the payload for the head already audited: accepted, and nothing asked of the Hub.
    let (status, _) = deliver(&base, None, &format!("?secret={SECRET}"), pushed(REPO, &head));
    assert_eq!(status, 202);
    wait_until("the replay to be handled", || {
        metric(&get(&format!("{base}/metrics")), "hubalign_webhook_rereads_total{outcome=\"unchanged\"} ") == 1
    });
    // The same replay with the repo's id in other letter cases: the Hub matches ids in any case, so these are
    // the same repo at the same head, and ask the Hub nothing either.
    for spelled in [REPO.to_uppercase(), "Mlx-Community/Tiny-Sharded".to_owned(), REPO.replacen('t', "T", 1)] {
        assert_eq!(deliver(&base, Some(SECRET), "", pushed(&spelled, &head)).0, 202);
    }
    wait_until("the replays in other cases to be handled", || {
        let unchanged = "hubalign_webhook_rereads_total{outcome=\"unchanged\"} ";
        metric(&get(&format!("{base}/metrics")), unchanged) >= 2
    });
    std::thread::sleep(Duration::from_millis(300));
    let metrics = get(&format!("{base}/metrics"));
    assert_eq!(metric(&metrics, "hubalign_webhook_rereads_total{outcome=\"read\"} "), 0, "{metrics}");
    let counted = sim.counters.snapshot();
    assert_eq!(counted.api_requests + counted.resolver_requests, 0, "other cases asked nothing: {counted:?}");
    let metrics = get(&format!("{base}/metrics"));
    assert_eq!(metric(&metrics, "hubalign_webhooks_rejected_total{reason=\"unauthorized\"} "), 3, "{metrics}");
    assert_eq!(metric(&metrics, "hubalign_webhooks_rejected_total{reason=\"malformed\"} "), 2, "{metrics}");
    assert_eq!(metric(&metrics, "hubalign_webhooks_rejected_total{reason=\"too_large\"} "), 1, "{metrics}");
    assert_eq!(metric(&metrics, "hubalign_webhooks_received_total{scope=\"repo.content\"} "), 5, "{metrics}");
    assert_eq!(metric(&metrics, "hubalign_webhooks_received_total{scope=\"other\"} "), 1, "{metrics}");
    assert_eq!(metric(&metrics, "hubalign_webhook_rereads_total{outcome=\"read\"} "), 0, "{metrics}");
    let counted = sim.counters.snapshot();
    assert_eq!(counted.api_requests + counted.resolver_requests, 0, "nothing was asked of the Hub: {counted:?}");
    let overview = get(&format!("{base}/"));
    let line = "6 turned away (unauthorized 3, malformed 2, too_large 1). Newest push to mirror: none yet.";
    assert!(overview.contains("6 received (repo.content 5, other 1),"), "{overview}");
    assert!(overview.contains(line), "the overview says what arrived and what was turned away: {overview}");

    // A push: a new commit on main (a file added), then its payload.
    let new_head = {
        let mut repos = sim.repos_mut();
        let repo = repos.get_mut(REPO).unwrap();
        let parent = repo.head().unwrap().clone();
        let mut files = parent.files.clone();
        let notes = files.values().find(|f| !f.is_lfs()).unwrap().clone();
        files.insert("NOTES.md".into(), notes);
        let commit = Commit::new(Some(parent.sha.clone()), files, "notes".into(), "2026-12-01T12:00:00.000Z".into());
        let sha = commit.sha.clone();
        repo.commits.insert(sha.clone(), commit);
        repo.refs.insert("main".into(), sha.clone());
        sha
    };
    assert_eq!(deliver(&base, Some(SECRET), "", pushed(REPO, &new_head)).0, 202);
    wait_until("the push to be read again", || {
        let repos: Vec<Value> = serde_json::from_str(&get(&format!("{base}/api/repos?limit=1000"))).unwrap();
        repos.iter().any(|r| r["repo_id"] == REPO && r["sha"] == new_head.as_str())
    });
    let counted = sim.counters.snapshot();
    let requests = |kind: &str| counted.requests.get(kind).copied().unwrap_or(0);
    assert_eq!(requests("models_list"), 0, "no listing: {counted:?}");
    assert_eq!(requests("model_info"), 1, "one info request: {counted:?}");
    assert_eq!(counted.resolver_requests, shards as u64, "one range probe per shard: {counted:?}");
    let runs: Vec<Value> = serde_json::from_str(&get(&format!("{base}/api/runs"))).unwrap();
    let webhook_run = runs.iter().find(|r| r["kind"] == "webhook").expect("the webhook's run");
    assert_eq!(webhook_run["started_by"], "webhook: update");
    assert_eq!(webhook_run["status"], "finished");
    let page = get(&format!("{base}/repo/{REPO}"));
    assert!(
        page.contains("webhook: update") && page.contains(&new_head[..12]),
        "the repo page names the event: {page}"
    );
    assert_eq!(runs.iter().filter(|r| r["kind"] == "crawl").count(), 1, "the scheduled audit is a year away");

    // A deletion of a repo the store never knew records nothing.
    let unknown = serde_json::to_vec(&json!({
        "event": {"action": "delete", "scope": "repo"},
        "repo": {"type": "model", "name": "mlx-community/never-seen", "id": "1", "private": false}
    }))
    .unwrap();
    assert_eq!(deliver(&base, Some(SECRET), "", unknown).0, 202);
    wait_until("the deletion to be handled", || {
        sim.counters.snapshot().requests.get("model_info").copied().unwrap_or(0) >= 2
    });
    std::thread::sleep(Duration::from_millis(300));
    let runs: Vec<Value> = serde_json::from_str(&get(&format!("{base}/api/runs"))).unwrap();
    assert_eq!(runs.iter().filter(|r| r["kind"] == "webhook").count(), 1, "no run for a repo never known: {runs:?}");
    let repos: Vec<Value> = serde_json::from_str(&get(&format!("{base}/api/repos?limit=1000"))).unwrap();
    assert!(!repos.iter().any(|r| r["repo_id"] == "mlx-community/never-seen"));
}

/// The Hub's payload for a deleted repo.
fn deleted(repo: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "event": {"action": "delete", "scope": "repo"},
        "repo": {"type": "model", "name": repo, "id": "1", "private": false, "url": {"web": "w", "api": "a"}},
        "webhook": {"id": "2", "version": 3}
    }))
    .unwrap()
}

/// A source deleted after its mirror was published: one payload, and the mirror is private (the repo page
/// says why) without waiting for the next scheduled audit.
#[test]
fn a_deleted_source_takes_its_mirror_private_at_once() {
    let world = audit_world(0, |_| {});
    let (_dir, db) = db();
    let args = ["--webhook-secret", SECRET, "--min-downloads", "0", "--include", "mlx-community"];
    let (_service, base) = start_serve(&world.endpoint(), &db, 365 * 24 * 3600, &args, &[]);
    let source = "mlx-community/tiny-q4";
    let mirror = &crate::support::mirror("mlx-community/tiny-q4");
    let sim = &world.hub.as_ref().unwrap().sim;
    let deadline = Instant::now() + Duration::from_secs(180);
    while sim.repos().get(mirror).is_none_or(|m| m.meta.private) {
        assert!(Instant::now() < deadline, "the mirror was never published");
        std::thread::sleep(Duration::from_millis(200));
    }
    sim.repos_mut().remove(source);
    assert_eq!(deliver(&base, Some(SECRET), "", deleted(source)).0, 202);
    wait_until("the mirror to go private", || sim.repos().get(mirror).unwrap().meta.private);
    let page = get(&format!("{base}/repo/{source}"));
    assert!(page.contains("id=\"mirror-hidden\""), "the repo page says why: {page}");
    let repos: Vec<Value> = serde_json::from_str(&get(&format!("{base}/api/repos?namespace=mlx-community"))).unwrap();
    let gone = repos.iter().find(|r| r["repo_id"] == source).expect("still known");
    assert_eq!(gone["state"], "vanished", "{gone}");
}

/// The whole path, with the simulator sending the Hub's payloads (`sim --webhook`): a publisher creates a
/// repo and pushes an MLX bundle with `huggingface_hub`, then pushes again; each push is read again and
/// mirrored without a scheduled audit (the next one is a year away), the second as a new commit on the
/// same mirror.
#[test]
fn pushes_with_huggingface_hub_reach_the_mirror_without_a_crawl() {
    // Bound in this order, dropped in the reverse: the service before the Hub.
    let Hooked { world, _dir, base, service } = hooked(&["--include", "alice-org"], |_| {});
    let push = |message: &str, card: &str| push_bundle(&world, "alice-org/pushed-q4", message, card);
    let sim = &world.hub.as_ref().unwrap().sim;
    let mirror_commits = || {
        sim.repos()
            .get(&crate::support::mirror("alice-org/pushed-q4"))
            .filter(|m| !m.meta.private)
            .map_or(0, |m| m.commits.values().filter(|c| c.files.contains_key("MEI_ALIGN_MANIFEST.json")).count())
    };
    let first = push("weights", "---\nlibrary_name: mlx\nlicense: mit\n---\n# pushed\n");
    let deadline = Instant::now() + Duration::from_secs(180);
    while mirror_commits() < 1 {
        assert!(Instant::now() < deadline, "the first push was never mirrored");
        std::thread::sleep(Duration::from_millis(200));
    }
    let second = push("card", "---\nlibrary_name: mlx\nlicense: mit\n---\n# pushed, again\n");
    assert_ne!(first, second);
    while mirror_commits() < 2 {
        assert!(Instant::now() < deadline, "the second push was never mirrored");
        std::thread::sleep(Duration::from_millis(200));
    }
    let jobs: Vec<Value> = serde_json::from_str(&get(&format!("{base}/api/jobs?limit=1000"))).unwrap();
    let published: Vec<&str> = jobs
        .iter()
        .filter(|j| j["repo_id"] == "alice-org/pushed-q4" && j["state"] == "published")
        .filter_map(|j| j["source_sha"].as_str())
        .collect();
    assert!(published.contains(&second.as_str()), "the second push's commit was published: {jobs:?}");
    let lag = metric(&get(&format!("{base}/metrics")), "hubalign_webhook_last_lag_seconds ");
    assert!(lag < 180, "from the payload's arrival to the mirror: {lag} s");
    let overview = get(&format!("{base}/"));
    assert!(overview.contains(&format!("Newest push to mirror: {lag} s.")), "the overview shows the lag: {overview}");
    assert!(get(&format!("{base}/metrics")).contains("hubalign_webhook_last_lag_seconds "));
    let runs: Vec<Value> = serde_json::from_str(&get(&format!("{base}/api/runs?limit=1000"))).unwrap();
    assert_eq!(runs.iter().filter(|r| r["kind"] == "crawl").count(), 1, "no crawl but the first");
    assert!(runs.iter().any(|r| r["kind"] == "webhook"), "webhook runs: {runs:?}");

    // A burst: the simulator's last payload 10,000 times (about the second push, already audited, or about the
    // mirror, outside `--include`). Memory stays bounded, and the Hub is asked nothing.
    let rss = || {
        let status = std::fs::read_to_string(format!("/proc/{}/status", service.0.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .unwrap()
            .trim()
            .trim_end_matches(" kB")
            .parse::<u64>()
            .unwrap()
    };
    let before = rss();
    // Every scope: the simulator's last payload may be about the mirror (its commit or its visibility).
    let received = || {
        let metrics = get(&format!("{base}/metrics"));
        ["repo", "repo.content", "repo.config"]
            .iter()
            .map(|scope| metric(&metrics, &format!("hubalign_webhooks_received_total{{scope=\"{scope}\"}} ")))
            .sum::<u64>()
    };
    let (received_before, reads_before) =
        (received(), metric(&get(&format!("{base}/metrics")), "hubalign_webhook_rereads_total{outcome=\"read\"} "));
    sim.counters.reset();
    assert_eq!(crate::serve::post(&format!("{}/_sim/webhooks/flood?n=10000", world.endpoint()), None).0, 200);
    wait_until("the burst to arrive", || received() >= received_before + 10_000);
    std::thread::sleep(Duration::from_millis(500));
    let metrics = get(&format!("{base}/metrics"));
    assert_eq!(metric(&metrics, "hubalign_webhook_rereads_total{outcome=\"read\"} "), reads_before, "{metrics}");
    let counted = sim.counters.snapshot();
    assert_eq!(counted.requests.get("model_info").copied().unwrap_or(0), 0, "{counted:?}");
    let grew_kb = rss().saturating_sub(before);
    assert!(grew_kb < 64 << 10, "10,000 payloads grew serve by {grew_kb} kB");

    // The publisher makes the source private: the simulator's `repo.config` payload takes the mirror private
    // within one pass of the webhook task.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let answer = reqwest::Client::new()
            .put(format!("{}/api/models/alice-org/pushed-q4/settings", world.endpoint()))
            .bearer_auth(crate::sim::world::ALICE)
            .json(&json!({"private": true}))
            .send()
            .await
            .unwrap();
        assert!(answer.status().is_success());
    });
    wait_until("the mirror of the now private source to go private", || {
        sim.repos().get(&crate::support::mirror("alice-org/pushed-q4")).unwrap().meta.private
    });
}

/// Creates `repo` (if new) and pushes the tiny `mlx_lm` bundle with `card` as its README, with
/// `huggingface_hub` as alice; returns the commit.
fn push_bundle(world: &crate::sim::world::World, repo: &str, message: &str, card: &str) -> String {
    let script = r#"
import os, shutil, sys, tempfile
from huggingface_hub import HfApi
api = HfApi()
api.create_repo(sys.argv[4], exist_ok=True)
with tempfile.TemporaryDirectory() as d:
    shutil.copytree(sys.argv[1], d, dirs_exist_ok=True)
    open(os.path.join(d, "README.md"), "w").write(sys.argv[3])
    print(api.upload_folder(repo_id=sys.argv[4], folder_path=d, commit_message=sys.argv[2]).oid)
"#;
    let bundle = crate::support::fixture("mlx_lm/q4");
    let out =
        with_huggingface_hub(world, crate::sim::world::ALICE, script, &[bundle.to_str().unwrap(), message, card, repo]);
    out.trim().to_owned()
}

/// Runs a Python `script` with `huggingface_hub` against the simulator as the holder of `token`; returns
/// what it printed.
fn with_huggingface_hub(world: &crate::sim::world::World, token: &str, script: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(crate::support::python())
        .args(["-c", script])
        .args(args)
        .env("HF_ENDPOINT", world.endpoint())
        .env("HF_TOKEN", token)
        .env("HF_HUB_DISABLE_TELEMETRY", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// A source renamed with `huggingface_hub`'s `move_repo`: the Hub answers the old name with the new repo,
/// so the mirror follows it (same mirror, still public, no second one), the old name is recorded as renamed,
/// and the next push to the new name lands on the same mirror with a manifest naming the new name. Before
/// that, a forged `move` payload (the Hub still answers the old name with itself) re-points nothing.
#[test]
fn a_confirmed_move_is_followed_by_its_mirror_and_a_forged_one_is_not() {
    let Hooked { world, _dir, base, service: _service } = hooked(&["--include", "alice-org"], |_| {});
    let (old, new, mirror) =
        ("alice-org/moving-q4", "alice-org/moved-q4", &crate::support::mirror("alice-org/moving-q4"));
    let sim = &world.hub.as_ref().unwrap().sim;
    // What the public mirror's manifest names as its source, read as anyone reads it.
    let manifest_names = || {
        let text =
            crate::serve::try_get(&format!("{}/{mirror}/resolve/main/MEI_ALIGN_MANIFEST.json", world.endpoint()))?;
        serde_json::from_str::<Value>(&text).ok()?["source_repo"].as_str().map(str::to_owned)
    };
    let card = "---\nlibrary_name: mlx\nlicense: mit\n---\n# moving\n";
    push_bundle(&world, old, "weights", card);
    wait_until("the mirror to be published", || {
        sim.repos().get(mirror).is_some_and(|m| !m.meta.private) && manifest_names().as_deref() == Some(old)
    });
    let reads = || metric(&get(&format!("{base}/metrics")), "hubalign_webhook_rereads_total{outcome=\"read\"} ");

    // Forged: the payload says the repo moved; the Hub still answers the old name with itself.
    let before = reads();
    let forged = serde_json::to_vec(&json!({
        "event": {"action": "move", "scope": "repo"},
        "repo": {"type": "model", "name": old, "id": "1", "private": false, "url": {"web": "w", "api": "a"}},
        "movedTo": {"name": "alice-org/not-there", "owner": {"id": "2"}},
        "webhook": {"id": "3", "version": 3}
    }))
    .unwrap();
    assert_eq!(deliver(&base, Some(SECRET), "", forged).0, 202);
    wait_until("the forged move's re-read", || reads() > before);
    std::thread::sleep(Duration::from_millis(500));
    let page = get(&format!("{base}/repo/{old}"));
    // The pages escape `/` as minijinja does.
    let html = |s: &str| s.replace('/', "&#x2f;");
    assert!(page.contains(&format!(">{}</a>", html(mirror))) && !page.contains("followed the rename"), "{page}");
    let repos: Vec<Value> = serde_json::from_str(&get(&format!("{base}/api/repos?namespace=alice-org"))).unwrap();
    assert!(repos.iter().any(|r| r["repo_id"] == old && r["state"] == "ok"), "{repos:?}");
    assert!(!repos.iter().any(|r| r["repo_id"] == "alice-org/not-there"), "{repos:?}");

    // The real move, with huggingface_hub; the simulator sends the Hub's `move` payload.
    let script =
        "import sys\nfrom huggingface_hub import HfApi\nHfApi().move_repo(from_id=sys.argv[1], to_id=sys.argv[2])";
    with_huggingface_hub(&world, crate::sim::world::ALICE, script, &[old, new]);
    wait_until("the mirror to follow the new name", || {
        get(&format!("{base}/repo/{new}")).contains(&format!("followed the rename from {}", html(old)))
    });
    let page = get(&format!("{base}/repo/{new}"));
    assert!(page.contains(&format!(">{}</a>", html(mirror))), "{page}");
    assert!(get(&format!("{base}/repo/{old}")).contains(&format!("renamed to {}", html(new))));
    assert!(!sim.repos().get(mirror).unwrap().meta.private, "the mirror of a renamed public source stays public");
    assert!(sim.repos().get(&crate::support::mirror("alice-org/moved-q4")).is_none(), "no second mirror");
    let jobs: Vec<Value> = serde_json::from_str(&get(&format!("{base}/api/jobs?limit=1000"))).unwrap();
    let of = |repo: &str| jobs.iter().filter(|j| j["repo_id"] == repo).count();
    assert_eq!((of(old), of(new)), (0, 1), "the published job carried over, none added: {jobs:?}");

    // The next push to the new name lands on the same mirror, whose manifest now names the new name.
    let card = "---\nlibrary_name: mlx\nlicense: mit\n---\n# moved, and pushed again\n";
    push_bundle(&world, new, "card", card);
    wait_until("the new name's push on the same mirror", || manifest_names().as_deref() == Some(new));
    // The store records the publication just after the commit lands (and the mirror is made public): the page
    // says so once the job is recorded.
    wait_until("the page to stop saying it followed a rename", || {
        !get(&format!("{base}/repo/{new}")).contains("followed the rename")
    });
    assert!(sim.repos().get(&crate::support::mirror("alice-org/moved-q4")).is_none(), "still no second mirror");
}

/// `hubalign webhook create | list | delete` through the Hub's webhooks API (the simulator's): the webhook
/// watches one organisation, and the simulator delivers that organisation's events, and only those, to
/// `serve`; once deleted, nothing more arrives.
#[test]
fn webhooks_made_with_the_cli_deliver_the_watched_namespaces_events() {
    let world = audit_world(0, |_| {});
    let (_dir, db) = db();
    let endpoint = world.endpoint();
    let (_service, base) = start_serve(
        &endpoint,
        &db,
        365 * 24 * 3600,
        &["--webhook-secret", SECRET, "--min-downloads", "0", "--workers", "0"],
        &[],
    );
    let cli = |args: &[&str]| {
        crate::support::hubalign()
            .arg("webhook")
            .args(args)
            .args(["--endpoint", &endpoint, "--token", crate::sim::world::ALICE])
            .output()
            .unwrap()
    };
    let url = format!("{base}/api/hub/webhook");
    let out = cli(&["create", "--url", &url, "--watch", "org:alice-org", "--secret", SECRET]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let created = String::from_utf8(out.stdout).unwrap();
    let id = created.split_whitespace().next().unwrap().to_owned();
    assert!(created.contains("org:alice-org") && created.contains(&url), "{created}");
    let listed = String::from_utf8(cli(&["list"]).stdout).unwrap();
    assert!(listed.contains(&id), "{listed}");
    assert_eq!(cli(&["create", "--url", &url, "--watch", "team:x", "--secret", "s"]).status.code(), Some(2));

    let create_repo = |namespace: &str, name: &str| {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let body = json!({"name": name, "organization": namespace, "type": "model"});
            let answer = reqwest::Client::new()
                .post(format!("{endpoint}/api/repos/create"))
                .bearer_auth(crate::sim::world::ALICE)
                .json(&body)
                .send()
                .await
                .unwrap();
            assert!(answer.status().is_success(), "{}", answer.text().await.unwrap());
        });
    };
    let received = || metric(&get(&format!("{base}/metrics")), "hubalign_webhooks_received_total{scope=\"repo\"} ");
    create_repo("alice-org", "watched-repo");
    wait_until("the watched organisation's event", || received() == 1);
    create_repo("alice", "not-watched");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(received(), 1, "an event of a namespace the webhook does not watch");

    let out = cli(&["delete", &id]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!String::from_utf8(cli(&["list"]).stdout).unwrap().contains(&id));
    create_repo("alice-org", "after-delete");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(received(), 1, "nothing after the webhook was deleted");
    assert_eq!(cli(&["delete", &id]).status.code(), Some(4), "a webhook that no longer exists");
}

/// The owner of `mlx-community`, who closes and merges hubalign's pull requests.
const OWNER: &str = "hf_mlx_owner";

/// Runs `script` with huggingface_hub as the owner of `mlx-community`.
fn as_owner(world: &crate::sim::world::World, script: &str, args: &[&str]) {
    with_huggingface_hub(world, OWNER, script, args);
}

/// `--pr` mode with webhooks: the owner closes one of hubalign's pull requests and merges another with
/// `huggingface_hub`; the simulator's `discussion` payloads lead to the Hub being asked, and the jobs record
/// `closed` and `merged`. A forged "closed" payload for a pull request the Hub says is open records nothing.
/// The merged repo is read again (its shards are aligned now: no new job); the declining repo's next commit
/// is skipped when queued, before anything is downloaded.
#[test]
fn pull_requests_closed_or_merged_are_recorded_and_a_closed_one_is_a_no() {
    let owner = |c: &mut SimConfig| c.tokens.push(format!("{OWNER}:mlx-owner:mlx-community").parse().unwrap());
    let Hooked { world, _dir, base, service: _service } = hooked(&["--include", "mlx-community", "--pr"], owner);
    let jobs = || -> Vec<Value> { serde_json::from_str(&get(&format!("{base}/api/jobs?limit=1000"))).unwrap() };
    let proposed = || -> Vec<(String, i64)> {
        let mut out: Vec<(String, i64)> = jobs()
            .iter()
            .filter(|j| j["pr_status"] == "open")
            .map(|j| (j["repo_id"].as_str().unwrap().to_owned(), j["pr_num"].as_i64().unwrap()))
            .collect();
        out.sort();
        out
    };
    let deadline = Instant::now() + Duration::from_secs(240);
    while proposed().len() < 2 {
        assert!(Instant::now() < deadline, "two pull requests were never opened: {:?}", jobs());
        std::thread::sleep(Duration::from_millis(300));
    }
    let open = proposed();
    let ((declined, declined_num), (merged, merged_num)) = (open[0].clone(), open[1].clone());
    let status_of = |repo: &str| {
        jobs().iter().find(|j| j["repo_id"] == repo && j["pr_num"].is_i64()).map(|j| j["pr_status"].clone())
    };
    let reads = || metric(&get(&format!("{base}/metrics")), "hubalign_webhook_rereads_total{outcome=\"read\"} ");

    // Forged: the payload says closed, the Hub says open.
    let before = reads();
    let forged = serde_json::to_vec(&json!({
        "event": {"action": "update", "scope": "discussion"},
        "repo": {"type": "model", "name": declined, "id": "1", "private": false, "url": {"web": "w", "api": "a"}},
        "discussion": {"num": declined_num, "status": "closed", "isPullRequest": true, "title": "t",
                       "author": {"id": "2"}, "url": {"web": "w"}},
        "webhook": {"id": "3", "version": 3}
    }))
    .unwrap();
    assert_eq!(deliver(&base, Some(SECRET), "", forged).0, 202);
    wait_until("the forged payload's re-read", || reads() > before);
    assert_eq!(status_of(&declined), Some(json!("open")), "the Hub says open");

    let script = "import sys\nfrom huggingface_hub import HfApi\nHfApi().change_discussion_status(sys.argv[1], int(sys.argv[2]), 'closed')";
    as_owner(&world, script, &[&declined, &declined_num.to_string()]);
    let script =
        "import sys\nfrom huggingface_hub import HfApi\nHfApi().merge_pull_request(sys.argv[1], int(sys.argv[2]))";
    as_owner(&world, script, &[&merged, &merged_num.to_string()]);
    wait_until("both ends recorded", || {
        status_of(&declined) == Some(json!("closed")) && status_of(&merged) == Some(json!("merged"))
    });
    let page = get(&format!("{base}/repo/{declined}"));
    assert!(page.contains(&format!("pull request #{declined_num} closed by the owner")), "{page}");

    // The merged repo's new head is read again: aligned now, so no job follows the merge.
    let merge_head = world.hub.as_ref().unwrap().sim.repos().get(merged.as_str()).unwrap().refs["main"].clone();
    wait_until("the merge commit audited", || {
        let repos: Vec<Value> =
            serde_json::from_str(&get(&format!("{base}/api/repos?namespace=mlx-community&limit=1000"))).unwrap();
        repos.iter().any(|r| r["repo_id"] == merged && r["sha"] == merge_head.as_str() && r["misaligned_bytes"] == 0)
    });
    assert_eq!(jobs().iter().filter(|j| j["repo_id"] == merged).count(), 1, "{:?}", jobs());

    // The declining repo's next commit: skipped when queued, with the reason.
    let script = "import sys\nfrom huggingface_hub import HfApi\nprint(HfApi().upload_file(path_or_fileobj=b'notes', path_in_repo='NOTES.md', repo_id=sys.argv[1]).oid)";
    as_owner(&world, script, &[&declined]);
    wait_until("the new commit's job", || {
        jobs().iter().filter(|j| j["repo_id"] == declined).any(|j| {
            j["state"] == "skipped" && j["reason"].as_str().unwrap_or("").contains("closed hubalign's pull request")
        })
    });
}
