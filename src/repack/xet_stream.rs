//! One file sent to a mirror's CAS while it is still being written, its SHA-256 named once it is known.
//!
//! Xet's own upload stream fixes how the file's SHA-256 (the LFS oid the commit names) is had when the stream
//! opens: computed by Xet from the bytes, or given. A reordered shard's digest is known only once its last
//! byte has landed (the writer takes it as the bytes land: `stream::behind`), and taking it a second time in
//! Xet would hash every byte twice. So this drives Xet's file cleaner itself: it chunks the file with no
//! digest of its own, and once the file is whole, the digest the writer took is written into the file's entry
//! (its metadata extension) before the entry is registered, as Xet's own upload does with a digest given.
//!
//! The file is fed as read-only maps of its own pages (see [`blocks`](super::blocks)): only what the writer
//! has said is final, which is never written again.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use xet_client::cas_client::auth::{AuthConfig, DirectRefreshRouteTokenRefresher, TokenRefresher};
use xet_client::common::http_client::build_http_client;
use xet_core_structures::metadata_shard::Sha256;
use xet_core_structures::metadata_shard::file_structs::{FileDataSequenceHeader, FileMetadataExt};
use xet_data::processing::configurations::{SessionContext, TranslatorConfig};
use xet_data::processing::{FileUploadSession, Sha256Policy, SingleFileCleaner};
use xet_runtime::core::XetContext;

use super::blocks::BLOCK;
use super::upload::Stored;
use crate::hub::commit::XetToken;

/// Where a stream goes: the CAS and its token, and how the token is renewed (the Hub's route for it, with the
/// headers that authorize asking).
pub struct Cas<'a> {
    /// The write token, with the CAS's address.
    pub token: &'a XetToken,
    /// The Hub's route that renews the token.
    pub refresh_url: &'a str,
    /// Headers for that route.
    pub refresh_headers: reqwest::header::HeaderMap,
}

/// A file on its way to the CAS.
pub struct XetStream {
    session: Arc<FileUploadSession>,
    cleaner: SingleFileCleaner,
    file: File,
    /// The file's length once whole.
    len: u64,
    /// Bytes handed to Xet so far, from the start.
    fed: u64,
}

/// Why a stream failed.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// Reading the file failed.
    #[error("reading the file: {0}")]
    Read(#[source] std::io::Error),
    /// Xet refused something.
    #[error("Xet: {0}")]
    Xet(String),
    /// The digest given is not a SHA-256.
    #[error("not a SHA-256: {0:?}")]
    Digest(String),
}

fn xet(e: impl std::fmt::Display) -> StreamError {
    StreamError::Xet(e.to_string())
}

impl XetStream {
    /// Opens a stream of the file at `path` (its final length `len`) as `name`, to `cas`. Deduplication reads
    /// the shard cache as the session opens, so priming goes first.
    pub async fn open(cas: Cas<'_>, name: &str, path: &Path, len: u64) -> Result<XetStream, StreamError> {
        let ctx = XetContext::with_config(super::upload::xet_config().map_err(xet)?).map_err(xet)?;
        let client = build_http_client(&ctx, "", None, Some(Arc::new(cas.refresh_headers))).map_err(xet)?;
        let refresher: Arc<dyn TokenRefresher> =
            Arc::new(DirectRefreshRouteTokenRefresher::new(ctx.clone(), cas.refresh_url, client, None));
        let context = SessionContext {
            endpoint: cas.token.cas_url.clone(),
            auth: AuthConfig::maybe_new(Some(cas.token.access_token.clone()), Some(cas.token.exp), Some(refresher)),
            custom_headers: None,
            repo_paths: vec![String::new()],
            session_id: None,
            cache_root: None,
        };
        let config = TranslatorConfig::new(&ctx, context).map_err(xet)?;
        let session = FileUploadSession::new(Arc::new(config)).await.map_err(xet)?;
        let (_, cleaner) = session.start_clean(Some(name.into()), Some(len), Sha256Policy::Skip).map_err(xet)?;
        let file = crate::safe_fs::open_regular(path).map_err(StreamError::Read)?;
        Ok(XetStream { session, cleaner, file, len, fed: 0 })
    }

    /// Hands Xet the file's bytes below `upto` (final, never written again) in whole blocks; the last, short
    /// block only once `upto` is the file's length.
    pub async fn feed_to(&mut self, upto: u64) -> Result<(), StreamError> {
        let upto = upto.min(self.len);
        loop {
            let end = self.fed.saturating_add(BLOCK).min(self.len);
            if end > upto || end == self.fed {
                return Ok(());
            }
            let file = self.file.try_clone().map_err(StreamError::Read)?;
            let block = map(file, self.fed, end).await?;
            self.cleaner.add_data_from_bytes(block).await.map_err(xet)?;
            self.fed = end;
        }
    }

    /// Bytes handed to Xet so far, from the file's start.
    pub fn fed(&self) -> u64 {
        self.fed
    }

    /// Ends the stream once the whole file is final and its SHA-256 is `sha256`: the rest fed, the file's
    /// entry registered under that digest, the session's xorbs and shard uploaded. What the CAS stored, and
    /// the bytes sent.
    pub async fn finish(mut self, sha256: &str) -> Result<(Stored, u64), StreamError> {
        let digest = Sha256::from_hex(sha256).map_err(|_| StreamError::Digest(sha256.to_owned()))?;
        self.feed_to(self.len).await?;
        let (info, _, mut entry, _) = self.cleaner.finish_with_chunks_detached().await.map_err(xet)?;
        if info.file_size != Some(self.len) {
            return Err(StreamError::Xet(format!("{:?} bytes chunked of {}", info.file_size, self.len)));
        }
        // As Xet writes an entry whose digest was given: the extension, and the header saying it is there.
        let header = &entry.metadata;
        entry.metadata =
            FileDataSequenceHeader::new(header.file_hash, entry.segments.len(), !entry.verification.is_empty(), true);
        entry.metadata_ext = Some(FileMetadataExt::new(digest));
        self.session.register_composed_file(entry).await.map_err(xet)?;
        let metrics = self.session.finalize().await.map_err(xet)?;
        Ok((Stored { sha256: sha256.to_owned(), size: self.len }, metrics.total_bytes_uploaded))
    }
}

/// Maps `[from, to)` of `file`, its pages read in, on a batch thread.
async fn map(file: File, from: u64, to: u64) -> Result<Bytes, StreamError> {
    let mapped =
        crate::blocking::run("mapping a file for its upload", move || super::blocks::map_range(&file, from, to));
    mapped.await.map_err(|e| StreamError::Read(std::io::Error::other(e)))?.map_err(StreamError::Read)
}
