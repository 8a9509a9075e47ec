//! The files around the shards: sidecars copied with `--out`, and temporary files a killed run left.

use std::path::Path;

use super::{FixError, io_error};
use crate::bundle::SHARD_SUFFIX;
use crate::manifest::MANIFEST_FILE;
use crate::safe_fs;
use crate::safetensors::rewrite::TEMP_SUFFIX;

/// Copies every file of the bundle that is not a shard, recursively: config, tokenizer, index, licence….
/// It follows symlinks in the source, so a cache snapshot yields real files. It never follows one in the
/// output: a symlink already there is replaced, never written through. Only regular files are read.
pub(super) fn copy_sidecars(src: &Path, dst: &Path) -> Result<Vec<String>, FixError> {
    let mut copied = Vec::new();
    copy_tree(src, dst, Path::new(""), &mut copied)?;
    Ok(copied)
}

fn copy_tree(src: &Path, dst: &Path, rel: &Path, copied: &mut Vec<String>) -> Result<(), FixError> {
    let dir = src.join(rel);
    let mut entries: Vec<_> =
        std::fs::read_dir(&dir).map_err(io_error(&dir, "read directory"))?.filter_map(Result::ok).collect();
    entries.sort_by_key(std::fs::DirEntry::file_name);
    for entry in entries {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || name.ends_with(SHARD_SUFFIX) || name == MANIFEST_FILE {
            continue;
        }
        let from = entry.path();
        let rel_path = rel.join(&name);
        let meta = std::fs::metadata(&from).map_err(io_error(&from, "stat"))?;
        if meta.is_dir() && !entry.file_type().is_ok_and(|t| t.is_symlink()) {
            let target = dst.join(&rel_path);
            safe_fs::create_dirs_nofollow(dst, &rel_path).map_err(io_error(&target, "create directory"))?;
            copy_tree(src, dst, &rel_path, copied)?;
        } else if meta.is_file() {
            let to = dst.join(&rel_path);
            let mut reader = safe_fs::open_regular(&from).map_err(io_error(&from, "open"))?;
            let mut writer = safe_fs::create_nofollow(&to).map_err(io_error(&to, "create"))?;
            std::io::copy(&mut reader, &mut writer).map_err(io_error(&to, "copy"))?;
            writer.set_permissions(meta.permissions()).map_err(io_error(&to, "set permissions"))?;
            copied.push(rel_path.display().to_string());
        } else {
            tracing::warn!(file = %from.display(), kind = safe_fs::kind_of(&meta), "not a regular file; not copied");
        }
    }
    Ok(())
}

/// Removes temporary files a killed run left behind, but never one a live process may still be writing.
pub(super) fn remove_stale_temps(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(stem) = name.strip_prefix('.').and_then(|n| n.strip_suffix(TEMP_SUFFIX)) else { continue };
        // Names are `.{shard}.{pid}.{random}.hubalign.tmp`.
        let pid = stem.rsplit('.').nth(1).and_then(|p| p.parse::<u32>().ok());
        let alive = pid.is_none_or(|pid| !Path::new("/proc").exists() || Path::new(&format!("/proc/{pid}")).exists());
        if !alive {
            tracing::info!(file = %entry.path().display(), "removing a temporary file left by an interrupted run");
            let _ = std::fs::remove_file(entry.path());
        }
    }
}
