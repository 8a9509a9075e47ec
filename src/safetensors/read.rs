//! Reads a shard's header from disk with as few bytes as possible.

use std::io::{self, Read};
use std::path::{Path, PathBuf};

use thiserror::Error;

use super::error::HeaderError;
use super::header::{self, Header, LEN_PREFIX};

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
        /// Bytes read before the broken rule was found. It keeps an audit's count of reads true.
        bytes_read: u64,
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

/// Reads and validates the header of the shard at `path`. It reads exactly the `8 + N` header bytes: the
/// length prefix, then the header. Remote probes instead read a generous prefix in one request and hand it to
/// `header::parse`, since there a round trip costs more than bytes.
pub fn read_shard_header(path: &Path) -> Result<ShardHeader, ReadError> {
    let io_err = |source| ReadError::Io { path: path.to_owned(), source };
    let format_err = |source, bytes_read| ReadError::Format { path: path.to_owned(), source, bytes_read };
    let mut file = crate::safe_fs::open_regular(path).map_err(io_err)?;
    let file_size = file.metadata().map_err(io_err)?.len();
    let mut prefix = [0u8; LEN_PREFIX as usize];
    let got = (&mut file).take(LEN_PREFIX).read(&mut prefix).map_err(io_err)?;
    let header_len = header::read_header_len(&prefix[..got], file_size).map_err(|e| format_err(e, got as u64))?;
    let mut buf = prefix.to_vec();
    buf.resize((LEN_PREFIX + header_len) as usize, 0);
    file.read_exact(&mut buf[LEN_PREFIX as usize..]).map_err(io_err)?;
    let bytes_read = buf.len() as u64;
    let header = header::parse(&buf, file_size).map_err(|e| format_err(e, bytes_read))?;
    buf.drain(..LEN_PREFIX as usize);
    Ok(ShardHeader { header, raw_json: buf, bytes_read })
}
