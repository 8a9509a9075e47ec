//! The checks a repaired bundle must pass before it is published: structural (strict parse, alignment, the
//! manifest's record complete), memory-mapped (every tensor viewable in place as its type), and the index
//! (every entry names a shard of the bundle and a tensor it holds). The MLX check
//! (`mlx`) then judges the bytes by the manifest's digests.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use crate::hashing::is_hex;
use crate::job::payload::LocalChecks;
use crate::manifest::Manifest;
use crate::safetensors::read::{ReadError, read_shard_header};
use crate::safetensors::{Alignment, Method, classify};

/// Why a written bundle failed a local check.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// A shard could not be read or parsed.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// A shard could not be mapped.
    #[error("{file}: mmap: {source}")]
    Map {
        /// The shard.
        file: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A shard differs from what the manifest records, or is not what a zero-copy loader needs.
    #[error("{file}: {problem}")]
    Shard {
        /// The shard.
        file: String,
        /// What is wrong with it.
        problem: Problem,
    },
    /// Not every tensor can be viewed in place.
    #[error("{copied} of {tensors} tensors cannot be viewed in place")]
    NotInPlace {
        /// Tensors that need a copy.
        copied: u64,
        /// Tensors in all.
        tensors: u64,
    },
    /// A carried index names what the bundle does not hold, as loaders read it.
    #[error("{file}: {problem}")]
    Index {
        /// The index file.
        file: String,
        /// What it names wrongly (escaped).
        problem: String,
    },
}

/// Entries an index may name: far more than any model's tensors, far fewer than a hostile one may list.
pub const MAX_INDEX_ENTRIES: usize = 1_000_000;

/// Checks each `*.safetensors.index.json` the bundle carries, as a loader follows it: every entry names a
/// shard the bundle holds at its top (so no path leads elsewhere), and a tensor that shard holds; at most
/// [`MAX_INDEX_ENTRIES`] entries. Returns the entries checked.
pub fn index(dir: &Path) -> Result<u64, VerifyError> {
    crate::blocking::assert_off_executor("the index check");
    let wrong_index = |file: &str, problem: String| VerifyError::Index {
        file: file.to_owned(),
        problem: crate::gate::escape_control(&problem).into_owned(),
    };
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| wrong_index(&dir.display().to_string(), format!("listing the bundle: {e}")))?
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let indexes: Vec<&String> = names.iter().filter(|n| n.ends_with(crate::bundle::INDEX_SUFFIX)).collect();
    if indexes.is_empty() {
        return Ok(0);
    }
    // The tensors of each shard the mirror carries, from their headers alone.
    let mut held: HashMap<&str, HashSet<String>> = HashMap::new();
    for name in names.iter().filter(|n| n.ends_with(crate::bundle::SHARD_SUFFIX)) {
        let header = read_shard_header(&dir.join(name))?.header;
        held.insert(name.as_str(), header.tensors.into_iter().map(|t| t.name).collect());
    }
    let mut checked = 0;
    for name in indexes {
        let bytes = crate::safe_fs::read_capped(&dir.join(name), crate::bundle::INDEX_CAP)
            .map_err(|e| wrong_index(name, format!("unreadable: {e}")))?;
        let index: IndexFile =
            serde_json::from_slice(&bytes).map_err(|e| wrong_index(name, format!("not an index: {e}")))?;
        if index.weight_map.len() > MAX_INDEX_ENTRIES {
            let n = index.weight_map.len();
            return Err(wrong_index(name, format!("{n} entries, more than the {MAX_INDEX_ENTRIES} allowed")));
        }
        for (tensor, shard) in &index.weight_map {
            let Some(tensors) = held.get(shard.as_str()) else {
                return Err(wrong_index(
                    name,
                    format!("`{tensor}` is in `{shard}`, which is not a shard of the bundle"),
                ));
            };
            if !tensors.contains(tensor) {
                return Err(wrong_index(name, format!("`{tensor}` is not in `{shard}`")));
            }
            checked += 1;
        }
    }
    Ok(checked)
}

