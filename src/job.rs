//! The types of a repack job.
//!
//! - [`JobState`]: where the job is.
//! - [`FailureKind`]: what a failure means.
//! - [`VerifyDevice`]: where its MLX check runs.
//! - [`Job`] and [`JobEvent`]: the job as recorded.
//! - [`JobOutcome`]: how a step ends.
//!
//! [`payload`] holds what a job carries between its steps. The store keeps these types and the pipeline moves
//! them; neither owns them.

pub mod payload;

use std::time::Duration;

use serde::Serialize;
use sqlx::types::Json;

use payload::{MlxRecord, Progress, Staged};

/// Where a job is. The database (by snake_case name), the JSON API and the runner protocol share these names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, sqlx::Type)]
#[serde(rename_all = "snake_case")]
#[sqlx(type_name = "text", rename_all = "snake_case")]
pub enum JobState {
    /// Waiting for a worker.
    Queued,
    /// Fetching the bundle.
    Downloading,
    /// Rewriting shards.
    Relaying,
    /// Checking the result.
    Verifying,
    /// Waiting for the macOS runner's Metal load check.
    AwaitingMetalVerify,
    /// Uploading the mirror.
    Publishing,
    /// Done: the mirror is public.
    Published,
    /// Given up, with the reason.
    Failed,
    /// Not to be done, with the reason: policy, an opt-out, or nothing to fix.
    Skipped,
}

impl JobState {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Downloading => "downloading",
            JobState::Relaying => "relaying",
            JobState::Verifying => "verifying",
            JobState::AwaitingMetalVerify => "awaiting_metal_verify",
            JobState::Publishing => "publishing",
            JobState::Published => "published",
            JobState::Failed => "failed",
            JobState::Skipped => "skipped",
        }
    }

    /// Every state, in the order a job passes through them.
    pub const ALL: [JobState; 9] = [
        JobState::Queued,
        JobState::Downloading,
        JobState::Relaying,
        JobState::Verifying,
        JobState::AwaitingMetalVerify,
        JobState::Publishing,
        JobState::Published,
        JobState::Failed,
        JobState::Skipped,
    ];

    /// Whether the job is over.
    pub fn is_final(self) -> bool {
        matches!(self, JobState::Published | JobState::Failed | JobState::Skipped)
    }
}

/// Where the MLX load check must run before publishing (stored as `metal` or `cpu`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, sqlx::Type)]
#[serde(rename_all = "snake_case")]
#[sqlx(type_name = "text", rename_all = "snake_case")]
pub enum VerifyDevice {
    /// Apple-silicon Metal, on the macOS runner (the production default).
    #[default]
    Metal,
    /// The local CPU MLX check stands in, and the card says so.
    Cpu,
}

impl VerifyDevice {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            VerifyDevice::Metal => "metal",
            VerifyDevice::Cpu => "cpu",
        }
    }
}

impl PartialEq<&str> for JobState {
    fn eq(&self, name: &&str) -> bool {
        self.as_str() == *name
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for JobState {
    type Err = crate::error_text::Unrecognized;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        crate::error_text::by_name(s, &JobState::ALL, JobState::as_str)
    }
}

/// What a failure means for its job, ordered from the least serious. It is stored by name beside the reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, sqlx::Type)]
#[serde(rename_all = "snake_case")]
#[sqlx(type_name = "text", rename_all = "snake_case")]
pub enum FailureKind {
    /// Another attempt may succeed: back to the queue with backoff while attempts remain.
    Transient,
    /// No attempt will: failed for good.
    Permanent,
    /// Nothing succeeds until the operator acts, as with a refused token or a full disk. The job goes back to
    /// the queue without spending an attempt, held for [`NEEDS_OPERATOR_HOLD`]. The worker stops claiming
    /// meanwhile.
    NeedsOperator,
}

impl FailureKind {
    /// Every kind, from the least serious.
    pub const ALL: [FailureKind; 3] = [FailureKind::Transient, FailureKind::Permanent, FailureKind::NeedsOperator];

    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Transient => "transient",
            FailureKind::Permanent => "permanent",
            FailureKind::NeedsOperator => "needs_operator",
        }
    }
}

impl std::str::FromStr for FailureKind {
    type Err = crate::error_text::Unrecognized;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        crate::error_text::by_name(s, &FailureKind::ALL, FailureKind::as_str)
    }
}

/// How long a job that needs the operator waits before its next try, and how long its worker pauses. It is
/// long enough to spare the Hub a refused token's retries. It is short enough to notice a fixed token without
/// a restart.
pub const NEEDS_OPERATOR_HOLD: Duration = Duration::from_secs(15 * 60);

