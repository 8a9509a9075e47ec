//! The Hub objects the service made, besides its mirrors: the public dataset repo and the Collections.
//!
//! The service writes only into an object it finds here. One it finds on the Hub by name is someone else's
//! until its marker says otherwise (see `dataset::push` and `findable::collections`).

use super::{Store, StoreError, on_pool, sql};

/// What kind of Hub object a record names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnedKind {
    /// A dataset repo, by its id.
    Dataset,
    /// A collection, by its slug.
    Collection,
}

impl OwnedKind {
    fn as_str(self) -> &'static str {
        match self {
            OwnedKind::Dataset => "dataset",
            OwnedKind::Collection => "collection",
        }
    }
}

impl Store {
    /// Records that the service made (or adopted by its marker) the object `id` of `kind`.
    pub async fn record_owned(&self, kind: OwnedKind, id: &str) -> Result<(), StoreError> {
        on_pool!(self, |pool| sqlx::query(
            "INSERT INTO hub_objects (kind, object_id, recorded_at) VALUES ($1, $2, $3)
             ON CONFLICT (kind, object_id) DO NOTHING"
        )
        .bind(kind.as_str())
        .bind(id.to_ascii_lowercase())
        .bind(crate::time::now_utc())
        .execute(pool)
        .await
        .map(|_| ()))
        .map_err(sql("record an owned object"))
    }

    /// Forgets the record of the object `id` of `kind`. It drops a claim made before creating the object,
    /// when what the Hub holds under that name turned out to be someone else's.
    pub async fn forget_owned(&self, kind: OwnedKind, id: &str) -> Result<(), StoreError> {
        on_pool!(self, |pool| sqlx::query("DELETE FROM hub_objects WHERE kind = $1 AND object_id = $2")
            .bind(kind.as_str())
            .bind(id.to_ascii_lowercase())
            .execute(pool)
            .await
            .map(|_| ()))
        .map_err(sql("forget an owned object"))
    }

    /// Whether the store records the object `id` of `kind` as the service's, in any letter case.
    pub async fn owns(&self, kind: OwnedKind, id: &str) -> Result<bool, StoreError> {
        let found: Option<String> = on_pool!(self, |pool| sqlx::query_scalar(
            "SELECT object_id FROM hub_objects WHERE kind = $1 AND object_id = $2"
        )
        .bind(kind.as_str())
        .bind(id.to_ascii_lowercase())
        .fetch_optional(pool)
        .await)
        .map_err(sql("look up an owned object"))?;
        Ok(found.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_object_is_owned_once_recorded_in_any_letter_case_and_only_for_its_kind() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s.db")).await.unwrap();
        assert!(!store.owns(OwnedKind::Dataset, "ops/Stats").await.unwrap());
        store.record_owned(OwnedKind::Dataset, "ops/Stats").await.unwrap();
        store.record_owned(OwnedKind::Dataset, "OPS/stats").await.unwrap();
        assert!(store.owns(OwnedKind::Dataset, "ops/stats").await.unwrap());
        assert!(!store.owns(OwnedKind::Collection, "ops/stats").await.unwrap());
        store.forget_owned(OwnedKind::Dataset, "OPS/STATS").await.unwrap();
        assert!(!store.owns(OwnedKind::Dataset, "ops/stats").await.unwrap());
    }
}
