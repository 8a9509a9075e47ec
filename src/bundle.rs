//! Finds shards on disk and groups them into bundles, one model directory each.

use std::collections::BTreeMap;
use std::io;
use std::path::{Component, Path, PathBuf};

use serde::Deserialize;
use thiserror::Error;

/// File-name suffix of a shard.
pub const SHARD_SUFFIX: &str = ".safetensors";
/// File-name suffix of a sharded bundle's index.
pub const INDEX_SUFFIX: &str = ".safetensors.index.json";
/// The largest index read. One naming a hundred thousand tensors is a few MB.
pub const INDEX_CAP: u64 = 64 << 20;

/// A directory's shards, with its index if it has one.
#[derive(Debug, Clone, PartialEq)]
pub struct Bundle {
    /// The directory holding the shards.
    pub dir: PathBuf,
    /// Shard paths, sorted.
    pub shards: Vec<PathBuf>,
    /// The parsed `*.safetensors.index.json`.
    pub index: Option<BundleIndex>,
    /// Whether the user named the directory rather than single files. If so, its other files belong to the
    /// bundle.
    pub whole_dir: bool,
}

/// A sharded bundle's index.
#[derive(Debug, Clone, PartialEq)]
pub struct BundleIndex {
    /// The index file.
    pub path: PathBuf,
    /// Tensor name → shard file name.
    pub weight_map: BTreeMap<String, String>,
}

/// Why the inputs could not be turned into bundles.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum DiscoverError {
    /// A path could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The failure.
        #[source]
        source: io::Error,
    },
    /// A path given on the command line is neither a shard nor a directory.
    #[error("{}: not a .safetensors file or a directory", path.display())]
    NotAShard {
        /// The path.
        path: PathBuf,
    },
    /// An index file is not valid JSON of the expected shape.
    #[error("{}: unreadable index: {detail}", path.display())]
    BadIndex {
        /// The index file.
        path: PathBuf,
        /// What was wrong.
        detail: String,
    },
}

#[derive(Deserialize)]
struct RawIndex {
    weight_map: BTreeMap<String, String>,
}

/// Turns files, bundle directories, trees of bundles and Hugging Face cache directories into bundles.
///
/// It walks directories recursively. It follows symlinked files, because a cache's `snapshots/` are symlinks
/// into `blobs/`. It skips symlinked directories and hidden entries, so nothing is visited twice. It reads
/// only regular files. It lists special files named like shards for the scan to report.
pub fn discover(paths: &[PathBuf]) -> Result<Vec<Bundle>, DiscoverError> {
    let mut by_dir: BTreeMap<PathBuf, (Vec<PathBuf>, bool)> = BTreeMap::new();
    for path in paths {
        let meta = std::fs::metadata(path).map_err(|source| DiscoverError::Io { path: path.clone(), source })?;
        if meta.is_dir() {
            walk(path, &mut by_dir)?;
        } else if is_shard_name(path) {
            let dir = parent_dir(path);
            by_dir.entry(dir).or_default().0.push(path.clone());
        } else {
            return Err(DiscoverError::NotAShard { path: path.clone() });
        }
    }
    by_dir
        .into_iter()
        .map(|(dir, (mut shards, whole_dir))| {
            shards.sort();
            shards.dedup();
            let index = read_index(&dir)?;
            Ok(Bundle { dir, shards, index, whole_dir })
        })
        .collect()
}

fn walk(dir: &Path, by_dir: &mut BTreeMap<PathBuf, (Vec<PathBuf>, bool)>) -> Result<(), DiscoverError> {
    let io_err = |source| DiscoverError::Io { path: dir.to_owned(), source };
    let mut entries: Vec<_> = std::fs::read_dir(dir).map_err(io_err)?.collect::<Result<_, _>>().map_err(io_err)?;
    entries.sort_by_key(std::fs::DirEntry::file_name);
    for entry in entries {
        let path = entry.path();
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let file_type = entry.file_type().map_err(|source| DiscoverError::Io { path: path.clone(), source })?;
        if file_type.is_dir() {
            walk(&path, by_dir)?;
        } else if is_shard_name(&path) && !std::fs::metadata(&path).is_ok_and(|m| m.is_dir()) {
            // List FIFOs, devices, sockets and dangling links with a shard's name too. The scan reports each
            // as unreadable, without reading it, rather than passing over it in silence.
            let slot = by_dir.entry(dir.to_owned()).or_default();
            slot.0.push(path);
            slot.1 = true;
        }
    }
    Ok(())
}

