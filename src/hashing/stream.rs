//! Computes SHA-256 in a form that can be fed in step with another digest. Two digests of the same bytes,
//! such as the payload and the whole file, then cost one core about 1.35 times one digest's time, not twice.

use sha2::block_api::compress256;

use super::to_hex;

/// FIPS 180-4 §5.3.3.
const INITIAL_STATE: [u32; 8] =
    [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19];

const BLOCK: usize = 64;

/// A SHA-256 digest in progress.
#[derive(Debug, Clone)]
pub struct Sha256Stream {
    state: [u32; 8],
    pending: [u8; BLOCK],
    pending_len: usize,
    bytes: u64,
}

impl Default for Sha256Stream {
    fn default() -> Self {
        Sha256Stream { state: INITIAL_STATE, pending: [0; BLOCK], pending_len: 0, bytes: 0 }
    }
}

impl Sha256Stream {
    /// Makes a digest already fed `prefix`.
    pub fn with_prefix(prefix: &[u8]) -> Sha256Stream {
        let mut s = Sha256Stream::default();
        s.update(prefix);
        s
    }

    /// Feeds bytes.
    pub fn update(&mut self, data: &[u8]) {
        let blocks = self.absorb_pending(data);
        let (whole, tail) = blocks.as_chunks::<BLOCK>();
        compress256(&mut self.state, whole);
        self.keep(tail);
    }

    /// Returns the lower-case hex digest.
    pub fn finish_hex(mut self) -> String {
        let bits = self.bytes.wrapping_mul(8);
        let mut padding = [0u8; 2 * BLOCK];
        padding[0] = 0x80;
        // Pad with one 0x80 byte, zeros, and the length in bits, to end on a block boundary.
        let zeros = (BLOCK + 56 - (self.pending_len + 1) % BLOCK) % BLOCK;
        let end = 1 + zeros + 8;
        padding[1 + zeros..end].copy_from_slice(&bits.to_be_bytes());
        self.update(&padding[..end]);
        debug_assert_eq!(self.pending_len, 0);
        let digest: Vec<u8> = self.state.iter().flat_map(|w| w.to_be_bytes()).collect();
        to_hex(&digest)
    }

    /// Tops up the pending partial block from `data` and compresses it once full. Returns the rest of `data`.
    fn absorb_pending<'d>(&mut self, data: &'d [u8]) -> &'d [u8] {
        self.bytes += data.len() as u64;
        if self.pending_len == 0 {
            return data;
        }
        let take = (BLOCK - self.pending_len).min(data.len());
        self.pending[self.pending_len..self.pending_len + take].copy_from_slice(&data[..take]);
        self.pending_len += take;
        if self.pending_len == BLOCK {
            compress256(&mut self.state, &[self.pending]);
            self.pending_len = 0;
        }
        &data[take..]
    }

    /// Keeps the bytes after the last whole block. A non-empty tail means the pending block was filled and
    /// compressed first, so the tail starts a new one. An empty tail leaves a partial pending block as it is.
    fn keep(&mut self, tail: &[u8]) {
        if !tail.is_empty() {
            debug_assert_eq!(self.pending_len, 0);
            self.pending[..tail.len()].copy_from_slice(tail);
            self.pending_len = tail.len();
        }
    }
}

/// How [`update_both`] compresses the blocks the two streams have at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PairKernel {
    /// One stream after the other, with whatever `sha2` picks.
    Sequential,
    /// Interleaved with the x86 SHA extensions.
    #[cfg(target_arch = "x86_64")]
    ShaNi,
    /// Interleaved with the Armv8 SHA-2 instructions.
    #[cfg(target_arch = "aarch64")]
    ArmSha2,
}

impl PairKernel {
    /// Picks the fastest kernel this CPU supports. Debug builds hash sequentially, because there the
    /// interleaved kernel is not optimized while `sha2` is (see `Cargo.toml`). The tests exercise both
    /// through [`update_both_with`].
    pub fn detect() -> PairKernel {
        #[cfg(target_arch = "x86_64")]
        if !cfg!(debug_assertions) && super::sha_ni::available() {
            return PairKernel::ShaNi;
        }
        #[cfg(target_arch = "aarch64")]
        if !cfg!(debug_assertions) && super::sha_arm::available() {
            return PairKernel::ArmSha2;
        }
        PairKernel::Sequential
    }
}

