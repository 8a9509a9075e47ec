//! The `--pr` bookkeeping: what became of the pull requests jobs opened on their sources, and the repos whose
//! owner said no by closing one.

use std::collections::BTreeSet;

use super::jobs::record_event;
use super::{Store, StoreError, on_pool, sql};

impl Store {
    /// Returns the repos (all, or `only`) whose owner closed one of hubalign's pull requests unmerged: their
    /// "no" in `--pr` mode. A partial index reads them apart from the candidates, so the queue pays for it
    /// only in that mode.
    pub async fn declined_repos(&self, only: Option<&str>) -> Result<BTreeSet<String>, StoreError> {
        let repos: Vec<String> = on_pool!(self, |pool| sqlx::query_scalar(
            "SELECT DISTINCT repo_id FROM jobs WHERE pr_status = 'closed' AND ($1 IS NULL OR repo_id = $1)"
        )
        .bind(only)
        .fetch_all(pool)
        .await)
        .map_err(sql("declined repos"))?;
        Ok(repos.into_iter().collect())
    }

    /// Whether a job of this store opened pull request `num` on `repo`. A payload about any other pull
    /// request asks the Hub nothing.
    pub async fn opened_pull_request(&self, repo: &str, num: i64) -> Result<bool, StoreError> {
        let found: Option<i64> =
            on_pool!(self, |pool| sqlx::query_scalar("SELECT id FROM jobs WHERE repo_id = $1 AND pr_num = $2 LIMIT 1")
                .bind(repo)
                .bind(num)
                .fetch_optional(pool)
                .await)
            .map_err(sql("find pull request"))?;
        Ok(found.is_some())
    }

    /// Records what became of the pull request `num` that a job opened on `repo`: `closed` or `merged`, as the
    /// Hub says. It adds an event on that job. Returns `None` when no job of this store opened the pull
    /// request, which is then not hubalign's.
    pub async fn pull_request_ended(&self, repo: &str, num: i64, status: &str) -> Result<Option<i64>, StoreError> {
        on_pool!(self, |pool| {
            let mut tx = pool.begin_with(self.begin_write()).await.map_err(sql("begin"))?;
            let job: Option<(i64, Option<String>)> = sqlx::query_as(
                "SELECT id, pr_status FROM jobs WHERE repo_id = $1 AND pr_num = $2 ORDER BY id DESC LIMIT 1",
            )
            .bind(repo)
            .bind(num)
            .fetch_optional(&mut *tx)
            .await
            .map_err(sql("find pull request"))?;
            let Some((id, before)) = job else { return Ok(None) };
            if before.as_deref() != Some(status) {
                sqlx::query("UPDATE jobs SET pr_status = $1, updated_at = $2 WHERE id = $3")
                    .bind(status)
                    .bind(crate::time::now_utc())
                    .bind(id)
                    .execute(&mut *tx)
                    .await
                    .map_err(sql("record pull request"))?;
                let detail = match status {
                    "merged" => Some(format!("pull request #{num} merged by the owner")),
                    _ => Some(format!("pull request #{num} closed by the owner: not proposed again")),
                };
                record_event!(tx, id, &format!("pr_{status}"), detail)?;
            }
            tx.commit().await.map_err(sql("commit pull request"))?;
            Ok(Some(id))
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::job::{JobOutcome, VerifyDevice};

    /// A pull request the owner closed unmerged marks its repo declined for `--pr` mode. A merged one, or one
    /// no job of this store opened, does not.
    #[tokio::test]
    async fn a_closed_pull_request_declines_its_repo_and_a_merged_one_does_not() {
        for test in crate::store::both::stores().await {
            let store = &test.store;
            let lease = Duration::from_secs(60);
            for (repo, num) in [("ns/closed", 3), ("ns/merged", 4)] {
                let id = store.job_for(repo, "sha", VerifyDevice::Cpu).await.unwrap().id;
                store.claim_job("w", lease, Some(id)).await.unwrap().unwrap();
                let target = format!("{repo}/discussions/{num}");
                let proposed = JobOutcome::Proposed { num, commit: "c".into(), target };
                store.finish_job(id, "w", &proposed).await.unwrap();
            }
            assert!(store.opened_pull_request("ns/closed", 3).await.unwrap());
            assert!(!store.opened_pull_request("ns/closed", 9).await.unwrap());
            assert_eq!(store.pull_request_ended("ns/closed", 9, "closed").await.unwrap(), None, "not hubalign's");
            assert!(store.declined_repos(None).await.unwrap().is_empty(), "{:?}", store.backend());
            assert!(store.pull_request_ended("ns/closed", 3, "closed").await.unwrap().is_some());
            assert!(store.pull_request_ended("ns/merged", 4, "merged").await.unwrap().is_some());
            let all: Vec<String> = store.declined_repos(None).await.unwrap().into_iter().collect();
            assert_eq!(all, ["ns/closed"], "{:?}", store.backend());
            assert!(store.declined_repos(Some("ns/merged")).await.unwrap().is_empty());
            assert_eq!(store.declined_repos(Some("ns/closed")).await.unwrap().len(), 1);
        }
    }
}
