//! The checks a repaired bundle must pass before it is published: structural (strict parse, alignment, the
//! manifest's record complete) and memory-mapped (every tensor viewable in place as its type). The MLX check
//! (`mlx`) then judges the bytes by the manifest's digests.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::hashing::is_hex;
use crate::manifest::Manifest;
use crate::safetensors::read::read_shard_header;
use crate::safetensors::{Alignment, Method, classify};

/// What the two local checks found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalChecks {
    /// Shards checked.
    pub shards: u64,
    /// Tensors checked.
    pub tensors: u64,
    /// Tensors a memory map could hand out as their type without a copy.
    pub zero_copy: u64,
}

/// Checks every shard the manifest lists against its record, from the headers alone: strict parse, every
/// tensor aligned, the size and tensor count recorded, and the digests the bytes will be judged by present (the
/// payload's; each tensor's for a reorder). The bytes themselves were hashed as the re-layout wrote them, and
/// the MLX check judges the loaded output by those digests: reading them again here would prove nothing new.
pub fn structural(dir: &Path, manifest: &Manifest) -> Result<u64, String> {
    crate::blocking::assert_off_executor("the structural check");
    let alignment = Alignment::new(manifest.target_alignment).unwrap_or_default();
    let mut tensors = 0;
    for entry in &manifest.shards {
        let path = dir.join(&entry.file);
        let shard = read_shard_header(&path).map_err(|e| e.to_string())?;
        let header = &shard.header;
        let audit = classify(header, alignment);
        // A shard left unchanged keeps its data start, which no tensor of it needed moved.
        let start_ok = entry.method == Method::Unchanged || header.data_start() % manifest.target_alignment == 0;
        if audit.misaligned_tensors != 0 || !start_ok {
            return Err(format!("{}: {} tensors misaligned after the fix", entry.file, audit.misaligned_tensors));
        }
        let count = header.tensors.len() as u64;
        if header.header_len != entry.written_header_len() || header.data_len() != entry.payload_bytes {
            return Err(format!("{}: header or payload length differs from the manifest's record", entry.file));
        }
        if count != entry.tensors {
            return Err(format!("{}: {count} tensors, the source had {}", entry.file, entry.tensors));
        }
        if !is_hex(&entry.payload_sha256, 64) {
            return Err(format!("{}: no payload digest recorded", entry.file));
        }
        let named =
            |t: &crate::safetensors::TensorInfo| entry.tensor_sha256.get(&t.name).is_some_and(|d| is_hex(d, 64));
        let per_tensor = entry.tensor_sha256.len() as u64 == count && header.tensors.iter().all(named);
        if entry.method == Method::Relayout && !per_tensor {
            return Err(format!("{}: reordered, but not every tensor's digest is recorded", entry.file));
        }
        tensors += count;
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
