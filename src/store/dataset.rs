//! The rows of the public dataset (`crate::dataset`): only what the Hub shows anyone.
//!
//! A repo counts when its last audit saw it public: listed, audited (`state = 'ok'`), neither private, gated
//! nor disabled. Some repos never appear: a private repo the crawler's token can see, a gated one (its files
//! are behind a form), or a disabled one. Their shards and mirrors never appear either, and they do not
//! count in their publisher's sums. A mirror counts when it is public and its source does.

use super::{Store, StoreError, on_pool, sql};

/// The condition on `repos r` that every dataset row meets. It is a macro so that each query stays one
/// literal.
macro_rules! public {
    () => {
        "r.state = 'ok' AND r.audited_sha IS NOT NULL AND NOT r.private AND NOT r.gated AND NOT r.disabled"
    };
}

/// One public repo, as audited.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct PublicRepo {
    /// `namespace/name`.
    pub repo_id: String,
    /// The namespace.
    pub namespace: String,
    /// The commit audited.
    pub sha: String,
    /// Safetensors shards at that commit.
    pub shards: i64,
    /// Of those, already aligned.
    pub shards_aligned: i64,
    /// Fixed by header padding.
    pub shards_header_pad: i64,
    /// Needing a reorder.
    pub shards_relayout: i64,
    /// Breaking the format.
    pub shards_invalid: i64,
    /// Tensors a copying loader copies.
    pub misaligned_tensors: i64,
    /// Bytes a copying loader duplicates.
    pub misaligned_bytes: i64,
    /// The writer (`__metadata__.format`) of most of its shards, the first by name on a tie.
    pub writer: Option<String>,
    /// Its public mirror, if one is published.
    pub mirror: Option<String>,
}

/// One shard of a public repo.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct PublicShard {
    /// The repo.
    pub repo_id: String,
    /// The repo's namespace.
    pub namespace: String,
    /// The file's path in the repo.
    pub path: String,
    /// Its size in bytes.
    pub size: i64,
    /// `aligned`, `header_pad`, `relayout` or `invalid`.
    pub verdict: String,
    /// Tensors, if the header parsed.
    pub tensors: Option<i64>,
    /// Tensors a copying loader copies.
    pub misaligned_tensors: Option<i64>,
    /// Bytes a copying loader duplicates.
    pub misaligned_bytes: Option<i64>,
    /// Where the data section starts (`8 + N`).
    pub data_start: Option<i64>,
    /// The writer (`__metadata__.format`).
    pub writer: Option<String>,
}

/// One public mirror of a public source.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct PublicMirror {
    /// The source repo.
    pub source: String,
    /// The source's namespace.
    pub namespace: String,
    /// The mirror.
    pub mirror: String,
    /// The source commit it mirrors.
    pub source_sha: String,
    /// The mirror's commit.
    pub mirror_commit: Option<String>,
    /// When it was published (RFC 3339).
    pub published_at: String,
    /// The MLX check's record, as the job kept it (JSON).
    pub verification: Option<String>,
}

/// One publisher's sums over its public repos.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct PublicPublisher {
    /// The namespace.
    pub namespace: String,
    /// Public repos audited.
    pub repos_audited: i64,
    /// Of those, with tensors a copying loader copies.
    pub repos_affected: i64,
    /// Shards already aligned.
    pub shards_aligned: i64,
    /// Shards fixed by header padding.
    pub shards_header_pad: i64,
    /// Shards needing a reorder.
    pub shards_relayout: i64,
    /// Shards breaking the format.
    pub shards_invalid: i64,
    /// Tensors a copying loader copies.
    pub misaligned_tensors: i64,
    /// Bytes a copying loader duplicates.
    pub misaligned_bytes: i64,
}

/// The four tables' rows, read together.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PublicRows {
    /// Public repos, by id.
    pub repos: Vec<PublicRepo>,
    /// Their shards, by repo and path.
    pub shards: Vec<PublicShard>,
    /// Their public mirrors, by source.
    pub mirrors: Vec<PublicMirror>,
    /// Publishers' sums over them, by namespace.
    pub publishers: Vec<PublicPublisher>,
}

