//! Uploads a mirror in the Hub's own commit flow, which `hub::commit` speaks.
//!
//! 1. A preupload question asks which files go to LFS.
//! 2. Each LFS file goes through Xet. Xet's chunking computes the file's SHA-256, the LFS oid the commit
//!    names, unless the file was hashed whole as it was written.
//! 3. One NDJSON commit carries the small files inline.

pub(crate) mod ahead;
pub(crate) mod blocks;
pub(crate) mod prime;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use tokio::io::AsyncReadExt as _;
use xet::xet_session::XetSessionBuilder;
use xet_runtime::config::XetConfig;

use crate::hub::HubClient;
use crate::hub::commit::{Change, CommitRefused, PreuploadFile};
pub use crate::hub::commit::{Committed, Message, Stored, WriteTo};
use crate::repack::error::RepackError;
use crate::repack::upload::prime::{prime_with, write_token};

/// A file of a bundle: its path in the repo (with `/`), its path here, and its size.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct BundleFile {
    /// Its path in the repo.
    pub rel: String,
    /// Its path here.
    pub path: PathBuf,
    /// Its size in bytes.
    pub size: u64,
}

/// A file to send: its path in the repo, and its path here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalFile {
    /// Its path in the repo.
    pub rel: String,
    /// Its path here.
    pub path: PathBuf,
}

impl From<BundleFile> for LocalFile {
    fn from(BundleFile { rel, path, .. }: BundleFile) -> LocalFile {
        LocalFile { rel, path }
    }
}

/// A file the CAS stored, by its path in the repo: what an LFS pointer of the commit names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredFile {
    /// Its path in the repo.
    pub rel: String,
    /// Its oid and size.
    pub stored: Stored,
}

/// Most files one preupload question asks about, as on the Hub.
const PREUPLOAD_BATCH: usize = 256;
/// Bytes of each file the preupload question carries.
const SAMPLE: u64 = 512;

/// Asks the Hub which of `files` go to LFS; the others travel inline in the commit.
/// An empty file is never LFS. Returns the LFS paths and the bytes sent.
pub async fn preupload(
    hub: &HubClient,
    target: WriteTo<'_>,
    files: &[BundleFile],
) -> Result<(Vec<String>, u64), RepackError> {
    let (mut lfs, mut sent) = (Vec::new(), 0u64);
    for batch in files.chunks(PREUPLOAD_BATCH) {
        let mut asked = Vec::with_capacity(batch.len());
        for BundleFile { rel, path, size } in batch {
            let mut sample = Vec::with_capacity(SAMPLE as usize);
            let file = tokio::fs::File::open(path).await.map_err(|e| RepackError::io(path.display(), e))?;
            file.take(SAMPLE).read_to_end(&mut sample).await.map_err(|e| RepackError::io(path.display(), e))?;
            asked.push(PreuploadFile { path: rel.clone(), sample, size: *size });
        }
        let (to_lfs, n) = hub
            .preupload(target, &asked)
            .await
            .map_err(|e| RepackError::hub(format_args!("preupload to {target}"), e))?;
        lfs.extend(to_lfs);
        sent += n;
    }
    Ok((lfs, sent))
}

/// Uploads `files` to `target`'s CAS in one Xet upload, after priming its deduplication with the source
/// shards `sources`. `known` gives, by path in the repo, the SHA-256 of files hashed as they were written.
/// Xet then need not take those again. Returns each file's oid and size, and the bytes sent.
pub async fn to_xet(
    hub: &HubClient,
    target: WriteTo<'_>,
    files: &[LocalFile],
    (sources, known): (&[PathBuf], &HashMap<String, String>),
) -> Result<(HashMap<String, Stored>, u64), RepackError> {
    if files.is_empty() {
        return Ok((HashMap::new(), 0));
    }
    let token = write_token(hub, target).await?;
    prime_with(&token, &target.repo.to_string(), sources).await;
    let xet_error = |e: &dyn std::fmt::Display| RepackError::transient(format!("Xet upload to {target}: {e}"));
    let config = xet_config().map_err(|e| xet_error(&e))?;
    let session = XetSessionBuilder::new_with_config(config).build().map_err(|e| xet_error(&e))?;
    let refresh = hub.xet_write_token_url(target);
    let commit = session
        .new_upload_commit()
        .map_err(|e| xet_error(&e))?
        .with_endpoint(token.cas_url.clone())
        .with_token_info(token.access_token.clone(), token.exp)
        .with_token_refresh_url(refresh.clone(), hub.auth_headers(&refresh))
        .build()
        .await
        .map_err(|e| xet_error(&e))?;
    let mut tasks = HashMap::new();
    for LocalFile { rel, path } in files {
        let sha256 = known.get(rel).map(String::as_str);
        let task = crate::repack::upload::blocks::send(&commit, rel, path, sha256)
            .await
            .map_err(|e| xet_error(&format!("{rel}: {e}")))?;
        tasks.insert(task, rel.clone());
    }
    let report = commit.commit().await.map_err(|e| xet_error(&e))?;
    let mut stored = HashMap::new();
    for (task, uploaded) in report.uploads {
        let Some(rel) = tasks.remove(&task) else { continue };
        let info = uploaded.xet_info;
        let sha256 = info.sha256.filter(|s| crate::hashing::is_hex(s, 64)).ok_or_else(|| xet_error(&"no SHA-256"))?;
        stored.insert(rel, Stored { sha256, size: info.file_size.unwrap_or_default() });
    }
    if let Some(missing) = tasks.values().next() {
        return Err(xet_error(&format!("{missing} was not stored")));
    }
    Ok((stored, report.dedup_metrics.total_bytes_uploaded))
}

