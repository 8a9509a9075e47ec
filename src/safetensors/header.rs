//! Parses the `u64 N | JSON header | data` layout strictly, from a byte prefix and the file size.

use std::cell::RefCell;
use std::collections::HashSet;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
use serde_json::{Map, Value};

use super::dtype::Dtype;
use super::error::HeaderError;

/// Bytes of the little-endian header-length prefix.
pub const LEN_PREFIX: u64 = 8;
/// The reference reader's cap on `N`.
pub const MAX_HEADER_LEN: u64 = 100_000_000;

/// One tensor entry of a header.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    /// Key in the header.
    pub name: String,
    /// Element type.
    pub dtype: Dtype,
    /// Dimensions; empty for a scalar.
    pub shape: Vec<u64>,
    /// Start, relative to the data section.
    pub begin: u64,
    /// One past the end, relative to the data section.
    pub end: u64,
    /// Fields the format does not define. Readers ignore them; a re-layout keeps them.
    pub extra: Map<String, Value>,
}

impl TensorInfo {
    /// Bytes the tensor occupies.
    pub fn byte_len(&self) -> u64 {
        self.end - self.begin
    }
}

/// The `__metadata__` entry, kept as written so that a re-layout can reproduce it.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum HeaderMetadata {
    /// No `__metadata__` key.
    #[default]
    Absent,
    /// `"__metadata__": null`, as MLX writes when given no metadata.
    Null,
    /// A map whose values are all strings.
    Map(Map<String, Value>),
}

/// A validated header: every rule of the reference reader holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Header {
    /// `N`, the header length in bytes (including any padding).
    pub header_len: u64,
    /// Size of the whole file.
    pub file_size: u64,
    /// The `__metadata__` entry.
    pub metadata: HeaderMetadata,
    /// Tensors in data order (by offsets), which is how the reference validates them.
    pub tensors: Vec<TensorInfo>,
}

impl Header {
    /// File offset of the data section, `8 + N`.
    pub fn data_start(&self) -> u64 {
        LEN_PREFIX + self.header_len
    }

    /// Length of the data section.
    pub fn data_len(&self) -> u64 {
        self.file_size - self.data_start()
    }

    /// `__metadata__.format`, which names the writer (`mlx`, `pt`, `np`, …).
    pub fn writer(&self) -> Option<&str> {
        match &self.metadata {
            HeaderMetadata::Map(m) => m.get("format").and_then(Value::as_str),
            _ => None,
        }
    }
}

/// Reads `N` from the first 8 bytes and checks it against the cap and the file size.
pub fn read_header_len(prefix: &[u8], file_size: u64) -> Result<u64, HeaderError> {
    let Some(len_bytes) = prefix.get(..LEN_PREFIX as usize) else {
        return Err(HeaderError::TooSmall { file_size });
    };
    let mut raw = [0u8; 8];
    raw.copy_from_slice(len_bytes);
    let header_len = u64::from_le_bytes(raw);
    if header_len > MAX_HEADER_LEN {
        return Err(HeaderError::TooLarge { header_len });
    }
    if LEN_PREFIX + header_len > file_size {
        return Err(HeaderError::BeyondFile { header_len, file_size });
    }
    Ok(header_len)
}

/// Parses and validates a header from the first bytes of a file of `file_size` bytes.
///
/// `prefix` may be the whole file or any prefix of it that holds `8 + N` bytes. With less, it returns
/// [`HeaderError::Incomplete`], which says how many bytes are needed.
pub fn parse(prefix: &[u8], file_size: u64) -> Result<Header, HeaderError> {
    let header_len = read_header_len(prefix, file_size)?;
    let needed = LEN_PREFIX + header_len;
    let Some(json) = prefix.get(LEN_PREFIX as usize..needed as usize) else {
        return Err(HeaderError::Incomplete { needed, available: prefix.len() as u64 });
    };
    let text = std::str::from_utf8(json).map_err(|e| HeaderError::NotUtf8 { valid_up_to: e.valid_up_to() as u64 })?;
    let (metadata, mut tensors) = parse_json(text)?;
    tensors.sort_by_key(|t| (t.begin, t.end));
    let header = Header { header_len, file_size, metadata, tensors };
    validate_layout(&header)?;
    Ok(header)
}

