//! The repack worker's pipeline: download → re-lay → verify (structural, memory-mapped, MLX load) → publish
//! an `-aligned` mirror with a model card and `MEI_ALIGN_MANIFEST.json`. Each step records itself on the job,
//! with what the previous step left for it. Nothing is published unless it passed every required check.
//!
//! `pipeline` lists a job's steps top to bottom, and `resume` decides where a job picks up.
//! This module holds what the worker runs a job with, and the code that records the job's outcome.

pub(crate) mod checks;
pub mod download;
pub(crate) mod error;
pub mod metal;
mod pipeline;
pub mod publish;
pub mod queue;
pub(crate) mod relayout;
pub(crate) mod repair;
mod resume;
pub mod upload;

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::hub::HubClient;
use crate::job::payload::Progress;
use crate::job::{Job, JobOutcome, JobState};
use crate::safetensors::Alignment;
use crate::store::{Store, StoreError};

pub use checks::mlx::ahead::CheckAhead;
pub use error::{RepackError, WhatNext};
use metal::rendezvous::MetalHandoff;
use queue::policy::MayMirror;

/// How the worker runs.
#[derive(Debug, Clone)]
pub struct RepackOptions {
    /// Mirrors go to `{target_namespace}/{name}-aligned`.
    pub target_namespace: String,
    /// Where bundles are downloaded and repaired (one directory per job, removed when done).
    pub work_dir: PathBuf,
    /// The Python with `mlx` that runs `deploy/verify_mlx.py`.
    pub python: PathBuf,
    /// The MLX check script.
    pub mlx_script: PathBuf,
    /// Data-section alignment.
    pub alignment: Alignment,
    /// This worker's name, for leases.
    pub worker: String,
    /// How long a step may take before another worker may take the job over.
    pub lease: Duration,
    /// How long a job in hand may go on once the process is told to stop; then it is released.
    pub stop_grace: Duration,
    /// Propose the repair as a pull request on the source repo instead of publishing a mirror.
    pub pull_request: bool,
    /// The token's user: the author the pull-request de-duplication looks for.
    pub bot_user: String,
    /// The largest bundle a job downloads; a larger one is refused.
    pub max_bundle_bytes: u64,
    /// Connections a download may hold at once (0: [`download::DEFAULT_CONNECTIONS`]).
    pub download_connections: usize,
    /// Where private mirrors of private sources are allowed (none unless the operator says).
    pub private_mirrors: queue::policy::PrivateMirrors,
    /// Where a bundle waits for the Metal check: in the work directory (runner API) or in the private
    /// mirror on the Hub.
    pub metal_handoff: metal::rendezvous::MetalHandoff,
    /// How many new mirrors a day may bring.
    pub caps: crate::store::mirrors::MirrorCaps,
}

/// The largest bundle a job downloads unless told otherwise: 1 TB.
pub const DEFAULT_MAX_BUNDLE_BYTES: u64 = 1_000_000_000_000;

/// What a worker needs.
pub struct Repacker<'a> {
    /// The Hub client: trees with their hashes, downloads, the mirror and its commit.
    pub hub: &'a HubClient,
    /// The store.
    pub store: &'a Store,
    /// Options.
    pub opts: &'a RepackOptions,
    /// An MLX check started before the job was claimed, which the job's check takes if it is there.
    pub check_ahead: &'a CheckAhead,
}

/// Runs a disk- or CPU-bound step on a thread of its own.
/// A repack thus never holds an executor thread, which the pages and the audit share.
/// A panic there fails the step, which is tried again. The work starts at once, not when first awaited.
pub(crate) fn off_executor<T: Send + 'static>(
    what: &'static str,
    work: impl FnOnce() -> Result<T, RepackError> + Send + 'static,
) -> impl Future<Output = Result<T, RepackError>> {
    let running = crate::blocking::run(what, work);
    async move { running.await.map_err(RepackError::caused_by)? }
}

/// Removes `dir` and everything in it, if present, on a batch thread.
/// The kernel frees a bundle's pages as it deletes them, a tenth of a second or more per GiB.
/// No runtime thread may wait on that while it serves pages.
async fn remove_off_executor(dir: PathBuf) {
    let _ = crate::blocking::run("removing a job's files", move || std::fs::remove_dir_all(dir)).await;
}

/// The repack pipeline as what a worker loop ([`crate::worker::WorkerLoop`]) runs for each job.
pub struct RepackRunner {
    /// The Hub client.
    pub hub: std::sync::Arc<HubClient>,
    /// The store.
    pub store: Store,
    /// The worker's options (its name is the loop's).
    pub opts: RepackOptions,
}

impl crate::worker::JobRunner for RepackRunner {
    async fn run(&self, job: Job, recorded: crate::worker::Recorded) -> Result<Option<JobState>, StoreError> {
        // Each job of the loop starts its own check (see `CheckAhead`).
        static NO_CHECK_AHEAD: CheckAhead = CheckAhead::none();
        let repacker = Repacker { hub: &self.hub, store: &self.store, opts: &self.opts, check_ahead: &NO_CHECK_AHEAD };
        repacker.run(&job, &recorded).await
    }

