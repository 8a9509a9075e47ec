//! Which mirror belongs to which source: chosen once, recorded before the first commit, and never handed
//! to another source; and which mirrors were made private because their source stopped being public.

use serde::Serialize;

use super::{Store, StoreError, on_pool, sql};

/// A mirror as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct MirrorRow {
    /// The mirror repo.
    pub target_repo: String,
    /// The source it mirrors.
    pub source_repo: String,
    /// When the name was taken.
    pub created_at: String,
    /// Whether it is (or must stay) private.
    pub private: bool,
    /// Why it was made private after publication.
    pub hidden_reason: Option<String>,
    /// When.
    pub hidden_at: Option<String>,
}

impl Store {
    /// The mirror recorded for `source`, if any.
    pub async fn mirror_of(&self, source: &str) -> Result<Option<MirrorRow>, StoreError> {
        on_pool!(self, |pool| sqlx::query_as("SELECT * FROM mirrors WHERE source_repo = $1")
            .bind(source)
            .fetch_optional(pool)
            .await)
        .map_err(sql("mirror of source"))
    }

    /// The source that holds the mirror name `target`, if any.
    pub async fn mirror_holder(&self, target: &str) -> Result<Option<String>, StoreError> {
        on_pool!(self, |pool| sqlx::query_scalar("SELECT source_repo FROM mirrors WHERE target_repo = $1")
            .bind(target)
            .fetch_optional(pool)
            .await)
        .map_err(sql("mirror holder"))
    }

    /// Takes the name `target` for `source` in one statement; `false` if another source holds it (or `source`
    /// already has another mirror), so two workers can never give one name to two sources.
    pub async fn claim_mirror(&self, target: &str, source: &str, private: bool) -> Result<bool, StoreError> {
        on_pool!(self, |pool| sqlx::query("INSERT INTO mirrors (target_repo, source_repo, created_at, private) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING")
            .bind(target)
            .bind(source)
            .bind(crate::time::now_utc())
            .bind(private)
            .execute(pool)
            .await.map(|done| done.rows_affected()))
            .map_err(sql("claim mirror"))?;
        Ok(self.mirror_holder(target).await?.as_deref() == Some(source))
    }

    /// Records that a mirror was published with this visibility (clearing an earlier hiding: its source was
    /// checked public again just before).
    pub async fn mirror_published(&self, target: &str, private: bool) -> Result<(), StoreError> {
        on_pool!(self, |pool| sqlx::query(
            "UPDATE mirrors SET private = $1, hidden_reason = NULL, hidden_at = NULL WHERE target_repo = $2"
        )
        .bind(private)
        .bind(target)
        .execute(pool)
        .await
        .map(|done| done.rows_affected()))
        .map_err(sql("mirror published"))?;
        Ok(())
    }

    /// Records that a mirror was made private, and why.
    pub async fn hide_mirror(&self, target: &str, reason: &str) -> Result<(), StoreError> {
        on_pool!(self, |pool| sqlx::query(
            "UPDATE mirrors SET private = TRUE, hidden_reason = $1, hidden_at = $2 WHERE target_repo = $3"
        )
        .bind(reason)
        .bind(crate::time::now_utc())
        .bind(target)
        .execute(pool)
        .await
        .map(|done| done.rows_affected()))
        .map_err(sql("hide mirror"))?;
        Ok(())
    }

    /// Public mirrors whose source the store no longer knows as public: its state is not `ok`, it is flagged
    /// private, gated or disabled, or the newest finished audit did not list it. Each needs a fresh look.
    pub async fn mirrors_to_recheck(&self) -> Result<Vec<MirrorRow>, StoreError> {
        on_pool!(self, |pool| sqlx::query_as(
            "SELECT m.* FROM mirrors m LEFT JOIN repos r ON r.id = m.source_repo
             WHERE m.private = FALSE AND (
                r.id IS NULL OR r.state NOT IN ('ok', 'moved', 'error', 'pending') OR r.private OR r.gated OR r.disabled
                OR COALESCE(r.last_listed_run, 0) < COALESCE((SELECT MAX(id) FROM audit_runs WHERE status = 'finished' AND kind = 'crawl'), 0))
             ORDER BY m.target_repo",
        )
        .fetch_all(pool)
        .await)
        .map_err(sql("mirrors to recheck"))
    }
}
