//! The structural check: each shard parses strictly, is aligned, and matches the manifest's record.

use std::path::Path;

use serde::Serialize;

use super::{Check, Problem, Runs, VerifyError, wrong};
use crate::hashing::is_hex;
use crate::job::payload::Figures;
use crate::manifest::Manifest;
use crate::safetensors::read::read_shard_header;
use crate::safetensors::{Alignment, Method, classify};

pub(super) const CHECK: Check = Check { name: "structural", runs: Runs::Here(run), card: CARD };

const CARD: &str = "- Structural: the strict safetensors parser accepts every shard, every tensor is aligned, and each
  tensor's SHA-256 equals the source's{% if not any_relayout %} (and each shard's payload SHA-256 equals the source's){% endif %}.";

/// What the structural check found.
#[derive(Serialize)]
struct Found {
    /// Shards checked.
    shards: u64,
    /// Tensors checked.
    tensors: u64,
}

/// Checks every shard the manifest lists against its record, from the headers alone.
/// Each shard must parse strictly, align every tensor, and match the recorded size and tensor count.
/// The manifest must hold the digests the bytes will be judged by: the payload's, and each tensor's for a
/// reorder. The re-layout hashed the bytes as it wrote them, and the MLX check judges the loaded output by
/// those digests. Reading the bytes again here would prove nothing new.
fn run(dir: &Path, manifest: &Manifest) -> Result<Figures, VerifyError> {
    crate::blocking::assert_off_executor("the structural check");
    let alignment = Alignment::new(manifest.target_alignment).unwrap_or_default();
    let mut found = Found { shards: 0, tensors: 0 };
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
        found.shards += 1;
        found.tensors += count;
    }
    Ok(super::figures(&found))
}
