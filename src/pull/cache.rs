//! The Hugging Face cache's layout, as `huggingface_hub` writes it. So `hf`, `mlx_lm.load` and every other
//! client find what `pull` put there.
//!
//! - `models--{namespace}--{name}/blobs/{etag}` holds each file once.
//! - `snapshots/{commit}/{path}` links to it.
//! - `refs/{revision}` names the commit.

use std::path::{Path, PathBuf};

use crate::hub::tree::TreeFile;

/// The cache folder `huggingface_hub` uses: `HF_HUB_CACHE`, else `HUGGINGFACE_HUB_CACHE`, else
/// `$HF_HOME/hub`, else `$XDG_CACHE_HOME/huggingface/hub`, else `~/.cache/huggingface/hub`.
/// A leading `~` and each `$NAME` in the chosen path expand as `huggingface_hub` expands them.
pub fn hub_cache_dir() -> Option<PathBuf> {
    let var = |key: &str| std::env::var_os(key).filter(|v| !v.is_empty()).map(PathBuf::from);
    let chosen = var("HF_HUB_CACHE")
        .or_else(|| var("HUGGINGFACE_HUB_CACHE"))
        .or_else(|| var("HF_HOME").map(|h| h.join("hub")))
        .or_else(|| var("XDG_CACHE_HOME").map(|c| c.join("huggingface/hub")))
        .or_else(|| var("HOME").map(|h| h.join(".cache/huggingface/hub")))?;
    Some(chosen.to_str().map_or_else(|| chosen.clone(), expand))
}

/// `path` with a leading `~` or `~/` replaced by `HOME`, then each `$NAME` or `${NAME}` that names a set
/// variable replaced by its value, as Python's `os.path.expanduser` and `os.path.expandvars` do.
/// A variable that is not set stays as written.
fn expand(path: &str) -> PathBuf {
    let home = std::env::var("HOME").ok();
    let path = match (path.strip_prefix('~'), home) {
        (Some(rest), Some(home)) if rest.is_empty() || rest.starts_with('/') => format!("{home}{rest}"),
        _ => path.to_owned(),
    };
    PathBuf::from(expand_vars(&path, |name| std::env::var(name).ok()))
}

/// `text` with each `$NAME` or `${NAME}` for which `value` gives a value replaced by it.
/// A name is ASCII letters, digits and `_`, as Python's `expandvars` reads it.
fn expand_vars(text: &str, value: impl Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (name, written) = match after.strip_prefix('{') {
            Some(braced) => match braced.find('}') {
                Some(end) => (&braced[..end], end + 2),
                None => ("", 0),
            },
            None => {
                let end = after.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(after.len());
                (&after[..end], end)
            }
        };
        match value(name).filter(|_| !name.is_empty()) {
            Some(v) => out.push_str(&v),
            None => out.push_str(&rest[at..at + 1 + written]),
        }
        rest = &rest[at + 1 + written..];
    }
    out.push_str(rest);
    out
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

    #[test]
    fn variables_expand_as_python_expands_them() {
        let value = |name: &str| (name == "HOME_ON").then(|| "/data".to_owned());
        assert_eq!(expand_vars("$HOME_ON/hf", value), "/data/hf");
        assert_eq!(expand_vars("${HOME_ON}/hf", value), "/data/hf");
        assert_eq!(expand_vars("$UNSET/hf", value), "$UNSET/hf");
        assert_eq!(expand_vars("${UNSET}/hf", value), "${UNSET}/hf");
        assert_eq!(expand_vars("a$/b${x", value), "a$/b${x");
        assert_eq!(expand_vars("$HOME_ON$HOME_ON", value), "/data/data");
        assert_eq!(expand_vars("/plain/path", value), "/plain/path");
    }
}
