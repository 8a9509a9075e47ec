//! Fetches a bundle at the audited commit, file by file, into paths checked before anything is written.
//!
//! Only the one tree listing pinned to the commit names files, after every path passed the checks of
//! `untrusted`. Each file streams from the resolve URL, through its redirect to storage, into a partial file
//! of the job's own. The download hashes it as it arrives and compares it with the Hub's hash: sha256 for
//! LFS and Xet files, the git blob id for the rest. The file is renamed into place only when it matches.
//! A cut transfer resumes by range from the bytes it had. A large file comes in ranges over several
//! connections (`crate::repack::download::transfer`). The hashing, the disk writes and every other call to
//! the file system run on blocking threads, never on the async runtime.

pub(crate) mod allow_list;
pub(crate) mod disk_space;
mod transfer;

use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures_util::StreamExt as _;
use sha1::Digest as _;
use thiserror::Error;

use crate::hashing::{Sha256Stream, is_hex, sha256_hex, to_hex};
use crate::hub::HubClient;
use crate::hub::retry::RetryPolicy;
use crate::hub::tree::TreeFile;
use crate::repack::error::RepackError;
use crate::safe_fs;
use crate::untrusted;

use crate::fix::StreamedRecord;
use crate::repack::download::transfer::{End, SEGMENTED_FROM, send_rest, send_segments};
use crate::repack::repair::{RepairTarget, StreamEnd, StreamRepair, Streamed};

/// What a download fetched.
#[derive(Debug, Clone)]
pub struct Downloaded {
    /// The repo's files at the commit.
    pub tree: Vec<TreeFile>,
    /// Bytes fetched by this attempt.
    pub bytes: u64,
    /// Files an earlier attempt had already fetched and verified, kept rather than fetched again.
    pub reused: usize,
    /// Files of the tree not downloaded, since a mirror does not carry them (`allow_list`).
    pub left_out: Vec<crate::repack::download::allow_list::LeftOut>,
}

/// Why a download stopped.
#[derive(Debug, Error)]
pub enum DownloadError {
    /// The Hub named something no download may write, such as a path outside the work directory or a bundle
    /// past the size cap. This is permanent and never retried.
    #[error("refused: {0}")]
    Refused(String),
    /// The transfer failed or arrived corrupt, and another attempt may succeed.
    /// Or the machine cannot hold it, and the operator must act.
    #[error("{error}")]
    Failed {
        /// Which file, why, and what it means for the job.
        error: RepackError,
        /// Bytes fetched before the failure.
        bytes: u64,
    },
}

impl DownloadError {
    /// Bytes this attempt fetched.
    pub fn bytes(&self) -> u64 {
        match self {
            DownloadError::Refused(_) => 0,
            DownloadError::Failed { bytes, .. } => *bytes,
        }
    }
}

/// Transfers a job runs at once at most, whatever the cores.
const MAX_TRANSFERS: usize = 4;

/// Where a job's files go: the bundle under `source`, partial transfers under `partial`.
#[derive(Debug, Clone)]
pub struct Layout {
    /// The bundle directory.
    pub source: PathBuf,
    /// Partial transfers, named by a hash of their path, outside the bundle.
    pub partial: PathBuf,
    /// Where shards that header padding or, on Unix, a reorder fixes are repaired as they stream. The bundle
    /// then keeps only a stub of each (see `repack::repair`). `None` downloads every file whole.
    pub repair: Option<RepairTarget>,
    /// Connections the download may hold at once, shared by the files it fetches at once.
    /// A large file gets several, to fetch ranges of it in parallel. 0 means [`DEFAULT_CONNECTIONS`].
    pub connections: usize,
    /// Receives the repo path of each shard repaired as it streamed. The path comes once the shard is checked
    /// and in place in the repair directory, under the same name. Its upload can then start while the rest
    /// download.
    pub ready: Option<tokio::sync::mpsc::UnboundedSender<String>>,
    /// Downloads only what a mirror carries (`allow_list`). It is `false` for a staged mirror, which holds
    /// nothing else already.
    pub carry_only: bool,
    /// Whether the disk must also hold the repack's re-laid copy of the bundle beside the download.
    /// It is `false` when the files are used as they arrive.
    pub room_for_relayout: bool,
}

