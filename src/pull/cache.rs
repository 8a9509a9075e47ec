//! The Hugging Face cache's layout, as `huggingface_hub` writes it. So `hf`, `mlx_lm.load` and every other
//! client find what `pull` put there.
//!
//! - `models--{namespace}--{name}/blobs/{etag}` holds each file once.
//! - `snapshots/{commit}/{path}` links to it.
//! - `refs/{revision}` names the commit.

use std::path::{Path, PathBuf};

use crate::hub::tree::TreeFile;

/// The cache folder `huggingface_hub` uses: `HF_HUB_CACHE`, else `HUGGINGFACE_HUB_CACHE`, else `hub` in its
/// home folder (`HF_HOME`, else `$XDG_CACHE_HOME/huggingface`, else `~/.cache/huggingface`).
/// Each expands `~` and `$NAME` as `huggingface_hub` does.
pub fn hub_cache_dir() -> Option<PathBuf> {
    use crate::hub::config::{env_path, hf_home};
    env_path("HF_HUB_CACHE").or_else(|| env_path("HUGGINGFACE_HUB_CACHE")).or_else(|| Some(hf_home()?.join("hub")))
}

/// A model repo's folder in the cache at `cache`.
pub fn repo_folder(cache: &Path, repo_id: &str) -> PathBuf {
    cache.join(format!("models--{}", repo_id.replace('/', "--")))
}

/// Readies `folder` for a pull of `commit` and returns the pull's work folder, `.hubalign-pull/{commit}`.
/// It makes `snapshots/` first, as huggingface_hub does before it downloads. So a cache scan lists the repo
/// during the pull instead of warning that the folder is not a cached repo.
pub fn start_pull(folder: &Path, commit: &str) -> std::io::Result<PathBuf> {
    crate::blocking::assert_off_executor("making the cache folder");
    std::fs::create_dir_all(folder.join("snapshots"))?;
    Ok(folder.join(".hubalign-pull").join(commit))
}

/// The name the cache gives a file's blob: its ETag. The Hub sets it to the content's sha256 for an LFS or
/// Xet file, and to the git blob id for any other.
pub fn blob_name(file: &TreeFile) -> &str {
    file.lfs.as_ref().map_or(&file.oid, |lfs| &lfs.oid)
}

/// Moves each of `files`, downloaded and checked under `downloaded`, into `folder`'s blobs. Links each from
/// the snapshot of `commit`, and points `refs/{revision}` at the commit. Returns the snapshot. A blob already
/// there is kept, since its name is its hash. The download checked the paths against the Hub's rules.
pub fn place(
    folder: &Path,
    downloaded: &Path,
    files: &[TreeFile],
    (commit, revision): (&str, &str),
) -> std::io::Result<PathBuf> {
    crate::blocking::assert_off_executor("placing files in the cache");
    let (blobs, snapshot) = (folder.join("blobs"), folder.join("snapshots").join(commit));
    std::fs::create_dir_all(&blobs)?;
    std::fs::create_dir_all(&snapshot)?;
    for file in files {
        let blob = blobs.join(blob_name(file));
        let from = downloaded.join(&file.path);
        if blob.is_file() {
            std::fs::remove_file(&from)?;
        } else {
            std::fs::rename(&from, &blob)?;
        }
        let link = snapshot.join(&file.path);
        if let Some(parent) = link.parent() {
            std::fs::create_dir_all(parent)?;
        }
        // Link relatively, as huggingface_hub does: `../../blobs/{etag}`, one more `..` per path folder.
        let depth = file.path.matches('/').count() + 2;
        let target = PathBuf::from("../".repeat(depth)).join("blobs").join(blob_name(file));
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&target, &link)?;
    }
    if revision != commit {
        std::fs::create_dir_all(folder.join("refs"))?;
        crate::safe_fs::write_atomic(&folder.join("refs").join(revision), commit.as_bytes())?;
    }
    Ok(snapshot)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::tree::LfsInfo;

    fn file(path: &str, oid: &str, lfs: Option<&str>) -> TreeFile {
        TreeFile { path: path.into(), size: 1, oid: oid.into(), lfs: lfs.map(|o| LfsInfo { oid: o.into() }) }
    }

    #[test]
    fn files_become_blobs_named_by_their_etag_and_links_from_the_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let downloaded = dir.path().join("dl");
        std::fs::create_dir_all(downloaded.join("sub")).unwrap();
        std::fs::write(downloaded.join("model.safetensors"), b"weights").unwrap();
        std::fs::write(downloaded.join("sub/config.json"), b"{}").unwrap();
        let files = [file("model.safetensors", "gitoid1", Some("sha256hex")), file("sub/config.json", "gitoid2", None)];
        let folder = repo_folder(dir.path(), "org/model");
        let snapshot = place(&folder, &downloaded, &files, ("c0ffee", "main")).unwrap();
        assert_eq!(snapshot, dir.path().join("models--org--model/snapshots/c0ffee"));
        assert_eq!(std::fs::read(snapshot.join("model.safetensors")).unwrap(), b"weights");
        assert_eq!(std::fs::read_link(snapshot.join("sub/config.json")).unwrap(), Path::new("../../../blobs/gitoid2"));
        assert!(folder.join("blobs/sha256hex").is_file());
        assert_eq!(std::fs::read_to_string(folder.join("refs/main")).unwrap(), "c0ffee");
    }
}
