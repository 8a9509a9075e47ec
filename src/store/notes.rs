//! The notes on mirrored sources (`serve --note-sources`). The store keeps which source got its one note, is
//! being given it, or refused it. It also keeps which namespaces said no by closing one.

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
    /// Sources that got their note, are being given it, or refused it, lower-cased: repo names are
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

    /// Returns `limit` of the notes in `namespace` not yet seen closed, to ask the Hub about them again. The
    /// notes asked about longest ago, or never, come first. Each pass asks about a few, and every note's turn
    /// comes.
    pub async fn open_notes_in(&self, namespace: &str, limit: i64) -> Result<Vec<SourceNote>, StoreError> {
        on_pool!(self, |pool| sqlx::query_as(
            "SELECT source_repo, num FROM source_notes WHERE lower(namespace) = lower($1) AND declined = FALSE
             AND num > 0 ORDER BY checked_at IS NOT NULL, checked_at, source_repo LIMIT $2"
        )
        .bind(namespace)
        .bind(limit)
        .fetch_all(pool)
        .await)
        .map_err(sql("open notes"))
    }

    /// Records that the Hub was just asked whether the note on `source` is open.
    pub async fn note_checked(&self, source: &str) -> Result<(), StoreError> {
        on_pool!(self, |pool| sqlx::query("UPDATE source_notes SET checked_at = $1 WHERE source_repo = $2")
            .bind(crate::time::now_utc())
            .bind(source)
            .execute(pool)
            .await
            .map(|_| ()))
        .map_err(sql("note checked"))
    }

    /// Claims `source` for a note, with number 0 until posted. Returns `false` if another process holds the
    /// claim or the source has a note, so two processes never both post one.
    pub async fn claim_note(&self, source: &str, mirror: &str) -> Result<bool, StoreError> {
        let now = crate::time::now_utc();
        let inserted = on_pool!(self, |pool| {
            sqlx::query(
            "INSERT INTO source_notes (source_repo, namespace, mirror_repo, num, posted_at) VALUES ($1, $2, $3, 0, $4)
             ON CONFLICT (source_repo) DO NOTHING"
        )
        .bind(source)
        .bind(crate::untrusted::namespace_of(source))
        .bind(mirror)
        .bind(&now)
        .execute(pool)
        .await
        .map(|done| done.rows_affected())
        })
        .map_err(sql("claim note"))?;
        Ok(inserted == 1)
    }

    /// Gives a claim up after a failed post, so the next pass may try again.
    pub async fn release_note(&self, source: &str) -> Result<(), StoreError> {
        on_pool!(self, |pool| sqlx::query("DELETE FROM source_notes WHERE source_repo = $1 AND num = 0")
            .bind(source)
            .execute(pool)
            .await
            .map(|_| ()))
        .map_err(sql("release note"))
    }

    /// Records the note `num` posted (or found) on `source`, linking `mirror`, over a claim if there is one.
    pub async fn record_note(&self, source: &str, mirror: &str, num: i64) -> Result<(), StoreError> {
        let now = crate::time::now_utc();
        on_pool!(self, |pool| sqlx::query(
            "INSERT INTO source_notes (source_repo, namespace, mirror_repo, num, posted_at) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (source_repo) DO UPDATE SET num = excluded.num, posted_at = excluded.posted_at"
        )
        .bind(source)
        .bind(crate::untrusted::namespace_of(source))
        .bind(mirror)
        .bind(num)
        .bind(&now)
        .execute(pool)
        .await
        .map(|_| ()))
        .map_err(sql("record note"))
    }

    /// Records that the note on `source` was closed: its namespace said no.
    pub async fn decline_note(&self, source: &str) -> Result<(), StoreError> {
        on_pool!(self, |pool| sqlx::query("UPDATE source_notes SET declined = TRUE WHERE source_repo = $1")
            .bind(source)
            .execute(pool)
            .await
            .map(|_| ()))
        .map_err(sql("decline note"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every note of a namespace gets its turn to be asked about, the ones asked about longest ago first. A
    /// closed older note is thus never missed.
    #[tokio::test]
    async fn every_note_of_a_namespace_gets_its_turn_to_be_checked_and_a_claim_is_held_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s.db")).await.unwrap();
        for n in 1..=12 {
            store.record_note(&format!("ns/r{n:02}"), "me/m", n).await.unwrap();
        }
        let first: Vec<String> =
            store.open_notes_in("NS", 10).await.unwrap().into_iter().map(|n| n.source_repo).collect();
        assert_eq!(first.len(), 10);
        for source in &first {
            store.note_checked(source).await.unwrap();
        }
        let next: Vec<String> =
            store.open_notes_in("ns", 10).await.unwrap().into_iter().map(|n| n.source_repo).collect();
        assert_eq!(&next[..2], ["ns/r11", "ns/r12"], "the two never asked about come first");

        assert!(store.claim_note("ns/new", "me/new").await.unwrap());
        assert!(!store.claim_note("ns/new", "me/new").await.unwrap(), "a second process does not get it");
        assert!(!store.open_notes_in("ns", 20).await.unwrap().iter().any(|n| n.source_repo == "ns/new"));
        store.release_note("ns/new").await.unwrap();
        assert!(store.claim_note("ns/new", "me/new").await.unwrap(), "released, it can be claimed again");
        store.record_note("ns/new", "me/new", 40).await.unwrap();
        store.release_note("ns/new").await.unwrap();
        assert!(store.noted_sources().await.unwrap().contains("ns/new"), "a posted note is not released");
    }
}