fn is_shard_name(path: &Path) -> bool {
    path.file_name().is_some_and(|n| n.to_string_lossy().ends_with(SHARD_SUFFIX))
}

fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    }
}

fn read_index(dir: &Path) -> Result<Option<BundleIndex>, DiscoverError> {
    let io_err = |source| DiscoverError::Io { path: dir.to_owned(), source };
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .map_err(io_err)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().ends_with(INDEX_SUFFIX)))
        .collect();
    names.sort();
    let Some(path) = names.into_iter().next() else { return Ok(None) };
    let bytes = crate::safe_fs::read_capped(&path, INDEX_CAP)
        .map_err(|e| DiscoverError::BadIndex { path: path.clone(), detail: e.to_string() })?;
    let raw: RawIndex = serde_json::from_slice(&bytes)
        .map_err(|e| DiscoverError::BadIndex { path: path.clone(), detail: e.to_string() })?;
    Ok(Some(BundleIndex { path, weight_map: raw.weight_map }))
}

/// Whether `path` is, or resolves to, a content-addressed blob of a Hugging Face cache:
/// `…/models--org--name/blobs/<hash>`. Such a blob's name must keep matching its content.
pub fn is_hf_cache_blob(path: &Path) -> bool {
    let resolved = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
    let parts: Vec<_> = resolved.components().collect();
    parts.windows(2).any(|w| match (w[0], w[1]) {
        (Component::Normal(repo), Component::Normal(blobs)) => {
            let repo = repo.to_string_lossy();
            blobs == "blobs" && ["models--", "datasets--", "spaces--"].iter().any(|p| repo.starts_with(p))
        }
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_trees_and_hf_caches_once_each() {
        let root = tempfile::tempdir().unwrap();
        let repo = root.path().join("models--org--m");
        std::fs::create_dir_all(repo.join("blobs")).unwrap();
        std::fs::create_dir_all(repo.join("snapshots/abc")).unwrap();
        std::fs::write(repo.join("blobs/123"), b"x").unwrap();
        std::os::unix::fs::symlink("../../blobs/123", repo.join("snapshots/abc/model.safetensors")).unwrap();
        std::fs::create_dir_all(root.path().join("plain/.hidden")).unwrap();
        std::fs::write(root.path().join("plain/b.safetensors"), b"x").unwrap();
        std::fs::write(root.path().join("plain/a.safetensors"), b"x").unwrap();
        std::fs::write(root.path().join("plain/.hidden/c.safetensors"), b"x").unwrap();
        std::fs::write(
            root.path().join("plain/model.safetensors.index.json"),
            br#"{"metadata":{},"weight_map":{"w":"a.safetensors"}}"#,
        )
        .unwrap();
        std::os::unix::fs::symlink(root.path().join("plain"), root.path().join("loop")).unwrap();

        let bundles = discover(&[root.path().to_owned()]).unwrap();
        assert_eq!(bundles.len(), 2);
        let cached = &bundles[0];
        assert_eq!(cached.shards, [repo.join("snapshots/abc/model.safetensors")]);
        assert!(is_hf_cache_blob(&cached.shards[0]));
        let plain = &bundles[1];
        assert_eq!(plain.shards.len(), 2);
        assert!(plain.whole_dir);
        assert_eq!(plain.index.as_ref().unwrap().weight_map["w"], "a.safetensors");
        assert!(!is_hf_cache_blob(&plain.shards[0]));

        let single = discover(&[root.path().join("plain/a.safetensors")]).unwrap();
        assert!(!single[0].whole_dir);
        assert!(matches!(
            discover(&[root.path().join("plain/model.safetensors.index.json")]),
            Err(DiscoverError::NotAShard { .. })
        ));
    }
}