/// Feeds `a_data` to `a` and `b_data` to `b`, interleaving the two where the CPU allows.
pub fn update_both(a: &mut Sha256Stream, a_data: &[u8], b: &mut Sha256Stream, b_data: &[u8]) {
    static KERNEL: std::sync::OnceLock<PairKernel> = std::sync::OnceLock::new();
    update_both_with(*KERNEL.get_or_init(PairKernel::detect), a, a_data, b, b_data);
}

/// Runs [`update_both`] with the given kernel.
pub fn update_both_with(kernel: PairKernel, a: &mut Sha256Stream, a_data: &[u8], b: &mut Sha256Stream, b_data: &[u8]) {
    let (a_blocks, a_tail) = a.absorb_pending(a_data).as_chunks::<BLOCK>();
    let (b_blocks, b_tail) = b.absorb_pending(b_data).as_chunks::<BLOCK>();
    match kernel {
        PairKernel::Sequential => {
            compress256(&mut a.state, a_blocks);
            compress256(&mut b.state, b_blocks);
        }
        #[cfg(target_arch = "x86_64")]
        PairKernel::ShaNi => super::sha_ni::compress_pair(&mut a.state, a_blocks, &mut b.state, b_blocks),
        #[cfg(target_arch = "aarch64")]
        PairKernel::ArmSha2 => super::sha_arm::compress_pair(&mut a.state, a_blocks, &mut b.state, b_blocks),
    }
    a.keep(a_tail);
    b.keep(b_tail);
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::hashing::sha256_hex;

    fn kernels() -> Vec<PairKernel> {
        #[cfg(target_arch = "x86_64")]
        if crate::hashing::sha_ni::available() {
            return vec![PairKernel::Sequential, PairKernel::ShaNi];
        }
        #[cfg(target_arch = "aarch64")]
        if crate::hashing::sha_arm::available() {
            return vec![PairKernel::Sequential, PairKernel::ArmSha2];
        }
        vec![PairKernel::Sequential]
    }

    #[test]
    fn known_digests_at_every_padding_length() {
        assert_eq!(
            Sha256Stream::default().finish_hex(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        let data: Vec<u8> = (0..300u32).map(|i| (i * 13) as u8).collect();
        for len in 0..data.len() {
            assert_eq!(Sha256Stream::with_prefix(&data[..len]).finish_hex(), sha256_hex(&data[..len]), "{len}");
        }
    }

    #[test]
    fn this_machine_interleaves_where_it_can() {
        // The reference machine and CI have SHA-NI. A release build there must use it.
        #[cfg(target_arch = "x86_64")]
        assert_eq!(
            crate::hashing::sha_ni::available(),
            std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|c| c.contains(" sha_ni")),
        );
        assert_eq!(PairKernel::detect(), PairKernel::Sequential, "debug builds hash sequentially");
    }

    proptest! {
        #[test]
        fn paired_updates_match_separate_digests(
            a_data in proptest::collection::vec(any::<u8>(), 0..3000),
            b_data in proptest::collection::vec(any::<u8>(), 0..3000),
            a_prefix in 0usize..130,
            b_prefix in 0usize..130,
            cuts in proptest::collection::vec(0usize..1200, 0..6),
        ) {
            for kernel in kernels() {
                let (mut a, mut b) = (Sha256Stream::default(), Sha256Stream::default());
                let (a_head, b_head) = (a_prefix.min(a_data.len()), b_prefix.min(b_data.len()));
                a.update(&a_data[..a_head]);
                b.update(&b_data[..b_head]);
                let (mut a_at, mut b_at) = (a_head, b_head);
                for &cut in cuts.iter().chain([&usize::MAX]) {
                    let a_to = a_at.saturating_add(cut).min(a_data.len());
                    let b_to = b_at.saturating_add(cut / 2).min(b_data.len());
                    let b_to = if cut == usize::MAX { b_data.len() } else { b_to };
                    update_both_with(kernel, &mut a, &a_data[a_at..a_to], &mut b, &b_data[b_at..b_to]);
                    (a_at, b_at) = (a_to, b_to);
                }
                prop_assert_eq!(a.finish_hex(), sha256_hex(&a_data), "{:?}", kernel);
                prop_assert_eq!(b.finish_hex(), sha256_hex(&b_data), "{:?}", kernel);
            }
        }
    }
}