/// Connections a download holds at once unless told otherwise.
pub const DEFAULT_CONNECTIONS: usize = 4;

/// Downloads `repo` at `sha` and checks each file against the tree's hash. Resumes an interrupted attempt: a
/// file already in place that matches its hash is kept, and a partial transfer continues from its end.
#[tracing::instrument(name = "download", skip_all, fields(repo.id = %repo, repo.sha = %sha))]
pub async fn download(
    hub: &HubClient,
    repo: &str,
    sha: &str,
    layout: &Layout,
    max_bytes: u64,
) -> Result<Downloaded, DownloadError> {
    let refuse = |e: untrusted::Invalid| DownloadError::Refused(format!("{repo}@{sha}: {e}"));
    untrusted::check_repo_id(repo).map_err(refuse)?;
    untrusted::check_revision(sha).map_err(refuse)?;
    let fail = |error: RepackError| DownloadError::Failed { error, bytes: 0 };
    let tree = hub.tree(repo, sha).await.map_err(|e| fail(RepackError::hub(format_args!("{repo}@{sha}: tree"), e)))?;
    let refused = |e: String| DownloadError::Refused(format!("{repo}@{sha}: {e}"));
    check_tree(&tree).map_err(|e| refused(e.to_string()))?;
    let (tree, left_out) = if layout.carry_only {
        let selection = crate::repack::download::allow_list::select(&tree).map_err(|e| refused(e.to_string()))?;
        (selection.carried, selection.left_out)
    } else {
        (tree, Vec::new())
    };
    let total = tree.iter().fold(0u64, |sum, f| sum.saturating_add(f.size));
    if total > max_bytes {
        return Err(refused(format!(
            "the bundle is {total} bytes, more than the {max_bytes}-byte cap (--max-bundle-gb)"
        )));
    }
    let Plan { mut wanted, to_fetch, reused, resumed } = {
        let (tree, layout) = (tree.clone(), layout.clone());
        crate::repack::off_executor("planning the download", move || plan(&tree, &layout, total)).await.map_err(fail)?
    };
    // Several files go at once, largest first. Each file's hash is one sequential chain on one core, so one
    // transfer at a time would leave the other cores and connections idle.
    wanted.sort_by_key(|w| std::cmp::Reverse(w.file.size));
    let streamed = wanted.iter().filter(|w| w.repair.is_some()).count();
    let cores = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
    let at_once = cores.min(MAX_TRANSFERS).min(wanted.len()).max(1);
    let connections = if layout.connections == 0 { DEFAULT_CONNECTIONS } else { layout.connections };
    // The connections go to the large files that are fetched at the same time (small ones take one each).
    let large = wanted.iter().filter(|w| w.file.size >= SEGMENTED_FROM).count();
    let per_file = (connections / at_once.min(large).max(1)).max(1);
    let progress = Arc::new(AtomicU64::new(resumed));
    tracing::info!(repo.id = %repo, files = wanted.len(), bytes = to_fetch, kept = reused, "download started");
    let progress_ref = &progress;
    let transfers: Vec<_> = wanted
        .iter()
        .map(|w| async move {
            let fetched = fetch_file(hub, repo, sha, w, (per_file, progress_ref)).await;
            if let Ok((_, true)) = fetched {
                layout.announce(&w.file.path);
            }
            fetched.map(|(bytes, _)| bytes)
        })
        .collect();
    let transferring = futures_util::stream::iter(transfers).buffer_unordered(at_once).collect::<Vec<_>>();
    let results = said_as_it_goes(transferring, (&progress, to_fetch), repo).await;
    let mut bytes = 0u64;
    // A file that fails does not stop the others: the next attempt then fetches only what failed.
    let mut failed: Option<RepackError> = None;
    for result in results {
        match result {
            Ok(n) => bytes += n,
            Err((error, n)) => {
                bytes += n;
                failed = Some(match failed {
                    Some(before) => before.join(error),
                    None => error,
                });
            }
        }
    }
    if let Some(error) = failed {
        return Err(DownloadError::Failed { error, bytes });
    }
    if reused > 0 {
        tracing::info!(repo.id = %repo, files = reused, "resumed a download: kept verified files");
    }
    if streamed > 0 {
        tracing::debug!(repo.id = %repo, files = streamed, "shards repaired as they streamed where header padding fixes them");
    }
    Ok(Downloaded { tree, bytes, reused, left_out })
}

