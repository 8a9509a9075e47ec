//! `MEI_ALIGN_MANIFEST.json`: what was changed in each shard, with the hashes that prove bit-identity.
//!
//! The schema is a superset of the one Mei's `tools/align_safetensors.py` writes, so Mei's checks and its
//! verification snippet work unchanged. The extra fields make a reorder checkable tensor by tensor.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::safetensors::Method;

/// The manifest's file name inside a bundle.
pub const MANIFEST_FILE: &str = "MEI_ALIGN_MANIFEST.json";

/// The whole manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Always `hubalign`.
    pub tool: String,
    /// The hubalign version that wrote it.
    #[serde(default)]
    pub tool_version: String,
    /// When, as `YYYY-MM-DDTHH:MM:SSZ`.
    pub generated_utc: String,
    /// The bundle directory the shards came from.
    pub source_dir: String,
    /// The Hub repository the bundle came from, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_repo: Option<String>,
    /// The commit of that repository, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_revision: Option<String>,
    /// Alignment the data sections were put on.
    pub target_alignment: u64,
    /// One entry per shard in the bundle.
    pub shards: Vec<ManifestShard>,
    /// Shards left alone, with the reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<SkippedShard>,
    /// Files of the source repo a mirror does not carry, with the reason. A repack fills it; see
    /// `repack::download::allow_list`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<LeftOut>,
    /// Carried configs whose pointers to code were removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub edited: Vec<Edited>,
}

/// One shard's record. Fields after `repack_seconds` are hubalign's. They take their defaults when read from
/// a manifest Mei's own tool wrote.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ManifestShard {
    /// File name relative to the bundle.
    pub file: String,
    /// The source's `N`.
    pub src_header_len: u64,
    /// Spaces added to the header.
    pub padding_bytes: u64,
    /// Bytes in the data section. No method changes it.
    pub payload_bytes: u64,
    /// SHA-256 of the written data section; equal to the source's for `header_pad` and `unchanged`.
    pub payload_sha256: String,
    /// Number of tensors.
    pub tensors: u64,
    /// Misaligned tensors after the rewrite: always 0.
    pub unaligned_after: u64,
    /// Wall time spent on this shard.
    pub repack_seconds: f64,
    /// How the shard was rewritten.
    #[serde(default)]
    pub method: Method,
    /// The new `N`.
    #[serde(default)]
    pub header_len: u64,
    /// Misaligned tensors in the source.
    #[serde(default)]
    pub unaligned_before: u64,
    /// The names of the digest fields this record carries: those the digest set computed (see
    /// [`Digests`](crate::safetensors::rewrite::Digests)). Empty in Mei's manifests.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub digests: Vec<String>,
    /// SHA-256 of the source file; empty unless computed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub src_file_sha256: String,
    /// SHA-256 of the source data section; empty unless computed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub src_payload_sha256: String,
    /// SHA-256 of the written file (its LFS oid); empty unless computed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub file_sha256: String,
    /// SHA-256 of every tensor's bytes, by name: equal in source and result. Empty unless computed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tensor_sha256: BTreeMap<String, String>,
}

impl ManifestShard {
    /// The `N` the shard was written with; Mei's manifests give it only as `src_header_len + padding_bytes`.
    pub fn written_header_len(&self) -> u64 {
        if self.header_len != 0 { self.header_len } else { self.src_header_len + self.padding_bytes }
    }
}

/// A shard the fix did not rewrite.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkippedShard {
    /// File name relative to the bundle.
    pub file: String,
    /// Why.
    pub reason: String,
}

/// A file of the source the mirror does not carry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeftOut {
    /// Its path in the source repo, as the tree names it. It is untrusted text, so escape it wherever shown.
    pub file: String,
    /// Its size as the tree gives it.
    pub bytes: u64,
    /// Why.
    pub reason: String,
}

/// A carried config the mirror holds without some of its keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Edited {
    /// The file.
    pub file: String,
    /// The keys removed, as dotted paths from the top (`auto_map`, `text_config.auto_map`).
    pub removed: Vec<String>,
}

/// Why a manifest could not be read or written.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ManifestError {
    /// Reading or writing failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The manifest file.
        path: PathBuf,
        /// The failure.
        #[source]
        source: io::Error,
    },
    /// The file is not a manifest of this schema.
    #[error("{}: not a hubalign manifest: {source}", path.display())]
    Parse {
        /// The manifest file.
        path: PathBuf,
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },
}

impl Manifest {
    /// Reads `dir/MEI_ALIGN_MANIFEST.json` if there is one.
    pub fn read(dir: &Path) -> Result<Option<Manifest>, ManifestError> {
        // A manifest of tens of thousands of tensors is a few MB; a larger file is not one this tool wrote.
        const MANIFEST_CAP: u64 = 256 << 20;
        let path = dir.join(MANIFEST_FILE);
        match crate::safe_fs::read_capped(&path, MANIFEST_CAP) {
            Ok(bytes) => {
                serde_json::from_slice(&bytes).map(Some).map_err(|source| ManifestError::Parse { path, source })
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(ManifestError::Io { path, source }),
        }
    }

    /// Writes `dir/MEI_ALIGN_MANIFEST.json` atomically, indented as Mei writes it; returns its path.
    pub fn write(&self, dir: &Path) -> Result<PathBuf, ManifestError> {
        let path = dir.join(MANIFEST_FILE);
        let io_err = |source| ManifestError::Io { path: path.clone(), source };
        // Serialize in memory first. Writing straight to the file takes one write call per JSON token: some
        // 22,000 for a shard of 1,400 tensors.
        let mut json = Vec::new();
        let mut ser =
            serde_json::Serializer::with_formatter(&mut json, serde_json::ser::PrettyFormatter::with_indent(b" "));
        self.serialize(&mut ser).map_err(|e| io_err(io::Error::other(e)))?;
        json.push(b'\n');
        // The manifest ships with the model, so it gets a new file's usual mode, not a temporary file's 0600.
        crate::safe_fs::write_atomic(&path, &json).map_err(io_err)?;
        Ok(path)
    }
}

/// Rounds seconds to the two decimals Mei records.
pub fn round_seconds(seconds: f64) -> f64 {
    (seconds * 100.0).round() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn the_manifest_is_created_like_any_new_file() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let manifest: Manifest = serde_json::from_str(
            r#"{"tool": "t", "generated_utc": "2026-11-29T00:00:00Z", "source_dir": ".", "target_alignment": 8,
                "shards": []}"#,
        )
        .unwrap();
        let path = manifest.write(dir.path()).unwrap();
        // Whatever this process's umask, a plain new file gets the same mode, and a temporary one 0600.
        let reference = dir.path().join("reference");
        std::fs::write(&reference, b"").unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), mode(&reference));
        assert_eq!(Manifest::read(dir.path()).unwrap(), Some(manifest));
    }
}
