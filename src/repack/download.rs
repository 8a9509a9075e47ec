//! Fetching a bundle at the audited commit and checking every file against the hash the Hub gives for it.

use std::path::{Component, Path};

use hf_hub::HFClient;

use crate::hashing::{finish_hex, git_blob_oid};
use crate::hub::HubClient;
use crate::hub::tree::TreeFile;

/// Whether a path from the Hub stays inside the work directory: relative, no `..`, no empty parts.
pub fn is_safe_repo_path(path: &str) -> bool {
    !path.is_empty()
        && !path.contains('\\')
        && !path.split('/').any(|p| p.is_empty())
        && Path::new(path).components().all(|c| matches!(c, Component::Normal(_)))
}

/// What a download fetched.
#[derive(Debug, Clone)]
pub struct Downloaded {
    /// The repo's files at the commit.
    pub tree: Vec<TreeFile>,
    /// Bytes fetched by this attempt.
    pub bytes: u64,
    /// Files an earlier attempt had already fetched and verified, kept rather than fetched again.
    pub reused: usize,
}

/// Downloads `repo` at `sha` into `dir` (hf-hub's parallel snapshot download) and checks each file's
/// sha256 (LFS) or git blob id against the tree. Resumes an interrupted attempt file by file: what is in
/// `dir` and matches its hash is kept, anything partial or corrupt is removed and fetched again.
pub async fn download(
    hub: &HubClient,
    hf: &HFClient,
    repo: &str,
    sha: &str,
    dir: &Path,
) -> Result<Downloaded, Refused> {
    let tree = hub.tree(repo, sha).await.map_err(|e| e.to_string())?;
    if let Some(bad) = tree.iter().find(|f| !is_safe_repo_path(&f.path)) {
        return Err(format!("refusing file path {:?} from the Hub: it would leave the work directory", bad.path).into());
    }
    let (ns, name) = repo.split_once('/').ok_or_else(|| format!("{repo}: not namespace/name"))?;
    let mut kept = vec![false; tree.len()];
    for (f, kept) in tree.iter().zip(&mut kept) {
        let path = dir.join(&f.path);
        let _ = std::fs::remove_file(format!("{}.incomplete", path.display()));
        if path.exists() {
            *kept = check_file(&path, f).is_ok();
            if !*kept {
                std::fs::remove_file(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            }
        }
    }
    let reused = kept.iter().filter(|k| **k).count();
    if reused > 0 {
        tracing::info!(repo.id = %repo, files = reused, "resuming a download: keeping verified files");
    }
    hf.model(ns, name)
        .snapshot_download()
        .revision(sha.to_owned())
        .local_dir(dir.to_owned())
        .send()
        .await
        .map_err(|e| format!("download of {repo}@{sha}: {e}"))?;
    let bytes = tree.iter().zip(&kept).filter(|(_, kept)| !**kept).map(|(f, _)| f.size).sum();
    for (f, kept) in tree.iter().zip(&kept) {
        if !kept {
            check_file(&dir.join(&f.path), f).map_err(|reason| Refused { reason, bytes })?;
        }
    }
    Ok(Downloaded { tree, bytes, reused })
}

/// A download that arrived but did not match the Hub's hashes: why, and what it cost.
#[derive(Debug)]
pub struct Refused {
    /// Which file and why.
    pub reason: String,
    /// Bytes fetched before the refusal.
    pub bytes: u64,
}

impl From<String> for Refused {
    fn from(reason: String) -> Refused {
        Refused { reason, bytes: 0 }
    }
}

/// Size and hash of a downloaded file against its tree entry.
fn check_file(path: &Path, f: &TreeFile) -> Result<(), String> {
    let bytes_len = std::fs::metadata(path).map_err(|e| format!("{}: {e}", f.path))?.len();
    if bytes_len != f.size {
        return Err(format!("{}: downloaded {bytes_len} bytes, the Hub says {}", f.path, f.size));
    }
    let ok = match &f.lfs {
        Some(lfs) => sha256_file(path).map_err(|e| format!("{}: {e}", f.path))? == lfs.oid,
        None => git_blob_oid(&std::fs::read(path).map_err(|e| format!("{}: {e}", f.path))?) == f.oid,
    };
    if !ok {
        return Err(format!("{}: content does not match the Hub's hash; refusing a corrupted download", f.path));
    }
    Ok(())
}

fn sha256_file(path: &Path) -> std::io::Result<String> {
    use sha2::Digest;
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 4 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            return Ok(finish_hex(h));
        }
        h.update(&buf[..n]);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn repo_paths_stay_inside() {
        for ok in ["model.safetensors", "sub/dir/x.json"] {
            assert!(super::is_safe_repo_path(ok), "{ok}");
        }
        for bad in ["../x", "a/../../x", "/etc/passwd", "a//b", "", "a\\b", "./x"] {
            assert!(!super::is_safe_repo_path(bad), "{bad}");
        }
    }
}