fn parse_json(text: &str) -> Result<(HeaderMetadata, Vec<TensorInfo>), HeaderError> {
    let typed = RefCell::new(None);
    let mut de = serde_json::Deserializer::from_str(text);
    let result = HeaderSeed { typed: &typed }.deserialize(&mut de).and_then(|parsed| {
        de.end()?;
        Ok(parsed)
    });
    match (result, typed.into_inner()) {
        (_, Some(err)) => Err(err),
        (Ok(parsed), None) => Ok(parsed),
        (Err(e), None) => Err(HeaderError::Json { detail: e.to_string() }),
    }
}

/// Walks the offsets as the reference reader does: the sorted spans must tile `[0, data_len)` exactly.
fn validate_layout(header: &Header) -> Result<(), HeaderError> {
    let mut expected = 0u64;
    for t in &header.tensors {
        let name = || t.name.clone();
        if t.end < t.begin {
            return Err(HeaderError::ReversedOffsets { tensor: name(), begin: t.begin, end: t.end });
        }
        if t.begin > expected {
            return Err(HeaderError::Gap { tensor: name(), expected, begin: t.begin });
        }
        if t.begin < expected {
            return Err(HeaderError::Overlap { tensor: name(), expected, begin: t.begin });
        }
        let bits = t
            .shape
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .and_then(|n| n.checked_mul(t.dtype.bits()))
            .ok_or_else(|| HeaderError::ShapeOverflow { tensor: name(), shape: t.shape.clone() })?;
        if bits % 8 != 0 {
            return Err(HeaderError::PartialByte { tensor: name(), dtype: t.dtype.name(), bits });
        }
        if bits / 8 != t.byte_len() {
            return Err(HeaderError::SpanMismatch { tensor: name(), expected: bits / 8, actual: t.byte_len() });
        }
        expected = t.end;
    }
    let present = header.data_len();
    if expected > present {
        return Err(HeaderError::Truncated { indexed: expected, present });
    }
    if expected < present {
        return Err(HeaderError::TrailingBytes { indexed: expected, present });
    }
    Ok(())
}

#[derive(Deserialize)]
struct RawTensor {
    dtype: String,
    shape: Vec<u64>,
    data_offsets: (u64, u64),
    #[serde(flatten)]
    extra: Map<String, Value>,
}

/// Deserializes the top-level object and records typed errors, naming the tensor and the rule. serde's own
/// error type would flatten them into text.
struct HeaderSeed<'a> {
    typed: &'a RefCell<Option<HeaderError>>,
}

impl HeaderSeed<'_> {
    fn fail<E: de::Error>(&self, err: HeaderError) -> E {
        let msg = err.to_string();
        *self.typed.borrow_mut() = Some(err);
        E::custom(msg)
    }
}

impl<'de> DeserializeSeed<'de> for HeaderSeed<'_> {
    type Value = (HeaderMetadata, Vec<TensorInfo>);

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for HeaderSeed<'_> {
    type Value = (HeaderMetadata, Vec<TensorInfo>);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object of tensor entries")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut metadata = HeaderMetadata::Absent;
        let mut seen_metadata = false;
        let mut names = HashSet::new();
        let mut tensors = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            if key == "__metadata__" {
                if seen_metadata {
                    return Err(self.fail(HeaderError::DuplicateKey { key }));
                }
                seen_metadata = true;
                let value: Value = map.next_value()?;
                metadata = match value {
                    Value::Null => HeaderMetadata::Null,
                    Value::Object(m) => {
                        if let Some((k, _)) = m.iter().find(|(_, v)| !v.is_string()) {
                            let detail = format!("value of `{k}` is not a string");
                            return Err(self.fail(HeaderError::Metadata { detail }));
                        }
                        HeaderMetadata::Map(m)
                    }
                    other => {
                        let detail = format!("is {}", json_kind(&other));
                        return Err(self.fail(HeaderError::Metadata { detail }));
                    }
                };
                continue;
            }
            let raw: RawTensor = match map.next_value() {
                Ok(raw) => raw,
                Err(e) => {
                    let detail = e.to_string();
                    return Err(self.fail(HeaderError::TensorEntry { tensor: key, detail }));
                }
            };
            let Some(dtype) = Dtype::from_name(&raw.dtype) else {
                return Err(self.fail(HeaderError::UnknownDtype { tensor: key, dtype: raw.dtype }));
            };
            if !names.insert(key.clone()) {
                return Err(self.fail(HeaderError::DuplicateKey { key }));
            }
            let (begin, end) = raw.data_offsets;
            tensors.push(TensorInfo { name: key, dtype, shape: raw.shape, begin, end, extra: raw.extra });
        }
        Ok((metadata, tensors))
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests;
