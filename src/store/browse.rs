//! Reads what the dashboard's browsing needs beyond the sums. It lists every namespace a page at a time,
//! searches names, and finds the mirror and newest job of each repo on a page.

use serde::Serialize;

use super::{Store, StoreError, on_pool, sql};

/// The most names a search answers with, of each kind.
pub(crate) const SEARCH_LIMIT: i64 = 50;

/// One namespace as the list of every namespace shows it, affected or not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct NamespaceRow {
    pub namespace: String,
    /// Repos the store knows in it, audited or not.
    pub repos_listed: i64,
    pub repos_audited: i64,
    /// Repos with tensors a copying loader duplicates.
    pub repos_affected: i64,
    /// Bytes a copying loader duplicates.
    pub misaligned_bytes: i64,
}

/// A repo a search found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct FoundRepo {
    /// `namespace/name`.
    pub repo_id: String,
    /// Its audit state (`ok`, `gated`, …; `pending` before its first audit).
    pub state: String,
    /// Bytes a copying loader duplicates, when audited.
    pub misaligned_bytes: Option<i64>,
    /// Its aligned mirror, if one was published.
    pub mirror: Option<String>,
}

/// What a search found: namespaces and repos whose names hold the words, by name, at most [`SEARCH_LIMIT`]
/// of each. Names match case-insensitively, as the Hub treats them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SearchHits {
    pub namespaces: Vec<String>,
    pub repos: Vec<FoundRepo>,
}

/// A repo's mirror and newest job, for a row of the namespace page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct RepoLinks {
    /// `namespace/name`.
    pub repo_id: String,
    /// Its aligned mirror, if one was published.
    pub mirror: Option<String>,
    /// Why the mirror was made private after publication, if it was.
    pub mirror_hidden: Option<String>,
    /// Its newest repack job.
    pub job_id: Option<i64>,
    /// That job's state.
    pub job_state: Option<String>,
    /// That job's failure kind. A queued job with `needs_operator` is held.
    pub job_failure_kind: Option<String>,
}

/// The `LIKE … ESCAPE` character. It is not the backslash, because PostgreSQL makes the backslash's meaning
/// in a string literal depend on a setting (`standard_conforming_strings`).
const LIKE_ESCAPE: char = '!';

/// Turns `words` into a lower-cased `LIKE` pattern that matches names holding them anywhere. The pattern
/// takes `%`, `_` and the escape character itself literally.
fn contains_pattern(words: &str) -> String {
    let mut pattern = String::from("%");
    for c in words.trim().to_lowercase().chars() {
        if matches!(c, '%' | '_' | LIKE_ESCAPE) {
            pattern.push(LIKE_ESCAPE);
        }
        pattern.push(c);
    }
    pattern.push('%');
    pattern
}

impl Store {
    /// Returns every namespace the store knows, by name in the backend's collation, `limit` of them after
    /// `offset`. This is the way to the page of a namespace none of whose repos is affected.
    pub async fn namespaces_page(&self, limit: i64, offset: i64) -> Result<Vec<NamespaceRow>, StoreError> {
        on_pool!(self, |pool| sqlx::query_as(
            // Take the page's namespaces from the (namespace, state) index, then their sums.
            "SELECT p.namespace, p.repos_listed, COALESCE(n.repos_audited, 0) AS repos_audited,
                COALESCE(n.repos_affected, 0) AS repos_affected, COALESCE(n.misaligned_bytes, 0) AS misaligned_bytes
             FROM (SELECT namespace, COUNT(*) AS repos_listed FROM repos GROUP BY namespace
                   ORDER BY namespace LIMIT $1 OFFSET $2) p
             LEFT JOIN namespace_sums n ON n.namespace = p.namespace
             ORDER BY p.namespace",
        )
        .bind(limit)
        .bind(offset)
        .fetch_all(pool)
        .await)
        .map_err(sql("namespaces"))
    }

    /// Counts the namespaces the store knows.
    pub async fn namespace_count(&self) -> Result<i64, StoreError> {
        on_pool!(self, |pool| sqlx::query_scalar("SELECT COUNT(*) FROM (SELECT DISTINCT namespace FROM repos) AS n")
            .fetch_one(pool)
            .await)
        .map_err(sql("namespace count"))
    }