/// Runs `transfers` and logs every [`crate::progress::every`] (10 s) how many of the `total` bytes arrived.
/// Each line also gives the rate, and when the rest should arrive at that rate.
async fn said_as_it_goes<T>(transfers: impl Future<Output = T>, (progress, total): (&AtomicU64, u64), repo: &str) -> T {
    tokio::pin!(transfers);
    let started = std::time::Instant::now();
    let every = crate::progress::every();
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    loop {
        tokio::select! {
            done = &mut transfers => return done,
            _ = ticks.tick() => {
                let done = progress.load(Ordering::Relaxed);
                let rate = done as f64 / started.elapsed().as_secs_f64().max(0.001);
                let eta = if done > 0 {
                    format!("{} s", (total.saturating_sub(done) as f64 / rate).ceil() as u64)
                } else {
                    "unknown".to_owned()
                };
                tracing::info!(
                    repo.id = %repo, bytes = done, of = total, eta = %eta,
                    "downloading: {} of {} at {}/s",
                    crate::report::human_bytes(done), crate::report::human_bytes(total), crate::report::human_bytes(rate as u64)
                );
            }
        }
    }
}

impl Layout {
    fn announce(&self, path: &str) {
        if let Some(ready) = &self.ready {
            // Nobody listening only means no upload ahead: the publish step uploads it then.
            let _ = ready.send(path.to_owned());
        }
    }
}

/// Most files a tree may list. Real MLX repos have a few dozen; the Hub pages its trees by thousands.
pub const MAX_TREE_FILES: usize = crate::sources::MAX_FILES;

/// Why a tree is not downloaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TreeRefused {
    /// More files than [`MAX_TREE_FILES`].
    #[error("{0} files, over the cap of {MAX_TREE_FILES}; not mirrored")]
    TooMany(usize),
    /// A path the checks refuse.
    #[error(transparent)]
    Path(#[from] untrusted::Invalid),
    /// A path listed twice (already quoted).
    #[error("file path {0} listed twice")]
    Twice(String),
    /// A hash that is not a git or LFS object id (the path already quoted).
    #[error("file {0}: its hash is not a git or LFS object id")]
    NotAnObjectId(String),
    /// A path that is also a directory of others (already quoted).
    #[error("file path {0} is also listed as a directory")]
    AlsoADirectory(String),
}

/// Checks the tree. Every path must pass the checks of `untrusted`, appear once, and be no directory of
/// another. Every hash must be a git or LFS object id. The tree may list at most [`MAX_TREE_FILES`] files.
fn check_tree(tree: &[TreeFile]) -> Result<(), TreeRefused> {
    if tree.len() > MAX_TREE_FILES {
        return Err(TreeRefused::TooMany(tree.len()));
    }
    let mut paths = std::collections::BTreeSet::new();
    for f in tree {
        untrusted::check_repo_path(&f.path)?;
        if !paths.insert(f.path.as_str()) {
            return Err(TreeRefused::Twice(untrusted::quote(&f.path)));
        }
        if !is_hex(&f.oid, 40) || f.lfs.as_ref().is_some_and(|l| !is_hex(&l.oid, 64)) {
            return Err(TreeRefused::NotAnObjectId(untrusted::quote(&f.path)));
        }
    }
    // A file and a directory of the same name cannot both be written.
    for p in &paths {
        if paths.range(format!("{p}/").as_str()..).next().is_some_and(|q| q.starts_with(&format!("{p}/"))) {
            return Err(TreeRefused::AlsoADirectory(untrusted::quote(p)));
        }
    }
    Ok(())
}

/// Whether `f` is a shard at the bundle's top level, stored in LFS so that the Hub gives its SHA-256.
/// Only such a shard may be repaired as it streams.
fn streamable(f: &TreeFile) -> bool {
    f.lfs.is_some() && !f.path.contains('/') && f.path.ends_with(".safetensors")
}

/// Whether an earlier attempt repaired this shard as it streamed, from this very source.
/// Its record, its repaired file and its stub must all be in place.
fn repaired_on_disk(repair: Option<&RepairTarget>, dest: &Path, f: &TreeFile) -> bool {
    let (Some(target), Some(lfs)) = (repair, &f.lfs) else { return false };
    let stub = std::fs::symlink_metadata(dest).is_ok_and(|m| m.is_file() && m.len() == f.size);
    stub && StreamedRecord::load(&target.dir, &f.path, &lfs.oid).is_some()
}

