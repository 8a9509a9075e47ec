//! The repack queue: jobs created from the affected repos, claimed with a lease, advanced step by step.

use std::time::Duration;

use sqlx::types::Json;

use super::{Store, StoreError, on_pool, sql};
use crate::job::payload::{MlxRecord, Progress};
use crate::job::{
    FailureKind, Job, JobEvent, JobOutcome, JobState, NEEDS_OPERATOR_HOLD, NEEDS_OPERATOR_REFUNDS, VerifyDevice,
    backoff, unix_now,
};

/// Inserts a job's event on the transaction `$tx` that changes its state.
macro_rules! record_event {
    ($tx:expr, $id:expr, $state:expr, $detail:expr) => {
        sqlx::query("INSERT INTO job_events (job_id, at, state, detail) VALUES ($1, $2, $3, $4)")
            .bind($id)
            .bind(crate::time::now_utc())
            .bind($state)
            .bind($detail)
            .execute(&mut *$tx)
            .await
            .map_err(sql("job event"))
    };
}
pub(super) use record_event;

/// An affected repo at its audited commit, with who may see it. A queueing policy decides on it
/// (see `repack::queue::policy::EnqueuePolicy`).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct Candidate {
    /// The repo and its sums.
    #[sqlx(flatten)]
    pub affected: super::queries::AffectedRepo,
    /// Private. A repo the store has no row for counts as private, so nothing unknown is published.
    pub private: bool,
    /// Behind a licence gate.
    pub gated: bool,
    /// Disabled by the Hub.
    pub disabled: bool,
    /// Downloads over the last 30 days, as last listed.
    pub downloads: i64,
    /// Likes, as last listed.
    pub likes: i64,
}

/// A job to create for a candidate: queued, or skipped with the reason the policy gave.
#[derive(Debug, Clone, PartialEq)]
pub struct NewJob {
    /// The source repo.
    pub repo: String,
    /// The source commit.
    pub sha: String,
    /// Bytes a copying loader duplicates in it (the queue takes the largest first).
    pub misaligned_bytes: i64,
    /// Where its MLX check runs.
    pub verify_device: VerifyDevice,
    /// Why it is not to be done; `None` queues it.
    pub skipped: Option<String>,
}

/// One claim's text and what it binds and records (see `Store::claim_with`).
pub(super) struct Claim<'a> {
    pub(super) text: String,
    pub(super) holder: &'a str,
    pub(super) lease: Duration,
    pub(super) now: i64,
    pub(super) event: &'static str,
    pub(super) what: &'static str,
}

