//! `serve` against clients that never finish a request, audits that panic, a Hub that asks to wait forever,
//! and a source that stops being public after its mirror was published.

use std::io::Write;
use std::time::{Duration, Instant};

use super::hostile_world;
use super::proxy::{self, Reply, once};
use crate::serve::{get, post, start_serve, try_get};

fn runs(base: &str) -> Vec<serde_json::Value> {
    serde_json::from_str(&get(&format!("{base}/api/runs"))).unwrap()
}

fn wait_for(what: &str, secs: u64, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn clients_that_never_finish_a_request_cannot_lock_out_the_dashboard() {
    let world = hostile_world();
    let dir = tempfile::tempdir().unwrap();
    let (_service, base) = start_serve(&world.endpoint(), &dir.path().join("a.db"), 86_400, &[], &[]);
    let addr = base.trim_start_matches("http://").to_owned();
    // Far more connections than the limit: some send nothing, some half a request.
    let mut idle = Vec::new();
    for i in 0..1500 {
        match std::net::TcpStream::connect(&addr) {
            Ok(mut s) => {
                if i % 2 == 0 {
                    let _ = s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ");
                }
                idle.push(s);
            }
            Err(e) => panic!("connect {i}: {e}"),
        }
    }
    for round in 0..5 {
        let started = Instant::now();
        let ok = try_get(&format!("{base}/healthz"));
        let took = started.elapsed();
        assert_eq!(ok.as_deref(), Some("ok\n"), "round {round}");
        assert!(took < Duration::from_secs(2), "round {round}: /healthz took {took:?} behind 1,500 idle clients");
        assert!(get(&format!("{base}/")).contains("repos audited"), "round {round}: the overview");
    }
    // A page number whose offset does not fit is refused, not wrapped to page 0.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let status = rt.block_on(async {
        reqwest::get(format!("{base}/ns/mlx-community?page=92233720368547759")).await.unwrap().status().as_u16()
    });
    assert_eq!(status, 400);
    // Idle connections are closed within the header timeout (10 s by default), not held for ever.
    std::thread::sleep(Duration::from_secs(12));
    let closed = idle
        .iter_mut()
        .filter(|s| {
            let _ = s.set_read_timeout(Some(Duration::from_millis(10)));
            match std::io::Read::read(&mut &**s, &mut [0u8; 1]) {
                Ok(0) => true,
                Ok(_) => false,
                Err(e) => !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
            }
        })
        .count();
    assert!(closed > 1400, "{closed} of 1,500 idle connections closed");
}

#[test]
fn a_panicking_audit_is_recorded_and_the_scheduler_goes_on() {
    let world = hostile_world();
    let dir = tempfile::tempdir().unwrap();
    let (_service, base) = start_serve(
        &world.endpoint(),
        &dir.path().join("a.db"),
        2,
        &["--workers", "0"],
        &[("HUBALIGN_DEBUG_PANIC_AUDITS", "1")],
    );
    wait_for("an audit after the panicking one", 60, || runs(&base).iter().any(|r| r["status"] == "finished"));
    let runs = runs(&base);
    let failed = runs.iter().find(|r| r["status"] == "failed").expect("the panicking audit is recorded");
    assert!(failed["error"].as_str().unwrap_or("").contains("panicked"), "{failed}");
    assert!(!runs.iter().any(|r| r["status"] == "running" && r["id"] == failed["id"]));
    assert_eq!(get(&format!("{base}/healthz")), "ok\n", "the loop carried on");
    assert!(get(&format!("{base}/metrics")).contains("hubalign_task_panics_total 1"));
}

#[test]
fn a_hub_that_asks_to_wait_for_ever_interrupts_the_audit_not_the_service() {
    let world = hostile_world();
    let retry = u64::MAX.to_string();
    let proxy = proxy::start(
        &world,
        vec![once("/api/models", move || Reply::Fixed(429, vec![("retry-after", retry.clone())], b"{}".to_vec()))],
    );
    let dir = tempfile::tempdir().unwrap();
    let (_service, base) = start_serve(&proxy.base_url, &dir.path().join("a.db"), 86_400, &["--workers", "0"], &[]);
    wait_for("the first audit to end", 30, || runs(&base).iter().any(|r| r["status"] == "interrupted"));
    assert_eq!(get(&format!("{base}/healthz")), "ok\n");
    assert!(get(&format!("{base}/")).contains("interrupted"), "the overview says so");
    // The Hub named u64::MAX seconds, but only the run that heard it stops: the next one asks again, and
    // this time the Hub answers.
    assert_eq!(post(&format!("{base}/api/admin/audit"), Some("s3cret")).0, 202);
    wait_for("the audit asked for", 30, || runs(&base).iter().any(|r| r["status"] == "finished"));
}

