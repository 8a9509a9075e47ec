//! Checks that a job fits the work directory's disk before any byte is downloaded, by asking the filesystem
//! (`statvfs`). One repo larger than the disk must not fill it and stop every job after it.
//!
//! A job larger than the whole filesystem fails for size. A job that does not fit now is tried again later,
//! spending an attempt, while smaller jobs go on. Only a disk too full for any job needs the operator:
//! one with less than [`RESERVE`] free.

use std::path::Path;

use crate::repack::error::RepackError;
use crate::report::human_bytes;

/// Space kept free beyond what a job needs, and the least a disk must have free for any job to start.
pub(crate) const RESERVE: u64 = 256 << 20;

/// Bytes a job needs on disk: what is still to download, the re-laid copy beside it, and the reserve.
/// The re-laid copy takes at most the bundle's size again.
pub(crate) fn need(to_fetch: u64, bundle: u64) -> u64 {
    to_fetch.saturating_add(bundle).saturating_add(RESERVE)
}

/// The filesystem holding a path: bytes free to this process and bytes in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Space {
    /// Free to an unprivileged process.
    pub free: u64,
    /// The filesystem's size.
    pub capacity: u64,
}

/// Asks the filesystem holding `dir`.
pub(crate) fn space(dir: &Path) -> std::io::Result<Space> {
    let stat = rustix::fs::statvfs(dir)?;
    let block = stat.f_frsize.max(1);
    Ok(Space { free: stat.f_bavail.saturating_mul(block), capacity: stat.f_blocks.saturating_mul(block) })
}

/// Whether `need` bytes fit the disk holding `dir`, as a job's failure if not.
pub(crate) fn check(dir: &Path, need: u64) -> Result<(), RepackError> {
    let space = space(dir).map_err(|e| RepackError::io(format_args!("{}: free space", dir.display()), e))?;
    judge(need, space, dir)
}

/// [`check`]'s decision for a known `space`.
pub(crate) fn judge(need: u64, space: Space, dir: &Path) -> Result<(), RepackError> {
    let (need_h, free_h) = (human_bytes(need), human_bytes(space.free));
    if space.free < RESERVE {
        return Err(RepackError::needs_operator(format!(
            "{}: only {free_h} free, less than the {} any job needs: free space there or give --work-dir another disk",
            dir.display(),
            human_bytes(RESERVE)
        )));
    }
    if need > space.capacity {
        return Err(RepackError::permanent(format!(
            "too large for this worker: the job needs {need_h} on disk, more than the whole filesystem of {} ({})",
            dir.display(),
            human_bytes(space.capacity)
        )));
    }
    if need > space.free {
        return Err(RepackError::transient(format!(
            "the job needs {need_h} on disk and {} has {free_h} free now; tried again later",
            dir.display()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::FailureKind;

    #[test]
    fn a_job_fits_waits_or_fails_for_size_and_only_a_full_disk_needs_the_operator() {
        let dir = Path::new("/work");
        let gib = 1u64 << 30;
        let disk = |free| Space { free, capacity: 100 * gib };
        assert!(judge(need(gib, gib), disk(10 * gib), dir).is_ok());
        let later = judge(need(20 * gib, 20 * gib), disk(10 * gib), dir).unwrap_err();
        assert_eq!(later.kind(), FailureKind::Transient, "{}", later.reason());
        let never = judge(need(80 * gib, 80 * gib), disk(90 * gib), dir).unwrap_err();
        assert_eq!(never.kind(), FailureKind::Permanent, "{}", never.reason());
        assert!(never.reason().contains("too large for this worker"), "{}", never.reason());
        let full = judge(need(1, 1), disk(RESERVE - 1), dir).unwrap_err();
        assert_eq!(full.kind(), FailureKind::NeedsOperator, "{}", full.reason());
        assert!(full.reason().contains("--work-dir"), "the message names the fix: {}", full.reason());
        assert_eq!(need(u64::MAX, u64::MAX), u64::MAX, "a lying size cannot overflow the sum");
    }

    #[test]
    fn the_filesystem_answers_for_a_real_directory() {
        let dir = tempfile::tempdir().unwrap();
        let space = space(dir.path()).unwrap();
        assert!(space.capacity >= space.free && space.capacity > 0, "{space:?}");
    }
}