/// Returns the Unix time `d` after `now`, saturating. A lease of `u64::MAX` seconds from a flag means "for
/// ever", not a wrapped time in the past.
pub(super) fn lease_until(now: i64, d: Duration) -> i64 {
    now.saturating_add(i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Which jobs a listing shows; every field left `None` lets all through.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobFilter {
    /// Only jobs in this state.
    pub state: Option<JobState>,
    /// Only this source repo's jobs.
    pub repo: Option<String>,
    /// Only jobs whose last failure was of this kind.
    pub failure_kind: Option<FailureKind>,
}

impl Store {
    /// Returns the affected repos duplicating at least `min_bytes`, largest first, with their visibility
    /// flags. With `only`, returns that repo alone (a webhook's).
    pub async fn candidates(&self, min_bytes: i64, only: Option<&str>) -> Result<Vec<Candidate>, StoreError> {
        on_pool!(self, |pool| sqlx::query_as(
            "SELECT s.repo, s.namespace, s.sha, s.shards_header_pad, s.shards_relayout, s.shards_invalid,
                    s.misaligned_tensors, s.misaligned_bytes,
                    COALESCE(r.private, TRUE) AS private, COALESCE(r.gated, FALSE) AS gated,
                    COALESCE(r.disabled, FALSE) AS disabled, COALESCE(r.downloads, 0) AS downloads,
                    COALESCE(r.likes, 0) AS likes
             FROM repo_sums s LEFT JOIN repos r ON r.id = s.repo
             WHERE s.misaligned_bytes > 0 AND s.misaligned_bytes >= $1 AND ($2 IS NULL OR s.repo = $2)
             ORDER BY s.misaligned_bytes DESC, s.repo",
        )
        .bind(min_bytes)
        .bind(only)
        .fetch_all(pool)
        .await)
        .map_err(sql("queue candidates"))
    }

    /// Creates each job that does not exist yet for its repo and commit, in one transaction. Returns how
    /// many queued (not skipped) jobs were created.
    pub async fn create_jobs(&self, jobs: &[NewJob]) -> Result<u64, StoreError> {
        let now = crate::time::now_utc();
        on_pool!(self, |pool| {
            let mut tx = pool.begin_with(self.begin_write()).await.map_err(sql("begin"))?;
            let mut queued = 0;
            for job in jobs {
                let state = if job.skipped.is_some() { JobState::Skipped } else { JobState::Queued };
                let inserted = sqlx::query(
                    "INSERT INTO jobs (repo_id, source_sha, state, reason, verify_device, misaligned_bytes, created_at, updated_at)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (repo_id, source_sha) DO NOTHING",
                )
                .bind(&job.repo)
                .bind(&job.sha)
                .bind(state)
                .bind(job.skipped.as_deref())
                .bind(job.verify_device)
                .bind(job.misaligned_bytes)
                .bind(&now)
                .bind(&now)
                .execute(&mut *tx)
                .await
                .map_err(sql("enqueue"))?;
                if inserted.rows_affected() == 1 && job.skipped.is_none() {
                    queued += 1;
                }
            }
            tx.commit().await.map_err(sql("commit enqueue"))?;
            Ok(queued)
        })
    }

    /// Adds one job by hand (for `hubalign repack`), or returns the existing one for that commit.
    pub async fn job_for(&self, repo: &str, sha: &str, verify_device: VerifyDevice) -> Result<Job, StoreError> {
        let now = crate::time::now_utc();
        on_pool!(self, |pool| sqlx::query(
            "INSERT INTO jobs (repo_id, source_sha, verify_device, created_at, updated_at) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (repo_id, source_sha) DO NOTHING",
        )
        .bind(repo)
        .bind(sha)
        .bind(verify_device)
        .bind(&now)
        .bind(&now)
        .execute(pool)
        .await
        .map(|done| done.rows_affected()))
        .map_err(sql("add job"))?;
        on_pool!(self, |pool| sqlx::query_as("SELECT * FROM jobs WHERE repo_id = $1 AND source_sha = $2")
            .bind(repo)
            .bind(sha)
            .fetch_one(pool)
            .await)
        .map_err(sql("read job"))
    }

    /// Claims the most valuable claimable job for `worker`. That is a queued job past its backoff, or one
    /// whose holder's lease ran out mid-step. Its attempt count goes up. A job asked for by id (a repack by
    /// hand) is taken whatever its backoff. The claim and its event are one transaction. On PostgreSQL,
    /// `FOR UPDATE SKIP LOCKED` picks the row, so workers on many machines each get a different job without
    /// waiting on one another. SQLite has one writer at a time.
    pub async fn claim_job(&self, worker: &str, lease: Duration, only: Option<i64>) -> Result<Option<Job>, StoreError> {
        let now = self.db_now().await?;
        let claim = format!(
            "UPDATE jobs SET lease_owner = $1, lease_expires_at = $2, attempts = attempts + 1, updated_at = $3
             WHERE id = (
                SELECT id FROM jobs
                WHERE attempts < max_attempts AND ($5 IS NULL OR id = $5)
                  AND COALESCE(lease_expires_at, 0) < $4
                  AND ((state = 'queued' AND (not_before <= $4 OR $5 IS NOT NULL))
                       OR state IN ('downloading', 'relaying', 'verifying', 'publishing'))
                ORDER BY misaligned_bytes DESC, id LIMIT 1{})
             RETURNING *",
            self.skip_locked()
        );
        let claim = Claim { text: claim, holder: worker, lease, now, event: "claimed", what: "claim job" };
        self.claim_with(claim, only, |job| format!("{worker}, attempt {}", job.attempts)).await
    }

    /// Runs one claim and records its event with `detail`'s text, in one transaction. `claim.text` is an
    /// `UPDATE … RETURNING *` that binds the holder, its lease's end, the time, now and `fifth`.
    pub(super) async fn claim_with<T>(
        &self,
        claim: Claim<'_>,
        fifth: T,
        detail: impl Fn(&Job) -> String,
    ) -> Result<Option<Job>, StoreError>
    where
        T: for<'q> sqlx::Encode<'q, sqlx::Sqlite>
            + sqlx::Type<sqlx::Sqlite>
            + for<'q> sqlx::Encode<'q, sqlx::Postgres>
            + sqlx::Type<sqlx::Postgres>
            + Send
            + 'static,
    {
        let Claim { text, holder, lease, now, event, what } = claim;
        on_pool!(self, |pool| {
            let mut tx = pool.begin_with(self.begin_write()).await.map_err(sql("begin claim"))?;
            // One of the texts the callers build from constants; every value is bound.
            let job: Option<Job> = sqlx::query_as(sqlx::AssertSqlSafe(text))
                .bind(holder)
                .bind(lease_until(now, lease))
                .bind(crate::time::now_utc())
                .bind(now)
                .bind(fifth)
                .fetch_optional(&mut *tx)
                .await
                .map_err(sql(what))?;
            if let Some(job) = &job {
                record_event!(tx, job.id, event, Some(detail(job)))?;
            }
            tx.commit().await.map_err(sql("commit claim"))?;
            Ok(job)
        })
    }

    /// Returns ` FOR UPDATE SKIP LOCKED` where the backend has it, else nothing.
    pub(super) fn skip_locked(&self) -> &'static str {
        match self.backend() {
            super::Backend::Postgres => " FOR UPDATE SKIP LOCKED",
            super::Backend::Sqlite => "",
        }
    }

    /// Extends `worker`'s lease on job `id` while a long step runs (the heartbeat). Returns `false` if the
    /// worker no longer holds the job: its lease ran out, and another worker may have taken the job over. The
    /// worker must then stop.
    pub async fn renew_lease(&self, id: i64, worker: &str, lease: Duration) -> Result<bool, StoreError> {
        let now = self.db_now().await?;
        let renewed = on_pool!(self, |pool| sqlx::query(
            "UPDATE jobs SET lease_expires_at = $1 WHERE id = $2 AND lease_owner = $3 AND lease_expires_at >= $4"
        )
        .bind(lease_until(now, lease))
        .bind(id)
        .bind(worker)
        .bind(now)
        .execute(pool)
        .await
        .map(|done| done.rows_affected()))
        .map_err(sql("renew lease"))?;
        Ok(renewed == 1)
    }

    /// Moves `worker`'s job to `state`, saves `progress` and renews the lease, with the event, in one
    /// transaction. `progress` is what the step before left for this one; it is `None` when nothing is left
    /// that a later attempt could take up. A step before the publish forgets an earlier attempt's check and
    /// staged commit. Returns `false` if the worker no longer holds the job, which must then stop.
    pub async fn advance_job(
        &self,
        id: i64,
        worker: &str,
        (state, progress): (JobState, Option<&Progress>),
        lease: Duration,
    ) -> Result<bool, StoreError> {
        let now = self.db_now().await?;
        on_pool!(self, |pool| {
            let mut tx = pool.begin_with(self.begin_write()).await.map_err(sql("begin advance"))?;
            // A job that starts its work again drops an earlier attempt's check. That record, and the commit it
            // staged, judged files that are being made anew, so it must not publish them.
            let done = sqlx::query(
                "UPDATE jobs SET state = $1, lease_expires_at = $2, updated_at = $3, progress = $6,
                 verification = CASE WHEN $1 IN ('downloading', 'relaying', 'verifying') THEN NULL ELSE verification END,
                 staged = CASE WHEN $1 IN ('downloading', 'relaying', 'verifying') THEN NULL ELSE staged END
                 WHERE id = $4 AND lease_owner = $5",
            )
            .bind(state.as_str())
            .bind(lease_until(now, lease))
            .bind(crate::time::now_utc())
            .bind(id)
            .bind(worker)
            .bind(progress.map(Json))
            .execute(&mut *tx)
            .await
            .map_err(sql("advance job"))?;
            let held = done.rows_affected() == 1;
            if held {
                record_event!(tx, id, state.as_str(), None::<String>)?;
            }
            tx.commit().await.map_err(sql("commit advance"))?;
            Ok(held)
        })
    }

    /// Gives `worker`'s job `id` back to the queue as it stands. It clears the lease and keeps the state and
    /// progress, so the next worker takes up from there at once. It refunds the attempt this claim spent,
    /// since a stop asked for is not the job's failure. Returns `false` if the worker no longer held the job.
    pub async fn release_job(&self, id: i64, worker: &str, why: &str) -> Result<bool, StoreError> {
        on_pool!(self, |pool| {
            let mut tx = pool.begin_with(self.begin_write()).await.map_err(sql("begin release"))?;
            let done = sqlx::query(
                "UPDATE jobs SET lease_owner = NULL, lease_expires_at = NULL, updated_at = $1,
                 attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END
                 WHERE id = $2 AND lease_owner = $3",
            )
            .bind(crate::time::now_utc())
            .bind(id)
            .bind(worker)
            .execute(&mut *tx)
            .await
            .map_err(sql("release job"))?;
            let held = done.rows_affected() == 1;
            if held {
                let state: String = sqlx::query_scalar("SELECT state FROM jobs WHERE id = $1")
                    .bind(id)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(sql("read job"))?;
                record_event!(tx, id, state.as_str(), Some(format!("released by {worker}: {why}")))?;
            }
            tx.commit().await.map_err(sql("commit release"))?;
            Ok(held)
        })
    }

    /// Records the mirror repo a job publishes to.
    pub async fn set_job_target(&self, id: i64, target: &str) -> Result<(), StoreError> {
        on_pool!(self, |pool| sqlx::query("UPDATE jobs SET target_repo = $1 WHERE id = $2")
            .bind(target)
            .bind(id)
            .execute(pool)
            .await
            .map(|done| done.rows_affected()))
        .map_err(sql("job target"))?;
        Ok(())
    }

    /// Records the MLX load check's result.
    pub async fn set_job_verification(&self, id: i64, verification: &MlxRecord) -> Result<(), StoreError> {
        on_pool!(self, |pool| sqlx::query("UPDATE jobs SET verification = $1 WHERE id = $2")
            .bind(Json(verification))
            .bind(id)
            .execute(pool)
            .await
            .map(|done| done.rows_affected()))
        .map_err(sql("job verification"))?;
        Ok(())
    }

    /// Ends `holder`'s step: published or proposed, failed, skipped, deferred, held, or handed to the macOS
    /// runner. A transient failure goes back to the queue with a backoff while attempts remain. One that
    /// needs the operator is held for `NEEDS_OPERATOR_HOLD`. A permanent one fails at once. It releases the
    /// lease and records the event in the same transaction. Returns `None` if `holder` no longer holds the job. Another worker then took it
    /// over after its lease ran out, and that worker's outcome stands.
    pub async fn finish_job(
        &self,
        id: i64,
        holder: &str,
        outcome: &JobOutcome,
    ) -> Result<Option<JobState>, StoreError> {
        on_pool!(self, |pool| {
            let mut tx = pool.begin_with(self.begin_write()).await.map_err(sql("begin finish"))?;
            let held: Option<(i64, i64)> =
                sqlx::query_as("SELECT attempts, max_attempts FROM jobs WHERE id = $1 AND lease_owner = $2")
                    .bind(id)
                    .bind(holder)
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(sql("read job"))?;
            let Some((attempts, max)) = held else { return Ok(None) };
            // Backoffs and holds run on the database's clock, as the claims that read them do.
            let now: i64 = sqlx::query_scalar("SELECT unixepoch()")
                .fetch_one(&mut *tx)
                .await
                .map_err(sql("read the database's clock"))?;
            let held_before: i64 = if matches!(outcome, JobOutcome::Failed { kind: FailureKind::NeedsOperator, .. }) {
                sqlx::query_scalar(
                    "SELECT COUNT(*) FROM job_events WHERE job_id = $1 AND detail LIKE 'needs the operator:%'",
                )
                .bind(id)
                .fetch_one(&mut *tx)
                .await
                .map_err(sql("count holds"))?
            } else {
                0
            };
            let (state, reason, commit, target, not_before) = match outcome {
                JobOutcome::Published { target, commit } | JobOutcome::Proposed { target, commit, .. } => {
                    (JobState::Published, None, Some(commit.as_str()), Some(target.as_str()), 0)
                }
                JobOutcome::Skipped { reason } => (JobState::Skipped, Some(reason.as_str()), None, None, 0),
                JobOutcome::AwaitMetal { .. } => (JobState::AwaitingMetalVerify, None, None, None, 0),
                JobOutcome::Deferred { reason, until } => {
                    let until = super::clock::onto_db_clock(*until, unix_now(), now);
                    (JobState::Queued, Some(reason.as_str()), None, None, until)
                }
                JobOutcome::Held { reason } => {
                    (JobState::Queued, Some(reason.as_str()), None, None, lease_until(now, NEEDS_OPERATOR_HOLD))
                }
                JobOutcome::Failed { reason, kind: FailureKind::NeedsOperator }
                    if held_before < NEEDS_OPERATOR_REFUNDS || attempts < max =>
                {
                    (JobState::Queued, Some(reason.as_str()), None, None, lease_until(now, NEEDS_OPERATOR_HOLD))
                }
                JobOutcome::Failed { reason, kind: FailureKind::Transient } if attempts < max => {
                    (JobState::Queued, Some(reason.as_str()), None, None, lease_until(now, backoff(attempts)))
                }
                JobOutcome::Failed { reason, .. } => (JobState::Failed, Some(reason.as_str()), None, None, 0),
            };
            let kind = match outcome {
                JobOutcome::Failed { kind, .. } => Some(*kind),
                JobOutcome::Held { .. } => Some(FailureKind::NeedsOperator),
                _ => None,
            };
            let staged = match outcome {
                JobOutcome::AwaitMetal { staged } => staged.as_ref().map(Json),
                _ => None,
            };
            let proposed = match outcome {
                JobOutcome::Proposed { num, .. } => Some(*num),
                _ => None,
            };
            // A failure of the machine, not the job, gives its attempt back, but only the first few times. A job
            // that keeps needing the operator is at fault after all, since it alone meets what blocks it. It
            // then spends its attempts like any other failure. A deferred job spent no attempt. Neither did a
            // held one: the worker's configuration failed before anyone looked at the job's bytes.
            let refund = i64::from(
                (matches!(outcome, JobOutcome::Failed { kind: FailureKind::NeedsOperator, .. })
                    && held_before < NEEDS_OPERATOR_REFUNDS)
                    || matches!(outcome, JobOutcome::Deferred { .. } | JobOutcome::Held { .. }),
            );
            sqlx::query(
                "UPDATE jobs SET state = $1, reason = COALESCE($2, reason), published_commit = COALESCE($3, published_commit),
                 target_repo = COALESCE($4, target_repo), not_before = $5, lease_owner = NULL, lease_expires_at = NULL,
                 updated_at = $6, finished_at = CASE WHEN $1 IN ('published', 'failed', 'skipped') THEN $6 ELSE NULL END,
                 failure_kind = $8, attempts = attempts - $9,
                 staged = CASE WHEN $1 = 'awaiting_metal_verify' THEN $10 ELSE staged END,
                 progress = CASE WHEN $1 IN ('published', 'failed', 'skipped') THEN NULL ELSE progress END,
                 pr_num = COALESCE($11, pr_num), pr_status = CASE WHEN $11 IS NULL THEN pr_status ELSE 'open' END
                 WHERE id = $7",
            )
            .bind(state.as_str())
            .bind(reason)
            .bind(commit)
            .bind(target)
            .bind(not_before)
            .bind(crate::time::now_utc())
            .bind(id)
            .bind(kind.map(FailureKind::as_str))
            .bind(refund)
            .bind(staged)
            .bind(proposed)
            .execute(&mut *tx)
            .await
            .map_err(sql("finish job"))?;
            // Record a hold in other words than a failure that needs the operator. Only the failure's words
            // count towards the attempts that may be given back.
            let detail = match (outcome, kind) {
                (JobOutcome::Held { .. }, _) => reason.map(|r| format!("held for the configuration: {r}")),
                (_, Some(FailureKind::NeedsOperator)) => reason.map(|r| format!("needs the operator: {r}")),
                _ => reason.map(str::to_owned),
            };
            record_event!(tx, id, state.as_str(), detail)?;
            tx.commit().await.map_err(sql("commit finish"))?;
            Ok(Some(state))
        })
    }

    /// Returns one job by id.
    pub async fn job(&self, id: i64) -> Result<Option<Job>, StoreError> {
        on_pool!(self, |pool| sqlx::query_as("SELECT * FROM jobs WHERE id = $1").bind(id).fetch_optional(pool).await)
            .map_err(sql("job"))
    }

    /// Counts the jobs back in the queue for a failure that needs the operator (a refused token, a full disk).
    pub async fn jobs_needing_operator(&self) -> Result<i64, StoreError> {
        on_pool!(self, |pool| sqlx::query_scalar(
            "SELECT CAST(COALESCE(SUM(needing_operator), 0) AS BIGINT) FROM job_sums WHERE state = 'queued'"
        )
        .fetch_one(pool)
        .await)
        .map_err(sql("jobs needing the operator"))
    }

    /// Counts jobs per state, for the states that have any, from the trigger-kept sums.
    pub async fn job_counts(&self) -> Result<Vec<(String, i64)>, StoreError> {
        on_pool!(self, |pool| sqlx::query_as(
            "SELECT state, CAST(SUM(jobs) AS BIGINT) FROM job_sums GROUP BY state HAVING SUM(jobs) > 0 ORDER BY state"
        )
        .fetch_all(pool)
        .await)
        .map_err(sql("job counts"))
    }

    /// Puts a failed or skipped job back in the queue with its attempts reset, or releases a queued job held
    /// for the operator. This is an administrator's retry, and `by` names who in the job's history. The change
    /// and its event are one transaction. Returns `None` if there is no such job, and `Some(false)` if the job
    /// is neither failed, skipped nor held.
    pub async fn retry_job(&self, id: i64, by: &str) -> Result<Option<bool>, StoreError> {
        on_pool!(self, |pool| {
            let mut tx = pool.begin_with(self.begin_write()).await.map_err(sql("begin retry"))?;
            let job: Option<(String, Option<String>)> =
                sqlx::query_as("SELECT state, failure_kind FROM jobs WHERE id = $1")
                    .bind(id)
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(sql("read job"))?;
            let Some((state, kind)) = job else { return Ok(None) };
            // An operator who freed the disk releases a held job here, without restarting a worker.
            let held = state == "queued" && kind.as_deref() == Some(FailureKind::NeedsOperator.as_str());
            if state != "failed" && state != "skipped" && !held {
                return Ok(Some(false));
            }
            // A held job keeps what it had done (its progress, what it staged): only the hold goes.
            let update = if held {
                "UPDATE jobs SET not_before = 0, failure_kind = NULL, updated_at = $1 WHERE id = $2"
            } else {
                "UPDATE jobs SET state = 'queued', attempts = 0, not_before = 0, lease_owner = NULL,
                 lease_expires_at = NULL, finished_at = NULL, failure_kind = NULL, staged = NULL, progress = NULL,
                 updated_at = $1
                 WHERE id = $2"
            };
            sqlx::query(update)
                .bind(crate::time::now_utc())
                .bind(id)
                .execute(&mut *tx)
                .await
                .map_err(sql("retry job"))?;
            let after = if held { "its hold for the operator" } else { state.as_str() };
            record_event!(tx, id, "queued", Some(format!("retried by {by} after {after}")))?;
            tx.commit().await.map_err(sql("commit retry"))?;
            Ok(Some(true))
        })
    }

    /// Adds what a step moved over the network to the job's totals.
    pub async fn add_job_bytes(&self, id: i64, downloaded: u64, uploaded: u64) -> Result<(), StoreError> {
        on_pool!(self, |pool| sqlx::query(
            "UPDATE jobs SET bytes_downloaded = bytes_downloaded + $1, bytes_uploaded = bytes_uploaded + $2 WHERE id = $3",
        )
        .bind(downloaded as i64)
        .bind(uploaded as i64)
        .bind(id)
        .execute(pool)
        .await.map(|done| done.rows_affected()))
        .map_err(sql("job bytes"))?;
        Ok(())
    }

    /// Returns the bytes all jobs downloaded and uploaded.
    pub async fn job_bytes(&self) -> Result<(i64, i64), StoreError> {
        on_pool!(self, |pool| sqlx::query_as(
            "SELECT CAST(COALESCE(SUM(bytes_downloaded), 0) AS BIGINT), CAST(COALESCE(SUM(bytes_uploaded), 0) AS BIGINT) FROM job_sums"
        )
        .fetch_one(pool)
        .await)
        .map_err(sql("job bytes"))
    }

    /// Returns the history of every job of a repo, oldest first.
    pub async fn repo_job_events(&self, repo: &str) -> Result<Vec<JobEvent>, StoreError> {
        on_pool!(self, |pool| sqlx::query_as(
            "SELECT e.job_id, e.at, e.state, e.detail FROM job_events e JOIN jobs j ON j.id = e.job_id
             WHERE j.repo_id = $1 ORDER BY e.id",
        )
        .bind(repo)
        .fetch_all(pool)
        .await)
        .map_err(sql("job events"))
    }

    /// Returns a repo's jobs, newest first.
    pub async fn repo_jobs(&self, repo: &str) -> Result<Vec<Job>, StoreError> {
        on_pool!(self, |pool| sqlx::query_as("SELECT * FROM jobs WHERE repo_id = $1 ORDER BY id DESC")
            .bind(repo)
            .fetch_all(pool)
            .await)
        .map_err(sql("repo jobs"))
    }

    /// Returns the jobs that pass `filter`, newest first, `limit` of them after `offset`.
    pub async fn jobs_page(&self, filter: &JobFilter, limit: i64, offset: i64) -> Result<Vec<Job>, StoreError> {
        on_pool!(self, |pool| sqlx::query_as(
            "SELECT * FROM jobs WHERE ($1 IS NULL OR state = $1) AND ($2 IS NULL OR lower(repo_id) = lower($2))
               AND ($3 IS NULL OR failure_kind = $3)
             ORDER BY id DESC LIMIT $4 OFFSET $5"
        )
        .bind(filter.state.map(JobState::as_str))
        .bind(filter.repo.as_deref())
        .bind(filter.failure_kind.map(FailureKind::as_str))
        .bind(limit)
        .bind(offset)
        .fetch_all(pool)
        .await)
        .map_err(sql("jobs"))
    }

    /// Returns the state and reason of the newest jobs that ended published or failed, newest first. Skipped
    /// jobs are left out, because they say nothing of whether the workers work.
    pub async fn recent_outcomes(&self, limit: i64) -> Result<Vec<(JobState, Option<String>)>, StoreError> {
        on_pool!(self, |pool| sqlx::query_as(
            "SELECT state, reason FROM jobs WHERE finished_at IS NOT NULL AND state IN ('published', 'failed')
             ORDER BY finished_at DESC, id DESC LIMIT $1"
        )
        .bind(limit)
        .fetch_all(pool)
        .await)
        .map_err(sql("recent outcomes"))
    }

    /// Returns the reason of one queued job held for the operator, if any is held.
    pub async fn a_hold_reason(&self) -> Result<Option<String>, StoreError> {
        on_pool!(self, |pool| sqlx::query_scalar(
            "SELECT reason FROM jobs WHERE state = 'queued' AND failure_kind = 'needs_operator' ORDER BY id DESC LIMIT 1"
        )
        .fetch_optional(pool)
        .await)
        .map(Option::flatten)
        .map_err(sql("hold reason"))
    }

    /// Makes the jobs held for the operator claimable at once, and returns how many it released. A worker
    /// whose start-up checks all passed has the configuration they were waiting for.
    pub async fn release_holds(&self) -> Result<u64, StoreError> {
        on_pool!(self, |pool| sqlx::query(
            "UPDATE jobs SET not_before = 0, failure_kind = NULL WHERE state = 'queued' AND failure_kind = 'needs_operator'"
        )
        .execute(pool)
        .await
        .map(|done| done.rows_affected()))
        .map_err(sql("release holds"))
    }

    /// Returns every job, newest first.
    pub async fn jobs(&self) -> Result<Vec<Job>, StoreError> {
        on_pool!(self, |pool| sqlx::query_as("SELECT * FROM jobs ORDER BY id DESC").fetch_all(pool).await)
            .map_err(sql("jobs"))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_caps() {
        assert_eq!(backoff(0), Duration::from_secs(60));
        assert_eq!(backoff(2), Duration::from_secs(240));
        assert_eq!(backoff(30), Duration::from_secs(3600));
    }

    /// A step's record goes with the state it moves to. A step before the publish forgets an earlier
    /// attempt's check and staged commit. A final state forgets the record, and its files are removed.
    #[tokio::test]
    async fn a_steps_record_goes_with_its_state_and_an_earlier_check_does_not_outlive_a_new_start() {
        use crate::job::payload::{LocalChecks, SourceFacts, Staged, WorkFiles};
        for test in crate::store::both::stores().await {
            let store = &test.store;
            let job = store.job_for("ns/r", "sha", VerifyDevice::Cpu).await.unwrap();
            let lease = Duration::from_secs(60);
            store.claim_job("w", lease, None).await.unwrap().unwrap();
            store.set_job_verification(job.id, &MlxRecord::announced("cpu", Some("0.29.1".into()))).await.unwrap();
            let checks = LocalChecks { shards: 1, tensors: 1, zero_copy: 1, ..LocalChecks::default() };
            let staged = Staged { commit: "5eed".into(), checks, source: SourceFacts::default() };
            store.finish_job(job.id, "w", &JobOutcome::AwaitMetal { staged: Some(staged) }).await.unwrap();
            let before = store.job(job.id).await.unwrap().unwrap();
            assert!(before.verification.is_some() && before.staged.is_some(), "{:?}", store.backend());
            // Put it back in the queue, as a publish that failed for a while leaves it, then claim it again.
            on_pool!(store, |pool| sqlx::query("UPDATE jobs SET state = 'queued' WHERE id = $1")
                .bind(job.id)
                .execute(pool)
                .await
                .map(|_| ()))
            .unwrap();
            store.claim_job("w", lease, None).await.unwrap().unwrap();

            let files = WorkFiles { boot: "b".into(), made_by: "m".into(), files: Vec::new() };
            let relaid = Progress::Relaid { files };
            assert!(store.advance_job(job.id, "w", (JobState::Verifying, Some(&relaid)), lease).await.unwrap());
            let now = store.job(job.id).await.unwrap().unwrap();
            assert_eq!((now.state, now.progress.map(|p| p.0)), (JobState::Verifying, Some(relaid.clone())));
            assert_eq!((now.verification, now.staged), (None, None), "{:?}", store.backend());

            assert!(store.advance_job(job.id, "w", (JobState::Publishing, None), lease).await.unwrap());
            assert_eq!(store.job(job.id).await.unwrap().unwrap().progress, None, "{:?}", store.backend());
            assert!(store.advance_job(job.id, "w", (JobState::Verifying, Some(&relaid)), lease).await.unwrap());
            let skipped = JobOutcome::Skipped { reason: "r".into() };
            store.finish_job(job.id, "w", &skipped).await.unwrap();
            assert_eq!(store.job(job.id).await.unwrap().unwrap().progress, None, "{:?}", store.backend());
        }
    }

    /// Only the holder of a job's lease advances, renews or finishes it. Once its lease ran out and another
    /// worker claimed the job, the first worker's outcome is refused.
    #[tokio::test]
    async fn a_lapsed_holder_can_neither_renew_nor_finish() {
        for test in crate::store::both::stores().await {
            let store = &test.store;
            let job = store.job_for("ns/r", "sha", VerifyDevice::Cpu).await.unwrap();
            let short = Duration::from_secs(60);
            store.claim_job("a", short, None).await.unwrap().unwrap();
            assert!(store.renew_lease(job.id, "a", short).await.unwrap());
            assert!(!store.renew_lease(job.id, "b", short).await.unwrap(), "b does not hold it");
            // a's lease runs out; b claims the job.
            expire_lease(store, job.id).await;
            assert!(!store.renew_lease(job.id, "a", short).await.unwrap(), "a lapsed lease is not renewed");
            assert_eq!(store.claim_job("b", short, None).await.unwrap().map(|j| j.id), Some(job.id));
            let published = JobOutcome::Published { target: "me/r-aligned".into(), commit: "c".into() };
            assert_eq!(store.finish_job(job.id, "a", &published).await.unwrap(), None, "{:?}", store.backend());
            assert!(!store.advance_job(job.id, "a", (JobState::Publishing, None), short).await.unwrap());
            assert_eq!(store.finish_job(job.id, "b", &published).await.unwrap(), Some(JobState::Published));
            let events: Vec<String> =
                store.repo_job_events("ns/r").await.unwrap().into_iter().map(|e| e.state).collect();
            assert_eq!(events, ["claimed", "claimed", "published"], "{:?}", store.backend());
        }
    }

    /// Makes job `id`'s lease run out now.
    pub(crate) async fn expire_lease(store: &Store, id: i64) {
        on_pool!(store, |pool| sqlx::query("UPDATE jobs SET lease_expires_at = 0 WHERE id = $1")
            .bind(id)
            .execute(pool)
            .await
            .map(|_| ()))
        .unwrap();
    }

    /// The trigger-kept job sums equal the aggregates over the jobs they stand for.
    pub(crate) async fn assert_job_sums_match(store: &Store, when: &str) {
        let live: Vec<(String, i64)> =
            on_pool!(store, |pool| sqlx::query_as("SELECT state, COUNT(*) FROM jobs GROUP BY state ORDER BY state")
                .fetch_all(pool)
                .await
                .unwrap());
        assert_eq!(store.job_counts().await.unwrap(), live, "{when} on {:?}", store.backend());
        let (bytes, held): ((i64, i64), i64) = on_pool!(store, |pool| {
            let bytes = sqlx::query_as(
                "SELECT CAST(COALESCE(SUM(bytes_downloaded), 0) AS BIGINT), CAST(COALESCE(SUM(bytes_uploaded), 0) AS BIGINT) FROM jobs",
            )
            .fetch_one(pool)
            .await
            .unwrap();
            let held = sqlx::query_scalar(
                "SELECT COUNT(*) FROM jobs WHERE state = 'queued' AND failure_kind = 'needs_operator'",
            )
            .fetch_one(pool)
            .await
            .unwrap();
            (bytes, held)
        });
        assert_eq!(store.job_bytes().await.unwrap(), bytes, "{when} on {:?}", store.backend());
        assert_eq!(store.jobs_needing_operator().await.unwrap(), held, "{when} on {:?}", store.backend());
    }

    /// A failure's kind decides the job's fate. A transient one is tried again after a backoff until the
    /// attempts run out. A permanent one fails the job at once. One that needs the operator puts the job back
    /// without spending its attempt, held for the hold time. The kind shows until the job publishes.
    #[tokio::test]
    async fn failure_kinds_retry_give_up_or_hold_for_the_operator() {
        for test in crate::store::both::stores().await {
            let store = &test.store;
            let lease = Duration::from_secs(60);
            let fail = |kind| JobOutcome::Failed { reason: "why".into(), kind };
            let id = store.job_for("ns/held", "sha", VerifyDevice::Cpu).await.unwrap().id;
            store.claim_job("w", lease, Some(id)).await.unwrap().unwrap();
            let held = store.finish_job(id, "w", &fail(FailureKind::NeedsOperator)).await.unwrap();
            assert_eq!(held, Some(JobState::Queued));
            let job = store.job(id).await.unwrap().unwrap();
            assert_eq!(
                (job.attempts, job.failure_kind),
                (0, Some(FailureKind::NeedsOperator)),
                "{:?}",
                store.backend()
            );
            let hold = NEEDS_OPERATOR_HOLD.as_secs() as i64;
            assert!((job.not_before - unix_now() - hold).abs() <= 5, "held for {} s", job.not_before - unix_now());
            assert_eq!(store.jobs_needing_operator().await.unwrap(), 1);
            assert_eq!(store.claim_job("w", lease, None).await.unwrap(), None, "held, not claimable");
            let events = store.repo_job_events("ns/held").await.unwrap();
            assert_eq!(events.last().and_then(|e| e.detail.as_deref()), Some("needs the operator: why"));
            // The operator who mended it says so: the hold goes, the job is claimable at once.
            assert_eq!(store.retry_job(id, "an administrator").await.unwrap(), Some(true));
            let job = store.job(id).await.unwrap().unwrap();
            assert_eq!((job.state, job.failure_kind, job.not_before), (JobState::Queued, None, 0));
            assert_eq!(store.jobs_needing_operator().await.unwrap(), 0);
            let events = store.repo_job_events("ns/held").await.unwrap();
            let said = events.last().and_then(|e| e.detail.as_deref());
            assert_eq!(said, Some("retried by an administrator after its hold for the operator"));
            assert_eq!(store.retry_job(id, "an administrator").await.unwrap(), Some(false), "queued, not held");
            assert_job_sums_match(store, "after a hold was released").await;
            // Mended: a repack by hand takes it at once, and its publication clears the kind.
            store.claim_job("w", lease, Some(id)).await.unwrap().unwrap();
            let published = JobOutcome::Published { target: "me/held-aligned".into(), commit: "c".into() };
            store.finish_job(id, "w", &published).await.unwrap();
            let job = store.job(id).await.unwrap().unwrap();
            assert_eq!((job.attempts, job.failure_kind), (1, None));
            assert_eq!(store.jobs_needing_operator().await.unwrap(), 0);
            store.add_job_bytes(id, 7, 5).await.unwrap();
            assert_job_sums_match(store, "after a held job published").await;

            let id = store.job_for("ns/flaky", "sha", VerifyDevice::Cpu).await.unwrap().id;
            let max = store.job(id).await.unwrap().unwrap().max_attempts;
            for attempt in 1..=max {
                store.claim_job("w", lease, Some(id)).await.unwrap().unwrap();
                let state = store.finish_job(id, "w", &fail(FailureKind::Transient)).await.unwrap();
                let want = if attempt < max { JobState::Queued } else { JobState::Failed };
                assert_eq!(state, Some(want), "attempt {attempt} of {max}");
            }
            assert_eq!(store.job(id).await.unwrap().unwrap().failure_kind, Some(FailureKind::Transient));

            let id = store.job_for("ns/broken", "sha", VerifyDevice::Cpu).await.unwrap().id;
            store.claim_job("w", lease, Some(id)).await.unwrap().unwrap();
            let state = store.finish_job(id, "w", &fail(FailureKind::Permanent)).await.unwrap();
            assert_eq!(state, Some(JobState::Failed));
            assert_eq!(store.job(id).await.unwrap().unwrap().failure_kind, Some(FailureKind::Permanent));
            assert_eq!(store.retry_job(id, "an administrator").await.unwrap(), Some(true));
            assert_job_sums_match(store, "after an administrator's retry").await;
        }
    }

    /// A job that keeps needing the operator gets its attempt back only the first few times. After that it
    /// spends one each time, and fails once they run out. A deferred job (a day's cap) spends none.
    #[tokio::test]
    async fn a_job_that_keeps_needing_the_operator_spends_its_attempts_and_a_deferred_one_does_not() {
        for test in crate::store::both::stores().await {
            let store = &test.store;
            let lease = Duration::from_secs(60);
            let held = JobOutcome::Failed { reason: "why".into(), kind: FailureKind::NeedsOperator };
            let id = store.job_for("ns/stuck", "sha", VerifyDevice::Cpu).await.unwrap().id;
            let max = store.job(id).await.unwrap().unwrap().max_attempts;
            let mut attempts = Vec::new();
            let mut state = None;
            for _ in 0..(NEEDS_OPERATOR_REFUNDS + max) {
                store.claim_job("w", lease, Some(id)).await.unwrap().unwrap();
                state = store.finish_job(id, "w", &held).await.unwrap();
                attempts.push(store.job(id).await.unwrap().unwrap().attempts);
                if state == Some(JobState::Failed) {
                    break;
                }
            }
            let refunds = usize::try_from(NEEDS_OPERATOR_REFUNDS).unwrap();
            assert!(attempts[..refunds].iter().all(|a| *a == 0), "{attempts:?} on {:?}", store.backend());
            assert_eq!(attempts.last(), Some(&max), "{attempts:?}");
            assert_eq!(state, Some(JobState::Failed), "failed once its attempts ran out: {attempts:?}");

            let id = store.job_for("ns/capped", "sha", VerifyDevice::Cpu).await.unwrap().id;
            let until = unix_now() + 3600;
            for _ in 0..(max + 2) {
                store.claim_job("w", lease, Some(id)).await.unwrap().unwrap();
                let deferred = JobOutcome::Deferred { reason: "cap".into(), until };
                assert_eq!(store.finish_job(id, "w", &deferred).await.unwrap(), Some(JobState::Queued));
            }
            let job = store.job(id).await.unwrap().unwrap();
            assert_eq!((job.attempts, job.failure_kind), (0, None), "{job:?}");
            // Moved onto the database's clock by its distance from now: a second may tick between the reads.
            assert!((job.not_before - until).abs() <= 1, "{job:?}");
            assert_eq!(store.claim_job("w", lease, None).await.unwrap().map(|j| j.id), None, "not before `until`");
            assert_job_sums_match(store, "after deferrals").await;

            // A hold for the worker's configuration spends nothing, however often; it counts as needing the
            // operator, and a worker whose checks pass releases it at once.
            let id = store.job_for("ns/configured", "sha", VerifyDevice::Cpu).await.unwrap().id;
            let held = JobOutcome::Held { reason: "python3 cannot import mlx".into() };
            for _ in 0..(NEEDS_OPERATOR_REFUNDS + max + 2) {
                store.claim_job("w", lease, Some(id)).await.unwrap().unwrap();
                assert_eq!(store.finish_job(id, "w", &held).await.unwrap(), Some(JobState::Queued));
            }
            let job = store.job(id).await.unwrap().unwrap();
            assert_eq!((job.attempts, job.failure_kind), (0, Some(FailureKind::NeedsOperator)), "{job:?}");
            assert!(job.not_before > unix_now(), "held: {job:?}");
            assert_eq!(store.jobs_needing_operator().await.unwrap(), 1);
            let events = store.repo_job_events("ns/configured").await.unwrap();
            let said = events.last().and_then(|e| e.detail.clone()).unwrap_or_default();
            assert_eq!(said, "held for the configuration: python3 cannot import mlx");
            assert_eq!(store.release_holds().await.unwrap(), 1);
            assert_eq!(store.jobs_needing_operator().await.unwrap(), 0, "released: no longer counted as held");
            assert_eq!(store.claim_job("w", lease, None).await.unwrap().map(|j| j.id), Some(id), "released");
            assert_job_sums_match(store, "after holds").await;
        }
    }

    /// Eight workers claiming at once from one queue: every job is claimed exactly once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_claims_take_each_job_once() {
        for test in crate::store::both::stores().await {
            let store = test.store;
            for i in 0..120 {
                store.job_for(&format!("ns/r{i}"), "sha", VerifyDevice::Cpu).await.unwrap();
            }
            let mut workers = tokio::task::JoinSet::new();
            for w in 0..8 {
                let store = store.clone();
                workers.spawn(async move {
                    let mut mine = Vec::new();
                    while let Some(job) =
                        store.claim_job(&format!("w{w}"), Duration::from_secs(600), None).await.unwrap()
                    {
                        // Each job moves on as a worker's would. Some go back to the queue with a backoff, so
                        // they are not claimed again here. Many writers thus update the job sums' rows at
                        // once, in both directions between two states.
                        let worker = format!("w{w}");
                        store
                            .advance_job(job.id, &worker, (JobState::Downloading, None), Duration::from_secs(600))
                            .await
                            .unwrap();
                        store.add_job_bytes(job.id, 100, 1).await.unwrap();
                        let outcome = if job.id % 3 == 0 {
                            JobOutcome::Failed { reason: "flaky".into(), kind: FailureKind::Transient }
                        } else {
                            JobOutcome::Published { target: format!("me/r{}", job.id), commit: "c".into() }
                        };
                        store.finish_job(job.id, &worker, &outcome).await.unwrap();
                        mine.push(job.id);
                    }
                    mine
                });
            }
            let mut claimed = Vec::new();
            while let Some(mine) = workers.join_next().await {
                claimed.extend(mine.unwrap());
            }
            claimed.sort_unstable();
            assert_eq!(claimed, (1..=120).collect::<Vec<i64>>(), "on {:?}", store.backend());
            assert_job_sums_match(&store, "after eight workers").await;
        }
    }
}
