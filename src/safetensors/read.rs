//! Reading a shard's header from disk with as few bytes as possible.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use thiserror::Error;

use super::error::HeaderError;
use super::header::{self, Header, LEN_PREFIX};

/// Bytes read up front: most MLX headers fit, so most shards cost one read.
pub const PROBE_BYTES: u64 = 64 * 1024;

/// A parsed header with the raw bytes a plan needs and what reading it cost.
#[derive(Debug, Clone)]
pub struct ShardHeader {
    /// The validated header.
    pub header: Header,
    /// The `N` header bytes exactly as stored.
    pub raw_json: Vec<u8>,
    /// Bytes read from the file.
    pub bytes_read: u64,
}

/// Why a shard's header could not be read, naming the file.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ReadError {
    /// The file could not be opened or read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The shard.
        path: PathBuf,
        /// The I/O failure.
        #[source]
        source: io::Error,
    },
    /// The file breaks the safetensors format.
    #[error("{}: {source}", path.display())]
    Format {
        /// The shard.
        path: PathBuf,
        /// The rule it breaks.
        #[source]
        source: HeaderError,
    },
}

impl ReadError {
    /// The format violation, if that is what this is.
    pub fn format_error(&self) -> Option<&HeaderError> {
        match self {
            ReadError::Format { source, .. } => Some(source),
            ReadError::Io { .. } => None,
        }
    }
}

/// Reads and validates the header of the shard at `path`: one read of up to [`PROBE_BYTES`], and a second
/// only for the rest of a longer header.
pub fn read_shard_header(path: &Path) -> Result<ShardHeader, ReadError> {
    let io_err = |source| ReadError::Io { path: path.to_owned(), source };
    let mut file = File::open(path).map_err(io_err)?;
    let file_size = file.metadata().map_err(io_err)?.len();
    let mut buf = Vec::new();
    (&mut file).take(PROBE_BYTES.min(file_size)).read_to_end(&mut buf).map_err(io_err)?;
    let header = match header::parse(&buf, file_size) {
        Err(HeaderError::Incomplete { needed, .. }) => {
            let have = buf.len() as u64;
            buf.resize(needed as usize, 0);
            file.seek(SeekFrom::Start(have)).map_err(io_err)?;
            file.read_exact(&mut buf[have as usize..]).map_err(io_err)?;
            header::parse(&buf, file_size)
        }
        other => other,
    }
    .map_err(|source| ReadError::Format { path: path.to_owned(), source })?;
    let bytes_read = buf.len() as u64;
    buf.truncate(header.data_start() as usize);
    buf.drain(..LEN_PREFIX as usize);
    Ok(ShardHeader { header, raw_json: buf, bytes_read })
}
