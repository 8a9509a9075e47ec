//! Publishing a verified bundle as `{namespace}/{name}-aligned` through hf-hub's commit API (Xet, so a
//! header-padded shard uploads little more than what changed).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use hf_hub::progress::{Progress, ProgressEvent, ProgressHandler, UploadEvent};
use hf_hub::{HFClient, RepoTypeModel};

use super::prime::prime;
use crate::hub::HubClient;
use crate::manifest::{MANIFEST_FILE, Manifest};

/// What publishing did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Published {
    /// A new commit on the mirror, and the bytes sent for it.
    Committed {
        /// The commit.
        commit: String,
        /// Bytes sent: Xet's post-dedup transfer plus the small files sent inline with the commit.
        bytes_uploaded: u64,
    },
    /// The mirror already holds this source commit's repair; nothing was sent.
    AlreadyThere(String),
}

/// The mirror's id: `{target_namespace}/{source name}-aligned`.
pub fn mirror_id(source: &str, target_namespace: &str) -> String {
    let name = source.rsplit('/').next().unwrap_or(source);
    format!("{target_namespace}/{name}-aligned")
}

/// Where a bundle is published and what its upload may deduplicate against.
pub struct Mirror<'a> {
    /// hf-hub, for the repo and the commit.
    pub hf: &'a HFClient,
    /// The crawler's client, for the Xet token that priming needs.
    pub hub: &'a HubClient,
    /// `namespace/name` of the mirror.
    pub target: &'a str,
    /// The source shards the staged ones were made from.
    pub sources: &'a [PathBuf],
}

/// Uploads `dir` to the mirror: created private, committed, then made public. If the mirror's manifest already
/// names this source commit, nothing is done; if it names an older one, a new commit goes to the same repo.
pub async fn publish(mirror: &Mirror<'_>, dir: &Path, source_sha: &str) -> Result<Published, String> {
    let (hf, target) = (mirror.hf, mirror.target);
    let (ns, name) = target.split_once('/').ok_or_else(|| format!("{target}: not namespace/name"))?;
    let repo = hf.model(ns, name);
    if let Ok(bytes) = repo.download_file_to_bytes().filename(MANIFEST_FILE.to_owned()).send().await
        && let Ok(existing) = serde_json::from_slice::<Manifest>(&bytes)
        && existing.source_revision.as_deref() == Some(source_sha)
    {
        // A worker that died between the upload and making the mirror public left it private.
        repo.update_settings().private(false).send().await.map_err(|e| format!("making {target} public: {e}"))?;
        let head = repo.info().send().await.map_err(|e| format!("{target}: {e}"))?;
        return Ok(Published::AlreadyThere(head.sha.unwrap_or_default()));
    }
    hf.create_repository()
        .repo_id(target)
        .repo_type(RepoTypeModel)
        .private(true)
        .exist_ok(true)
        .send()
        .await
        .map_err(|e| format!("creating {target}: {e}"))?;
    prime(mirror.hub, target, mirror.sources).await;
    let meter = UploadMeter::default();
    let commit = repo
        .upload_folder()
        .folder_path(dir.to_owned())
        .progress(Progress::new(meter.clone()))
        .commit_message(format!("Aligned safetensors from source commit {source_sha}"))
        .send()
        .await
        .map_err(|e| format!("uploading to {target}: {e}"))?;
    repo.update_settings().private(false).send().await.map_err(|e| format!("making {target} public: {e}"))?;
    let bytes_uploaded = meter.bytes_sent(dir);
    Ok(Published::Committed { commit: commit.commit_oid.unwrap_or_default(), bytes_uploaded })
}

/// Counts what an upload sends, from hf-hub's progress events.
#[derive(Clone, Default)]
struct UploadMeter {
    transferred: Arc<AtomicU64>,
    through_xet: Arc<Mutex<HashSet<String>>>,
}

impl ProgressHandler for UploadMeter {
    fn on_progress(&self, event: &ProgressEvent) {
        if let ProgressEvent::Upload(UploadEvent::Progress { transfer_bytes_completed, files, .. }) = event {
            self.transferred.fetch_max(*transfer_bytes_completed, Ordering::Relaxed);
            let mut xet = self.through_xet.lock().unwrap_or_else(|p| p.into_inner());
            xet.extend(files.iter().map(|f| f.filename.clone()));
        }
    }
}

impl UploadMeter {
    /// Xet's transfer plus every file of `dir` that did not go through Xet (sent inline with the commit).
    fn bytes_sent(&self, dir: &Path) -> u64 {
        let xet = self.through_xet.lock().unwrap_or_else(|p| p.into_inner());
        let mut files = Vec::new();
        list_files(dir, "", &mut files);
        let inline: u64 = files.iter().filter(|(rel, _)| !xet.contains(rel)).map(|(_, len)| len).sum();
        self.transferred.load(Ordering::Relaxed) + inline
    }
}

/// Every regular file under `dir`, as (path relative to it with `/`, size).
fn list_files(dir: &Path, prefix: &str, out: &mut Vec<(String, u64)>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let name = format!("{prefix}{}", entry.file_name().to_string_lossy());
        match entry.metadata() {
            Ok(m) if m.is_dir() => list_files(&entry.path(), &format!("{name}/"), out),
            Ok(m) => out.push((name, m.len())),
            Err(_) => {}
        }
    }
}
