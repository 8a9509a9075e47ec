//! One file sent to a mirror's CAS while it is still being written, its SHA-256 named once it is known.
//!
//! Xet's own upload stream fixes how the file's SHA-256 (the LFS oid the commit names) is had when the stream
//! opens: computed by Xet from the bytes, or given. A reordered shard's digest is known only once its last
//! byte has landed (the writer takes it as the bytes land: `repair::new_file_digest`), and taking it a second time in
//! Xet would hash every byte twice. So this drives Xet's file cleaner itself: it chunks the file with no
//! digest of its own, and once the file is whole, the digest the writer took is written into the file's entry
//! (its metadata extension) before the entry is registered, as Xet's own upload does with a digest given.
//!
//! The file is fed as read-only maps of its own pages (see [`blocks`](crate::repack::upload::blocks)): only what the writer
//! has said is final, which is never written again.

use std::fs::File;
use std::sync::Arc;

use bytes::Bytes;
use xet_client::cas_client::auth::{AuthConfig, DirectRefreshRouteTokenRefresher, TokenRefresher};
use xet_client::common::http_client::build_http_client;
use xet_core_structures::metadata_shard::Sha256;
use xet_core_structures::metadata_shard::file_structs::{FileDataSequenceHeader, FileMetadataExt};
use xet_data::processing::configurations::{SessionContext, TranslatorConfig};
use xet_data::processing::{FileUploadSession, Sha256Policy, SingleFileCleaner};
use xet_runtime::core::XetContext;

use crate::blocking::BlockingError;
use crate::hub::commit::XetToken;
use crate::repack::upload::Stored;
use crate::repack::upload::blocks::BLOCK;
use crate::safe_fs::FileId;

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
    file: Arc<File>,
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
    Xet(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A batch thread for the work could not run it.
    #[error(transparent)]
    Blocking(#[from] BlockingError),
    /// The digest given is not a SHA-256.
    #[error("not a SHA-256: {0:?}")]
    Digest(String),
    /// The file at the end is not the one the writer named (another file, or changed since).
    #[error("the file changed while it was sent")]
    Changed,
}

fn xet(e: impl std::error::Error + Send + Sync + 'static) -> StreamError {
    StreamError::Xet(Box::new(e))
}

impl XetStream {
    /// Opens a stream of `file` (open already, its final length `len`) as `name`, to `cas`. Deduplication
    /// reads the shard cache as the session opens, so priming goes first.
    pub async fn open(cas: Cas<'_>, name: &str, file: Arc<File>, len: u64) -> Result<XetStream, StreamError> {
        let ctx = XetContext::with_config(crate::repack::upload::xet_config().map_err(xet)?).map_err(xet)?;
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
        // The configuration makes the session's cache directories.
        let config = crate::blocking::run("Xet's cache directories", move || TranslatorConfig::new(&ctx, context));
        let config = config.await?.map_err(xet)?;
        let session = FileUploadSession::new(Arc::new(config)).await.map_err(xet)?;
        let (_, cleaner) = session.start_clean(Some(name.into()), Some(len), Sha256Policy::Skip).map_err(xet)?;
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
            let block = map(Arc::clone(&self.file), self.fed, end).await?;
            self.cleaner.add_data_from_bytes(block).await.map_err(xet)?;
            self.fed = end;
        }
    }

    /// Bytes handed to Xet so far, from the file's start.
    pub fn fed(&self) -> u64 {
        self.fed
    }

    /// Ends the stream once the writer says the file is whole: the file `id` it synced, whose SHA-256 is
    /// `sha256`. The rest is fed, the file's entry registered under that digest, and the session's xorbs and
    /// shard uploaded. What the CAS stored, and the bytes sent.
    pub async fn finish(mut self, id: FileId, sha256: &str) -> Result<(Stored, u64), StreamError> {
        let digest = Sha256::from_hex(sha256).map_err(|_| StreamError::Digest(sha256.to_owned()))?;
        // The digest is this file's only if the file read is the one the writer hashed and synced.
        if FileId::of_open(&self.file) != Some(id) {
            return Err(StreamError::Changed);
        }
        self.feed_to(self.len).await?;
        let (_, _, mut entry, _) = self.cleaner.finish_with_chunks_detached().await.map_err(xet)?;
        // As Xet writes the entry of a file whose digest was given: the extension, and a header saying so.
        let hash = entry.metadata.file_hash;
        entry.metadata = FileDataSequenceHeader::new(hash, entry.segments.len(), true, true);
        entry.metadata_ext = Some(FileMetadataExt::new(digest));
        self.session.register_composed_file(entry).await.map_err(xet)?;
        let metrics = self.session.finalize().await.map_err(xet)?;
        Ok((Stored { sha256: digest.hex(), size: self.len }, metrics.total_bytes_uploaded))
    }
}

/// Maps `[from, to)` of `file`, its pages read in, on a batch thread.
async fn map(file: Arc<File>, from: u64, to: u64) -> Result<Bytes, StreamError> {
    let mapped = crate::blocking::run("mapping a file for its upload", move || {
        crate::repack::upload::blocks::map_range(&file, from, to)
    });
    mapped.await?.map_err(StreamError::Read)
}
