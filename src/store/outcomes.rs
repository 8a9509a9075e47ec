//! Records what probing found. A batch of repos goes in one transaction, in the same few statements whatever
//! the batch's size. A crawl's recording thus keeps up with its probes on either backend.

use std::collections::HashMap;

use sqlx::QueryBuilder;

use super::records::RepoOutcome;
use super::{Backend, Store, StoreError, on_pool, sql};

/// Shards per insert statement. At 13 values each, a statement stays well inside SQLite's 32,766 and
/// PostgreSQL's 65,535 bound parameters. A batch of repos may hold thousands of shards.
const SHARD_BATCH: usize = 1_000;

/// What one repo's recording changes beside its shards, decided from what the store held before.
struct Recorded<'a> {
    outcome: &'a RepoOutcome,
    /// The commit recorded as audited: the outcome's when final, else the one before stays.
    audited_sha: Option<&'a str>,
    /// Bytes a copying loader duplicates, as the history shows them.
    bytes: i64,
    /// Whether anything a report shows changed. If so, a history row follows.
    changed: bool,
}

impl Store {
    /// Records one repo's audit atomically. It replaces the shards, sets the state and audited commit, and
    /// adds a history row when anything a report shows changed.
    pub async fn record_repo(&self, run: i64, outcome: &RepoOutcome) -> Result<(), StoreError> {
        self.record_repos(run, std::slice::from_ref(outcome)).await
    }

