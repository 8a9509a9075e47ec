//! Generates the files of synthetic repos from their plan, at any offset, and streams them as a download.

use std::sync::Arc;

use axum::body::{Body, Bytes};

use super::plan::{Plan, TextFile};
use super::shard::file_bytes;

/// What a synthetic file is generated from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A text file of the repo.
    Text(TextFile),
    /// Shard `index`.
    Shard {
        /// Which of the plan's shards.
        index: usize,
        /// `8 + N`: bytes before it are the header.
        data_start: u64,
        /// Whether the oid listed for it is the sha256 of these bytes (the sample's).
        verified: bool,
    },
}

/// A file of a synthetic repo.
#[derive(Debug, Clone)]
pub struct SyntheticFile {
    /// The repo it belongs to, as of its commit.
    pub plan: Plan,
    /// Which file.
    pub source: Source,
    /// Its size.
    pub size: u64,
}

/// Bytes generated per chunk of a download.
const CHUNK: u64 = 256 * 1024;

impl SyntheticFile {
    /// Fills `out` with the file's bytes from `at`. The caller keeps `at + out.len()` within the size.
    pub fn read_at(&self, at: u64, out: &mut [u8]) {
        match self.source {
            Source::Text(kind) => {
                let text = self.plan.text(kind);
                let start = usize::try_from(at).unwrap_or(usize::MAX).min(text.len());
                let n = out.len().min(text.len() - start);
                out[..n].copy_from_slice(&text[start..start + n]);
            }
            Source::Shard { index, .. } => {
                if let Some(spec) = self.plan.shards.get(index) {
                    file_bytes(spec.key, &spec.layout().header, at, out);
                }
            }
        }
    }

    /// Whether a read of `start..start + len` reaches past the first MiB of a payload whose listed oid is a
    /// stand-in. No client could check those bytes, and a client within its policy never asks for them.
    pub fn unverifiable(&self, start: u64, len: u64) -> bool {
        match self.source {
            Source::Shard { data_start, verified: false, .. } => start.saturating_add(len) > data_start + (1 << 20),
            _ => false,
        }
    }

    /// A body of `len` bytes from `start`, generated a chunk at a time as the client reads.
    pub fn stream(self: Arc<Self>, start: u64, len: u64) -> Body {
        let end = start.saturating_add(len).min(self.size);
        // The shard's header is laid out once per download, not once per chunk.
        let header = match self.source {
            Source::Shard { index, .. } => self.plan.shards.get(index).map(|s| (s.key, Arc::new(s.layout().header))),
            Source::Text(_) => None,
        };
        let chunks = futures_util::stream::unfold(start, move |at| {
            let file = Arc::clone(&self);
            let header = header.clone();
            async move {
                if at >= end {
                    return None;
                }
                let n = (end - at).min(CHUNK);
                let mut buf = vec![0u8; n as usize];
                match &header {
                    Some((key, header)) => file_bytes(*key, header, at, &mut buf),
                    None => file.read_at(at, &mut buf),
                }
                Some((Ok::<_, std::io::Error>(Bytes::from(buf)), at + n))
            }
        });
        Body::from_stream(chunks)
    }
}
