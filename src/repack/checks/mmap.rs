//! The memory-map check: every tensor can be viewed in place as its type, as a zero-copy loader views it.

use std::path::Path;

use serde::Serialize;

use super::{Check, Problem, Runs, VerifyError, wrong};
use crate::job::payload::Figures;
use crate::manifest::Manifest;
use crate::safetensors::read::read_shard_header;

pub(super) const CHECK: Check = Check { name: "mmap", runs: Runs::Here(run), card: CARD };

const CARD: &str = "- Memory map: every tensor of every shard was mapped and viewed as its element type without a copy
  ({{ c.figures.zero_copy|thousands }} of {{ c.figures.tensors|thousands }} tensors).";

/// What the memory-map check found.
#[derive(Serialize)]
struct Found {
    /// Shards mapped.
    shards: u64,
    /// Tensors viewed.
    tensors: u64,
    /// Tensors viewed in place as their type.
    zero_copy: u64,
}

/// Maps every shard and views each tensor in place as its element type, as a zero-copy loader does.
/// Counts the tensors that can be viewed so, and fails unless all can.
fn run(dir: &Path, manifest: &Manifest) -> Result<Figures, VerifyError> {
    crate::blocking::assert_off_executor("the mmap check");
    let mut checks = Found { shards: 0, tensors: 0, zero_copy: 0 };
    for entry in &manifest.shards {
        let path = dir.join(&entry.file);
        let shard = read_shard_header(&path)?;
        let map = map_file(&path).map_err(|source| VerifyError::Map { file: entry.file.clone(), source })?;
        let start = shard.header.data_start() as usize;
        for t in &shard.header.tensors {
            let bytes = map
                .get(start + t.begin as usize..start + t.end as usize)
                .ok_or_else(|| wrong(&entry.file, Problem::PastTheEnd(t.name.clone())))?;
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
        return Err(VerifyError::NotInPlace { copied: checks.tensors - checks.zero_copy, tensors: checks.tensors });
    }
    Ok(super::figures(&checks))
}

#[allow(unsafe_code)]
fn map_file(path: &Path) -> std::io::Result<memmap2::Mmap> {
    let file = std::fs::File::open(path)?;
    // SAFETY: the file is the worker's own output in its private work directory, written and synced before
    // this check. Nothing modifies it while the map lives, and `run` drops the map before it returns.
    unsafe { memmap2::Mmap::map(&file) }
}
