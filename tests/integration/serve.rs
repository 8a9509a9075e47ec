//! `hubalign serve` against a faulty simulator: two audit cycles, mirrors published once, and the dashboard,
//! the JSON API and /metrics agreeing with the store.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use hubalign::sim::faults::{Bucket, FaultConfig, Quota};

use crate::audit::world::{audit_world, db};
use crate::sim::world::ALICE;
use crate::support::{hubalign, python};

struct Service(Child);

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A GET from the test thread, on a small runtime of its own; `None` until the service listens.
fn try_get(url: &str) -> Option<String> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async { reqwest::get(url).await.ok()?.text().await.ok() })
}

fn get(url: &str) -> String {
    try_get(url).unwrap_or_else(|| panic!("GET {url} failed"))
}

#[test]
fn two_cycles_publish_once_and_every_view_agrees_with_the_store() {
    let world = audit_world(4, |c| {
        c.quotas = vec![(Bucket::Api, Quota { requests: 20, window: Duration::from_secs(1) })];
        c.faults = FaultConfig { error_rate: 0.03, truncate_rate: 0.0, seed: 3, latency: Duration::ZERO };
    });
    let (dir, db) = db();
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let endpoint = world.endpoint();
    // The schedule and the workers come from a config file, as in deploy/hubalign.toml.
    let config = dir.path().join("hubalign.toml");
    let listen = format!("127.0.0.1:{port}");
    std::fs::write(
        &config,
        format!(
            "interval = 3\nworkers = 2\nlisten = \"{listen}\"\ntarget-namespace = \"alice\"\nverify-device = \"cpu\"\n"
        ),
    )
    .unwrap();
    let _service = Service(
        hubalign()
            .args(["serve", "--endpoint", endpoint.as_str(), "--token", ALICE, "--db", db.to_str().unwrap()])
            .arg("--config")
            .arg(&config)
            .arg("--python")
            .arg(python())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    let (runs, jobs) = loop {
        std::thread::sleep(Duration::from_millis(300));
        assert!(Instant::now() < deadline, "two cycles did not complete");
        let Some(runs) = try_get(&format!("{base}/api/runs")) else { continue };
        let runs: Vec<serde_json::Value> = serde_json::from_str(&runs).unwrap_or_default();
        let jobs: Vec<serde_json::Value> = serde_json::from_str(&get(&format!("{base}/api/jobs"))).unwrap_or_default();
        let finished = runs.iter().filter(|r| r["status"] == "finished").count();
        let settled = !jobs.is_empty()
            && jobs.iter().all(|j| ["published", "skipped", "failed"].contains(&j["state"].as_str().unwrap_or("")));
        if finished >= 2 && settled {
            break (runs, jobs);
        }
    };
    assert!(runs.len() >= 2);
    for j in &jobs {
        assert_eq!(j["state"], "published", "{j}");
    }
    let sim = &world.hub.as_ref().unwrap().sim;
    {
        let repos = sim.repos();
        for j in &jobs {
            let mirror = &repos[j["target_repo"].as_str().unwrap()];
            let uploads = mirror.commits.values().filter(|c| c.files.contains_key("MEI_ALIGN_MANIFEST.json")).count();
            assert_eq!(uploads, 1, "{} published exactly once", j["target_repo"]);
        }
    }

    // The dashboard, the API and /metrics read the same store.
    let store = world.runtime.block_on(async {
        let store = hubalign::store::Store::open(&db).await.unwrap();
        (store.totals().await.unwrap(), hubalign::report::by_publisher(&store).await.unwrap())
    });
    let (totals, publishers) = store;
    let api: Vec<serde_json::Value> = serde_json::from_str(&get(&format!("{base}/api/publishers"))).unwrap();
    assert_eq!(api, serde_json::to_value(&publishers).unwrap().as_array().unwrap().clone());
    let metrics = get(&format!("{base}/metrics"));
    assert!(metrics.contains(&format!("hubalign_repos_audited {}", totals.repos_audited)), "{metrics}");
    assert!(metrics.contains(&format!("hubalign_duplicated_bytes {}", totals.misaligned_bytes)), "{metrics}");
    assert!(metrics.contains(&format!("hubalign_jobs{{state=\"published\"}} {}", jobs.len())), "{metrics}");
    let page = get(&format!("{base}/"));
    assert!(page.contains(&format!("<b id=\"repos-audited\">{}</b>", totals.repos_audited)), "{page}");
    for p in publishers.iter().filter(|p| p.repos_affected > 0) {
        assert!(
            page.contains(&format!("<tr data-namespace=\"{}\">", p.namespace)),
            "{} missing from the table",
            p.namespace
        );
        assert!(
            page.contains(&format!("data-namespace=\"{}\" data-bytes=\"{}\"", p.namespace, p.misaligned_bytes))
                || publishers.iter().filter(|q| q.misaligned_bytes > 0).count() > 10,
            "{} missing from the chart",
            p.namespace
        );
    }
    let repo_page = get(&format!("{base}/repo/mlx-community/tiny-q4"));
    assert!(repo_page.contains("tiny-q4-aligned"), "the repo page links its mirror");
    assert_eq!(get(&format!("{base}/healthz")), "ok\n");
}

#[test]
fn the_demo_audits_republishes_reports_and_keeps_serving() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut child = hubalign()
        .args(["demo", "--port", &port.to_string(), "--data-dir"])
        .arg(dir.path())
        .arg("--python")
        .arg(python())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let service = Service(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut printed = String::new();
    while !printed.contains("Dashboard: ") {
        let line = rx.recv_timeout(Duration::from_secs(180)).expect("the demo did not finish its first cycle");
        printed.push_str(&line);
        printed.push('\n');
    }
    // The by-publisher report: padding and reorder cases affected, the aligned and malformed ones not.
    let row =
        |ns: &str| printed.lines().find(|l| l.starts_with(ns)).unwrap_or_else(|| panic!("{ns}: {printed}")).to_owned();
    assert!(row("mlx-community").split_whitespace().nth(2).is_some_and(|n| n != "0"), "{printed}");
    let lmstudio: Vec<String> = row("lmstudio-community").split_whitespace().map(str::to_owned).collect();
    assert_eq!(lmstudio[6], "1", "one shard needs a reorder: {printed}");
    let tinyorg: Vec<String> = row("tinyorg").split_whitespace().map(str::to_owned).collect();
    assert_eq!((tinyorg[2].as_str(), tinyorg[7].as_str()), ("0", "1"), "aligned + malformed: {printed}");
    assert!(printed.contains(&format!("http://127.0.0.1:{port}/")));
    // Still serving: every affected repo has a published mirror, and the dashboard answers.
    let jobs: Vec<serde_json::Value> =
        serde_json::from_str(&get(&format!("http://127.0.0.1:{port}/api/jobs"))).unwrap();
    assert_eq!(jobs.len(), 4, "{jobs:?}");
    for j in &jobs {
        assert_eq!(j["state"], "published", "{j}");
        assert!(j["target_repo"].as_str().is_some_and(|t| t.starts_with("hubalign-demo/") && t.ends_with("-aligned")));
    }
    assert!(get(&format!("http://127.0.0.1:{port}/")).contains("mlx-community"));
    drop(service);
}