    /// Records the audits of several repos in one transaction, each as [`Store::record_repo`] would. The
    /// batch is recorded whole or not at all. A repo the batch names twice is recorded as its last outcome
    /// says. The whole batch takes six statements, plus one per 1,000 shards.
    pub async fn record_repos(&self, run: i64, outcomes: &[RepoOutcome]) -> Result<(), StoreError> {
        let unique = super::last_of_each(outcomes, |o| &o.id);
        if unique.is_empty() {
            return Ok(());
        }
        let now = crate::time::now_utc();
        on_pool!(self, |pool| {
            let mut tx = pool.begin_with(self.begin_write()).await.map_err(sql("begin"))?;
            if self.backend() == Backend::Postgres {
                // Two audits of one repo at once (a webhook's and the crawl's) take turns. The second then
                // replaces the first's shards instead of colliding with them. SQLite has one writer anyway.
                let mut lock =
                    QueryBuilder::new("SELECT pg_advisory_xact_lock(hashtextextended('repo:' || v.column1, 0)) FROM (");
                lock.push_values(&unique, |mut row, o| {
                    row.push_bind(&o.id);
                });
                lock.push(") AS v ORDER BY v.column1");
                lock.build().execute(&mut *tx).await.map_err(sql("lock repos"))?;
            }
            let mut read = QueryBuilder::new(
                "SELECT id, audited_sha, state,
                   CAST(COALESCE((SELECT SUM(misaligned_bytes) FROM shards WHERE repo_id = repos.id), 0) AS BIGINT)
                 FROM repos WHERE id IN (",
            );
            let mut ids = read.separated(", ");
            for o in &unique {
                ids.push_bind(&o.id);
            }
            read.push(")");
            if self.backend() == Backend::Postgres {
                read.push(" ORDER BY id FOR UPDATE");
            }
            let previous: HashMap<String, (Option<String>, String, i64)> = read
                .build_query_as::<(String, Option<String>, String, i64)>()
                .fetch_all(&mut *tx)
                .await
                .map_err(sql("read repos"))?
                .into_iter()
                .map(|(id, sha, state, bytes)| (id, (sha, state, bytes)))
                .collect();
            let recorded: Vec<Recorded> = unique.iter().map(|o| decide(o, previous.get(&o.id))).collect();
            let finals: Vec<&RepoOutcome> = unique.iter().copied().filter(|o| o.state.is_final()).collect();
            if !finals.is_empty() {
                let mut clear = QueryBuilder::new("DELETE FROM shards WHERE repo_id IN (");
                let mut ids = clear.separated(", ");
                for o in &finals {
                    ids.push_bind(&o.id);
                }
                clear.push(")");
                clear.build().execute(&mut *tx).await.map_err(sql("clear shards"))?;
            }
            let shards: Vec<_> = finals.iter().flat_map(|o| &o.shards).collect();
            for batch in shards.chunks(SHARD_BATCH) {
                let mut insert = QueryBuilder::new(
                    "INSERT INTO shards (repo_id, path, sha, size, header_len, data_start, data_start_mod8, tensors,
                     misaligned_tensors, misaligned_bytes, verdict, writer, error) ",
                );
                insert.push_values(batch, |mut row, s| {
                    row.push_bind(&s.repo)
                        .push_bind(&s.path)
                        .push_bind(&s.sha)
                        .push_bind(s.size)
                        .push_bind(s.header_len)
                        .push_bind(s.data_start)
                        .push_bind(s.data_start_mod8)
                        .push_bind(s.tensors)
                        .push_bind(s.misaligned_tensors)
                        .push_bind(s.misaligned_bytes)
                        .push_bind(&s.verdict)
                        .push_bind(&s.writer)
                        .push_bind(&s.error);
                });
                insert.build().execute(&mut *tx).await.map_err(sql("record shards"))?;
            }
            // `VALUES` names its columns column1, column2, … on both backends.
            let mut update = QueryBuilder::new(
                "UPDATE repos SET audited_sha = COALESCE(v.column2, repos.audited_sha), state = v.column3,
                   last_audited_run = v.column4, last_audited_at = v.column5, last_error = v.column6,
                   was_affected = CASE WHEN v.column7 THEN 1 ELSE repos.was_affected END
                 FROM (",
            );
            update.push_values(&recorded, |mut row, r| {
                row.push_bind(&r.outcome.id)
                    .push_bind(r.audited_sha)
                    .push_bind(r.outcome.state.as_str())
                    .push_bind(run)
                    .push_bind(&now)
                    .push_bind(&r.outcome.error)
                    .push_bind(r.bytes > 0);
            });
            update.push(") AS v WHERE repos.id = v.column1");
            update.build().execute(&mut *tx).await.map_err(sql("record repos"))?;
            let history: Vec<&Recorded> = recorded.iter().filter(|r| r.changed).collect();
            if !history.is_empty() {
                let mut insert = QueryBuilder::new(
                    "INSERT INTO repo_history (repo_id, run_id, at, sha, state, affected, misaligned_bytes) ",
                );
                insert.push_values(&history, |mut row, r| {
                    row.push_bind(&r.outcome.id)
                        .push_bind(run)
                        .push_bind(&now)
                        .push_bind(&r.outcome.sha)
                        .push_bind(r.outcome.state.as_str())
                        .push_bind(r.bytes > 0)
                        .push_bind(r.bytes);
                });
                insert.build().execute(&mut *tx).await.map_err(sql("record history"))?;
            }
            tx.commit().await.map_err(sql("commit repos"))?;
            Ok(())
        })
    }
}

/// Decides what recording `outcome` over `previous` changes. `previous` holds the store's audited commit,
/// state and duplicated bytes, if the store knew the repo.
fn decide<'a>(outcome: &'a RepoOutcome, previous: Option<&(Option<String>, String, i64)>) -> Recorded<'a> {
    let audited_sha = outcome.state.is_final().then_some(outcome.sha.as_str());
    let bytes = if outcome.state.is_final() { outcome.misaligned_bytes() } else { previous.map_or(0, |p| p.2) };
    let changed = match previous {
        None => true,
        Some((sha, state, old_bytes)) => {
            sha.as_deref() != audited_sha.or(sha.as_deref())
                || state != outcome.state.as_str()
                || (*old_bytes > 0) != (bytes > 0)
        }
    };
    Recorded { outcome, audited_sha, bytes, changed }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::both::stores;
    use crate::store::{ListingEntry, RepoState, ShardRow};

    fn outcome(id: &str, sha: &str, misaligned: Option<i64>) -> RepoOutcome {
        let shard = |path: &str| ShardRow {
            repo: id.into(),
            path: path.into(),
            sha: sha.into(),
            size: 100,
            header_len: Some(10),
            data_start: Some(18),
            data_start_mod8: Some(2),
            tensors: Some(2),
            misaligned_tensors: Some(misaligned.map_or(0, |_| 1)),
            misaligned_bytes: misaligned,
            verdict: if misaligned.is_some_and(|b| b > 0) { "header_pad" } else { "aligned" }.into(),
            error: None,
            writer: Some("mlx".into()),
        };
        RepoOutcome {
            id: id.into(),
            sha: sha.into(),
            state: RepoState::Ok,
            shards: vec![shard("a.safetensors"), shard("b.safetensors")],
            error: None,
        }
    }

    /// Returns what a store shows of one repo: its state, audited commit, shards and their bytes, affected
    /// flag and history rows.
    async fn shown(store: &Store, id: &str) -> (String, Option<String>, i64, i64, i64, i64) {
        on_pool!(store, |pool| sqlx::query_as(
            "SELECT state, audited_sha,
               (SELECT COUNT(*) FROM shards WHERE repo_id = repos.id),
               CAST(COALESCE((SELECT SUM(misaligned_bytes) FROM shards WHERE repo_id = repos.id), 0) AS BIGINT),
               was_affected, (SELECT COUNT(*) FROM repo_history WHERE repo_id = repos.id)
             FROM repos WHERE id = $1"
        )
        .bind(id)
        .fetch_one(pool)
        .await
        .unwrap())
    }

    #[tokio::test]
    async fn a_batch_is_recorded_as_its_repos_one_at_a_time_would_be() {
        // Use pairs of one backend. The first store records the second audit as a batch, the other one repo at
        // a time. Every repo must then look the same in both.
        let (first, second) = (stores().await, stores().await);
        for (batched, one_by_one) in first.iter().zip(&second) {
            let (batched, one_by_one) = (&batched.store, &one_by_one.store);
            let backend = batched.backend();
            let ids = ["ns/a", "ns/b", "ns/c", "ns/d"];
            for store in [batched, one_by_one] {
                let run = store.start_run("sim", "", None).await.unwrap();
                let entries: Vec<ListingEntry> = ids.iter().map(|id| ListingEntry::public(id, "1")).collect();
                store.record_listing(run, &entries, false).await.unwrap();
                // A first audit, so the second has something to replace and compare with.
                for id in ids {
                    store.record_repo(run, &outcome(id, "1", Some(4))).await.unwrap();
                }
            }
            let mut gone = outcome("ns/c", "1", None);
            gone.state = RepoState::Gated;
            gone.shards.clear();
            let audits = vec![
                outcome("ns/a", "2", Some(0)),
                outcome("ns/b", "1", Some(4)),
                gone,
                outcome("ns/d", "2", Some(8)),
                // Named twice: the last outcome is the one recorded.
                outcome("ns/a", "3", Some(6)),
            ];
            let run = batched.start_run("sim", "", None).await.unwrap();
            batched.record_repos(run, &audits).await.unwrap();
            let run = one_by_one.start_run("sim", "", None).await.unwrap();
            for o in audits.iter().filter(|o| o.id != "ns/a" || o.sha == "3") {
                one_by_one.record_repo(run, o).await.unwrap();
            }
            for id in ids {
                assert_eq!(shown(batched, id).await, shown(one_by_one, id).await, "{backend:?} {id}");
            }
            assert_eq!(shown(batched, "ns/a").await, ("ok".into(), Some("3".into()), 2, 12, 1, 2), "{backend:?}");
            assert_eq!(shown(batched, "ns/c").await, ("gated".into(), Some("1".into()), 0, 0, 1, 2), "{backend:?}");
            // ns/b's second audit found what the first did: no second history row.
            assert_eq!(shown(batched, "ns/b").await.5, 1, "{backend:?}");
            batched.record_repos(run, &[]).await.unwrap();
        }
    }
}
