//! Uploading ahead: each shard repaired as it streamed goes to the mirror's CAS as soon as it is checked,
//! while the next ones still download and repair, so the publish step is left with the small files. A
//! reordered shard goes up as it is written ([`following`](crate::repack::upload::following)), as many at once as the
//! uploads of checked shards; one more, or one whose follow fails, goes up once it is checked, as the others.
//!
//! Nothing is committed here: a CAS upload publishes nothing, and the commit still waits for every check.
//! The publish step uses a file uploaded ahead only if the staged file is that very file (same inode, size
//! and modification time); otherwise it uploads it again.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};

use futures_util::StreamExt as _;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

use crate::fix::StreamedRecord;
use crate::repack::upload::following::{FileWriteEvent, FollowStart, SentAsWritten, UploadFollowError, WriteEvent};
use crate::repack::upload::{self, Stored};
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
    /// Of them, those sent as they were written.
    pub followed: usize,
}

/// What the reorders' writers tell the uploads ahead.
pub type WriteEventReceiver = UnboundedReceiver<FileWriteEvent>;

/// The first thing the uploads ahead hear.
#[derive(Debug)]
pub enum FirstEvent {
    /// A shard checked and kept, by its name in the bundle.
    Kept(String),
    /// A reorder's writer telling of its new file.
    Write(FileWriteEvent),
}

/// The first shard kept, or the first reorder's event, whichever comes first; `None` once both channels
/// have closed without either (a bundle with no shard to send ahead).
pub async fn first(ready: &mut UnboundedReceiver<String>, feed: &mut WriteEventReceiver) -> Option<FirstEvent> {
    let (mut ready_open, mut feed_open) = (true, true);
    loop {
        tokio::select! {
            next = ready.recv(), if ready_open => match next {
                Some(rel) => return Some(FirstEvent::Kept(rel)),
                None => ready_open = false,
            },
            next = feed.recv(), if feed_open => match next {
                Some(fed) => return Some(FirstEvent::Write(fed)),
                None => feed_open = false,
            },
            else => return None,
        }
    }
}

/// The uploads ahead under way, and what they know of each shard.
#[derive(Default)]
struct AheadState {
    /// Shards checked and kept, waiting for a core.
    waiting: VecDeque<String>,
    /// Shards named as checked and kept.
    ready: HashSet<String>,
    /// Reorders whose upload follows their writes (under way, or done): where their writer's events go while
    /// under way.
    following: HashMap<String, Option<UnboundedSender<WriteEvent>>>,
    /// What the CAS stored for each reorder sent as it was written; it counts once the shard is kept.
    sent: HashMap<String, (FileId, Stored)>,
}

impl Ahead {
    /// What the CAS holds for the file staged at `path` as `rel`, if it went up ahead and is unchanged.
    pub fn stored(&self, rel: &str, path: &Path) -> Option<&Stored> {
        let (id, stored) = self.files.get(rel)?;
        (FileId::of(path) == Some(*id)).then_some(stored)
    }
}