/// The file's place under `root`, its directories created without following symlinks.
fn destination(root: &Path, path: &str) -> std::io::Result<PathBuf> {
    let rel = Path::new(path);
    let dir = match rel.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(parent) => safe_fs::create_dirs_nofollow(root, parent)?,
        None => root.to_owned(),
    };
    let name = rel.file_name().ok_or_else(|| std::io::Error::other("no file name"))?;
    let dest = dir.join(name);
    safe_fs::clear_for_write(&dest)?;
    Ok(dest)
}

/// A file to fetch: its tree entry, its partial transfer, its place in the bundle, how it is repaired as it
/// streams (if it is), and the bytes of the partial transfer it continues from.
struct Wanted {
    file: TreeFile,
    partial: PathBuf,
    dest: PathBuf,
    repair: Option<RepairTarget>,
    start: u64,
}

/// What is left to fetch once the files of earlier attempts are found.
struct Plan {
    /// The files to fetch.
    wanted: Vec<Wanted>,
    /// Their bytes.
    to_fetch: u64,
    /// Files an earlier attempt left verified in place.
    reused: usize,
    /// Bytes earlier attempts left of the files fetched again.
    resumed: u64,
}

/// Makes the job's directories and decides what of `tree` to fetch. A file an earlier attempt left verified
/// is kept, and announced if it was repaired as it streamed. Fails if the disk cannot hold the rest, with
/// what the re-layout writes beside the download (`total` bytes) where it does. It reads and hashes files,
/// so run it off the executor.
fn plan(tree: &[TreeFile], layout: &Layout, total: u64) -> Result<Plan, RepackError> {
    crate::blocking::assert_off_executor("planning the download");
    for dir in
        [Some(&layout.source), Some(&layout.partial), layout.repair.as_ref().map(|r| &r.dir)].into_iter().flatten()
    {
        std::fs::create_dir_all(dir).map_err(|e| RepackError::io(dir.display(), e))?;
    }
    let (mut wanted, mut reused) = (Vec::new(), 0);
    for f in tree {
        let dest = destination(&layout.source, &f.path).map_err(|e| RepackError::io(&f.path, e))?;
        let repair = layout.repair.as_ref().filter(|_| streamable(f));
        if repaired_on_disk(repair, &dest, f) {
            reused += 1;
            layout.announce(&f.path);
            continue;
        }
        if matches_on_disk(&dest, f) {
            reused += 1;
            continue;
        }
        let partial = layout.partial.join(&sha256_hex(f.path.as_bytes())[..32]);
        // A streamed shard starts over: its hashes cannot be picked up midway.
        let start = if repair.is_some() {
            let _ = std::fs::remove_file(&partial);
            0
        } else {
            resumable(&partial, f.size)
        };
        wanted.push(Wanted { file: f.clone(), partial, dest, repair: repair.cloned(), start });
    }
    // The job fits the disk, with what the re-layout writes beside the download, or it does not start.
    let to_fetch = wanted.iter().fold(0u64, |sum, w| sum.saturating_add(w.file.size));
    let relaid = if layout.room_for_relayout { total } else { 0 };
    disk_space::check(&layout.source, disk_space::need(to_fetch, relaid))?;
    let resumed = wanted.iter().map(|w| w.start).sum();
    Ok(Plan { wanted, to_fetch, reused, resumed })
}

/// Whether a regular file at `dest` already has the tree's size and hash (an earlier attempt's).
fn matches_on_disk(dest: &Path, f: &TreeFile) -> bool {
    let is_file = std::fs::symlink_metadata(dest).is_ok_and(|m| m.is_file() && m.len() == f.size);
    let matches = || -> std::io::Result<bool> {
        let mut digest = FileDigest::new(f);
        hash_prefix(&mut safe_fs::open_regular(dest)?, f.size, &mut digest)?;
        Ok(digest.matches())
    };
    is_file && matches().unwrap_or(false)
}

/// The hash a tree entry promises, computed as bytes arrive.
enum FileDigest {
    Lfs(Sha256Stream, String),
    GitBlob(sha1::Sha1, String),
}

