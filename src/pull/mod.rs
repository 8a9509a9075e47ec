//! `hubalign pull`: fetches a Hub model whose every tensor maps in place, the way `hf download` fetches one.
//! It fetches the aligned mirror when the Hub lists one, into the Hugging Face cache or `--local-dir`.
//! Otherwise it fetches the source into a directory of its own, and repairs its shards as they stream, with
//! the repack's repair.

pub mod cache;

use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::hub::{HubClient, HubError};
use crate::repack::download::{self, DownloadError, Layout};
use crate::repack::error::RepackError;
use crate::repack::off_executor;
use crate::repack::relayout::{Relaid, stage_bundle};
use crate::repack::repair::RepairTarget;
use crate::safetensors::Alignment;
use crate::scan::next_step::MirrorAnswer;

/// What to pull and where.
#[derive(Debug, Clone)]
pub struct PullOptions {
    /// The source repo, `namespace/name`.
    pub repo: String,
    /// The source's branch or commit to repair when no mirror exists.
    pub revision: String,
    /// Namespaces to look for the mirror in, in order.
    pub mirrors: Vec<String>,
    /// Where the files go.
    pub into: Destination,
    /// The data-section alignment of a repair.
    pub alignment: Alignment,
    /// The largest bundle to download.
    pub max_bytes: u64,
}

/// Where `pull` puts the files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// The Hugging Face cache at this folder, as `hf download` fills it. A repaired source, which is no
    /// repo's content, goes to `{name}-aligned` in the working directory instead.
    Cache(PathBuf),
    /// This folder, holding the files themselves.
    LocalDir(PathBuf),
}

/// What `pull` fetched, and where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pulled {
    /// The aligned mirror, at its commit.
    Mirror {
        /// The mirror's repo id.
        mirror: String,
        /// Its commit.
        commit: String,
        /// The folder holding its files: the cache's snapshot, or the local directory.
        dir: PathBuf,
    },
    /// The source at its commit, repaired as it streamed.
    Repaired {
        /// The source's commit.
        commit: String,
        /// The folder holding the repaired bundle.
        dir: PathBuf,
        /// Whether the source needed no repair. Its files are then there as they are.
        already_aligned: bool,
    },
}

