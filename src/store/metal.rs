//! The Metal check's side of the queue. macOS runners claim the jobs waiting for it, with a lease, and record
//! their verdict only while they hold the lease.

use std::time::Duration;

use super::jobs::{Claim, record_event};
use super::{Store, StoreError, on_pool, sql};
use sqlx::types::Json;

use crate::job::Job;
use crate::job::payload::MlxRecord;

impl Store {
    /// Hands the oldest job waiting for the Metal check to a macOS runner, with a lease. On PostgreSQL it
    /// skips rows another runner is claiming at that moment. With `on_hub`, it takes only jobs staged on the
    /// Hub, which the runner downloads from there. Otherwise it takes only jobs staged on a worker, which the
    /// runner fetches over the runner API.
    pub async fn claim_metal_job(
        &self,
        runner: &str,
        lease: Duration,
        on_hub: bool,
    ) -> Result<Option<Job>, StoreError> {
        let now = self.db_now().await?;
        let claim = format!(
            "UPDATE jobs SET lease_owner = $1, lease_expires_at = $2, updated_at = $3
             WHERE id = (SELECT id FROM jobs WHERE state = 'awaiting_metal_verify' AND COALESCE(lease_expires_at, 0) < $4
                           AND (staged IS NOT NULL) = $5
                         ORDER BY id LIMIT 1{})
             RETURNING *",
            self.skip_locked()
        );
        let claim = Claim { text: claim, holder: runner, lease, now, event: "metal_claimed", what: "claim metal job" };
        self.claim_with(claim, on_hub, |_| runner.to_owned()).await
    }

    /// Records a runner's Metal check. A pass sends the job on to publishing, where a worker picks it up. A
    /// failure fails the job for good. Returns `false` if the runner no longer holds the job. The lease check
    /// and the record are one transaction, so a lease that lapses and goes to another runner cannot let two
    /// results in.
    pub async fn metal_result(&self, id: i64, runner: &str, record: &MlxRecord) -> Result<bool, StoreError> {
        let now = crate::time::now_utc();
        let (state, reason) = if record.ok {
            ("publishing", "Metal check passed".to_owned())
        } else {
            let why = record.error.as_deref().unwrap_or("no reason given");
            ("failed", format!("Metal load check failed on {}: {why}", record.device))
        };
        on_pool!(self, |pool| {
            let mut tx = pool.begin_with(self.begin_write()).await.map_err(sql("begin metal result"))?;
            let taken = sqlx::query(
                "UPDATE jobs SET verification = $1, updated_at = $2, state = $3,
                    reason = CASE WHEN $3 = 'failed' THEN $4 ELSE reason END,
                    finished_at = CASE WHEN $3 = 'failed' THEN $2 ELSE NULL END,
                    failure_kind = CASE WHEN $3 = 'failed' THEN 'permanent' ELSE NULL END,
                    progress = CASE WHEN $3 = 'failed' THEN NULL ELSE progress END,
                    lease_owner = NULL, lease_expires_at = NULL
                 WHERE id = $5 AND lease_owner = $6 AND state = 'awaiting_metal_verify'",
            )
            .bind(Json(record))
            .bind(&now)
            .bind(state)
            .bind(&reason)
            .bind(id)
            .bind(runner)
            .execute(&mut *tx)
            .await
            .map_err(sql("metal result"))?;
            if taken.rows_affected() == 0 {
                return Ok(false);
            }
            record_event!(tx, id, state, Some(reason))?;
            tx.commit().await.map_err(sql("commit metal result"))?;
            Ok(true)
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::job::payload::{MlxRecord, Progress, WorkFiles};
    use crate::job::{JobOutcome, JobState, VerifyDevice};
    use crate::store::Store;

    #[tokio::test]
    async fn only_the_runner_holding_a_job_records_its_metal_result() {
        for test in crate::store::both::stores().await {
            only_the_holder_records_on(&test.store).await;
        }
    }

    async fn only_the_holder_records_on(store: &Store) {
        let lease = Duration::from_secs(60);
        for passed in [true, false] {
            let job = store.job_for(&format!("ns/passed-{passed}"), "sha", VerifyDevice::Metal).await.unwrap();
            store.claim_job("worker", lease, Some(job.id)).await.unwrap().unwrap();
            let files = WorkFiles { boot: "b".into(), made_by: "m".into(), files: Vec::new() };
            let relaid = Progress::Relaid { files };
            assert!(store.advance_job(job.id, "worker", (JobState::Verifying, Some(&relaid)), lease).await.unwrap());
            store.finish_job(job.id, "worker", &JobOutcome::AwaitMetal { staged: None }).await.unwrap();
            assert_eq!(store.claim_metal_job("runner-a", lease, true).await.unwrap(), None, "staged on a worker");
            store.claim_metal_job("runner-a", lease, false).await.unwrap().unwrap();
            // runner-a's lease runs out, and runner-b takes the job over.
            crate::store::jobs::tests::expire_lease(store, job.id).await;
            assert_eq!(store.claim_metal_job("runner-b", lease, false).await.unwrap().map(|j| j.id), Some(job.id));
            let record = if passed { MlxRecord::announced("gpu", None) } else { MlxRecord::failed("gpu", "differs") };
            assert!(!store.metal_result(job.id, "runner-a", &record).await.unwrap(), "a lapsed lease");
            assert!(store.metal_result(job.id, "runner-b", &record).await.unwrap());
            let after = store.job(job.id).await.unwrap().unwrap();
            assert_eq!(after.state, if passed { "publishing" } else { "failed" });
            assert_eq!(after.verification.map(|r| r.0), Some(record.clone()), "read back as written");
            // A pass publishes from the worker's files (their record stays); a failure ends the job.
            assert_eq!(after.progress.map(|p| p.0), passed.then_some(relaid));
            if !passed {
                assert_eq!(after.reason.as_deref(), Some("Metal load check failed on gpu: differs"));
            }
            assert!(!store.metal_result(job.id, "runner-b", &record).await.unwrap(), "a second result");
        }
    }
}