    fn paused_until(&self) -> Option<std::time::SystemTime> {
        self.hub.actions_paused_until()
    }
}

impl Repacker<'_> {
    /// Runs a claimed job to its end (or to the Metal handoff), records the outcome and sets `recorded`.
    /// Returns `None` if the worker lost the job meanwhile.
    /// Its lease then ran out, and the outcome of the worker that took the job over stands.
    pub async fn run(&self, job: &Job, recorded: &crate::worker::Recorded) -> Result<Option<JobState>, StoreError> {
        let dir = self.opts.work_dir.join(format!("job-{}", job.id));
        let mut out_of_space = false;
        let outcome = match self.steps(job, &dir).await {
            Ok(outcome) => outcome,
            Err(e) => {
                let reason = e.reason();
                match e.next {
                    WhatNext::DeferUntil(until) => {
                        tracing::info!(repo.id = %job.repo_id, job.id = job.id, reason = %reason, "deferred");
                        JobOutcome::Deferred { reason, until }
                    }
                    WhatNext::HoldWorker => {
                        tracing::error!(repo.id = %job.repo_id, job.id = job.id, reason = %reason, "held: the worker's configuration failed");
                        JobOutcome::Held { reason }
                    }
                    next => {
                        tracing::warn!(repo.id = %job.repo_id, job.id = job.id, reason = %reason, kind = next.kind().as_str(), "repack failed");
                        out_of_space = next.frees_disk();
                        JobOutcome::Failed { reason, kind: next.kind() }
                    }
                }
            }
        };
        let Some(state) = self.store.finish_job(job.id, &self.opts.worker, &outcome).await? else {
            // The files may be the new holder's now (two workers of one service share a work directory).
            tracing::warn!(repo.id = %job.repo_id, job.id = job.id, "the job was taken over; its outcome is not recorded");
            return Ok(None);
        };
        // The lease is gone now; the heartbeat lets the rest finish.
        recorded.set();
        // A job that ended without a mirror leaves none: an empty repo it created goes, and its name with it.
        if matches!(state, JobState::Failed | JobState::Skipped) && !self.opts.pull_request {
            publish::abandon(self.hub, self.store, &job.repo_id).await;
        }
        // A job waiting for the Metal check in this work directory keeps its files for the runner and the
        // publish. A job to be tried again keeps its downloads, unless the disk ran out of space.
        // Then the next job gets the space back.
        let staged_here = state == JobState::AwaitingMetalVerify && self.opts.metal_handoff == MetalHandoff::Api;
        if !staged_here && (state != JobState::Queued || out_of_space) {
            remove_off_executor(dir).await;
        }
        Ok(Some(state))
    }

    /// Whether the source may be mirrored now, and how visibly, from the Hub's answer and the operator's policy.
    async fn source_now(&self, job: &Job) -> Result<MayMirror, RepackError> {
        let info = self.hub.model_info(&job.repo_id).await;
        queue::policy::may_mirror_now(&job.repo_id, info, &self.opts.target_namespace, &self.opts.private_mirrors)
    }

    /// Records that `job` moves to `state`, with what the previous step left for it, and renews the lease.
    /// Fails if another worker now holds the lease, or if the store cannot record the step.
    async fn step(&self, job: &Job, state: JobState, progress: Option<&Progress>) -> Result<(), RepackError> {
        // The crash tests kill a worker between a step's work and the record of the next step.
        // Debug builds can linger there, so that the kill lands in that window every time.
        #[cfg(debug_assertions)]
        if let Some(ms) = std::env::var("HUBALIGN_DEBUG_STEP_PAUSE_MS").ok().and_then(|v| v.parse().ok()) {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        let rss = crate::blocking::peak_rss().unwrap_or(0);
        tracing::info!(job.id = job.id, repo.id = %job.repo_id, step = state.as_str(), rss.peak_bytes = rss, "step");
        match self.store.advance_job(job.id, &self.opts.worker, (state, progress), self.opts.lease).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(RepackError::transient("the lease was lost to another worker")),
            Err(e) => Err(RepackError::transient(e.to_string())),
        }
    }

    /// The interpreter and script that run this worker's MLX checks.
    fn mlx_interpreter(&self) -> checks::mlx::Interpreter {
        checks::mlx::Interpreter { python: self.opts.python.clone(), script: self.opts.mlx_script.clone() }
    }

    /// Bytes a copying loader duplicates in the downloaded source, off the executor.
    async fn before_bytes(&self, source: &Path) -> Result<u64, RepackError> {
        let (src, alignment) = (source.to_owned(), self.opts.alignment);
        off_executor("the source's audit", move || Ok(relayout::misaligned_bytes(&src, alignment))).await
    }
}
