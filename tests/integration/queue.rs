//! The job queue shared by workers in separate processes, on both backends: 2,000 jobs drained by 8 workers
//! while workers are killed with SIGKILL at random and restarted. No job is finished twice, none is lost.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hubalign::store::Store;

use crate::postgres::postgres_url;

/// The `queue_worker` example, built now (a no-op when it is current) beside this test binary.
fn queue_worker() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let status = Command::new(cargo)
                .args(["build", "--quiet", "--example", "queue_worker", "--manifest-path"])
                .arg(crate::support::root().join("Cargo.toml"))
                .status()
                .unwrap();
            assert!(status.success(), "building the queue_worker example");
            let exe = std::env::current_exe().unwrap();
            let debug = exe.parent().and_then(|deps| deps.parent()).unwrap();
            debug.join("examples").join("queue_worker")
        })
        .clone()
}

const JOBS: usize = 2_000;
const WORKERS: usize = 8;

fn start(db: &str, name: &str, log: &std::path::Path) -> Child {
    Command::new(queue_worker())
        .args([db, name, "20", "1500"])
        .arg(log)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn drain_while_killing(db: &str) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let store = runtime.block_on(async {
        let store = Store::open_at(db).await;
        let store = store.unwrap();
        for i in 0..JOBS {
            store
                .job_for(&format!("ns{}/r{i}", i % 7), &"0".repeat(40), hubalign::job::VerifyDevice::Cpu)
                .await
                .unwrap();
        }
        store
    });
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("finished.log");
    let mut workers: Vec<Child> = (0..WORKERS).map(|w| start(db, &format!("w{w}-0"), &log)).collect();
    let (mut seed, mut kills, mut generation) = (12_345u64, 0, 1);
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        std::thread::sleep(Duration::from_millis(150));
        let counts: BTreeMap<String, i64> = runtime.block_on(store.job_counts()).unwrap().into_iter().collect();
        if counts.get("published") == Some(&(JOBS as i64)) {
            break;
        }
        assert!(Instant::now() < deadline, "not drained: {counts:?}");
        // Kill a worker chosen at random in the middle of whatever it does, at each look, 24 times, and start
        // a new one. (Each job takes 20 ms, so 2,000 take at least 5 s over 8 workers.)
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        if kills < 24 {
            let w = (seed >> 33) as usize % WORKERS;
            workers[w].kill().unwrap();
            workers[w].wait().unwrap();
            workers[w] = start(db, &format!("w{w}-{generation}"), &log);
            kills += 1;
            generation += 1;
        }
    }
    for w in &mut workers {
        let _ = w.kill();
        let _ = w.wait();
    }
    assert_eq!(kills, 24, "workers were killed {kills} times before the queue drained");
    // No job finished twice: the workers' log has a line per outcome the store accepted, written right after
    // (a worker killed between the two leaves none, so some may be missing; none may be doubled).
    let mut finished: BTreeMap<i64, usize> = BTreeMap::new();
    for line in std::fs::read_to_string(&log).unwrap().lines() {
        let id: i64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        *finished.entry(id).or_default() += 1;
    }
    let twice: Vec<_> = finished.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "finished more than once: {twice:?}");
    assert!(finished.len() + kills >= JOBS, "{} lines for {JOBS} jobs", finished.len());
    // And the store agrees: every job's history has exactly one `published`, and the killed workers' jobs
    // were claimed again (more claims than jobs).
    let jobs = runtime.block_on(store.jobs()).unwrap();
    let claims: i64 = jobs.iter().map(|j| j.attempts).sum();
    assert!(claims > JOBS as i64, "the killed workers' jobs were taken over: {claims} claims");
    for job in &jobs {
        let events = runtime.block_on(store.repo_job_events(&job.repo_id)).unwrap();
        assert_eq!(events.iter().filter(|e| e.state == "published").count(), 1, "{events:?}");
    }
    // The trigger-kept job sums, written by eight processes at once and through the kills, count them all.
    assert_eq!(runtime.block_on(store.job_counts()).unwrap(), [("published".to_owned(), JOBS as i64)]);
}

#[test]
fn eight_worker_processes_drain_the_queue_on_sqlite_while_being_killed() {
    let dir = tempfile::tempdir().unwrap();
    drain_while_killing(dir.path().join("queue.db").to_str().unwrap());
}

#[cfg(feature = "system-tests")]
#[test]
fn eight_worker_processes_drain_the_queue_on_postgres_while_being_killed() {
    drain_while_killing(&postgres_url());
}