/// Why a pull stopped.
#[derive(Debug, Error)]
pub enum PullError {
    /// The Hub could not be asked, or refused.
    #[error("{what}: {source}")]
    Hub {
        /// What was asked.
        what: String,
        /// The Hub's failure.
        #[source]
        source: HubError,
    },
    /// The repo or revision does not exist, or is not visible with this token.
    #[error("{0} not found on the Hub (or not visible with this token)")]
    NotFound(String),
    /// The download, the repair or a move of the files failed.
    #[error("{0}")]
    Failed(#[from] RepackError),
    /// The download was refused: the Hub named a file no download may write, or the bundle is too large.
    #[error("{0}")]
    Refused(String),
}

impl From<DownloadError> for PullError {
    fn from(e: DownloadError) -> PullError {
        match e {
            DownloadError::Refused(reason) => PullError::Refused(reason),
            DownloadError::Failed { error, .. } => PullError::Failed(error),
        }
    }
}

/// Pulls `opts.repo`: its aligned mirror if one of `opts.mirrors` holds it, else the source repaired as it
/// streams. A pull cut short resumes where it stopped when run again. Its partial files stay in a work
/// folder inside the destination.
#[tracing::instrument(name = "pull", skip_all, fields(repo.id = %opts.repo))]
pub async fn pull(hub: &HubClient, opts: &PullOptions) -> Result<Pulled, PullError> {
    crate::untrusted::check_repo_id(&opts.repo).map_err(|e| PullError::Refused(e.to_string()))?;
    let sources = [opts.repo.clone()];
    let answer = crate::scan::mirrors::look_up(hub, &sources, &opts.mirrors).await.remove(&opts.repo);
    match answer {
        // A mirror follows its source's main branch, at the default alignment. Another revision or
        // alignment is repaired from the source.
        Some(MirrorAnswer::Found(mirror)) if opts.revision == "main" && opts.alignment == Alignment::default() => {
            pull_mirror(hub, opts, &mirror).await
        }
        Some(MirrorAnswer::Found(mirror)) => {
            tracing::info!(mirror, revision = %opts.revision, "the mirror is main at the default alignment; repairing the source");
            pull_repaired(hub, opts).await
        }
        Some(MirrorAnswer::Failed(why)) => {
            tracing::warn!(reason = %why, "the mirror lookup failed; repairing the source instead");
            pull_repaired(hub, opts).await
        }
        Some(MirrorAnswer::NotFound) | None => pull_repaired(hub, opts).await,
    }
}

/// The commit `revision` of `repo` is at.
async fn commit_of(hub: &HubClient, repo: &str, revision: &str) -> Result<String, PullError> {
    let asked = hub.revision_of(repo.into(), revision).await;
    let hub_error = |source| PullError::Hub { what: format!("{repo}@{revision}"), source };
    Ok(asked.map_err(hub_error)?.ok_or_else(|| PullError::NotFound(format!("{repo}@{revision}")))?.0)
}

/// Downloads the mirror's main branch into the cache or the local directory.
async fn pull_mirror(hub: &HubClient, opts: &PullOptions, mirror: &str) -> Result<Pulled, PullError> {
    tracing::info!(mirror, "an aligned mirror exists; downloading it");
    let commit = commit_of(hub, mirror, "main").await?;
    let work = match &opts.into {
        Destination::Cache(cache) => {
            let (folder, commit) = (cache::repo_folder(cache, mirror), commit.clone());
            off_executor("making the cache folder", move || {
                cache::start_pull(&folder, &commit)
                    .map_err(|e| RepackError::io(format_args!("making {}", folder.display()), e))
            })
            .await?
        }
        Destination::LocalDir(dir) => work_dir_in(dir, &commit, None),
    };
    let layout = layout(&work, None);
    let fetched = download::download(hub, mirror, &commit, &layout, opts.max_bytes).await?;
    let into = opts.into.clone();
    let (mirror_id, commit_id) = (mirror.to_owned(), commit.clone());
    let dir = off_executor("placing the mirror's files", move || {
        let dir = match &into {
            Destination::Cache(cache) => {
                let folder = cache::repo_folder(cache, &mirror_id);
                cache::place(&folder, &layout.source, &fetched.tree, (&commit_id, "main"))
                    .map_err(|e| RepackError::io(format_args!("placing files in {}", folder.display()), e))?
            }
            Destination::LocalDir(dir) => install(&layout.source, dir)?,
        };
        remove_work(&work);
        Ok(dir)
    })
    .await?;
    Ok(Pulled::Mirror { mirror: mirror.to_owned(), commit, dir })
}

/// Downloads the source, repairing its shards as they stream, and stages the aligned bundle in its
/// destination.
async fn pull_repaired(hub: &HubClient, opts: &PullOptions) -> Result<Pulled, PullError> {
    tracing::info!(revision = %opts.revision, "downloading the source and repairing it as it streams");
    let commit = commit_of(hub, &opts.repo, &opts.revision).await?;
    let dir = match &opts.into {
        Destination::LocalDir(dir) => dir.clone(),
        Destination::Cache(_) => PathBuf::from(crate::scan::next_step::repaired_folder(&opts.repo)),
    };
    let work = work_dir_in(&dir, &commit, Some(opts.alignment));
    let layout = layout(&work, Some(RepairTarget { dir: work.join("streamed"), alignment: opts.alignment }));
    let fetched = download::download(hub, &opts.repo, &commit, &layout, opts.max_bytes).await?;
    let (repo, sha, alignment, final_dir) = (opts.repo.clone(), commit.clone(), opts.alignment, dir.clone());
    let already_aligned = off_executor("staging the repaired bundle", move || {
        let staged = work.join("output");
        let _ = std::fs::remove_dir_all(&staged);
        let streamed = work.join("streamed");
        let relaid = stage_bundle(&layout.source, &staged, &streamed, alignment, (&repo, &sha), fetched.left_out)?;
        let already_aligned = match relaid {
            Relaid::Staged => false,
            Relaid::AlreadyAligned => true,
            Relaid::Skipped(reason) => return Err(RepackError::permanent(format!("{repo}@{sha}: {reason}"))),
        };
        install(if already_aligned { &layout.source } else { &staged }, &final_dir)?;
        remove_work(&work);
        Ok(already_aligned)
    })
    .await?;
    Ok(Pulled::Repaired { commit, dir, already_aligned })
}

/// A pull's work folder inside its destination `dir`, beside `huggingface_hub`'s own (`.cache/`). A second
/// run finds it there and resumes the first. It is per commit and, for a repair, per alignment. So a pull
/// never takes up a shard repaired for another alignment.
fn work_dir_in(dir: &Path, commit: &str, repair: Option<Alignment>) -> PathBuf {
    let name = match repair {
        Some(a) => format!("{commit}-align{}{}", a.get(), if a.requires_data_start() { "-start" } else { "" }),
        None => commit.to_owned(),
    };
    dir.join(".cache/hubalign").join(name)
}

/// Removes a finished pull's work folder, and the folders above it that it leaves empty.
fn remove_work(work: &Path) {
    let _ = std::fs::remove_dir_all(work);
    for parent in work.ancestors().skip(1).take(2) {
        if std::fs::remove_dir(parent).is_err() {
            break;
        }
    }
}

/// The download's layout under `work`.
fn layout(work: &Path, repair: Option<RepairTarget>) -> Layout {
    Layout {
        source: work.join("files"),
        partial: work.join("partial"),
        carry_only: repair.is_some(),
        room_for_relayout: repair.is_some(),
        repair,
        connections: download::DEFAULT_CONNECTIONS,
        ready: None,
    }
}

/// The list of files the last pull put in a local directory, inside it.
const PULLED: &str = ".cache/hubalign/pulled.json";

/// Moves every file under `from` into `dir`, under the same relative paths, replacing what is there. It first
/// removes the files an earlier pull put in `dir` that this one does not bring. So a loader picks up no stale
/// shard of another commit, or of another repo of the same name. Returns `dir`.
fn install(from: &Path, dir: &Path) -> Result<PathBuf, RepackError> {
    crate::blocking::assert_off_executor("moving the pulled files");
    let io = |what: &Path, e| RepackError::io(format_args!("moving into {}", what.display()), e);
    let files = files_under(from).map_err(|e| io(from, e))?;
    let earlier: Vec<String> = crate::safe_fs::read_capped(&dir.join(PULLED), 16 << 20)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default();
    for stale in earlier.iter().filter(|f| !files.contains(f)) {
        if crate::untrusted::check_repo_path(stale).is_ok() {
            let _ = std::fs::remove_file(dir.join(stale));
        }
    }
    for rel in &files {
        let dest = dir.join(rel);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io(parent, e))?;
        }
        std::fs::rename(from.join(rel), &dest).map_err(|e| io(&dest, e))?;
    }
    let record = dir.join(PULLED);
    if let Some(parent) = record.parent() {
        std::fs::create_dir_all(parent).map_err(|e| io(parent, e))?;
    }
    let listed = serde_json::to_vec(&files).map_err(RepackError::caused_by)?;
    crate::safe_fs::write_atomic(&record, &listed).map_err(|e| io(&record, e))?;
    Ok(dir.to_owned())
}