impl FileDigest {
    fn new(f: &TreeFile) -> FileDigest {
        match &f.lfs {
            Some(lfs) => FileDigest::Lfs(Sha256Stream::default(), lfs.oid.to_ascii_lowercase()),
            None => {
                let mut h = sha1::Sha1::new();
                h.update(format!("blob {}\0", f.size).as_bytes());
                FileDigest::GitBlob(h, f.oid.to_ascii_lowercase())
            }
        }
    }

    fn update(&mut self, data: &[u8]) {
        match self {
            FileDigest::Lfs(h, _) => h.update(data),
            FileDigest::GitBlob(h, _) => h.update(data),
        }
    }

    fn matches(self) -> bool {
        match self {
            FileDigest::Lfs(h, want) => h.finish_hex() == want,
            FileDigest::GitBlob(h, want) => to_hex(&h.finalize()) == want,
        }
    }
}

/// The bytes of a file of `size` that an earlier transfer left in `partial`, for the next one to continue.
/// Returns 0 unless `partial` is a regular file no longer than the file.
/// A longer one holds something else, and the transfer starts over.
fn resumable(partial: &Path, size: u64) -> u64 {
    let kept = std::fs::symlink_metadata(partial).ok().filter(std::fs::Metadata::is_file).map_or(0, |m| m.len());
    if kept > size { 0 } else { kept }
}

/// Streams the file `wanted` names into its partial file, checks its size and hash, and renames it into place.
/// One writer takes every byte of the file. A cut transfer thus resumes by range from the byte it stopped
/// at, and the hashes and a streamed shard's repair carry on. It continues from the bytes of an earlier
/// attempt's partial file that [`plan`] found (none for a streamed shard).
/// Returns the bytes fetched and whether a repaired shard was kept. On failure, returns why, with the bytes
/// fetched before.
async fn fetch_file(
    hub: &HubClient,
    repo: &str,
    sha: &str,
    wanted: &Wanted,
    (connections, progress): (usize, &Arc<AtomicU64>),
) -> Result<(u64, bool), (RepackError, u64)> {
    let Wanted { file: f, partial, dest, repair, start } = wanted;
    let (repair, start) = (repair.as_ref(), *start);
    let url = hub.resolve_url(repo, sha, &f.path);
    let (tx, rx) = tokio::sync::mpsc::channel::<bytes::Bytes>(16);
    let writer = spawn_writer(f, partial, start, repair, Arrivals { rx, progress: progress.clone() });
    let retry = RetryPolicy::default();
    let (mut have, mut fetched) = (start, 0u64);
    let mut stopped = None;
    // Only requests that bring nothing count against the retry policy. The file's size bounds the ones that
    // make progress, so a server that cuts every answer after 1 MiB still gets the file across.
    let (mut attempt, mut requests, most) = (0u32, 0u64, u64::from(retry.max_attempts) + f.size / (1 << 20));
    while attempt < retry.max_attempts && requests < most {
        if have == f.size {
            break;
        }
        requests += 1;
        let sent = if connections > 1 && f.size - have >= SEGMENTED_FROM {
            send_segments(hub, &url, f, have, connections, &tx).await
        } else {
            send_rest(hub, &url, f, have, &tx).await
        };
        fetched += sent.received;
        have += sent.accepted;
        match sent.end {
            End::Complete => break,
            End::Cut(why) => {
                tracing::debug!(shard.file = %f.path, requests, bytes = have, reason = %why, "transfer cut; resuming");
                stopped = Some(RepackError::transient(why));
                // A cut after progress is resumed at once, as curl does; one with none backs off.
                if sent.accepted == 0 {
                    attempt += 1;
                    tokio::time::sleep(retry.delay(attempt, crate::hub::retry::jitter_unit())).await;
                } else {
                    attempt = 0;
                }
            }
            End::Refused(why) => {
                stopped = Some(why);
                break;
            }
        }
    }
    drop(tx);
    let joined = join_writer(writer.await, f);
    let complete = matches!(&joined, Ok(written) if start + written.bytes == f.size);
    match (joined, stopped) {
        (Ok(written), _) if complete => {
            let (f, finished, partial, dest) = (f.clone(), written.finished, partial.to_owned(), dest.to_owned());
            let repair = repair.cloned();
            let placed = crate::repack::off_executor("placing a downloaded file", move || {
                finish(&f, finished, &partial, &dest, repair.as_ref())
            });
            placed.await.map(|repaired| (fetched, repaired)).map_err(|e| (e, fetched))
        }
        (Err(e), _) => Err((e, fetched)),
        // A partial file that holds wrong bytes fails the hash next time and is fetched whole again.
        (Ok(_), why) => {
            let short = || RepackError::transient(format!("{}: {have} of {} bytes arrived", f.path, f.size));
            Err((why.unwrap_or_else(short), fetched))
        }
    }
}

