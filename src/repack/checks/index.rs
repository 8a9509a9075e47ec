//! The index check: every entry of each carried index names a shard of the bundle and a tensor it holds.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use serde::Serialize;

use super::{Check, Runs, VerifyError};
use crate::job::payload::Figures;
use crate::manifest::Manifest;
use crate::safetensors::read::read_shard_header;

pub(super) const CHECK: Check = Check { name: "index", runs: Runs::Here(run), card: "" };

/// What the index check found.
#[derive(Serialize)]
struct Found {
    /// Index entries checked.
    entries: u64,
}

/// Entries an index may name: far more than any model's tensors, far fewer than a hostile one may list.
const MAX_INDEX_ENTRIES: usize = 1_000_000;

/// Checks each `*.safetensors.index.json` the bundle carries, as a loader follows it.
/// Every entry must name a shard at the bundle's top, so that no path leads elsewhere.
/// The entry's tensor must be in that shard. An index may hold at most [`MAX_INDEX_ENTRIES`] entries.
fn run(dir: &Path, _manifest: &Manifest) -> Result<Figures, VerifyError> {
    crate::blocking::assert_off_executor("the index check");
    let wrong_index = |file: &str, problem: String| VerifyError::Index {
        file: file.to_owned(),
        problem: crate::untrusted::escape_control(&problem).into_owned(),
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
        return Ok(super::figures(&Found { entries: 0 }));
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
    Ok(super::figures(&Found { entries: checked }))
}

/// The part of an index a loader follows.
#[derive(serde::Deserialize)]
struct IndexFile {
    weight_map: BTreeMap<String, String>,
}
