//! Two SHA-256 compressions interleaved on one core with the Armv8 SHA-2 instructions.
//!
//! As with SHA-NI, one stream waits on the latency of each `sha256h`/`sha256h2` pair before the next four
//! rounds can start. A second, independent stream fills those cycles. Intel's ISA-L crypto library ships
//! aarch64 multi-buffer SHA-256 kernels of two to four interleaved streams for the same reason. This project
//! has no Arm machine to measure it on. Where an Arm machine is at hand, `sha256_rate PATH` and
//! `sha256_rate --pair PATH` print the one- and two-stream rates. That program lives in `bench/src/bin`, and
//! `bench/fix_bench.py` runs it. The tests check the kernel's results against `sha2` under `qemu-aarch64`
//! (`tests/aarch64`).

#![allow(unsafe_code)]

use super::pair::K;
use std::arch::aarch64::{
    uint32x4_t, vaddq_u32, vld1q_u8, vld1q_u32, vreinterpretq_u32_u8, vrev32q_u8, vsha256h2q_u32, vsha256hq_u32,
    vsha256su0q_u32, vsha256su1q_u32, vst1q_u32,
};

/// Whether this CPU has the instructions [`compress_pair`] needs.
pub fn available() -> bool {
    std::arch::is_aarch64_feature_detected!("sha2")
}

/// Compresses `a_blocks` into `a` and `b_blocks` into `b`. For as many blocks as both have, it runs four
/// rounds of one beside four rounds of the other. Without the SHA-2 instructions, or for the blocks only one
/// has, it hashes them one after the other.
pub fn compress_pair(a: &mut [u32; 8], a_blocks: &[[u8; 64]], b: &mut [u32; 8], b_blocks: &[[u8; 64]]) {
    super::pair::compress_pair_with(available(), compress_pair_sha2, (a, a_blocks), (b, b_blocks));
}

/// One stream's state: `(ABCD, EFGH)`, in the order the instructions take it.
type Lane = (uint32x4_t, uint32x4_t);

#[target_feature(enable = "neon,sha2")]
fn compress_pair_sha2(a: &mut [u32; 8], a_blocks: &[[u8; 64]], b: &mut [u32; 8], b_blocks: &[[u8; 64]]) {
    let mut lanes = [load_state(a), load_state(b)];
    for (block_a, block_b) in a_blocks.iter().zip(b_blocks) {
        let saved = lanes;
        let mut words = [load_words(block_a), load_words(block_b)];
        for group in 0..16 {
            for (lane, words) in lanes.iter_mut().zip(words.iter_mut()) {
                rounds4(lane, words[0], group);
                // The window of four groups slides by one, so every index stays a constant and the words stay
                // in registers.
                let next = if group < 12 { next_words(words) } else { words[0] };
                *words = [words[1], words[2], words[3], next];
            }
        }
        for (lane, saved) in lanes.iter_mut().zip(saved) {
            lane.0 = vaddq_u32(lane.0, saved.0);
            lane.1 = vaddq_u32(lane.1, saved.1);
        }
    }
    store_state(a, lanes[0]);
    store_state(b, lanes[1]);
}

#[target_feature(enable = "neon")]
fn load_state(state: &[u32; 8]) -> Lane {
    // SAFETY: both loads read four words inside `state`.
    unsafe { (vld1q_u32(state.as_ptr()), vld1q_u32(state.as_ptr().add(4))) }
}

#[target_feature(enable = "neon")]
fn store_state(state: &mut [u32; 8], (abcd, efgh): Lane) {
    // SAFETY: both stores write four words inside `state`.
    unsafe {
        vst1q_u32(state.as_mut_ptr(), abcd);
        vst1q_u32(state.as_mut_ptr().add(4), efgh);
    }
}

/// The block's sixteen big-endian message words, four per register.
#[target_feature(enable = "neon")]
fn load_words(block: &[u8; 64]) -> [uint32x4_t; 4] {
    // SAFETY: each load reads 16 bytes inside the 64-byte block; `vld1q_u8` has no alignment requirement.
    std::array::from_fn(|i| vreinterpretq_u32_u8(vrev32q_u8(unsafe { vld1q_u8(block.as_ptr().add(16 * i)) })))
}

/// The message words of group `g + 4` from those of groups `g..g + 4`.
#[target_feature(enable = "neon,sha2")]
fn next_words(&[w0, w1, w2, w3]: &[uint32x4_t; 4]) -> uint32x4_t {
    vsha256su1q_u32(vsha256su0q_u32(w0, w1), w2, w3)
}

/// Rounds `4g..4g+4`.
#[target_feature(enable = "neon,sha2")]
fn rounds4((abcd, efgh): &mut Lane, words: uint32x4_t, group: usize) {
    // SAFETY: `group` < 16, so the load reads four constants inside `K`.
    let constants = unsafe { vld1q_u32(K[4 * group..4 * group + 4].as_ptr()) };
    let sum = vaddq_u32(words, constants);
    let before = *abcd;
    *abcd = vsha256hq_u32(*abcd, *efgh, sum);
    *efgh = vsha256h2q_u32(*efgh, before, sum);
}
