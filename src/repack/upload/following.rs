//! A reordered shard's upload following its writes, as the MLX check does ([`follow`](crate::repack::checks::mlx::follow)).
//!
//! A reorder writes its new file in the source's order of tensors, and its digests reach each byte soon after
//! it lands (`repair::new_file_digest`). The bytes they have reached are final. Sent to the mirror's CAS only after
//! the download, a reordered GiB kept one core chunking for a second with the other idle, the last second of
//! the whole repack (BENCHMARKS.md). So the writer tells how far its new file is final, and the upload
//! chunks up to there while the rest downloads; once the file is whole its SHA-256, taken as it was written,
//! is named for it ([`xet_stream`](crate::repack::upload::xet_stream)).
//!
//! The writer never waits on the upload: it sends on an unbounded channel, a few events per 8 MiB. An upload
//! that fails only leaves the shard to be sent once it is kept, as the others are. What went up counts only
//! for a shard the download then kept (its source matched the Hub's hash; one that does not fails the
//! download, and what the follow sent stays unreferenced in the CAS), and the publish step uses it only while
//! the staged file is the very one sent.

use std::path::PathBuf;
use std::sync::Arc;

use crate::hub::HubClient;
use crate::repack::upload::Stored;
use crate::repack::upload::prime;
use crate::repack::upload::xet_stream::{Cas, StreamError, XetStream};
use crate::safe_fs::FileId;

/// What a reorder's writer tells of one shard's new file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteEvent {
    /// The new file is being written at `path` (a temporary name), `len` bytes long in the end.
    Writing {
        /// Where it is written.
        path: PathBuf,
        /// Its final length.
        len: u64,
    },
    /// The source's first bytes ([`prime::PRIME_HEAD`] of them, or all), to prime deduplication with.
    SourceHead {
        /// The bytes.
        head: Vec<u8>,
        /// Whether they are the whole source.
        whole: bool,
    },
    /// The new file's first bytes up to here are final.
    Final(u64),
    /// The new file is whole and synced: the file it is (by identity), and its SHA-256.
    Whole {
        /// The file.
        id: FileId,
        /// Its digest.
        sha256: String,
    },
}

/// One event, for the shard named `file` in the bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileWriteEvent {
    /// The shard's name in the bundle.
    pub file: String,
    /// What is told.
    pub event: WriteEvent,
}

/// Where a reorder's writer tells of its new file; cloned into each shard's writer. Nothing waits on it.
#[derive(Debug, Clone)]
pub struct WriteEventSink(tokio::sync::mpsc::UnboundedSender<FileWriteEvent>);

impl WriteEventSink {
    /// A sink and the receiving end the uploads ahead read.
    pub fn channel() -> (WriteEventSink, tokio::sync::mpsc::UnboundedReceiver<FileWriteEvent>) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        (WriteEventSink(tx), rx)
    }

    /// Tells `event` of `file`, if anyone still listens.
    pub fn tell(&self, file: &str, event: WriteEvent) {
        let _ = self.0.send(FileWriteEvent { file: file.to_owned(), event });
    }
}

/// A shard sent as it was written.
#[derive(Debug)]
pub struct SentAsWritten {
    /// The file sent.
    pub id: FileId,
    /// What the CAS stored.
    pub stored: Stored,
    /// The bytes sent.
    pub bytes: u64,
}

/// A reorder whose upload starts to follow its writes.
#[derive(Debug)]
pub struct FollowStart {
    /// The shard's name in the bundle.
    pub file: String,
    /// Where its new file is written.
    pub path: PathBuf,
    /// The new file's final length.
    pub len: u64,
    /// The writer's events about it from now on.
    pub events: tokio::sync::mpsc::UnboundedReceiver<WriteEvent>,
}

/// Why an upload that followed the writes ended without the shard.
#[derive(Debug, thiserror::Error)]
pub enum UploadFollowError {
    /// The new file could not be opened.
    #[error("opening the new file: {0}")]
    Open(#[source] std::io::Error),
    /// The write token could not be had.
    #[error("the write token: {0}")]
    Token(#[source] super::RepackError),
    /// The stream failed.
    #[error(transparent)]
    Stream(#[from] StreamError),
    /// The writer stopped before the file was whole (a failed transfer, or a source that ended early).
    #[error("the writer stopped before the file was whole")]
    Abandoned,
    /// A batch thread for the work could not run it.
    #[error(transparent)]
    Blocking(#[from] crate::blocking::BlockingError),
}

/// Sends the new file `start` names to `target`'s CAS as it becomes final, as the writer tells of it.
/// The `Writing` event that started it is taken already.
pub async fn follow(
    hub: &HubClient,
    target: &str,
    FollowStart { file, path, len, mut events }: FollowStart,
) -> Result<SentAsWritten, UploadFollowError> {
    // Opened first, by the name the writer gave: once kept, the file is renamed (the open one stays the same).
    let opened = crate::blocking::run("opening a new file", move || crate::safe_fs::open_regular(&path));
    let opened = Arc::new(opened.await?.map_err(UploadFollowError::Open)?);
    let token = prime::write_token(hub, target.into()).await.map_err(UploadFollowError::Token)?;
    let refresh_url = hub.xet_write_token_url(target.into());
    let cas = || Cas { token: &token, refresh_url: &refresh_url, refresh_headers: hub.auth_headers(&refresh_url) };
    let mut stream = None;
    let mut upto = 0;
    while let Some(feed) = events.recv().await {
        match feed {
            WriteEvent::SourceHead { head, whole } => {
                // Deduplication reads what priming cached as the stream's session opens.
                prime::prime_with_head(&token, target, head, whole).await;
                let mut open = XetStream::open(cas(), &file, Arc::clone(&opened), len).await?;
                open.feed_to(upto).await?;
                stream = Some(open);
            }
            WriteEvent::Final(to) => {
                upto = upto.max(to);
                if let Some(stream) = &mut stream {
                    stream.feed_to(upto).await?;
                }
            }
            WriteEvent::Whole { id, sha256 } => {
                let stream = match stream {
                    Some(stream) => stream,
                    None => XetStream::open(cas(), &file, Arc::clone(&opened), len).await?,
                };
                let before = stream.fed();
                let (stored, bytes) = stream.finish(id, &sha256).await?;
                tracing::info!(repo.id = %target, shard.file = %file, bytes.before_whole = before, bytes.sent = bytes, "uploaded as it was written");
                return Ok(SentAsWritten { id, stored, bytes });
            }
            WriteEvent::Writing { .. } => {}
        }
    }
    Err(UploadFollowError::Abandoned)
}
