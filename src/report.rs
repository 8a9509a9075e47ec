//! Reports over the audit store, as data: the binary prints them as a table, JSON lines or CSV.

use serde::Serialize;

use crate::store::queries::{AffectedRepo, PublisherRow, WriterRow};
use crate::store::{ShardRow, Store, StoreError};

/// One publisher in `report --by-publisher`: the stored sums plus what people read off them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Publisher {
    /// The namespace.
    pub namespace: String,
    /// Repos audited.
    pub repos_audited: i64,
    /// Repos with tensors a copying loader duplicates.
    pub repos_affected: i64,
    /// `repos_affected / repos_audited`.
    pub share_affected: f64,
    /// Shards already aligned.
    pub shards_aligned: i64,
    /// Shards fixed by header padding.
    pub shards_header_pad: i64,
    /// Shards needing a reorder.
    pub shards_relayout: i64,
    /// Invalid shards.
    pub shards_invalid: i64,
    /// Misaligned tensors.
    pub misaligned_tensors: i64,
    /// Bytes a copying loader duplicates.
    pub misaligned_bytes: i64,
    /// The same, in decimal gigabytes.
    pub gb_duplicated: f64,
}

/// The share of a publisher's repos that are affected: `affected / audited`, or 0 when none was audited. The
/// report and the public dataset both use it, so they agree.
pub fn share_affected(affected: i64, audited: i64) -> f64 {
    if audited > 0 { affected as f64 / audited as f64 } else { 0.0 }
}

impl From<PublisherRow> for Publisher {
    fn from(r: PublisherRow) -> Publisher {
        Publisher {
            share_affected: share_affected(r.repos_affected, r.repos_audited),
            gb_duplicated: r.misaligned_bytes as f64 / 1e9,
            namespace: r.namespace,
            repos_audited: r.repos_audited,
            repos_affected: r.repos_affected,
            shards_aligned: r.shards_aligned,
            shards_header_pad: r.shards_header_pad,
            shards_relayout: r.shards_relayout,
            shards_invalid: r.shards_invalid,
            misaligned_tensors: r.misaligned_tensors,
            misaligned_bytes: r.misaligned_bytes,
        }
    }
}

/// Publishers, most gigabytes duplicated first.
pub async fn by_publisher(store: &Store) -> Result<Vec<Publisher>, StoreError> {
    Ok(store.publishers().await?.into_iter().map(Publisher::from).collect())
}

/// Writers (`__metadata__.format`), most bytes duplicated first.
pub async fn by_writer(store: &Store) -> Result<Vec<WriterRow>, StoreError> {
    store.writers().await
}

/// Affected repos with at least `min_gb` duplicated: what the repack worker takes.
pub async fn affected(store: &Store, min_gb: f64) -> Result<Vec<AffectedRepo>, StoreError> {
    store.affected((min_gb * 1e9).max(0.0) as i64).await
}

/// One repo's shards.
pub async fn repo(store: &Store, id: &str) -> Result<Vec<ShardRow>, StoreError> {
    store.repo_shards(id).await
}

/// Every shard in the store.
pub async fn shards(store: &Store) -> Result<Vec<ShardRow>, StoreError> {
    store.all_shards().await
}

/// Decimal gigabytes and friends (`180.99 kB`, `59.30 GB`), as the Hub and the seeds count them.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "kB", "MB", "GB", "TB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1000.0 && unit < UNITS.len() - 1 {
        value /= 1000.0;
        unit += 1;
    }
    if unit == 0 { format!("{n} B") } else { format!("{value:.2} {}", UNITS[unit]) }
}
