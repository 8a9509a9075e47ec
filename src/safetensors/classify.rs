//! Which tensors a zero-copy mmap loader can map in place, and what it takes to fix the rest.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::header::Header;

/// A target alignment for the data section: a power of two from 1 to 16384 (the Apple-silicon page).
///
/// By default ([`Alignment::DEFAULT`]), only what a loader needs counts. A shard is aligned when every tensor
/// is, wherever its data section starts. A fix pads the data start to 8 bytes only when some tensor needs it.
/// An alignment asked for explicitly ([`Alignment::new`], `--alignment N`) requires the data start itself to
/// sit on it, for example 16384 for page-aligned data. Verdicts are then judged against it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "u64", into = "u64")]
pub struct Alignment {
    bytes: u64,
    data_start: bool,
}

impl Alignment {
    /// Largest accepted alignment: a 16 KiB page.
    pub const MAX: u64 = 16_384;
    /// Only the tensors' own alignment counts. A fix pads the data start to 8 bytes, which every dtype
    /// safetensors defines needs.
    pub const DEFAULT: Alignment = Alignment { bytes: 8, data_start: false };

    /// A data-start alignment asked for explicitly: powers of two up to [`Alignment::MAX`].
    pub fn new(bytes: u64) -> Option<Alignment> {
        (bytes.is_power_of_two() && bytes <= Self::MAX).then_some(Alignment { bytes, data_start: true })
    }

    /// The alignment in bytes.
    pub fn get(self) -> u64 {
        self.bytes
    }

    /// Whether the data section itself must start on this alignment (asked for explicitly).
    pub fn requires_data_start(self) -> bool {
        self.data_start
    }
}

impl Default for Alignment {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl TryFrom<u64> for Alignment {
    type Error = crate::error_text::Unrecognized;
    fn try_from(v: u64) -> Result<Self, Self::Error> {
        let expected = format!("an alignment that is a power of two from 1 to {}", Self::MAX);
        Alignment::new(v).ok_or_else(|| crate::error_text::Unrecognized::new(v.to_string(), expected))
    }
}

impl From<Alignment> for u64 {
    fn from(a: Alignment) -> u64 {
        a.bytes
    }
}

impl FromStr for Alignment {
    type Err = crate::error_text::Unrecognized;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let v: u64 = s.parse().map_err(|_| crate::error_text::Unrecognized::new(s, "a whole number of bytes"))?;
        Alignment::try_from(v)
    }
}

impl fmt::Display for Alignment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.bytes.fmt(f)
    }
}

/// What a shard needs, judged by what a loader does. A loader copies a tensor whose file offset is not a
/// multiple of its width, and nothing else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// No tensor needs a copy (and the data starts on the target, if one was asked for).
    Aligned,
    /// Padding the header fixes every tensor; the payload stays byte for byte.
    HeaderPad,
    /// Some tensor's offset within the data is itself unaligned, so tensors must be reordered.
    Relayout,
    /// The file breaks the format; it is never rewritten.
    Invalid,
}

impl Verdict {
    /// The snake_case name used in reports and the store.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Aligned => "aligned",
            Verdict::HeaderPad => "header_pad",
            Verdict::Relayout => "relayout",
            Verdict::Invalid => "invalid",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Verdict {
    type Err = crate::error_text::Unrecognized;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let all = [Verdict::Aligned, Verdict::HeaderPad, Verdict::Relayout, Verdict::Invalid];
        crate::error_text::by_name(s, &all, Verdict::as_str)
    }
}

/// The alignment audit of one valid shard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardAlignment {
    /// `N`.
    pub header_len: u64,
    /// `8 + N`.
    pub data_start: u64,
    /// `(8 + N) % 8`: the seed's one-number detection rule.
    pub data_start_mod8: u64,
    /// Number of tensors.
    pub tensors: u64,
    /// Tensors whose absolute offset is not a multiple of their width.
    pub misaligned_tensors: u64,
    /// Their bytes: what a copying mmap loader duplicates into anonymous memory.
    pub misaligned_bytes: u64,
    /// Whether the data section starts on the target alignment. It matters to the verdict only when that
    /// alignment was asked for.
    pub data_start_aligned: bool,
    /// What the shard needs.
    pub verdict: Verdict,
    /// `__metadata__.format`.
    pub writer: Option<String>,
}

/// Whether `offset` is a multiple of the power of two `align`.
pub(crate) fn is_aligned(offset: u64, align: u64) -> bool {
    offset & (align - 1) == 0
}

