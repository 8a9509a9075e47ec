//! Writes a stream to a file past the page cache (`O_DIRECT`), from the buffers the hashing already reads.
//!
//! A header-padded shard is its new prefix followed by the source's payload, in order. Copying it with
//! copy_file_range makes the kernel allocate, fill and write back page-cache pages. That costs CPU that `fix`
//! needs for hashing: about a CPU-second per 2 GiB here. Writing the bytes already read straight to the disk
//! costs a copy into an aligned staging buffer. It costs almost nothing in the kernel.

use std::fs::{File, OpenOptions};
use std::io;
#[cfg(unix)]
use std::os::unix::fs::FileExt;
use std::path::Path;

/// The alignment `O_DIRECT` wants of offsets, lengths and memory. 4 KiB covers every block size in use.
const DIRECT_ALIGN: usize = 4096;
/// Bytes gathered before each write. Each write is large enough to keep the disk busy for milliseconds. It is
/// small enough that a download writing two shards at once stays within its memory bound.
const STAGING_BYTES: usize = 4 << 20;

/// A staging buffer whose usable part starts on the alignment.
struct Staging {
    storage: Vec<u8>,
    start: usize,
}

impl Staging {
    fn new() -> Staging {
        let storage = vec![0u8; STAGING_BYTES + DIRECT_ALIGN];
        let start = storage.as_ptr().align_offset(DIRECT_ALIGN).min(DIRECT_ALIGN);
        Staging { storage, start }
    }

    fn bytes(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + STAGING_BYTES]
    }
}

/// A write for the I/O thread: the buffer, how much of it, and where in the file.
type Job = (Staging, usize, u64);

/// Writes a stream front to back into an existing file. It uses `O_DIRECT` where the file system takes it and
/// the page cache otherwise. Two staging buffers take turns: one fills while a thread of its own writes the
/// other. So the disk never waits while the next buffer fills.
pub(crate) struct DirectWriter {
    buffered: File,
    staging: Option<Staging>,
    filled: usize,
    /// Bytes handed to the I/O thread.
    written: u64,
    to_io: Option<std::sync::mpsc::SyncSender<Job>>,
    back: std::sync::mpsc::Receiver<(Staging, io::Result<()>)>,
    /// Buffers now with the I/O thread, and buffers made. At most two are made: one fills while one is
    /// written.
    in_flight: usize,
    allocated: usize,
    io: Option<std::thread::JoinHandle<()>>,
    /// Whether bytes still go past the page cache, for the tests that hold the fast path.
    #[cfg(test)]
    direct: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl DirectWriter {
    /// Makes a writer into `path`, already open as `buffered`, from its first byte. It writes through the
    /// page cache if `prefer_direct` is false or the file system refuses `O_DIRECT`.
    pub(crate) fn new(path: &Path, buffered: File, prefer_direct: bool) -> DirectWriter {
        let direct_file = prefer_direct.then(|| open_direct(path).ok()).flatten();
        let still_direct = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(direct_file.is_some()));
        #[cfg(test)]
        let direct = still_direct.clone();
        let (to_io, jobs) = std::sync::mpsc::sync_channel::<Job>(1);
        let (done, back) = std::sync::mpsc::sync_channel(2);
        let writes = buffered.try_clone();
        let io = std::thread::Builder::new()
            .name("direct writer".into())
            .spawn(move || {
                let mut target = Target { direct: direct_file, buffered: writes, still_direct };
                for (staging, len, offset) in jobs {
                    let result = target.write(&staging.storage[staging.start..staging.start + len], offset);
                    if done.send((staging, result)).is_err() {
                        break;
                    }
                }
            })
            .ok();
        DirectWriter {
            buffered,
            staging: Some(Staging::new()),
            filled: 0,
            written: 0,
            to_io: Some(to_io),
            back,
            in_flight: 0,
            allocated: 1,
            io,
            #[cfg(test)]
            direct,
        }
    }

    /// Whether bytes still go past the page cache.
    #[cfg(test)]
    pub(crate) fn is_direct(&self) -> bool {
        self.direct.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Appends bytes to the stream. Errors come from the file.
    pub(crate) fn write(&mut self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let took = self.stage(data)?;
            data = &data[took..];
            if self.filled == STAGING_BYTES {
                self.hand_over(STAGING_BYTES)?;
            }
        }
        Ok(())
    }

