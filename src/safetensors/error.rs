//! Says why a safetensors header was refused, with one variant per rule of the reference reader.

use thiserror::Error;

/// A violation of the safetensors format, naming the tensor and the rule where there is one.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum HeaderError {
    /// Fewer than the 8 bytes of the length prefix.
    #[error("file is {file_size} bytes, shorter than the 8-byte header length prefix")]
    TooSmall {
        /// Size of the whole file.
        file_size: u64,
    },
    /// `N` above the reference reader's 100,000,000-byte cap.
    #[error("header length {header_len} exceeds the 100,000,000-byte limit")]
    TooLarge {
        /// The declared header length `N`.
        header_len: u64,
    },
    /// `8 + N` past the end of the file.
    #[error("header length {header_len} runs past the end of the {file_size}-byte file")]
    BeyondFile {
        /// The declared header length `N`.
        header_len: u64,
        /// Size of the whole file.
        file_size: u64,
    },
    /// The bytes handed over stop before the header does. This is not a defect of the file.
    #[error("need {needed} bytes to read the whole header, have {available}")]
    Incomplete {
        /// `8 + N`.
        needed: u64,
        /// Bytes available in the prefix.
        available: u64,
    },
    /// The header is not UTF-8.
    #[error("header is not UTF-8 (invalid byte at header offset {valid_up_to})")]
    NotUtf8 {
        /// Length of the valid UTF-8 prefix.
        valid_up_to: u64,
    },
    /// The header is not a JSON object of the expected shape.
    #[error("header is not valid safetensors JSON: {detail}")]
    Json {
        /// serde_json's message, with line and column.
        detail: String,
    },
    /// A tensor entry lacks a field or has one of the wrong type.
    #[error("tensor `{tensor}`: malformed entry: {detail}")]
    TensorEntry {
        /// Tensor name.
        tensor: String,
        /// What was wrong.
        detail: String,
    },
    /// `__metadata__` is neither null nor a map of strings to strings.
    #[error("__metadata__ {detail}; it must be null or an object of string values")]
    Metadata {
        /// What was wrong.
        detail: String,
    },
    /// The same key appears twice. The format disallows it, and a re-layout could not keep both.
    #[error("key `{key}` appears twice in the header")]
    DuplicateKey {
        /// The repeated key.
        key: String,
    },
    /// A dtype the reference does not define.
    #[error("tensor `{tensor}`: unknown dtype `{dtype}`")]
    UnknownDtype {
        /// Tensor name.
        tensor: String,
        /// The dtype as written.
        dtype: String,
    },
    /// `end < begin`.
    #[error("tensor `{tensor}`: data_offsets [{begin}, {end}] end before they begin")]
    ReversedOffsets {
        /// Tensor name.
        tensor: String,
        /// Relative begin.
        begin: u64,
        /// Relative end.
        end: u64,
    },
    /// Element count or bit count overflows 64 bits.
    #[error("tensor `{tensor}`: shape {shape:?} overflows when sized")]
    ShapeOverflow {
        /// Tensor name.
        tensor: String,
        /// The shape as written.
        shape: Vec<u64>,
    },
    /// A sub-byte tensor whose bits do not fill whole bytes.
    #[error("tensor `{tensor}`: {bits} bits of {dtype} do not end on a byte boundary")]
    PartialByte {
        /// Tensor name.
        tensor: String,
        /// The dtype.
        dtype: &'static str,
        /// shape × width in bits.
        bits: u64,
    },
    /// Span length differs from shape × width.
    #[error("tensor `{tensor}`: data_offsets span {actual} bytes but shape × dtype needs {expected}")]
    SpanMismatch {
        /// Tensor name.
        tensor: String,
        /// Bytes the shape and dtype need.
        expected: u64,
        /// Bytes the offsets span.
        actual: u64,
    },
    /// Unindexed bytes before this tensor.
    #[error("tensor `{tensor}`: gap of {} bytes before it (starts at {begin}, previous data ends at {expected})", begin - expected)]
    Gap {
        /// Tensor name.
        tensor: String,
        /// Where the previous tensor ended.
        expected: u64,
        /// Where this one begins.
        begin: u64,
    },
    /// This tensor starts inside the previous one.
    #[error("tensor `{tensor}`: overlaps the previous tensor (starts at {begin}, previous data ends at {expected})")]
    Overlap {
        /// Tensor name.
        tensor: String,
        /// Where the previous tensor ended.
        expected: u64,
        /// Where this one begins.
        begin: u64,
    },
    /// The tensors index more data than the file holds.
    #[error("file is truncated: tensors index {indexed} data bytes but only {present} are present")]
    Truncated {
        /// Bytes the header indexes.
        indexed: u64,
        /// Bytes after the header.
        present: u64,
    },
    /// Bytes follow the last tensor. The reference rejects files that the tensors do not fully cover.
    #[error("{} unindexed bytes after the last tensor (data is {present} bytes, tensors cover {indexed})", present - indexed)]
    TrailingBytes {
        /// Bytes the header indexes.
        indexed: u64,
        /// Bytes after the header.
        present: u64,
    },
}