/// The relative paths of the files under `root`, `/`-separated, sorted.
fn files_under(root: &Path) -> std::io::Result<Vec<String>> {
    let mut files = Vec::new();
    let mut stack = vec![root.to_owned()];
    while let Some(folder) = stack.pop() {
        for entry in std::fs::read_dir(&folder)? {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(rel) = path.strip_prefix(root) {
                files.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_earlier_record_removes_only_stale_files_inside_the_folder() {
        let root = tempfile::tempdir().unwrap();
        let (from, dir) = (root.path().join("from"), root.path().join("dir"));
        std::fs::create_dir_all(from.join("sub")).unwrap();
        std::fs::create_dir_all(dir.join(".cache/hubalign")).unwrap();
        std::fs::write(from.join("model.safetensors"), b"new").unwrap();
        std::fs::write(from.join("sub/tokenizer.json"), b"{}").unwrap();
        std::fs::write(dir.join("model-00002-of-00002.safetensors"), b"stale").unwrap();
        std::fs::write(dir.join("notes.txt"), b"the user's own").unwrap();
        std::fs::write(root.path().join("outside"), b"not ours").unwrap();
        let absolute = root.path().join("outside").display().to_string();
        let hostile = ["model-00002-of-00002.safetensors", "../outside", "sub/../../outside", &absolute, "", "."];
        std::fs::write(dir.join(PULLED), serde_json::to_vec(&hostile).unwrap()).unwrap();

        assert_eq!(install(&from, &dir).unwrap(), dir);

        assert!(!dir.join("model-00002-of-00002.safetensors").exists(), "the stale shard is removed");
        assert_eq!(std::fs::read(root.path().join("outside")).unwrap(), b"not ours");
        assert_eq!(std::fs::read(dir.join("notes.txt")).unwrap(), b"the user's own", "unlisted files stay");
        assert_eq!(std::fs::read(dir.join("model.safetensors")).unwrap(), b"new");
        let listed: Vec<String> = serde_json::from_slice(&std::fs::read(dir.join(PULLED)).unwrap()).unwrap();
        assert_eq!(listed, ["model.safetensors", "sub/tokenizer.json"], "the record lists only this pull");
    }

    #[test]
    fn an_unreadable_record_removes_nothing() {
        let root = tempfile::tempdir().unwrap();
        let (from, dir) = (root.path().join("from"), root.path().join("dir"));
        std::fs::create_dir_all(&from).unwrap();
        std::fs::create_dir_all(dir.join(".cache/hubalign")).unwrap();
        std::fs::write(from.join("model.safetensors"), b"new").unwrap();
        std::fs::write(dir.join("old.safetensors"), b"kept").unwrap();
        std::fs::write(dir.join(PULLED), b"{not json").unwrap();

        install(&from, &dir).unwrap();

        assert_eq!(std::fs::read(dir.join("old.safetensors")).unwrap(), b"kept");
    }
}
