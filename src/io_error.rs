//! An I/O failure that says which file and which operation, so no error message reads "No such file".

use std::io;
use std::path::{Path, PathBuf};

use thiserror::Error;

/// An I/O error with the path it concerns and what was being done.
#[derive(Debug, Error)]
#[error("{}: {op}: {source}", path.display())]
pub struct PathIoError {
    /// The file or directory concerned.
    pub path: PathBuf,
    /// What was being done: "read", "rename into place", ….
    pub op: &'static str,
    /// The failure.
    #[source]
    pub source: io::Error,
}

impl PathIoError {
    /// A `map_err` adapter: `file.read(..).map_err(PathIoError::at(path, "read"))`.
    pub fn at(path: &Path, op: &'static str) -> impl FnOnce(io::Error) -> PathIoError {
        let path = path.to_owned();
        move |source| PathIoError { path, op, source }
    }
}

/// The kind of the first I/O failure in `e`'s chain of causes, if any. It lets a caller tell a full disk
/// from a bad file after the error has been wrapped.
pub(crate) fn io_kind_in(e: &(dyn std::error::Error + 'static)) -> Option<io::ErrorKind> {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<io::Error>() {
            return Some(io.kind());
        }
        cause = c.source();
    }
    None
}