    /// Returns the namespace as the store spells it, asked for in any case. The Hub's names are
    /// case-insensitive.
    pub async fn namespace_spelled(&self, namespace: &str) -> Result<Option<String>, StoreError> {
        on_pool!(self, |pool| sqlx::query_scalar(
            "SELECT namespace FROM repos WHERE lower(namespace) = lower($1) ORDER BY namespace LIMIT 1"
        )
        .bind(namespace)
        .fetch_optional(pool)
        .await)
        .map_err(sql("namespace spelling"))
    }

    /// Returns the repo id as the store spells it, asked for in any case.
    pub async fn repo_spelled(&self, repo: &str) -> Result<Option<String>, StoreError> {
        on_pool!(self, |pool| sqlx::query_scalar(
            "SELECT id FROM repos WHERE lower(id) = lower($1) ORDER BY id LIMIT 1"
        )
        .bind(repo)
        .fetch_optional(pool)
        .await)
        .map_err(sql("repo spelling"))
    }

    /// Finds namespaces and repos whose names hold `words`, case-insensitively, by name.
    pub async fn search(&self, words: &str) -> Result<SearchHits, StoreError> {
        let pattern = contains_pattern(words);
        let namespaces = on_pool!(self, |pool| sqlx::query_scalar(
            "SELECT DISTINCT namespace FROM repos WHERE lower(namespace) LIKE $1 ESCAPE '!'
             ORDER BY namespace LIMIT $2"
        )
        .bind(&pattern)
        .bind(SEARCH_LIMIT)
        .fetch_all(pool)
        .await)
        .map_err(sql("search namespaces"))?;
        let repos = on_pool!(self, |pool| sqlx::query_as(
            "SELECT r.id AS repo_id, r.state, s.misaligned_bytes, m.target_repo AS mirror
             FROM repos r LEFT JOIN repo_sums s ON s.repo = r.id LEFT JOIN mirrors m ON m.source_repo = r.id
             WHERE lower(r.id) LIKE $1 ESCAPE '!' ORDER BY r.id LIMIT $2"
        )
        .bind(&pattern)
        .bind(SEARCH_LIMIT)
        .fetch_all(pool)
        .await)
        .map_err(sql("search repos"))?;
        Ok(SearchHits { namespaces, repos })
    }

