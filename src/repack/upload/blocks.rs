//! Hands a file to Xet for a mirror's upload, as blocks of the file's own pages rather than copies.
//!
//! Xet keeps each chunk it has not seen before as a slice of the block the chunk came in. It keeps the slice
//! until the xorb holding it is cut, at 64 MB of new chunks, and the slice keeps its whole block alive.
//! In a reordered shard the new chunks lie at every tensor's start, so nearly every block keeps one.
//! Read into Xet's own buffers, a reordered shard kept nearly all its blocks in the worker's anonymous
//! memory until its upload ended. Smaller blocks hold less, but Xet then refuses more stored chunks as
//! fragments and sends more. See BENCHMARKS.md.
//! So each block is a read-only map of the file itself. A kept chunk then holds page cache, clean and
//! reclaimable, never the worker's own memory. Nothing is copied on the way in.
//!
//! A map of a file that another process truncates faults. The files sent are the job's own, in its work
//! directory, and no step writes over one in place. A re-layout or a new download writes a new file and
//! renames it over the old name, which leaves the mapped one whole.

use std::path::Path;

use bytes::Bytes;
use xet::xet_session::{Sha256Policy, UniqueId, XetUploadCommit};

/// A block: Xet's own ingestion block, rounded to pages.
pub(crate) const BLOCK: u64 = 8 << 20;
/// Blocks mapped ahead of Xet, at most: the reader stays a block or two in front of the chunking.
const READ_AHEAD: usize = 2;

/// Sends the file at `path` into `commit` as `rel`, in blocks of [`BLOCK`], and returns the upload's task id.
/// A batch thread maps and reads in the blocks a few ahead of Xet.
/// The file's SHA-256 is the LFS oid the commit names. The caller passes it as `sha256` when it knows it for
/// this very file; otherwise Xet computes it as it chunks.
pub(crate) async fn send(
    commit: &XetUploadCommit,
    rel: &str,
    path: &Path,
    sha256: Option<&str>,
) -> Result<UniqueId, SendError> {
    let policy = sha256.map_or(Sha256Policy::Compute, Sha256Policy::from_hex);
    let stream = commit.upload_stream(Some(rel.to_owned()), policy).await.map_err(SendError::xet)?;
    let (tx, mut rx) = tokio::sync::mpsc::channel(READ_AHEAD);
    let file = path.to_owned();
    let reader = crate::blocking::run("mapping a file for its upload", move || map_blocks(&file, &tx));
    let mut written = Ok(());
    while let Some(block) = rx.recv().await {
        if let Err(e) = stream.write(block).await {
            written = Err(SendError::xet(e));
            break;
        }
    }
    // A reader still sending stops once nobody receives.
    drop(rx);
    let read = reader.await.map_err(|e| SendError::Read(std::io::Error::other(e)))?;
    written?;
    read.map_err(SendError::Read)?;
    stream.finish().await.map_err(SendError::xet)?;
    Ok(stream.task_id())
}

/// Why a file could not be sent.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SendError {
    /// Reading it failed.
    #[error("reading it: {0}")]
    Read(#[source] std::io::Error),
    /// Xet refused it.
    #[error("{0}")]
    Xet(String),
}

impl SendError {
    fn xet(e: impl std::fmt::Display) -> SendError {
        SendError::Xet(e.to_string())
    }
}

/// Maps `path` block by block into `tx`, and reads in each block's pages as it maps them.
/// Stops early, without error, once the receiver is gone.
fn map_blocks(path: &Path, tx: &tokio::sync::mpsc::Sender<Bytes>) -> std::io::Result<()> {
    let file = crate::safe_fs::open_regular(path)?;
    let size = file.metadata()?.len();
    let mut at = 0;
    while at < size {
        let end = at + BLOCK.min(size - at);
        if tx.blocking_send(map_range(&file, at, end)?).is_err() {
            return Ok(());
        }
        at = end;
    }
    Ok(())
}

/// Maps bytes `[from, to)` of `file` read-only, and reads in their pages. The caller vouches that nothing
/// writes over that range or truncates the file while the map lives (see the module's doc).
#[allow(unsafe_code)]
pub(crate) fn map_range(file: &std::fs::File, from: u64, to: u64) -> std::io::Result<Bytes> {
    let len = usize::try_from(to.saturating_sub(from)).map_err(std::io::Error::other)?;
    let mut options = memmap2::MmapOptions::new();
    options.offset(from).len(len).populate();
    // SAFETY: nothing writes over the range in place or truncates the file while it is mapped. The files
    // sent are the job's own, and a range is mapped only once final (see the module's doc).
    // A map is only read.
    let map = unsafe { options.map(file) }?;
    Ok(Bytes::from_owner(map))
}
