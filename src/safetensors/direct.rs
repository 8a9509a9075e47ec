//! Writing a stream to a file past the page cache (`O_DIRECT`), from the buffers the hashing already reads.
//!
//! A header-padded shard is its new prefix followed by the source's payload, in order. Copying it with
//! copy_file_range costs the kernel about a CPU-second per 2 GiB here (page-cache pages allocated, filled
//! and written back), a core that `fix` needs for hashing. Writing the bytes it has read anyway, straight to
//! the disk, costs a copy into an aligned staging buffer and almost nothing in the kernel.

use std::fs::{File, OpenOptions};
use std::io;
#[cfg(unix)]
use std::os::unix::fs::FileExt;
use std::path::Path;

/// The alignment `O_DIRECT` wants of offsets, lengths and memory; 4 KiB covers every block size in use.
const DIRECT_ALIGN: usize = 4096;
/// Bytes gathered before each write.
const STAGING_BYTES: usize = 8 << 20;

/// Writes a stream front to back into an existing file, through `O_DIRECT` where the file system takes it and
/// through the page cache otherwise.
pub struct DirectWriter {
    direct: Option<File>,
    buffered: File,
    storage: Vec<u8>,
    start: usize,
    filled: usize,
    written: u64,
}

impl DirectWriter {
    /// A writer into `path`, already open as `buffered`, from its first byte. `prefer_direct` false, or a
    /// file system that refuses `O_DIRECT`, writes through the page cache instead.
    pub fn new(path: &Path, buffered: File, prefer_direct: bool) -> DirectWriter {
        let direct = prefer_direct.then(|| open_direct(path).ok()).flatten();
        let storage = vec![0u8; STAGING_BYTES + DIRECT_ALIGN];
        let start = storage.as_ptr().align_offset(DIRECT_ALIGN).min(DIRECT_ALIGN);
        DirectWriter { direct, buffered, storage, start, filled: 0, written: 0 }
    }

    /// Whether bytes still go past the page cache.
    pub fn is_direct(&self) -> bool {
        self.direct.is_some()
    }

    /// Appends bytes to the stream; errors are the file's.
    pub fn write(&mut self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let took = self.stage(data);
            data = &data[took..];
            if self.filled == STAGING_BYTES {
                self.write_staged(STAGING_BYTES)?;
                self.filled = 0;
            }
        }
        Ok(())
    }

    /// Writes what is staged and cuts the file to the stream's length; the caller syncs it.
    pub fn finish(mut self) -> io::Result<u64> {
        let len = self.written + self.filled as u64;
        // A direct write must end on the alignment: the tail goes out zero-padded and the file is cut back.
        let padded = self.filled.next_multiple_of(DIRECT_ALIGN);
        let staging = &mut self.storage[self.start..self.start + STAGING_BYTES];
        staging[self.filled..padded].fill(0);
        self.write_staged(padded)?;
        self.buffered.set_len(len)?;
        Ok(len)
    }

    fn stage(&mut self, data: &[u8]) -> usize {
        let take = data.len().min(STAGING_BYTES - self.filled);
        let at = self.start + self.filled;
        self.storage[at..at + take].copy_from_slice(&data[..take]);
        self.filled += take;
        take
    }

    fn write_staged(&mut self, len: usize) -> io::Result<()> {
        let staging = &self.storage[self.start..self.start + len];
        if let Some(direct) = &self.direct {
            match write_all_at(direct, staging, self.written) {
                Ok(()) => {
                    self.written += len as u64;
                    return Ok(());
                }
                // Opened but refused on writing (some file systems): the page cache it is, from here on.
                Err(e) if e.raw_os_error() == Some(EINVAL) => self.direct = None,
                Err(e) => return Err(e),
            }
        }
        write_all_at(&self.buffered, staging, self.written)?;
        self.written += len as u64;
        Ok(())
    }
}

#[cfg(target_os = "linux")]
const EINVAL: i32 = libc::EINVAL;
#[cfg(not(target_os = "linux"))]
const EINVAL: i32 = 22;

#[cfg(target_os = "linux")]
fn open_direct(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new().write(true).custom_flags(libc::O_DIRECT).open(path)
}

/// Other systems have no `O_DIRECT` (macOS's `F_NOCACHE` is a different call); they write through the cache.
#[cfg(not(target_os = "linux"))]
fn open_direct(_path: &Path) -> io::Result<File> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

#[cfg(unix)]
fn write_all_at(file: &File, data: &[u8], offset: u64) -> io::Result<()> {
    file.write_all_at(data, offset)
}

#[cfg(not(unix))]
fn write_all_at(mut file: &File, data: &[u8], offset: u64) -> io::Result<()> {
    use std::io::{Seek, SeekFrom, Write};
    file.seek(SeekFrom::Start(offset))?;
    file.write_all(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_through(prefer_direct: bool, prefix: &[u8], pieces: &[usize]) -> (Vec<u8>, Vec<u8>, bool) {
        // Under target/, on the disk the project builds on, not a tmpfs.
        let parent = concat!(env!("CARGO_MANIFEST_DIR"), "/target");
        std::fs::create_dir_all(parent).unwrap();
        let dir = tempfile::tempdir_in(parent).unwrap();
        let path = dir.path().join("out");
        let file = File::create(&path).unwrap();
        let mut writer = DirectWriter::new(&path, file, prefer_direct);
        writer.write(prefix).unwrap();
        let mut expected = prefix.to_vec();
        for (i, &n) in pieces.iter().enumerate() {
            let piece: Vec<u8> = (0..n).map(|j| (i * 31 + j * 7) as u8).collect();
            writer.write(&piece).unwrap();
            expected.extend_from_slice(&piece);
        }
        let direct = writer.is_direct();
        assert_eq!(writer.finish().unwrap(), expected.len() as u64);
        (std::fs::read(&path).unwrap(), expected, direct)
    }

    #[test]
    fn the_file_holds_the_stream_exactly_with_and_without_o_direct() {
        let pieces = [3, STAGING_BYTES - 11, 4096, 0, STAGING_BYTES + 5000, 1];
        for prefer_direct in [true, false] {
            // A header may be up to 100 MB, more than the staging buffer holds.
            let long_header = vec![b' '; STAGING_BYTES + 100];
            for prefix in [&b""[..], b"\x08\0\0\0\0\0\0\0{}      ", &long_header] {
                let (written, expected, direct) = write_through(prefer_direct, prefix, &pieces);
                assert_eq!(written.len(), expected.len());
                assert!(written == expected, "direct {prefer_direct}, prefix {}", prefix.len());
                // This project builds on ext4, which takes O_DIRECT; the fast path must be the one tested.
                #[cfg(target_os = "linux")]
                assert_eq!(direct, prefer_direct, "O_DIRECT refused under {}", env!("CARGO_MANIFEST_DIR"));
            }
        }
        let (written, expected, _) = write_through(true, b"", &[]);
        assert_eq!((written, expected), (vec![], vec![]));
    }
}
