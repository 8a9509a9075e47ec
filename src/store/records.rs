//! What the crawler records: runs, repos (with their access state), shards, and history.

use serde::Serialize;

use super::{Store, StoreError, on_pool, sql};
use crate::safetensors::Verdict;

/// Inserts a repo's history row on the transaction `$tx` that changes what a report shows of the repo. The
/// row holds the commit, the state, and the bytes a copying loader duplicates. The commit is `None` when the
/// repo was recorded gone or its listing entry refused. The row marks the repo affected when any bytes are
/// duplicated.
macro_rules! record_history {
    ($tx:expr, ($repo:expr, $run:expr, $at:expr), $sha:expr, $state:expr, $bytes:expr) => {
        sqlx::query(
            "INSERT INTO repo_history (repo_id, run_id, at, sha, state, affected, misaligned_bytes)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind($repo)
        .bind($run)
        .bind($at)
        .bind($sha)
        .bind($state)
        .bind($bytes > 0)
        .bind($bytes)
        .execute(&mut *$tx)
        .await
        .map_err(sql("record history"))
    };
}

/// Counters of one run, stored with it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RunStats {
    /// Repos in the listing.
    pub repos_listed: u64,
    /// Repos probed.
    pub repos_probed: u64,
    /// Shards probed.
    pub shards_probed: u64,
    /// API requests sent.
    pub api_requests: u64,
    /// Resolver requests sent.
    pub resolver_requests: u64,
    /// Body bytes read.
    pub bytes_read: u64,
    /// 429s received.
    pub rate_limited: u64,
    /// Retried attempts.
    pub retries: u64,
    /// Repos that failed.
    pub errors: u64,
    /// Listing entries the checks refused.
    pub invalid_listings: u64,
}

/// Repos per statement when a listing page is recorded. At 10 values each, a statement stays well inside
/// SQLite's 32,766 and PostgreSQL's 65,535 bound parameters.
const LISTING_BATCH: usize = 500;

/// A repo as a listing named it, as the store keeps it. The audit builds these from the Hub's answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListingEntry {
    /// `namespace/name`, checked by `untrusted`.
    pub id: String,
    /// The part before the `/`.
    pub namespace: String,
    /// The listed head commit.
    pub sha: Option<String>,
    /// Last change, ISO-8601.
    pub last_modified: Option<String>,
    /// Private.
    pub private: bool,
    /// Gated.
    pub gated: bool,
    /// Disabled by the Hub.
    pub disabled: bool,
    /// Downloads over the last 30 days, as listed.
    pub downloads: i64,
    /// Likes, as listed.
    pub likes: i64,
}

impl ListingEntry {
    /// Builds a public entry for `id` at `sha`, for tests and tools.
    pub fn public(id: &str, sha: &str) -> ListingEntry {
        let namespace = crate::untrusted::namespace_of(id).to_owned();
        ListingEntry { id: id.to_owned(), namespace, sha: Some(sha.to_owned()), ..ListingEntry::default() }
    }
}

/// A listing entry the checks refused, kept under its escaped id with the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedEntry {
    /// The id as listed, escaped and cut short.
    pub id: String,
    /// The part of that id before its first `/`.
    pub namespace: String,
    /// Which rule it breaks.
    pub reason: String,
}

/// A repo's access state after an audit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RepoState {
    /// Audited.
    Ok,
    /// Gated and not granted to this token.
    Gated,
    /// Disabled by the Hub.
    Disabled,
    /// Gone (or private to someone else).
    Vanished,
    /// Its commit was replaced after the listing; the next run audits the new one.
    Moved,
    /// The Hub answers its name with another repo, so it was renamed. Its `last_error` names the new name.
    Renamed,
    /// A failure that retries did not cure; the next run tries again.
    Error,
    /// The listing entry broke the Hub's rules (id, commit or a file path); never probed.
    InvalidListing,
}

impl RepoState {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            RepoState::Ok => "ok",
            RepoState::Gated => "gated",
            RepoState::Disabled => "disabled",
            RepoState::Vanished => "vanished",
            RepoState::Moved => "moved",
            RepoState::Renamed => "renamed",
            RepoState::Error => "error",
            RepoState::InvalidListing => "invalid_listing",
        }
    }

    /// Whether the audit of this commit is done, so it is not probed again until the commit changes.
    pub fn is_final(self) -> bool {
        !matches!(self, RepoState::Moved | RepoState::Error)
    }
}