/// Audits a validated header against a target alignment for its data section.
pub fn classify(header: &Header, target: Alignment) -> ShardAlignment {
    let data_start = header.data_start();
    let (mut misaligned_tensors, mut misaligned_bytes) = (0, 0);
    let mut relative_ok = true;
    for t in &header.tensors {
        let align = t.dtype.natural_alignment();
        if !is_aligned(data_start + t.begin, align) {
            misaligned_tensors += 1;
            misaligned_bytes += t.byte_len();
        }
        relative_ok &= is_aligned(t.begin, align);
    }
    let data_start_aligned = is_aligned(data_start, target.get());
    let verdict = if misaligned_tensors == 0 && (data_start_aligned || !target.requires_data_start()) {
        Verdict::Aligned
    } else if relative_ok {
        Verdict::HeaderPad
    } else {
        Verdict::Relayout
    };
    ShardAlignment {
        header_len: header.header_len,
        data_start,
        data_start_mod8: data_start % 8,
        tensors: header.tensors.len() as u64,
        misaligned_tensors,
        misaligned_bytes,
        data_start_aligned,
        verdict,
        writer: header.writer().map(str::to_owned),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::safetensors::header;
    use hubalign_test_support::synth::{SynthTensor, write_mlx_style};

    fn audit(tensors: &[SynthTensor], meta: Option<&str>, target: u64) -> ShardAlignment {
        let bytes = write_mlx_style(tensors, meta);
        let h = header::parse(&bytes, bytes.len() as u64).unwrap();
        classify(&h, Alignment::new(target).unwrap())
    }

    #[test]
    fn alignment_parsing() {
        assert_eq!("16384".parse::<Alignment>().map(Alignment::get), Ok(16384));
        assert!("12".parse::<Alignment>().is_err());
        assert!("32768".parse::<Alignment>().is_err());
        assert!("x".parse::<Alignment>().is_err());
        assert!("0".parse::<Alignment>().is_err());
    }

    #[test]
    fn header_pad_when_relative_offsets_are_aligned() {
        // Vary a name's length until 8 + N is odd. Both f32 tensors then sit misaligned in the file, but
        // their offsets within the data stay multiples of 4.
        let a = (1..9)
            .map(|len| {
                let t = [SynthTensor::filled(&"w".repeat(len), "F32", &[4]), SynthTensor::filled("v", "F32", &[3])];
                audit(&t, Some("mlx"), 8)
            })
            .find(|a| a.data_start_mod8 % 2 == 1)
            .unwrap();
        assert_eq!(a.verdict, Verdict::HeaderPad);
        assert_eq!(a.misaligned_tensors, 2);
        assert_eq!(a.misaligned_bytes, 28);
        assert_eq!(a.writer.as_deref(), Some("mlx"));
    }

    #[test]
    fn relayout_when_a_relative_offset_is_odd() {
        let t = [SynthTensor::filled("b", "U8", &[3]), SynthTensor::filled("f", "F32", &[2])];
        let a = audit(&t, None, 8);
        assert_eq!(a.verdict, Verdict::Relayout);
    }

    #[test]
    fn byte_types_never_misalign_and_page_targets_count() {
        let t = [SynthTensor::filled("b", "U8", &[3]), SynthTensor::filled("c", "F8_E4M3", &[5])];
        let a = audit(&t, None, 8);
        assert_eq!(a.misaligned_tensors, 0);
        let page = audit(&t, None, 16384);
        assert_ne!(page.verdict, Verdict::Aligned, "data start is not on a page");
        assert_eq!(page.verdict, Verdict::HeaderPad);
    }

    #[test]
    fn a_shard_no_loader_copies_is_aligned_wherever_its_data_starts() {
        // All tensors are BF16 at even offsets. Vary a name until the data starts at an even offset that is
        // not 0 mod 8.
        let (h, a) = (1..17)
            .map(|len| {
                let t = [SynthTensor::filled(&"w".repeat(len), "BF16", &[4]), SynthTensor::filled("v", "BF16", &[3])];
                let bytes = write_mlx_style(&t, None);
                let h = header::parse(&bytes, bytes.len() as u64).unwrap();
                let a = classify(&h, Alignment::DEFAULT);
                (h, a)
            })
            .find(|(_, a)| a.data_start_mod8 % 2 == 0 && a.data_start_mod8 != 0)
            .unwrap();
        assert_eq!((a.misaligned_tensors, a.verdict, a.data_start_aligned), (0, Verdict::Aligned, false));
        // With an explicit data start on 8 or on a page, the shard is not aligned, and padding fixes it.
        for explicit in [8, 16384] {
            let v = classify(&h, Alignment::new(explicit).unwrap());
            assert_eq!((v.misaligned_tensors, v.verdict), (0, Verdict::HeaderPad), "--alignment {explicit}");
        }
    }
}
