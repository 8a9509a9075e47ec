//! Claim throughput and latency of the job queue, on SQLite and on PostgreSQL, in the same run:
//! `cargo run --release -p hubalign-bench --bin claim_bench [JOBS]` (default 4,000 jobs).
//!
//! For 1, 4 and 16 workers, each with a store (a pool) of its own, as separate processes would have: a fresh
//! database holding JOBS queued jobs, drained by the workers with the queue's real calls (claim, then finish
//! as published: three transactions with their events, as a job with no work between). Prints jobs per
//! second and the claim latency (p50, p99) per backend and worker count. PostgreSQL is a scratch server this
//! process starts (Debian's `postgresql` package), with `fsync` off: the figures compare the queues, not disks.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hubalign::job::JobOutcome;
use hubalign::store::Store;
use hubalign_test_support::scratch::ScratchPostgres;

async fn drain(
    store_at: &str,
    jobs: usize,
    workers: usize,
) -> Result<(f64, Vec<Duration>), Box<dyn std::error::Error>> {
    let open = |at: String| async move { Store::open_at(&at).await };
    let store = open(store_at.to_owned()).await?;
    for i in 0..jobs {
        store.job_for(&format!("ns{}/r{i}", i % 50), &"0".repeat(40), hubalign::job::VerifyDevice::Cpu).await?;
    }
    let started = Instant::now();
    let latencies = Arc::new(std::sync::Mutex::new(Vec::with_capacity(jobs)));
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..workers {
        let (latencies, at) = (latencies.clone(), store_at.to_owned());
        let store = open(at).await?;
        tasks.spawn(async move {
            let name = format!("bench-{w}");
            loop {
                let asked = Instant::now();
                let Some(job) = store.claim_job(&name, Duration::from_secs(600), None).await? else { break };
                let took = asked.elapsed();
                if let Ok(mut l) = latencies.lock() {
                    l.push(took);
                }
                let done = JobOutcome::Published { target: format!("{}-aligned", job.repo_id), commit: "0".repeat(40) };
                store.finish_job(job.id, &name, &done).await?;
            }
            Ok::<(), hubalign::store::StoreError>(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    let rate = jobs as f64 / started.elapsed().as_secs_f64();
    let mut latencies = latencies.lock().map(|l| l.clone()).unwrap_or_default();
    latencies.sort();
    Ok((rate, latencies))
}

fn quantile(sorted: &[Duration], q: f64) -> f64 {
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len().max(1)) - 1;
    sorted.get(i).map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let jobs: usize = std::env::args().nth(1).map(|a| a.parse()).transpose()?.unwrap_or(4_000);
    let postgres = ScratchPostgres::shared()?;
    let dir = tempfile::tempdir()?;
    let runtime = tokio::runtime::Runtime::new()?;
    println!("{jobs} jobs per run; claim then finish, no work between\n");
    println!("| backend | workers | jobs/s | claim p50 | claim p99 |");
    println!("|---|---|---|---|---|");
    for workers in [1, 4, 16] {
        for backend in ["SQLite", "PostgreSQL"] {
            let at = match backend {
                "SQLite" => dir.path().join(format!("claims-{workers}.db")).to_string_lossy().into_owned(),
                _ => postgres.database()?,
            };
            let (rate, latencies) = runtime.block_on(drain(&at, jobs, workers))?;
            println!(
                "| {backend} | {workers} | {rate:.0} | {:.2} ms | {:.2} ms |",
                quantile(&latencies, 0.5),
                quantile(&latencies, 0.99)
            );
        }
    }
    Ok(())
}
