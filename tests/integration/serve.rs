//! `hubalign serve` against a faulty simulator: two audit cycles, mirrors published once, and the dashboard,
//! the JSON API and /metrics agreeing with the store.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use hubsim::faults::{Bucket, FaultConfig, Quota};

use crate::audit::world::{audit_world, db};
use crate::sim::world::ALICE;
use crate::support::{hubalign, python};

/// A child process killed when dropped.
pub(crate) struct Service(pub Child);

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A port nothing listens on now.
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A GET from the test thread, on a small runtime of its own; `None` until the service listens.
pub(crate) fn try_get(url: &str) -> Option<String> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async { reqwest::get(url).await.ok()?.text().await.ok() })
}

/// A GET, redirects followed: the status, the final URL and the body.
pub(crate) fn fetch(url: &str) -> (u16, String, String) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let response = reqwest::get(url).await.unwrap();
        let (status, url) = (response.status().as_u16(), response.url().to_string());
        (status, url, response.text().await.unwrap())
    })
}

/// A GET that must succeed.
pub(crate) fn get(url: &str) -> String {
    try_get(url).unwrap_or_else(|| panic!("GET {url} failed"))
}

/// Starts `serve` as alice against `endpoint` (admin token `s3cret`, MLX check on the CPU), auditing every
/// `interval` seconds, with `extra` flags and environment, and waits until it answers.
pub(crate) fn start_serve(
    endpoint: &str,
    db: &Path,
    interval: u64,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (Service, String) {
    start_serve_on(free_port(), endpoint, db, interval, extra, env)
}

/// [`start_serve`] on a port chosen beforehand (one the simulator's webhooks already point at).
pub(crate) fn start_serve_on(
    port: u16,
    endpoint: &str,
    db: &Path,
    interval: u64,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (Service, String) {
    let mut cmd = hubalign();
    cmd.args(["serve", "--endpoint", endpoint, "--token", ALICE, "--db", db.to_str().unwrap()])
        .args(["--listen", &format!("127.0.0.1:{port}"), "--interval", &interval.to_string()])
        .args(["--target-namespace", "alice", "--verify-device", "cpu", "--admin-token", "s3cret"])
        .arg("--python")
        .arg(python())
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let service = Service(cmd.spawn().unwrap());
    let base = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(60);
    while try_get(&format!("{base}/healthz")).is_none() {
        assert!(Instant::now() < deadline, "serve never answered");
        std::thread::sleep(Duration::from_millis(100));
    }
    (service, base)
}

#[cfg(feature = "system-tests")]
#[test]
fn two_cycles_publish_once_and_every_view_agrees_with_the_store() {
    let world = audit_world(4, |c| {
        c.quotas = vec![(Bucket::Api, Quota { requests: 20, window: Duration::from_secs(1) })];
        c.faults = FaultConfig {
            error_rate: 0.03,
            truncate_rate: 0.0,
            seed: 3,
            latency: Duration::ZERO,
            ..FaultConfig::default()
        };
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
        assert!(Instant::now() < deadline, "two cycles did not complete: {}", get(&format!("{base}/api/jobs")));
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
        if j["repo_id"] == "alice/private-q4" {
            // The token can read it, but a mirror would show it to everyone.
            assert_eq!(j["state"], "skipped", "{j}");
            assert!(j["reason"].as_str().unwrap_or("").starts_with("private:"), "{j}");
        } else {
            assert_eq!(j["state"], "published", "{j}");
        }
    }
    let published: Vec<&serde_json::Value> = jobs.iter().filter(|j| j["state"] == "published").collect();
    let sim = &world.hub.as_ref().unwrap().sim;
    {
        let repos = sim.repos();
        assert!(
            !repos.keys().any(|id| id.contains("private-q4") && id.ends_with("-aligned")),
            "no mirror of the private source"
        );
        for j in &published {
            let mirror = repos.get(j["target_repo"].as_str().unwrap()).unwrap();
            let uploads = mirror.commits.values().filter(|c| c.files.contains_key("MEI_ALIGN_MANIFEST.json")).count();
            assert_eq!(uploads, 1, "{} published exactly once", j["target_repo"]);
        }
    }

    // The dashboard, the API and /metrics read the same store. The service keeps auditing (its own mirrors
    // join the listing), so compare within a window in which the store did not change.
    let read_store = || {
        world.runtime.block_on(async {
            let store = hubalign::store::Store::open(&db).await.unwrap();
            (store.totals().await.unwrap(), hubalign::report::by_publisher(&store).await.unwrap())
        })
    };
    let (totals, publishers, api, metrics, page) = (0..20)
        .find_map(|_| {
            let (totals, publishers) = read_store();
            let api: Vec<serde_json::Value> = serde_json::from_str(&get(&format!("{base}/api/publishers"))).unwrap();
            let metrics = get(&format!("{base}/metrics"));
            let page = get(&format!("{base}/"));
            let steady = read_store() == (totals.clone(), publishers.clone());
            steady.then_some((totals, publishers, api, metrics, page))
        })
        .expect("the store never held still for one round of reads");
    assert_eq!(api, serde_json::to_value(&publishers).unwrap().as_array().unwrap().clone());
    assert!(metrics.contains(&format!("hubalign_repos_audited {}", totals.repos_audited)), "{metrics}");
    assert!(metrics.contains(&format!("hubalign_duplicated_bytes {}", totals.misaligned_bytes)), "{metrics}");
    assert!(metrics.contains(&format!("hubalign_jobs{{state=\"published\"}} {}", published.len())), "{metrics}");
    assert!(page.contains(&format!("<b id=\"repos-audited\">{}</b>", totals.repos_audited)), "{page}");
    // The trend has a point per audit that ended; the headline's share matches one computed from the API.
    let ended = runs.iter().filter(|r| r["status"] != "running").count();
    assert!(page.matches("class=\"trend-point\"").count() >= ended.min(60), "{page}");
    let affected: Vec<serde_json::Value> =
        serde_json::from_str(&get(&format!("{base}/api/repos?affected=true&limit=1000"))).unwrap();
    let mirrored_sources: std::collections::HashSet<&str> =
        published.iter().filter_map(|j| j["repo_id"].as_str()).collect();
    let total: i64 = affected.iter().map(|r| r["misaligned_bytes"].as_i64().unwrap()).sum();
    let mirrored: i64 = affected
        .iter()
        .filter(|r| mirrored_sources.contains(r["repo_id"].as_str().unwrap()))
        .map(|r| r["misaligned_bytes"].as_i64().unwrap())
        .sum();
    let share = format!("<b id=\"mirrored-share\">{:.0}%</b>", 100.0 * mirrored as f64 / total as f64);
    assert!(page.contains(&share), "{share} in {page}");
    let artifacts = crate::support::root().join("target/test-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    chromium(&format!("{base}/"), Some(&artifacts.join("dashboard-overview-trend-1280.png")));
    // The trend says which line is which, and draws the dashed one on top.
    assert!(page.contains("id=\"trend-legend\""), "{page}");
    assert!(page.find("class=\"trend-repos\"") > page.find("class=\"trend-bytes\""), "the dashed line on top");
    // The chart holds the ten namespaces that duplicate the most, and only them; the table every affected one.
    let mut by_bytes: Vec<_> = publishers.iter().filter(|p| p.misaligned_bytes > 0).collect();
    by_bytes.sort_by_key(|p| std::cmp::Reverse(p.misaligned_bytes));
    for (rank, p) in by_bytes.iter().enumerate() {
        let bar = format!("data-namespace=\"{}\" data-bytes=\"{}\"", p.namespace, p.misaligned_bytes);
        assert_eq!(page.contains(&bar), rank < 10, "{} (rank {rank}) in the chart", p.namespace);
    }
    for p in publishers.iter().filter(|p| p.repos_affected > 0) {
        assert!(
            page.contains(&format!("<tr data-namespace=\"{}\">", p.namespace)),
            "{} missing from the table",
            p.namespace
        );
    }
    let store_jobs =
        world.runtime.block_on(async { hubalign::store::Store::open(&db).await.unwrap().jobs().await.unwrap() });
    let (down, up) = store_jobs.iter().fold((0, 0), |(d, u), j| (d + j.bytes_downloaded, u + j.bytes_uploaded));
    for j in store_jobs.iter().filter(|j| j.state == "published") {
        assert!(j.bytes_downloaded > 0 && j.bytes_uploaded > 0, "{} moved no bytes: {j:?}", j.repo_id);
    }
    assert!(metrics.contains(&format!("hubalign_job_bytes_total{{direction=\"down\"}} {down}")), "{metrics}");
    assert!(metrics.contains(&format!("hubalign_job_bytes_total{{direction=\"up\"}} {up}")), "{metrics}");
    // Counters only go up: runs started and ended by how; running runs are a gauge.
    assert!(metrics.contains("hubalign_audit_runs_ended_total{status=\"finished\"}"), "{metrics}");
    assert!(metrics.contains("hubalign_audit_runs_started_total "), "{metrics}");
    assert!(!metrics.contains("status=\"running\""), "{metrics}");
    for family in [
        "hubalign_http_request_duration_seconds_bucket{",
        "hubalign_hub_request_duration_seconds_bucket{",
        "hubalign_last_audit_duration_seconds ",
        "process_cpu_seconds_total ",
        "process_resident_memory_bytes ",
        "process_open_fds ",
        "process_start_time_seconds ",
        "hubalign_alarms 0",
    ] {
        assert!(metrics.contains(family), "{family} in {metrics}");
    }
    assert!(metrics.contains("route=\"/api/jobs\""), "the API's answers are timed: {metrics}");
    // Every job state is present, at zero too; the build and the last successful audit are named.
    assert!(metrics.contains("hubalign_jobs{state=\"awaiting_metal_verify\"} 0"), "{metrics}");
    assert!(metrics.contains(&format!("hubalign_build_info{{version=\"{}\"}} 1", env!("CARGO_PKG_VERSION"))));
    let last_ok = metrics.lines().find_map(|l| l.strip_prefix("hubalign_last_successful_audit_timestamp_seconds "));
    let age = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64
        - last_ok.expect("the last successful audit's time").parse::<i64>().unwrap();
    assert!((0..600).contains(&age), "the last successful audit ended {age} s ago");
    // Without an admin token, nothing that changes state is served.
    assert_eq!(post(&format!("{base}/api/admin/audit"), None).0, 404);
    let repo_page = get(&format!("{base}/repo/mlx-community/tiny-q4"));
    // The page escapes `/` (`&#x2f;`): the mirror's name after its namespace.
    let mirror = crate::support::mirror("mlx-community/tiny-q4");
    assert!(repo_page.contains(mirror.split_once('/').unwrap().1), "the repo page links its mirror");
    let q4 = store_jobs.iter().find(|j| j.repo_id == "mlx-community/tiny-q4").expect("a job for tiny-q4");
    for step in ["claimed", "downloading", "relaying", "verifying", "publishing", "published"] {
        assert!(
            repo_page.contains(&format!("<tr><td>{}</td><td>", q4.id))
                && repo_page.contains(&format!("<td>{step}</td>")),
            "the job history shows {step}"
        );
    }
    assert_eq!(get(&format!("{base}/healthz")), "ok\n");
}

/// A POST with an optional bearer token: status and body.
pub(crate) fn post(url: &str, token: Option<&str>) -> (u16, String) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let mut request = reqwest::Client::new().post(url);
        if let Some(t) = token {
            request = request.bearer_auth(t);
        }
        let answer = request.send().await.unwrap();
        (answer.status().as_u16(), answer.text().await.unwrap())
    })
}

/// A store audited by `hubalign audit` gets its jobs queued when `serve` takes the scheduler lease, not a day
/// later after its next audit (the last one is recent, so none starts now).
#[cfg(feature = "system-tests")]
#[test]
fn serve_queues_what_an_audit_before_it_found() {
    let world = audit_world(0, |_| {});
    let (_dir, db) = db();
    let endpoint = world.endpoint();
    let audited = hubalign()
        .args(["audit", "--endpoint", endpoint.as_str(), "--token", ALICE, "--db", db.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(audited.status.code(), Some(0), "{}", String::from_utf8_lossy(&audited.stderr));
    let (_service, base) = start_serve(&endpoint, &db, 86_400, &["--workers", "0"], &[]);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let jobs: Vec<serde_json::Value> = serde_json::from_str(&get(&format!("{base}/api/jobs"))).unwrap_or_default();
        if jobs.iter().any(|j| j["repo_id"] == "mlx-community/tiny-q4" && j["state"] == "queued") {
            break;
        }
        assert!(Instant::now() < deadline, "no job queued: {jobs:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let runs: Vec<serde_json::Value> = serde_json::from_str(&get(&format!("{base}/api/runs"))).unwrap();
    assert_eq!(runs.len(), 1, "no audit started: the last one is recent");
}

#[test]
fn cron_schedules_audits_and_state_changes_need_the_admin_token() {
    let world = audit_world(0, |_| {});
    let (_dir, db) = db();
    // A failed job for the administrator to retry.
    let failed = world.runtime.block_on(async {
        let store = hubalign::store::Store::open(&db).await.unwrap();
        let job = store.job_for("alice/broken", &"0".repeat(40), hubalign::job::VerifyDevice::Cpu).await.unwrap();
        let outcome =
            hubalign::job::JobOutcome::Failed { reason: "test".into(), kind: hubalign::job::FailureKind::Permanent };
        store.claim_job("test", Duration::from_secs(60), Some(job.id)).await.unwrap().unwrap();
        store.finish_job(job.id, "test", &outcome).await.unwrap().unwrap();
        job.id
    });
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let endpoint = world.endpoint();
    let service = Service(
        hubalign()
            .args(["serve", "--endpoint", endpoint.as_str(), "--token", ALICE, "--db", db.to_str().unwrap()])
            .args(["--listen", &format!("127.0.0.1:{port}"), "--cron", "*/2 * * * * *", "--workers", "0"])
            .env("HUBALIGN_ADMIN_TOKEN", "s3cret-admin")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let runs = loop {
        std::thread::sleep(Duration::from_millis(200));
        assert!(Instant::now() < deadline, "two cron-scheduled audits did not finish");
        let Some(runs) = try_get(&format!("{base}/api/runs")) else { continue };
        let runs: Vec<serde_json::Value> = serde_json::from_str(&runs).unwrap_or_default();
        if runs.iter().filter(|r| r["status"] == "finished").count() >= 2 {
            break runs;
        }
    };
    let starts: std::collections::BTreeSet<&str> = runs.iter().filter_map(|r| r["started_at"].as_str()).collect();
    assert!(starts.len() >= 2, "two runs, one per tick: {runs:?}");
    // The time the schedule waits for is exact; when a run records its start depends on the machine's load.
    let overview = get(&format!("{base}/"));
    let next = overview.split("Next: <time datetime=\"").nth(1).and_then(|rest| rest.get(..20));
    let second: u32 = next.and_then(|at| at.get(17..19)).and_then(|s| s.parse().ok()).unwrap_or(1);
    assert_eq!(second % 2, 0, "the next audit is off the cron schedule: {next:?}");
    let url = format!("{base}/api/admin/jobs/{failed}/retry");
    assert_eq!(post(&url, None).0, 401);
    assert_eq!(post(&url, Some("s3cret-admiN")).0, 401);
    assert_eq!(post(&url, Some("s3cret-admin-")).0, 401);
    let (status, body) = post(&url, Some("s3cret-admin"));
    assert_eq!(status, 200, "{body}");
    let job: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!((job["state"].as_str(), job["attempts"].as_i64()), (Some("queued"), Some(0)));
    assert_eq!(post(&url, Some("s3cret-admin")).0, 409, "only failed or skipped jobs are retried");
    assert_eq!(post(&format!("{base}/api/admin/jobs/99999/retry"), Some("s3cret-admin")).0, 404);
    drop(service);

    // Once a year: no audit at start; an administrator's request runs one now.
    let (_dir, db) = crate::audit::world::db();
    let _service = Service(
        hubalign()
            .args(["serve", "--endpoint", endpoint.as_str(), "--token", ALICE, "--db", db.to_str().unwrap()])
            .args(["--listen", &format!("127.0.0.1:{port}"), "--cron", "0 0 1 1 *", "--workers", "0"])
            .args(["--admin-token", "s3cret-admin"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while try_get(&format!("{base}/healthz")).is_none() {
        assert!(Instant::now() < deadline, "the service did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(get(&format!("{base}/api/runs")), "[]", "no audit before its cron time");
    assert!(get(&format!("{base}/")).contains("-01-01T00:00:00Z"), "the overview shows the next cron time");
    assert_eq!(post(&format!("{base}/api/admin/audit"), None).0, 401);
    assert_eq!(post(&format!("{base}/api/admin/audit"), Some("s3cret-admin")).0, 202);
    loop {
        let runs: Vec<serde_json::Value> = serde_json::from_str(&get(&format!("{base}/api/runs"))).unwrap();
        if runs.iter().any(|r| r["status"] == "finished") {
            break;
        }
        assert!(Instant::now() < deadline, "the requested audit did not finish: {runs:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Runs `hubalign demo` in `dir` with `extra` flags until its first cycle is done (the report and the
/// dashboard's address printed): the running demo, what it printed, and its port.
pub(crate) fn demo_first_cycle(dir: &Path, extra: &[&str]) -> (Service, String, u16) {
    use std::io::{BufRead, BufReader};
    let port = free_port();
    let mut child = hubalign()
        .args(["demo", "--port", &port.to_string(), "--data-dir"])
        .arg(dir)
        .args(extra)
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
    (service, printed, port)
}

#[cfg(feature = "system-tests")]
#[test]
fn the_demo_audits_republishes_reports_and_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let (service, printed, port) = demo_first_cycle(dir.path(), &[]);
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
    check_pages_in_a_browser(port);
    drop(service);
}

/// Runs headless Chromium on `url`: the rendered DOM, or a screenshot at `png`. Panics on any console message.
fn chromium(url: &str, png: Option<&std::path::Path>) -> String {
    chromium_at(url, png, 1280)
}

/// [`chromium`] with a window `width` pixels wide.
fn chromium_at(url: &str, png: Option<&std::path::Path>, width: u32) -> String {
    let mut cmd = std::process::Command::new("chromium");
    cmd.args(["--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0"]);
    cmd.arg(format!("--window-size={width},1400"));
    match png {
        Some(path) => cmd.arg(format!("--screenshot={}", path.display())),
        None => cmd.arg("--dump-dom"),
    };
    let out =
        cmd.arg(url).output().expect("chromium is needed for the dashboard tests (bash tests/run.sh installs it)");
    assert!(out.status.success(), "chromium {url}: {}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let console: Vec<&str> = stderr.lines().filter(|l| l.contains(":CONSOLE")).collect();
    assert!(console.is_empty(), "{url}: the browser console shows {console:#?}");
    String::from_utf8(out.stdout).unwrap()
}

/// Attribute values `name="…"` in order of appearance in `dom`, for elements whose tag starts with `tag`.
fn attrs<'a>(dom: &'a str, tag: &str, name: &str) -> Vec<&'a str> {
    let needle = format!("{name}=\"");
    dom.split(tag)
        .skip(1)
        .filter_map(|el| {
            let el = el.split('>').next()?;
            let start = el.find(&needle)? + needle.len();
            el[start..].split('"').next()
        })
        .collect()
}

/// Loads the overview, a namespace and a repo page in Chromium, checks what it rendered against the API
/// (which reads the store), and saves a screenshot of each under target/test-artifacts/.
fn check_pages_in_a_browser(port: u16) {
    let base = format!("http://127.0.0.1:{port}");
    let publishers: Vec<serde_json::Value> = serde_json::from_str(&get(&format!("{base}/api/publishers"))).unwrap();
    let affected: Vec<&serde_json::Value> = publishers.iter().filter(|p| p["repos_affected"] != 0).collect();

    let overview = chromium(&format!("{base}/"), None);
    let rows = attrs(&overview, "<tr ", "data-namespace");
    let expected: Vec<&str> = affected.iter().map(|p| p["namespace"].as_str().unwrap()).collect();
    assert_eq!(rows, expected, "the namespaces table");
    let bars: Vec<(&str, &str)> = attrs(&overview, "<rect ", "data-namespace")
        .into_iter()
        .zip(attrs(&overview, "<rect ", "data-bytes"))
        .collect();
    let expected_bars: Vec<(&str, String)> =
        affected.iter().map(|p| (p["namespace"].as_str().unwrap(), p["misaligned_bytes"].to_string())).collect();
    assert_eq!(bars.len(), expected_bars.len(), "one bar per affected namespace: {bars:?}");
    for ((ns, bytes), (want_ns, want_bytes)) in bars.iter().zip(&expected_bars) {
        assert_eq!((*ns, *bytes), (*want_ns, want_bytes.as_str()), "the chart");
    }
    let audited: i64 = publishers.iter().map(|p| p["repos_audited"].as_i64().unwrap()).sum();
    assert!(overview.contains(&format!("<b id=\"repos-audited\">{audited}</b>")), "repos audited: {audited}");

    let namespace = chromium(&format!("{base}/ns/mlx-community"), None);
    let repos: Vec<serde_json::Value> =
        serde_json::from_str(&get(&format!("{base}/api/repos?namespace=mlx-community"))).unwrap();
    assert!(!repos.is_empty());
    for r in &repos {
        assert!(namespace.contains(r["repo_id"].as_str().unwrap()), "{r} missing from the namespace page");
    }
    let repo = chromium(&format!("{base}/repo/mlx-community/Tiny-Llama-4bit"), None);
    let mirror = hubalign::repack::publish::mirror_name("mlx-community/Tiny-Llama-4bit", "hubalign-demo");
    assert!(repo.contains(&format!("{mirror}</a>")), "the mirror link");
    assert!(repo.contains("<td>model.safetensors</td><td>header_pad</td>"), "the shard row");
    // Times are UTC in the page and on hover, and the reader's own (with how long ago) once the script ran.
    let times = attrs(&repo, "<time ", "datetime");
    assert!(!times.is_empty() && times.iter().all(|t| hubalign::time::parse_utc(t).is_some()), "{times:?}");
    assert_eq!(attrs(&repo, "<time ", "data-local").len(), times.len(), "every time shown in local time");
    assert!(attrs(&repo, "<time ", "title").iter().all(|t| t.ends_with(" UTC")), "UTC on hover");
    assert!(repo.contains(" ago)</time>") || repo.contains("now)</time>"), "relative times");

    // The namespace page names each repo's mirror and newest job.
    let row =
        namespace.split("data-repo=\"mlx-community/Tiny-Llama-4bit\"").nth(1).unwrap().split("</tr>").next().unwrap();
    assert!(row.contains(&format!("{mirror}</a>")) && row.contains(">published</a>"), "{row}");
    // Every namespace is reachable, affected or not, in order; and a search finds a repo in any case.
    let every = chromium(&format!("{base}/namespaces"), None);
    let listed = attrs(&every, "<tr ", "data-namespace");
    let mut sorted = listed.clone();
    sorted.sort_unstable();
    assert_eq!(listed, sorted, "by name");
    for p in &publishers {
        assert!(listed.contains(&p["namespace"].as_str().unwrap()), "{p} missing from /namespaces");
    }
    let repos: Vec<serde_json::Value> = serde_json::from_str(&get(&format!("{base}/api/repos?limit=1000"))).unwrap();
    let mut namespaces: Vec<&str> = repos.iter().map(|r| r["namespace"].as_str().unwrap()).collect();
    namespaces.sort_unstable();
    namespaces.dedup();
    assert_eq!(listed, namespaces, "every namespace the store knows, audited or not");
    let found = chromium(&format!("{base}/search?q=tiny-LLAMA"), None);
    assert!(found.contains("data-repo=\"mlx-community/Tiny-Llama-4bit\""), "the search");
    let nothing = chromium(&format!("{base}/search?q=no-such-name"), None);
    assert_eq!(nothing.matches(">none</td>").count(), 2, "empty results say so");
    // A name in another case leads to the page, as on the Hub; a missing page is one of the site's.
    let (status, url, _) = fetch(&format!("{base}/ns/MLX-COMMUNITY"));
    assert_eq!((status, url.as_str()), (200, format!("{base}/ns/mlx-community").as_str()));
    let (status, url, _) = fetch(&format!("{base}/repo/MLX-community/tiny-llama-4BIT"));
    assert_eq!((status, url.as_str()), (200, format!("{base}/repo/mlx-community/Tiny-Llama-4bit").as_str()));
    for missing in ["/no/such/page", "/ns/no-such-namespace", "/repo/no/such-repo"] {
        let (status, _, body) = fetch(&format!("{base}{missing}"));
        assert_eq!(status, 404, "{missing}");
        assert!(body.contains("id=\"error\" data-status=\"404\"") && body.contains("role=\"search\""), "{body}");
    }
    let (status, _, body) = fetch(&format!("{base}/search?q={}", "a".repeat(201)));
    assert!(status == 400 && body.contains("at most 200 characters"), "a search longer than any repo id: {status}");
    let (status, _, body) = fetch(&format!("{base}/api/no-such-endpoint"));
    assert_eq!(status, 404);
    assert!(serde_json::from_str::<serde_json::Value>(&body).unwrap()["error"].is_string(), "{body}");

    let artifacts = crate::support::root().join("target/test-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    // Every page at a desktop and a phone width, kept as test artefacts to look at.
    for (page, path) in [
        ("overview", "/"),
        ("namespace", "/ns/mlx-community"),
        ("repo", "/repo/mlx-community/Tiny-Llama-4bit"),
        ("namespaces", "/namespaces"),
        ("search", "/search?q=llama"),
        ("jobs", "/jobs"),
        ("not-found", "/no/such/page"),
    ] {
        for width in [1280, 390] {
            let png = artifacts.join(format!("dashboard-{page}-{width}.png"));
            let _ = std::fs::remove_file(&png);
            chromium_at(&format!("{base}{path}"), Some(&png), width);
            let bytes = std::fs::read(&png).unwrap_or_else(|e| panic!("{}: {e}", png.display()));
            assert!(bytes.starts_with(b"\x89PNG") && bytes.len() > 10_000, "{}: {} bytes", png.display(), bytes.len());
            // The PNG's own header says how wide the page was drawn.
            let drawn = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
            assert_eq!(drawn, width, "{}", png.display());
        }
    }
}

/// Jobs that keep failing are seen: `/healthz` says `degraded` with why (200: a restart mends nothing), the
/// overview counts the failed jobs under a banner, `/jobs?state=failed` lists them, and `/metrics` counts
/// the alarm.
#[cfg(feature = "system-tests")]
#[test]
fn jobs_that_keep_failing_degrade_the_health_and_show_on_every_view() {
    let world = audit_world(0, |_| {});
    let (dir, db) = db();
    let failing = crate::support::python_for_jobs(dir.path(), crate::support::CHECK_FAILS);
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let endpoint = world.endpoint();
    let _service = Service(
        hubalign()
            .args(["serve", "--endpoint", endpoint.as_str(), "--token", ALICE, "--db", db.to_str().unwrap()])
            .args(["--listen", &format!("127.0.0.1:{port}"), "--interval", "86400", "--workers", "1"])
            .args(["--target-namespace", "alice", "--verify-device", "cpu", "--python"])
            .arg(&failing)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(180);
    let failed = loop {
        assert!(Instant::now() < deadline, "three jobs did not fail");
        std::thread::sleep(Duration::from_millis(300));
        let Some(jobs) = try_get(&format!("{base}/api/jobs?state=failed")) else { continue };
        let jobs: Vec<serde_json::Value> = serde_json::from_str(&jobs).unwrap_or_default();
        if jobs.len() >= 3 {
            break jobs;
        }
    };
    let health = get(&format!("{base}/healthz"));
    assert!(health.starts_with("degraded\n"), "{health}");
    assert!(health.contains("jobs_failing: the last") && health.contains("differs"), "{health}");
    let overview = get(&format!("{base}/"));
    assert!(overview.contains("data-alarm=\"jobs_failing\""), "a banner: {overview}");
    // The worker goes on failing jobs meanwhile: the page counts at least those seen before it.
    let shown = overview.split("<b id=\"jobs-failed\">").nth(1).and_then(|rest| rest.split('<').next());
    let shown: usize = shown.and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("the failed count in {overview}"));
    assert!(shown >= failed.len(), "{shown} failed shown, {} seen before", failed.len());
    let page = get(&format!("{base}/jobs?state=failed"));
    for job in &failed {
        assert!(page.contains(&format!("data-job=\"{}\" data-state=\"failed\"", job["id"])), "{page}");
    }
    assert!(
        get(&format!("{base}/jobs?state=published")).contains("<td colspan=\"6\" class=\"muted\">none</td>"),
        "an empty table says so"
    );
    let metrics = get(&format!("{base}/metrics"));
    assert!(metrics.contains("hubalign_alarms 1"), "{metrics}");
}

/// The Hub's hourly quota on commits spent: the job waits without spending an attempt, `/healthz` says
/// `degraded` with when writes start again, the overview shows it, and the worker claims nothing meanwhile.
#[cfg(feature = "system-tests")]
#[test]
fn a_spent_quota_on_actions_pauses_the_workers_and_says_so() {
    let world = audit_world(0, |c| {
        c.action_quotas = hubsim::actions::ActionQuotas {
            limits: vec![(hubsim::actions::Action::Commit, 0)],
            window: Duration::from_secs(3600),
        };
    });
    let (_dir, db) = db();
    let (_service, base) = start_serve(&world.endpoint(), &db, 86400, &["--workers", "1"], &[]);
    let deadline = Instant::now() + Duration::from_secs(180);
    let health = loop {
        assert!(Instant::now() < deadline, "no write was refused by the quota");
        std::thread::sleep(Duration::from_millis(300));
        let health = get(&format!("{base}/healthz"));
        if health.contains("hub_action_quota") {
            break health;
        }
    };
    assert!(health.starts_with("degraded\n"), "{health}");
    assert!(health.contains("pauses every write and claim until"), "{health}");
    let overview = get(&format!("{base}/"));
    assert!(overview.contains("data-notice=\"hub_action_quota\""), "a banner: {overview}");
    let jobs: Vec<serde_json::Value> = serde_json::from_str(&get(&format!("{base}/api/jobs"))).unwrap();
    let deferred: Vec<_> =
        jobs.iter().filter(|j| j["reason"].as_str().unwrap_or("").contains("hourly quotas")).collect();
    assert_eq!(deferred.len(), 1, "one job met the quota, and the worker claimed no other: {jobs:#?}");
    assert_eq!(deferred[0]["state"], "queued");
    assert_eq!(deferred[0]["attempts"], 0, "{:#?}", deferred[0]);
    assert_eq!(world.counters().requests["commit"], 1, "the refused commit is not sent again");
}