/// Files sent ahead of the commit that will name them.
#[derive(Debug, Default)]
pub struct Sent {
    /// The files stored in LFS storage, in the order given.
    pub stored: Vec<StoredFile>,
    /// The files that travel inline in the commit.
    pub inline: Vec<LocalFile>,
    /// The bytes the preupload question and the Xet upload sent.
    pub bytes: u64,
}

/// Sends `files` `to` a repo as a commit will hold them. Asks the preupload question, then sends the LFS
/// files through Xet, priming its deduplication with `sources`.
pub async fn send_files(
    hub: &HubClient,
    to: WriteTo<'_>,
    files: Vec<BundleFile>,
    sources: &[PathBuf],
) -> Result<Sent, RepackError> {
    let (lfs, asked) = preupload(hub, to, &files).await?;
    let (to_store, inline) = split_by_lfs(files, &lfs);
    let (mut stored, through_xet) = to_xet(hub, to, &to_store, (sources, &HashMap::new())).await?;
    let stored = in_order(&to_store, &mut stored);
    Ok(Sent { stored, inline, bytes: asked + through_xet })
}

/// Splits `files` into those the Hub keeps in LFS and those that travel inline.
/// `lfs` lists the former, from the preupload question.
pub fn split_by_lfs(files: Vec<BundleFile>, lfs: &[String]) -> (Vec<LocalFile>, Vec<LocalFile>) {
    files.into_iter().map(LocalFile::from).partition(|f| lfs.contains(&f.rel))
}

/// Lists what the CAS stored for each of `files`, in their order. A file it did not store is left out.
pub fn in_order(files: &[LocalFile], stored: &mut HashMap<String, Stored>) -> Vec<StoredFile> {
    files.iter().filter_map(|f| Some(StoredFile { rel: f.rel.clone(), stored: stored.remove(&f.rel)? })).collect()
}

/// The Xet session's configuration for a mirror's upload.
///
/// - Xet chunks one file at a time. Each file's chunking already fills a core, and the MLX check and the
///   pages need the others. Xet's default of eight at once slowed `serve`'s pages: see BENCHMARKS.md.
/// - Xet takes each block of [`blocks::BLOCK`](crate::repack::upload::blocks::BLOCK) whole as it is sent.
///   Each block is a map of the file (see [`blocks`](crate::repack::upload::blocks)).
///   Xet's default of 8 MB would cut each in two.
pub(super) fn xet_config() -> Result<XetConfig, xet_runtime::config::ConfigError> {
    XetConfig::new()
        .with_config("data.max_concurrent_file_ingestion", 1)?
        .with_config("data.ingestion_block_size", crate::repack::upload::blocks::BLOCK)
}

/// Commits to `target` on top of `parent`, the head of `main` read right before. Each of `stored` goes as an
/// LFS pointer, and each of `inline` with its content. Returns the commit, the pull request it opened if it
/// was one, and the bytes sent.
///
/// The commit names its parent, so sending it again after a lost answer cannot make a second commit.
/// If the first one landed, the Hub refuses the second with 412 ([`CommitError::Moved`]).
pub async fn commit(
    hub: &HubClient,
    target: WriteTo<'_>,
    parent: &str,
    message: Message<'_>,
    stored: &[StoredFile],
    inline: &[LocalFile],
) -> Result<Committed, CommitError> {
    let mut changes: Vec<Change<'_>> =
        stored.iter().map(|StoredFile { rel, stored }| Change::Lfs { path: rel, stored }).collect();
    for LocalFile { rel, path } in inline {
        let content =
            tokio::fs::read(path).await.map_err(|e| CommitError::Failed(RepackError::io(path.display(), e)))?;
        changes.push(Change::Inline { path: rel, content });
    }
    match hub.commit(target, parent, message, &changes).await {
        Ok(done) => Ok(done),
        Err(CommitRefused::Moved) => Err(CommitError::Moved),
        Err(CommitRefused::Hub(e)) => {
            Err(CommitError::Failed(RepackError::hub(format_args!("committing to {target}"), e)))
        }
    }
}

/// Why a commit was not made.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// The branch is no longer at the parent named, because another commit came first.
    /// That may be this one, sent before with its answer lost.
    #[error("the branch moved since the upload began")]
    Moved,
    /// Anything else, said in full.
    #[error("{0}")]
    Failed(RepackError),
}

/// Every regular file under `dir`, sorted by its path relative to `dir`.
pub fn files_of(dir: &Path) -> Vec<BundleFile> {
    let mut out = Vec::new();
    list(dir, "", &mut out);
    out.sort();
    out
}

fn list(dir: &Path, prefix: &str, out: &mut Vec<BundleFile>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let name = format!("{prefix}{}", entry.file_name().to_string_lossy());
        match entry.metadata() {
            Ok(m) if m.is_dir() => list(&entry.path(), &format!("{name}/"), out),
            Ok(m) if m.is_file() => out.push(BundleFile { rel: name, path: entry.path(), size: m.len() }),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mirror_upload_chunks_one_file_at_a_time_in_the_blocks_it_cuts() {
        let config = xet_config().unwrap();
        // Xet's default is 8 MB, which would cut each of the upload's 8 MiB blocks in two.
        assert_eq!(*config.data.ingestion_block_size, crate::repack::upload::blocks::BLOCK);
        assert_eq!(config.data.max_concurrent_file_ingestion, 1);
    }
}
