//! Generates one synthetic safetensors shard: a transformer's layers as a writer lays them out. A small spec
//! is enough to produce the header and every payload byte at any offset, without storing them.

use std::fmt::Write as _;

use serde::Serialize;

/// Who wrote the shard, which decides the order of its tensors and whether its header is padded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Writer {
    /// `mlx.core.save_safetensors`: tensors by name, back to back, the header not padded.
    Mlx,
    /// The reference `safetensors` writer: widest dtype first, the header padded with spaces to 8 bytes.
    Safetensors,
}

/// How the linear layers' weights are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// MLX affine quantization: `U32` packed weights with `F16` scales and biases per group of 64.
    Q4,
    /// As `Q4` with 8 bits.
    Q8,
    /// Plain `F16`.
    F16,
    /// Plain `BF16`.
    Bf16,
}

impl Precision {
    fn float(self) -> &'static str {
        if self == Precision::Bf16 { "BF16" } else { "F16" }
    }

    fn bits(self) -> Option<u64> {
        match self {
            Precision::Q4 => Some(4),
            Precision::Q8 => Some(8),
            Precision::F16 | Precision::Bf16 => None,
        }
    }
}

/// A model's dimensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Dims {
    /// Hidden size (a multiple of 64).
    pub hidden: u64,
    /// MLP size (a multiple of 64).
    pub intermediate: u64,
    /// Decoder layers.
    pub layers: u32,
    /// Vocabulary.
    pub vocab: u64,
    /// Attention heads; odd in models whose per-head `sinks` vector breaks MLX's packing.
    pub heads: u64,
}

/// What one shard holds and how it was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardSpec {
    /// Seeds the payload bytes: a new commit of the shard gets a new key.
    pub key: u64,
    /// The model.
    pub dims: Dims,
    /// The linear layers' storage.
    pub precision: Precision,
    /// The decoder layers in this shard, `first..end`.
    pub layers: (u32, u32),
    /// Whether the embedding is in this shard (the first).
    pub embed: bool,
    /// Whether the final norm and the head are in this shard (the last).
    pub head: bool,
    /// Whether each attention layer has a `sinks` vector of `heads` floats (odd in this model).
    pub sinks: bool,
    /// The writer.
    pub writer: Writer,
}

/// A tensor as the header lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tensor {
    /// Its name.
    pub name: String,
    /// `U32`, `F16`, `BF16` or `F32`.
    pub dtype: &'static str,
    /// Its shape.
    pub shape: Vec<u64>,
    /// `data_offsets[0]`, relative to the data section.
    pub begin: u64,
    /// Its length in bytes.
    pub len: u64,
}

impl Tensor {
    /// The element width of its dtype.
    pub fn width(&self) -> u64 {
        match self.dtype {
            "U32" | "F32" => 4,
            _ => 2,
        }
    }
}

/// A shard laid out: its header, its tensors, and where its data starts.
#[derive(Debug, Clone)]
pub struct Layout {
    /// The JSON header, padding included (`N` bytes).
    pub header: Vec<u8>,
    /// The tensors, in the order of their offsets.
    pub tensors: Vec<Tensor>,
    /// Bytes of the data section.
    pub data_len: u64,
}

impl Layout {
    /// Where the data section starts: `8 + N`.
    pub fn data_start(&self) -> u64 {
        8 + self.header.len() as u64
    }

    /// The whole file's size.
    pub fn file_size(&self) -> u64 {
        self.data_start() + self.data_len
    }

    /// The loader's verdict, computed here independently of hubalign. It finds the tensors at a file offset
    /// that is not a multiple of their width, and whether padding the header alone could fix them.
    pub fn class(&self) -> LayoutClass {
        let start = self.data_start();
        let misaligned = self.tensors.iter().filter(|t| !(start + t.begin).is_multiple_of(t.width())).count();
        if misaligned == 0 {
            LayoutClass::Aligned
        } else if self.tensors.iter().all(|t| t.begin.is_multiple_of(t.width())) {
            LayoutClass::HeaderPad
        } else {
            LayoutClass::Reorder
        }
    }
}

