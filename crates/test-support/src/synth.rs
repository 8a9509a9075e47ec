//! Builds synthetic shards laid out the way MLX's writer lays them out, for tests and benchmarks.
//!
//! Interop fixtures come from the real writers (see `tests/fixtures`). This module gives what those cannot
//! give cheaply: random tensor sets for property tests, and multi-GiB shards for benchmarks.

use std::io::{self, Write};

use serde_json::{Map, Value, json};

/// A dtype by its safetensors name (`"BF16"`, `"U32"`, …). The tests name dtypes as the files do.
pub type Dtype = &'static str;

/// Bits per element of a safetensors dtype, from the format's specification. It does not come from the code
/// under test, so the tests check hubalign's table against it. Panics on a name the format does not have,
/// which is a typo in a test.
pub fn bits(dtype: &str) -> u64 {
    match dtype {
        "F4" => 4,
        "F6_E2M3" | "F6_E3M2" => 6,
        "BOOL" | "U8" | "I8" | "F8_E5M2" | "F8_E4M3" | "F8_E8M0" | "F8_E4M3FNUZ" | "F8_E5M2FNUZ" => 8,
        "I16" | "U16" | "F16" | "BF16" => 16,
        "I32" | "U32" | "F32" => 32,
        "C64" | "F64" | "I64" | "U64" => 64,
        other => panic!("{other:?} is not a safetensors dtype"),
    }
}

/// A tensor with its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SynthTensor {
    /// Header key.
    pub name: String,
    /// Element type.
    pub dtype: Dtype,
    /// Dimensions.
    pub shape: Vec<u64>,
    /// Exactly `shape × width / 8` bytes.
    pub data: Vec<u8>,
}

impl SynthTensor {
    /// A tensor of the right size whose bytes are derived from its name, so every tensor differs.
    pub fn filled(name: &str, dtype: Dtype, shape: &[u64]) -> SynthTensor {
        let len = byte_len(dtype, shape);
        let seed = name.bytes().fold(0x9E37_79B9_7F4A_7C15u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01B3));
        let mut data = vec![0; len as usize];
        fill_pseudo_random(seed, &mut data);
        SynthTensor { name: name.to_owned(), dtype, shape: shape.to_vec(), data }
    }
}

/// Bytes a tensor of this dtype and shape occupies, rounded up to whole bytes.
pub fn byte_len(dtype: Dtype, shape: &[u64]) -> u64 {
    (shape.iter().product::<u64>() * bits(dtype)).div_ceil(8)
}

/// Fills `buf` from a xorshift stream: cheap, deterministic, incompressible enough for I/O benchmarks.
pub fn fill_pseudo_random(seed: u64, buf: &mut [u8]) {
    let mut s = seed | 1;
    for chunk in buf.chunks_mut(8) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        chunk.copy_from_slice(&s.to_le_bytes()[..chunk.len()]);
    }
}

/// The header MLX's `save_safetensors` writes: compact JSON, keys sorted, `"__metadata__"` always present,
/// offsets back to back in the order given, no padding.
pub fn mlx_header(specs: &[(&str, Dtype, &[u64])], format: Option<&str>) -> String {
    let mut entries: Vec<(String, Value)> = Vec::with_capacity(specs.len() + 1);
    let metadata = format.map_or(Value::Null, |f| json!({ "format": f }));
    entries.push(("__metadata__".to_owned(), metadata));
    let mut offset = 0;
    for &(name, dtype, shape) in specs {
        let end = offset + byte_len(dtype, shape);
        let entry = json!({ "data_offsets": [offset, end], "dtype": dtype, "shape": shape });
        entries.push((name.to_owned(), entry));
        offset = end;
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    Value::Object(entries.into_iter().collect::<Map<_, _>>()).to_string()
}

/// A whole file in MLX's layout, tensors in the order given.
pub fn write_mlx_style(tensors: &[SynthTensor], format: Option<&str>) -> Vec<u8> {
    let specs: Vec<_> = tensors.iter().map(|t| (t.name.as_str(), t.dtype, t.shape.as_slice())).collect();
    let header = mlx_header(&specs, format);
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    for t in tensors {
        out.extend_from_slice(&t.data);
    }
    out
}

/// Streams a file in MLX's layout with pseudo-random tensor bytes, never holding more than 1 MiB. Returns its
/// size. Benchmarks use it for shards of any size.
pub fn write_mlx_style_stream<W: Write>(
    out: &mut W,
    specs: &[(&str, Dtype, &[u64])],
    format: Option<&str>,
    seed: u64,
) -> io::Result<u64> {
    let header = mlx_header(specs, format);
    out.write_all(&(header.len() as u64).to_le_bytes())?;
    out.write_all(header.as_bytes())?;
    let mut total = 8 + header.len() as u64;
    let mut buf = vec![0u8; 1 << 20];
    for (i, &(_, dtype, shape)) in specs.iter().enumerate() {
        let mut left = byte_len(dtype, shape);
        let mut s = seed.wrapping_add(i as u64).wrapping_mul(0x2545_F491_4F6C_DD1D);
        while left > 0 {
            let n = left.min(buf.len() as u64) as usize;
            fill_pseudo_random(s, &mut buf[..n]);
            s = s.rotate_left(7) ^ 0xA5A5;
            out.write_all(&buf[..n])?;
            left -= n as u64;
        }
        total += byte_len(dtype, shape);
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mlx_style_files_keep_the_given_data_order_with_sorted_keys() {
        let t = [SynthTensor::filled("z", "U8", &[3]), SynthTensor::filled("a", "F16", &[5])];
        let bytes = write_mlx_style(&t, None);
        let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        let text = std::str::from_utf8(&bytes[8..8 + n]).unwrap();
        assert_eq!(
            text,
            r#"{"__metadata__":null,"a":{"data_offsets":[3,13],"dtype":"F16","shape":[5]},"z":{"data_offsets":[0,3],"dtype":"U8","shape":[3]}}"#
        );
        assert_eq!(&bytes[8 + n..8 + n + 3], &t[0].data[..]);
        assert_eq!(bytes.len(), 8 + n + 13);
    }

    #[test]
    fn streamed_and_in_memory_headers_agree() {
        let specs: [(&str, Dtype, &[u64]); 2] = [("w", "BF16", &[3, 5]), ("q", "U32", &[7])];
        let mut out = Vec::new();
        let n = write_mlx_style_stream(&mut out, &specs, Some("mlx"), 1).unwrap();
        assert_eq!(n, out.len() as u64);
        let header = mlx_header(&specs, Some("mlx"));
        assert_eq!(&out[8..8 + header.len()], header.as_bytes());
        assert_eq!(n, 8 + header.len() as u64 + 30 + 28);
    }
}
