//! The notes on mirrored sources (`serve --note-sources`): which source got its one note, and which
//! namespaces said no by closing one.

use std::collections::BTreeSet;

use super::{Store, StoreError, on_pool, sql};

/// A note posted, as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct SourceNote {
    /// The source it was posted on.
    pub source_repo: String,
    /// The discussion's number there.
    pub num: i64,
}

impl Store {
    /// Sources that got their note already (whatever became of it), lower-cased: repo names are
    /// case-insensitive on the Hub.
    pub async fn noted_sources(&self) -> Result<BTreeSet<String>, StoreError> {
        let rows: Vec<String> =
            on_pool!(self, |pool| sqlx::query_scalar("SELECT source_repo FROM source_notes").fetch_all(pool).await)
                .map_err(sql("noted sources"))?;
        Ok(rows.into_iter().map(|r| r.to_ascii_lowercase()).collect())
    }

    /// Namespaces that closed a note: no further note goes to any of their repos. Lower-cased.
    pub async fn declined_namespaces(&self) -> Result<BTreeSet<String>, StoreError> {
        let rows: Vec<String> = on_pool!(self, |pool| sqlx::query_scalar(
            "SELECT DISTINCT namespace FROM source_notes WHERE declined = TRUE"
        )
        .fetch_all(pool)
        .await)
        .map_err(sql("declined namespaces"))?;
        Ok(rows.into_iter().map(|r| r.to_ascii_lowercase()).collect())
    }

    /// The newest `limit` notes in `namespace` not yet seen closed, to ask the Hub whether one was (a source
    /// that refused its note, recorded with no number, has none to ask about).
    pub async fn open_notes_in(&self, namespace: &str, limit: i64) -> Result<Vec<SourceNote>, StoreError> {
        on_pool!(self, |pool| sqlx::query_as(
            "SELECT source_repo, num FROM source_notes WHERE lower(namespace) = lower($1) AND declined = FALSE
             AND num > 0 ORDER BY posted_at DESC, source_repo LIMIT $2"
        )
        .bind(namespace)
        .bind(limit)
        .fetch_all(pool)
        .await)
        .map_err(sql("open notes"))
    }

    /// Records the note `num` posted (or found) on `source`, linking `mirror`.
    pub async fn record_note(&self, source: &str, mirror: &str, num: i64) -> Result<(), StoreError> {
        let now = crate::time::now_utc();
        on_pool!(self, |pool| sqlx::query(
            "INSERT INTO source_notes (source_repo, namespace, mirror_repo, num, posted_at) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (source_repo) DO NOTHING"
        )
        .bind(source)
        .bind(crate::gate::namespace_of(source))
        .bind(mirror)
        .bind(num)
        .bind(&now)
        .execute(pool)
        .await
        .map(|_| ()))
        .map_err(sql("record note"))?;
        Ok(())
    }

    /// Records that the note on `source` was closed: its namespace said no.
    pub async fn decline_note(&self, source: &str) -> Result<(), StoreError> {
        on_pool!(self, |pool| sqlx::query("UPDATE source_notes SET declined = TRUE WHERE source_repo = $1")
            .bind(source)
            .execute(pool)
            .await
            .map(|_| ()))
        .map_err(sql("decline note"))?;
        Ok(())
    }
}
