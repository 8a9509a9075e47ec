//! Defines the dataset's four tables, with one struct per row. [`COLUMNS`] documents each column once. The
//! card lists it, and a test holds it to the Parquet schema.

use parquet_derive::ParquetRecordWriter;
use serde::Serialize;

use crate::store::dataset::{PublicMirror, PublicPublisher, PublicRepo, PublicShard};

/// One public repo, as its last audit saw it.
#[derive(Debug, Clone, PartialEq, Serialize, ParquetRecordWriter)]
pub struct RepoRecord {
    pub snapshot_date: String,
    /// `namespace/name`.
    pub repo_id: String,
    pub namespace: String,
    /// The commit audited.
    pub commit: String,
    /// `aligned`, `affected`, `mirrored` or `invalid`.
    pub state: String,
    /// Whether a memory-mapping loader copies any of its tensors.
    pub affected: bool,
    /// Safetensors shards.
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
    /// The writer of most of its shards.
    pub writer: Option<String>,
    /// Its public aligned mirror.
    pub mirror: Option<String>,
}

/// One safetensors shard of a public repo.
#[derive(Debug, Clone, PartialEq, Serialize, ParquetRecordWriter)]
pub struct ShardRecord {
    pub snapshot_date: String,
    pub repo_id: String,
    /// The file's path in the repo.
    pub file: String,
    /// Its size in bytes.
    pub size: i64,
    /// `aligned`, `header_pad`, `relayout` or `invalid`.
    pub verdict: String,
    pub tensors: Option<i64>,
    /// Tensors a copying loader copies.
    pub misaligned_tensors: Option<i64>,
    /// Bytes a copying loader duplicates.
    pub misaligned_bytes: Option<i64>,
    /// Where the data section starts.
    pub data_start: Option<i64>,
    pub writer: Option<String>,
}

/// One public mirror.
#[derive(Debug, Clone, PartialEq, Serialize, ParquetRecordWriter)]
pub struct MirrorRecord {
    pub snapshot_date: String,
    /// The source repo.
    pub source: String,
    pub mirror: String,
    /// The source commit mirrored.
    pub source_commit: String,
    /// The mirror's commit.
    pub commit: Option<String>,
    /// When it was published.
    pub published_at: String,
    /// Where the MLX check ran.
    pub check_device: Option<String>,
    /// The MLX version it ran.
    pub check_mlx_version: Option<String>,
    /// Tensors it loaded.
    pub check_tensors: Option<i64>,
}

