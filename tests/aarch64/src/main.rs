//! Checks the interleaved aarch64 kernel against `sha2`'s own compression, block for block.

#[path = "../../../src/hashing/pair.rs"]
mod pair;
#[path = "../../../src/hashing/sha_arm.rs"]
mod sha_arm;

use sha2::block_api::compress256;

/// Deterministic bytes (xorshift64), so a failure can be replayed.
fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn blocks(data: &[u8]) -> &[[u8; 64]] {
    data.as_chunks::<64>().0
}

fn main() {
    // Under `qemu-aarch64 -cpu max` the instructions are there; without them the kernel would not run and the
    // check would prove nothing.
    assert!(sha_arm::available(), "no SHA-2 instructions: run under qemu-aarch64 -cpu max");
    let mut cases = 0;
    for a_len in [0usize, 1, 2, 3, 7, 16, 33] {
        for b_len in [0usize, 1, 2, 5, 16, 40] {
            let (a_data, b_data) = (bytes(a_len as u64 * 31 + 7, a_len * 64), bytes(b_len as u64 * 17 + 3, b_len * 64));
            let start: [u32; 8] = std::array::from_fn(|i| (i as u32 + 1).wrapping_mul(0x9E37_79B9) ^ a_len as u32);
            let (mut a, mut b) = (start, start.map(|w| w.rotate_left(7)));
            let (mut want_a, mut want_b) = (a, b);
            sha_arm::compress_pair(&mut a, blocks(&a_data), &mut b, blocks(&b_data));
            compress256(&mut want_a, blocks(&a_data));
            compress256(&mut want_b, blocks(&b_data));
            assert_eq!((a, b), (want_a, want_b), "{a_len} and {b_len} blocks");
            cases += 1;
        }
    }
    println!("sha_arm::compress_pair matches sha2 in {cases} cases");
}