/// What a shard needs, as a memory-mapping loader sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LayoutClass {
    /// No tensor needs a copy.
    Aligned,
    /// Some do, and padding the header to 8 fixes them all.
    HeaderPad,
    /// Some tensor's relative offset is itself off its width, so only a reorder fixes it.
    Reorder,
}

impl ShardSpec {
    fn linear(&self, out: &mut Vec<(String, &'static str, Vec<u64>)>, prefix: &str, rows: u64, cols: u64) {
        match self.precision.bits() {
            Some(bits) => {
                out.push((format!("{prefix}.weight"), "U32", vec![rows, cols * bits / 32]));
                out.push((format!("{prefix}.scales"), "F16", vec![rows, cols / 64]));
                out.push((format!("{prefix}.biases"), "F16", vec![rows, cols / 64]));
            }
            None => out.push((format!("{prefix}.weight"), self.precision.float(), vec![rows, cols])),
        }
    }

    /// Every tensor's name, dtype and shape, in no particular order.
    fn tensor_list(&self) -> Vec<(String, &'static str, Vec<u64>)> {
        let d = self.dims;
        let float = self.precision.float();
        let mut out = Vec::new();
        if self.embed {
            self.linear(&mut out, "model.embed_tokens", d.vocab, d.hidden);
        }
        let kv = (d.hidden / 4).max(64);
        for layer in self.layers.0..self.layers.1 {
            let p = format!("model.layers.{layer}");
            for (name, rows, cols) in [
                ("self_attn.q_proj", d.hidden, d.hidden),
                ("self_attn.k_proj", kv, d.hidden),
                ("self_attn.v_proj", kv, d.hidden),
                ("self_attn.o_proj", d.hidden, d.hidden),
                ("mlp.gate_proj", d.intermediate, d.hidden),
                ("mlp.up_proj", d.intermediate, d.hidden),
                ("mlp.down_proj", d.hidden, d.intermediate),
            ] {
                self.linear(&mut out, &format!("{p}.{name}"), rows, cols);
            }
            out.push((format!("{p}.input_layernorm.weight"), float, vec![d.hidden]));
            out.push((format!("{p}.post_attention_layernorm.weight"), float, vec![d.hidden]));
            if self.sinks {
                out.push((format!("{p}.self_attn.sinks"), float, vec![d.heads]));
            }
        }
        if self.head {
            out.push(("model.norm.weight".into(), float, vec![d.hidden]));
            self.linear(&mut out, "lm_head", d.vocab, d.hidden);
        }
        out
    }

    /// The shard laid out by its writer.
    pub fn layout(&self) -> Layout {
        let mut list = self.tensor_list();
        let width = |dtype: &str| if matches!(dtype, "U32" | "F32") { 4 } else { 2 };
        match self.writer {
            Writer::Mlx => list.sort_by(|a, b| a.0.cmp(&b.0)),
            Writer::Safetensors => list.sort_by(|a, b| width(b.1).cmp(&width(a.1)).then_with(|| a.0.cmp(&b.0))),
        }
        let mut begin = 0u64;
        let tensors: Vec<Tensor> = list
            .into_iter()
            .map(|(name, dtype, shape)| {
                let len = shape.iter().product::<u64>() * width(dtype);
                let t = Tensor { name, dtype, shape, begin, len };
                begin += len;
                t
            })
            .collect();
        let format = if self.writer == Writer::Mlx { "mlx" } else { "pt" };
        // Keys in the order of the offsets, as both writers emit them.
        let mut json = format!("{{\"__metadata__\":{{\"format\":\"{format}\"}}");
        for t in &tensors {
            let shape: Vec<String> = t.shape.iter().map(u64::to_string).collect();
            let _ = write!(
                json,
                ",\"{}\":{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
                t.name,
                t.dtype,
                shape.join(","),
                t.begin,
                t.begin + t.len
            );
        }
        json.push('}');
        if self.writer == Writer::Safetensors {
            while !(8 + json.len()).is_multiple_of(8) {
                json.push(' ');
            }
        }
        Layout { header: json.into_bytes(), tensors, data_len: begin }
    }
}

/// Fills `out` with the payload bytes from data-section offset `at`. The generator is counter-based, so any
/// range can be produced alone, and the same key always gives the same bytes.
pub fn payload_bytes(key: u64, at: u64, out: &mut [u8]) {
    let mut pos = at;
    let mut filled = 0;
    while filled < out.len() {
        let word = super::dice::mix(key ^ (pos / 8).wrapping_mul(0x9E37_79B9_7F4A_7C15)).to_le_bytes();
        let skip = (pos % 8) as usize;
        let n = (8 - skip).min(out.len() - filled);
        out[filled..filled + n].copy_from_slice(&word[skip..skip + n]);
        filled += n;
        pos += n as u64;
    }
}

/// Fills `out` with the file's bytes from offset `at`: the length prefix, the header, then the payload.
pub fn file_bytes(key: u64, header: &[u8], at: u64, out: &mut [u8]) {
    let mut prefix = (header.len() as u64).to_le_bytes().to_vec();
    prefix.extend_from_slice(header);
    let mut filled = 0;
    let mut pos = at;
    if let Some(rest) = usize::try_from(pos).ok().and_then(|p| prefix.get(p..)) {
        let n = rest.len().min(out.len());
        out[..n].copy_from_slice(&rest[..n]);
        filled = n;
        pos += n as u64;
    }
    if filled < out.len() {
        payload_bytes(key, pos - prefix.len() as u64, &mut out[filled..]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(writer: Writer, sinks: bool) -> ShardSpec {
        ShardSpec {
            key: 7,
            dims: Dims { hidden: 128, intermediate: 256, layers: 2, vocab: 512, heads: 5 },
            precision: Precision::Q4,
            layers: (0, 2),
            embed: true,
            head: true,
            sinks,
            writer,
        }
    }

    #[test]
    fn the_header_is_valid_json_whose_offsets_are_contiguous() {
        for writer in [Writer::Mlx, Writer::Safetensors] {
            let layout = spec(writer, true).layout();
            let v: serde_json::Value = serde_json::from_slice(&layout.header).unwrap();
            let mut ranges: Vec<(u64, u64)> = v
                .as_object()
                .unwrap()
                .iter()
                .filter(|(k, _)| *k != "__metadata__")
                .map(|(_, t)| (t["data_offsets"][0].as_u64().unwrap(), t["data_offsets"][1].as_u64().unwrap()))
                .collect();
            ranges.sort();
            assert_eq!(ranges[0].0, 0);
            assert!(ranges.windows(2).all(|w| w[0].1 == w[1].0), "{writer:?}: gaps or overlaps");
            assert_eq!(ranges.last().unwrap().1, layout.data_len);
        }
    }

    #[test]
    fn each_writer_gives_the_layout_a_loader_expects() {
        assert_eq!(spec(Writer::Safetensors, true).layout().class(), LayoutClass::Aligned);
        assert_eq!(spec(Writer::Safetensors, true).layout().data_start() % 8, 0);
        // Five F16 sinks are 10 bytes: MLX's packing puts what follows them off its width.
        assert_eq!(spec(Writer::Mlx, true).layout().class(), LayoutClass::Reorder);
        assert_ne!(spec(Writer::Mlx, false).layout().class(), LayoutClass::Reorder);
    }

    #[test]
    fn any_range_of_the_file_is_the_same_bytes_as_the_whole() {
        let layout = spec(Writer::Mlx, false).layout();
        let size = layout.file_size() as usize;
        let mut whole = vec![0; size];
        file_bytes(3, &layout.header, 0, &mut whole);
        assert_eq!(&whole[..8], &(layout.header.len() as u64).to_le_bytes());
        for (at, len) in [(0, 1), (5, 20), (layout.data_start() as usize - 3, 11), (size - 13, 13), (1001, 4097)] {
            let mut part = vec![0; len];
            file_bytes(3, &layout.header, at as u64, &mut part);
            assert_eq!(part, whole[at..at + len], "range {at}+{len}");
        }
    }
}
