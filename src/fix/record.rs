//! The record kept beside a shard repaired as it downloaded. `repack::repair` writes it. It lets `fix` take
//! that shard as done instead of rewriting it, and lets a resumed download skip it.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::manifest::ManifestShard;
use crate::safe_fs::FileId;
use crate::safetensors::header::LEN_PREFIX;

/// What the download keeps beside a repaired shard, for the re-layout and for a resumed attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamedRecord {
    /// The Hub's LFS oid of the source, which the streamed bytes matched.
    pub lfs_oid: String,
    /// The manifest's record of the shard.
    pub entry: ManifestShard,
    /// The repaired file as it was when its digests were taken. The upload uses the record's `file_sha256` as
    /// the file's LFS oid only while the file there is still this one. Absent in records without a
    /// `file_sha256`, and in records from builds that did not write it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hashed: Option<FileId>,
}

impl StreamedRecord {
    /// Where the record of the repaired shard `file` in `dir` is kept.
    pub fn path(dir: &Path, file: &str) -> PathBuf {
        dir.join(format!("{file}.record.json"))
    }

    /// The record of `file` in `dir`, if there is one and its repaired file is in place with the recorded
    /// length.
    pub fn read(dir: &Path, file: &str) -> Option<StreamedRecord> {
        let bytes = crate::safe_fs::read_capped(&StreamedRecord::path(dir, file), 64 << 20).ok()?;
        let record: StreamedRecord = serde_json::from_slice(&bytes).ok()?;
        let repaired = std::fs::symlink_metadata(dir.join(file)).ok()?;
        let size = record.entry.header_len.saturating_add(LEN_PREFIX).saturating_add(record.entry.payload_bytes);
        (repaired.is_file() && repaired.len() == size).then_some(record)
    }

    /// The SHA-256 of the whole repaired file `file` in `dir`, as its record gives it. Returns it only while
    /// the file there is the very one it was taken from. So an upload need not read every byte to name it.
    pub fn file_sha256(dir: &Path, file: &str) -> Option<String> {
        let record = StreamedRecord::read(dir, file)?;
        let digest = record.entry.file_sha256;
        let same = record.hashed.is_some() && record.hashed == FileId::of(&dir.join(file));
        (same && crate::hashing::is_hex(&digest, 64)).then_some(digest)
    }

    /// [`read`](Self::read), for the source with the Hub's `lfs_oid` only.
    pub fn load(dir: &Path, file: &str, lfs_oid: &str) -> Option<StreamedRecord> {
        StreamedRecord::read(dir, file).filter(|r| r.lfs_oid.eq_ignore_ascii_case(lfs_oid))
    }
}
