//! The one worker loop, used by `hubalign worker`, `serve` and the demo. It claims a job and runs it on the
//! batch runtime while a heartbeat keeps its lease. It records a panic as a failure to retry. It goes on
//! until told to stop, or for `worker --once`, until the queue is empty. Workers on any number of machines
//! share the queue through the store alone.
//!
//! Told to stop, a loop claims nothing more. The job in hand may finish within the grace period. After it,
//! the job is stopped and released ([`Store::release_job`]), so the next worker takes it up at once.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::job::{FailureKind, Job, JobOutcome, JobState};
use crate::store::{Store, StoreError};

/// How long the job in hand may go on after a stop, unless the operator says otherwise. `deploy/` gives a
/// stopping process 1800 s before it is killed (`terminationGracePeriodSeconds`, `TimeoutStopSec`). The
/// minute left over releases the job and exits.
pub const DEFAULT_STOP_GRACE: Duration = Duration::from_secs(1740);

/// What the loop runs for each claimed job.
pub trait JobRunner: Send + Sync + 'static {
    /// Runs `job`, claimed by this worker, to its end and records its outcome with [`Store::finish_job`].
    /// Then it sets `recorded`. Returns `None` if another worker took the job meanwhile.
    fn run(&self, job: Job, recorded: Recorded) -> impl Future<Output = Result<Option<JobState>, StoreError>> + Send;

    /// Until when no job should be claimed, because every job would hit the same wall. The wall is the Hub's
    /// quota on actions, which pauses all writes. `None` by default.
    fn paused_until(&self) -> Option<std::time::SystemTime> {
        None
    }
}

/// When the queue has nothing to claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenIdle {
    /// Look again after the idle wait, as a service does.
    Wait,
    /// Return (`worker --once`).
    Stop,
}

/// How one worker loop runs.
pub struct WorkerLoop<R> {
    /// The queue.
    pub store: Store,
    /// What runs each job.
    pub runner: Arc<R>,
    /// This worker's name in leases and events. It is unique per worker: host, process, index.
    pub worker: String,
    /// How long a claim or a heartbeat holds the job.
    pub lease: Duration,
    /// How long to wait when the queue is empty, or after a failed claim.
    pub idle: Duration,
    /// Where jobs run: the batch runtime, so a repack never shares threads with pages.
    pub jobs_on: tokio::runtime::Handle,
    /// Called when a job's task panicked. The service counts these panics in `/metrics`.
    pub on_panic: Option<Arc<dyn Fn() + Send + Sync>>,
    /// How long the loop stops claiming after a failure that needs the operator, since every job would fail
    /// the same way. A service uses [`crate::job::NEEDS_OPERATOR_HOLD`].
    pub operator_hold: Duration,
    /// How long the job in hand may go on once the loop is told to stop. Then it is released.
    pub grace: Duration,
}

/// What one loop did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoopSummary {
    /// Jobs claimed.
    pub claimed: u64,
    /// Of those, jobs that ended failed for good.
    pub failed: u64,
    /// Jobs whose task panicked.
    pub panicked: u64,
    /// Jobs lost to another worker, through a lease that ran out or a refused heartbeat.
    pub lost: u64,
    /// Jobs held back for the operator, as for a refused token or a full disk. The loop paused after each.
    pub needs_operator: u64,
    /// Jobs stopped when the grace period after a stop ran out, and released to the next worker.
    pub released: u64,
}

