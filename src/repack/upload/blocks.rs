//! Handing a file to Xet for a mirror's upload, as blocks of the file's own pages rather than copies.
//!
//! Xet keeps each chunk it has not seen before as a slice of the block the chunk came in, until the xorb
//! holding it is cut (64 MB of new chunks), and the slice keeps its whole block alive. In a reordered shard
//! the new chunks lie at every tensor's start, so nearly every block keeps one: read into Xet's own 8 MB
//! buffers, a reordered 1 GiB shard held 1.1 GB of the worker's anonymous memory until its upload ended, and
//! a larger shard would hold more (smaller blocks hold less, but Xet then finds shorter runs of stored chunks
//! per lookup and refuses more of them as fragments: 1 MiB blocks held 440 MiB and sent 6% more; blocks cut
//! small around each tensor start held 296 MiB and sent 30% more; BENCHMARKS.md). So each block is a
//! read-only map of the file itself: what a kept chunk holds is the page cache's, clean and reclaimable,
//! never the worker's own memory, and nothing is copied on the way in.
//!
//! A map of a file that another process truncates faults. The files sent are the job's own, in its work
//! directory, and no step writes over one in place: a re-layout or a new download writes a new file and
//! renames it over the old name, which leaves the mapped one whole.

use std::path::Path;

use bytes::Bytes;
use xet::xet_session::{Sha256Policy, UniqueId, XetUploadCommit};

/// A block: Xet's own ingestion block, rounded to pages.
pub(crate) const BLOCK: u64 = 8 << 20;
/// Blocks mapped ahead of Xet, at most: the reader stays a block or two in front of the chunking.
const READ_AHEAD: usize = 2;

/// Sends the file at `path` into `commit` as `rel`, in blocks of [`BLOCK`] mapped (and read in) on a batch
/// thread a few blocks ahead of Xet; the upload's task id. The file's SHA-256 (the LFS oid the commit names)
/// is `sha256` where the caller knows it for this very file, or else Xet computes it as it chunks.
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

/// Maps `path` block by block into `tx`, each block's pages read in as it is mapped. Stops early, without
/// error, once the receiver is gone.
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

/// A read-only map of bytes `[from, to)` of `file`, its pages read in. The caller vouches that nothing
/// writes over that range or truncates the file while the map lives (see the module's doc).
#[allow(unsafe_code)]
pub(crate) fn map_range(file: &std::fs::File, from: u64, to: u64) -> std::io::Result<Bytes> {
    let len = usize::try_from(to.saturating_sub(from)).map_err(std::io::Error::other)?;
    let mut options = memmap2::MmapOptions::new();
    options.offset(from).len(len).populate();
    // SAFETY: the range is never written over in place while mapped, nor the file truncated: the files sent
    // are the job's own, and a range is mapped only once final (see the module's doc); a map is only read.
    let map = unsafe { options.map(file) }?;
    Ok(Bytes::from_owner(map))
}