#[test]
fn a_mirror_whose_source_turns_private_is_made_private_and_the_page_says_why() {
    let world = hostile_world();
    let dir = tempfile::tempdir().unwrap();
    let (_service, base) =
        start_serve(&world.endpoint(), &dir.path().join("a.db"), 3, &["--include", "mlx-community"], &[]);
    let sim = &world.hub.as_ref().unwrap().sim;
    let mirror = &crate::support::mirror("mlx-community/tiny-q4");
    wait_for("the mirror", 120, || sim.repos().get(mirror).is_some_and(|m| !m.meta.private));
    sim.repos_mut().get_mut("mlx-community/tiny-q4").unwrap().meta.private = true;
    wait_for("the mirror to go private", 60, || sim.repos().get(mirror).unwrap().meta.private);
    let page = get(&format!("{base}/repo/mlx-community/tiny-q4"));
    assert!(page.contains("id=\"mirror-hidden\"") && page.contains("no longer public"), "{page}");
    assert!(page.contains("gone: the source was deleted or is no longer visible"), "{page}");
}

/// A source renamed on the Hub with no webhook to say so: the next crawl lists the new name, the old one
/// answers with the renamed repo, and the mirror follows it (still public, no second mirror, no second job
/// for a commit already mirrored); the old name is recorded as renamed.
#[test]
fn a_source_renamed_between_crawls_keeps_its_mirror() {
    let world = hostile_world();
    let dir = tempfile::tempdir().unwrap();
    let (_service, base) =
        start_serve(&world.endpoint(), &dir.path().join("a.db"), 3, &["--include", "mlx-community"], &[]);
    let sim = &world.hub.as_ref().unwrap().sim;
    let (old, new, mirror) =
        ("mlx-community/tiny-q4", "mlx-community/tiny-q4-renamed", &crate::support::mirror("mlx-community/tiny-q4"));
    wait_for("the mirror", 120, || sim.repos().get(mirror).is_some_and(|m| !m.meta.private));
    world.rename(old, new);
    let html = |s: &str| s.replace('/', "&#x2f;");
    wait_for("the mirror to follow the new name", 60, || {
        get(&format!("{base}/repo/{new}")).contains(&format!("followed the rename from {}", html(old)))
    });
    let finished = || runs(&base).iter().filter(|r| r["status"] == "finished").count();
    let after = finished();
    wait_for("two more crawls", 60, || finished() >= after + 2);
    assert!(!sim.repos().get(mirror).unwrap().meta.private, "the mirror of a renamed public source stays public");
    assert!(sim.repos().get(&crate::support::mirror("mlx-community/tiny-q4-renamed")).is_none(), "no second mirror");
    assert!(get(&format!("{base}/repo/{old}")).contains(&format!("renamed to {}", html(new))));
    let jobs: Vec<serde_json::Value> = serde_json::from_str(&get(&format!("{base}/api/jobs?limit=1000"))).unwrap();
    let of = |repo: &str| jobs.iter().filter(|j| j["repo_id"] == repo).count();
    assert_eq!((of(old), of(new)), (0, 1), "the published job carried over, none added: {jobs:?}");
}

/// Under `--author`, a source moved to another owner is no longer crawled, so the crawl does not follow it
/// (as the webhook path does not): its mirror goes private, saying where the source went.
#[test]
fn a_source_moved_away_from_the_audited_author_takes_its_mirror_private() {
    let world = hostile_world();
    let dir = tempfile::tempdir().unwrap();
    let extra = ["--author", "mlx-community"];
    let (_service, base) = start_serve(&world.endpoint(), &dir.path().join("a.db"), 3, &extra, &[]);
    let sim = &world.hub.as_ref().unwrap().sim;
    let (old, new, mirror) = ("mlx-community/tiny-q4", "bob/tiny-q4", &crate::support::mirror("mlx-community/tiny-q4"));
    wait_for("the mirror", 120, || sim.repos().get(mirror).is_some_and(|m| !m.meta.private));
    world.rename(old, new);
    wait_for("the mirror to go private", 60, || sim.repos().get(mirror).unwrap().meta.private);
    let page = get(&format!("{base}/repo/{old}"));
    let why = "its source was renamed to bob&#x2f;tiny-q4, which is not mirrored (not the audited author)";
    assert!(page.contains(why), "{page}");
}