/// One publisher's public repos, summed.
#[derive(Debug, Clone, PartialEq, Serialize, ParquetRecordWriter)]
pub struct PublisherRecord {
    pub snapshot_date: String,
    pub namespace: String,
    /// Public repos audited.
    pub repos_audited: i64,
    /// Of those, affected.
    pub repos_affected: i64,
    /// `repos_affected / repos_audited`.
    pub share_affected: f64,
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

/// A column: its name, its type as the card says it, and what it holds.
pub(crate) type Column = (&'static str, &'static str, &'static str);

const DATE: Column = ("snapshot_date", "string", "The day of the crawl this snapshot is from (UTC, `YYYY-MM-DD`).");
const DUPLICATED: &str = "Bytes a memory-mapping loader copies instead of mapping: the sizes of the tensors whose file offset is not a multiple of their element's width.";
const MISALIGNED: &str =
    "Tensors a memory-mapping loader copies (their file offset is not a multiple of their element's width).";
const WRITER: &str = "The writer the header names (`__metadata__.format`, e.g. `mlx`, `pt`), if any.";

/// Each table's name and columns, in their order in the files.
pub(crate) const COLUMNS: [(&str, &[Column]); 4] = [
    (
        "repos",
        &[
            DATE,
            ("repo_id", "string", "The model repo, `namespace/name`."),
            ("namespace", "string", "Its namespace (the publisher)."),
            ("commit", "string", "The commit audited."),
            (
                "state",
                "string",
                "`aligned` (no tensor is copied), `affected` (some are), `mirrored` (affected, with a public aligned mirror) or `invalid` (a shard breaks the format and none is copied).",
            ),
            ("affected", "bool", "Whether a memory-mapping loader copies any of its tensors."),
            ("shards", "int64", "Its safetensors shards at that commit."),
            ("shards_aligned", "int64", "Shards no loader copies from."),
            ("shards_header_pad", "int64", "Shards that padding the header fixes (the payload stays bit-identical)."),
            ("shards_relayout", "int64", "Shards whose tensors must be reordered, widest first."),
            ("shards_invalid", "int64", "Shards whose header breaks the format."),
            ("misaligned_tensors", "int64", MISALIGNED),
            ("misaligned_bytes", "int64", DUPLICATED),
            ("writer", "string, nullable", "The writer of most of its shards (`__metadata__.format`)."),
            ("mirror", "string, nullable", "Its public aligned mirror, if one is published."),
        ],
    ),
    (
        "shards",
        &[
            DATE,
            ("repo_id", "string", "The model repo."),
            ("file", "string", "The shard's path in the repo."),
            ("size", "int64", "Its size in bytes."),
            ("verdict", "string", "`aligned`, `header_pad`, `relayout` or `invalid` (see `repos`)."),
            ("tensors", "int64, nullable", "Its tensors (null when the header does not parse)."),
            ("misaligned_tensors", "int64, nullable", MISALIGNED),
            ("misaligned_bytes", "int64, nullable", DUPLICATED),
            (
                "data_start",
                "int64, nullable",
                "The file offset the data section starts at, `8 + N` for a header of `N` bytes.",
            ),
            ("writer", "string, nullable", WRITER),
        ],
    ),
    (
        "mirrors",
        &[
            DATE,
            ("source", "string", "The source repo."),
            ("mirror", "string", "Its aligned mirror."),
            ("source_commit", "string", "The source commit the mirror carries."),
            ("commit", "string, nullable", "The mirror's commit."),
            ("published_at", "string", "When it was published (RFC 3339, UTC)."),
            ("check_device", "string, nullable", "Where the MLX load check ran (`gpu` or `cpu`)."),
            ("check_mlx_version", "string, nullable", "The MLX version the check ran."),
            ("check_tensors", "int64, nullable", "Tensors the check loaded bit-identical to the source's."),
        ],
    ),
    (
        "publishers",
        &[
            DATE,
            ("namespace", "string", "The publisher."),
            ("repos_audited", "int64", "Its public repos audited."),
            ("repos_affected", "int64", "Of those, repos with tensors a loader copies."),
            ("share_affected", "double", "`repos_affected / repos_audited`."),
            ("shards_aligned", "int64", "Its shards no loader copies from."),
            ("shards_header_pad", "int64", "Its shards that header padding fixes."),
            ("shards_relayout", "int64", "Its shards that need a reorder."),
            ("shards_invalid", "int64", "Its shards that break the format."),
            ("misaligned_tensors", "int64", MISALIGNED),
            ("misaligned_bytes", "int64", DUPLICATED),
        ],
    ),
];

impl RepoRecord {
    /// The row of `repo` in the snapshot of `date`.
    pub fn of(repo: PublicRepo, date: &str) -> RepoRecord {
        // A repo is affected when a loader duplicates any of its bytes, as the reports count it.
        let affected = repo.misaligned_bytes > 0;
        let state = match (affected, repo.mirror.is_some(), repo.shards_invalid > 0) {
            (true, true, _) => "mirrored",
            (true, false, _) => "affected",
            (false, _, true) => "invalid",
            (false, _, false) => "aligned",
        };
        RepoRecord {
            snapshot_date: date.to_owned(),
            repo_id: repo.repo_id,
            namespace: repo.namespace,
            commit: repo.sha,
            state: state.to_owned(),
            affected,
            shards: repo.shards,
            shards_aligned: repo.shards_aligned,
            shards_header_pad: repo.shards_header_pad,
            shards_relayout: repo.shards_relayout,
            shards_invalid: repo.shards_invalid,
            misaligned_tensors: repo.misaligned_tensors,
            misaligned_bytes: repo.misaligned_bytes,
            writer: repo.writer,
            mirror: repo.mirror,
        }
    }
}

impl ShardRecord {
    /// The row of `shard` in the snapshot of `date`.
    pub fn of(shard: PublicShard, date: &str) -> ShardRecord {
        ShardRecord {
            snapshot_date: date.to_owned(),
            repo_id: shard.repo_id,
            file: shard.path,
            size: shard.size,
            verdict: shard.verdict,
            tensors: shard.tensors,
            misaligned_tensors: shard.misaligned_tensors,
            misaligned_bytes: shard.misaligned_bytes,
            data_start: shard.data_start,
            writer: shard.writer,
        }
    }
}

impl MirrorRecord {
    /// The row of `mirror` in the snapshot of `date`. Its check's record comes from the job's JSON. A record
    /// that does not parse gives no check columns.
    pub fn of(mirror: PublicMirror, date: &str) -> MirrorRecord {
        let record: Option<crate::job::payload::MlxRecord> =
            mirror.verification.as_deref().and_then(|json| serde_json::from_str(json).ok());
        let record = record.filter(|r| r.ok);
        MirrorRecord {
            snapshot_date: date.to_owned(),
            source: mirror.source,
            mirror: mirror.mirror,
            source_commit: mirror.source_sha,
            commit: mirror.mirror_commit,
            published_at: mirror.published_at,
            check_device: record.as_ref().map(|r| r.device.clone()),
            check_mlx_version: record.as_ref().and_then(|r| r.mlx_version.clone()),
            check_tensors: record.and_then(|r| r.tensors).and_then(|n| i64::try_from(n).ok()),
        }
    }
}

impl PublisherRecord {
    /// The row of `publisher` in the snapshot of `date`.
    pub fn of(p: PublicPublisher, date: &str) -> PublisherRecord {
        PublisherRecord {
            snapshot_date: date.to_owned(),
            namespace: p.namespace,
            repos_audited: p.repos_audited,
            repos_affected: p.repos_affected,
            share_affected: crate::report::share_affected(p.repos_affected, p.repos_audited),
            shards_aligned: p.shards_aligned,
            shards_header_pad: p.shards_header_pad,
            shards_relayout: p.shards_relayout,
            shards_invalid: p.shards_invalid,
            misaligned_tensors: p.misaligned_tensors,
            misaligned_bytes: p.misaligned_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use parquet::record::RecordWriter;

    use super::*;

    fn names<R>() -> Vec<String>
    where
        for<'a> &'a [R]: RecordWriter<R>,
    {
        let rows: &[R] = &[];
        rows.schema().unwrap().get_fields().iter().map(|f| f.name().to_owned()).collect()
    }

    #[test]
    fn every_column_of_every_table_is_documented_in_its_order() {
        let documented = |table: &str| -> Vec<String> {
            let (_, columns) = COLUMNS.iter().find(|(name, _)| *name == table).unwrap();
            columns.iter().map(|c| c.0.to_owned()).collect()
        };
        assert_eq!(names::<RepoRecord>(), documented("repos"));
        assert_eq!(names::<ShardRecord>(), documented("shards"));
        assert_eq!(names::<MirrorRecord>(), documented("mirrors"));
        assert_eq!(names::<PublisherRecord>(), documented("publishers"));
    }
}