/// One shard's audit, as stored and as reported (`report --repo`, `report --shards`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct ShardRow {
    /// `namespace/name` (`repo_id` in JSON, as everywhere).
    #[sqlx(rename = "repo_id")]
    #[serde(rename = "repo_id")]
    pub repo: String,
    /// Path in the repo.
    pub path: String,
    /// The commit audited.
    pub sha: String,
    /// File size.
    pub size: i64,
    /// `N`.
    pub header_len: Option<i64>,
    /// `8 + N`.
    pub data_start: Option<i64>,
    /// `(8 + N) % 8`.
    pub data_start_mod8: Option<i64>,
    /// Tensors.
    pub tensors: Option<i64>,
    /// Tensors a zero-copy loader must copy.
    pub misaligned_tensors: Option<i64>,
    /// Their bytes.
    pub misaligned_bytes: Option<i64>,
    /// `aligned`, `header_pad`, `relayout` or `invalid`.
    pub verdict: String,
    /// Why it is invalid.
    pub error: Option<String>,
    /// `__metadata__.format`.
    pub writer: Option<String>,
}

/// What auditing one repo found, recorded in one transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoOutcome {
    /// `namespace/name`.
    pub id: String,
    /// The commit audited.
    pub sha: String,
    /// Access state.
    pub state: RepoState,
    /// Its shards (empty unless `Ok`).
    pub shards: Vec<ShardRow>,
    /// The failure, for `Error` and `Moved`.
    pub error: Option<String>,
}

impl RepoOutcome {
    /// Bytes a copying loader duplicates over all shards.
    pub fn misaligned_bytes(&self) -> i64 {
        self.shards.iter().filter_map(|s| s.misaligned_bytes).sum()
    }
}

/// What started a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunKind {
    /// The scheduled (or requested) crawl of the whole listing.
    Crawl,
    /// A webhook's hint about one repo.
    Webhook,
}

impl RunKind {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunKind::Crawl => "crawl",
            RunKind::Webhook => "webhook",
        }
    }
}

impl Store {
    /// Marks crawls a killed process left `running` as `interrupted`.
    pub async fn interrupt_stale_runs(&self) -> Result<(), StoreError> {
        let now = self.db_now_utc().await?;
        on_pool!(self, |pool| sqlx::query(
            "UPDATE audit_runs SET status = 'interrupted', finished_at = $1 WHERE status = 'running' AND kind = 'crawl'"
        )
        .bind(&now)
        .execute(pool)
        .await
        .map(|done| done.rows_affected()))
        .map_err(sql("interrupt stale runs"))?;
        Ok(())
    }

