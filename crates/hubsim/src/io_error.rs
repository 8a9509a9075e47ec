//! Wraps an I/O failure with the file and the operation, so no error message reads "No such file" alone.

use std::io;
use std::path::{Path, PathBuf};

use thiserror::Error;

/// An I/O error with the path it concerns and what was being done.
#[derive(Debug, Error)]
#[error("{}: {op}: {source}", path.display())]
pub struct PathIoError {
    /// The file or directory concerned.
    pub path: PathBuf,
    /// What was being done ("read", "stat", …).
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
