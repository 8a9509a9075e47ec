//! The read side of the store: the rows reports are built from.

use serde::Serialize;

use super::records::ShardRow;
use super::{Store, StoreError, on_pool, sql};

/// One publisher (namespace) in `report --by-publisher`.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct PublisherRow {
    /// The namespace.
    pub namespace: String,
    /// Repos audited (state `ok`).
    pub repos_audited: i64,
    /// Repos with at least one tensor a copying loader duplicates.
    pub repos_affected: i64,
    /// Shards already aligned.
    pub shards_aligned: i64,
    /// Shards fixed by header padding.
    pub shards_header_pad: i64,
    /// Shards that need a reorder.
    pub shards_relayout: i64,
    /// Shards that break the format.
    pub shards_invalid: i64,
    /// Misaligned tensors.
    pub misaligned_tensors: i64,
    /// Bytes a copying loader duplicates.
    pub misaligned_bytes: i64,
}

/// One writer (`__metadata__.format`) in `report --by-writer`.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct WriterRow {
    /// The writer, or `(none)`.
    pub writer: String,
    /// Shards it wrote.
    pub shards: i64,
    /// Of those, shards with misaligned tensors.
    pub shards_affected: i64,
    /// Misaligned tensors.
    pub misaligned_tensors: i64,
    /// Bytes a copying loader duplicates.
    pub misaligned_bytes: i64,
}

/// A repo the repack worker should take (`report --affected`).
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct AffectedRepo {
    /// `namespace/name` (`repo_id` in JSON, as everywhere a repo is named).
    #[serde(rename = "repo_id")]
    pub repo: String,
    /// The namespace.
    pub namespace: String,
    /// The commit audited.
    pub sha: String,
    /// Shards needing header padding.
    pub shards_header_pad: i64,
    /// Shards needing a reorder.
    pub shards_relayout: i64,
    /// Invalid shards (which block a repack).
    pub shards_invalid: i64,
    /// Misaligned tensors.
    pub misaligned_tensors: i64,
    /// Bytes a copying loader duplicates.
    pub misaligned_bytes: i64,
}

/// A repo as the API and the dashboard list it. They list every repo the store knows, audited or not, and
/// show gated, private and disabled repos and invalid listing entries as such. An audited repo has its sums.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct RepoListing {
    /// `namespace/name`, escaped for an invalid listing entry; `repo_id` in JSON, as everywhere.
    #[serde(rename = "repo_id")]
    pub repo: String,
    /// The namespace.
    pub namespace: String,
    /// `ok`, `pending`, `gated`, `disabled`, `vanished`, `moved`, `renamed`, `error` or `invalid_listing`.
    pub state: String,
    /// The commit audited, else the one listed.
    pub sha: Option<String>,
    /// Private (seen through the token's own access).
    pub private: bool,
    /// Gated.
    pub gated: bool,
    /// Disabled.
    pub disabled: bool,
    /// Shards needing header padding.
    pub shards_header_pad: i64,
    /// Shards needing a reorder.
    pub shards_relayout: i64,
    /// Invalid shards.
    pub shards_invalid: i64,
    /// Misaligned tensors.
    pub misaligned_tensors: i64,
    /// Bytes a copying loader duplicates.
    pub misaligned_bytes: i64,
    /// Why it is not audited: the last failure, or the listing entry's fault.
    pub last_error: Option<String>,
}

/// Builds a query for [`RepoListing`] rows with the given condition, as one string known at compile time. The
/// query lists every repo, with its sums when audited.
macro_rules! listing {
    ($rest:literal) => {
        concat!(
            "SELECT r.id AS repo, r.namespace, r.state, COALESCE(r.audited_sha, r.listed_sha) AS sha, r.private,
             r.gated, r.disabled, COALESCE(s.shards_header_pad, 0) AS shards_header_pad,
             COALESCE(s.shards_relayout, 0) AS shards_relayout, COALESCE(s.shards_invalid, 0) AS shards_invalid,
             COALESCE(s.misaligned_tensors, 0) AS misaligned_tensors, COALESCE(s.misaligned_bytes, 0) AS misaligned_bytes,
             r.last_error FROM repos r LEFT JOIN repo_sums s ON s.repo = r.id ",
            $rest
        )
    };
}

/// [`listing!`]'s columns, read from the sums first. For affected repos, this follows the order of the sums'
/// indexes.
macro_rules! listing_from_sums {
    () => {
        "SELECT r.id AS repo, r.namespace, r.state, COALESCE(r.audited_sha, r.listed_sha) AS sha, r.private,
         r.gated, r.disabled, s.shards_header_pad, s.shards_relayout, s.shards_invalid, s.misaligned_tensors,
         s.misaligned_bytes, r.last_error FROM repo_sums s JOIN repos r ON r.id = s.repo"
    };
}

/// Which repos to list, a page at a time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RepoFilter {
    /// Only this namespace.
    pub namespace: Option<String>,
    /// Only affected repos (`Some(true)`), only repos not affected (`Some(false)`), or all.
    pub affected: Option<bool>,
    /// At most this many.
    pub limit: i64,
    /// After skipping this many.
    pub offset: i64,
}

/// Repos per access state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct StateCount {
    /// `ok`, `pending`, `gated`, `disabled`, `vanished`, `moved`, `renamed`, `error` or `invalid_listing`.
    pub state: String,
    /// How many repos.
    pub repos: i64,
}