    /// Writes what is staged, waits for every write, and cuts the file to the stream's length. The caller
    /// syncs the file.
    pub(crate) fn finish(mut self) -> io::Result<u64> {
        let len = self.written + self.filled as u64;
        // A direct write must end on the alignment. So the tail goes out zero-padded, and the file is cut
        // back.
        let padded = self.filled.next_multiple_of(DIRECT_ALIGN);
        let filled = self.filled;
        self.current()?.bytes()[filled..padded].fill(0);
        self.hand_over(padded)?;
        while self.in_flight > 0 {
            self.take_back()?;
        }
        self.to_io = None;
        if let Some(io) = self.io.take() {
            io.join().map_err(|_| io::Error::other("the direct writer's thread panicked"))?;
        }
        self.buffered.set_len(len)?;
        Ok(len)
    }

    /// Returns the buffer to fill. That is the one in hand, or a new one while fewer than two exist.
    /// Otherwise it waits for the next buffer back from the I/O thread.
    fn current(&mut self) -> io::Result<&mut Staging> {
        if self.staging.is_none() {
            let next = if self.allocated < 2 {
                self.allocated += 1;
                Staging::new()
            } else {
                self.take_back()?
            };
            self.staging = Some(next);
        }
        self.staging.as_mut().ok_or_else(|| io::Error::other("no staging buffer"))
    }

    fn stage(&mut self, data: &[u8]) -> io::Result<usize> {
        let filled = self.filled;
        let take = data.len().min(STAGING_BYTES - filled);
        self.current()?.bytes()[filled..filled + take].copy_from_slice(&data[..take]);
        self.filled += take;
        Ok(take)
    }

    /// Sends the staged buffer's first `len` bytes to the I/O thread.
    fn hand_over(&mut self, len: usize) -> io::Result<()> {
        let staging = match self.staging.take() {
            Some(staging) => staging,
            None if len == 0 => return Ok(()),
            None => return Err(io::Error::other("nothing staged")),
        };
        let gone = || io::Error::other("the direct writer's thread stopped");
        let to_io = self.to_io.as_ref().ok_or_else(gone)?;
        to_io.send((staging, len, self.written)).map_err(|_| gone())?;
        self.in_flight += 1;
        self.written += len as u64;
        self.filled = 0;
        Ok(())
    }

    /// Waits for a write to finish and returns its buffer, or its error.
    fn take_back(&mut self) -> io::Result<Staging> {
        let (staging, result) = self.back.recv().map_err(|_| io::Error::other("the direct writer's thread stopped"))?;
        self.in_flight -= 1;
        result.map(|()| staging)
    }
}

/// Where the I/O thread writes: past the page cache while the file system takes it.
struct Target {
    direct: Option<File>,
    buffered: io::Result<File>,
    still_direct: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Target {
    fn write(&mut self, data: &[u8], offset: u64) -> io::Result<()> {
        if let Some(direct) = &self.direct {
            match write_all_at(direct, data, offset) {
                Ok(()) => return Ok(()),
                // Some file systems open the file but refuse the write. Use the page cache from here on.
                Err(e) if e.raw_os_error() == Some(EINVAL) => {
                    self.direct = None;
                    self.still_direct.store(false, std::sync::atomic::Ordering::Relaxed);
                }
                Err(e) => return Err(e),
            }
        }
        match &self.buffered {
            Ok(file) => write_all_at(file, data, offset),
            Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
        }
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

/// Other systems have no `O_DIRECT`, so they write through the cache. macOS's `F_NOCACHE` is a different
/// call.
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
        // Write under target/, on the disk the project builds on, not on a tmpfs.
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
                // This project builds on ext4, which takes O_DIRECT. The test must cover the fast path.
                #[cfg(target_os = "linux")]
                assert_eq!(direct, prefer_direct, "O_DIRECT refused under {}", env!("CARGO_MANIFEST_DIR"));
            }
        }
        let (written, expected, _) = write_through(true, b"", &[]);
        assert_eq!((written, expected), (vec![], vec![]));
    }
}
