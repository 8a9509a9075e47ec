//! Uploads ahead. Each shard repaired as it streamed goes to the mirror's CAS once it is checked and kept.
//! Meanwhile the next shards still download and repair, so the publish step is left with the small files.
//!
//! Nothing is committed here: a CAS upload publishes nothing, and the commit still waits for every check.
//! The publish step uses a file uploaded ahead only if the staged file is that very file: same inode, size
//! and modification time. Otherwise it uploads the file again.

use std::collections::{HashMap, VecDeque};
use std::path::Path;

use futures_util::StreamExt as _;
use tokio::sync::mpsc::UnboundedReceiver;

use crate::fix::StreamedRecord;
use crate::repack::upload::{self, LocalFile, Stored, StoredFile};
use crate::safe_fs::FileId;

/// What went up ahead of the publish step.
#[derive(Debug, Default)]
pub struct Ahead {
    /// Each file uploaded, by its path in the repo: which file it was, and what the CAS stored.
    pub files: HashMap<String, (FileId, Stored)>,
    /// Bytes sent for them.
    pub bytes: u64,
    /// Of them, those whose SHA-256 was named to Xet from the digest taken as they were written.
    pub named: usize,
}

impl Ahead {
    /// What the CAS holds for the file staged at `path` as `rel`, if it went up ahead and is unchanged.
    pub fn stored(&self, rel: &str, path: &Path) -> Option<&Stored> {
        let (id, stored) = self.files.get(rel)?;
        (FileId::of(path) == Some(*id)).then_some(stored)
    }
}

/// Where the uploads ahead go.
pub(crate) struct Uploader<'a> {
    /// The crawler's client, for the write token, priming and the transfer.
    pub hub: &'a crate::hub::HubClient,
    /// The mirror, already created.
    pub target: &'a str,
    /// Where repaired shards are kept (the name in the repo is the name there).
    pub repaired: &'a Path,
    /// Where the source's stubs are (for priming deduplication).
    pub source: &'a Path,
}

impl Uploader<'_> {
    /// Uploads `first`, then each shard named on `kept` as it comes, until the channel closes.
    /// Runs as many uploads at once as half the cores. A failed upload is only logged, and the publish step
    /// sends that shard again.
    pub(crate) async fn run(&self, first: String, mut kept: UnboundedReceiver<String>) -> Ahead {
        // Half the cores, because the download and its repair need the rest.
        // With all of them, `serve` answered its pages much more slowly: see BENCHMARKS.md.
        let cores = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
        let at_once = (cores / 2).max(1);
        let mut ahead = Ahead::default();
        let mut waiting = VecDeque::from([first]);
        let mut running = futures_util::stream::FuturesUnordered::new();
        let mut kept_open = true;
        loop {
            while running.len() < at_once
                && let Some(rel) = waiting.pop_front()
            {
                running.push(self.one(rel));
            }
            tokio::select! {
                next = kept.recv(), if kept_open => match next {
                    Some(rel) => waiting.push_back(rel),
                    None => kept_open = false,
                },
                Some((rel, sent)) = running.next(), if !running.is_empty() => {
                    if let Some(Sent { id, stored, bytes, named }) = sent {
                        ahead.bytes = ahead.bytes.saturating_add(bytes);
                        if let Some(stored) = stored {
                            ahead.files.insert(rel, (id, stored));
                            ahead.named += usize::from(named);
                        }
                    }
                }
                else => break,
            }
        }
        ahead
    }

    /// Sends one shard to the CAS. Returns `None` if it could not be sent.
    async fn one(&self, rel: String) -> (String, Option<Sent>) {
        let file = self.repaired.join(&rel);
        let Some(id) = FileId::of(&file) else { return (rel, None) };
        let sources = [self.source.join(&rel)];
        // A reordered shard was hashed whole as it was written; a header-padded one was not.
        let known: HashMap<String, String> =
            StreamedRecord::file_sha256(self.repaired, &rel).map(|sha| (rel.clone(), sha)).into_iter().collect();
        let one = [LocalFile { rel: rel.clone(), path: file.clone() }];
        match upload::to_xet(self.hub, self.target.into(), &one, (&sources, &known)).await {
            Ok((mut stored, bytes)) => {
                let unchanged = FileId::of(&file) == Some(id);
                let stored = stored.remove(&rel).filter(|_| unchanged);
                let named = !known.is_empty();
                tracing::debug!(repo.id = %self.target, shard.file = %rel, bytes, sha256.named = named, "uploaded ahead");
                (rel, Some(Sent { id, stored, bytes, named }))
            }
            Err(e) => {
                tracing::warn!(repo.id = %self.target, shard.file = %rel, error = %e, "upload ahead failed; the publish step sends it");
                (rel, None)
            }
        }
    }
}

/// One shard sent ahead.
struct Sent {
    /// Which file it was.
    id: FileId,
    /// What the CAS stored; `None` if the file changed while it went up.
    stored: Option<Stored>,
    /// Bytes sent.
    bytes: u64,
    /// Whether its SHA-256 was named to Xet rather than computed.
    named: bool,
}

/// The staged LFS files, split by whether they went up ahead.
#[derive(Debug, Default)]
pub(crate) struct StillToSend {
    /// Files still to send.
    pub to_send: Vec<LocalFile>,
    /// Files that went up ahead, unchanged since, with what the CAS stored for each.
    pub sent_ahead: Vec<StoredFile>,
}

/// Splits the staged `files` into those still to send and those that went up ahead.
pub(crate) fn still_to_send(files: Vec<LocalFile>, ahead: Option<&Ahead>) -> StillToSend {
    let mut split = StillToSend::default();
    for file in files {
        match ahead.and_then(|a| a.stored(&file.rel, &file.path)) {
            Some(stored) => split.sent_ahead.push(StoredFile { rel: file.rel, stored: stored.clone() }),
            None => split.to_send.push(file),
        }
    }
    split
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_taken_as_sent_ahead_only_while_it_is_the_very_file_sent() {
        let dir = tempfile::tempdir().unwrap();
        let (sent, linked, rewritten) = (dir.path().join("a"), dir.path().join("b"), dir.path().join("c"));
        std::fs::write(&sent, b"shard").unwrap();
        std::fs::write(&rewritten, b"shard").unwrap();
        let stored = Stored { sha256: "0".repeat(64), size: 5 };
        let mut ahead = Ahead::default();
        for (rel, path) in [("a.safetensors", &sent), ("c.safetensors", &rewritten)] {
            ahead.files.insert(rel.into(), (FileId::of(path).unwrap(), stored.clone()));
        }
        // Staged by a hard link: the same file.
        std::fs::hard_link(&sent, &linked).unwrap();
        // A new file renamed over it, as a re-layout writes, is another file.
        let new = dir.path().join("c.new");
        std::fs::write(&new, b"shard").unwrap();
        std::fs::rename(&new, &rewritten).unwrap();
        let file = |rel: &str, path: &Path| LocalFile { rel: rel.to_owned(), path: path.to_owned() };
        let staged = vec![
            file("a.safetensors", &linked),
            file("c.safetensors", &rewritten),
            file("config.json", &dir.path().join("config.json")),
        ];
        let split = still_to_send(staged, Some(&ahead));
        assert_eq!(split.sent_ahead, [StoredFile { rel: "a.safetensors".to_owned(), stored }]);
        let rest: Vec<&str> = split.to_send.iter().map(|f| f.rel.as_str()).collect();
        assert_eq!(rest, ["c.safetensors", "config.json"]);
        assert_eq!(still_to_send(vec![file("a.safetensors", &sent)], None).to_send.len(), 1);
    }
}