/// A repository as the store knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct RepoRow {
    /// `namespace/name`.
    pub id: String,
    /// The namespace.
    pub namespace: String,
    /// The commit last listed.
    pub listed_sha: Option<String>,
    /// The commit last audited to completion.
    pub audited_sha: Option<String>,
    /// `pending`, `ok`, `gated`, `disabled`, `vanished`, `moved`, `renamed`, `error` or `invalid_listing`.
    pub state: String,
    /// Private (seen through the token's own access).
    pub private: bool,
    /// Gated.
    pub gated: bool,
    /// Disabled.
    pub disabled: bool,
    /// When it was last audited.
    pub last_audited_at: Option<String>,
    /// The last failure, if any.
    pub last_error: Option<String>,
}

/// Store-wide figures for the dashboard's overview and `/metrics`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct Totals {
    /// Repos audited (state `ok`).
    pub repos_audited: i64,
    /// Of those, repos with duplicated bytes.
    pub repos_affected: i64,
    /// Shards audited.
    pub shards: i64,
    /// Shards per verdict.
    pub shards_aligned: i64,
    /// Shards fixed by header padding.
    pub shards_header_pad: i64,
    /// Shards needing a reorder.
    pub shards_relayout: i64,
    /// Invalid shards.
    pub shards_invalid: i64,
    /// Bytes a copying loader duplicates, Hub-wide.
    pub misaligned_bytes: i64,
    /// Mirrors published.
    pub mirrors_published: i64,
}

/// One point of the dashboard's trend: the Hub-wide figures when a run ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct TrendPoint {
    /// The run.
    pub run_id: i64,
    /// When it ended.
    pub at: String,
    /// Repos a copying loader duplicates bytes of.
    pub repos_affected: i64,
    /// The bytes it duplicates.
    pub bytes_duplicated: i64,
}

/// How far a namespace's affected repos have come.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Progress {
    /// Affected repos with a published, public aligned mirror.
    pub mirrored: i64,
    /// Repos once affected that are not any more, because they were fixed upstream.
    pub fixed_upstream: i64,
}

/// [`RunRow`]'s columns, for the two lists of runs.
macro_rules! run_columns {
    () => {
        "SELECT id, kind, started_at, finished_at, status, started_by, repos_listed, repos_probed, shards_probed,
            api_requests, resolver_requests, bytes_read, rate_limited, errors, invalid_listings, error"
    };
}

/// One audit of one repo, with what started it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct RepoAudit {
    /// The run.
    pub run_id: i64,
    /// When the repo was recorded.
    pub at: String,
    /// The commit audited; none when the repo was recorded gone or its listing entry refused.
    pub sha: Option<String>,
    /// Its access state then.
    pub state: String,
    /// Bytes a copying loader duplicated then.
    pub misaligned_bytes: i64,
    /// `crawl` or `webhook`.
    pub kind: String,
    /// Who started the run (`hubalign audit on HOST`, `the schedule, on replica R`, …) or the event behind a
    /// webhook's run.
    pub started_by: Option<String>,
}

/// An audit run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct RunRow {
    /// Its id.
    pub id: i64,
    /// `crawl` (the whole listing) or `webhook` (one repo a webhook named).
    pub kind: String,
    /// When it started.
    pub started_at: String,
    /// When it ended.
    pub finished_at: Option<String>,
    /// `running`, `finished`, `failed` or `interrupted`.
    pub status: String,
    /// Who started it (`hubalign audit on HOST`, `the schedule, on replica R`, `an administrator, via replica
    /// R`), or the event behind a webhook's run.
    pub started_by: Option<String>,
    /// Repos listed.
    pub repos_listed: i64,
    /// Repos probed.
    pub repos_probed: i64,
    /// Shards probed.
    pub shards_probed: i64,
    /// API requests.
    pub api_requests: i64,
    /// Resolver requests.
    pub resolver_requests: i64,
    /// Bytes read.
    pub bytes_read: i64,
    /// 429s received.
    pub rate_limited: i64,
    /// Repos that failed.
    pub errors: i64,
    /// Listing entries the checks refused.
    pub invalid_listings: i64,
    /// Why it failed or was interrupted.
    pub error: Option<String>,
}

impl Store {
    /// Publishers, most bytes duplicated first.
    pub async fn publishers(&self) -> Result<Vec<PublisherRow>, StoreError> {
        on_pool!(self, |pool| sqlx::query_as(
            "SELECT namespace, repos_audited, repos_affected, shards_aligned, shards_header_pad, shards_relayout,
                shards_invalid, misaligned_tensors, misaligned_bytes
             FROM namespace_sums ORDER BY misaligned_bytes DESC, namespace",
        )
        .fetch_all(pool)
        .await)
        .map_err(sql("publishers"))
    }

