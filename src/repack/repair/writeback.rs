//! Starting the disk's writes of a reordered file's final stretches while the download goes on.
//!
//! A reorder writes its new file through the page cache (each tensor lands at its own offset, which direct
//! writes cannot take), and the kernel starts writing dirty pages back only after 30 s or at a tenth of
//! memory. So a GiB written in three seconds all went to the disk at the shard's end, in the `fsync` that
//! makes it durable: half a second on this machine's disk with both cores idle (BENCHMARKS.md). A thread of
//! the shard's own syncs the file's data each time [`NewFileDigests`](super::new_file_digest::NewFileDigests) has hashed another
//! stretch of it (and so it is written), so the disk writes as the download goes and the last `fsync` finds
//! little left.

use std::fs::File;
use std::io;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;

/// The thread syncing one file, and how to ask it for another sync.
pub(super) struct Writeback {
    ask: SyncSender<()>,
    thread: JoinHandle<io::Result<u64>>,
}

impl Writeback {
    /// Starts the thread on its own handle of `file`; `None` (and the shard is synced at its end alone) if
    /// either cannot be had.
    pub(super) fn start(file: &File) -> Option<Writeback> {
        let file = file.try_clone().ok()?;
        // One request waiting is enough: the sync it starts covers everything written before it.
        let (ask, asked) = sync_channel(1);
        let thread = std::thread::Builder::new().name("writeback".into()).spawn(move || syncs(&file, &asked)).ok()?;
        Some(Writeback { ask, thread })
    }

    /// Asks for a sync of what is written so far, unless one is asked for already.
    pub(super) fn nudge(&self) {
        // Full: a sync is waiting and will cover these bytes too. Gone: the thread failed, and `finish` says
        // why.
        let _ = self.ask.try_send(());
    }

    /// Waits for the syncs asked for; how many ran, or the first failure.
    pub(super) fn finish(self) -> io::Result<u64> {
        drop(self.ask);
        self.thread.join().map_err(|_| io::Error::other("the writeback thread panicked"))?
    }
}

fn syncs(file: &File, asked: &Receiver<()>) -> io::Result<u64> {
    let mut ran = 0;
    while asked.recv().is_ok() {
        file.sync_data()?;
        ran += 1;
    }
    Ok(ran)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_nudge_is_a_sync_unless_one_is_waiting_and_a_failure_reaches_finish() {
        let dir = tempfile::tempdir().unwrap();
        let file = File::create(dir.path().join("f")).unwrap();
        let writeback = Writeback::start(&file).unwrap();
        writeback.nudge();
        let ran = writeback.finish().unwrap();
        assert_eq!(ran, 1, "the one sync asked for ran before finish returned");

        let writeback = Writeback::start(&file).unwrap();
        for _ in 0..100 {
            writeback.nudge();
        }
        let ran = writeback.finish().unwrap();
        assert!((1..=100).contains(&ran), "nudges while one waits coalesce: {ran}");

        // A handle the kernel cannot sync (a pipe's): the failure is the shard's, at its end.
        let (reader, _writer) = std::io::pipe().unwrap();
        let pipe = File::from(std::os::fd::OwnedFd::from(reader));
        let writeback = Writeback::start(&pipe).unwrap();
        writeback.nudge();
        assert!(writeback.finish().is_err(), "a failed sync is not lost");
    }
}