/// The part of an index a loader follows.
#[derive(serde::Deserialize)]
struct IndexFile {
    weight_map: BTreeMap<String, String>,
}

/// What is wrong with one shard.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    /// Tensors (or the data start) still misaligned.
    #[error("{0} tensors misaligned after the fix")]
    Misaligned(u64),
    /// Its header or payload length is not the manifest's.
    #[error("header or payload length differs from the manifest's record")]
    Lengths,
    /// Its tensor count is not the source's.
    #[error("{found} tensors, the source had {recorded}")]
    TensorCount {
        /// In the shard.
        found: u64,
        /// In the manifest.
        recorded: u64,
    },
    /// The manifest has no payload digest for it.
    #[error("no payload digest recorded")]
    NoPayloadDigest,
    /// Reordered, but a tensor's digest is missing.
    #[error("reordered, but not every tensor's digest is recorded")]
    MissingTensorDigests,
    /// A tensor's bytes end past the file's end.
    #[error("`{0}` past the end")]
    PastTheEnd(String),
}

fn wrong(file: &str, problem: Problem) -> VerifyError {
    VerifyError::Shard { file: file.to_owned(), problem }
}

/// Checks every shard the manifest lists against its record, from the headers alone: strict parse, every
/// tensor aligned, the size and tensor count recorded, and the digests the bytes will be judged by present (the
/// payload's; each tensor's for a reorder). The bytes themselves were hashed as the re-layout wrote them, and
/// the MLX check judges the loaded output by those digests: reading them again here would prove nothing new.
pub fn structural(dir: &Path, manifest: &Manifest) -> Result<u64, VerifyError> {
    crate::blocking::assert_off_executor("the structural check");
    let alignment = Alignment::new(manifest.target_alignment).unwrap_or_default();
    let mut tensors = 0;
    for entry in &manifest.shards {
        let path = dir.join(&entry.file);
        let shard = read_shard_header(&path)?;
        let header = &shard.header;
        let audit = classify(header, alignment);
        // A shard left unchanged keeps its data start, which no tensor of it needed moved.
        let start_ok = entry.method == Method::Unchanged || header.data_start() % manifest.target_alignment == 0;
        if audit.misaligned_tensors != 0 || !start_ok {
            return Err(wrong(&entry.file, Problem::Misaligned(audit.misaligned_tensors)));
        }
        let count = header.tensors.len() as u64;
        if header.header_len != entry.written_header_len() || header.data_len() != entry.payload_bytes {
            return Err(wrong(&entry.file, Problem::Lengths));
        }
        if count != entry.tensors {
            return Err(wrong(&entry.file, Problem::TensorCount { found: count, recorded: entry.tensors }));
        }
        if !is_hex(&entry.payload_sha256, 64) {
            return Err(wrong(&entry.file, Problem::NoPayloadDigest));
        }
        let named =
            |t: &crate::safetensors::TensorInfo| entry.tensor_sha256.get(&t.name).is_some_and(|d| is_hex(d, 64));
        let per_tensor = entry.tensor_sha256.len() as u64 == count && header.tensors.iter().all(named);
        if entry.method == Method::Relayout && !per_tensor {
            return Err(wrong(&entry.file, Problem::MissingTensorDigests));
        }
        tensors += count;
    }
    Ok(tensors)
}

/// Maps every shard and views each tensor as its element type in place, as a zero-copy loader does; counts
/// the tensors that can be (all must be).
pub fn mmap(dir: &Path, manifest: &Manifest) -> Result<LocalChecks, VerifyError> {
    crate::blocking::assert_off_executor("the mmap check");
    let mut checks = LocalChecks { shards: 0, tensors: 0, zero_copy: 0 };
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
    Ok(checks)
}

#[allow(unsafe_code)]
fn map_file(path: &Path) -> std::io::Result<memmap2::Mmap> {
    let file = std::fs::File::open(path)?;
    // SAFETY: the file is the worker's own output in its private work directory, written and synced before
    // this check and not modified while the map lives (it is dropped before the function that made it returns).
    unsafe { memmap2::Mmap::map(&file) }
}