    /// Writers, most bytes duplicated first.
    pub async fn writers(&self) -> Result<Vec<WriterRow>, StoreError> {
        on_pool!(self, |pool| sqlx::query_as(
            "SELECT COALESCE(s.writer, '(none)') AS writer, COUNT(*) AS shards,
                COUNT(*) FILTER (WHERE s.misaligned_bytes > 0) AS shards_affected,
                CAST(COALESCE(SUM(s.misaligned_tensors), 0) AS BIGINT) AS misaligned_tensors,
                CAST(COALESCE(SUM(s.misaligned_bytes), 0) AS BIGINT) AS misaligned_bytes
             FROM shards s JOIN repos r ON r.id = s.repo_id WHERE r.state = 'ok'
             GROUP BY 1 ORDER BY misaligned_bytes DESC, writer",
        )
        .fetch_all(pool)
        .await)
        .map_err(sql("writers"))
    }

    /// Returns the repos with tensors a copying loader duplicates, at least `min_bytes` of them, most first.
    pub async fn affected(&self, min_bytes: i64) -> Result<Vec<AffectedRepo>, StoreError> {
        on_pool!(self, |pool| sqlx::query_as(
            "SELECT repo, namespace, sha, shards_header_pad, shards_relayout, shards_invalid, misaligned_tensors, misaligned_bytes
             FROM repo_sums WHERE misaligned_bytes > 0 AND misaligned_bytes >= $1 ORDER BY misaligned_bytes DESC, repo",
        )
        .bind(min_bytes)
        .fetch_all(pool)
        .await)
        .map_err(sql("affected repos"))
    }

    /// Returns every shard of one repo, by path.
    pub async fn repo_shards(&self, repo: &str) -> Result<Vec<ShardRow>, StoreError> {
        on_pool!(self, |pool| sqlx::query_as("SELECT * FROM shards WHERE repo_id = $1 ORDER BY path")
            .bind(repo)
            .fetch_all(pool)
            .await)
        .map_err(sql("repo shards"))
    }

    /// Returns every shard, by repo and path.
    pub async fn all_shards(&self) -> Result<Vec<ShardRow>, StoreError> {
        on_pool!(self, |pool| sqlx::query_as("SELECT * FROM shards ORDER BY repo_id, path").fetch_all(pool).await)
            .map_err(sql("shards"))
    }

    /// Counts repos per state (`pending` for listed but never audited).
    pub async fn states(&self) -> Result<Vec<StateCount>, StoreError> {
        on_pool!(self, |pool| sqlx::query_as(
            "SELECT state, COUNT(*) AS repos FROM repos GROUP BY state ORDER BY state"
        )
        .fetch_all(pool)
        .await)
        .map_err(sql("states"))
    }

    /// Runs one trivial query to show that the database is open and answering, for health checks.
    pub async fn ping(&self) -> Result<(), StoreError> {
        on_pool!(self, |pool| sqlx::query("SELECT 1").execute(pool).await.map(|done| done.rows_affected()))
            .map_err(sql("ping"))?;
        Ok(())
    }

    /// Returns store-wide figures.
    pub async fn totals(&self) -> Result<Totals, StoreError> {
        on_pool!(self, |pool| sqlx::query_as(
            "SELECT CAST(COALESCE(SUM(repos_audited), 0) AS BIGINT) AS repos_audited, CAST(COALESCE(SUM(repos_affected), 0) AS BIGINT) AS repos_affected,
                CAST(COALESCE(SUM(shards_aligned + shards_header_pad + shards_relayout + shards_invalid), 0) AS BIGINT) AS shards,
                CAST(COALESCE(SUM(shards_aligned), 0) AS BIGINT) AS shards_aligned, CAST(COALESCE(SUM(shards_header_pad), 0) AS BIGINT) AS shards_header_pad,
                CAST(COALESCE(SUM(shards_relayout), 0) AS BIGINT) AS shards_relayout, CAST(COALESCE(SUM(shards_invalid), 0) AS BIGINT) AS shards_invalid,
                CAST(COALESCE(SUM(misaligned_bytes), 0) AS BIGINT) AS misaligned_bytes,
                (SELECT CAST(COALESCE(SUM(jobs), 0) AS BIGINT) FROM job_sums WHERE state = 'published') AS mirrors_published
             FROM namespace_sums",
        )
        .fetch_one(pool)
        .await)
        .map_err(sql("totals"))
    }

    /// Returns the newest `limit` runs' figures, oldest first.
    pub async fn trend(&self, limit: i64) -> Result<Vec<TrendPoint>, StoreError> {
        let mut points: Vec<TrendPoint> = on_pool!(self, |pool| sqlx::query_as(
            "SELECT id AS run_id, COALESCE(finished_at, started_at) AS at, repos_affected_after AS repos_affected,
                bytes_duplicated_after AS bytes_duplicated
             FROM audit_runs WHERE repos_affected_after IS NOT NULL ORDER BY id DESC LIMIT $1",
        )
        .bind(limit)
        .fetch_all(pool)
        .await)
        .map_err(sql("trend"))?;
        points.reverse();
        Ok(points)
    }