    /// Whether a crawl is recorded as running. A replica asks this when it has just taken the scheduler lease.
    /// A running crawl is then one that the lease's previous holder left when it died. The new holder resumes
    /// it at once rather than at the next scheduled time, a day away by default.
    pub async fn crawl_left_running(&self) -> Result<bool, StoreError> {
        on_pool!(self, |pool| sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM audit_runs WHERE status = 'running' AND kind = 'crawl')"
        )
        .fetch_one(pool)
        .await)
        .map_err(sql("crawl left running"))
    }

    /// Marks runs left `running` by a task that died (a panic) as `failed`, with the reason.
    pub async fn fail_running_runs(&self, reason: &str) -> Result<(), StoreError> {
        let now = self.db_now_utc().await?;
        on_pool!(self, |pool| sqlx::query(
            "UPDATE audit_runs SET status = 'failed', finished_at = $1, error = $2 WHERE status = 'running'"
        )
        .bind(&now)
        .bind(reason)
        .execute(pool)
        .await
        .map(|done| done.rows_affected()))
        .map_err(sql("fail running runs"))?;
        Ok(())
    }

    /// Records the start of a crawl, by `started_by`: the `serve` replica that leads, if any.
    pub async fn start_run(&self, endpoint: &str, query: &str, started_by: Option<&str>) -> Result<i64, StoreError> {
        self.start_run_of(RunKind::Crawl, endpoint, query, started_by, None).await
    }

    /// Records the start of a run of `kind`. `requested_at` is when the payload behind a webhook's run arrived.
    pub async fn start_run_of(
        &self,
        kind: RunKind,
        endpoint: &str,
        query: &str,
        started_by: Option<&str>,
        requested_at: Option<&str>,
    ) -> Result<i64, StoreError> {
        // Take run times from the database's clock, because every replica's schedule goes on from them.
        let now = self.db_now_utc().await?;
        on_pool!(self, |pool| {
            sqlx::query_scalar(
                "INSERT INTO audit_runs (started_at, status, endpoint, query, started_by, kind, requested_at)
             VALUES ($1, 'running', $2, $3, $4, $5, $6) RETURNING id",
            )
            .bind(&now)
            .bind(endpoint)
            .bind(query)
            .bind(started_by)
            .bind(kind.as_str())
            .bind(requested_at)
            .fetch_one(pool)
            .await
        })
        .map_err(sql("start run"))
    }

    /// Records the end of a run.
    pub async fn finish_run(
        &self,
        run: i64,
        status: &str,
        stats: &RunStats,
        error: Option<&str>,
    ) -> Result<(), StoreError> {
        let now = self.db_now_utc().await?;
        on_pool!(self, |pool| sqlx::query(
            "UPDATE audit_runs SET finished_at = $1, status = $2, repos_listed = $3, repos_probed = $4, shards_probed = $5,
             api_requests = $6, resolver_requests = $7, bytes_read = $8, rate_limited = $9, retries = $10, errors = $11,
             invalid_listings = $12, error = $13,
             repos_affected_after = CASE WHEN kind = 'crawl'
                THEN (SELECT CAST(COALESCE(SUM(repos_affected), 0) AS BIGINT) FROM namespace_sums) END,
             bytes_duplicated_after = CASE WHEN kind = 'crawl'
                THEN (SELECT CAST(COALESCE(SUM(misaligned_bytes), 0) AS BIGINT) FROM namespace_sums) END
             WHERE id = $14",
        )
        .bind(&now)
        .bind(status)
        .bind(stats.repos_listed as i64)
        .bind(stats.repos_probed as i64)
        .bind(stats.shards_probed as i64)
        .bind(stats.api_requests as i64)
        .bind(stats.resolver_requests as i64)
        .bind(stats.bytes_read as i64)
        .bind(stats.rate_limited as i64)
        .bind(stats.retries as i64)
        .bind(stats.errors as i64)
        .bind(stats.invalid_listings as i64)
        .bind(error)
        .bind(run)
        .execute(pool)
        .await.map(|done| done.rows_affected()))
        .map_err(sql("finish run"))?;
        Ok(())
    }

    /// Records a listing page in one transaction. Returns, for each repo, whether it needs probing. It does
    /// when its listed commit is missing or not the one last audited to completion, when it was recorded gone,
    /// or with `force`.
    ///
    /// A page is read and written in statements of 500 repos, not two round trips per repo. This makes a
    /// crawl that finds nothing changed faster; see BENCHMARKS.md. The Hub's answer is not trusted to be sane,
    /// so a page may name a repo twice. That repo is recorded as its last entry says, as writing the entries
    /// in turn would leave it.
    pub async fn record_listing(&self, run: i64, repos: &[ListingEntry], force: bool) -> Result<Vec<bool>, StoreError> {
        let unique = super::last_of_each(repos, |r| &r.id);
        let mut known: std::collections::HashMap<String, (Option<String>, String)> =
            std::collections::HashMap::with_capacity(unique.len());
        on_pool!(self, |pool| {
            let mut tx = pool.begin_with(self.begin_write()).await.map_err(sql("begin"))?;
            for batch in unique.chunks(LISTING_BATCH) {
                let mut read = sqlx::QueryBuilder::new("SELECT id, audited_sha, state FROM repos WHERE id IN (");
                let mut ids = read.separated(", ");
                for r in batch {
                    ids.push_bind(&r.id);
                }
                read.push(")");
                let rows: Vec<(String, Option<String>, String)> =
                    read.build_query_as().fetch_all(&mut *tx).await.map_err(sql("read repos"))?;
                known.extend(rows.into_iter().map(|(id, audited, state)| (id, (audited, state))));
                let mut write = sqlx::QueryBuilder::new(
                    "INSERT INTO repos (id, namespace, listed_sha, last_modified, private, gated, disabled,
                       last_listed_run, downloads, likes) ",
                );
                write.push_values(batch, |mut row, r| {
                    row.push_bind(&r.id)
                        .push_bind(&r.namespace)
                        .push_bind(&r.sha)
                        .push_bind(&r.last_modified)
                        .push_bind(r.private)
                        .push_bind(r.gated)
                        .push_bind(r.disabled)
                        .push_bind(run)
                        .push_bind(r.downloads)
                        .push_bind(r.likes);
                });
                write.push(
                    " ON CONFLICT (id) DO UPDATE SET listed_sha = excluded.listed_sha,
                       last_modified = excluded.last_modified, private = excluded.private, gated = excluded.gated,
                       disabled = excluded.disabled, downloads = excluded.downloads, likes = excluded.likes,
                       last_listed_run = CASE WHEN COALESCE(repos.last_listed_run, 0) > excluded.last_listed_run
                                         THEN repos.last_listed_run ELSE excluded.last_listed_run END",
                );
                write.build().execute(&mut *tx).await.map_err(sql("record listing"))?;
            }
            tx.commit().await.map_err(sql("commit listing"))?;
            Ok::<(), StoreError>(())
        })?;
        Ok(repos
            .iter()
            .map(|r| {
                let (audited, state) = known.get(&r.id).map(|(a, s)| (a.as_deref(), Some(s.as_str()))).unzip();
                // A repo recorded gone that a listing shows again is read again, whatever its commit.
                let back = state.flatten() == Some(RepoState::Vanished.as_str());
                force || back || r.sha.is_none() || audited.flatten() != r.sha.as_deref()
            })
            .collect())
    }

    /// Runs after crawl `run` listed every page, and marks `vanished` each repo that the crawl did not list.
    /// It marks only repos last listed by a crawl of the same query, or by a webhook's read. The same query
    /// means the same filters, author and search. Repos already recorded gone or renamed stay as they are.
    /// Returns how many it marked.
    ///
    /// A repo deleted, made private or untagged on the Hub thus leaves the reports and the sums. A narrower
    /// crawl (`--search`, another `--author`) never touches what it did not ask for. Listings only ever move
    /// `last_listed_run` forward, so a crawl that overlaps an older one cannot make the older one's pages look
    /// unlisted.
    pub async fn mark_unlisted(&self, run: i64) -> Result<u64, StoreError> {
        let reason = format!("not in the listing of run {run}: deleted, private to its owner, or no longer tagged");
        let now = crate::time::now_utc();
        on_pool!(self, |pool| {
            let mut tx = pool.begin_with(self.begin_write()).await.map_err(sql("begin"))?;
            // One statement decides which repos, and the history follows exactly those.
            let gone: Vec<String> = sqlx::query_scalar(
                "UPDATE repos SET state = 'vanished', last_error = $2
                 WHERE COALESCE(last_listed_run, 0) < $1 AND state NOT IN ('vanished', 'renamed')
                   AND last_listed_run IN (SELECT id FROM audit_runs
                                           WHERE kind = 'webhook'
                                              OR query = (SELECT query FROM audit_runs WHERE id = $1))
                 RETURNING id",
            )
            .bind(run)
            .bind(&reason)
            .fetch_all(&mut *tx)
            .await
            .map_err(sql("record unlisted"))?;
            for id in &gone {
                record_history!(tx, (id, run, &now), None::<&str>, RepoState::Vanished.as_str(), 0_i64)?;
            }
            tx.commit().await.map_err(sql("commit unlisted"))?;
            Ok(gone.len() as u64)
        })
    }

    /// Has PostgreSQL measure `repos` again at once, after a crawl's listing. A fresh store's first listing
    /// takes `repos` from nothing to 100,000 rows in seconds. Until autovacuum's next analyze, the planner
    /// would still think the table tiny and join it to the sums row by row. The dashboard's reads then pile
    /// up on the database; see BENCHMARKS.md. Does nothing on SQLite, whose queries fix their join order
    /// themselves.
    pub async fn refresh_statistics(&self) -> Result<(), StoreError> {
        if let super::Pool::Postgres(pool) = self.pool() {
            sqlx::query("ANALYZE repos, repo_sums").execute(pool).await.map_err(sql("analyze"))?;
        }
        Ok(())
    }

    /// Forgets repos that the listing shows to be mirrors (this service's or a peer's) but an earlier crawl
    /// recorded as sources. Their shards and rows go, so they count in no total. Returns how many were known.
    pub async fn forget_mirrors(&self, ids: &[String]) -> Result<u64, StoreError> {
        if ids.is_empty() {
            return Ok(0);
        }
        on_pool!(self, |pool| {
            let mut tx = pool.begin_with(self.begin_write()).await.map_err(sql("begin"))?;
            let mut known = 0;
            for id in ids {
                sqlx::query("DELETE FROM shards WHERE repo_id = $1")
                    .bind(id)
                    .execute(&mut *tx)
                    .await
                    .map_err(sql("forget mirror shards"))?;
                known += sqlx::query("DELETE FROM repos WHERE id = $1")
                    .bind(id)
                    .execute(&mut *tx)
                    .await
                    .map_err(sql("forget mirror"))?
                    .rows_affected();
            }
            tx.commit().await.map_err(sql("commit forget"))?;
            Ok(known)
        })
    }

    /// Records the listing entries the checks refused, under their escaped ids, with the reason. A history
    /// row marks each one not already recorded as refused.
    pub async fn record_invalid_listings(&self, run: i64, entries: &[RefusedEntry]) -> Result<(), StoreError> {
        if entries.is_empty() {
            return Ok(());
        }
        let now = crate::time::now_utc();
        on_pool!(self, |pool| {
            let mut tx = pool.begin_with(self.begin_write()).await.map_err(sql("begin"))?;
            for e in entries {
                let previous: Option<String> = sqlx::query_scalar("SELECT state FROM repos WHERE id = $1")
                    .bind(&e.id)
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(sql("read repo"))?;
                sqlx::query(
                    "INSERT INTO repos (id, namespace, state, last_listed_run, last_error) VALUES ($1, $2, 'invalid_listing', $3, $4)
                     ON CONFLICT (id) DO UPDATE SET state = 'invalid_listing', last_listed_run = excluded.last_listed_run,
                       last_error = excluded.last_error",
                )
                .bind(&e.id)
                .bind(&e.namespace)
                .bind(run)
                .bind(&e.reason)
                .execute(&mut *tx)
                .await
                .map_err(sql("record invalid listing"))?;
                if previous.as_deref() != Some(RepoState::InvalidListing.as_str()) {
                    let state = RepoState::InvalidListing.as_str();
                    record_history!(tx, (&e.id, run, &now), None::<&str>, state, 0_i64)?;
                }
            }
            tx.commit().await.map_err(sql("commit invalid listings"))?;
            Ok(())
        })
    }
}