/// Where the uploads ahead go.
pub struct Uploader<'a> {
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
    /// Uploads what `first` names, then each shard named on `ready` as it comes, and follows the writes of
    /// each reorder told of on `feed`, until both channels close; as many at once as half the cores. A failed
    /// upload is only logged: the publish step sends that shard again.
    pub async fn run(
        &self,
        first: FirstEvent,
        mut ready: UnboundedReceiver<String>,
        mut feed: WriteEventReceiver,
    ) -> Ahead {
        // Half the cores: the download and the MLX check need the rest. With all of them, a 2-core `serve`
        // under a repack answered its pages at a p99 of 15-30 ms instead of 7-9 (BENCHMARKS.md).
        let cores = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
        let at_once = (cores / 2).max(1);
        let mut ahead = Ahead::default();
        let mut board = AheadState::default();
        let mut running = futures_util::stream::FuturesUnordered::new();
        let mut following = futures_util::stream::FuturesUnordered::new();
        match first {
            FirstEvent::Kept(rel) => {
                board.ready.insert(rel.clone());
                board.waiting.push_back(rel);
            }
            FirstEvent::Write(fed) => {
                if let Some(started) = board.route(fed, true) {
                    following.push(self.follow(started));
                }
            }
        }
        let (mut ready_open, mut feed_open) = (true, true);
        loop {
            // A follow mostly waits on the download, chunking a stretch as it lands: it takes no slot of the
            // checked shards' uploads, which chunk whole files at once, and has as many of its own.
            while running.len() < at_once
                && let Some(rel) = board.waiting.pop_front()
            {
                running.push(self.one(rel));
            }
            let room = following.len() < at_once;
            tokio::select! {
                next = ready.recv(), if ready_open => match next {
                    Some(rel) => {
                        board.ready.insert(rel.clone());
                        if !board.following.contains_key(&rel) {
                            board.waiting.push_back(rel);
                        }
                    }
                    None => ready_open = false,
                },
                next = feed.recv(), if feed_open => match next {
                    Some(fed) => {
                        if let Some(started) = board.route(fed, room) {
                            following.push(self.follow(started));
                        }
                    }
                    // The writers are done: a follow not told its file is whole by now never will be.
                    None => {
                        feed_open = false;
                        board.following.values_mut().for_each(|route| *route = None);
                    }
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
                Some((rel, followed)) = following.next(), if !following.is_empty() => {
                    board.followed(&mut ahead, self.target, rel, followed);
                }
                else => break,
            }
        }
        board.kept_and_sent(&mut ahead);
        ahead
    }

    /// Follows the writes of the reorder `start` names, as the writer tells of them.
    async fn follow(&self, start: FollowStart) -> (String, Result<SentAsWritten, UploadFollowError>) {
        let rel = start.file.clone();
        (rel, crate::repack::upload::following::follow(self.hub, self.target, start).await)
    }

    /// One shard to the CAS; `None` if it could not be sent.
    async fn one(&self, rel: String) -> (String, Option<Sent>) {
        let file = self.repaired.join(&rel);
        let Some(id) = FileId::of(&file) else { return (rel, None) };
        let sources = [self.source.join(&rel)];
        // A reordered shard was hashed whole as it was written; a header-padded one was not.
        let known: HashMap<String, String> =
            StreamedRecord::file_sha256(self.repaired, &rel).map(|sha| (rel.clone(), sha)).into_iter().collect();
        match upload::to_xet(self.hub, self.target.into(), &[(rel.clone(), file.clone())], (&sources, &known)).await {
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

impl AheadState {
    /// Routes a writer's event to the upload that follows that shard; a reorder starting to be written starts
    /// one if there is `room` (else it is sent once kept, as the others), which is returned.
    fn route(&mut self, FileWriteEvent { file, event }: FileWriteEvent, room: bool) -> Option<FollowStart> {
        if let WriteEvent::Writing { path, len } = event {
            if let Some(route) = self.following.get_mut(&file) {
                // Defensive: a download writes each file once (a transfer that fails resumes by range, into
                // the same writer). Were it written again, the upload under way would end unfinished, and the
                // publish step would send the shard.
                *route = None;
                return None;
            }
            if !room {
                return None;
            }
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            self.following.insert(file.clone(), Some(tx));
            return Some(FollowStart { file, path, len, events: rx });
        }
        if let Some(Some(route)) = self.following.get(&file) {
            let _ = route.send(event);
        }
        None
    }

    /// Takes in the end of a follow: what the CAS stored (which counts once the shard is kept), or else the
    /// shard goes up once kept.
    fn followed(
        &mut self,
        ahead: &mut Ahead,
        target: &str,
        rel: String,
        followed: Result<SentAsWritten, UploadFollowError>,
    ) {
        match followed {
            Ok(SentAsWritten { id, stored, bytes }) => {
                self.following.insert(rel.clone(), None);
                ahead.bytes = ahead.bytes.saturating_add(bytes);
                self.sent.insert(rel, (id, stored));
            }
            Err(e) => {
                tracing::warn!(repo.id = %target, shard.file = %rel, error = %e, "the upload following the writes failed; the shard is sent once kept");
                self.following.remove(&rel);
                if self.ready.contains(&rel) {
                    self.waiting.push_back(rel);
                }
            }
        }
    }
}

impl AheadState {
    /// Adds to `ahead` each reorder sent as it was written whose shard the download kept; the others' sources
    /// did not match the Hub's hash, and their uploads are not used.
    fn kept_and_sent(&mut self, ahead: &mut Ahead) {
        for (rel, sent) in std::mem::take(&mut self.sent) {
            if self.ready.contains(&rel) {
                ahead.files.insert(rel, sent);
                ahead.named += 1;
                ahead.followed += 1;
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

/// A staged file: its path in the repo, and here.
pub type StagedFile = (String, PathBuf);

/// Splits the staged `files` into those still to send and those that went up ahead, with what the CAS
/// stored for each.
pub fn still_to_send(files: Vec<StagedFile>, ahead: Option<&Ahead>) -> (Vec<StagedFile>, Vec<(String, Stored)>) {
    let mut sent = Vec::new();
    let mut rest = Vec::new();
    for (rel, path) in files {
        match ahead.and_then(|a| a.stored(&rel, &path)) {
            Some(stored) => sent.push((rel, stored.clone())),
            None => rest.push((rel, path)),
        }
    }
    (rest, sent)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fed(file: &str, event: WriteEvent) -> FileWriteEvent {
        FileWriteEvent { file: file.to_owned(), event }
    }

    fn writing(file: &str) -> FileWriteEvent {
        fed(file, WriteEvent::Writing { path: format!("/w/.{file}.tmp").into(), len: 100 })
    }

    #[test]
    fn a_reorder_is_followed_only_with_room_and_else_or_on_failure_sent_once_kept_and_counts_once_kept() {
        let mut board = AheadState::default();
        // No room: not followed, so sent once kept.
        assert!(board.route(writing("a"), false).is_none());
        // Room: followed, and its events go to that upload alone.
        let FollowStart { file: rel, path, len, mut events } = board.route(writing("b"), true).unwrap();
        assert_eq!((rel.as_str(), path.to_str(), len), ("b", Some("/w/.b.tmp"), 100));
        assert!(board.route(fed("b", WriteEvent::Final(64)), true).is_none());
        assert!(board.route(fed("a", WriteEvent::Final(64)), true).is_none());
        assert_eq!(events.try_recv(), Ok(WriteEvent::Final(64)));
        assert!(events.try_recv().is_err(), "a's events are not b's");
        // Written again (its transfer started over): the upload under way hears no more, and none starts.
        assert!(board.route(writing("b"), true).is_none());
        assert_eq!(events.try_recv(), Err(tokio::sync::mpsc::error::TryRecvError::Disconnected));

        // A follow that failed leaves a kept shard to the uploads after the download.
        let mut ahead = Ahead::default();
        board.ready.insert("b".to_owned());
        board.followed(&mut ahead, "m", "b".to_owned(), Err(UploadFollowError::Abandoned));
        assert_eq!(board.waiting, ["b"]);
        assert!(!board.following.contains_key("b"));

        // One that went up is taken as sent, under the digest named, once the download kept the shard; one
        // whose source then failed the Hub's hash is not.
        let dir = tempfile::tempdir().unwrap();
        let stored = Stored { sha256: "1".repeat(64), size: 1 };
        for rel in ["c", "d"] {
            let _start = board.route(writing(rel), true).unwrap();
            std::fs::write(dir.path().join(rel), rel).unwrap();
            let id = FileId::of(&dir.path().join(rel)).unwrap();
            board.followed(&mut ahead, "m", rel.to_owned(), Ok(SentAsWritten { id, stored: stored.clone(), bytes: 7 }));
            assert!(board.following.contains_key(rel), "{rel} is not sent again once kept");
        }
        board.ready.insert("c".to_owned());
        board.kept_and_sent(&mut ahead);
        assert_eq!((ahead.followed, ahead.named, ahead.bytes), (1, 1, 14));
        assert_eq!(ahead.stored("c", &dir.path().join("c")), Some(&stored));
        assert_eq!(ahead.stored("d", &dir.path().join("d")), None);
    }

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
        // Rewritten since (a new file renamed over it, as a re-layout writes): another file.
        let new = dir.path().join("c.new");
        std::fs::write(&new, b"shard").unwrap();
        std::fs::rename(&new, &rewritten).unwrap();
        let staged = vec![
            ("a.safetensors".to_owned(), linked),
            ("c.safetensors".to_owned(), rewritten.clone()),
            ("config.json".to_owned(), dir.path().join("config.json")),
        ];
        let (rest, done) = still_to_send(staged, Some(&ahead));
        assert_eq!(done, [("a.safetensors".to_owned(), stored)]);
        let rest: Vec<&str> = rest.iter().map(|(rel, _)| rel.as_str()).collect();
        assert_eq!(rest, ["c.safetensors", "config.json"]);
        assert_eq!(still_to_send(vec![("a.safetensors".into(), sent)], None).0.len(), 1);
    }
}
