//! Plans a new layout: the new header, and where each tensor's bytes go. Planning touches no file.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use thiserror::Error;

use super::classify::{Alignment, Verdict, classify};
use super::header::{Header, HeaderMetadata, LEN_PREFIX};

/// MLX refuses `N >= 100,000,000`, so plans stay one byte under. The reference reader allows `==`.
pub const MAX_PLANNED_HEADER_LEN: u64 = 99_999_999;

/// How a shard is rewritten.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// Already aligned: bytes stay as they are.
    Unchanged,
    /// Keeps the JSON, adds trailing spaces, and keeps the payload byte for byte. It is the default because
    /// it is the only method of Mei's tool, whose manifests lack the field.
    #[default]
    HeaderPad,
    /// Reorders tensors by width, largest first, and rewrites offsets. Every tensor's bytes are kept.
    Relayout,
}

impl Method {
    /// The snake_case name used in reports and the manifest.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Unchanged => "unchanged",
            Method::HeaderPad => "header_pad",
            Method::Relayout => "relayout",
        }
    }
}

/// Where one tensor's bytes move, relative to the data sections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// Begin in the source data section.
    pub src_begin: u64,
    /// Begin in the new data section.
    pub dst_begin: u64,
    /// Byte length.
    pub len: u64,
}

/// A complete plan for one shard.
#[derive(Debug, Clone, PartialEq)]
pub struct LayoutPlan {
    /// How the shard is rewritten.
    pub method: Method,
    /// The new header bytes (JSON plus padding), i.e. the new `N` bytes after the length prefix.
    pub header: Vec<u8>,
    /// Spaces appended to the JSON.
    pub padding_bytes: u64,
    /// One per tensor, in the order of `Header::tensors` (source data order).
    pub placements: Vec<Placement>,
    /// The alignment the data section was put on.
    pub data_alignment: u64,
}

impl LayoutPlan {
    /// The new `N`.
    pub fn header_len(&self) -> u64 {
        self.header.len() as u64
    }

    /// The new data start, `8 + N`.
    pub fn data_start(&self) -> u64 {
        LEN_PREFIX + self.header_len()
    }

    /// Everything before the new data section: `N` (little-endian) and the new header.
    pub fn prefix(&self) -> Vec<u8> {
        let mut prefix = Vec::with_capacity(self.header.len() + LEN_PREFIX as usize);
        prefix.extend_from_slice(&self.header_len().to_le_bytes());
        prefix.extend_from_slice(&self.header);
        prefix
    }

    /// Whether the payload is copied verbatim (so its hash is unchanged).
    pub fn keeps_payload(&self) -> bool {
        self.method != Method::Relayout
    }
}

/// Why no plan could be made.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum PlanError {
    /// Padding would push `N` to the loaders' limit.
    #[error("the padded header would be {header_len} bytes, over the {MAX_PLANNED_HEADER_LEN}-byte limit MLX accepts")]
    HeaderTooLarge {
        /// The header length the plan would need.
        header_len: u64,
    },
}

/// Plans the rewrite of a validated shard. `raw_json` is the source's `N` header bytes as read.
///
/// The data section goes on `max(target, widest dtype present)`, so every tensor can be naturally aligned
/// whatever the target. Header padding is used when it suffices; reordering only when it does not.
pub fn plan(header: &Header, raw_json: &[u8], target: Alignment) -> Result<LayoutPlan, PlanError> {
    let widest = header.tensors.iter().map(|t| t.dtype.natural_alignment()).max().unwrap_or(1);
    let data_alignment = target.get().max(widest);
    let identity: Vec<Placement> = header
        .tensors
        .iter()
        .map(|t| Placement { src_begin: t.begin, dst_begin: t.begin, len: t.byte_len() })
        .collect();
    match classify(header, target).verdict {
        // Already aligned: every tensor is, and the data starts on the target. It need not start on the
        // widest dtype, since a tensor at a compensating relative offset does not need that.
        Verdict::Aligned => Ok(LayoutPlan {
            method: Method::Unchanged,
            header: raw_json.to_vec(),
            padding_bytes: 0,
            placements: identity,
            // Keep the data start only if one was asked for. Otherwise its current place serves every tensor.
            data_alignment: if target.requires_data_start() { target.get() } else { 1 },
        }),
        Verdict::HeaderPad => {
            let (header, padding_bytes) = pad(raw_json.to_vec(), data_alignment)?;
            Ok(LayoutPlan { method: Method::HeaderPad, header, padding_bytes, placements: identity, data_alignment })
        }
        Verdict::Relayout | Verdict::Invalid => relayout(header, data_alignment),
    }
}

/// Reorders tensors stably by natural alignment, widest first. Every span before a tensor is then a multiple
/// of its alignment, so an aligned data start aligns them all, with no gaps.
fn relayout(header: &Header, data_alignment: u64) -> Result<LayoutPlan, PlanError> {
    let mut order: Vec<usize> = (0..header.tensors.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(header.tensors[i].dtype.natural_alignment()));
    let mut placements = vec![Placement { src_begin: 0, dst_begin: 0, len: 0 }; header.tensors.len()];
    let mut entries = Map::new();
    match &header.metadata {
        HeaderMetadata::Absent => {}
        HeaderMetadata::Null => {
            entries.insert("__metadata__".into(), Value::Null);
        }
        HeaderMetadata::Map(m) => {
            entries.insert("__metadata__".into(), Value::Object(m.clone()));
        }
    }
    let mut offset = 0;
    for i in order {
        let t = &header.tensors[i];
        placements[i] = Placement { src_begin: t.begin, dst_begin: offset, len: t.byte_len() };
        let mut entry = Map::new();
        entry.insert("dtype".into(), Value::from(t.dtype.name()));
        entry.insert("shape".into(), Value::from(t.shape.clone()));
        entry.insert("data_offsets".into(), Value::from(vec![offset, offset + t.byte_len()]));
        entry.extend(t.extra.iter().map(|(k, v)| (k.clone(), v.clone())));
        entries.insert(t.name.clone(), Value::Object(entry));
        offset += t.byte_len();
    }
    let json = Value::Object(entries).to_string().into_bytes();
    let (header, padding_bytes) = pad(json, data_alignment)?;
    Ok(LayoutPlan { method: Method::Relayout, header, padding_bytes, placements, data_alignment })
}

/// Appends spaces until `8 + len` is a multiple of `alignment`.
fn pad(mut json: Vec<u8>, alignment: u64) -> Result<(Vec<u8>, u64), PlanError> {
    let len = json.len() as u64;
    let padding = (LEN_PREFIX + len).next_multiple_of(alignment) - (LEN_PREFIX + len);
    let header_len = len + padding;
    if header_len > MAX_PLANNED_HEADER_LEN {
        return Err(PlanError::HeaderTooLarge { header_len });
    }
    json.resize(header_len as usize, b' ');
    Ok((json, padding))
}

#[cfg(test)]
mod tests;
