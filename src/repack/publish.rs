//! Publishing a verified bundle as `{namespace}/{name}-aligned` through hf-hub's commit API (Xet, so a
//! header-padded shard uploads little more than what changed).

use std::path::Path;

use hf_hub::{HFClient, RepoTypeModel};

use crate::manifest::{MANIFEST_FILE, Manifest};

/// What publishing did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Published {
    /// A new commit on the mirror.
    Committed(String),
    /// The mirror already holds this source commit's repair; nothing was sent.
    AlreadyThere(String),
}

/// The mirror's id: `{target_namespace}/{source name}-aligned`.
pub fn mirror_id(source: &str, target_namespace: &str) -> String {
    let name = source.rsplit('/').next().unwrap_or(source);
    format!("{target_namespace}/{name}-aligned")
}

/// Uploads `dir` to the mirror: created private, committed, then made public. If the mirror's manifest already
/// names this source commit, nothing is done; if it names an older one, a new commit goes to the same repo.
pub async fn publish(hf: &HFClient, target: &str, dir: &Path, source_sha: &str) -> Result<Published, String> {
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
    let commit = repo
        .upload_folder()
        .folder_path(dir.to_owned())
        .commit_message(format!("Aligned safetensors from source commit {source_sha}"))
        .send()
        .await
        .map_err(|e| format!("uploading to {target}: {e}"))?;
    repo.update_settings().private(false).send().await.map_err(|e| format!("making {target} public: {e}"))?;
    Ok(Published::Committed(commit.commit_oid.unwrap_or_default()))
}