/// Starts the thread that writes and hashes a file's bytes as they come.
/// A shard to repair goes through [`StreamRepair`]. Any other file is appended to `partial` after its first
/// `start` bytes.
fn spawn_writer(
    f: &TreeFile,
    partial: &Path,
    start: u64,
    repair: Option<&RepairTarget>,
    rx: Arrivals,
) -> impl Future<Output = Result<Written, crate::blocking::BlockingError>> + use<> {
    let (partial, digest, repair) = (partial.to_owned(), FileDigest::new(f), repair.cloned());
    let (name, size) = (f.path.clone(), f.size);
    crate::blocking::run("the download's writer", move || match repair {
        Some(target) => write_streamed(&partial, &name, size, target, rx),
        None => write_partial(&partial, start, digest, rx),
    })
}

/// The bytes a transfer passes to its writer, counted into the download's progress as the writer takes them.
struct Arrivals {
    rx: tokio::sync::mpsc::Receiver<bytes::Bytes>,
    progress: Arc<AtomicU64>,
}

impl Arrivals {
    /// The next piece, on the writer's thread.
    fn blocking_recv(&mut self) -> Option<bytes::Bytes> {
        let piece = self.rx.blocking_recv()?;
        self.progress.fetch_add(piece.len() as u64, Ordering::Relaxed);
        Some(piece)
    }
}

/// What a writer made of a whole file.
enum Finished {
    /// The file as it came, in the partial file, with its digest.
    Whole(FileDigest),
    /// A streamed shard: the source's SHA-256, and how it was written.
    Streamed(StreamEnd),
}

/// A writer's end: the bytes it took from this transfer, and what it made of the file.
struct WriterEnd {
    bytes: u64,
    finished: Finished,
}

type Written = std::io::Result<WriterEnd>;

fn join_writer(
    joined: Result<Written, crate::blocking::BlockingError>,
    f: &TreeFile,
) -> Result<WriterEnd, RepackError> {
    joined.map_err(|e| RepackError::caused_by(e).context(&f.path))?.map_err(|e| RepackError::io(&f.path, e))
}

/// Hashes the partial file's first `start` bytes (what an earlier transfer left), then appends and hashes
/// what arrives. Returns the bytes appended and the digest of the whole.
fn write_partial(partial: &Path, start: u64, mut digest: FileDigest, mut rx: Arrivals) -> Written {
    let mut file = if start == 0 { safe_fs::create_nofollow(partial)? } else { safe_fs::open_rw_nofollow(partial)? };
    hash_prefix(&mut file, start, &mut digest)?;
    file.set_len(start)?;
    file.seek(SeekFrom::Start(start))?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    let mut written = 0u64;
    while let Some(chunk) = rx.blocking_recv() {
        digest.update(&chunk);
        out.write_all(&chunk)?;
        written += chunk.len() as u64;
    }
    out.flush()?;
    Ok(WriterEnd { bytes: written, finished: Finished::Whole(digest) })
}

/// Streams a shard from its first byte through [`StreamRepair`]. It writes the repaired file or the whole
/// source, and writes the stub or the whole source into `partial`.
fn write_streamed(partial: &Path, name: &str, size: u64, target: RepairTarget, mut rx: Arrivals) -> Written {
    let mut repair = StreamRepair::new(name, size, target, safe_fs::create_nofollow(partial)?);
    let mut written = 0u64;
    while let Some(chunk) = rx.blocking_recv() {
        repair.push(&chunk)?;
        written += chunk.len() as u64;
    }
    Ok(WriterEnd { bytes: written, finished: Finished::Streamed(repair.finish()?) })
}