    /// Returns, for each of `repos`, its mirror and newest job, by id.
    pub async fn repo_links(&self, repos: &[String]) -> Result<Vec<RepoLinks>, StoreError> {
        if repos.is_empty() {
            return Ok(Vec::new());
        }
        on_pool!(self, |pool| {
            let mut query = sqlx::QueryBuilder::new(
                "SELECT r.id AS repo_id, m.target_repo AS mirror, m.hidden_reason AS mirror_hidden, j.id AS job_id,
                    j.state AS job_state, j.failure_kind AS job_failure_kind
                 FROM repos r LEFT JOIN mirrors m ON m.source_repo = r.id
                 LEFT JOIN jobs j ON j.id = (SELECT MAX(id) FROM jobs WHERE repo_id = r.id)
                 WHERE r.id IN (",
            );
            let mut ids = query.separated(", ");
            for repo in repos {
                ids.push_bind(repo);
            }
            query.push(") ORDER BY r.id");
            query.build_query_as().fetch_all(pool).await
        })
        .map_err(sql("repos' mirrors and jobs"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::queries::tests::shard;
    use crate::store::{ListingEntry, RepoOutcome, RepoState};

    /// The store holds namespaces affected and not, one never audited, a mirror and two jobs. Every namespace
    /// is listed. The search treats case and wildcards as the Hub would. A page's repos come with their links.
    #[tokio::test]
    async fn every_namespace_and_every_name_can_be_reached() {
        for test in crate::store::both::stores().await {
            let store = &test.store;
            let run = store.start_run("test", "{}", None).await.unwrap();
            let ids = ["Alpha/Model_1", "Alpha/ModelX1", "beta/LLaMA-3", "beta/quiet", "gamma/unseen"];
            let listed: Vec<ListingEntry> = ids.iter().map(|id| ListingEntry::public(id, "c1")).collect();
            store.record_listing(run, &listed, false).await.unwrap();
            for (id, verdict, bad) in [("Alpha/Model_1", "header_pad", 2), ("Alpha/ModelX1", "aligned", 0)]
                .into_iter()
                .chain([("beta/LLaMA-3", "relayout", 1), ("beta/quiet", "aligned", 0)])
            {
                let shards = vec![shard(id, "model.safetensors", verdict, bad)];
                let outcome =
                    RepoOutcome { id: id.into(), sha: "c1".into(), state: RepoState::Ok, shards, error: None };
                store.record_repo(run, &outcome).await.unwrap();
            }
            assert!(store.claim_mirror("ops/Model_1-aligned", "Alpha/Model_1", false).await.unwrap());
            let first = store.job_for("Alpha/Model_1", "c1", crate::job::VerifyDevice::Cpu).await.unwrap();
            let newest = store.job_for("Alpha/Model_1", "c2", crate::job::VerifyDevice::Cpu).await.unwrap();
            assert!(newest.id > first.id);

            let all = store.namespaces_page(10, 0).await.unwrap();
            let names: Vec<&str> = all.iter().map(|n| n.namespace.as_str()).collect();
            assert_eq!(names, ["Alpha", "beta", "gamma"], "{:?}", store.backend());
            let counts: Vec<(i64, i64, i64)> =
                all.iter().map(|n| (n.repos_listed, n.repos_audited, n.repos_affected)).collect();
            assert_eq!(counts, [(2, 2, 1), (2, 2, 1), (1, 0, 0)]);
            assert_eq!(all[0].misaligned_bytes, 2000);
            let second_page = store.namespaces_page(2, 2).await.unwrap();
            assert_eq!(second_page.iter().map(|n| n.namespace.as_str()).collect::<Vec<_>>(), ["gamma"]);
            assert_eq!(store.namespace_count().await.unwrap(), 3);

            let hits = store.search("llama").await.unwrap();
            assert_eq!((hits.namespaces.len(), hits.repos.len()), (0, 1));
            assert_eq!(hits.repos[0].repo_id, "beta/LLaMA-3");
            assert_eq!(hits.repos[0].misaligned_bytes, Some(1000));
            // `_` is a character here, not any character: ModelX1 does not match `l_1`.
            let underscore = store.search("L_1").await.unwrap();
            let found: Vec<&str> = underscore.repos.iter().map(|r| r.repo_id.as_str()).collect();
            assert_eq!(found, ["Alpha/Model_1"]);
            assert_eq!(underscore.repos[0].mirror.as_deref(), Some("ops/Model_1-aligned"));
            let ns = store.search("ALP").await.unwrap();
            assert_eq!(ns.namespaces, ["Alpha"]);
            assert_eq!(ns.repos.len(), 2);
            let unseen = store.search("unseen").await.unwrap();
            assert_eq!((unseen.repos[0].state.as_str(), unseen.repos[0].misaligned_bytes), ("pending", None));
            assert!(store.search("%").await.unwrap().repos.is_empty(), "a % is taken literally");

            assert_eq!(store.namespace_spelled("ALPHA").await.unwrap().as_deref(), Some("Alpha"));
            assert_eq!(store.repo_spelled("BETA/llama-3").await.unwrap().as_deref(), Some("beta/LLaMA-3"));
            assert_eq!(store.namespace_spelled("delta").await.unwrap(), None);

            let links = store.repo_links(&["Alpha/Model_1".to_owned(), "beta/quiet".to_owned()]).await.unwrap();
            assert_eq!(links.len(), 2);
            assert_eq!(links[0].mirror.as_deref(), Some("ops/Model_1-aligned"));
            assert_eq!((links[0].job_id, links[0].job_state.as_deref()), (Some(newest.id), Some("queued")));
            assert_eq!((links[1].mirror.as_deref(), links[1].job_id), (None, None));
            assert!(store.repo_links(&[]).await.unwrap().is_empty());
        }
    }

    #[test]
    fn the_pattern_takes_wildcards_literally() {
        assert_eq!(contains_pattern(" Llama_3%! "), "%llama!_3!%!!%");
        assert_eq!(contains_pattern(""), "%%");
    }
}
