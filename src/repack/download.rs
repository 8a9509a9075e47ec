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

/// Downloads `repo` at `sha` into `dir` (hf-hub's parallel snapshot download) and checks each file's
/// sha256 (LFS) or git blob id against the tree; returns the tree.
pub async fn download(
    hub: &HubClient,
    hf: &HFClient,
    repo: &str,
    sha: &str,
    dir: &Path,
) -> Result<Vec<TreeFile>, String> {
    let files = hub.tree(repo, sha).await.map_err(|e| e.to_string())?;
    if let Some(bad) = files.iter().find(|f| !is_safe_repo_path(&f.path)) {
        return Err(format!("refusing file path {:?} from the Hub: it would leave the work directory", bad.path));
    }
    let (ns, name) = repo.split_once('/').ok_or_else(|| format!("{repo}: not namespace/name"))?;
    hf.model(ns, name)
        .snapshot_download()
        .revision(sha.to_owned())
        .local_dir(dir.to_owned())
        .send()
        .await
        .map_err(|e| format!("download of {repo}@{sha}: {e}"))?;
    for f in &files {
        check_file(&dir.join(&f.path), f)?;
    }
    Ok(files)
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