    /// Counts, per namespace, the affected repos with a published public mirror and the repos fixed upstream.
    pub async fn progress(&self) -> Result<std::collections::HashMap<String, Progress>, StoreError> {
        // CROSS JOIN keeps SQLite's join order: from the few mirrors, and the few repos once affected, to their
        // sums. Starting from every repo's sums is far slower; see BENCHMARKS.md. The join's condition is in
        // WHERE, which PostgreSQL accepts too, since its CROSS JOIN takes no ON.
        let mirrored: Vec<(String, i64)> = on_pool!(self, |pool| sqlx::query_as(
            "SELECT s.namespace, COUNT(*) FROM mirrors m CROSS JOIN repo_sums s
             WHERE s.repo = m.source_repo AND s.misaligned_bytes > 0 AND m.private = FALSE
               AND EXISTS (SELECT 1 FROM jobs j WHERE j.repo_id = s.repo AND j.state = 'published')
             GROUP BY s.namespace",
        )
        .fetch_all(pool)
        .await)
        .map_err(sql("mirrored per namespace"))?;
        let fixed: Vec<(String, i64)> = on_pool!(self, |pool| sqlx::query_as(
            "SELECT r.namespace, COUNT(*) FROM repos r CROSS JOIN repo_sums s
             WHERE s.repo = r.id AND r.was_affected = 1 AND s.misaligned_bytes = 0 GROUP BY r.namespace",
        )
        .fetch_all(pool)
        .await)
        .map_err(sql("fixed upstream per namespace"))?;
        let mut out: std::collections::HashMap<String, Progress> = std::collections::HashMap::new();
        for (ns, n) in mirrored {
            out.entry(ns).or_default().mirrored = n;
        }
        for (ns, n) in fixed {
            out.entry(ns).or_default().fixed_upstream = n;
        }
        Ok(out)
    }

    /// Sums the bytes a copying loader duplicates in repos that have a published public aligned mirror.
    pub async fn mirrored_bytes(&self) -> Result<i64, StoreError> {
        on_pool!(self, |pool| {
            sqlx::query_scalar(
                "SELECT CAST(COALESCE(SUM(s.misaligned_bytes), 0) AS BIGINT) FROM mirrors m CROSS JOIN repo_sums s
             WHERE s.repo = m.source_repo AND s.misaligned_bytes > 0 AND m.private = FALSE
               AND EXISTS (SELECT 1 FROM jobs j WHERE j.repo_id = s.repo AND j.state = 'published')",
            )
            .fetch_one(pool)
            .await
        })
        .map_err(sql("mirrored bytes"))
    }

