//! Turns `DIR/models/{namespace}/{name}/…` into repositories, and re-reads it when it changes.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use sha2::{Digest, Sha256};

use super::model::{Commit, FileEntry, RepoMeta, Storage};
use crate::digests::finish_hex;
use crate::io_error::PathIoError;

/// The per-repo sidecar with metadata; never served as a file.
pub const SIDECAR: &str = ".hubsim.json";

/// Files at least this large are LFS even without a matching extension (the Hub's 10 MB rule).
const LFS_MIN_SIZE: u64 = 10 * 1024 * 1024;
/// Extensions the Hub's default `.gitattributes` sends to LFS.
const LFS_EXTENSIONS: [&str; 16] = [
    "safetensors",
    "bin",
    "pt",
    "pth",
    "ckpt",
    "gguf",
    "npz",
    "npy",
    "h5",
    "onnx",
    "msgpack",
    "zip",
    "tar",
    "model",
    "parquet",
    "arrow",
];

/// Whether a file of this path and size is stored in LFS, and so, on today's Hub, in Xet.
pub fn is_lfs_path(path: &str, size: u64) -> bool {
    let ext = path.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase());
    size >= LFS_MIN_SIZE || ext.is_some_and(|e| LFS_EXTENSIONS.contains(&e.as_str()))
}

/// A file found on disk, hashed.
#[derive(Debug, Clone)]
pub struct DiskFile {
    /// Path inside the repo, with `/`.
    pub rel: String,
    /// Where it is.
    pub abs: PathBuf,
    /// Size.
    pub size: u64,
    /// SHA-256.
    pub sha256: String,
    /// The bytes of a regular (non-LFS) file, which its git oid is computed from.
    pub content: Option<Vec<u8>>,
    /// Modification time, seconds since the epoch.
    pub mtime: u64,
}

/// A repository directory found on disk.
#[derive(Debug, Clone)]
pub struct DiskRepo {
    /// `namespace/name`.
    pub id: String,
    /// Its files, sorted by path.
    pub files: Vec<DiskFile>,
    /// Its sidecar metadata.
    pub meta: RepoMeta,
}

impl DiskRepo {
    /// The commit these files make, given where LFS content went. `xet_hash` gives the Xet hash of each
    /// sha256 ingested to Xet.
    pub fn commit(&self, parent: Option<String>, xet_hash: &dyn Fn(&str) -> Option<String>) -> Commit {
        let files: BTreeMap<String, FileEntry> = self
            .files
            .iter()
            .map(|f| {
                let storage = if is_lfs_path(&f.rel, f.size) {
                    xet_hash(&f.sha256).map_or(Storage::Lfs, |xet_hash| Storage::Xet { xet_hash })
                } else {
                    Storage::Regular
                };
                (f.rel.clone(), FileEntry::new(f.size, f.sha256.clone(), storage, f.content.as_deref()))
            })
            .collect();
        let mtime = self.files.iter().map(|f| f.mtime).max().unwrap_or(0);
        let date = crate::clock::hub_time(mtime);
        Commit::new(parent, files, "Upload folder using huggingface_hub".into(), date)
    }
}

/// Reads every repository under `root/models`.
pub fn scan_root(root: &Path) -> Result<Vec<DiskRepo>, PathIoError> {
    let models = root.join("models");
    let mut repos = Vec::new();
    for ns in sorted_dirs(&models)? {
        for repo in sorted_dirs(&ns)? {
            let id = format!("{}/{}", file_name(&ns), file_name(&repo));
            let mut files = Vec::new();
            collect_files(&repo, &repo, &mut files)?;
            files.sort_by(|a, b| a.rel.cmp(&b.rel));
            let mut meta = read_sidecar(&repo)?;
            // As the Hub does for a pushed card, the README's front matter says what the sidecar leaves
            // unsaid.
            let card = files.iter().find(|f| f.rel == "README.md").and_then(|f| f.content.as_deref());
            if let Some(card) = card.and_then(|c| std::str::from_utf8(c).ok()) {
                crate::card::apply(&mut meta, card, true);
            }
            repos.push(DiskRepo { id, files, meta });
        }
    }
    Ok(repos)
}

fn file_name(p: &Path) -> String {
    p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

fn sorted_dirs(dir: &Path) -> Result<Vec<PathBuf>, PathIoError> {
    if !dir.exists() {
        return Ok(Vec::new());
    }
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(PathIoError::at(dir, "read directory"))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_dir() && !file_name(p).starts_with('.'))
        .collect();
    out.sort();
    Ok(out)
}

fn collect_files(root: &Path, dir: &Path, out: &mut Vec<DiskFile>) -> Result<(), PathIoError> {
    for entry in std::fs::read_dir(dir).map_err(PathIoError::at(dir, "read directory"))?.filter_map(Result::ok) {
        let path = entry.path();
        let name = file_name(&path);
        if name.starts_with('.') {
            continue;
        }
        let meta = std::fs::metadata(&path).map_err(PathIoError::at(&path, "stat"))?;
        if meta.is_dir() {
            collect_files(root, &path, out)?;
        } else if meta.is_file() {
            let rel = path.strip_prefix(root).unwrap_or(&path).to_string_lossy().replace('\\', "/");
            let (sha256, content) = hash_file(&path, meta.len(), !is_lfs_path(&rel, meta.len()))?;
            let mtime = meta.modified().ok().and_then(|t| t.duration_since(UNIX_EPOCH).ok()).map_or(0, |d| d.as_secs());
            out.push(DiskFile { rel, abs: path, size: meta.len(), sha256, content, mtime });
        }
    }
    Ok(())
}

/// SHA-256 of a file, keeping the bytes when asked. Small regular files need them for their git oid.
fn hash_file(path: &Path, size: u64, keep: bool) -> Result<(String, Option<Vec<u8>>), PathIoError> {
    let mut file = std::fs::File::open(path).map_err(PathIoError::at(path, "open"))?;
    if keep {
        let mut bytes = Vec::with_capacity(size as usize);
        file.read_to_end(&mut bytes).map_err(PathIoError::at(path, "read"))?;
        return Ok((finish_hex(Sha256::new_with_prefix(&bytes)), Some(bytes)));
    }
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(PathIoError::at(path, "read"))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok((finish_hex(h), None))
}

fn read_sidecar(repo: &Path) -> Result<RepoMeta, PathIoError> {
    let path = repo.join(SIDECAR);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| PathIoError {
            path,
            op: "parse sidecar",
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(RepoMeta::default()),
        Err(source) => Err(PathIoError { path, op: "read", source }),
    }
}