impl<R: JobRunner> WorkerLoop<R> {
    /// Runs until `stop` turns true or, with [`WhenIdle::Stop`], until the queue is empty. After a stop, the
    /// job in hand gets the grace period to finish. Store failures are logged and retried after the idle
    /// wait; they are never fatal.
    #[tracing::instrument(name = "worker", skip_all, fields(worker = %self.worker))]
    pub async fn run(&self, mut stop: watch::Receiver<bool>, when_idle: WhenIdle) -> LoopSummary {
        let mut summary = LoopSummary::default();
        loop {
            if *stop.borrow() {
                return summary;
            }
            if let Some(until) = self.runner.paused_until() {
                if when_idle == WhenIdle::Stop {
                    return summary;
                }
                let wait = until.duration_since(std::time::SystemTime::now()).unwrap_or_default();
                tracing::warn!(worker = %self.worker, pause_s = wait.as_secs(), "the Hub's quota on actions pauses writes; claiming nothing until it ends");
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    _ = stop.wait_for(|s| *s) => return summary,
                }
                continue;
            }
            match self.store.claim_job(&self.worker, self.lease, None).await {
                Ok(Some(job)) => {
                    summary.claimed += 1;
                    let id = job.id;
                    match self.run_one(job, stop.clone()).await {
                        Ran::Ended(JobState::Failed) => summary.failed += 1,
                        Ran::Ended(JobState::Queued) if self.held_for_operator(id).await => {
                            summary.needs_operator += 1;
                            if when_idle == WhenIdle::Stop {
                                return summary;
                            }
                            tokio::select! {
                                () = tokio::time::sleep(self.operator_hold) => {}
                                _ = stop.wait_for(|s| *s) => return summary,
                            }
                        }
                        Ran::Ended(_) => {}
                        Ran::Panicked => summary.panicked += 1,
                        Ran::Lost => summary.lost += 1,
                        Ran::Released => summary.released += 1,
                    }
                }
                Ok(None) if when_idle == WhenIdle::Stop => return summary,
                Ok(None) => {
                    tokio::select! {
                        () = tokio::time::sleep(self.idle) => {}
                        _ = stop.wait_for(|s| *s) => return summary,
                    }
                }
                Err(e) => {
                    tracing::warn!(worker = %self.worker, error = %e, "claiming a job failed");
                    tokio::select! {
                        () = tokio::time::sleep(self.idle) => {}
                        _ = stop.wait_for(|s| *s) => return summary,
                    }
                }
            }
        }
    }

    /// Whether the job went back to the queue for a failure that needs the operator. It logs this once as an
    /// error, since this worker now stops claiming for a while.
    async fn held_for_operator(&self, id: i64) -> bool {
        let Ok(Some(job)) = self.store.job(id).await else { return false };
        if job.failure_kind != Some(FailureKind::NeedsOperator) {
            return false;
        }
        let reason = crate::untrusted::escape_control(job.reason.as_deref().unwrap_or("-"));
        tracing::error!(
            job.id = id, repo.id = %job.repo_id, worker = %self.worker, reason = %reason,
            pause_secs = self.operator_hold.as_secs(),
            "the job needs the operator; it goes back to the queue and this worker stops claiming for a while"
        );
        true
    }

    /// Runs one claimed job in a task of its own, and renews its lease every third of the lease. A refused
    /// renewal stops the task, unless the job's outcome is recorded already. A renewal is refused when
    /// another worker holds the job or the lease ran out. Once `stop` turns true, the job has the grace
    /// period to end. Then it is stopped and released.
    #[tracing::instrument(name = "job", skip_all, fields(job.id = job.id, repo.id = %job.repo_id, repo.sha = %job.source_sha))]
    async fn run_one(&self, job: Job, mut stop: watch::Receiver<bool>) -> Ran {
        let (id, repo) = (job.id, job.repo_id.clone());
        let runner = self.runner.clone();
        // This function's span goes along to the batch runtime, so every line the job logs there names its
        // job and repo.
        let recorded = Recorded::default();
        let told = recorded.clone();
        let ran = async move { runner.run(job, told).await };
        let mut task = self.jobs_on.spawn(tracing::Instrument::in_current_span(ran));
        let heartbeat = Heartbeat { store: &self.store, id, worker: &self.worker, lease: self.lease, recorded };
        let mut grace_ends: Option<tokio::time::Instant> = None;
        let joined = loop {
            let grace_over = async {
                match grace_ends {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                // Check the job's end first, so a job that ends as the grace runs out keeps its outcome.
                biased;
                joined = &mut task => break joined,
                // Drop the guard `wait_for` returns at once. It may not be held across the awaits below.
                () = async { drop(stop.wait_for(|s| *s).await) }, if grace_ends.is_none() => {
                    tracing::info!(job.id = id, grace_secs = self.grace.as_secs(), "told to stop: the job in hand may finish within the grace period");
                    grace_ends = Some(tokio::time::Instant::now() + self.grace);
                }
                () = grace_over => {
                    task.abort();
                    match (&mut task).await {
                        // The job ended before the abort reached it, so its outcome stands.
                        Ok(ended) => break Ok(ended),
                        Err(e) if e.is_panic() => break Err(e),
                        Err(_) => {}
                    }
                    // The outcome is on the row already. Only the cleanup after it was cut short.
                    if heartbeat.recorded.is_set() {
                        tracing::warn!(job.id = id, repo.id = %repo, "the job's outcome is recorded; its cleanup was cut short by the stop");
                        return match self.store.job(id).await {
                            Ok(Some(job)) => Ran::Ended(job.state),
                            _ => Ran::Released,
                        };
                    }
                    let why = "the process was told to stop, and the job outlived the grace period";
                    match self.store.release_job(id, &self.worker, why).await {
                        Ok(true) => tracing::warn!(job.id = id, repo.id = %repo, "the job was stopped and released; the next worker takes it up"),
                        Ok(false) => tracing::warn!(job.id = id, "the job was stopped; another worker held it already"),
                        Err(e) => tracing::warn!(job.id = id, error = %e, "releasing the job failed; its lease lapses instead"),
                    }
                    return Ran::Released;
                }
                () = heartbeat.lost() => {
                    tracing::warn!(job.id = id, repo.id = %repo, worker = %self.worker, "lost the job's lease; stopping it");
                    task.abort();
                    let _ = task.await;
                    return Ran::Lost;
                }
            }
        };
        match joined {
            Ok(Ok(Some(state))) => Ran::Ended(state),
            Ok(Ok(None)) => Ran::Lost,
            Ok(Err(e)) => {
                tracing::warn!(job.id = id, error = %e, "recording the job's outcome failed");
                Ran::Ended(JobState::Queued)
            }
            Err(e) => {
                if let Some(hook) = &self.on_panic {
                    hook();
                }
                let reason = format!("the repack task {}", crate::blocking::join_error_message(e));
                tracing::error!(job.id = id, repo.id = %repo, reason = %reason, "job failed");
                let outcome = JobOutcome::Failed { reason, kind: FailureKind::Transient };
                if let Err(e) = self.store.finish_job(id, &self.worker, &outcome).await {
                    tracing::warn!(job.id = id, error = %e, "recording the job's failure failed");
                }
                Ran::Panicked
            }
        }
    }
}