/// Every public repo, by id.
const REPOS: &str = concat!(
            "SELECT r.id AS repo_id, r.namespace, r.audited_sha AS sha,
                CAST(s.shards_aligned + s.shards_header_pad + s.shards_relayout + s.shards_invalid AS BIGINT) AS shards,
                CAST(s.shards_aligned AS BIGINT) AS shards_aligned, CAST(s.shards_header_pad AS BIGINT) AS shards_header_pad,
                CAST(s.shards_relayout AS BIGINT) AS shards_relayout, CAST(s.shards_invalid AS BIGINT) AS shards_invalid,
                CAST(s.misaligned_tensors AS BIGINT) AS misaligned_tensors, CAST(s.misaligned_bytes AS BIGINT) AS misaligned_bytes,
                (SELECT w.writer FROM shards w WHERE w.repo_id = r.id AND w.writer IS NOT NULL
                 GROUP BY w.writer ORDER BY COUNT(*) DESC, w.writer LIMIT 1) AS writer,
                (SELECT m.target_repo FROM mirrors m WHERE m.source_repo = r.id AND NOT m.private
                 AND EXISTS (SELECT 1 FROM jobs j WHERE j.repo_id = m.source_repo AND j.target_repo = m.target_repo
                             AND j.state = 'published')) AS mirror
             FROM repos r JOIN repo_sums s ON s.repo = r.id
             WHERE ",
            public!(),
            " ORDER BY r.id"
        );

/// Every shard of a public repo, by repo and path.
const SHARDS: &str = concat!(
    "SELECT s.repo_id, r.namespace, s.path, s.size, s.verdict, s.tensors, s.misaligned_tensors,
                s.misaligned_bytes, s.data_start, s.writer
             FROM shards s JOIN repos r ON r.id = s.repo_id
             WHERE ",
    public!(),
    " ORDER BY s.repo_id, s.path"
);

/// Every public mirror of a public source, with its newest published job, by source.
const MIRRORS: &str = concat!(
    "SELECT m.source_repo AS source, r.namespace, m.target_repo AS mirror, j.source_sha,
                j.published_commit AS mirror_commit, COALESCE(j.finished_at, j.updated_at) AS published_at,
                CAST(j.verification AS TEXT) AS verification
             FROM mirrors m JOIN repos r ON r.id = m.source_repo
             JOIN jobs j ON j.id = (SELECT MAX(k.id) FROM jobs k WHERE k.repo_id = m.source_repo
                                    AND k.target_repo = m.target_repo AND k.state = 'published')
             WHERE NOT m.private AND ",
    public!(),
    " ORDER BY m.source_repo"
);

/// Each publisher's sums over its public repos, by namespace.
const PUBLISHERS: &str = concat!(
    "SELECT r.namespace, COUNT(*) AS repos_audited,
                COUNT(*) FILTER (WHERE s.misaligned_bytes > 0) AS repos_affected,
                CAST(SUM(s.shards_aligned) AS BIGINT) AS shards_aligned,
                CAST(SUM(s.shards_header_pad) AS BIGINT) AS shards_header_pad,
                CAST(SUM(s.shards_relayout) AS BIGINT) AS shards_relayout,
                CAST(SUM(s.shards_invalid) AS BIGINT) AS shards_invalid,
                CAST(SUM(s.misaligned_tensors) AS BIGINT) AS misaligned_tensors,
                CAST(SUM(s.misaligned_bytes) AS BIGINT) AS misaligned_bytes
             FROM repos r JOIN repo_sums s ON s.repo = r.id
             WHERE ",
    public!(),
    " GROUP BY r.namespace ORDER BY r.namespace"
);

impl Store {
    /// Returns every public mirror of a public source, by source. The collections and the notes on sources
    /// need no other table.
    pub async fn public_mirrors(&self) -> Result<Vec<PublicMirror>, StoreError> {
        on_pool!(self, |pool| sqlx::query_as(MIRRORS).fetch_all(pool).await).map_err(sql("public mirrors"))
    }

    /// Reads every public row: the four tables, in one read-only transaction on one snapshot of the database.
    /// A crawl writing meanwhile thus cannot make them disagree, with a repo's sums in `repos` and its rows in
    /// `shards` from two different audits. SQLite's deferred transaction keeps the WAL snapshot its first read
    /// took. PostgreSQL's transaction asks for repeatable read.
    pub async fn public_rows(&self) -> Result<PublicRows, StoreError> {
        on_pool!(self, |pool| {
            let mut tx = pool.begin_with(self.begin_snapshot()).await.map_err(sql("begin"))?;
            let repos = sqlx::query_as(REPOS).fetch_all(&mut *tx).await.map_err(sql("public repos"))?;
            let shards = sqlx::query_as(SHARDS).fetch_all(&mut *tx).await.map_err(sql("public shards"))?;
            let mirrors = sqlx::query_as(MIRRORS).fetch_all(&mut *tx).await.map_err(sql("public mirrors"))?;
            let publishers = sqlx::query_as(PUBLISHERS).fetch_all(&mut *tx).await.map_err(sql("public publishers"))?;
            tx.commit().await.map_err(sql("commit"))?;
            Ok(PublicRows { repos, shards, mirrors, publishers })
        })
    }
}