/// Feeds the first `len` bytes of `file` to `digest`.
/// Fails if the file is shorter than that, as when it shrank since its size was read.
fn hash_prefix(file: &mut std::fs::File, len: u64, digest: &mut FileDigest) -> std::io::Result<()> {
    crate::hashing::feed_exact(file, len, &mut |data| digest.update(data))
}

/// Renames a complete, hashed partial file into place if the hash matches the tree's.
/// A mismatch removes it, so that the next attempt fetches it whole.
/// Returns whether a repaired shard was kept beside it.
fn finish(
    f: &TreeFile,
    written: Finished,
    partial: &Path,
    dest: &Path,
    repair: Option<&RepairTarget>,
) -> Result<bool, RepackError> {
    crate::blocking::assert_off_executor("placing a downloaded file");
    let (matches, repaired) = match written {
        Finished::Whole(digest) => (digest.matches(), None),
        Finished::Streamed(StreamEnd { source_sha256, streamed }) => {
            let oid = f.lfs.as_ref().map(|l| l.oid.to_ascii_lowercase()).unwrap_or_default();
            (
                source_sha256 == oid,
                match streamed {
                    Streamed::Repaired(r) => Some((r, oid)),
                    Streamed::Whole => None,
                },
            )
        }
    };
    if !matches {
        // A repaired file staged from it goes with it (its temporary file is removed when dropped).
        let _ = std::fs::remove_file(partial);
        let why = format!("{}: content does not match the Hub's hash; refusing a corrupted download", f.path);
        return Err(RepackError::transient(why));
    }
    let kept = match (repaired, repair) {
        (Some((r, oid)), Some(target)) => {
            r.keep(&target.dir, &oid).map_err(|e| {
                RepackError::caused_by(e).context(format_args!("{}: keeping the repaired shard", f.path))
            })?;
            true
        }
        _ => false,
    };
    safe_fs::clear_for_write(dest).map_err(|e| RepackError::io(dest.display(), e))?;
    std::fs::rename(partial, dest).map_err(|e| RepackError::io(dest.display(), e))?;
    Ok(kept)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::tree::LfsInfo;

    fn file(path: &str, size: u64) -> TreeFile {
        TreeFile { path: path.into(), size, oid: "a".repeat(40), lfs: Some(LfsInfo { oid: "b".repeat(64) }) }
    }

    #[test]
    fn trees_that_would_leave_the_directory_or_the_budget_are_refused() {
        assert_eq!(check_tree(&[file("model.safetensors", 10), file("sub/config.json", 5)]), Ok(()));
        let many: Vec<TreeFile> = (0..=MAX_TREE_FILES).map(|i| file(&format!("f{i}"), 1)).collect();
        for (tree, why) in [
            (vec![file("../x", 1)], "file path"),
            (vec![file("/etc/passwd", 1)], "absolute"),
            (vec![file("a", 1), file("a", 1)], "twice"),
            (vec![file("a", 1), file("a/b", 1)], "directory"),
            (many, "over the cap"),
            (vec![TreeFile { oid: "../../x".into(), ..file("a", 1) }], "object id"),
        ] {
            let e = check_tree(&tree).unwrap_err().to_string();
            assert!(e.contains(why), "{e}");
        }
    }

    #[test]
    fn git_blob_digests_match_git() {
        let content = b"hello\n";
        let f = TreeFile { path: "a".into(), size: 6, oid: crate::hashing::git_blob_oid(content), lfs: None };
        let mut d = FileDigest::new(&f);
        d.update(content);
        assert!(d.matches());
        let mut d = FileDigest::new(&f);
        d.update(b"hellO\n");
        assert!(!d.matches());
    }

    #[test]
    fn a_transfer_continues_only_from_a_regular_partial_no_longer_than_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let partial = dir.path().join("p");
        assert_eq!(resumable(&partial, 10), 0, "nothing left");
        std::fs::write(&partial, b"abcd").unwrap();
        assert_eq!(resumable(&partial, 10), 4);
        assert_eq!(resumable(&partial, 4), 4, "whole, to be hashed");
        assert_eq!(resumable(&partial, 3), 0, "longer than the file: something else, fetched again");
        #[cfg(unix)]
        {
            let link = dir.path().join("l");
            std::os::unix::fs::symlink(&partial, &link).unwrap();
            assert_eq!(resumable(&link, 10), 0, "a link is not followed");
        }
    }
}
