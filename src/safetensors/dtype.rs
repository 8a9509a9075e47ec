//! The element types the reference safetensors crate defines, with their widths.

use std::fmt;

/// An element type as named in a safetensors header.
///
/// The list and its order follow the reference crate's `Dtype` enum (v0.8). Its declaration order is
/// "increasing alignment order". The bit widths are those of its `bitsize()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(missing_docs, non_camel_case_types)]
pub enum Dtype {
    BOOL,
    F4,
    F6_E2M3,
    F6_E3M2,
    U8,
    I8,
    F8_E5M2,
    F8_E4M3,
    F8_E8M0,
    F8_E4M3FNUZ,
    F8_E5M2FNUZ,
    I16,
    U16,
    F16,
    BF16,
    I32,
    U32,
    F32,
    C64,
    F64,
    I64,
    U64,
}

impl Dtype {
    /// Every dtype, in the reference crate's declaration order.
    pub const ALL: [Dtype; 22] = [
        Dtype::BOOL,
        Dtype::F4,
        Dtype::F6_E2M3,
        Dtype::F6_E3M2,
        Dtype::U8,
        Dtype::I8,
        Dtype::F8_E5M2,
        Dtype::F8_E4M3,
        Dtype::F8_E8M0,
        Dtype::F8_E4M3FNUZ,
        Dtype::F8_E5M2FNUZ,
        Dtype::I16,
        Dtype::U16,
        Dtype::F16,
        Dtype::BF16,
        Dtype::I32,
        Dtype::U32,
        Dtype::F32,
        Dtype::C64,
        Dtype::F64,
        Dtype::I64,
        Dtype::U64,
    ];

    /// Parses the header spelling (`"BF16"`, `"F8_E4M3"`, …). Returns `None` for anything the reference
    /// rejects.
    pub fn from_name(name: &str) -> Option<Dtype> {
        Dtype::ALL.into_iter().find(|d| d.name() == name)
    }

    /// The header spelling.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::BOOL => "BOOL",
            Dtype::F4 => "F4",
            Dtype::F6_E2M3 => "F6_E2M3",
            Dtype::F6_E3M2 => "F6_E3M2",
            Dtype::U8 => "U8",
            Dtype::I8 => "I8",
            Dtype::F8_E5M2 => "F8_E5M2",
            Dtype::F8_E4M3 => "F8_E4M3",
            Dtype::F8_E8M0 => "F8_E8M0",
            Dtype::F8_E4M3FNUZ => "F8_E4M3FNUZ",
            Dtype::F8_E5M2FNUZ => "F8_E5M2FNUZ",
            Dtype::I16 => "I16",
            Dtype::U16 => "U16",
            Dtype::F16 => "F16",
            Dtype::BF16 => "BF16",
            Dtype::I32 => "I32",
            Dtype::U32 => "U32",
            Dtype::F32 => "F32",
            Dtype::C64 => "C64",
            Dtype::F64 => "F64",
            Dtype::I64 => "I64",
            Dtype::U64 => "U64",
        }
    }

    /// Bits per element.
    pub fn bits(self) -> u64 {
        match self {
            Dtype::F4 => 4,
            Dtype::F6_E2M3 | Dtype::F6_E3M2 => 6,
            Dtype::BOOL
            | Dtype::U8
            | Dtype::I8
            | Dtype::F8_E5M2
            | Dtype::F8_E4M3
            | Dtype::F8_E8M0
            | Dtype::F8_E4M3FNUZ
            | Dtype::F8_E5M2FNUZ => 8,
            Dtype::I16 | Dtype::U16 | Dtype::F16 | Dtype::BF16 => 16,
            Dtype::I32 | Dtype::U32 | Dtype::F32 => 32,
            Dtype::C64 | Dtype::F64 | Dtype::I64 | Dtype::U64 => 64,
        }
    }

    /// The byte alignment a zero-copy loader needs for a tensor of this type: its element width in bytes. C64
    /// counts as 8, as MLX's `size_of` does. Sub-byte types only need whole bytes.
    pub fn natural_alignment(self) -> u64 {
        (self.bits() / 8).max(1)
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_unique() {
        for d in Dtype::ALL {
            assert_eq!(Dtype::from_name(d.name()), Some(d));
        }
        assert_eq!(Dtype::from_name("F128"), None);
        assert_eq!(Dtype::from_name("bf16"), None, "names are case-sensitive, as in the reference");
    }

    #[test]
    fn declaration_order_is_increasing_alignment() {
        let aligns: Vec<u64> = Dtype::ALL.iter().map(|d| d.natural_alignment()).collect();
        assert!(aligns.windows(2).all(|w| w[0] <= w[1]), "{aligns:?}");
        assert!(Dtype::ALL.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn widths_match_the_reference() {
        assert_eq!(Dtype::F4.bits(), 4);
        assert_eq!(Dtype::F6_E3M2.bits(), 6);
        assert_eq!(Dtype::F8_E8M0.natural_alignment(), 1);
        assert_eq!(Dtype::F4.natural_alignment(), 1);
        assert_eq!(Dtype::BF16.natural_alignment(), 2);
        assert_eq!(Dtype::U32.natural_alignment(), 4);
        assert_eq!(Dtype::C64.natural_alignment(), 8);
    }
}