    /// Returns repos by `filter`, most bytes duplicated first, then by id. It reads them in two parts, each in
    /// the order of an index. The affected repos come from the sums first. The rest (nothing duplicated, or
    /// not audited) follow by id. No page thus sorts a whole namespace.
    pub async fn repo_listing(&self, filter: &RepoFilter) -> Result<Vec<RepoListing>, StoreError> {
        let ns = filter.namespace.as_deref();
        let affected = match filter.affected {
            Some(false) => 0,
            _ => self.affected_count(ns).await?,
        };
        let mut page = Vec::new();
        if filter.affected != Some(false) && filter.offset < affected {
            // Take the page's ids from the index alone, then their rows, as for a namespace's page.
            let text = format!(
                "{} WHERE s.repo IN (SELECT repo FROM repo_sums WHERE misaligned_bytes > 0 {}
                   ORDER BY misaligned_bytes DESC, repo LIMIT $1 OFFSET $2)
                 ORDER BY s.misaligned_bytes DESC, s.repo",
                listing_from_sums!(),
                if ns.is_some() { "AND namespace = $3" } else { "" }
            );
            page = self.listing_part(text, ns, filter.limit, filter.offset).await?;
        }
        let wanted = filter.limit - page.len() as i64;
        if filter.affected != Some(true) && wanted > 0 {
            let text = format!(
                "{} WHERE COALESCE(s.misaligned_bytes, 0) = 0 {} ORDER BY r.id LIMIT $1 OFFSET $2",
                listing!(""),
                if ns.is_some() { "AND r.namespace = $3" } else { "" }
            );
            page.extend(self.listing_part(text, ns, wanted, (filter.offset - affected).max(0)).await?);
        }
        Ok(page)
    }

    /// Counts affected repos, of one namespace or all, from the namespaces' sums. Counting them in the repos'
    /// sums is slow for a large namespace; see BENCHMARKS.md.
    async fn affected_count(&self, namespace: Option<&str>) -> Result<i64, StoreError> {
        let text = match namespace {
            Some(_) => {
                "SELECT CAST(COALESCE(SUM(repos_affected), 0) AS BIGINT) FROM namespace_sums WHERE namespace = $1"
            }
            None => "SELECT CAST(COALESCE(SUM(repos_affected), 0) AS BIGINT) FROM namespace_sums",
        };
        on_pool!(self, |pool| sqlx::query_scalar(text).bind(namespace).fetch_one(pool).await)
            .map_err(sql("affected repos count"))
    }

    /// Reads one part of [`Store::repo_listing`]. `text` takes the limit, the offset and, if given, the
    /// namespace.
    async fn listing_part(
        &self,
        text: String,
        namespace: Option<&str>,
        limit: i64,
        offset: i64,
    ) -> Result<Vec<RepoListing>, StoreError> {
        // One of the texts built above from constants; every value is bound.
        on_pool!(self, |pool| {
            let query = sqlx::query_as(sqlx::AssertSqlSafe(text.clone())).bind(limit).bind(offset);
            match namespace {
                Some(ns) => query.bind(ns).fetch_all(pool).await,
                None => query.fetch_all(pool).await,
            }
        })
        .map_err(sql("repo listing"))
    }

    /// Returns one repo as the store knows it, audited or not.
    pub async fn repo(&self, id: &str) -> Result<Option<RepoListing>, StoreError> {
        on_pool!(self, |pool| sqlx::query_as(listing!("WHERE r.id = $1")).bind(id).fetch_optional(pool).await)
            .map_err(sql("repo"))
    }

    /// Whether the store knows any repo of `namespace`.
    pub async fn has_namespace(&self, namespace: &str) -> Result<bool, StoreError> {
        let found: Option<String> =
            on_pool!(self, |pool| sqlx::query_scalar("SELECT namespace FROM repos WHERE namespace = $1 LIMIT 1")
                .bind(namespace)
                .fetch_optional(pool)
                .await)
            .map_err(sql("namespace"))?;
        Ok(found.is_some())
    }

    /// Returns one namespace's repos that are not audited, by id: gated, private to others, disabled, failed,
    /// or invalid listing entries.
    pub async fn namespace_unaudited(&self, namespace: &str) -> Result<Vec<RepoListing>, StoreError> {
        on_pool!(self, |pool| sqlx::query_as(listing!(
            // Write `state != 'ok'` as two ranges, and order by an expression. The (namespace, state) index then
            // finds the few such repos, and they are sorted. Otherwise the whole namespace would be walked in
            // id order for them; see BENCHMARKS.md.
            "WHERE r.namespace = $1 AND (r.state < 'ok' OR r.state > 'ok') ORDER BY r.id || '' LIMIT 1000"
        ))
        .bind(namespace)
        .fetch_all(pool)
        .await)
        .map_err(sql("namespace's repos not audited"))
    }

    /// Returns one namespace's audited repos, most bytes duplicated first, a page at a time.
    pub async fn namespace_repos(
        &self,
        namespace: &str,
        limit: i64,
        offset: i64,
    ) -> Result<Vec<AffectedRepo>, StoreError> {
        on_pool!(self, |pool| sqlx::query_as(
            // Take the page's ids first, from the index alone, then their rows. A deep page then skips thousands
            // of index entries, not thousands of rows.
            "SELECT repo, namespace, sha, shards_header_pad, shards_relayout, shards_invalid, misaligned_tensors, misaligned_bytes
             FROM repo_sums WHERE repo IN (
                SELECT repo FROM repo_sums WHERE namespace = $1 ORDER BY misaligned_bytes DESC, repo LIMIT $2 OFFSET $3)
             ORDER BY misaligned_bytes DESC, repo",
        )
        .bind(namespace)
        .bind(limit)
        .bind(offset)
        .fetch_all(pool)
        .await)
        .map_err(sql("namespace repos"))
    }

    /// Returns every repository, by id.
    pub async fn repos(&self) -> Result<Vec<RepoRow>, StoreError> {
        on_pool!(self, |pool| {
            sqlx::query_as(
            "SELECT id, namespace, listed_sha, audited_sha, state, private, gated, disabled, last_audited_at, last_error
             FROM repos ORDER BY id",
        )
        .fetch_all(pool)
        .await
        })
        .map_err(sql("repos"))
    }

    /// Counts runs per status.
    pub async fn run_counts(&self) -> Result<Vec<(String, i64)>, StoreError> {
        on_pool!(self, |pool| sqlx::query_as(
            "SELECT status, COUNT(*) FROM audit_runs WHERE kind = 'crawl' GROUP BY status ORDER BY status"
        )
        .fetch_all(pool)
        .await)
        .map_err(sql("run counts"))
    }

    /// Returns when the newest finished crawl ended, in Unix seconds.
    pub async fn last_finished_run_at(&self) -> Result<Option<i64>, StoreError> {
        let at: Option<String> = on_pool!(self, |pool| {
            sqlx::query_scalar(
            "SELECT finished_at FROM audit_runs WHERE status = 'finished' AND kind = 'crawl' AND finished_at IS NOT NULL
             ORDER BY id DESC LIMIT 1",
        )
        .fetch_optional(pool)
        .await
        })
        .map_err(sql("last finished run"))?;
        Ok(at.as_deref().and_then(crate::time::parse_utc))
    }

    /// Returns runs, newest first, `limit` of them after `offset`.
    pub async fn runs_page(&self, limit: i64, offset: i64) -> Result<Vec<RunRow>, StoreError> {
        on_pool!(self, |pool| sqlx::query_as(concat!(
            run_columns!(),
            " FROM audit_runs ORDER BY id DESC LIMIT $1 OFFSET $2"
        ),)
        .bind(limit)
        .bind(offset)
        .fetch_all(pool)
        .await)
        .map_err(sql("runs"))
    }

    /// Returns one repo's audits, newest first (at most 50), with what started each.
    pub async fn repo_audits(&self, repo: &str) -> Result<Vec<RepoAudit>, StoreError> {
        on_pool!(self, |pool| sqlx::query_as(
            "SELECT h.run_id, h.at, h.sha, h.state, h.misaligned_bytes, r.kind, r.started_by
             FROM repo_history h JOIN audit_runs r ON r.id = h.run_id
             WHERE h.repo_id = $1 ORDER BY h.id DESC LIMIT 50",
        )
        .bind(repo)
        .fetch_all(pool)
        .await)
        .map_err(sql("repo audits"))
    }

    /// Returns the webhook lag of the newest publication a webhook led to, in seconds. The lag runs from the
    /// arrival of the payload whose re-read recorded the commit to the publication of its mirror. The
    /// payload's wait in the queue counts. Returns `None` before the first such publication.
    pub async fn last_webhook_lag(&self) -> Result<Option<i64>, StoreError> {
        // Walk publications newest first (`jobs_published`) until one whose commit a webhook's run read. No
        // publication before the first webhook run can be one, so a store without webhook runs reads nothing.
        let times: Option<(Option<String>, String)> = on_pool!(self, |pool| sqlx::query_as(
            "SELECT j.finished_at,
                    (SELECT COALESCE(r.requested_at, r.started_at) FROM repo_history h JOIN audit_runs r ON r.id = h.run_id
                     WHERE h.repo_id = j.repo_id AND h.sha = j.source_sha AND r.kind = 'webhook'
                     ORDER BY r.id DESC LIMIT 1) AS arrived
             FROM jobs j
             WHERE j.state = 'published'
               AND j.finished_at >= (SELECT started_at FROM audit_runs WHERE kind = 'webhook' ORDER BY id LIMIT 1)
               AND EXISTS (SELECT 1 FROM repo_history h JOIN audit_runs r ON r.id = h.run_id
                           WHERE h.repo_id = j.repo_id AND h.sha = j.source_sha AND r.kind = 'webhook')
             ORDER BY j.finished_at DESC, j.id DESC LIMIT 1",
        )
        .fetch_optional(pool)
        .await)
        .map_err(sql("webhook lag"))?;
        Ok(times.and_then(|(published, started)| {
            Some(crate::time::parse_utc(&published?)? - crate::time::parse_utc(&started)?)
        }))
    }

    /// Returns the newest crawls, newest first, leaving out webhooks' runs of one repo.
    pub async fn runs(&self, limit: i64) -> Result<Vec<RunRow>, StoreError> {
        on_pool!(self, |pool| sqlx::query_as(concat!(
            run_columns!(),
            " FROM audit_runs WHERE kind = 'crawl' ORDER BY id DESC LIMIT $1"
        ),)
        .bind(limit)
        .fetch_all(pool)
        .await)
        .map_err(sql("crawls"))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::store::{ListingEntry, RepoOutcome, RepoState, RunKind, RunStats};

    pub(crate) fn shard(repo: &str, path: &str, verdict: &str, bad: i64) -> ShardRow {
        ShardRow {
            repo: repo.into(),
            path: path.into(),
            sha: "s".into(),
            size: 100,
            header_len: Some(10),
            data_start: Some(18),
            data_start_mod8: Some(2),
            tensors: Some(3),
            misaligned_tensors: Some(bad),
            misaligned_bytes: Some(bad * 1000),
            verdict: verdict.into(),
            error: None,
            writer: None,
        }
    }

    /// Rows as (key, integer columns).
    async fn rows(store: &Store, query: String) -> Vec<(String, Vec<i64>)> {
        use sqlx::Row;
        on_pool!(store, |pool| {
            let rows = sqlx::query(sqlx::AssertSqlSafe(query)).fetch_all(pool).await.unwrap();
            rows.iter().map(|r| (r.get(0), (1..r.len()).map(|i| r.get::<i64, _>(i)).collect())).collect()
        })
    }

    const SUMS: &str =
        "shards_aligned, shards_header_pad, shards_relayout, shards_invalid, misaligned_tensors, misaligned_bytes";

    /// Asserts that the trigger-kept tables equal the live aggregates they stand for. Returns the kept
    /// per-repo rows.
    pub(crate) async fn assert_sums_match(store: &Store, when: &str) -> Vec<(String, Vec<i64>)> {
        let kept = rows(store, format!("SELECT repo, {SUMS} FROM repo_sums ORDER BY repo")).await;
        let live = rows(store, format!("SELECT repo, {SUMS} FROM repo_sums_live ORDER BY repo")).await;
        assert_eq!(kept, live, "{when} on {:?}", store.backend());
        let by_ns = rows(
            store,
            format!("SELECT namespace, repos_audited, repos_affected, {SUMS} FROM namespace_sums ORDER BY namespace"),
        )
        .await;
        let grouped = rows(
            store,
            "SELECT namespace, COUNT(*), CAST(SUM(CASE WHEN misaligned_bytes > 0 THEN 1 ELSE 0 END) AS BIGINT),
               CAST(SUM(shards_aligned) AS BIGINT), CAST(SUM(shards_header_pad) AS BIGINT),
               CAST(SUM(shards_relayout) AS BIGINT), CAST(SUM(shards_invalid) AS BIGINT),
               CAST(SUM(misaligned_tensors) AS BIGINT), CAST(SUM(misaligned_bytes) AS BIGINT)
             FROM repo_sums_live GROUP BY namespace ORDER BY namespace"
                .to_owned(),
        )
        .await;
        assert_eq!(by_ns, grouped, "{when} on {:?}", store.backend());
        kept
    }

    /// The trigger-kept tables always equal the aggregates they stand for, whatever audits did.
    #[tokio::test]
    async fn trigger_kept_sums_match_the_live_aggregates() {
        for test in crate::store::both::stores().await {
            trigger_kept_sums_match_on(&test.store).await;
        }
    }

    async fn trigger_kept_sums_match_on(store: &Store) {
        let run = store.start_run("test", "{}", None).await.unwrap();
        let states = [RepoState::Ok, RepoState::Ok, RepoState::Ok, RepoState::Error, RepoState::Vanished];
        let verdicts = ["aligned", "header_pad", "relayout", "invalid"];
        let mut seed = 7u64;
        let mut next = |n: u64| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) % n
        };
        for round in 0..6 {
            let listed: Vec<ListingEntry> =
                (0..30).map(|i| ListingEntry::public(&format!("ns{}/r{i}", i % 4), &format!("{round}"))).collect();
            store.record_listing(run, &listed, false).await.unwrap();
            for r in &listed {
                if next(3) == 0 {
                    continue;
                }
                let state = states[next(states.len() as u64) as usize];
                let mut shards = Vec::new();
                for k in 0..next(4) {
                    let verdict = verdicts[next(4) as usize];
                    shards.push(shard(&r.id, &format!("m{k}.safetensors"), verdict, next(3) as i64));
                }
                let outcome = RepoOutcome { id: r.id.clone(), sha: format!("{round}"), state, shards, error: None };
                store.record_repo(run, &outcome).await.unwrap();
            }
            assert_sums_match(store, &format!("round {round}")).await;
        }
        assert!(store.totals().await.unwrap().repos_audited > 0, "the sequence audited something");
        assert_listing_pages_follow_one_sort(store).await;
    }

    /// The two-part listing, page by page, matches the one sort it stands for: most bytes first, then by id,
    /// audited or not. This holds for each filter and page size.
    async fn assert_listing_pages_follow_one_sort(store: &Store) {
        for namespace in [None, Some("ns1")] {
            for affected in [None, Some(true), Some(false)] {
                let mut conditions = vec!["1 = 1".to_owned()];
                conditions.extend(namespace.map(|ns| format!("r.namespace = '{ns}'")));
                conditions.extend(
                    affected.map(|a| format!("COALESCE(s.misaligned_bytes, 0) {} 0", if a { ">" } else { "=" })),
                );
                let sorted = rows(
                    store,
                    format!(
                        "SELECT r.id, COALESCE(s.misaligned_bytes, 0) FROM repos r LEFT JOIN repo_sums s ON s.repo = r.id
                         WHERE {} ORDER BY 2 DESC, r.id",
                        conditions.join(" AND ")
                    ),
                )
                .await;
                let want: Vec<String> = sorted.into_iter().map(|(id, _)| id).collect();
                assert!(!want.is_empty() || affected == Some(true), "{namespace:?} {affected:?}");
                for limit in [1, 3, 7, 100] {
                    let mut got = Vec::new();
                    for offset in (0..).step_by(limit) {
                        let filter = RepoFilter {
                            namespace: namespace.map(str::to_owned),
                            affected,
                            limit: limit as i64,
                            offset: i64::from(offset),
                        };
                        let page = store.repo_listing(&filter).await.unwrap();
                        assert!(page.len() <= limit);
                        if page.is_empty() {
                            break;
                        }
                        got.extend(page.into_iter().map(|r| r.repo));
                    }
                    assert_eq!(got, want, "{namespace:?} {affected:?} by {limit} on {:?}", store.backend());
                }
            }
        }
    }

    /// Eight writers at once, on both backends, audit repos of the same namespaces, some of them the same
    /// repos. The kept sums still equal the live aggregates.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn the_sums_stay_exact_under_concurrent_writers() {
        for test in crate::store::both::stores().await {
            let store = test.store;
            let run = store.start_run("test", "{}", None).await.unwrap();
            let listed: Vec<ListingEntry> =
                (0..40).map(|i| ListingEntry::public(&format!("ns{}/r{i}", i % 3), "1")).collect();
            store.record_listing(run, &listed, false).await.unwrap();
            let mut writers = tokio::task::JoinSet::new();
            for w in 0..8u64 {
                let store = store.clone();
                writers.spawn(async move {
                    for round in 0..6u64 {
                        // Writer w takes repos w, w+5, w+10 …. Neighbours overlap, so two writers also write the
                        // same repo at once.
                        for i in (w % 5..40).step_by(5) {
                            let id = format!("ns{}/r{i}", i % 3);
                            let bad = ((i + w + round) % 3) as i64;
                            let state = if (i + round) % 7 == 0 { RepoState::Vanished } else { RepoState::Ok };
                            let shards = if state == RepoState::Ok {
                                let verdict = if bad > 0 { "relayout" } else { "aligned" };
                                (0..=((i + round) % 3))
                                    .map(|k| shard(&id, &format!("m{k}.safetensors"), verdict, bad))
                                    .collect()
                            } else {
                                vec![]
                            };
                            let outcome =
                                RepoOutcome { id: id.clone(), sha: format!("{round}"), state, shards, error: None };
                            store.record_repo(run, &outcome).await.unwrap();
                        }
                    }
                });
            }
            while let Some(done) = writers.join_next().await {
                done.unwrap();
            }
            let kept = assert_sums_match(&store, "after the concurrent writers").await;
            assert!(!kept.is_empty());
        }
    }

    fn outcome(id: &str, sha: &str, bad: i64) -> RepoOutcome {
        let verdict = if bad > 0 { "header_pad" } else { "aligned" };
        let shard = ShardRow { sha: sha.into(), ..shard(id, "model.safetensors", verdict, bad) };
        RepoOutcome { id: id.into(), sha: sha.into(), state: RepoState::Ok, shards: vec![shard], error: None }
    }

    /// A repo that stops being affected counts as fixed upstream. Each ended run leaves a point of the trend
    /// with the figures it ended with.
    #[tokio::test]
    async fn fixed_upstream_and_the_trend_follow_the_audits() {
        for test in crate::store::both::stores().await {
            fixed_upstream_and_the_trend_on(&test.store).await;
        }
    }

    async fn fixed_upstream_and_the_trend_on(store: &Store) {
        let first = store.start_run("test", "{}", None).await.unwrap();
        let listed = [ListingEntry::public("ns/a", "1"), ListingEntry::public("ns/b", "1")];
        store.record_listing(first, &listed, false).await.unwrap();
        store.record_repo(first, &outcome("ns/a", "1", 2)).await.unwrap();
        store.record_repo(first, &outcome("ns/b", "1", 3)).await.unwrap();
        store.finish_run(first, "finished", &RunStats::default(), None).await.unwrap();
        let second = store.start_run("test", "{}", None).await.unwrap();
        store.record_repo(second, &outcome("ns/a", "2", 0)).await.unwrap();
        store.finish_run(second, "finished", &RunStats::default(), None).await.unwrap();

        let progress = store.progress().await.unwrap();
        assert_eq!(progress["ns"], Progress { mirrored: 0, fixed_upstream: 1 });
        let trend = store.trend(60).await.unwrap();
        let figures: Vec<(i64, i64)> = trend.iter().map(|p| (p.repos_affected, p.bytes_duplicated)).collect();
        assert_eq!(figures, [(2, 5000), (1, 3000)]);

        // The SQLite migration fills in runs recorded before it from repo_history, with the same figures. No
        // PostgreSQL store predates the trend.
        let crate::store::Pool::Sqlite(pool) = store.pool() else { return };
        let migration = include_str!("../../migrations/sqlite/20261201160000_progress.sql");
        let backfill = migration
            .split(';')
            .map(|stmt| stmt.lines().filter(|l| !l.trim_start().starts_with("--")).collect::<Vec<_>>().join("\n"))
            .find(|stmt| stmt.trim_start().starts_with("UPDATE audit_runs"))
            .unwrap();
        sqlx::query("UPDATE audit_runs SET repos_affected_after = NULL, bytes_duplicated_after = NULL")
            .execute(pool)
            .await
            .unwrap();
        sqlx::query(sqlx::AssertSqlSafe(backfill)).execute(pool).await.unwrap();
        let again: Vec<(i64, i64)> =
            store.trend(60).await.unwrap().iter().map(|p| (p.repos_affected, p.bytes_duplicated)).collect();
        assert_eq!(again, figures);
    }

    /// The webhook lag counts from the payload's arrival (its wait in the queue included), not from the start
    /// of its re-read.
    #[tokio::test]
    async fn the_webhook_lag_counts_from_the_payloads_arrival() {
        for test in crate::store::both::stores().await {
            let store = &test.store;
            assert_eq!(store.last_webhook_lag().await.unwrap(), None);
            let arrived = Some("2026-12-02T00:00:00Z");
            let run = store.start_run_of(RunKind::Webhook, "test", "ns/a", Some("webhook: update"), arrived).await;
            let run = run.unwrap();
            store.record_listing(run, &[ListingEntry::public("ns/a", "1")], true).await.unwrap();
            store.record_repo(run, &outcome("ns/a", "1", 2)).await.unwrap();
            store.finish_run(run, "finished", &RunStats::default(), None).await.unwrap();
            let job = store.job_for("ns/a", "1", crate::job::VerifyDevice::Cpu).await.unwrap();
            on_pool!(store, |pool| {
                sqlx::query("UPDATE audit_runs SET started_at = '2026-12-02T00:00:20Z' WHERE id = $1")
                    .bind(run)
                    .execute(pool)
                    .await
                    .unwrap();
                sqlx::query("UPDATE jobs SET state = 'published', finished_at = '2026-12-02T00:01:05Z' WHERE id = $1")
                    .bind(job.id)
                    .execute(pool)
                    .await
                    .unwrap();
            });
            assert_eq!(store.last_webhook_lag().await.unwrap(), Some(65), "{:?}", store.backend());

            // A newer publication a crawl led to is passed over: the lag is still the webhook's.
            let crawl = store.start_run("test", "{}", None).await.unwrap();
            store.record_listing(crawl, &[ListingEntry::public("ns/b", "1")], true).await.unwrap();
            store.record_repo(crawl, &outcome("ns/b", "1", 2)).await.unwrap();
            store.finish_run(crawl, "finished", &RunStats::default(), None).await.unwrap();
            let job = store.job_for("ns/b", "1", crate::job::VerifyDevice::Cpu).await.unwrap();
            on_pool!(store, |pool| sqlx::query(
                "UPDATE jobs SET state = 'published', finished_at = '2026-12-02T00:09:00Z' WHERE id = $1"
            )
            .bind(job.id)
            .execute(pool)
            .await
            .map(|_| ()))
            .unwrap();
            assert_eq!(store.last_webhook_lag().await.unwrap(), Some(65), "{:?}", store.backend());
        }
    }
}
