//! What a fix run did, as data; the binary presents it.

use std::path::Path;

use serde::Serialize;

use crate::safetensors::{Alignment, Method, Verdict};

/// Progress events, for a progress bar.
#[derive(Debug, Clone, Copy)]
pub enum FixEvent<'a> {
    /// Payload bytes the whole run will stream.
    Total(u64),
    /// A shard starts.
    Shard(&'a Path),
    /// Payload bytes just processed.
    Bytes(u64),
}

/// What happened to one shard.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ShardFix {
    /// The source shard.
    pub path: String,
    /// Where the result is; null for a dry run or a failure.
    pub output: Option<String>,
    /// The source's verdict.
    pub verdict: Verdict,
    /// How it was rewritten, or would be in a dry run; null when invalid.
    pub method: Option<Method>,
    /// The source's `N`.
    pub header_len_before: Option<u64>,
    /// The new `N`.
    pub header_len_after: Option<u64>,
    /// Spaces added to the header.
    pub padding_bytes: u64,
    /// Misaligned tensors in the source.
    pub misaligned_tensors_before: u64,
    /// Their bytes.
    pub misaligned_bytes_before: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// Wall time.
    pub seconds: f64,
    /// Why it was skipped or failed; null on success.
    pub error: Option<String>,
    /// The kind of the I/O failure behind `error`, if any. A full disk is the machine's fault, not the
    /// shard's, and the repack worker holds such a job for the operator. Not part of the report.
    #[serde(skip)]
    pub io_kind: Option<std::io::ErrorKind>,
}

/// What happened to one bundle.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BundleFix {
    /// The source directory.
    pub dir: String,
    /// Where the bundle was written.
    pub output_dir: String,
    /// Each shard.
    pub shards: Vec<ShardFix>,
    /// Other files copied with `--out`.
    pub copied_files: Vec<String>,
    /// The manifest written, if any.
    pub manifest: Option<String>,
}

/// Totals over a fix run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FixTotals {
    /// Shards rewritten, or that would be in a dry run.
    pub rewritten: u64,
    /// Shards already aligned.
    pub unchanged: u64,
    /// Invalid shards, left alone.
    pub invalid: u64,
    /// Shards whose rewrite failed; their originals are intact.
    pub failed: u64,
    /// Bytes written.
    pub bytes_written: u64,
}

/// The whole fix run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FixReport {
    /// Whether this was a dry run.
    pub dry_run: bool,
    /// Target alignment.
    pub alignment: Alignment,
    /// Each bundle.
    pub bundles: Vec<BundleFix>,
    /// Totals.
    pub totals: FixTotals,
}
