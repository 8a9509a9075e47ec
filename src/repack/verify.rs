//! The checks a repaired bundle must pass before it is published: structural (strict parse, alignment,
//! every tensor hash-equal to the source) and memory-mapped (every tensor viewable in place as its type).

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use crate::manifest::Manifest;
use crate::safetensors::read::read_shard_header;
use crate::safetensors::rewrite::hash_unchanged;
use crate::safetensors::{Alignment, Method, classify};

/// What the two local checks found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LocalChecks {
    /// Shards checked.
    pub shards: u64,
    /// Tensors checked.
    pub tensors: u64,
    /// Tensors a memory map could hand out as their type without a copy.
    pub zero_copy: u64,
}

/// Re-reads every shard the manifest lists: strict parse, every tensor aligned, each tensor's sha256 equal
/// to the source's (as the manifest recorded while reading the source), and an unchanged payload hash where
/// only the header was padded.
pub fn structural(dir: &Path, manifest: &Manifest) -> Result<u64, String> {
    crate::blocking::assert_off_executor("the structural check");
    let alignment = Alignment::new(manifest.target_alignment).unwrap_or_default();
    let mut tensors = 0;
    for entry in &manifest.shards {
        let path = dir.join(&entry.file);
        let shard = read_shard_header(&path).map_err(|e| e.to_string())?;
        let audit = classify(&shard.header, alignment);
        // A shard left unchanged keeps its data start, which no tensor of it needed moved.
        let start_ok = entry.method == Method::Unchanged || shard.header.data_start() % manifest.target_alignment == 0;
        if audit.misaligned_tensors != 0 || !start_ok {
            return Err(format!("{}: {} tensors misaligned after the fix", entry.file, audit.misaligned_tensors));
        }
        let hashes = hash_unchanged(&path, &shard, &mut |_| {}).map_err(|e| e.to_string())?;
        let by_name: BTreeMap<&str, &String> =
            shard.header.tensors.iter().map(|t| t.name.as_str()).zip(&hashes.tensor_sha256).collect();
        if by_name.len() != entry.tensor_sha256.len() {
            return Err(format!(
                "{}: {} tensors, the source had {}",
                entry.file,
                by_name.len(),
                entry.tensor_sha256.len()
            ));
        }
        for (name, want) in &entry.tensor_sha256 {
            if by_name.get(name.as_str()) != Some(&want) {
                return Err(format!("{}: tensor `{name}` differs from the source", entry.file));
            }
        }
        if entry.method != Method::Relayout && hashes.src_payload_sha256 != entry.src_payload_sha256 {
            return Err(format!("{}: payload differs from the source's", entry.file));
        }
        tensors += by_name.len() as u64;
    }
    Ok(tensors)
}

/// Maps every shard and views each tensor as its element type in place, as a zero-copy loader does; counts
/// the tensors that can be (all must be).
pub fn mmap(dir: &Path, manifest: &Manifest) -> Result<LocalChecks, String> {
    crate::blocking::assert_off_executor("the mmap check");
    let mut checks = LocalChecks { shards: 0, tensors: 0, zero_copy: 0 };
    for entry in &manifest.shards {
        let path = dir.join(&entry.file);
        let shard = read_shard_header(&path).map_err(|e| e.to_string())?;
        let map = map_file(&path).map_err(|e| format!("{}: mmap: {e}", entry.file))?;
        let start = shard.header.data_start() as usize;
        for t in &shard.header.tensors {
            let bytes = map
                .get(start + t.begin as usize..start + t.end as usize)
                .ok_or_else(|| format!("{}: `{}` past the end", entry.file, t.name))?;
            let in_place = match t.dtype.natural_alignment() {
                8 => bytemuck::try_cast_slice::<u8, u64>(bytes).is_ok(),
                4 => bytemuck::try_cast_slice::<u8, u32>(bytes).is_ok(),
                2 => bytemuck::try_cast_slice::<u8, u16>(bytes).is_ok(),
                _ => true,
            };
            checks.tensors += 1;
            checks.zero_copy += u64::from(in_place);
        }
        checks.shards += 1;
    }
    if checks.zero_copy != checks.tensors {
        return Err(format!(
            "{} of {} tensors cannot be viewed in place",
            checks.tensors - checks.zero_copy,
            checks.tensors
        ));
    }
    Ok(checks)
}

#[allow(unsafe_code)]
fn map_file(path: &Path) -> std::io::Result<memmap2::Mmap> {
    let file = std::fs::File::open(path)?;
    // SAFETY: the file is the worker's own output in its private work directory, written and synced before
    // this check and not modified while the map lives (it is dropped before the function that made it returns).
    unsafe { memmap2::Mmap::map(&file) }
}