/// How many times a job's attempt is given back for needing the operator; after that each hold spends one.
pub const NEEDS_OPERATOR_REFUNDS: i64 = 3;

/// A job as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct Job {
    /// Its id.
    pub id: i64,
    /// The source repo.
    pub repo_id: String,
    /// The source commit.
    pub source_sha: String,
    /// Its state.
    pub state: JobState,
    /// Why it failed or was skipped, or the last transient failure.
    pub reason: Option<String>,
    /// What its last failure meant; `None` until one, and again once it is published or skipped.
    pub failure_kind: Option<FailureKind>,
    /// The mirror's repo id, once known.
    pub target_repo: Option<String>,
    /// The mirror commit that published it.
    pub published_commit: Option<String>,
    /// Where its MLX check runs.
    pub verify_device: VerifyDevice,
    /// The MLX load check's record, once it ran.
    pub verification: Option<Json<MlxRecord>>,
    /// Where the bundle waits for the Metal check when the Hub is the rendezvous. It holds the private
    /// mirror's staged commit and the local checks. `None` when the bundle is staged on a worker.
    pub staged: Option<Json<Staged>>,
    /// What its last finished step left in its directory on the worker that ran it. A later attempt there
    /// takes up the work from it. The API does not show it, because it names that machine's files and boot.
    #[serde(skip_serializing)]
    pub progress: Option<Json<Progress>>,
    /// Attempts so far.
    pub attempts: i64,
    /// Attempts allowed.
    pub max_attempts: i64,
    /// The worker holding it.
    pub lease_owner: Option<String>,
    /// Until when (unix seconds).
    pub lease_expires_at: Option<i64>,
    /// Not to be claimed before (unix seconds): the backoff after a failure.
    pub not_before: i64,
    /// Bytes a copying loader duplicates in the source, from the audit.
    pub misaligned_bytes: i64,
    /// Bytes downloaded, over all attempts.
    pub bytes_downloaded: i64,
    /// Bytes uploaded, over all attempts.
    pub bytes_uploaded: i64,
    /// When it was created.
    pub created_at: String,
    /// When it last changed.
    pub updated_at: String,
    /// When it was published, failed or skipped; `None` while it runs.
    pub finished_at: Option<String>,
    /// In `--pr` mode: the pull request it opened on the source.
    pub pr_num: Option<i64>,
    /// What became of that pull request: `open`, `closed` or `merged`.
    pub pr_status: Option<String>,
}

/// One step in a job's history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct JobEvent {
    /// The job.
    pub job_id: i64,
    /// When.
    pub at: String,
    /// The state entered, or what happened (`claimed`, `metal_claimed`).
    pub state: String,
    /// Who or why.
    pub detail: Option<String>,
}

/// How a job ended a step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobOutcome {
    /// The mirror is published.
    Published {
        /// The mirror repo.
        target: String,
        /// Its commit.
        commit: String,
    },
    /// In `--pr` mode: a pull request opened on the source. The job is `published`, and its target is the
    /// PR's page.
    Proposed {
        /// The pull request's number.
        num: i64,
        /// Its commit.
        commit: String,
        /// `{repo}/discussions/{num}`.
        target: String,
    },
    /// A failure; its kind decides whether the job goes back to the queue (see [`FailureKind`]).
    Failed {
        /// Why.
        reason: String,
        /// What it means for the job.
        kind: FailureKind,
    },
    /// Back to the queue until `until` (Unix seconds), spending no attempt. A cap of the operator's policy
    /// is reached for now.
    Deferred {
        /// Why.
        reason: String,
        /// When it may be claimed again.
        until: i64,
    },
    /// Back to the queue, spending nothing. The worker's configuration failed, not the job: for example,
    /// an interpreter that cannot run or has no MLX. The job is held for [`NEEDS_OPERATOR_HOLD`], or until a
    /// worker whose start-up checks pass releases it. It counts as needing the operator, however often.
    Held {
        /// Why, naming the setting to mend.
        reason: String,
    },
    /// Nothing to do, and why.
    Skipped {
        /// Why.
        reason: String,
    },
    /// Waiting for the macOS runner's Metal check, with the lease released. `staged` records a bundle
    /// staged on the Hub; it is `None` for one staged in the worker's directory.
    AwaitMetal {
        /// The staged commit and the local checks, when the Hub is the rendezvous.
        staged: Option<Staged>,
    },
}

/// Now, in Unix seconds.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

/// Backoff before attempt `n + 1`: 1, 2, 4 … minutes, at most an hour.
pub fn backoff(attempts: i64) -> Duration {
    Duration::from_secs(60u64.saturating_mul(1 << attempts.clamp(0, 6) as u32).min(3600))
}
