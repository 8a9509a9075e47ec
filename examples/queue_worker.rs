//! A worker on the real queue whose jobs only take time: the library's worker loop (claims, heartbeats,
//! fencing, events) with a runner that advances each job one step, sleeps, and publishes nothing. For the
//! queue's crash test (workers killed with SIGKILL and restarted) and the claim benchmark.
//!
//! `queue_worker DB NAME WORK_MS LEASE_MS LOG [once]`: runs until killed (or, with `once`, until the queue is
//! empty). Each job this worker finished is appended to LOG as `finished ID NAME` (the line is written after
//! the store accepted the outcome, so a job listed twice would have been finished twice; one killed between
//! the two is missing).

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use hubalign::job::{Job, JobOutcome, JobState};
use hubalign::store::Store;
use hubalign::worker::{JobRunner, Recorded, WhenIdle, WorkerLoop};

struct Sleeper {
    store: Store,
    name: String,
    work: Duration,
    lease: Duration,
    log: std::sync::Mutex<std::fs::File>,
}

impl JobRunner for Sleeper {
    async fn run(&self, job: Job, recorded: Recorded) -> Result<Option<JobState>, hubalign::store::StoreError> {
        if !self.store.advance_job(job.id, &self.name, (JobState::Downloading, None), self.lease).await? {
            return Ok(None);
        }
        tokio::time::sleep(self.work).await;
        let outcome = JobOutcome::Published { target: format!("{}-aligned", job.repo_id), commit: "0".repeat(40) };
        let state = self.store.finish_job(job.id, &self.name, &outcome).await?;
        if state.is_some() {
            recorded.set();
        }
        if state.is_some()
            && let Ok(mut log) = self.log.lock()
        {
            // One write per line: appends from several processes never interleave within a line.
            let _ = log.write_all(format!("finished {} {}\n", job.id, self.name).as_bytes());
        }
        Ok(state)
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [db, name, work_ms, lease_ms, log, rest @ ..] = args.as_slice() else {
        return Err("usage: queue_worker DB NAME WORK_MS LEASE_MS LOG [once]".into());
    };
    let (work, lease) = (Duration::from_millis(work_ms.parse()?), Duration::from_millis(lease_ms.parse()?));
    let once = rest.first().is_some_and(|r| r == "once");
    let log = std::fs::OpenOptions::new().create(true).append(true).open(log)?;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let store = Store::open_at(db).await?;
        let runner = Sleeper { store: store.clone(), name: name.clone(), work, lease, log: std::sync::Mutex::new(log) };
        let worker = WorkerLoop {
            store,
            runner: Arc::new(runner),
            worker: name.clone(),
            lease,
            idle: Duration::from_millis(100),
            jobs_on: tokio::runtime::Handle::current(),
            on_panic: None,
            operator_hold: hubalign::job::NEEDS_OPERATOR_HOLD,
            grace: hubalign::worker::DEFAULT_STOP_GRACE,
        };
        let (_stop_tx, stop) = tokio::sync::watch::channel(false);
        let summary = worker.run(stop, if once { WhenIdle::Stop } else { WhenIdle::Wait }).await;
        println!("{} claimed {} lost {}", name, summary.claimed, summary.lost);
        Ok::<(), Box<dyn std::error::Error>>(())
    })
}