/// Set once a job's runner has recorded the job's outcome. The lease is gone then, but the runner may still
/// tidy up: remove the empty mirror of a failed job, or the job's files. The heartbeat lets it finish.
#[derive(Debug, Clone, Default)]
pub struct Recorded(Arc<std::sync::atomic::AtomicBool>);

impl Recorded {
    /// Says the outcome is recorded.
    pub fn set(&self) {
        self.0.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Whether the outcome is recorded.
    pub fn is_set(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// Keeps a worker's lease on a job while the job runs.
pub struct Heartbeat<'a> {
    /// The queue.
    pub store: &'a Store,
    /// The job.
    pub id: i64,
    /// The worker that holds it.
    pub worker: &'a str,
    /// How long each renewal holds the job.
    pub lease: Duration,
    /// Set by the runner once it recorded the job's outcome.
    pub recorded: Recorded,
}

impl Heartbeat<'_> {
    /// Renews the lease every third of it, and returns once a renewal is refused. A refusal means the lease
    /// ran out or another worker holds the job, and this one must stop it. Once the runner has recorded the outcome, a
    /// refusal is expected. The heartbeat then stops beating and never returns. A store that does not answer
    /// is tried again at the next beat.
    pub async fn lost(&self) {
        let beat = (self.lease / 3).max(Duration::from_millis(100));
        loop {
            tokio::time::sleep(beat).await;
            match self.store.renew_lease(self.id, self.worker, self.lease).await {
                Ok(true) => {}
                Ok(false) if self.recorded.is_set() => std::future::pending().await,
                Ok(false) => return,
                Err(e) => tracing::warn!(job.id = self.id, error = %e, "renewing the job's lease failed"),
            }
        }
    }
}

/// How one job went, for the loop's summary.
enum Ran {
    Ended(JobState),
    Panicked,
    Lost,
    Released,
}