impl ShardRow {
    /// Parses the verdict into its type.
    pub fn verdict(&self) -> Option<Verdict> {
        self.verdict.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::both::stores;

    fn affected(id: &str, sha: &str) -> RepoOutcome {
        let shard = ShardRow {
            repo: id.into(),
            path: "model.safetensors".into(),
            sha: sha.into(),
            size: 1000,
            header_len: Some(10),
            data_start: Some(18),
            data_start_mod8: Some(2),
            tensors: Some(2),
            misaligned_tensors: Some(1),
            misaligned_bytes: Some(500),
            verdict: "header_pad".into(),
            error: None,
            writer: Some("mlx".into()),
        };
        RepoOutcome { id: id.into(), sha: sha.into(), state: RepoState::Ok, shards: vec![shard], error: None }
    }

    /// A complete crawl records as gone what it no longer lists, so a repo deleted on the Hub leaves every
    /// sum. A narrower crawl touches nothing it did not ask for, and a repo listed again is read again.
    #[tokio::test]
    async fn a_complete_crawl_records_what_it_no_longer_lists_as_vanished() {
        for test in stores().await {
            let store = &test.store;
            let first = store.start_run("http://hub.test", "filter=mlx", None).await.unwrap();
            let listed = ["ns/kept", "ns/deleted", "other/deleted"].map(|id| ListingEntry::public(id, "1"));
            store.record_listing(first, &listed, false).await.unwrap();
            for entry in &listed {
                store.record_repo(first, &affected(&entry.id, "1")).await.unwrap();
            }
            assert_eq!(store.totals().await.unwrap().repos_affected, 3);

            // A narrower crawl (another query) lists one repo and marks nothing.
            let narrow = store.start_run("http://hub.test", "filter=mlx&search=kept", None).await.unwrap();
            store.record_listing(narrow, &[ListingEntry::public("ns/kept", "1")], false).await.unwrap();
            assert_eq!(store.mark_unlisted(narrow).await.unwrap(), 0, "other queries' repos are not its business");

            let second = store.start_run("http://hub.test", "filter=mlx", None).await.unwrap();
            store.record_listing(second, &[ListingEntry::public("ns/kept", "1")], false).await.unwrap();
            assert_eq!(store.mark_unlisted(second).await.unwrap(), 2);
            let states: Vec<(String, String)> =
                store.repos().await.unwrap().into_iter().map(|r| (r.id, r.state)).collect();
            for (id, state) in &states {
                assert_eq!(state, if id == "ns/kept" { "ok" } else { "vanished" }, "{id}");
            }
            assert_eq!(store.totals().await.unwrap().repos_affected, 1, "the sums no longer count them");
            let audits = store.repo_audits("ns/deleted").await.unwrap();
            assert!(audits.iter().any(|a| a.state == "vanished" && a.sha.is_none()), "the history says when");
            assert_eq!(store.mark_unlisted(second).await.unwrap(), 0, "once");

            // Listed again at the same commit (made public again): read again, not left gone.
            let third = store.start_run("http://hub.test", "filter=mlx", None).await.unwrap();
            let again = store.record_listing(third, &[ListingEntry::public("ns/deleted", "1")], false).await.unwrap();
            assert_eq!(again, [true]);
            // An older run's late page never moves a repo's listing back.
            store.record_listing(first, &[ListingEntry::public("ns/deleted", "1")], false).await.unwrap();
            assert_eq!(store.mark_unlisted(third).await.unwrap(), 1, "only ns/kept, which the third did not list");
        }
    }

    /// A page longer than one statement's batch names one repo twice, with two commits, since a Hub's answer
    /// is not trusted to be sane. Every repo is recorded, the twice-named one as its last entry says. Each
    /// entry is told whether it needs probing, as when the entries were written in turn.
    #[tokio::test]
    async fn a_page_is_recorded_in_batches_and_a_repo_named_twice_as_its_last_entry_says() {
        for test in stores().await {
            let store = &test.store;
            let run = store.start_run("http://hub.test", "filter=mlx", None).await.unwrap();
            let mut page: Vec<ListingEntry> =
                (0..LISTING_BATCH + 7).map(|i| ListingEntry::public(&format!("ns/r{i:04}"), "1")).collect();
            store.record_listing(run, &page, false).await.unwrap();
            store.record_repo(run, &affected("ns/r0003", "1")).await.unwrap();

            let again = store.start_run("http://hub.test", "filter=mlx", None).await.unwrap();
            page.push(ListingEntry { private: true, ..ListingEntry::public("ns/r0003", "2") });
            page.push(ListingEntry::public("ns/new", "1"));
            let flags = store.record_listing(again, &page, false).await.unwrap();
            assert_eq!(flags.len(), page.len());
            assert!(!flags[3], "audited at its listed commit: no probe");
            assert!(flags[LISTING_BATCH + 7], "named again at another commit: probed");
            assert!(flags[LISTING_BATCH + 8] && flags[0], "new, or never audited: probed");
            let repos = store.repos().await.unwrap();
            assert_eq!(repos.len(), LISTING_BATCH + 8);
            let twice = repos.iter().find(|r| r.id == "ns/r0003").unwrap();
            assert_eq!((twice.listed_sha.as_deref(), twice.private), (Some("2"), true), "the last entry's");
            assert_eq!(store.mark_unlisted(again).await.unwrap(), 0, "every repo is this run's");
        }
    }

    /// The planner learns a listing's size at once rather than at autovacuum's next pass (see
    /// [`Store::refresh_statistics`]). This test checks the mechanism; BENCHMARKS.md records the effect.
    #[tokio::test]
    async fn after_a_listing_postgresql_knows_how_many_repos_there_are() {
        for test in stores().await {
            let store = &test.store;
            let run = store.start_run("http://hub.test", "filter=mlx", None).await.unwrap();
            let listed: Vec<ListingEntry> = (0..2000).map(|i| ListingEntry::public(&format!("ns/r{i}"), "1")).collect();
            store.record_listing(run, &listed, false).await.unwrap();
            store.refresh_statistics().await.unwrap();
            if let crate::store::Pool::Postgres(pool) = store.pool() {
                let tuples: f32 = sqlx::query_scalar("SELECT reltuples FROM pg_class WHERE relname = 'repos'")
                    .fetch_one(pool)
                    .await
                    .unwrap();
                assert!(tuples >= 1900.0, "the planner believes {tuples} repos");
            }
        }
    }
}
